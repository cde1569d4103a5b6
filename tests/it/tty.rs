//! Interactive use, driven through a real pseudo-terminal: an interactive
//! `bash` is the session leader of a pty of our own, and the tests type into
//! it the way a user would (Ctrl-C, Ctrl-Z, `fg`, `&`). They hold `run` to
//! docs/guarantees.md §7 (a Ctrl-C reaches CMD once, interactive use, job
//! control and the lease deadline).
//!
//! Synchronisation is always on something observable: text on the terminal
//! (`Shell::expect`), the terminal's foreground group, process states in
//! /proc, or keys in Redis. Every test has an overall deadline, and the
//! `Shell` guard kills every process of the pty's session when it is dropped,
//! so a failing test cannot leave a stopped job behind.

use crate::common::*;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shell's prompt; distinctive, so it is never confused with output.
const PROMPT: &str = "tty$ ";
/// The lock every test takes, and its key.
const NAME: &str = "t";
const KEY: &str = "distlock:{t}";
/// No test may take longer than this, whatever happens.
const TEST_LIMIT: Duration = Duration::from_secs(40);
/// The default limit for one expected piece of output.
const STEP: Duration = Duration::from_secs(10);

/// One line of /proc/PID/stat, the fields the tests look at.
#[derive(Debug, Clone)]
struct Proc {
    pid: i32,
    comm: String,
    state: char,
    ppid: i32,
    pgrp: i32,
    session: i32,
}

fn proc_stat(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat[open + 1..close].to_owned();
    let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    Some(Proc {
        pid,
        comm,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        pgrp: rest.get(2)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
    })
}

/// Every process whose session is `sid`.
fn session_procs(sid: i32) -> Vec<Proc> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(p) = proc_stat(pid).filter(|p| p.session == sid) {
            out.push(p);
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// Whether the process exists and is stopped (job control).
fn stopped(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|p| p.state == 'T')
}

/// An interactive bash in a pty of its own, and everything typed into it
/// and printed by it. Dropping it kills every process of the session.
struct Shell {
    master: OwnedFd,
    bash: Child,
    /// Everything read from the terminal so far.
    out: Vec<u8>,
    /// Where the next `expect` starts looking.
    pos: usize,
    /// The test's overall deadline.
    deadline: Instant,
    eof: bool,
    /// A scratch directory, also the shell's HOME and working directory.
    dir: tempfile::TempDir,
}

impl Shell {
    /// Starts `bash -i` on a new pty with a plain prompt, no line-editing
    /// escapes, `distlock` on PATH and DISTLOCK_REDIS_URL pointing at
    /// `server`; returns once the first prompt is shown.
    fn start(server: &RedisServer) -> Shell {
        let deadline = Instant::now() + TEST_LIMIT;
        let dir = tempfile::tempdir().unwrap();
        let inputrc = dir.path().join("inputrc");
        std::fs::write(&inputrc, "set enable-bracketed-paste off\n").unwrap();
        // Wide enough that readline never wraps or scrolls a command line.
        let (master, slave) = open_pty(500);
        let path = format!(
            "{}:{}",
            bin().parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let bash = {
            let mut cmd = Command::new("bash");
            cmd.args(["--norc", "--noprofile", "-i"])
                .env_clear()
                .env("PATH", path)
                .env("HOME", dir.path())
                .env("TERM", "dumb")
                .env("PS1", PROMPT)
                .env("INPUTRC", &inputrc)
                .env("HISTFILE", "/dev/null")
                .env("LC_ALL", "C")
                .env("DISTLOCK_REDIS_URL", server.url())
                .current_dir(dir.path())
                .stdin(Stdio::from(slave.try_clone().unwrap()))
                .stdout(Stdio::from(slave.try_clone().unwrap()))
                .stderr(Stdio::from(slave));
            // SAFETY: only async-signal-safe syscalls; errors are built
            // without allocating.
            unsafe {
                cmd.pre_exec(|| {
                    // A new session whose controlling terminal is the pty,
                    // with nothing blocked and Ctrl-C and Ctrl-\ at their
                    // default actions: a login shell's starting point. (A
                    // `cargo test … &` from a script starts with both
                    // ignored, which bash and distlock would pass on to
                    // CMD, as they should: see `bare_distlock`.)
                    let mut empty: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut empty);
                    libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
                    libc::signal(libc::SIGINT, libc::SIG_DFL);
                    libc::signal(libc::SIGQUIT, libc::SIG_DFL);
                    if libc::setsid() == -1 {
                        return Err(io::Error::last_os_error());
                    }
                    if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.spawn().expect("bash must be installed")
        };
        let mut sh = Shell {
            master,
            bash,
            out: Vec::new(),
            pos: 0,
            deadline,
            eof: false,
            dir,
        };
        sh.expect(PROMPT);
        sh
    }

    /// The shell's pid, which is also its session id and process group.
    fn pid(&self) -> i32 {
        self.bash.id() as i32
    }

    /// A path in the scratch directory.
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Types `text` (control characters included) into the terminal.
    fn send(&mut self, text: &str) {
        let mut buf = text.as_bytes();
        while !buf.is_empty() {
            // SAFETY: write(2) from a live buffer on an fd we own.
            let n = unsafe { libc::write(self.master.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                panic!("{}", self.diag(&format!("cannot write to the pty: {e}")));
            }
            buf = &buf[n as usize..];
        }
    }

    /// Reads what is available, waiting at most `limit` for something.
    fn read_some(&mut self, limit: Duration) {
        let mut pfd = libc::pollfd {
            fd: self.master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = limit.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one pollfd on the stack.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n <= 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        // SAFETY: read(2) into a local buffer.
        let n = unsafe { libc::read(self.master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            self.out.extend_from_slice(&buf[..n as usize]);
        } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            // EIO: every slave fd is closed, nobody is left on the terminal.
            self.eof = true;
        }
    }

    /// Waits until `find` recognises something in the output not yet
    /// consumed; `find` returns the end of the match and a value. The
    /// output up to that end is consumed.
    fn expect_with<T>(
        &mut self,
        what: &str,
        limit: Duration,
        find: impl Fn(&str) -> Option<(usize, T)>,
    ) -> T {
        let until = (Instant::now() + limit).min(self.deadline);
        loop {
            let text = String::from_utf8_lossy(&self.out[self.pos..]).into_owned();
            if let Some((end, value)) = find(&text) {
                // `end` counts bytes of the lossy text; output is ASCII here.
                self.pos += end.min(self.out.len() - self.pos);
                return value;
            }
            let now = Instant::now();
            if now >= until || self.eof {
                panic!("{}", self.diag(&format!("no {what} within {limit:?}")));
            }
            self.read_some(until - now);
        }
    }

    /// Waits for `pattern`; returns the output before it.
    fn expect(&mut self, pattern: &str) -> String {
        self.expect_within(pattern, STEP)
    }

    fn expect_within(&mut self, pattern: &str, limit: Duration) -> String {
        self.expect_with(&format!("{pattern:?}"), limit, |s| {
            s.find(pattern)
                .map(|i| (i + pattern.len(), s[..i].to_owned()))
        })
    }

    /// Waits for `prefix` followed by a decimal number and a line end (so a
    /// typed `rc=$?` is never mistaken for its result); returns the number.
    fn expect_number(&mut self, prefix: &str) -> i64 {
        self.expect_with(&format!("{prefix:?}<number>"), STEP, |s| {
            let mut from = 0;
            while let Some(i) = s[from..].find(prefix) {
                let start = from + i + prefix.len();
                let digits = s[start..].bytes().take_while(u8::is_ascii_digit).count();
                let after = s.as_bytes().get(start + digits);
                if digits > 0 && matches!(after, Some(b'\r' | b'\n')) {
                    return Some((start + digits, s[start..start + digits].parse().unwrap()));
                }
                from = start;
            }
            None
        })
    }

    /// Runs `echo rc=$?` at a prompt and returns the status it shows.
    fn last_status(&mut self) -> i64 {
        self.send("echo rc=$?\n");
        let rc = self.expect_number("rc=");
        self.expect(PROMPT);
        rc
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> i32 {
        // SAFETY: TIOCGPGRP on the master reports the slave's foreground
        // group (Linux).
        unsafe { libc::tcgetpgrp(self.master.as_raw_fd()) }
    }

    /// Polls until `cond` holds, or fails the test with `what`.
    fn wait_for(&self, what: &str, limit: Duration, cond: impl FnMut() -> bool) {
        let limit = limit.min(self.deadline.saturating_duration_since(Instant::now()));
        if !wait_until(limit, cond) {
            panic!("{}", self.diag(&format!("{what}: not within {limit:?}")));
        }
    }

    /// A failure message: what went wrong, the terminal's whole transcript
    /// (with a marker where `expect` had got to), the foreground group and
    /// every process of the session.
    fn diag(&self, msg: &str) -> String {
        let seen = String::from_utf8_lossy(&self.out[..self.pos]);
        let unseen = String::from_utf8_lossy(&self.out[self.pos..]);
        let mut s = format!(
            "{msg}\n--- terminal (consumed) ---\n{}\n--- terminal (not consumed) ---\n{}\n--- foreground group: {} ---\n",
            seen.escape_debug(),
            unseen.escape_debug(),
            self.foreground()
        );
        // SAFETY: TCGETS on the master reports the slave's modes (Linux).
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(self.master.as_raw_fd(), &mut t) == 0 {
                s += &format!(
                    "terminal modes: lflag {:#o} (ISIG {}, ICANON {}, ECHO {})\n",
                    t.c_lflag,
                    t.c_lflag & libc::ISIG != 0,
                    t.c_lflag & libc::ICANON != 0,
                    t.c_lflag & libc::ECHO != 0
                );
            }
        }
        for p in session_procs(self.pid()) {
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", p.pid)).unwrap_or_default();
            let sigs: Vec<&str> = status
                .lines()
                .filter(|l| {
                    ["SigPnd", "ShdPnd", "SigBlk", "SigIgn"]
                        .iter()
                        .any(|k| l.starts_with(k))
                })
                .collect();
            s += &format!(
                "pid {} ppid {} pgrp {} state {} {} [{}]\n",
                p.pid,
                p.ppid,
                p.pgrp,
                p.state,
                p.comm,
                sigs.join(" ")
            );
        }
        s
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        // Everything in the session: bash, distlock, its guardian and CMD,
        // whatever their process groups (jobs have their own).
        let sid = self.pid();
        wait_until(Duration::from_secs(2), || {
            let procs = session_procs(sid);
            for p in &procs {
                signal(p.pid, libc::SIGKILL);
            }
            procs.is_empty() || procs.iter().all(|p| p.state == 'Z')
        });
        let _ = self.bash.kill();
        let _ = self.bash.wait();
    }
}

/// Whether the lock's key exists in Redis.
fn held(server: &RedisServer) -> bool {
    server.cmd::<i64>(&["EXISTS", KEY]) == 1
}

/// Reads CMD's pid from the first line `pid=N` of a file CMD wrote.
fn pid_from_file(sh: &Shell, path: &std::path::Path) -> i32 {
    let line = wait_for_line(path, STEP)
        .unwrap_or_else(|| panic!("{}", sh.diag("CMD did not write its pid")));
    line.strip_prefix("pid=").unwrap().parse().unwrap()
}

/// Point 10: Ctrl-C typed at the terminal ends CMD, the lock is released and
/// the shell sees 130, as it would for CMD run on its own.
#[test]
fn ctrl_c_ends_cmd_and_releases_the_lock() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    sh.send(&format!(
        "distlock run {NAME} -- sh -c 'echo pid=$$; exec sleep 100'\n"
    ));
    let cmd = sh.expect_number("pid=") as i32;
    // Ready once the exec is done: dash itself can lose a SIGINT that
    // arrives while it forks or execs (it happens without distlock too).
    sh.wait_for("CMD did not get to sleep", STEP, || {
        proc_stat(cmd).is_some_and(|p| p.comm == "sleep")
    });
    assert!(
        held(&server),
        "{}",
        sh.diag("the lock is not held while CMD runs")
    );
    let token = server.get("distlock:{t}:fence");
    assert!(token.is_some());
    assert_eq!(
        sh.foreground(),
        cmd,
        "{}",
        sh.diag("CMD's group should be the terminal's foreground group")
    );

    sh.send("\x03");
    sh.expect(PROMPT);
    assert_eq!(sh.last_status(), 130, "{}", sh.diag("wrong status"));
    assert!(!held(&server), "{}", sh.diag("the lock was not released"));
    assert_eq!(server.get("distlock:{t}:fence"), token);
    assert!(!alive(cmd), "{}", sh.diag("CMD survived Ctrl-C"));
    assert_eq!(
        sh.foreground(),
        sh.pid(),
        "{}",
        sh.diag("bash lost the terminal")
    );
}

/// Point 8: a CMD that handles SIGINT (a REPL) gets one SIGINT per Ctrl-C,
/// not one from the terminal and another forwarded by distlock, and keeps
/// its lease while it carries on.
///
/// Two SIGINTs sent microseconds apart can merge in the kernel, so counting
/// them cannot prove there was one; what makes a second one impossible is
/// the model: the terminal signals only its foreground group, which is
/// CMD's, and distlock is not in it. The test checks that, and counts the
/// deliveries too (Python's wakeup fd gets a byte per delivery, even when
/// its handler runs once for several).
#[test]
fn ctrl_c_reaches_a_repl_once() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    let script = sh.path("repl.py");
    std::fs::write(
        &script,
        "import os, signal, sys\n\
         r, w = os.pipe()\n\
         os.set_blocking(r, False)\n\
         os.set_blocking(w, False)\n\
         signal.set_wakeup_fd(w, warn_on_full_buffer=False)\n\
         signal.signal(signal.SIGINT, lambda sig, frame: os.write(1, b'sigint\\n'))\n\
         print('pid=%d' % os.getpid(), flush=True)\n\
         print('repl-ready', flush=True)\n\
         while True:\n\
         \x20   line = sys.stdin.readline()\n\
         \x20   if line.strip() == 'quit' or not line:\n\
         \x20       try:\n\
         \x20           n = len(os.read(r, 100))\n\
         \x20       except BlockingIOError:\n\
         \x20           n = 0\n\
         \x20       print('deliveries=%d' % n, flush=True)\n\
         \x20       sys.exit(7)\n",
    )
    .unwrap();
    sh.send(&format!(
        "distlock run {NAME} -- python3 {}\n",
        script.display()
    ));
    let cmd = sh.expect_number("pid=") as i32;
    sh.expect("repl-ready\r\n");
    let distlock = proc_stat(cmd).unwrap().ppid;
    let fg = sh.foreground();
    assert_eq!(
        fg,
        cmd,
        "{}",
        sh.diag("CMD's group is not the foreground group")
    );
    for p in session_procs(sh.pid()) {
        assert!(
            p.pgrp != fg || p.pid == cmd,
            "{}",
            sh.diag(&format!(
                "{} ({}) would get the terminal's SIGINT too",
                p.pid, p.comm
            ))
        );
    }

    sh.send("\x03");
    sh.expect("sigint\r\n");
    // A second SIGINT forwarded by distlock would have been sent as soon as
    // distlock saw the first, long before this line is typed.
    sh.send("quit\n");
    let deliveries = sh.expect_number("deliveries=");
    sh.expect(PROMPT);
    assert_eq!(
        deliveries,
        1,
        "{}",
        sh.diag("one Ctrl-C reached CMD more than once")
    );
    assert_eq!(
        sh.last_status(),
        7,
        "{}",
        sh.diag("CMD's own status is lost")
    );
    assert!(!held(&server), "{}", sh.diag("the lock was not released"));
    assert!(!alive(distlock));
}

/// Point 10: a CMD that reads the terminal can read it.
#[test]
fn cmd_reads_the_terminal() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    sh.send(&format!(
        "distlock run {NAME} -- sh -c 'echo rea\"\"dy; read line; echo \"got:$line\"'\n"
    ));
    sh.expect("ready\r\n");
    sh.send("hello\n");
    sh.expect("got:hello\r\n");
    sh.expect(PROMPT);
    assert_eq!(sh.last_status(), 0, "{}", sh.diag("wrong status"));
    assert!(!held(&server), "{}", sh.diag("the lock was not released"));
}

/// Point 11: Ctrl-Z stops CMD and gives the shell its prompt back while the
/// lease is still good; `fg` well before the deadline continues CMD with
/// the terminal, and it can read it again.
#[test]
fn ctrl_z_then_fg_before_the_deadline_continues_cmd() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    sh.send(&format!(
        "distlock run {NAME} --ttl 2s --renew-every 200ms -- \
         sh -c 'echo pid=$$; while read l; do echo \"got:$l\"; done'\n"
    ));
    let cmd = sh.expect_number("pid=") as i32;
    sh.send("one\n");
    sh.expect("got:one\r\n");
    let owner = server.get(KEY).expect("the lock is held while CMD runs");
    let distlock = proc_stat(cmd).unwrap().ppid;

    let stopped_at = Instant::now();
    sh.send("\x1a");
    sh.expect("Stopped");
    sh.expect(PROMPT);
    assert!(stopped(cmd), "{}", sh.diag("CMD is not stopped"));
    assert!(stopped(distlock), "{}", sh.diag("distlock is not stopped"));
    assert_eq!(
        sh.foreground(),
        sh.pid(),
        "{}",
        sh.diag("bash has no terminal")
    );
    assert_eq!(
        server.get(KEY).as_deref(),
        Some(owner.as_str()),
        "{}",
        sh.diag("the lease was let go while stopped, before its deadline")
    );

    sh.send("fg\n");
    // The soft deadline is 2s - 500ms grace - 25ms margin after the last
    // renewal (at most 200ms before Ctrl-Z); fg must come well before it
    // for this test to mean anything.
    let waited = stopped_at.elapsed();
    assert!(
        waited < Duration::from_millis(1000),
        "the machine is too slow for this test: fg came {waited:?} after Ctrl-Z"
    );
    sh.wait_for(
        "CMD's group did not get the terminal back after fg",
        STEP,
        || sh.foreground() == cmd,
    );
    assert!(!stopped(cmd), "{}", sh.diag("CMD was not continued"));
    sh.send("two\n");
    sh.expect("got:two\r\n");
    assert_eq!(
        server.get(KEY).as_deref(),
        Some(owner.as_str()),
        "{}",
        sh.diag("the lease was lost across a short stop")
    );

    // Ctrl-D: CMD's read sees end of file and CMD exits 0.
    sh.send("\x04");
    sh.expect(PROMPT);
    assert_eq!(sh.last_status(), 0, "{}", sh.diag("wrong status"));
    assert!(!held(&server), "{}", sh.diag("the lock was not released"));
    assert!(!alive(cmd) && !alive(distlock));
}

/// Point 11: after a Ctrl-Z that outlasts the lease, `fg` must not let CMD
/// run again: distlock kills it while it is still stopped and exits 124.
/// (A SIGCONT followed by SIGKILL a few microseconds later can slip past
/// the signal log below; anything longer cannot.)
#[test]
fn ctrl_z_then_fg_after_the_deadline_kills_cmd_unrun() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    let script = sh.path("ticker.py");
    let log = sh.path("ticks.log");
    let sigs = sh.path("signals.log");
    // Appends a tick every 20ms. It handles SIGCONT and SIGTERM (as a CMD
    // that cleans up would), and Python's wakeup fd appends a byte to
    // signals.log from the C-level handler of each: the very first thing
    // CMD does if it runs again, before any Python code.
    std::fs::write(
        &script,
        "import os, signal, sys, time\n\
         log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)\n\
         sigs = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK)\n\
         signal.set_wakeup_fd(sigs, warn_on_full_buffer=False)\n\
         signal.signal(signal.SIGCONT, lambda *a: os.write(log, b'cont\\n'))\n\
         signal.signal(signal.SIGTERM, lambda *a: os.write(log, b'term\\n'))\n\
         os.write(log, b'pid=%d\\n' % os.getpid())\n\
         print('ticking', flush=True)\n\
         while True:\n\
         \x20   os.write(log, b'tick\\n')\n\
         \x20   time.sleep(0.02)\n",
    )
    .unwrap();
    sh.send(&format!(
        "distlock run {NAME} --ttl 1s -- python3 {} {} {}\n",
        script.display(),
        log.display(),
        sigs.display()
    ));
    sh.expect("ticking\r\n");
    let cmd = pid_from_file(&sh, &log);
    let distlock = proc_stat(cmd).unwrap().ppid;
    assert!(held(&server));

    sh.send("\x1a");
    sh.expect("Stopped");
    sh.expect(PROMPT);
    assert!(stopped(cmd), "{}", sh.diag("CMD is not stopped"));
    assert!(stopped(distlock), "{}", sh.diag("distlock is not stopped"));
    // Not renewed while stopped: the key expires in Redis. distlock's own
    // deadline (ttl - grace - margin after the last renewal was sent) is
    // earlier than that expiry, so it has passed too.
    sh.wait_for("the lease did not expire while stopped", STEP, || {
        !held(&server)
    });
    let before = std::fs::read_to_string(&log).unwrap();

    sh.send("fg\n");
    sh.expect(PROMPT);
    assert_eq!(sh.last_status(), 124, "{}", sh.diag("wrong status"));
    let after = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        before,
        after,
        "{}",
        sh.diag("CMD ran again after its lease had expired")
    );
    assert_eq!(
        std::fs::read(&sigs).unwrap(),
        b"",
        "{}",
        sh.diag("CMD handled a signal (SIGCONT 18, SIGTERM 15) after its lease had expired")
    );
    assert!(!alive(cmd), "{}", sh.diag("CMD is still there"));
    assert!(!alive(distlock), "{}", sh.diag("distlock is still there"));
    assert!(!held(&server));
}

/// A background distlock neither hangs (SIGTTOU) nor takes the terminal
/// from the shell, and releases the lock when CMD is done.
#[test]
fn background_run_finishes_and_releases() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    let gate = sh.path("gate");
    sh.send(&format!(
        "distlock run {NAME} -- sh -c 'echo bg\"\"start; while [ ! -e {} ]; do sleep 0.02; done; echo bg\"\"done' &\n",
        gate.display()
    ));
    sh.expect("bgstart\r\n");
    assert!(held(&server));
    // The shell keeps the terminal and answers while the job runs.
    assert_eq!(
        sh.foreground(),
        sh.pid(),
        "{}",
        sh.diag("the job took the terminal")
    );
    sh.send("echo ali\"\"ve\n");
    sh.expect("alive\r\n");

    std::fs::write(&gate, "").unwrap();
    sh.expect("bgdone\r\n");
    sh.wait_for("the lock was not released", STEP, || !held(&server));
    assert_eq!(
        sh.foreground(),
        sh.pid(),
        "{}",
        sh.diag("the job took the terminal")
    );
    sh.send("wait $!; echo rc=$?\n");
    let rc = sh.expect_number("rc=");
    assert_eq!(rc, 0, "{}", sh.diag("wrong status"));
    // Nothing of the job is left, stopped or otherwise.
    sh.wait_for("processes of the job are left", STEP, || {
        session_procs(sh.pid()).iter().all(|p| p.pid == sh.pid())
    });
}

/// Point 11 with SIGTTIN: a background CMD that reads the terminal is
/// stopped by it, distlock stops with it, and `fg` hands CMD the terminal
/// so the read succeeds.
#[test]
fn background_reader_stops_then_fg_gives_it_the_terminal() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    let pidfile = sh.path("cmd.pid");
    // Report job changes at once, not at the next prompt: `fg` must not
    // be typed before bash knows the job is stopped (a `fg` of a job bash
    // still thinks is running sends no SIGCONT).
    sh.send("set -b\n");
    sh.expect(PROMPT);
    sh.send(&format!(
        "distlock run {NAME} -- sh -c 'echo pid=$$ > {}; read l; echo \"got:$l\"' &\n",
        pidfile.display()
    ));
    let cmd = pid_from_file(&sh, &pidfile);
    sh.wait_for("CMD was not stopped by its background read", STEP, || {
        stopped(cmd)
    });
    let distlock = proc_stat(cmd).unwrap().ppid;
    sh.wait_for("distlock did not stop with CMD", STEP, || stopped(distlock));
    sh.expect("Stopped");
    assert!(held(&server));

    sh.send("fg\n");
    sh.wait_for("CMD's group did not get the terminal on fg", STEP, || {
        sh.foreground() == cmd
    });
    sh.send("hi\n");
    sh.expect("got:hi\r\n");
    sh.expect(PROMPT);
    assert_eq!(sh.last_status(), 0, "{}", sh.diag("wrong status"));
    assert!(!held(&server), "{}", sh.diag("the lock was not released"));
}

/// Points 10 and 11: `fg` of a job that is already running in the
/// background sends no SIGCONT (bash only gives the job's group the
/// terminal), so distlock gets no signal; CMD, still in a background
/// group, is then stopped by SIGTTIN when it reads. distlock, now the
/// foreground job, must pass the terminal on instead of stopping: for the
/// user it is a foreground job that reads the terminal.
#[test]
fn fg_of_a_running_background_job_lets_cmd_read_the_terminal() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    let pidfile = sh.path("cmd.pid");
    let gate = sh.path("gate");
    sh.send("set -b\n");
    sh.expect(PROMPT);
    sh.send(&format!(
        "distlock run {NAME} -- sh -c 'echo pid=$$ > {}; while [ ! -e {} ]; do sleep 0.02; done; read l; echo \"got:$l\"' &\n",
        pidfile.display(),
        gate.display()
    ));
    let cmd = pid_from_file(&sh, &pidfile);
    let distlock = proc_stat(cmd).unwrap().ppid;
    sh.expect(PROMPT);

    sh.send("fg\n");
    sh.wait_for("bash did not give the job the terminal", STEP, || {
        sh.foreground() == distlock
    });
    std::fs::write(&gate, "").unwrap();
    sh.wait_for("CMD's group did not get the terminal", STEP, || {
        sh.foreground() == cmd
    });
    sh.send("hi\n");
    sh.expect("got:hi\r\n");
    sh.expect(PROMPT);
    assert_eq!(sh.last_status(), 0, "{}", sh.diag("wrong status"));
    assert!(!held(&server), "{}", sh.diag("the lock was not released"));
}

/// Point 11: a SIGTSTP sent to distlock alone (not typed at the terminal)
/// stops CMD the same way, the shell gets its prompt back, and `fg`
/// continues CMD with the terminal.
#[test]
fn sigtstp_to_distlock_alone_stops_the_job() {
    let server = RedisServer::start();
    let mut sh = Shell::start(&server);
    sh.send(&format!(
        "distlock run {NAME} -- sh -c 'echo pid=$$; while read l; do echo \"got:$l\"; done'\n"
    ));
    let cmd = sh.expect_number("pid=") as i32;
    let distlock = proc_stat(cmd).unwrap().ppid;
    sh.send("one\n");
    sh.expect("got:one\r\n");

    signal(distlock, libc::SIGTSTP);
    sh.expect("Stopped");
    sh.expect(PROMPT);
    assert!(stopped(cmd), "{}", sh.diag("CMD is not stopped"));
    assert!(stopped(distlock), "{}", sh.diag("distlock is not stopped"));
    assert!(held(&server));

    sh.send("fg\n");
    sh.wait_for(
        "CMD's group did not get the terminal back after fg",
        STEP,
        || sh.foreground() == cmd,
    );
    sh.send("two\n");
    sh.expect("got:two\r\n");
    sh.send("\x04");
    sh.expect(PROMPT);
    assert_eq!(sh.last_status(), 0, "{}", sh.diag("wrong status"));
    assert!(!held(&server), "{}", sh.diag("the lock was not released"));
}
