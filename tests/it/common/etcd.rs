//! A real `etcd` (Debian's etcd-server) on free loopback ports with its own
//! data dir, for the etcd backend's tests. One member per test binary is
//! shared ([`shared`]): tests that use it pick names of their own and do
//! not stop it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{free_port, poll, Bounded};

/// `distlock` pointed at `url` through the backend-neutral `DISTLOCK_URL`,
/// with no DISTLOCK_* variables inherited.
pub fn at(url: &str) -> Command {
    let mut cmd = super::bare_distlock();
    cmd.env("DISTLOCK_URL", url);
    cmd
}

/// An etcd member of our own, killed and reaped on drop.
pub struct EtcdServer {
    child: Child,
    /// Client port on 127.0.0.1.
    pub port: u16,
    /// Peer port, kept for a restart.
    peer: u16,
    /// Data directory (and etcd.log), removed on drop.
    _dir: tempfile::TempDir,
    /// Clients speak TLS to it (`etcds://`).
    tls: Option<ServerTls>,
}

/// A TLS member's certificate and key, and the CA that signed them.
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl EtcdServer {
    /// Starts a one-member cluster and waits until it answers.
    pub fn start() -> EtcdServer {
        Self::start_as(None, Lifetime::Owned)
    }

    /// The same, with clients on TLS only (`https://`, so `etcds://`).
    pub fn start_tls(tls: ServerTls) -> EtcdServer {
        Self::start_as(Some(tls), Lifetime::Owned)
    }

    fn start_as(tls: Option<ServerTls>, lifetime: Lifetime) -> EtcdServer {
        let dir = tempfile::tempdir().unwrap();
        let (port, peer) = (free_port(), free_port());
        let child = spawn_member(dir.path(), port, peer, tls.as_ref(), lifetime);
        let server = EtcdServer {
            child,
            port,
            peer,
            _dir: dir,
            tls,
        };
        server.wait_healthy();
        server
    }

    fn wait_healthy(&self) {
        assert!(
            poll(Duration::from_secs(20), Duration::from_millis(50), || {
                self.try_ctl(&["endpoint", "health"]).is_some()
            }),
            "etcd on port {} did not become healthy",
            self.port
        );
    }

    /// SIGKILLs the member and starts it again on its ports and data dir
    /// (what it committed is kept), then waits until it answers.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn_member(
            self._dir.path(),
            self.port,
            self.peer,
            self.tls.as_ref(),
            Lifetime::Owned,
        );
        self.wait_healthy();
    }

    /// `etcd://127.0.0.1:PORT` (`etcds://` for a TLS member).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The watchers this member has: a waiter's watch shows here.
    pub fn watchers(&self) -> u64 {
        self.metric("etcd_debugging_mvcc_watcher_total")
    }

    /// Starts `distlock run ARGS -- sh -c 'echo $DISTLOCK_FENCING_TOKEN'`
    /// (stdout piped: the token CMD saw) and returns once it sleeps on a
    /// watch: this member's watcher count rose. `what` names what it should
    /// be watching, for the failure message.
    pub fn spawn_token_waiter(&self, args: &[&str], what: &str) -> Child {
        let before = self.watchers();
        let child = at(&self.url())
            .args(args)
            .args(["--", "sh", "-c", "echo $DISTLOCK_FENCING_TOKEN"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            poll(Duration::from_secs(15), Duration::from_millis(20), || {
                self.watchers() > before
            }),
            "the waiter watches {what}"
        );
        child
    }

    /// A counter or gauge of this member's `/metrics`, 0 if absent.
    pub fn metric(&self, name: &str) -> u64 {
        metric(self.port, name)
    }

    /// `etcdctl ARGS` against this member: its stdout, or None on failure.
    pub fn try_ctl(&self, args: &[&str]) -> Option<String> {
        let mut ctl = Command::new("etcdctl");
        ctl.env("ETCDCTL_API", "3").arg("--dial-timeout=2s");
        match &self.tls {
            Some(t) => ctl
                .arg(format!("--endpoints=https://127.0.0.1:{}", self.port))
                .arg("--cacert")
                .arg(&t.ca),
            None => ctl.arg(format!("--endpoints=127.0.0.1:{}", self.port)),
        };
        let out = ctl.args(args).output_within(Duration::from_secs(10));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `etcdctl ARGS`, which must succeed.
    pub fn ctl(&self, args: &[&str]) -> String {
        self.try_ctl(args)
            .unwrap_or_else(|| panic!("etcdctl {args:?} failed"))
    }

    /// The value of `key`, if it exists.
    pub fn get(&self, key: &str) -> Option<String> {
        let v = self.ctl(&["get", key, "--print-value-only"]);
        let v = v.strip_suffix('\n').unwrap_or(&v);
        (!v.is_empty()).then(|| v.to_owned())
    }

    /// The store's current revision.
    pub fn revision(&self) -> u64 {
        let out = self.ctl(&["get", "x", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["header"]["revision"].as_u64().unwrap()
    }
}

/// What one `run --once-per WINDOW NAME` did, CMD being `sh -c` that
/// appends a line to `ran` in `dir` (so `ran` counts the runs of CMD).
pub struct OncePerRun {
    pub out: super::Out,
    pub ran: bool,
    /// When this `run` was started and when it had ended.
    pub launched: Instant,
    pub ended: Instant,
}

/// `run --once-per WINDOW NAME` against `url`, once.
pub fn once_per(url: &str, name: &str, window: &str, dir: &Path) -> OncePerRun {
    let ran = dir.join("ran");
    let count = || {
        std::fs::read_to_string(&ran)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let before = count();
    let script = format!("echo ran >> '{}'", ran.display());
    let launched = Instant::now();
    let out = super::exec(
        at(url).args(["run", "--once-per", window, name, "--", "sh", "-c", &script]),
        super::LIMIT,
    );
    let ended = Instant::now();
    assert_eq!(out.code, 0, "{out:?}");
    OncePerRun {
        ran: count() > before,
        out,
        launched,
        ended,
    }
}

/// `run --once-per WINDOW NAME` every 100 ms until one runs CMD, within
/// `limit`: the one that did.
pub fn next_once_per_run(
    url: &str,
    name: &str,
    window: &str,
    dir: &Path,
    limit: Duration,
) -> OncePerRun {
    let deadline = Instant::now() + limit;
    loop {
        let r = once_per(url, name, window, dir);
        if r.ran {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "CMD did not run again within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `--once-per 10s` window on `url` with `disturb` (a restart, a new
/// leader) done 6 s into it: a run right after finds the job done and
/// says how long ago it ran, truly; the next run comes when the window
/// ends, never before and at most 2 s after (docs/guarantees.md §6).
pub fn window_outlives(url: &str, name: &str, disturb: impl FnOnce()) {
    let dir = tempfile::tempdir().unwrap();
    let first = once_per(url, name, "10s", dir.path());
    assert!(first.ran, "{:?}", first.out);
    std::thread::sleep(
        (first.launched + Duration::from_secs(6)).saturating_duration_since(Instant::now()),
    );
    disturb();
    let skip = once_per(url, name, "10s", dir.path());
    assert!(!skip.ran, "the window is not over: {:?}", skip.out);
    let ago = done_ago_secs(&skip.out.stderr);
    let low = (skip.launched - first.ended).as_secs();
    let high = (skip.ended - first.launched).as_secs();
    assert!(
        (low..=high).contains(&ago),
        "the skip line says {ago}s ago, not {low}s to {high}s: {}",
        skip.out.stderr
    );
    let next = next_once_per_run(url, name, "10s", dir.path(), Duration::from_secs(20));
    assert!(
        next.ended >= first.launched + Duration::from_secs(10),
        "ran again {:?} after the first began, within its window",
        next.ended - first.launched
    );
    assert!(
        next.launched <= first.ended + Duration::from_secs(12),
        "ran again {:?} after the first ended, not within 2s of its 10s window: the window restarted",
        next.launched - first.ended
    );
}

/// The whole seconds of "already done Ns ago" in a `--once-per` skip line.
pub fn done_ago_secs(stderr: &str) -> u64 {
    let ago = stderr
        .split("already done ")
        .nth(1)
        .and_then(|r| r.split(" ago").next())
        .unwrap_or_else(|| panic!("no skip line: {stderr}"));
    humantime::parse_duration(ago)
        .unwrap_or_else(|e| panic!("{ago}: {e}"))
        .as_secs()
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a member ends, and who removes its data dir (64 MiB of
/// preallocated WAL at least).
#[derive(Clone, Copy, PartialEq)]
enum Lifetime {
    /// Dropped by its test: killed, and its `TempDir` removed, on drop;
    /// killed with the test process (PR_SET_PDEATHSIG) if that dies first.
    Owned,
    /// Held in a static, which is never dropped: a shell watches a pipe
    /// whose write end only this process holds, and when it closes (the
    /// test binary exited, however) kills etcd and removes the data dir.
    Shared,
}

/// Starts `etcd` as a one-member cluster on `port` (clients) and `peer`.
fn spawn_member(
    dir: &Path,
    port: u16,
    peer: u16,
    tls: Option<&ServerTls>,
    lifetime: Lifetime,
) -> Child {
    use std::os::unix::process::CommandExt;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let client = format!("{scheme}://127.0.0.1:{port}");
    let peer = format!("http://127.0.0.1:{peer}");
    let mut cmd = match lifetime {
        Lifetime::Owned => Command::new("etcd"),
        Lifetime::Shared => {
            let mut sh = Command::new("sh");
            // Ctrl-C reaches the whole group; the shell must outlive the
            // test binary to clean up.
            sh.arg("-c")
                .arg(r#"trap '' HUP INT QUIT TERM; dir=$1; shift; "$@" </dev/null & read _; kill -9 $!; wait; rm -rf "$dir""#)
                .arg("sh")
                .arg(dir)
                .arg("etcd")
                .stdin(Stdio::piped());
            sh
        }
    };
    cmd.arg("--name=m")
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=m={peer}"))
        .args(tls.map_or_else(Vec::new, |t| {
            vec![
                format!("--cert-file={}", t.cert.display()),
                format!("--key-file={}", t.key.display()),
            ]
        }))
        .arg("--logger=zap")
        .arg("--log-level=error")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("etcd.log")).unwrap());
    if lifetime == Lifetime::Shared {
        return cmd
            .spawn()
            .expect("cannot start etcd (apt-get install etcd-server etcd-client)");
    }
    cmd.stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .expect("cannot start etcd (apt-get install etcd-server etcd-client)")
}

/// The member this test binary shares: it ends, and its data dir goes,
/// when the test binary exits (see [`Lifetime::Shared`]).
pub fn shared() -> &'static EtcdServer {
    static SHARED: OnceLock<EtcdServer> = OnceLock::new();
    SHARED.get_or_init(|| EtcdServer::start_as(None, Lifetime::Shared))
}

/// A counter or gauge of the `/metrics` of the etcd member whose client
/// port is `port` (read with a plain HTTP/1.0 GET: no curl needed), 0 if
/// absent.
pub fn metric(port: u16, name: &str) -> u64 {
    use std::io::{Read, Write};
    let mut body = String::new();
    if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        let _ = s.read_to_string(&mut body);
    }
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}
