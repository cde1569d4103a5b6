//! Supervision of CMD by `distlock run`: what happens to CMD, its process
//! group and the lease when the lease is lost, when Redis hangs, when
//! distlock is signalled, stopped or killed (docs/guarantees.md
//! §2, §4 and §7).
//!
//! Every CMD announces itself by writing pids (and markers) to files in its
//! working directory; the tests wait for those files instead of sleeping.
//!
//! Time bounds are checked so that a correct distlock cannot fail them, and
//! the slack is only what the test cannot know: an upper bound ("killed no
//! later than R + d") is measured from an instant taken no earlier than R,
//! a lower bound from one taken no later than R. Observing an event by
//! polling is late, which loosens lower bounds but would tighten upper
//! ones, so the upper bounds poll every millisecond from a real-time thread
//! and count a pending signal as received (see `signalled`).

use crate::common::*;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `sh -c SCRIPT` as a CMD.
fn sh(script: &str) -> Vec<&str> {
    vec!["sh", "-c", script]
}

/// How the test starts distlock, as its caller.
#[derive(Clone, Copy, Default)]
struct Caller {
    /// Signals ignored when distlock starts (all others default).
    ignore: &'static [i32],
    /// Signals blocked when distlock starts (exactly these).
    block: &'static [i32],
}

/// A redis-server for one test, started after the test's thread has moved
/// to a real-time priority (where allowed, e.g. as root), which the server,
/// distlock and CMD inherit.
///
/// These tests check deadlines to a few milliseconds with sub-second
/// leases. The logic under test is the same at any priority, but this way a
/// loaded machine (other test suites running alongside) cannot starve
/// Redis, distlock or the test's own observations and fail a correct
/// distlock. Every process here mostly sleeps, so nothing is starved in
/// turn.
fn server() -> RedisServer {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain syscall on the calling thread; failure is harmless.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    RedisServer::start()
}

/// Sets the caller's state for distlock in the child before exec: every
/// signal disposition default except `ignore`, exactly `block` blocked, and
/// no core files (a forwarded SIGQUIT must not litter the disk). The test
/// harness's own state (e.g. running under nohup) then cannot change what
/// is being tested.
fn set_caller(cmd: &mut Command, caller: Caller) {
    let Caller { ignore, block } = caller;
    // SAFETY: only async-signal-safe libc calls on values that need no
    // allocation.
    unsafe {
        cmd.pre_exec(move || {
            for sig in 1..65 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    // glibc refuses its two internal signals; that is fine.
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            for &sig in ignore {
                libc::signal(sig, libc::SIG_IGN);
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in block {
                libc::sigaddset(&mut set, sig);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            Ok(())
        });
    }
}

/// A running `distlock run`, in a directory of its own (CMD's working
/// directory), with stdout and stderr in files there. Dropping it SIGKILLs
/// distlock if it is still running, so a failed test leaves nothing behind
/// (the guardian then kills CMD's group).
struct Job {
    child: Child,
    dir: tempfile::TempDir,
}

impl Job {
    /// Starts `distlock run NAME OPTS -- CMD` with a clean signal state.
    fn start(server: &RedisServer, name: &str, opts: &[&str], cmd: &[&str]) -> Job {
        Job::start_as(Caller::default(), server, name, opts, cmd)
    }

    /// Like `start`, with the caller's state set up as `caller` says.
    fn start_as(
        caller: Caller,
        server: &RedisServer,
        name: &str,
        opts: &[&str],
        cmd: &[&str],
    ) -> Job {
        Job::start_via(&[], caller, server, name, opts, cmd)
    }

    /// Like `start_as`, with distlock exec'd by `wrapper` (a program and
    /// its first arguments, e.g. `nohup`; empty for none), so a real tool
    /// sets up what distlock inherits.
    fn start_via(
        wrapper: &[&str],
        caller: Caller,
        server: &RedisServer,
        name: &str,
        opts: &[&str],
        cmd: &[&str],
    ) -> Job {
        let dir = tempfile::tempdir().unwrap();
        let mut c = distlock(server);
        if let Some((program, args)) = wrapper.split_first() {
            let mut w = Command::new(program);
            w.args(args).arg(c.get_program());
            for (k, v) in c.get_envs() {
                match v {
                    Some(v) => w.env(k, v),
                    None => w.env_remove(k),
                };
            }
            c = w;
        }
        c.arg("run")
            .arg(name)
            .args(opts)
            .arg("--")
            .args(cmd)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
        set_caller(&mut c, caller);
        let child = c.spawn().unwrap();
        Job { child, dir }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn exists(&self, file: &str) -> bool {
        self.path(file).exists()
    }

    /// The content of a file CMD wrote, trimmed ("" if absent).
    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path(file))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// Waits for CMD to write `n` pids on the first line of `file`.
    fn pids(&self, file: &str, n: usize) -> Vec<i32> {
        let line = wait_for_line(&self.path(file), LIMIT).unwrap_or_else(|| {
            panic!(
                "CMD never wrote {file}; distlock's stderr: {}",
                self.read("stderr")
            )
        });
        let pids: Vec<i32> = line
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(pids.len(), n, "{file}: {line:?}");
        pids
    }

    /// Waits for distlock to exit (at most LIMIT).
    fn wait(&mut self) -> ExitStatus {
        wait_with_timeout(&mut self.child, LIMIT)
    }

    /// distlock's exit code, with its stderr in the failure message.
    fn assert_code(&self, status: ExitStatus, code: i32) {
        assert_eq!(
            status.code(),
            Some(code),
            "{status:?}; distlock's stderr: {}",
            self.read("stderr")
        );
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Shell code that starts a background `sleep 100` that ignores SIGTERM
/// and returns once the sleep's pid is in the file `gc` (so the ignore is
/// already in place: a TERM sent to the group right after cannot race it).
const TERM_PROOF_CHILD: &str = "sh -c 'trap \"\" TERM; echo $$ > gc; exec sleep 100' & \
     while [ ! -s gc ]; do sleep 0.01; done";

/// The scheduler state letter of `pid` (`R`, `S`, `T`, `Z`, …).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// A hex signal set field of /proc/PID/status (`SigBlk`, `SigIgn`, …).
fn sig_field(status: &str, field: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {status:?}"));
    u64::from_str_radix(line[field.len() + 1..].trim(), 16).unwrap()
}

/// SigIgn without glibc's two internal signals (32 and 33): no program
/// can set them through libc, and some test environments start the test
/// binary with them ignored, which nothing in between can undo.
fn sig_ign(status: &str) -> u64 {
    sig_field(status, "SigIgn") & !(bit(32) | bit(33))
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

/// Whether `pid` has got `sig` (or SIGKILL): gone, a zombie, or with the
/// signal pending. A pending signal counts because what the contract bounds
/// is when CMD *gets* the signal; the victim may be blocking it for a moment
/// or waiting for a CPU to act on it. (The kernel also queues SIGKILL on a
/// process that a fatal signal is about to kill.)
fn signalled(pid: i32, sig: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let pending = sig_field(&status, "SigPnd") | sig_field(&status, "ShdPnd");
    !alive(pid) || pending & (bit(sig) | bit(libc::SIGKILL)) != 0
}

/// Polls every millisecond from another thread until each `(pid, sig)`
/// is `signalled`, and returns the first instant each was seen so. An
/// observation is never earlier than the real event, so an upper bound
/// checked on it is safe.
/// (The thread inherits the test thread's real-time priority, see
/// `server`, so its observations are not late by whole time slices.)
fn watch_signals(targets: Vec<(i32, i32)>) -> JoinHandle<Vec<Instant>> {
    std::thread::spawn(move || {
        let mut seen: Vec<Option<Instant>> = vec![None; targets.len()];
        let give_up = Instant::now() + LIMIT;
        while seen.iter().any(Option::is_none) && Instant::now() < give_up {
            for (s, &(pid, sig)) in seen.iter_mut().zip(&targets) {
                if s.is_none() && signalled(pid, sig) {
                    *s = Some(Instant::now());
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        targets
            .iter()
            .zip(seen)
            .map(|((p, _), s)| {
                s.unwrap_or_else(|| panic!("pid {p} was not killed within {LIMIT:?}"))
            })
            .collect()
    })
}

// ---------------------------------------------------------------------
// Point 5: the lease is gone ("not owner")
// ---------------------------------------------------------------------

#[test]
fn deleting_the_lease_kills_cmd_and_its_grandchild_and_exits_124() {
    let server = server();
    let mut job = Job::start(
        &server,
        "lost",
        &["--ttl", "10s", "--renew-every", "100ms"],
        &sh("sleep 100 & echo $$ $! > pids; wait"),
    );
    let pids = job.pids("pids", 2);
    assert!(server.get(&key("lost")).is_some());
    let token = server.get(&(key("lost") + ":fence"));

    let _: i64 = server.cmd(&["DEL", &key("lost")]);
    let status = job.wait();

    job.assert_code(status, 124);
    assert!(!alive(pids[0]), "CMD {} outlived distlock", pids[0]);
    assert!(!alive(pids[1]), "grandchild {} outlived distlock", pids[1]);
    assert_eq!(server.get(&key("lost")), None, "the lease was recreated");
    assert_eq!(
        server.get(&(key("lost") + ":fence")),
        token,
        "one acquisition"
    );
}

#[test]
fn kill_signal_int_reaches_cmd_and_the_exit_is_124_even_though_cmd_exits_0() {
    let server = server();
    let mut job = Job::start(
        &server,
        "int",
        &[
            "--ttl",
            "10s",
            "--renew-every",
            "100ms",
            "--kill-signal",
            "INT",
        ],
        &sh("trap 'echo INT > marker; exit 0' INT; echo $$ > pid; while :; do sleep 0.05; done"),
    );
    let pid = job.pids("pid", 1)[0];

    let _: i64 = server.cmd(&["DEL", &key("int")]);
    let status = job.wait();

    job.assert_code(status, 124);
    assert_eq!(job.read("marker"), "INT", "CMD did not get SIGINT first");
    assert!(!alive(pid));
}

#[test]
fn cmd_that_survives_the_kill_signal_is_sigkilled_after_the_grace_and_not_before() {
    let server = server();
    let grace = Duration::from_millis(500);
    let renew = Duration::from_millis(50);
    let mut job = Job::start(
        &server,
        "grace",
        &[
            "--ttl",
            "10s",
            "--renew-every",
            "50ms",
            "--kill-grace",
            "500ms",
        ],
        // The trap outlives TERM (only the current `sleep` dies of it).
        &sh("trap 'echo TERM >> marker' TERM; echo $$ > pid; while :; do sleep 0.05; done"),
    );
    let pid = job.pids("pid", 1)[0];

    // The loss cannot be noticed before the DEL is sent, so a correct
    // distlock exits at least a grace after `deleted`; the check is blind
    // only to a SIGKILL that comes early by less than the detection delay
    // (one renewal period, 50ms). The upper bound allows for that delay.
    let deleted = Instant::now();
    let _: i64 = server.cmd(&["DEL", &key("grace")]);
    let status = job.wait();
    let took = deleted.elapsed();

    job.assert_code(status, 124);
    assert!(
        job.read("marker").starts_with("TERM"),
        "CMD never got the kill signal"
    );
    assert!(!alive(pid), "CMD survived SIGKILL");
    assert!(
        took >= grace,
        "SIGKILL came {took:?} after the loss, before the grace of {grace:?}"
    );
    assert!(
        took < grace + renew + Duration::from_millis(1500),
        "distlock took {took:?} to stop CMD"
    );
}

// ---------------------------------------------------------------------
// Point 6: renewals that cannot be confirmed
// ---------------------------------------------------------------------

#[test]
fn paused_redis_gets_cmd_and_grandchild_killed_before_the_lease_can_expire() {
    let server = server();
    let ttl = Duration::from_secs(1);
    let mut job = Job::start(
        &server,
        "paused",
        &["--ttl", "1s"],
        // The grandchild ignores TERM (before its pid is announced), so
        // only the SIGKILL deadline gets it.
        &sh(&format!(
            "{TERM_PROOF_CHILD}; echo $$ $(cat gc) > pids; wait"
        )),
    );
    let pids = job.pids("pids", 2);
    // CMD must get the kill signal (TERM) by one deadline, its TERM-proof
    // child SIGKILL by the other.
    let deaths = watch_signals(vec![(pids[0], libc::SIGTERM), (pids[1], libc::SIGKILL)]);

    // Pause right after a renewal (the PTTL going up), the case where the
    // lease has the most time left and the deadlines are latest.
    next_renewal(&server, "paused");

    // Two instants around the pause, each used on its safe side:
    // - `stopped` is taken once the server is seen stopped, so every
    //   renewal it confirmed was sent before it: t0 <= stopped, and the
    //   contract's deadlines are at most `stopped` + ttl - (grace) - margin.
    // - `before` is taken before the pause, and renewals were being
    //   confirmed until then, so t0 >= before - renew (roughly), and no kill
    //   is due before `before` - renew + ttl - grace - margin (~400ms).
    let before = Instant::now();
    server.pause();
    assert!(wait_until(LIMIT, || state(server.pid() as i32) == Some('T')));
    let stopped = Instant::now();
    let status = job.wait();
    server.resume();
    let deaths = deaths.join().unwrap();

    job.assert_code(status, 124);
    let grace = ttl / 4;
    let labels = [
        ("CMD got SIGTERM", ttl - grace),
        ("its TERM-proof child got SIGKILL", ttl),
    ];
    for ((&pid, died), (what, deadline)) in pids.iter().zip(&deaths).zip(labels) {
        let late = died.saturating_duration_since(stopped);
        assert!(
            late < deadline,
            "{what} ({pid}) {late:?} after Redis stopped answering \
             (deadline: last renewal + {deadline:?} - margin)"
        );
        let early = died.duration_since(before);
        assert!(
            early > ttl / 4,
            "{what} ({pid}) {early:?} after the pause, long before any deadline"
        );
    }
}

// ---------------------------------------------------------------------
// Point 9: distlock dies
// ---------------------------------------------------------------------

#[test]
fn sigkill_of_distlock_kills_cmd_and_its_grandchild() {
    let server = server();
    let mut job = Job::start(
        &server,
        "orphan",
        &["--ttl", "5s"],
        &sh("sleep 100 & echo $$ $! > pids; wait"),
    );
    let pids = job.pids("pids", 2);

    signal(job.pid(), libc::SIGKILL);
    let status = job.wait();

    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(
        wait_until(Duration::from_secs(2), || !alive(pids[0])),
        "CMD {} survived distlock's death (PR_SET_PDEATHSIG)",
        pids[0]
    );
    assert!(
        wait_until(Duration::from_secs(2), || !alive(pids[1])),
        "grandchild {} survived distlock's death (guardian)",
        pids[1]
    );
}

/// The children of `pid` whose command name is `comm`.
fn children_named(pid: i32, comm: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] == comm && parent_of(child) == pid {
            out.push(child);
        }
    }
    out
}

#[test]
fn sigkill_of_distlock_kills_cmd_by_pdeathsig_even_without_the_guardian() {
    let server = server();
    let mut job = Job::start(
        &server,
        "pdeath",
        &["--ttl", "5s"],
        &sh("echo $$ > pid; while :; do sleep 0.05; done"),
    );
    let pid = job.pids("pid", 1)[0];
    // The guardian is forked right after CMD and names itself then: CMD
    // may well have written its pid first.
    let mut guards = Vec::new();
    let found = wait_until(LIMIT, || {
        guards = children_named(job.pid(), "dl-guard");
        guards.len() == 1
    });
    assert!(found, "guardian processes: {guards:?}");

    // Take the second mechanism away, so only PR_SET_PDEATHSIG is left.
    signal(guards[0], libc::SIGKILL);
    assert!(wait_until(LIMIT, || !alive(guards[0])));
    signal(job.pid(), libc::SIGKILL);
    job.wait();

    assert!(
        wait_until(Duration::from_secs(2), || !alive(pid)),
        "CMD {pid} survived distlock's death without the guardian"
    );
}

/// A `run --wait` forks its guardian while it waits (at the hand-off the
/// fork would compete with CMD's start for the CPU), and that same
/// guardian guards CMD once it runs: distlock's death still takes CMD's
/// background child with it, which only the guardian reaches.
#[test]
fn a_waiter_forks_its_guardian_while_it_waits_and_that_guardian_guards_cmd() {
    let server = server();
    let mut holder = holder::Holder::start(&server.url(), &["run", "relay"]);
    let mut job = Job::start(
        &server,
        "relay",
        &["--ttl", "5s", "--wait", "30s"],
        &sh("sleep 100 & echo $$ $! > pids; wait"),
    );
    let mut standby = Vec::new();
    assert!(
        wait_until(LIMIT, || {
            standby = children_named(job.pid(), "dl-guard");
            standby.len() == 1
        }),
        "no guardian while waiting: {standby:?}"
    );
    assert!(
        !job.path("pids").exists(),
        "CMD ran while the lock was held"
    );

    assert!(holder.finish().success());
    let pids = job.pids("pids", 2);
    let _reap = Reap(pids.clone());
    assert_eq!(
        children_named(job.pid(), "dl-guard"),
        standby,
        "CMD is guarded by the guardian forked while waiting, and by no other"
    );
    signal(job.pid(), libc::SIGKILL);
    job.wait();
    assert!(
        wait_until(Duration::from_secs(2), || !alive(pids[1])),
        "CMD's background child {} survived distlock's death: the guardian \
         forked while waiting was never given CMD's group",
        pids[1]
    );
}

/// distlock reaps its guardian before it exits: its caller gets back no
/// process of distlock's, not even a zombie, and the guardian's CPU time
/// counts in the caller's `RUSAGE_CHILDREN` like CMD's. The caller here is
/// a subreaper, to which an unreaped guardian would be reparented; that
/// runs in a child test process, whose `waitpid(-1)` cannot take another
/// test's child.
#[test]
fn distlock_reaps_its_guardian_and_hands_its_caller_no_child() {
    let server = server();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "supervise::subreaper_caller",
            "--ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(SUBREAPER_URL, server.url())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where `subreaper_caller` finds the server; unset, it checks nothing.
const SUBREAPER_URL: &str = "DISTLOCK_TEST_SUBREAPER_URL";

#[test]
#[ignore = "run alone, in a child process, by distlock_reaps_its_guardian_and_hands_its_caller_no_child"]
fn subreaper_caller() {
    let Ok(url) = std::env::var(SUBREAPER_URL) else {
        return;
    };
    // distlock reaps through a pidfd (Linux 5.4; a seccomp profile may
    // refuse it); without one it leaves the guardian as it always did.
    // SAFETY: plain syscalls on this process; the descriptor is closed.
    let pidfds = unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0);
        fd >= 0 && libc::close(fd as i32) == 0
    };
    if !pidfds {
        eprintln!("skipped: no pidfd_open here");
        return;
    }
    // SAFETY: plain prctl on this (child test) process.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) }, 0);
    for i in 0..5 {
        let st = distlock_at(&url)
            .args(["run", "reaped", "--", "true"])
            .status()
            .unwrap();
        assert!(st.success(), "run {i}: {st:?}");
        // distlock's children are reparented before its exit is reported,
        // so anything left now is a child of ours: ECHILD means none.
        let mut status = 0;
        // SAFETY: waitpid writes only into the local status.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        let errno = std::io::Error::last_os_error().raw_os_error();
        assert!(
            pid == -1 && errno == Some(libc::ECHILD),
            "run {i}: distlock left its caller a child (waitpid: {pid}, {errno:?})"
        );
    }
}

/// The processes in the tree under `root`, `root` included, from every
/// /proc/PID/stat's parent pid.
fn tree(root: i32) -> Vec<i32> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((pid, ppid));
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(
            parent_of
                .iter()
                .filter(|&&(_, pp)| pp == p)
                .map(|&(c, _)| c),
        );
        i += 1;
    }
    out
}

/// What `pkill NAME` matches a process by: its name (comm).
fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// What `pkill -f NAME` matches a process by: its command line, NULs as
/// spaces.
fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// distlock's live children other than CMD: its guardian, once forked.
fn guards(distlock: i32, cmd: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{distlock}/task/{distlock}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|&p| p != cmd && alive(p))
        .collect()
}

/// SIGKILLs the pids on drop: what a failed test would leave running.
struct Reap(Vec<i32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for &p in &self.0 {
            signal(p, libc::SIGKILL);
        }
    }
}

/// `pkill -9 [-f] distlock`, confined to one job's process tree so that
/// other tests (and anything else on the machine) are left alone: every
/// process of the job that `matches` is listed first, then all of them
/// are SIGKILLed, as pkill does. CMD and its background child must not
/// outlive it.
fn pkill_9_distlock_in(name: &str, matches: fn(i32) -> bool) {
    let server = server();
    let mut job = Job::start(
        &server,
        name,
        &["--ttl", "5s"],
        &sh("sleep 100 & echo $$ $! > pids; wait"),
    );
    let pids = job.pids("pids", 2);
    let _reap = Reap(pids.clone());
    // The guardian is forked right after CMD: CMD may have written its
    // pids first.
    assert!(wait_until(LIMIT, || guards(job.pid(), pids[0]).len() == 1));

    let hit: Vec<(i32, String)> = tree(job.pid())
        .into_iter()
        .filter(|&p| matches(p))
        .map(|p| (p, comm(p)))
        .collect();
    assert!(hit.iter().any(|&(p, _)| p == job.pid()), "{hit:?}");
    for (p, _) in &hit {
        signal(*p, libc::SIGKILL);
    }
    job.wait();

    for (what, pid) in [("CMD", pids[0]), ("CMD's background child", pids[1])] {
        assert!(
            wait_until(Duration::from_secs(2), || !alive(pid)),
            "{what} {pid} survived the SIGKILL of {hit:?}"
        );
    }
}

#[test]
fn pkill_9_distlock_leaves_nothing_of_cmds_group_running() {
    pkill_9_distlock_in("pkill", |p| comm(p).contains("distlock"));
}

#[test]
fn pkill_9_f_distlock_leaves_nothing_of_cmds_group_running() {
    pkill_9_distlock_in("pkillf", |p| cmdline(p).contains("distlock"));
}

/// Kills distlock's guardian alone and returns the one distlock forks in
/// its place (the test fails if none comes).
fn kill_the_guardian(job: &Job, cmd: i32) -> i32 {
    let mut first = Vec::new();
    assert!(wait_until(LIMIT, || {
        first = guards(job.pid(), cmd);
        first.len() == 1
    }));
    signal(first[0], libc::SIGKILL);
    let killed = Instant::now();
    let mut now = Vec::new();
    let restored = wait_until(LIMIT, || {
        now = guards(job.pid(), cmd);
        now.len() == 1 && now[0] != first[0]
    });
    assert!(
        restored,
        "distlock did not replace its guardian {} (children now {now:?}); stderr: {}",
        first[0],
        job.read("stderr")
    );
    // "At once" (guarantees.md §2) is a SIGCHLD and a fork: milliseconds;
    // the bound leaves room for a loaded machine.
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "the guardian was replaced only after {:?}",
        killed.elapsed()
    );
    now[0]
}

#[test]
fn a_guardian_killed_alone_is_restored_so_a_later_sigkill_of_distlock_still_kills_the_group() {
    let server = server();
    let mut job = Job::start(
        &server,
        "reguard",
        &["--ttl", "5s"],
        &sh("sleep 100 & echo $$ $! > pids; wait"),
    );
    let pids = job.pids("pids", 2);
    let _reap = Reap(pids.clone());
    kill_the_guardian(&job, pids[0]);

    signal(job.pid(), libc::SIGKILL);
    job.wait();
    assert!(
        wait_until(Duration::from_secs(2), || !alive(pids[1])),
        "CMD's background child {} survived distlock's death",
        pids[1]
    );
}

/// The guardian put in place holds the lease's deadline, not a later one:
/// with distlock stopped, CMD is gone by the time the lease ends in Redis.
#[test]
fn a_restored_guardian_enforces_the_deadline_while_distlock_is_stopped() {
    let server = server();
    let mut job = Job::start(
        &server,
        "reguard-stop",
        &["--ttl", "1s"],
        &["perl", "-e", TICKER],
    );
    let pid = job.pids("pid", 1)[0];
    let _reap = Reap(vec![pid]);
    kill_the_guardian(&job, pid);

    signal(job.pid(), libc::SIGSTOP);
    assert!(wait_until(LIMIT, || state(job.pid()) == Some('T')));
    assert!(wait_until(LIMIT, || server
        .get(&key("reguard-stop"))
        .is_none()));
    assert!(
        signalled(pid, libc::SIGKILL),
        "CMD is running without a lease while distlock is stopped"
    );
    signal(job.pid(), libc::SIGCONT);
    let status = job.wait();
    job.assert_code(status, 124);
}

/// After a restoration the run goes on as usual: CMD's status, a release,
/// and no guardian (old or new) left behind.
#[test]
fn a_run_whose_guardian_was_restored_ends_as_usual_and_leaves_no_guardian() {
    let server = server();
    let mut job = Job::start(
        &server,
        "reguard-end",
        &["--ttl", "5s"],
        &sh("echo $$ > pid; while [ ! -e go ]; do sleep 0.01; done; exit 3"),
    );
    let pid = job.pids("pid", 1)[0];
    let guard = kill_the_guardian(&job, pid);

    std::fs::write(job.path("go"), "").unwrap();
    let status = job.wait();
    job.assert_code(status, 3);
    assert_eq!(server.get(&key("reguard-end")), None);
    assert!(
        !alive(guard),
        "the restored guardian {guard} outlived distlock"
    );
}

/// distlock and its guardian SIGKILLed together (`kill -9 <distlock>
/// <guardian>`), before either can see the other die, leave no process
/// of distlock's to kill CMD's group: the kernel does it, when the last
/// write end of the lifeline CMD's group holds the read end of closes
/// (guarantees.md §2). Before the lifeline, CMD itself died (its death
/// signal) but its background child lived on past the lease.
#[test]
fn distlock_and_its_guardian_killed_together_still_take_cmds_whole_group() {
    let server = server();
    let mut job = Job::start(
        &server,
        "both-killed",
        &["--ttl", "1s"],
        &sh("sleep 100 & echo $$ $! > pids; wait"),
    );
    let pids = job.pids("pids", 2);
    let _reap = Reap(pids.clone());
    let mut guard = Vec::new();
    assert!(wait_until(LIMIT, || {
        guard = guards(job.pid(), pids[0]);
        guard.len() == 1
    }));

    signal(job.pid(), libc::SIGKILL);
    signal(guard[0], libc::SIGKILL);
    job.wait();
    for (what, pid) in [("CMD", pids[0]), ("CMD's background child", pids[1])] {
        assert!(
            wait_until(Duration::from_secs(2), || !alive(pid)),
            "{what} {pid} survived distlock and its guardian"
        );
    }
    assert!(
        wait_until(Duration::from_secs(2), || server
            .get(&key("both-killed"))
            .is_none()),
        "the lease did not expire within its ttl"
    );
}

// ---------------------------------------------------------------------
// Exit codes: 126 and 127 are about CMD; distlock's own failures are 125
// ---------------------------------------------------------------------

/// `distlock run NAME -- true` with the caller's resource limit `resource`
/// at `limit`; as root (whom RLIMIT_NPROC does not bind) it runs as
/// nobody. Returns the outcome and whether the lock is held afterwards.
fn run_limited(
    server: &RedisServer,
    name: &str,
    resource: libc::__rlimit_resource_t,
    limit: u64,
) -> (Out, bool) {
    let mut c = distlock(server);
    c.args(["run", name, "--", "true"]).current_dir("/");
    // SAFETY: only async-signal-safe libc calls on values that need no
    // allocation.
    unsafe {
        c.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(resource, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let as_nobody = resource == libc::RLIMIT_NPROC && libc::geteuid() == 0;
            if as_nobody
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = exec(&mut c, LIMIT);
    let held = server.get(&key(name)).is_some();
    (out, held)
}

/// A failure of distlock's own is 125 with one `distlock: ` line, and the
/// lock is not left held.
fn assert_own_failure(out: &Out, held: bool, what: &str) {
    assert_eq!(out.code, 125, "{what}: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{what}: {:?}", out.stderr);
    assert!(
        out.stderr.starts_with("distlock: "),
        "{what}: {:?}",
        out.stderr
    );
    assert!(!held, "{what}: the lock is still held");
}

#[test]
fn out_of_processes_when_starting_cmd_is_125_not_126_and_the_lock_is_released() {
    let server = server();
    // distlock itself is the one process its user may have.
    let (out, held) = run_limited(&server, "nproc", libc::RLIMIT_NPROC, 1);
    assert_own_failure(&out, held, "RLIMIT_NPROC 1");
}

/// Every limit on open files, from too few to start at all to enough:
/// wherever distlock runs out (its signalfd, the Redis socket, the pipe it
/// starts CMD through, the guardian's pipe), it is 125 and one line, and
/// never 126 or 127, which would blame CMD.
#[test]
fn out_of_file_descriptors_anywhere_is_125_never_126_and_the_lock_is_released() {
    let server = server();
    let mut failed = Vec::new();
    for limit in 3..40 {
        let (out, held) = run_limited(&server, "nofile", libc::RLIMIT_NOFILE, limit);
        // Too few for the dynamic loader, which reports 127 before any
        // code of distlock's runs.
        if out.stderr.contains("error while loading shared libraries") {
            continue;
        }
        if out.code == 0 {
            assert!(!held, "RLIMIT_NOFILE {limit}: the lock is still held");
            continue;
        }
        assert_own_failure(&out, held, &format!("RLIMIT_NOFILE {limit}"));
        failed.push(limit);
    }
    assert!(
        !failed.is_empty() && failed.last() < Some(&39),
        "limits that failed: {failed:?}"
    );
}

// ---------------------------------------------------------------------
// Point 8: signals sent to distlock are passed on to CMD
// ---------------------------------------------------------------------

/// Sends `sig` to distlock only; CMD traps it, writes a marker and exits 0.
fn forwarded_signal_reaches_cmd(sig: i32, name: &str) {
    let server = server();
    let script = format!(
        "trap 'echo {name} > marker; exit 0' {name}; echo $$ > pid; while :; do sleep 0.05; done"
    );
    let mut job = Job::start(&server, "fwd", &["--ttl", "5s"], &sh(&script));
    let pid = job.pids("pid", 1)[0];
    assert!(server.get(&key("fwd")).is_some());

    signal(job.pid(), sig);
    let status = job.wait();

    job.assert_code(status, 0);
    assert_eq!(job.read("marker"), name, "CMD never got SIG{name}");
    assert!(!alive(pid));
    assert_eq!(server.get(&key("fwd")), None, "the lock was not released");
}

macro_rules! forwarded {
    ($($test:ident: $sig:ident,)*) => {$(
        #[test]
        fn $test() {
            forwarded_signal_reaches_cmd(libc::$sig, &stringify!($sig)[3..]);
        }
    )*};
}

forwarded! {
    sigterm_to_distlock_reaches_cmd_and_the_lock_is_released: SIGTERM,
    sighup_to_distlock_reaches_cmd_and_the_lock_is_released: SIGHUP,
    sigint_to_distlock_reaches_cmd_and_the_lock_is_released: SIGINT,
    sigquit_to_distlock_reaches_cmd_and_the_lock_is_released: SIGQUIT,
    sigusr1_to_distlock_reaches_cmd_and_the_lock_is_released: SIGUSR1,
    sigusr2_to_distlock_reaches_cmd_and_the_lock_is_released: SIGUSR2,
    sigalrm_to_distlock_reaches_cmd_and_the_lock_is_released: SIGALRM,
    sigwinch_to_distlock_reaches_cmd_and_the_lock_is_released: SIGWINCH,
    sigpipe_to_distlock_reaches_cmd_and_the_lock_is_released: SIGPIPE,
}

#[test]
fn sigterm_that_kills_cmd_gives_143_and_the_lock_is_released() {
    let server = server();
    let mut job = Job::start(
        &server,
        "term",
        &["--ttl", "5s"],
        &sh("echo $$ > pid; while :; do sleep 0.05; done"),
    );
    let pid = job.pids("pid", 1)[0];

    signal(job.pid(), libc::SIGTERM);
    let status = job.wait();

    job.assert_code(status, 143);
    assert!(!alive(pid));
    assert_eq!(server.get(&key("term")), None, "the lock was not released");
}

#[test]
fn cmd_that_survives_a_forwarded_sigterm_keeps_the_lease_until_it_exits() {
    let server = server();
    // CMD lives on for more than two leases after the TERM: only renewals
    // after the forwarded signal let it finish with its own status.
    let mut job = Job::start(
        &server,
        "stay",
        &["--ttl", "1s"],
        &sh("trap 'echo TERM > marker' TERM; echo $$ > pid; \
             while [ ! -e marker ]; do sleep 0.02; done; \
             sleep 2.2; echo done > done"),
    );
    job.pids("pid", 1);

    signal(job.pid(), libc::SIGTERM);
    assert!(wait_for_line(&job.path("marker"), LIMIT).is_some());
    let status = job.wait();

    job.assert_code(status, 0);
    assert_eq!(job.read("done"), "done");
    assert_eq!(server.get(&key("stay")), None);
}

// ---------------------------------------------------------------------
// Point 7: CMD's group is emptied before the release
// ---------------------------------------------------------------------

#[test]
fn background_child_left_by_cmd_is_dead_before_the_lock_is_released() {
    let server = server();
    let name = "bg";
    // CMD exits as soon as its background child ignores TERM, so the child
    // lives on until distlock's SIGKILL a grace (250ms) later.
    let mut job = Job::start(
        &server,
        name,
        &["--ttl", "10s", "--kill-grace", "250ms"],
        &sh(TERM_PROOF_CHILD),
    );
    let bg = job.pids("gc", 1)[0];

    let mut con = server.conn();
    let (mut seen_held_while_alive, mut released_while_alive) = (false, false);
    while job.child.try_wait().unwrap().is_none() {
        // Key first, then the process: "key gone, then child seen alive"
        // proves the child outlived the lease.
        let held: Option<String> = redis::cmd("GET").arg(key(name)).query(&mut con).unwrap();
        let bg_alive = alive(bg);
        match (held.is_some(), bg_alive) {
            (true, true) => seen_held_while_alive = true,
            (false, true) => released_while_alive = true,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let status = job.wait();

    job.assert_code(status, 0);
    assert!(!alive(bg), "the background child outlived distlock");
    assert!(
        !released_while_alive,
        "the lock was released while the background child ran"
    );
    assert!(
        seen_held_while_alive,
        "never saw the lock held while the child ran"
    );
    assert_eq!(server.get(&key(name)), None);
}

// ---------------------------------------------------------------------
// Point 12: ignored signals and the signal mask
// ---------------------------------------------------------------------

#[test]
fn under_nohup_cmd_inherits_sighup_ignored_and_nothing_else() {
    let server = server();
    let nohup = Caller {
        ignore: &[libc::SIGHUP],
        ..Caller::default()
    };
    let mut job = Job::start_as(
        nohup,
        &server,
        "nohup",
        &["--ttl", "5s"],
        &["grep", "^Sig", "/proc/self/status"],
    );
    let status = job.wait();
    job.assert_code(status, 0);

    let out = job.read("stdout");
    assert_eq!(sig_ign(&out), bit(libc::SIGHUP), "{out}");
    assert_eq!(sig_field(&out, "SigBlk"), 0, "{out}");
}

/// With `sig` ignored by the caller, `sig` sent to distlock reaches
/// nobody: distlock does not die of it, nor passes it on.
fn ignored_signal_to_distlock_is_neither_forwarded_nor_fatal(sig: i32, name: &str) {
    let server = server();
    // perl, because a shell cannot trap a signal that was ignored on entry:
    // CMD catches the signal itself, so it would notice a forwarded one.
    let script = format!(
        r#"
        $SIG{{{name}}} = sub {{ open(my $h, '>', 'got'); print $h "{name}\n"; close $h }};
        $SIG{{TERM}} = sub {{ open(my $u, '>', 'term'); print $u "TERM\n"; close $u; exit 0 }};
        open(my $p, '>', 'pid'); print $p "$$\n"; close $p;
        while (1) {{ select(undef, undef, undef, 0.05) }}
    "#
    );
    let ignore: &'static [i32] = match sig {
        libc::SIGHUP => &[libc::SIGHUP],
        libc::SIGPIPE => &[libc::SIGPIPE],
        _ => unreachable!(),
    };
    let caller = Caller {
        ignore,
        ..Caller::default()
    };
    let mut job = Job::start_as(
        caller,
        &server,
        "ignored",
        &["--ttl", "5s"],
        &["perl", "-e", &script],
    );
    job.pids("pid", 1);

    // The signal first, then TERM (a higher number) as a barrier: had the
    // signal been forwarded, CMD would have run its handler before the TERM
    // one, which exits (both distlock and perl handle pending signals
    // lowest number first).
    signal(job.pid(), sig);
    signal(job.pid(), libc::SIGTERM);
    let status = job.wait();

    job.assert_code(status, 0);
    assert_eq!(job.read("term"), "TERM");
    assert!(
        !job.exists("got"),
        "an ignored SIG{name} was forwarded to CMD"
    );
    assert_eq!(server.get(&key("ignored")), None);
}

#[test]
fn under_nohup_a_sighup_to_distlock_is_neither_forwarded_nor_fatal() {
    ignored_signal_to_distlock_is_neither_forwarded_nor_fatal(libc::SIGHUP, "HUP");
}

#[test]
fn with_sigpipe_ignored_by_the_caller_a_sigpipe_to_distlock_is_neither_forwarded_nor_fatal() {
    ignored_signal_to_distlock_is_neither_forwarded_nor_fatal(libc::SIGPIPE, "PIPE");
}

/// CMD records its signal state in `status`, then runs `yes` into a pipe
/// whose reader exits at once, and records how `yes` ended (`yes.rc`) and
/// what it said (`yes.err`).
const YES_INTO_CLOSED_PIPE: &str = "grep ^Sig /proc/self/status > status; \
     { yes 2> yes.err; echo $? > yes.rc; } | true";

/// distlock ignores SIGPIPE for itself at start-up; the caller's choice
/// is read first thing in `main` and handed to CMD. This test and
/// the next one together show that the early read really happens before
/// the runtime's change: read after it, both would see SIGPIPE ignored.
#[test]
fn caller_ignoring_sigpipe_gives_cmd_sigpipe_ignored_so_yes_sees_epipe() {
    let server = server();
    let caller = Caller {
        ignore: &[libc::SIGPIPE],
        ..Caller::default()
    };
    let mut job = Job::start_as(
        caller,
        &server,
        "pipe",
        &["--ttl", "5s"],
        &sh(YES_INTO_CLOSED_PIPE),
    );
    let status = job.wait();
    job.assert_code(status, 0);

    let st = job.read("status");
    assert_eq!(sig_ign(&st), bit(libc::SIGPIPE), "{st}");
    // Like `(trap '' PIPE; timeout 5 sh -c 'yes | :')`: a write error.
    assert_eq!(job.read("yes.rc"), "1", "yes.err: {}", job.read("yes.err"));
    assert!(
        job.read("yes.err").contains("Broken pipe"),
        "yes.err: {}",
        job.read("yes.err")
    );
    assert_eq!(server.get(&key("pipe")), None);
}

#[test]
fn caller_with_default_sigpipe_gives_cmd_the_default_so_yes_dies_of_it() {
    let server = server();
    let mut job = Job::start(&server, "pipe", &["--ttl", "5s"], &sh(YES_INTO_CLOSED_PIPE));
    let status = job.wait();
    job.assert_code(status, 0);

    let st = job.read("status");
    assert_eq!(sig_ign(&st) & bit(libc::SIGPIPE), 0, "{st}");
    assert_eq!(
        job.read("yes.rc"),
        (128 + libc::SIGPIPE).to_string(),
        "yes.err: {}",
        job.read("yes.err")
    );
    assert_eq!(job.read("yes.err"), "");
    assert_eq!(server.get(&key("pipe")), None);
}

/// distlock's own stderr is a pipe nobody reads (`2>&1 | head -1` after
/// head exited), with the caller's SIGPIPE at its default, so distlock has
/// SIGPIPE blocked and read from its signalfd. Its `-v` line then raises a
/// SIGPIPE of its own: that one must not be forwarded (CMD, trapping it,
/// would record it, or die of it before its trap is set), and the failed
/// write must not end distlock: CMD runs and its status comes out.
#[test]
fn a_stderr_nobody_reads_neither_stops_the_run_nor_sends_cmd_a_sigpipe() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let server = server();
    let dir = tempfile::tempdir().unwrap();
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds that are then owned here.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read_end);
    let mut c = distlock(&server);
    c.args(["-v", "run", "noreader", "--ttl", "5s", "--"])
        .args(sh("trap 'echo PIPE > got' PIPE; echo ran > ran; exit 3"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(write_end));
    set_caller(&mut c, Caller::default());
    let mut child = c.spawn().unwrap();
    let status = wait_with_timeout(&mut child, LIMIT);

    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(dir.path().join("ran").exists(), "CMD never ran");
    assert!(
        !dir.path().join("got").exists(),
        "distlock's own SIGPIPE was forwarded to CMD"
    );
    assert_eq!(
        server.get(&key("noreader")),
        None,
        "the lock was not released"
    );
}

/// The issue's own line, `(trap '' PIPE; nohup distlock run …)`, with the
/// real tools setting up the caller: CMD has SIGHUP and SIGPIPE ignored,
/// and nothing else.
#[test]
fn under_trap_pipe_and_real_nohup_cmd_has_sighup_and_sigpipe_ignored() {
    let server = server();
    let mut job = Job::start_via(
        &["sh", "-c", "trap '' PIPE; exec nohup \"$0\" \"$@\""],
        Caller::default(),
        &server,
        "nohup",
        &["--ttl", "5s"],
        &["grep", "^Sig", "/proc/self/status"],
    );
    let status = job.wait();
    job.assert_code(status, 0);

    let out = job.read("stdout");
    assert_eq!(
        sig_ign(&out),
        bit(libc::SIGHUP) | bit(libc::SIGPIPE),
        "{out}"
    );
    assert_eq!(sig_field(&out, "SigBlk"), 0, "{out}");
}

#[test]
fn cmd_starts_with_the_callers_empty_signal_mask_and_no_ignored_signals() {
    let server = server();
    let mut job = Job::start(
        &server,
        "mask",
        &["--ttl", "5s"],
        &["grep", "^Sig", "/proc/self/status"],
    );
    let status = job.wait();
    job.assert_code(status, 0);

    let out = job.read("stdout");
    assert_eq!(sig_field(&out, "SigBlk"), 0, "{out}");
    assert_eq!(sig_ign(&out), 0, "{out}");
}

#[test]
fn cmd_starts_with_the_callers_nonempty_signal_mask() {
    let server = server();
    let caller = Caller {
        block: &[libc::SIGUSR1, libc::SIGTERM],
        ..Caller::default()
    };
    let mut job = Job::start_as(
        caller,
        &server,
        "mask",
        &["--ttl", "5s"],
        &["grep", "^Sig", "/proc/self/status"],
    );
    let status = job.wait();
    job.assert_code(status, 0);

    let out = job.read("stdout");
    assert_eq!(
        sig_field(&out, "SigBlk"),
        bit(libc::SIGUSR1) | bit(libc::SIGTERM),
        "{out}"
    );
}

// ---------------------------------------------------------------------
// Point 2: signals end a wait for the lock
// ---------------------------------------------------------------------

fn signal_ends_a_wait_without_touching_the_holders_lock(sig: i32) {
    let server = server();
    let (k, holder) = (key("busy"), "elsewhere:1:0123456789abcdef0123456789abcdef");
    let _: () = server.cmd(&["SET", &k, holder, "PX", "60000"]);
    let _: () = server.cmd(&["SET", &(k.clone() + ":fence"), "7"]);
    let mut job = Job::start(
        &server,
        "busy",
        &["--wait", "forever", "--ttl", "5s"],
        &sh("echo started > marker"),
    );

    // Waiting for sure: the signal is blocked (so it will be read from the
    // signalfd, not kill distlock) and an acquire attempt has reached Redis.
    let pid = job.pid();
    let waiting = wait_until(LIMIT, || {
        let blocked = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map(|s| sig_field(&s, "SigBlk") & bit(sig) != 0)
            .unwrap_or(false);
        blocked
            && server
                .cmd::<String>(&["CLIENT", "LIST"])
                .contains("cmd=evalsha")
    });
    assert!(
        waiting,
        "distlock never started waiting: {}",
        job.read("stderr")
    );

    let sent = Instant::now();
    signal(pid, sig);
    let status = job.wait();
    let took = sent.elapsed();

    job.assert_code(status, 128 + sig);
    assert!(
        took < Duration::from_millis(500),
        "the wait ended {took:?} after the signal"
    );
    assert!(!job.exists("marker"), "CMD was started");
    assert_eq!(server.get(&k).as_deref(), Some(holder));
    let pttl: i64 = server.cmd(&["PTTL", &k]);
    assert!(pttl > 50_000, "the holder's lease was changed: PTTL {pttl}");
    assert_eq!(server.get(&(k + ":fence")).as_deref(), Some("7"));
}

#[test]
fn sigint_ends_a_wait_with_130_and_cmd_never_starts() {
    signal_ends_a_wait_without_touching_the_holders_lock(libc::SIGINT);
}

#[test]
fn sigterm_ends_a_wait_with_143_and_cmd_never_starts() {
    signal_ends_a_wait_without_touching_the_holders_lock(libc::SIGTERM);
}

#[test]
fn sighup_ends_a_wait_with_129_and_cmd_never_starts() {
    signal_ends_a_wait_without_touching_the_holders_lock(libc::SIGHUP);
}

// ---------------------------------------------------------------------
// Point 11: job control, and distlock stopped past its deadline
// ---------------------------------------------------------------------

/// A CMD that appends a line to `ticks` every 20ms, exits 0 on SIGUSR1,
/// and on SIGTERM appends "TERM" and exits 0, so that even running its
/// handler for the kill signal shows up as running again.
///
/// One process that never forks: a shell loop running `sleep` can be caught
/// by a SIGTSTP between vfork and exec (dash), which leaves the shell in
/// uninterruptible sleep rather than stopped, waiting for its stopped child.
const TICKER: &str = r#"
    sub tick { open(my $t, '>>', 'ticks'); print $t "$_[0]\n"; close $t }
    $SIG{USR1} = sub { exit 0 };
    $SIG{TERM} = sub { tick("TERM"); exit 0 };
    open(my $p, '>', 'pid'); print $p "$$\n"; close $p;
    while (1) {
        tick("tick");
        select(undef, undef, undef, 0.02);
    }
"#;

#[test]
fn distlock_sigstopped_past_its_deadline_kills_cmd_at_once_on_sigcont_and_exits_124() {
    let server = server();
    let mut job = Job::start(
        &server,
        "stopped",
        &["--ttl", "600ms"],
        &["perl", "-e", TICKER],
    );
    let pid = job.pids("pid", 1)[0];

    signal(job.pid(), libc::SIGSTOP);
    assert!(wait_until(LIMIT, || state(job.pid()) == Some('T')));
    // The key expiring in Redis proves the kill deadline has passed.
    assert!(wait_until(LIMIT, || server.get(&key("stopped")).is_none()));

    let continued = Instant::now();
    signal(job.pid(), libc::SIGCONT);
    let status = job.wait();
    let took = continued.elapsed();

    job.assert_code(status, 124);
    assert!(!alive(pid));
    // "At once" is milliseconds; the bound leaves room for a loaded machine.
    assert!(
        took < Duration::from_secs(1),
        "distlock exited {took:?} after SIGCONT"
    );
}

/// Waits for a renewal of `name` (its PTTL going up) and returns an instant
/// taken after it: the renewal was sent before that instant.
fn next_renewal(server: &RedisServer, name: &str) -> Instant {
    let mut con = server.conn();
    let mut last = i64::MAX;
    let renewed = wait_until(LIMIT, || {
        let pttl: i64 = redis::cmd("PTTL").arg(key(name)).query(&mut con).unwrap();
        std::mem::replace(&mut last, pttl) < pttl
    });
    assert!(renewed, "no renewal of {name} seen");
    Instant::now()
}

/// `kill -TSTP distlock`, a wait past the kill deadline, `kill -CONT
/// distlock`: CMD (the perl `script`) never runs again and distlock exits
/// 124.
fn sigtstp_past_the_kill_deadline_cmd_never_runs_again(script: &str) {
    let server = server();
    // Kill deadline 965ms after the last renewal was sent, lease end 3s.
    let mut job = Job::start(
        &server,
        "tstp",
        &[
            "--ttl",
            "3s",
            "--renew-every",
            "500ms",
            "--kill-grace",
            "2s",
        ],
        &["perl", "-e", script],
    );
    let pid = job.pids("pid", 1)[0];

    let renewed = next_renewal(&server, "tstp");
    signal(job.pid(), libc::SIGTSTP);
    assert!(
        wait_until(LIMIT, || state(pid) == Some('T')
            && state(job.pid()) == Some('T')),
        "CMD {:?}, distlock {:?}",
        state(pid),
        state(job.pid())
    );
    let ticks = job.read("ticks");

    // Time passing while stopped is the scenario itself. 1.5s after
    // `renewed` is past the kill deadline (the renewal was sent earlier),
    // and still within the lease in Redis: a distlock that sent the kill
    // signal and let the grace run would let CMD run its TERM handler.
    std::thread::sleep(
        (renewed + Duration::from_millis(1500)).saturating_duration_since(Instant::now()),
    );
    assert!(
        server.get(&key("tstp")).is_some(),
        "the lease ended already"
    );

    let continued = Instant::now();
    signal(job.pid(), libc::SIGCONT);
    let status = job.wait();
    let took = continued.elapsed();

    job.assert_code(status, 124);
    assert!(!alive(pid));
    assert_eq!(
        job.read("ticks"),
        ticks,
        "CMD ran again after its kill deadline"
    );
    // "At once" is milliseconds; the bound leaves room for a loaded machine.
    assert!(
        took < Duration::from_secs(1),
        "distlock exited {took:?} after SIGCONT"
    );
}

#[test]
fn sigtstp_stops_cmd_and_distlock_and_past_the_kill_deadline_cmd_never_runs_again() {
    sigtstp_past_the_kill_deadline_cmd_never_runs_again(TICKER);
}

#[test]
fn sigtstp_stops_even_a_cmd_that_catches_it_and_past_the_kill_deadline_it_never_runs_again() {
    sigtstp_past_the_kill_deadline_cmd_never_runs_again(&format!(
        "$SIG{{TSTP}} = sub {{ tick('TSTP') }}; {TICKER}"
    ));
}

/// A CMD of two processes (perl and a forked child, one group) that both
/// catch SIGTSTP, SIGTTIN and SIGTTOU, record any of them in `caught`, and
/// append to `ticks` and `kticks` every 20ms. The parent writes "PID KID"
/// to `pid`; SIGUSR1 (forwarded to the group) ends both, the parent with 0.
const STOP_CATCHERS: &str = r#"
    sub tick { open(my $t, '>>', $_[0]); print $t "$_[1]\n"; close $t }
    $SIG{$_} = sub { tick('caught', "$_[0] $$") } for qw(TSTP TTIN TTOU);
    my $kid = fork() // die "fork: $!";
    if ($kid == 0) {
        $SIG{USR1} = 'DEFAULT';
        while (1) { tick('kticks', 'tick'); select(undef, undef, undef, 0.02) }
    }
    $SIG{USR1} = sub { kill 'USR1', $kid; waitpid($kid, 0); exit 0 };
    open(my $p, '>', 'pid'); print $p "$$ $kid\n"; close $p;
    while (1) { tick('ticks', 'tick'); select(undef, undef, undef, 0.02) }
"#;

/// `kill -SIG distlock` with SIG a job-control stop: CMD's whole group is
/// stopped although it catches SIG (distlock sends SIGSTOP, so CMD never
/// sees SIG), then distlock stops; `kill -CONT distlock` resumes both with
/// the lease kept, and the run ends with CMD's status and a release.
fn stop_signal_to_distlock_stops_a_cmd_that_catches_it(sig: i32) {
    let server = server();
    let mut job = Job::start(
        &server,
        "catcher",
        &["--ttl", "5s"],
        &["perl", "-e", STOP_CATCHERS],
    );
    let pids = job.pids("pid", 2);
    let (pid, kid) = (pids[0], pids[1]);
    let owner = server.get(&key("catcher")).unwrap();

    signal(job.pid(), sig);
    assert!(
        wait_until(LIMIT, || state(pid) == Some('T')
            && state(kid) == Some('T')
            && state(job.pid()) == Some('T')),
        "CMD {:?}, its child {:?}, distlock {:?}",
        state(pid),
        state(kid),
        state(job.pid())
    );
    let (ticks, kticks) = (job.read("ticks"), job.read("kticks"));
    assert!(!job.exists("caught"), "CMD got {}", job.read("caught"));

    signal(job.pid(), libc::SIGCONT);
    assert!(
        wait_until(LIMIT, || job.read("ticks") != ticks
            && job.read("kticks") != kticks),
        "CMD {:?} and its child {:?} were not both continued",
        state(pid),
        state(kid)
    );
    assert_ne!(state(job.pid()), Some('T'), "distlock stayed stopped");
    assert_eq!(server.get(&key("catcher")), Some(owner));

    signal(job.pid(), libc::SIGUSR1);
    let status = job.wait();
    job.assert_code(status, 0);
    assert!(!alive(pid) && !alive(kid));
    assert!(!job.exists("caught"), "CMD got {}", job.read("caught"));
    assert_eq!(
        server.get(&key("catcher")),
        None,
        "the lock was not released"
    );
}

#[test]
fn sigtstp_to_distlock_stops_a_cmd_that_catches_it_and_sigcont_resumes_both() {
    stop_signal_to_distlock_stops_a_cmd_that_catches_it(libc::SIGTSTP);
}

#[test]
fn sigttin_to_distlock_stops_a_cmd_that_catches_it_and_sigcont_resumes_both() {
    stop_signal_to_distlock_stops_a_cmd_that_catches_it(libc::SIGTTIN);
}

#[test]
fn sigttou_to_distlock_stops_a_cmd_that_catches_it_and_sigcont_resumes_both() {
    stop_signal_to_distlock_stops_a_cmd_that_catches_it(libc::SIGTTOU);
}

#[test]
fn sigtstp_then_sigcont_before_the_deadline_resumes_cmd_with_the_lease_kept() {
    let server = server();
    let mut job = Job::start(&server, "resume", &["--ttl", "5s"], &["perl", "-e", TICKER]);
    let pid = job.pids("pid", 1)[0];
    let owner = server.get(&key("resume")).unwrap();

    signal(job.pid(), libc::SIGTSTP);
    assert!(
        wait_until(LIMIT, || state(pid) == Some('T')
            && state(job.pid()) == Some('T')),
        "CMD {:?}, distlock {:?}",
        state(pid),
        state(job.pid())
    );
    let ticks = job.read("ticks").lines().count();

    signal(job.pid(), libc::SIGCONT);
    assert!(
        wait_until(LIMIT, || job.read("ticks").lines().count() > ticks),
        "CMD was not continued"
    );
    assert_eq!(server.get(&key("resume")), Some(owner));
    signal(job.pid(), libc::SIGUSR1);
    let status = job.wait();

    job.assert_code(status, 0);
    assert_eq!(server.get(&key("resume")), None);
}

/// A continue asks the renewer for an immediate renewal; renewals must go
/// on after it (a regression: asking for one once stopped the renewer).
#[test]
fn renewals_go_on_after_a_stop_and_continue() {
    let server = server();
    // --ttl 3s: renewals every 1s, kill deadline 2.2s after the last one.
    let mut job = Job::start(&server, "again", &["--ttl", "3s"], &["perl", "-e", TICKER]);
    let pid = job.pids("pid", 1)[0];
    let owner = server.get(&key("again")).unwrap();

    signal(job.pid(), libc::SIGTSTP);
    assert!(wait_until(LIMIT, || state(pid) == Some('T')
        && state(job.pid()) == Some('T')));
    // Stay stopped until a renewal is due (more than 1s since the last
    // confirmed one, as the lease's TTL shows), but continue well before
    // the kill deadline.
    assert!(wait_until(LIMIT, || {
        server.cmd::<i64>(&["PTTL", &key("again")]) <= 1800
    }));
    signal(job.pid(), libc::SIGCONT);
    assert!(wait_until(LIMIT, || state(pid) != Some('T')));

    // Three renewals seen after the continue: the lease's TTL went up
    // three times, and the lock never changed hands.
    let mut last = i64::MAX;
    let mut rises = 0;
    let renewed = wait_until(LIMIT, || {
        let pttl: i64 = server.cmd(&["PTTL", &key("again")]);
        assert!(pttl > 0, "the lease ran out after the continue");
        if pttl > last {
            rises += 1;
        }
        last = pttl;
        rises >= 3
    });
    assert!(renewed, "no renewals after the continue");
    assert_eq!(server.get(&key("again")), Some(owner));
    signal(job.pid(), libc::SIGUSR1);
    let status = job.wait();
    job.assert_code(status, 0);
}

#[test]
fn sigstopped_distlock_does_not_let_cmd_outlive_the_lease() {
    let server = server();
    let mut job = Job::start(&server, "frozen", &["--ttl", "1s"], &["perl", "-e", TICKER]);
    let pid = job.pids("pid", 1)[0];

    // distlock alone is stopped (`kill -STOP`, a debugger attaching):
    // it cannot renew, so CMD must be gone by the time the lease is.
    signal(job.pid(), libc::SIGSTOP);
    assert!(wait_until(LIMIT, || state(job.pid()) == Some('T')));
    assert!(wait_until(LIMIT, || server.get(&key("frozen")).is_none()));
    assert!(
        signalled(pid, libc::SIGKILL),
        "CMD is running without a lease while distlock is stopped"
    );

    signal(job.pid(), libc::SIGCONT);
    let status = job.wait();
    job.assert_code(status, 124);
}

/// Waits (at most `limit`) for distlock to exit; None if it has not.
fn exit_within(job: &mut Job, limit: Duration) -> Option<ExitStatus> {
    let mut status = None;
    wait_until(limit, || {
        status = job.child.try_wait().unwrap();
        status.is_some()
    });
    status
}

/// A CMD that stops its distlock (`kill -STOP $PPID`) cannot leave it
/// stopped for ever: at the deadline the guardian kills CMD's group and
/// continues distlock, which exits 124 with the lock free (guarantees.md
/// §2). Before, distlock stayed in state T after CMD was killed, and its
/// caller waited for ever.
#[test]
fn a_cmd_that_stops_distlock_ends_the_run_with_124_at_the_deadline_not_never() {
    let server = server();
    let mut job = Job::start(
        &server,
        "stop-ppid",
        &["--ttl", "1s"],
        &sh("sleep 100 & echo $$ $! > pids; kill -STOP $PPID; wait"),
    );
    let pids = job.pids("pids", 2);
    let _reap = Reap(pids.clone());
    assert!(
        wait_until(LIMIT, || state(job.pid()) == Some('T')),
        "CMD did not stop distlock"
    );
    let stopped = Instant::now();

    // The last renewal was sent before the stop: the deadline is at most
    // a ttl away, the rest is slack for a loaded machine.
    let status = exit_within(&mut job, Duration::from_secs(4)).unwrap_or_else(|| {
        panic!(
            "distlock is still {:?} {:?} after CMD stopped it",
            state(job.pid()),
            stopped.elapsed()
        )
    });
    job.assert_code(status, 124);
    for (what, pid) in [("CMD", pids[0]), ("CMD's child", pids[1])] {
        assert!(!alive(pid), "{what} {pid} outlived the run");
    }
    // Released by distlock, or expired: free within a ttl either way.
    assert!(
        wait_until(Duration::from_secs(1), || server
            .get(&key("stop-ppid"))
            .is_none()),
        "the lock is still held after the run ended"
    );
}

/// A stop distlock chose (job control: `kill -TSTP`, or Ctrl-Z through
/// CMD) is left in place past the deadline: the guardian kills CMD's group
/// then but does not continue distlock; the job stays suspended until the
/// user continues it, and then ends with 124 (guarantees.md §7).
#[test]
fn a_job_suspended_for_job_control_stays_stopped_past_its_deadline_until_continued() {
    let server = server();
    let mut job = Job::start(
        &server,
        "tstp-kept",
        &["--ttl", "1s"],
        &["perl", "-e", TICKER],
    );
    let pid = job.pids("pid", 1)[0];
    let _reap = Reap(vec![pid]);

    signal(job.pid(), libc::SIGTSTP);
    assert!(wait_until(LIMIT, || state(pid) == Some('T')
        && state(job.pid()) == Some('T')));
    assert!(wait_until(LIMIT, || server
        .get(&key("tstp-kept"))
        .is_none()));
    assert!(
        signalled(pid, libc::SIGKILL),
        "CMD outlived its lease while the job was suspended"
    );
    // A continued distlock exits within milliseconds; it must not.
    let continued = wait_until(Duration::from_millis(500), || state(job.pid()) != Some('T'));
    assert!(
        !continued,
        "the suspended distlock was continued behind the user's back: {:?}",
        state(job.pid())
    );

    signal(job.pid(), libc::SIGCONT);
    let status = job.wait();
    job.assert_code(status, 124);
}

#[test]
fn cmd_continued_behind_distlocks_back_does_not_outlive_the_lease() {
    let server = server();
    let mut job = Job::start(&server, "behind", &["--ttl", "1s"], &["perl", "-e", TICKER]);
    let pid = job.pids("pid", 1)[0];

    signal(job.pid(), libc::SIGTSTP);
    assert!(wait_until(LIMIT, || state(pid) == Some('T')
        && state(job.pid()) == Some('T')));
    // Someone continues CMD itself, not the job (`kill -CONT <pid>`).
    signal(pid, libc::SIGCONT);
    let ticks = job.read("ticks").lines().count();
    assert!(
        wait_until(LIMIT, || job.read("ticks").lines().count() > ticks),
        "CMD did not run"
    );

    // The lease ends in Redis: by then nothing of CMD may be running.
    assert!(wait_until(LIMIT, || server.get(&key("behind")).is_none()));
    let ticks = job.read("ticks");
    let lease_gone = Instant::now();
    assert!(
        !alive(pid) || state(pid) == Some('T'),
        "CMD is running without a lease; distlock is {:?}",
        state(job.pid())
    );
    // ... and it does not run again later either (a tick every 20ms).
    wait_until(Duration::from_millis(200), || job.read("ticks") != ticks);
    assert_eq!(
        job.read("ticks"),
        ticks,
        "CMD ran {:?} after its lease ended",
        lease_gone.elapsed()
    );
    signal(job.pid(), libc::SIGCONT);
    let status = job.wait();
    job.assert_code(status, 124);
}

// ---------------------------------------------------------------------
// Point 4: renewal
// ---------------------------------------------------------------------

#[test]
fn renewals_keep_the_lease_while_cmd_runs_three_ttls() {
    let server = server();
    let name = "renew";
    let started = Instant::now();
    let mut job = Job::start(
        &server,
        name,
        &["--ttl", "600ms"],
        &sh("echo \"$DISTLOCK_OWNER\" > owner; sleep 1.8; echo done > done"),
    );
    let owner = wait_for_line(&job.path("owner"), LIMIT).unwrap();
    let token = server.get(&(key(name) + ":fence"));
    assert!(token.is_some());

    let mut con = server.conn();
    let (mut last_pttl, mut increases) = (i64::MAX, 0);
    while job.child.try_wait().unwrap().is_none() {
        let (holder, pttl): (Option<String>, i64) = redis::pipe()
            .atomic()
            .get(key(name))
            .cmd("PTTL")
            .arg(key(name))
            .query(&mut con)
            .unwrap();
        // Key first, then CMD's progress: "gone, and CMD not done yet"
        // means the lease was lost while CMD ran.
        let done = job.exists("done");
        match holder {
            Some(h) => {
                assert_eq!(h, owner);
                if pttl > last_pttl {
                    increases += 1;
                }
                last_pttl = pttl;
            }
            None => assert!(done, "the lease vanished while CMD ran"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = job.wait();

    job.assert_code(status, 0);
    assert!(started.elapsed() >= Duration::from_millis(1800));
    assert!(
        increases >= 3,
        "PTTL went up only {increases} times in 3 ttls"
    );
    assert_eq!(server.get(&key(name)), None);
    assert_eq!(
        server.get(&(key(name) + ":fence")),
        token,
        "renewals take no token"
    );
}
