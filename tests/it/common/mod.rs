//! Shared helpers for the integration tests: a real `redis-server` per test
//! on a free loopback port, a builder for the distlock binary, one bounded
//! runner (`exec` → `Out`, `Bounded::output_within`), the key names, and
//! polling with a deadline (never a bare sleep where an event can be
//! awaited). A helper that two test files need lives here, not in both.

pub mod etcd;
pub mod etcd_cluster;
pub mod etcd_proc;
pub mod fake;
pub mod ha;
pub mod holder;
pub mod not_redis;
pub mod proxy;
pub mod skewed_clock;
pub mod tls;

/// Upper bound for anything a test waits for: a deadline that ends a
/// failing test, never a property under test, so one generous value
/// serves every module.
pub const LIMIT: Duration = Duration::from_secs(30);

/// One lock for the tests that must not overlap each other in the one test
/// binary: the package test's release build takes a core for minutes, and
/// queue_scale starts a hundred waiters at once: either would slow the
/// other's timings for nothing.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// This machine's host name, as distlock's generated owner ids and
/// `acquired … on HOST` carry it (`gethostname()`).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A `redis-server` of our own, killed and reaped on drop.
pub struct RedisServer {
    child: Child,
    /// The TCP port on 127.0.0.1.
    pub port: u16,
    /// Working directory (and unix socket) of this server.
    pub dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server without persistence on a free loopback port.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let (child, port, dir) = launch_redis(
            |port, dir| {
                let mut args = plain_args(port, dir);
                args.push("--unixsocket".into());
                args.push(dir.join("redis.sock").into());
                args.extend(extra.iter().map(OsString::from));
                args
            },
            // Ours: see `answers_as`.
            |child, port, _| answers_as(port, child.id()),
        );
        RedisServer { child, port, dir }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The unix socket path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// A direct connection, for setting up and checking state.
    pub fn conn(&self) -> redis::Connection {
        connect(&self.url())
    }

    /// Runs one command and returns its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query(&mut self.conn()).unwrap()
    }

    /// The current value of a string key.
    pub fn get(&self, key: &str) -> Option<String> {
        self.cmd(&["GET", key])
    }

    /// Freezes the server (SIGSTOP): it accepts connections but answers
    /// nothing, the way a hung or partitioned server looks.
    pub fn pause(&self) {
        signal(self.child.id() as i32, libc::SIGSTOP);
    }

    /// Undoes `pause`.
    pub fn resume(&self) {
        signal(self.child.id() as i32, libc::SIGCONT);
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        signal(self.child.id() as i32, libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis-server` arguments for a server on 127.0.0.1:`port` without
/// persistence, its files in `dir`.
pub fn plain_args(port: u16, dir: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .into_iter()
        .chain(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .map(OsString::from)
        .collect();
    args.push("--dir".into());
    args.push(dir.into());
    args
}

/// Starts `redis-server ARGS(port, dir)` on a free loopback port in a
/// fresh directory and waits (bounded) until `ready(child, port, dir)`.
/// Picking a port and then binding it races with other tests; a server
/// that fails to bind exits, and is retried on another port.
pub fn launch_redis(
    args: impl Fn(u16, &Path) -> Vec<OsString>,
    ready: impl Fn(&Child, u16, &Path) -> bool,
) -> (Child, u16, tempfile::TempDir) {
    for _ in 0..5 {
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("redis-server")
            .args(args(port, dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let up = wait_until(Duration::from_secs(10), || {
            matches!(child.try_wait(), Ok(Some(_))) || ready(&child, port, dir.path())
        });
        if up && child.try_wait().unwrap().is_none() {
            return (child, port, dir);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("could not start redis-server");
}

/// A connection to `url` for setting up and checking state, its connect
/// and reads bounded (5 s).
pub fn connect(url: &str) -> redis::Connection {
    let c = redis::Client::open(url).unwrap();
    let con = c
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    con
}

/// Whether the server on `port` answers and is process `pid`: when another
/// test (or another checkout's test run) took the port between `free_port`
/// and our bind, the foreign server answers while ours is still on its way
/// to exiting with "address in use", and the two tests would silently
/// share one database.
pub fn answers_as(port: u16, pid: u32) -> bool {
    let info = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
        .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c));
    let Ok(info) = info else { return false };
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse::<u32>().ok())
        == Some(pid)
}

/// A loopback port that was free a moment ago (a server started on it may
/// still lose a race and must retry, as `RedisServer::start_with` does).
pub fn free_port() -> u16 {
    // The kernel may hand the same free port to two binds in a row: a
    // three-member etcd once got one port for two members. A port is given
    // out once per test process.
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
}

/// The distlock binary built for these tests.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_distlock"))
}

/// A `distlock` command pointed at `server`, with no DISTLOCK_* variables
/// inherited from the environment running the tests.
pub fn distlock(server: &RedisServer) -> Command {
    distlock_at(&server.url())
}

/// A `distlock` command pointed at `url` (Sentinel, Cluster, TLS, a
/// proxy…), with no DISTLOCK_* variables inherited.
pub fn distlock_at(url: &str) -> Command {
    let mut cmd = bare_distlock();
    cmd.env("DISTLOCK_REDIS_URL", url);
    cmd
}

/// A `distlock` command with a clean DISTLOCK_* environment and no server.
///
/// SIGINT and SIGQUIT start at their default action. A shell without job
/// control starts a background command (`cargo test … &`) with both
/// ignored (POSIX), the tests inherit that, and distlock rightly leaves a
/// signal its caller ignored alone (as nohup(1) expects): the tests that
/// send SIGINT or SIGQUIT would then fail for want of a caller who wants
/// them. A test's own `pre_exec` runs after this one, so a test that
/// ignores a signal on purpose still can.
pub fn bare_distlock() -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("DISTLOCK_") {
            cmd.env_remove(k);
        }
    }
    // SAFETY: signal(2) is async-signal-safe, run in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd
}

/// Polls `cond` every few milliseconds until it holds or `limit` passes.
pub fn wait_until(limit: Duration, cond: impl FnMut() -> bool) -> bool {
    poll(limit, Duration::from_millis(5), cond)
}

/// Polls `cond` every `every` until it holds or `limit` passes (a slower
/// pace for conditions that cost a round trip, e.g. a Sentinel failover).
pub fn poll(limit: Duration, every: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Waits for a file to exist and hold a non-empty first line; returns it.
pub fn wait_for_line(path: &Path, limit: Duration) -> Option<String> {
    let mut line = None;
    wait_until(limit, || {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Some(l) = s
                .lines()
                .next()
                .filter(|l| !l.is_empty() && s.contains('\n'))
            {
                line = Some(l.to_owned());
                return true;
            }
        }
        false
    });
    line
}

/// Sends `sig` to `pid`, ignoring "no such process".
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: plain kill(2).
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The parent of `pid`, from /proc; 0 once it is gone.
pub fn parent_of(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Whether a process with this pid exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the command name in parentheses.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Waits for a child with a hard limit, so a hang fails the test instead
/// of blocking CI; kills it on timeout.
pub fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {} did not exit within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The pid of distlock's guardian: the child of `distlock` named
/// `dl-guard`. Tests that model a frozen host stop it with distlock.
pub fn guardian_of(distlock: i32) -> i32 {
    let mut found = None;
    wait_until(Duration::from_secs(10), || {
        let children =
            std::fs::read_to_string(format!("/proc/{distlock}/task/{distlock}/children"))
                .unwrap_or_default();
        found = children
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "dl-guard")
            });
        found.is_some()
    });
    found.expect("distlock's guardian process")
}

/// The lock key of NAME under the default prefix (docs/data-model.md's `P:{N}`).
pub fn key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// The fencing counter of NAME under the default prefix (`P:{N}:fence`).
pub fn fence(name: &str) -> String {
    format!("distlock:{{{name}}}:fence")
}

/// What a finished process left behind.
#[derive(Debug)]
pub struct Out {
    /// The exit code, or -1 when a signal ended it (`status` says which).
    pub code: i32,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// Spawn to reaped exit.
    pub took: Duration,
}

impl Out {
    /// stdout and stderr together, for leak scans.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` to completion with stdin closed, bounded by `limit` (killed
/// and a test failure past it), capturing stdout and stderr through files:
/// a process left behind that still holds them can never make the test
/// hang, as a pipe read to EOF would.
pub fn exec(cmd: &mut Command, limit: Duration) -> Out {
    let (out, took) = run_to_files(cmd, limit)
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
    let text = |b: Vec<u8>, what: &str| {
        String::from_utf8(b).unwrap_or_else(|e| panic!("{what} is not UTF-8: {e}"))
    };
    Out {
        code: out.status.code().unwrap_or(-1),
        status: out.status,
        stdout: text(out.stdout, "stdout"),
        stderr: text(out.stderr, "stderr"),
        took,
    }
}

/// `Command::output`, bounded: every process a test starts must end
/// within a limit, so a hang fails the test instead of blocking CI.
pub trait Bounded {
    /// Like `output()` (stdin closed, stdout and stderr captured), but the
    /// process is killed and the test fails once `limit` has passed.
    fn output_within(&mut self, limit: Duration) -> Output;
    /// The same, with a program that cannot be started (not installed) as
    /// an error rather than a failure.
    fn try_output_within(&mut self, limit: Duration) -> std::io::Result<Output>;
}

impl Bounded for Command {
    fn output_within(&mut self, limit: Duration) -> Output {
        self.try_output_within(limit)
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", self.get_program()))
    }

    fn try_output_within(&mut self, limit: Duration) -> std::io::Result<Output> {
        Ok(run_to_files(self, limit)?.0)
    }
}

/// Spawns `cmd` with stdin closed and stdout/stderr in temporary files,
/// waits at most `limit`, and returns what it wrote and how long it took.
fn run_to_files(cmd: &mut Command, limit: Duration) -> std::io::Result<(Output, Duration)> {
    let dir = tempfile::tempdir().unwrap();
    let (o, e) = (dir.path().join("stdout"), dir.path().join("stderr"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap());
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let status = wait_with_timeout(&mut child, limit);
    let took = started.elapsed();
    let output = Output {
        status,
        stdout: std::fs::read(&o).unwrap(),
        stderr: std::fs::read(&e).unwrap(),
    };
    Ok((output, took))
}

/// Runs one statement with `sqlite3` (the ledger of examples/fenced-write.sh)
/// and returns what it printed.
pub fn sqlite(db: &Path, sql: &str) -> String {
    let out = Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output_within(Duration::from_secs(30));
    assert!(out.status.success(), "sqlite3 {sql:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The value of `export VAR='…'` in what `distlock hold` or `acquire`
/// printed for a shell to eval (quotes stripped, no unescaping).
pub fn exported(stdout: &str, var: &str) -> String {
    let prefix = format!("export {var}=");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {var} in {stdout:?}"))
        .trim_matches('\'')
        .to_owned()
}

/// CMD for `distlock run NAME -- …` that prints the fencing token it got.
pub const ECHO_TOKEN: [&str; 3] = ["sh", "-c", "echo $DISTLOCK_FENCING_TOKEN"];

/// `distlock PRE… run NAME -- sh -c 'echo $DISTLOCK_FENCING_TOKEN'` against
/// `url`, which must exit 0; returns the token CMD printed.
pub fn token_run(url: &str, pre: &[&str], name: &str) -> u64 {
    let mut cmd = distlock_at(url);
    cmd.args(pre).args(["run", name, "--"]).args(ECHO_TOKEN);
    let out = exec(&mut cmd, Duration::from_secs(30));
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("not a token ({e}): {out:?}"))
}

/// A fresh pty pair, 50 rows by `cols` columns. Both ends are
/// close-on-exec, so a child spawned by a test running in parallel never
/// inherits them (and keeps the other test's slave side open).
pub fn open_pty(cols: u16) -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain libc calls; every fd is owned right after it is made.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = OwnedFd::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0, "grantpt");
        assert_eq!(libc::unlockpt(m), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(s >= 0, "open slave: {}", std::io::Error::last_os_error());
        let ws = libc::winsize {
            ws_row: 50,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        libc::ioctl(m, libc::TIOCSWINSZ, &ws);
        (master, OwnedFd::from_raw_fd(s))
    }
}

/// `s` (surrounding white space ignored) as JSON; a panic that shows `s`
/// otherwise.
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s:?}"))
}

/// `PTTL key`: -2 for no key, -1 for a key without expiry.
pub fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", key])
}

pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd::<i64>(&["EXISTS", key]) == 1
}

/// The server's clock in ms (what leases expire by).
pub fn server_ms(server: &RedisServer) -> u64 {
    let t: Vec<String> = server.cmd(&["TIME"]);
    t[0].parse::<u64>().unwrap() * 1000 + t[1].parse::<u64>().unwrap() / 1000
}

/// `export NAME='value'` lines evaluated by sh; returns the named variables.
pub fn eval_exports(exports: &str, vars: &[&str]) -> Vec<String> {
    let script = format!(
        "eval \"$1\" || exit 9; printf '%s\\n' {}",
        vars.iter()
            .map(|v| format!("\"${v}\""))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let out = Command::new("sh")
        .args(["-c", &script, "sh", exports])
        .output_within(LIMIT);
    assert!(out.status.success(), "eval failed: {exports:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Kills a process on drop (a hold renewer a failed test leaves behind).
pub struct KillOnDrop(pub i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0 > 0 && alive(self.0) {
            signal(self.0, libc::SIGCONT);
            signal(self.0, libc::SIGKILL);
        }
    }
}

/// Kills (SIGCONT first, in case it is stopped) and reaps children that a
/// failed assertion left behind.
pub struct Reaper(pub Vec<std::process::Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                signal(c.id() as i32, libc::SIGCONT);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Every `.rs` file under `dir`, at any depth: for the tests that read
/// the sources themselves (architecture, deps).
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
