//! Fault injection: `distlock run` through the real binary against a real
//! redis-server, with the network, the server or distlock itself failing
//! under it (docs/guarantees.md §2 and §4).
//!
//! How the timing assertions are built. distlock promises that, with `t0`
//! the send time of the last confirmed acquire/renew, CMD gets the kill
//! signal by `t0 + ttl - grace - margin` ("soft") and nothing of CMD is
//! alive at `t0 + ttl - margin` ("hard"), so that nothing of CMD is alive
//! once the lease may have expired in Redis. The tests cannot read `t0`,
//! but the proxy (tests/it/common/proxy.rs) timestamps what passes through
//! it, which brackets it:
//!
//! - distlock sent a request before the proxy finished reading it
//!   (`last_request_read`), so `t0 <= last_request_read`;
//! - the server received it after the proxy began writing it
//!   (`last_forward`), and the lease it set lasts `ttl` from when the
//!   server ran it, so the lease cannot expire server-side before
//!   `last_forward + ttl` (Redis's clock runs at the same rate as ours:
//!   one machine).
//!
//! CMD's death is observed through a FIFO that CMD and its child hold open
//! for writing: the test's reader sees POLLHUP when the last of them is
//! gone, so the observed time is at or after the real death. Every
//! "dead by" assertion therefore compares an observed time that can only
//! be late against a bound that can only be early: slack only in the safe
//! direction, a loaded machine can make such a test fail but never pass
//! wrongly. The only "not before" assertions (no kill before it is due)
//! allow distlock to be early by a stated tolerance, which is the safe
//! direction for a lease.
//!
//! The tests here take one lock (`serial()`), so no two of them compete
//! for the two cores while they measure. libtest starts tests in name
//! order, so while one `faults::` test holds the lock the other test
//! threads mostly wait for it in the next one, not run other groups.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::common::etcd::{at, EtcdServer};
use crate::common::fake;
use crate::common::ha;
use crate::common::not_redis;
use crate::common::proxy;
use crate::common::tls::Pki;
use crate::common::*;
use fake::FakeServer;
use ha::Node;
use proxy::Proxy;

/// How early a kill may come and still pass a "not before it is due"
/// check: covers the time between distlock reading its clock and the
/// proxy reading the request. Early is the safe direction.
const EARLY_OK: Duration = Duration::from_millis(50);

/// One timing-sensitive test at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The lease timings, passed explicitly so the test computes exactly what
/// distlock does (config::Timings).
#[derive(Debug, Clone, Copy)]
struct Timings {
    ttl: Duration,
    renew_every: Duration,
    grace: Duration,
}

impl Timings {
    /// ttl with distlock's defaults, rounded to whole milliseconds.
    fn new(ttl_ms: u64) -> Timings {
        Timings {
            ttl: ms(ttl_ms),
            renew_every: ms(ttl_ms / 3),
            grace: ms((ttl_ms / 4).min(5000)),
        }
    }

    fn with(ttl_ms: u64, renew_every_ms: u64, grace_ms: u64) -> Timings {
        Timings {
            ttl: ms(ttl_ms),
            renew_every: ms(renew_every_ms),
            grace: ms(grace_ms),
        }
    }

    /// ttl/100 + 5ms.
    fn margin(&self) -> Duration {
        self.ttl / 100 + ms(5)
    }

    /// After t0: the kill signal is due.
    fn soft(&self) -> Duration {
        self.ttl - self.grace - self.margin()
    }

    /// After t0: nothing of CMD may be alive.
    fn hard(&self) -> Duration {
        self.ttl - self.margin()
    }

    fn args(&self) -> Vec<String> {
        vec![
            "--ttl".into(),
            format!("{}ms", self.ttl.as_millis()),
            "--renew-every".into(),
            format!("{}ms", self.renew_every.as_millis()),
            "--kill-grace".into(),
            format!("{}ms", self.grace.as_millis()),
        ]
    }
}

/// Watches a FIFO that CMD and its child hold open for writing, and
/// reports the moment the last of them is gone.
struct Watch {
    rx: mpsc::Receiver<Instant>,
    dead: Option<Instant>,
}

impl Watch {
    fn new(dir: &Path) -> Watch {
        let path = dir.join("alive");
        let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: plain mkfifo/open on a path we own; the fd is owned below.
        let fd = unsafe {
            assert_eq!(libc::mkfifo(c.as_ptr(), 0o600), 0, "mkfifo");
            let fd = libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            );
            assert!(fd >= 0, "open fifo");
            OwnedFd::from_raw_fd(fd)
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // Linux reports POLLHUP on a FIFO's read end only once a writer
            // has come and every writer has gone, so a CMD that has not
            // opened it yet is not mistaken for a dead one.
            let give_up = Instant::now() + Duration::from_secs(300);
            let mut buf = [0u8; 64];
            while Instant::now() < give_up {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: poll on one fd we own.
                let n = unsafe { libc::poll(&mut p, 1, 100) };
                let at = Instant::now();
                if n <= 0 {
                    continue;
                }
                // SAFETY: non-blocking read into a local buffer.
                let got = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 64) };
                if got <= 0 && p.revents & libc::POLLHUP != 0 {
                    let _ = tx.send(at);
                    return;
                }
            }
        });
        Watch { rx, dead: None }
    }

    /// When CMD and its child were last seen alive, waiting up to `limit`.
    fn dead_at(&mut self, limit: Duration) -> Option<Instant> {
        if self.dead.is_none() {
            self.dead = self.rx.recv_timeout(limit).ok();
        }
        self.dead
    }

    fn is_dead(&mut self) -> bool {
        if self.dead.is_none() {
            self.dead = self.rx.try_recv().ok();
        }
        self.dead.is_some()
    }
}

/// The start of every CMD: hold the watch FIFO open, start a child that
/// shares it (and CMD's process group), write the pids and the owner.
/// `$1` is the test's directory.
const PRELUDE: &str = r#"d=$1
exec 3>"$d/alive"
"#;

/// CMD's child, then its pids: `KID` is substituted.
const PIDS: &str = r#"KID &
echo $! > "$d/kid.tmp" && mv "$d/kid.tmp" "$d/kid"
echo "$DISTLOCK_OWNER" > "$d/owner.tmp" && mv "$d/owner.tmp" "$d/owner"
echo $$ > "$d/cmd.tmp" && mv "$d/cmd.tmp" "$d/cmd"
"#;

/// Waits for the `go` file, then exits 0 (distlock empties the group).
const UNTIL_GO: &str = r#"while [ ! -e "$d/go" ]; do sleep 0.02; done
exit 0
"#;

/// A `distlock run` under test, with its CMD. Dropping it kills whatever
/// is left, also when the test panics.
struct Run {
    child: Child,
    dir: tempfile::TempDir,
    watch: Watch,
    cmd_pid: i32,
    kid_pid: i32,
    owner: String,
}

impl Run {
    /// Starts `distlock run NAME` against `url` with CMD =
    /// PRELUDE + `setup` + PIDS(`kid`) + `body`, and waits until CMD runs.
    #[allow(clippy::too_many_arguments)]
    fn start(
        url: &str,
        name: &str,
        t: &Timings,
        extra: &[&str],
        setup: &str,
        kid: &str,
        body: &str,
    ) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let watch = Watch::new(dir.path());
        let script = format!("{PRELUDE}{setup}{}{body}", PIDS.replace("KID", kid));
        let mut cmd = bare_distlock();
        cmd.env("DISTLOCK_REDIS_URL", url)
            .arg("run")
            .args(t.args())
            .args(extra)
            .arg(name)
            .args(["--", "sh", "-c", &script, "sh"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap());
        let child = cmd.spawn().unwrap();
        let mut run = Run {
            child,
            dir,
            watch,
            cmd_pid: 0,
            kid_pid: 0,
            owner: String::new(),
        };
        let started = wait_until(LIMIT, || {
            run.dir.path().join("cmd").exists() || run.child.try_wait().unwrap().is_some()
        });
        assert!(started, "CMD never started: {}", run.stderr());
        let line = |f: &str| -> String {
            wait_for_line(&run.dir.path().join(f), Duration::ZERO)
                .unwrap_or_else(|| panic!("CMD never started: {}", run.stderr()))
        };
        let (cmd, kid, owner) = (line("cmd"), line("kid"), line("owner"));
        run.cmd_pid = cmd.trim().parse().unwrap();
        run.kid_pid = kid.trim().parse().unwrap();
        run.owner = owner;
        run
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Lets a CMD running UNTIL_GO finish.
    fn go(&self) {
        std::fs::write(self.dir.path().join("go"), "").unwrap();
    }

    /// distlock's exit code.
    fn wait(&mut self) -> i32 {
        let st = wait_with_timeout(&mut self.child, LIMIT);
        st.code()
            .unwrap_or_else(|| panic!("distlock died of a signal: {st:?}: {}", self.stderr()))
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Asserts that CMD and its child are both gone. The FIFO hangs up
    /// when the kernel closes a dying process's files, a moment before
    /// /proc shows it as a zombie; by then it runs no more code of its own.
    fn assert_cmd_and_child_dead(&self) {
        let gone = |pid| wait_until(ms(1000), || !alive(pid));
        assert!(gone(self.cmd_pid), "CMD {} is alive", self.cmd_pid);
        assert!(gone(self.kid_pid), "CMD's child {} is alive", self.kid_pid);
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        signal(self.pid(), libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.cmd_pid > 0 {
            signal(-self.cmd_pid, libc::SIGCONT);
            signal(-self.cmd_pid, libc::SIGKILL);
        }
    }
}

/// Waits for the first renewals through `proxy` (the first one loads the
/// script: up to three round trips), then for the next reply, and
/// returns right after it was delivered: a renewal has just been
/// confirmed and the next one is a whole period away.
fn align_on_a_renewal(proxy: &Proxy) -> proxy::Stats {
    let n = proxy.stats().replies;
    proxy
        .wait_for_replies(n + 3, LIMIT)
        .expect("no renewals went through the proxy");
    proxy.next_reply(LIMIT).expect("no renewal reply")
}

fn sleep_until(t: Instant) {
    std::thread::sleep(t.saturating_duration_since(Instant::now()));
}

/// `a - b` in milliseconds, signed, for messages.
fn since(a: Instant, b: Instant) -> i128 {
    if a >= b {
        (a - b).as_millis() as i128
    } else {
        -((b - a).as_millis() as i128)
    }
}

/// Prints where CMD's death fell, for the log of a test run.
fn report(what: &str, dead: Instant, reference: Instant, t: &Timings) {
    eprintln!(
        "{what}: CMD dead {} ms after the reference point; kill due at {} ms, \
         hard deadline {} ms, earliest expiry {} ms",
        since(dead, reference),
        t.soft().as_millis(),
        t.hard().as_millis(),
        t.ttl.as_millis()
    );
}

// ---------------------------------------------------------------------------
// The proxy itself

#[test]
fn the_proxy_forwards_delays_blackholes_resets_and_heals() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let connect = || {
        let c = redis::Client::open(proxy.url())
            .unwrap()
            .get_connection_with_timeout(LIMIT)
            .unwrap();
        c.set_read_timeout(Some(ms(300))).unwrap();
        c
    };
    let ping = |c: &mut redis::Connection| redis::cmd("PING").query::<String>(c);

    let mut c = connect();
    assert_eq!(ping(&mut c).unwrap(), "PONG");

    // Latency: each reply is late by at least the latency.
    proxy.set_latency(ms(150));
    let t = Instant::now();
    assert_eq!(ping(&mut c).unwrap(), "PONG");
    assert!(t.elapsed() >= ms(150), "{:?}", t.elapsed());
    proxy.heal();

    // Blackhole: the request is accepted, but no answer and no error
    // arrive: only a timeout; the server does not get the request.
    let before = proxy.stats();
    proxy.blackhole();
    redis::cmd("SET")
        .arg("k")
        .arg("held")
        .exec(&mut c)
        .expect_err("an answer came through the blackhole");
    assert_eq!(proxy.stats().requests, before.requests);
    assert_eq!(server.get("k"), None, "the request reached the server");
    // A new connection is accepted, and hears nothing either: no answer,
    // no close, no reset.
    let mut raw = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    raw.set_read_timeout(Some(ms(300))).unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    let e = std::io::Read::read(&mut raw, &mut [0u8; 16]).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{e}"
    );
    // Heal: what was held is delivered.
    proxy.heal();
    assert!(
        wait_until(LIMIT, || server.get("k").as_deref() == Some("held")),
        "the held request was not delivered"
    );

    // Reset: the client gets an error at once, not a timeout; a new
    // connection works.
    let mut c3 = connect();
    assert_eq!(ping(&mut c3).unwrap(), "PONG");
    proxy.reset_all();
    let t = Instant::now();
    let e = ping(&mut c3).unwrap_err();
    assert!(!e.is_timeout(), "a reset must not look like a timeout: {e}");
    assert!(t.elapsed() < ms(300));
    let mut c4 = connect();
    assert_eq!(ping(&mut c4).unwrap(), "PONG");
    assert!(proxy.stats().accepted >= 4);

    // Bounded: dropping the proxy ends its threads and closes its sockets.
    let port = proxy.port();
    drop(proxy);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(ping(&mut c4).is_err());
}

// ---------------------------------------------------------------------------
// Partitions: a blackhole longer than the TTL, or healed in time

#[test]
fn blackhole_longer_than_the_ttl_kills_cmd_and_its_children_before_the_lease_can_expire() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let t = Timings::new(1500);
    let mut run = Run::start(&proxy.url(), "bh", &t, &[], "", "sleep 1000", UNTIL_GO);

    // Right after a confirmed renewal, the network goes silent for good.
    // That renewal was the last one the server got: nothing passes the
    // proxy once blackhole() returns, so `last_forward` is final.
    align_on_a_renewal(&proxy);
    proxy.blackhole();
    let start = Instant::now();
    let last_forward = proxy.stats().last_forward.unwrap();
    // The lease cannot expire server-side before this (module docs).
    let expiry = last_forward + t.ttl;

    let dead = run
        .watch
        .dead_at(LIMIT)
        .unwrap_or_else(|| panic!("CMD never died: {}", run.stderr()));
    report("blackhole", dead, last_forward, &t);
    assert!(
        dead < expiry,
        "CMD or its child was alive {} ms after the blackhole began, when the \
         lease may have expired server-side {} ms after it: {}",
        since(dead, start),
        since(expiry, start),
        run.stderr()
    );
    assert!(dead - start < t.ttl);
    run.assert_cmd_and_child_dead();
    assert_eq!(run.wait(), 124, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("no renewal of the lease on bh was confirmed in time"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_cmd_that_ignores_the_kill_signal_is_sigkilled_before_the_lease_can_expire() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    // A longer ttl gives a larger margin (45ms) between SIGKILL and expiry.
    let t = Timings::with(4000, 1300, 1000);
    // CMD notes the kill signal and carries on; its child ignores it.
    let mut run = Run::start(
        &proxy.url(),
        "stubborn",
        &t,
        &[],
        r#"trap 'echo term >> "$d/term"' TERM
"#,
        "(trap '' TERM; exec sleep 1000)",
        "while :; do wait; done\n",
    );

    align_on_a_renewal(&proxy);
    proxy.blackhole();
    let start = Instant::now();
    let last_forward = proxy.stats().last_forward.unwrap();
    let expiry = last_forward + t.ttl;

    let dead = run
        .watch
        .dead_at(LIMIT)
        .unwrap_or_else(|| panic!("CMD never died: {}", run.stderr()));
    report("kill signal ignored", dead, last_forward, &t);
    assert!(
        dead < expiry,
        "CMD or its child was alive {} ms after the blackhole began; the \
         lease may have expired {} ms after it: {}",
        since(dead, start),
        since(expiry, start),
        run.stderr()
    );
    // The kill signal came first, then SIGKILL: CMD noted one TERM.
    let term = std::fs::read_to_string(run.dir.path().join("term")).unwrap_or_default();
    assert_eq!(
        term, "term\n",
        "CMD got the kill signal once before SIGKILL"
    );
    run.assert_cmd_and_child_dead();
    assert_eq!(run.wait(), 124, "{}", run.stderr());
}

#[test]
fn healing_a_blackhole_before_the_deadline_keeps_cmd_running_on_the_same_lease() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let t = Timings::new(1500);
    let mut run = Run::start(&proxy.url(), "heal", &t, &[], "", "sleep 1000", UNTIL_GO);
    let token = server.get(&fence("heal"));

    let aligned = align_on_a_renewal(&proxy);
    proxy.blackhole();
    let start = Instant::now();
    let t0 = aligned.last_request_read.unwrap();
    // The next renewal goes out at t0 + 500ms into the blackhole, and
    // waits up to 500ms for its answer. Heal half-way through that
    // wait, well before the kill deadline (t0 + 1105ms).
    sleep_until(start + t.ttl / 2);
    proxy.heal();
    let healed = Instant::now();
    assert!(
        healed < t0 + 2 * t.renew_every,
        "the test overslept ({} ms after t0): the machine is too loaded to \
         heal in time",
        since(healed, t0)
    );

    // Past every deadline that the renewals before the blackhole could
    // give, CMD still runs, and the lease is still ours.
    sleep_until(start + 2 * t.ttl);
    assert!(
        !run.watch.is_dead(),
        "CMD was stopped although the partition healed before the \
         deadline: {}",
        run.stderr()
    );
    assert_eq!(
        server.get(&key("heal")).as_deref(),
        Some(run.owner.as_str())
    );
    run.go();
    assert_eq!(run.wait(), 0, "{}", run.stderr());
    assert!(!run.stderr().contains("stopping"), "{}", run.stderr());
    assert_eq!(server.get(&key("heal")), None, "released at the end");
    assert_eq!(server.get(&fence("heal")), token, "one acquisition only");
}

#[test]
fn healing_a_blackhole_just_before_the_deadline_keeps_cmd_running() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let t = Timings::new(1500);
    let mut run = Run::start(
        &proxy.url(),
        "late-heal",
        &t,
        &[],
        "",
        "sleep 1000",
        UNTIL_GO,
    );

    let aligned = align_on_a_renewal(&proxy);
    proxy.blackhole();
    let t0 = aligned.last_request_read.unwrap();
    // The renewal at t0 + 500ms waits until t0 + 1000ms and is given up;
    // the kill is due at t0 + 1105ms. Heal 60ms before that: a renewal
    // sent then is answered in about a millisecond.
    let heal_at = t0 + t.soft() - ms(60);
    sleep_until(heal_at);
    proxy.heal();
    let healed = Instant::now();
    assert!(
        healed + ms(30) < t0 + t.soft(),
        "the test overslept ({} ms after t0): the machine is too loaded",
        since(healed, t0)
    );

    sleep_until(t0 + 2 * t.ttl);
    assert!(
        !run.watch.is_dead(),
        "CMD was stopped although the partition healed {} ms before the kill \
         deadline: {}",
        since(t0 + t.soft(), healed),
        run.stderr()
    );
    assert_eq!(
        server.get(&key("late-heal")).as_deref(),
        Some(run.owner.as_str())
    );
    run.go();
    assert_eq!(run.wait(), 0, "{}", run.stderr());
}

#[test]
fn a_renewal_lost_in_a_blackhole_is_retried_on_a_new_connection_and_cmd_keeps_running() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    // Renewing every 400ms leaves room for retries before the kill
    // deadline at t0 + 1475ms.
    let t = Timings::with(2000, 400, 500);
    let mut run = Run::start(&proxy.url(), "retry", &t, &[], "", "sleep 1000", UNTIL_GO);

    align_on_a_renewal(&proxy);
    let accepted = proxy.stats().accepted;
    proxy.blackhole();
    let start = Instant::now();
    // The renewal at +400ms times out at +800ms; distlock drops that
    // connection and retries on a new one at +900ms, which the blackhole
    // holds too. Heal at +1000ms, while that retry still waits.
    sleep_until(start + ms(1000));
    proxy.heal();

    sleep_until(start + 2 * t.ttl);
    assert!(!run.watch.is_dead(), "CMD was stopped: {}", run.stderr());
    assert!(
        proxy.stats().accepted > accepted,
        "distlock never opened a new connection"
    );
    assert_eq!(
        server.get(&key("retry")).as_deref(),
        Some(run.owner.as_str())
    );
    run.go();
    assert_eq!(run.wait(), 0, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("warning"),
        "the lost renewal is reported: {err}"
    );
    assert!(
        err.contains("renewal of retry confirmed again"),
        "and its recovery: {err}"
    );
}

// ---------------------------------------------------------------------------
// Slow replies

#[test]
fn replies_delayed_to_0_8_ttl_stop_cmd_when_due_and_not_before() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let t = Timings::new(1500);
    let mut run = Run::start(&proxy.url(), "slow", &t, &[], "", "sleep 1000", UNTIL_GO);

    // Right after a confirmed renewal (sent at t0 <= `sent`), every reply
    // starts arriving 0.8 × ttl late: later than any renewal may wait
    // (min(renew_every, time to the kill deadline)), so none is confirmed
    // again, although the server runs each one when it is sent.
    let aligned = align_on_a_renewal(&proxy);
    proxy.set_latency(t.ttl * 4 / 5);
    let sent = aligned.last_request_read.unwrap();
    let requests = aligned.requests;

    let dead = run
        .watch
        .dead_at(LIMIT)
        .unwrap_or_else(|| panic!("CMD never died: {}", run.stderr()));
    report("replies 0.8 ttl late", dead, sent, &t);
    // Not before it is due: the kill signal is due at t0 + soft.
    assert!(
        dead + EARLY_OK >= sent + t.soft(),
        "CMD was stopped {} ms after the last confirmed renewal; the kill \
         was due after {} ms: {}",
        since(dead, sent),
        t.soft().as_millis(),
        run.stderr()
    );
    // When it is due: CMD dies of the kill signal, sent by t0 + soft;
    // nothing of it may be alive at t0 + hard, whatever the late replies
    // say (counted from their arrival they would promise more).
    assert!(
        dead < sent + t.hard(),
        "CMD was alive {} ms after the last confirmed renewal; the hard \
         deadline is {} ms: {}",
        since(dead, sent),
        t.hard().as_millis(),
        run.stderr()
    );
    run.assert_cmd_and_child_dead();
    assert!(
        proxy.stats().requests > requests,
        "distlock kept trying to renew"
    );
    assert_eq!(run.wait(), 124, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("no renewal of the lease on slow was confirmed in time"),
        "{err}"
    );
    assert!(!err.contains("confirmed again"), "{err}");
}

#[test]
fn delayed_replies_count_from_their_send_time_not_their_arrival() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    // Renewals every second may wait 775ms for their answer
    // (min(renew_every, t0 + soft - send time) = min(1000, 1775 - 1000)).
    let t = Timings::with(2000, 1000, 200);
    let latency = ms(600);
    let mut run = Run::start(&proxy.url(), "late", &t, &[], "", "sleep 1000", UNTIL_GO);
    align_on_a_renewal(&proxy);

    // Answers arrive 600ms late, yet in time: renewals are confirmed and
    // CMD keeps running.
    proxy.set_latency(latency);
    let n = proxy.stats().replies;
    proxy.wait_for_replies(n + 2, LIMIT).unwrap();
    assert!(!run.watch.is_dead(), "{}", run.stderr());
    assert!(!run.stderr().contains("warning"), "{}", run.stderr());

    // Right after the next late answer arrives, the network goes silent.
    // That renewal reached the server 600ms before its answer reached
    // distlock. Counted from the send time, CMD is stopped by
    // t0 + soft = +1775ms, before the lease can expire at +2000ms;
    // counted from the arrival of the answer, it would still be alive
    // after +2000ms + 600ms - 225ms.
    let aligned = proxy.next_reply(LIMIT).unwrap();
    proxy.blackhole();
    let stats = proxy.stats();
    let expiry = stats.last_forward.unwrap() + t.ttl;
    let sent = aligned.last_request_read.unwrap();
    assert!(
        aligned.last_reply.unwrap() >= sent + latency,
        "the answer was not delayed"
    );

    let dead = run
        .watch
        .dead_at(LIMIT)
        .unwrap_or_else(|| panic!("CMD never died: {}", run.stderr()));
    report("replies 0.3 ttl late, then blackhole", dead, sent, &t);
    assert!(
        dead < expiry,
        "CMD was alive {} ms after its last confirmed renewal was sent; the \
         lease may have expired server-side after {} ms: {}",
        since(dead, sent),
        since(expiry, sent),
        run.stderr()
    );
    assert!(
        dead + EARLY_OK >= sent + t.soft(),
        "stopped {} ms after the last confirmed renewal was sent, before the \
         kill was due ({} ms): {}",
        since(dead, sent),
        t.soft().as_millis(),
        run.stderr()
    );
    assert_eq!(run.wait(), 124, "{}", run.stderr());
}

// ---------------------------------------------------------------------------
// Connection resets

#[test]
fn connection_resets_mid_run_reconnect_and_keep_the_lease() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let t = Timings::new(1500);
    let mut run = Run::start(&proxy.url(), "rst", &t, &[], "", "sleep 1000", UNTIL_GO);
    let token = server.get(&fence("rst"));

    align_on_a_renewal(&proxy);
    for round in 0..3 {
        // Right after a confirmed renewal (the script is loaded by now).
        proxy.next_reply(LIMIT).expect("no renewal reply");
        let accepted = proxy.stats().accepted;
        proxy.reset_all();
        // The next renewal fails at once on the reset connection and is
        // retried on a new one, long before the kill deadline.
        let n = proxy.stats().replies;
        assert!(
            proxy.wait_for_replies(n, LIMIT).is_some(),
            "round {round}: no renewal after the reset: {}",
            run.stderr()
        );
        assert!(proxy.stats().accepted > accepted, "round {round}");
        assert!(!run.watch.is_dead(), "round {round}: {}", run.stderr());
        assert_eq!(server.get(&key("rst")).as_deref(), Some(run.owner.as_str()));
    }
    // Still held a whole ttl later.
    std::thread::sleep(t.ttl);
    assert!(!run.watch.is_dead(), "{}", run.stderr());
    assert_eq!(server.get(&key("rst")).as_deref(), Some(run.owner.as_str()));

    run.go();
    assert_eq!(run.wait(), 0, "{}", run.stderr());
    let err = run.stderr();
    assert!(err.contains("renewal of rst confirmed again"), "{err}");
    assert!(!err.contains("stopping"), "{err}");
    assert_eq!(server.get(&key("rst")), None);
    assert_eq!(server.get(&fence("rst")), token, "one acquisition only");
}

// ---------------------------------------------------------------------------
// Redis restarts

#[test]
fn redis_restarted_without_persistence_loses_the_lease_renewal_says_not_owner_and_cmd_is_stopped() {
    let _serial = serial();
    let mut server = Node::data(&[]);
    let t = Timings::new(3000);
    let mut run = Run::start(
        &server.url(),
        "amnesia",
        &t,
        &[],
        "",
        "sleep 1000",
        UNTIL_GO,
    );
    assert_eq!(
        server.get(&key("amnesia")).as_deref(),
        Some(run.owner.as_str())
    );
    let first: u64 = server
        .get(&fence("amnesia"))
        .expect("a token")
        .parse()
        .unwrap();

    server.kill();
    server.restart(&[]);
    let restarted = Instant::now();
    assert_eq!(server.get(&key("amnesia")), None, "the lease is gone");

    // The next renewal fails on the dead connection, is retried on a new
    // one, and the new server says: not the owner. CMD is stopped then,
    // not at the deadline.
    let dead = run
        .watch
        .dead_at(LIMIT)
        .unwrap_or_else(|| panic!("CMD never died: {}", run.stderr()));
    assert!(
        dead - restarted < t.soft(),
        "CMD died {} ms after the restart",
        (dead - restarted).as_millis()
    );
    run.assert_cmd_and_child_dead();
    assert_eq!(run.wait(), 124, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("the lease on amnesia is gone (expired or taken over)"),
        "renewal said not owner: {err}"
    );
    assert!(!err.contains("was confirmed in time"), "{err}");

    // The fencing counter went with it, yet the next holder's token is
    // larger: it is at least the server's clock in µs.
    assert_eq!(server.get(&fence("amnesia")), None);
    let next = token_run(&server.url(), &[], "amnesia");
    assert!(next > first, "{next} after {first}");
}

#[test]
fn redis_restarted_with_appendonly_keeps_the_lease_when_it_comes_back_in_time() {
    let _serial = serial();
    let mut server = Node::data(&["--appendonly", "yes"]);
    let t = Timings::new(3000);
    let mut run = Run::start(
        &server.url(),
        "durable",
        &t,
        &[],
        "",
        "sleep 1000",
        UNTIL_GO,
    );
    assert_eq!(
        server.get(&key("durable")).as_deref(),
        Some(run.owner.as_str())
    );
    let first: u64 = server
        .get(&fence("durable"))
        .expect("a token")
        .parse()
        .unwrap();

    server.kill();
    server.restart(&[]);
    let restarted = Instant::now();
    assert_eq!(
        server.get(&key("durable")).as_deref(),
        Some(run.owner.as_str()),
        "the lease survived the restart"
    );

    // Past every deadline the renewals before the restart could give:
    // renewals go on against the restarted server.
    sleep_until(restarted + t.ttl + t.renew_every);
    assert!(!run.watch.is_dead(), "CMD was stopped: {}", run.stderr());
    assert_eq!(
        server.get(&key("durable")).as_deref(),
        Some(run.owner.as_str())
    );
    run.go();
    assert_eq!(run.wait(), 0, "{}", run.stderr());
    assert!(
        run.stderr().contains("renewal of durable confirmed again"),
        "{}",
        run.stderr()
    );
    assert_eq!(server.get(&key("durable")), None, "released at the end");
    // The counter survived too: the next holder gets a larger token.
    assert_eq!(server.get(&fence("durable")), Some(first.to_string()));
    let next = token_run(&server.url(), &[], "durable");
    assert!(next > first, "{next} after {first}");
}

// ---------------------------------------------------------------------------
// distlock itself frozen past its TTL

/// The commands a redis-server runs, as MONITOR reports them, with the
/// time each line arrived.
struct Monitor {
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    stream: TcpStream,
}

impl Monitor {
    fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok, "+OK\r\n");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                l.lock().unwrap().push((Instant::now(), line));
            }
        });
        Monitor { lines, stream }
    }

    /// Lines that arrived after `t`.
    fn since(&self, t: Instant) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _)| *at > t)
            .map(|(_, l)| l.clone())
            .collect()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// The quoted arguments of a MONITOR line.
fn monitor_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = None::<String>;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (&mut cur, c) {
            (None, '"') => cur = Some(String::new()),
            (Some(s), '\\') => {
                if let Some(n) = chars.next() {
                    s.push(n);
                }
            }
            (Some(_), '"') => out.push(cur.take().unwrap()),
            (Some(s), c) => s.push(c),
            (None, _) => {}
        }
    }
    out
}

/// Whether a MONITOR line is a renewal by `owner`: the renew script is
/// called with the lock, its metadata and the fence (for its type check
/// only), then the owner.
fn is_renewal_by(line: &str, owner: &str) -> bool {
    let a = monitor_args(line);
    a.len() >= 7
        && a[0] == "EVALSHA"
        && a[2] == "3"
        && a[4].ends_with(":meta")
        && a[5].ends_with(":fence")
        && a[6] == owner
}

fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

#[test]
fn distlock_stopped_past_its_ttl_stops_cmd_at_once_on_resume_without_renewing_and_the_late_write_is_fenced_off(
) {
    let _serial = serial();
    let server = RedisServer::start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fenced-write.sh");
    let data = tempfile::tempdir().unwrap();
    let db = data.path().join("ledger.db");
    sqlite(
        &db,
        "CREATE TABLE ledger (id INTEGER PRIMARY KEY, value TEXT, fence INTEGER NOT NULL);
         INSERT INTO ledger VALUES (1, NULL, 0);",
    );
    let t = Timings::new(1500);
    // CMD A keeps running while its distlock is stopped: on `go` it tries
    // its write (its token), notes the outcome and carries on.
    let body = format!(
        r#"while [ ! -e "$d/go" ]; do sleep 0.02; done
'{}' '{}' from-A 2>> "$d/write.err"; echo $? > "$d/write.status"
while :; do sleep 1; done
"#,
        script.display(),
        db.display()
    );
    let mut a = Run::start(&server.url(), "ledger", &t, &[], "", "sleep 1000", &body);
    let token_a: u64 = server
        .get(&fence("ledger"))
        .expect("a token")
        .parse()
        .unwrap();
    let origin = Instant::now();
    let monitor = Monitor::start(server.port);
    let renewals_by_a = || {
        monitor
            .since(origin)
            .iter()
            .filter(|l| is_renewal_by(l, &a.owner))
            .count()
    };
    // Right after a renewal by A (so none is in flight), freeze distlock A
    // and its guardian (which would otherwise kill CMD at the deadline, as
    // it does when distlock alone is stopped): CMD A runs on, unsupervised,
    // as it can when the rest of a host is starved.
    let guardian = guardian_of(a.pid());
    assert!(
        wait_until(LIMIT, || renewals_by_a() >= 1),
        "no renewal by A seen"
    );
    let n = renewals_by_a();
    assert!(wait_until(LIMIT, || renewals_by_a() > n));
    signal(a.pid(), libc::SIGSTOP);
    signal(guardian, libc::SIGSTOP);
    assert!(wait_until(LIMIT, || process_state(a.pid()) == Some('T')
        && process_state(guardian) == Some('T')));
    let stopped = Instant::now();

    // A's lease expires server-side; holder B takes the lock with a
    // larger token and writes.
    assert!(
        wait_until(LIMIT, || server.cmd::<i64>(&["EXISTS", &key("ledger")])
            == 0),
        "A's lease never expired"
    );
    let b = bare_distlock()
        .env("DISTLOCK_REDIS_URL", server.url())
        .args(["run", "ledger", "--"])
        .arg(&script)
        .arg(&db)
        .arg("from-B")
        .stdin(Stdio::null())
        .output_within(LIMIT);
    assert_eq!(b.status.code(), Some(0), "{b:?}");
    let token_b: u64 = server
        .get(&fence("ledger"))
        .expect("a token")
        .parse()
        .unwrap();
    assert!(token_b > token_a, "{token_b} after {token_a}");
    assert!(
        String::from_utf8_lossy(&b.stdout).contains(&format!("with token {token_b}")),
        "{b:?}"
    );
    let ledger_b = format!("from-B|{token_b}\n");
    assert_eq!(sqlite(&db, "SELECT value, fence FROM ledger"), ledger_b);

    // The late holder's CMD writes with its older token: refused.
    a.go();
    let status = wait_for_line(&a.dir.path().join("write.status"), LIMIT)
        .expect("CMD A never tried its write");
    assert_eq!(status, "1", "the stale write must fail");
    let err = std::fs::read_to_string(a.dir.path().join("write.err")).unwrap();
    assert!(err.contains(&format!("token {token_a} is stale")), "{err}");
    assert_eq!(sqlite(&db, "SELECT value, fence FROM ledger"), ledger_b);
    assert!(!a.watch.is_dead(), "CMD A is still running");

    // distlock A resumes: its deadline passed long ago, so it stops CMD
    // at once, and sends no renewal first.
    signal(a.pid(), libc::SIGCONT);
    let resumed = Instant::now();
    let dead = a
        .watch
        .dead_at(LIMIT)
        .unwrap_or_else(|| panic!("CMD A never died: {}", a.stderr()));
    assert!(
        dead - resumed < t.grace,
        "CMD A died {} ms after distlock A resumed",
        (dead - resumed).as_millis()
    );
    a.assert_cmd_and_child_dead();
    signal(guardian, libc::SIGCONT);
    assert_eq!(a.wait(), 124, "{}", a.stderr());
    assert!(
        a.stderr()
            .contains("no renewal of the lease on ledger was confirmed in time"),
        "{}",
        a.stderr()
    );
    let renewals: Vec<String> = monitor
        .since(stopped)
        .into_iter()
        .filter(|l| is_renewal_by(l, &a.owner))
        .collect();
    assert!(
        renewals.is_empty(),
        "distlock A renewed after it was stopped: {renewals:?}"
    );
    // A's release found B's lease gone and touched nothing; the counter
    // stays at B's token.
    assert_eq!(sqlite(&db, "SELECT value, fence FROM ledger"), ledger_b);
    assert_eq!(server.get(&fence("ledger")), Some(token_b.to_string()));
}

// ---------------------------------------------------------------------------
// distlock killed outright

#[test]
fn distlock_killed_with_sigkill_takes_cmd_and_its_child_with_it_and_the_lease_expires_by_itself() {
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let t = Timings::new(1500);
    let mut run = Run::start(&proxy.url(), "killed", &t, &[], "", "sleep 1000", UNTIL_GO);
    let first: u64 = server
        .get(&fence("killed"))
        .expect("a token")
        .parse()
        .unwrap();
    align_on_a_renewal(&proxy);

    // No release, no renewal ever again: the lease lasts until the last
    // renewal the server got, plus the ttl.
    let _ = run.child.kill();
    let killed = Instant::now();
    let expiry = proxy.stats().last_forward.unwrap() + t.ttl;
    let dead = run
        .watch
        .dead_at(LIMIT)
        .unwrap_or_else(|| panic!("CMD outlived distlock: {}", run.stderr()));
    eprintln!(
        "SIGKILL: CMD dead {} ms after distlock was killed",
        since(dead, killed)
    );
    assert!(dead < expiry, "CMD outlived the lease");
    run.assert_cmd_and_child_dead();
    let _ = run.child.wait();

    // The lease expires by itself; the next holder gets a larger token.
    assert_eq!(
        server.get(&key("killed")).as_deref(),
        Some(run.owner.as_str()),
        "nobody released it"
    );
    assert!(wait_until(LIMIT, || server.get(&key("killed")).is_none()));
    let next = token_run(&server.url(), &[], "killed");
    assert!(next > first, "{next} after {first}");
}

#[test]
fn a_grant_answered_after_the_soft_deadline_is_given_back_and_asked_again_within_the_wait() {
    // On etcd, `run --once-per` asks in two calls (the done mark, then the
    // lock), each within its own timeout (the soft deadline: 2955 ms for a
    // 4 s ttl): with every answer 1.2 s late, the grant comes after the
    // soft deadline, and no call times out. (A Redis acquisition is one
    // call, whose deadline is the soft deadline: late there takes a
    // starved CPU, as in the lab.)
    let _serial = serial();
    let (out, _, late, _etcd) = late_grant(&["--wait", "30s", "--ttl", "4s"], "slow");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // CMD ran once, under a grant after the late one.
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(
        token > late,
        "token {token}, the late grant's {late}: {stderr}"
    );
}

/// `run --once-per 1h ARGS NAME -- echo token` on etcd, its answers 1.2 s
/// late until the grant is in etcd (the answer still in the proxy: later
/// answers come at once): its output, how long it ran after that, the
/// late grant's revision and the member.
fn late_grant(args: &[&str], name: &str) -> (Output, Duration, u64, EtcdServer) {
    let etcd = EtcdServer::start();
    let proxy = Proxy::start(etcd.port);
    proxy.set_latency(ms(1200));
    let mut run = at(&format!("etcd://127.0.0.1:{}", proxy.port()))
        .args(["run", "--once-per", "1h"])
        .args(args)
        .args([name, "--"])
        .args(ECHO_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(LIMIT, || etcd.get(&key(name)).is_some()));
    let late = etcd.revision();
    proxy.heal();
    let healed = Instant::now();
    wait_with_timeout(&mut run, LIMIT);
    let out = run.wait_with_output().unwrap();
    (out, healed.elapsed(), late, etcd)
}

/// [`late_grant`] with `--ttl 6s --min-hold HOLD`. The soft deadline (and
/// each call's timeout) is about 4.45 s; the acquisition's call is three
/// round trips with --min-hold (the lease, the hold lease, the
/// transaction), 3.6 s, in time; the done mark's call before it makes the
/// grant late.
fn late_grant_with_min_hold(
    hold: &str,
    args: &[&str],
    name: &str,
) -> (Output, Duration, u64, EtcdServer) {
    let args = [&["--ttl", "6s", "--min-hold", hold], args].concat();
    late_grant(&args, name)
}

/// As above, with `--min-hold`: the late grant, which CMD never ran
/// under, is given back by a plain delete and taken again within the
/// wait. The release used to keep it for the minimum hold (moved onto the
/// hold lease): a fair waiter then waited on its own key until its wait
/// ran out (75), and an `any` waiter with a hold shorter than the ttl was
/// refused "etcd cannot lengthen a lease" (2).
fn a_late_grant_with_min_hold_is_given_back_at_once(order: &str, hold: &str) {
    let _serial = serial();
    let name = format!("slow-{order}");
    let args = ["--wait", "15s", "--wait-order", order];
    let (out, took, late, _etcd) = late_grant_with_min_hold(hold, &args, &name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(
        token > late,
        "token {token}, the late grant's {late}: {stderr}"
    );
    // Taken again at once, not after the minimum hold.
    assert!(took < Duration::from_secs(10), "{took:?}: {stderr}");
}

#[test]
fn a_late_grant_with_min_hold_is_given_back_and_a_fair_waiter_takes_the_lock_within_the_wait() {
    a_late_grant_with_min_hold_is_given_back_at_once("fair", "60s");
}

#[test]
fn a_late_grant_with_a_min_hold_shorter_than_the_ttl_is_given_back_and_taken_again_in_any_order() {
    a_late_grant_with_min_hold_is_given_back_at_once("any", "4s");
}

/// With no wait left, the late grant is refused (125, "answered too
/// slowly") and released, CMD never having run: the name is free at once,
/// not kept for the minimum hold.
#[test]
fn a_late_grant_refused_without_a_wait_is_not_kept_for_its_min_hold() {
    let _serial = serial();
    let name = "slow-refused";
    let (out, _, _, etcd) = late_grant_with_min_hold("60s", &[], name);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("answered too slowly"), "{stderr}");
    assert!(out.stdout.is_empty(), "CMD never ran");
    assert_eq!(etcd.get(&key(name)), None, "{stderr}");
}

// ---------------------------------------------------------------------------
// Contention: 50 processes, 500 acquisitions

#[test]
fn fifty_concurrent_waiters_make_five_hundred_acquisitions_without_overlap_in_token_order() {
    const PROCS: usize = 50;
    const RUNS: usize = 10;
    let _serial = serial();
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0\n").unwrap();
    // Shell builtins only: appends are ordered by the kernel (O_APPEND),
    // so the log's order is the order the holders acted in; the counter
    // is a read-modify-write that loses updates if two holders overlap.
    let script = r#"echo "start $DISTLOCK_FENCING_TOKEN" >> "$1"
read n < "$2"; echo $((n + 1)) > "$2"
echo "end $DISTLOCK_FENCING_TOKEN" >> "$1""#;
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..PROCS {
            s.spawn(|| {
                for _ in 0..RUNS {
                    let mut child = distlock(&server)
                        .args(["run", "--wait", "forever", "--ttl", "10s", "crowd"])
                        .args(["--", "sh", "-c", script, "sh"])
                        .arg(&log)
                        .arg(&counter)
                        .stdin(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap();
                    let st = wait_with_timeout(&mut child, Duration::from_secs(240));
                    let mut err = String::new();
                    let _ =
                        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
                    assert_eq!(st.code(), Some(0), "a run failed: {err}");
                }
            });
        }
    });
    eprintln!(
        "{} acquisitions by {PROCS} processes in {:?}",
        PROCS * RUNS,
        started.elapsed()
    );

    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * PROCS * RUNS);
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let start: u64 = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("overlap at {pair:?}"))
            .parse()
            .unwrap();
        let end: u64 = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("overlap at {pair:?}"))
            .parse()
            .unwrap();
        assert_eq!(start, end, "two holders overlapped: {pair:?}");
        assert!(start > last, "token {start} came after {last}");
        last = start;
    }
    let tokens: BTreeSet<u64> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("start "))
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(
        tokens.len(),
        PROCS * RUNS,
        "every acquisition its own token"
    );
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().trim(),
        (PROCS * RUNS).to_string(),
        "an update was lost: two holders overlapped"
    );
    assert_eq!(server.get(&key("crowd")), None);
    assert_eq!(
        server.get(&fence("crowd")),
        tokens.last().map(u64::to_string)
    );
    assert_eq!(
        server.cmd::<i64>(&["ZCARD", "distlock:{crowd}:queue"]),
        0,
        "nobody is left in the queue"
    );
}

// ---------------------------------------------------------------------------
// Soak

/// VmRSS of a process, in KiB; None once it has exited.
fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs CMD for `secs` seconds under `--ttl 300ms` (renewing every
/// 100ms), and checks the renewal count, that the lease was never lost,
/// and that distlock's RSS did not grow.
fn soak(secs: u64) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let t = Timings::new(300);
    let mut child = distlock(&server)
        .args(["run", "-vv"])
        .args(t.args())
        .args(["soak", "--", "sleep", &secs.to_string()])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let begin = Instant::now();
    // Measure once the first renewals have loaded the script and every
    // buffer has been used.
    std::thread::sleep(ms(1000));
    let early = |child: &mut Child| {
        let st = wait_with_timeout(child, LIMIT);
        panic!(
            "distlock ended early ({st:?}): {}",
            std::fs::read_to_string(&err_path).unwrap()
        )
    };
    let Some(rss_start) = rss_kib(pid) else {
        early(&mut child)
    };
    let mut owner_changes = 0;
    let first_owner = server.get(&key("soak"));
    // The last reading a second before CMD's time is up, so a late
    // wake-up of this thread cannot miss distlock.
    while begin.elapsed() + ms(1000) < Duration::from_secs(secs) {
        std::thread::sleep(ms(100));
        if server.get(&key("soak")) != first_owner {
            owner_changes += 1;
        }
    }
    let Some(rss_end) = rss_kib(pid) else {
        early(&mut child)
    };
    let st = wait_with_timeout(&mut child, LIMIT);
    let elapsed = begin.elapsed();
    let err = std::fs::read_to_string(&err_path).unwrap();
    let renewals = err.lines().filter(|l| l.contains("renewed soak")).count();
    let warnings = err.lines().filter(|l| l.contains("warning")).count();
    let expected = (secs * 1000 / t.renew_every.as_millis() as u64) as usize;
    eprintln!(
        "soak {secs}s: {renewals} renewals (expected ~{expected}), {warnings} failed \
         renewals, RSS {rss_start} KiB -> {rss_end} KiB, exit {st:?} after {elapsed:?}"
    );
    assert_eq!(st.code(), Some(0), "the lease was lost: {err}");
    assert_eq!(owner_changes, 0, "the lock changed hands");
    assert!(first_owner.is_some());
    assert!(
        renewals * 10 >= expected * 9 && renewals <= expected + 5,
        "{renewals} renewals, expected about {expected}"
    );
    assert!(
        rss_end <= rss_start + 512,
        "RSS grew from {rss_start} KiB to {rss_end} KiB"
    );
    assert_eq!(server.get(&key("soak")), None);
}

#[test]
fn soak_5s_with_a_300ms_ttl_renews_every_period_and_rss_stays_flat() {
    let _serial = serial();
    soak(5);
}

/// The full soak from the issue: 30 s, ~300 renewals. Too long for every
/// `cargo test`, so it is ignored (and listed as such) unless asked for:
/// `cargo test --test it faults:: -- --ignored --nocapture`.
#[test]
#[ignore = "30 s soak: run with `cargo test --test it faults:: -- --ignored`"]
fn soak_30s_with_a_300ms_ttl() {
    let _serial = serial();
    soak(30);
}

// ---------------------------------------------------------------------------
// Servers that hang or trickle (guarantees.md §8)

/// Every call has a deadline for the whole call: a server that sends one
/// byte of a reply every 200 ms (so that no single read ever times out)
/// holds neither an acquisition nor a manual subcommand past the 5 s
/// timeout. Before the fix each of them hung until killed.
#[test]
fn a_server_that_trickles_bytes_holds_no_subcommand_past_its_deadline() {
    let _s = serial();
    let fake = FakeServer::trickling();
    let cases: [&[&str]; 5] = [
        &["acquire", "t"],
        &["run", "t", "--", "true"],
        &["inspect", "t"],
        &["release", "--owner", "o", "t"],
        &["renew", "--owner", "o", "t"],
    ];
    let outs: Vec<Out> = std::thread::scope(|s| {
        let running: Vec<_> = cases
            .iter()
            .map(|args| s.spawn(|| exec(distlock_at(&fake.url()).args(*args), ms(20_000))))
            .collect();
        running.into_iter().map(|h| h.join().unwrap()).collect()
    });
    each_ended_by_its_deadline(&cases, outs);
}

/// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 end an
/// acquisition at once with 128+N, whether the server is silent or
/// trickles bytes, and CMD never runs. Before the fix the signal waited
/// for the 5 s timeout and distlock exited 125 (or, trickling, never).
#[test]
fn signals_end_an_acquisition_at_once_whatever_the_server_is_doing() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    for fake in [FakeServer::silent(), FakeServer::trickling()] {
        for sig in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            let before = fake.received();
            let mut child = distlock_at(&fake.url())
                .args(["run", "x", "--", "sh", "-c", r#": > "$1""#, "sh"])
                .arg(&mark)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // The request is out: distlock waits for the reply.
            assert!(wait_until(LIMIT, || fake.received() > before));
            let sent = Instant::now();
            signal(child.id() as i32, sig);
            let st = wait_with_timeout(&mut child, LIMIT);
            let took = sent.elapsed();
            assert_eq!(st.code(), Some(128 + sig), "signal {sig}");
            assert!(took < ms(1_000), "signal {sig}: took {took:?}");
            assert!(!mark.exists());
        }
    }
}

// ---------------------------------------------------------------------------
// What a refusing or wrong server's reply reads like (guarantees.md §8)
// ---------------------------------------------------------------------------

/// A failure told in plain words: exit 125, one `distlock: ` line that
/// says `meaning` (any case), and none of the client library's or the
/// server's internals: no error kinds, quoted error codes, script hashes or
/// script line numbers, parser positions, debug dumps.
fn assert_plain_failure(out: &Out, meaning: &str) {
    assert_eq!(out.code, 125, "{out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {out:?}");
    let line = lines[0];
    assert!(line.starts_with("distlock: "), "{line}");
    assert!(
        line.to_lowercase().contains(&meaning.to_lowercase()),
        "{meaning:?} not in: {line}"
    );
    for internal in [
        "Server(",
        "ResponseError",
        "ReadOnly:",
        "\"OOM\"",
        "Extension",
        "@user_script",
        "script: ",
        "Incompatible type",
        "Parse error",
        "Unexpected `",
        " - Io",
        "Some(",
        "Kind",
        "{",
    ] {
        assert!(!line.contains(internal), "{internal:?} in: {line}");
    }
    let hex_run = line
        .split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(hex_run < 40, "a script hash in: {line}");
}

/// `distlock ARGS` against `url`, bounded.
fn against(url: &str, args: &[&str]) -> Out {
    exec(distlock_at(url).args(args), LIMIT)
}

/// The subcommands that write, as a user types them.
const WRITERS: [&[&str]; 3] = [
    &["run", "x", "--", "true"],
    &["acquire", "x"],
    &["hold", "--ttl", "5s", "x"],
];

#[test]
fn a_read_only_replica_is_named_as_one() {
    let _serial = serial();
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    assert!(wait_until(LIMIT, || {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    }));
    for args in WRITERS {
        let out = against(&replica.url(), args);
        assert_plain_failure(&out, "read-only replica");
    }
    // A held lock on the master, replicated: --force would delete it.
    let out = against(&master.url(), &["acquire", "y"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(wait_until(LIMIT, || replica.get("distlock:{y}").is_some()));
    let out = against(&replica.url(), &["release", "--force", "y"]);
    assert_plain_failure(&out, "read-only replica");
}

#[test]
fn a_server_out_of_memory_says_so() {
    let _serial = serial();
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    for args in WRITERS {
        let out = against(&server.url(), args);
        assert_plain_failure(&out, "out of memory");
    }
}

#[test]
fn a_denied_command_says_permission() {
    let _serial = serial();
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "bob", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-scan",
    ]);
    let url = format!("redis://bob:pw@127.0.0.1:{}", server.port);
    for args in [
        &["run", "x", "--", "true"][..],
        &["acquire", "x"],
        &["list"],
    ] {
        let out = against(&url, args);
        assert_plain_failure(&out, "permission");
    }
}

/// `list` reads a semaphore with commands a plain lock does not need
/// (ZRANGEBYSCORE among them). A user denied one of them used to get the
/// plain locks and exit 0, the held semaphore silently left out: an
/// operator asking who holds what was told a lie by omission. Now it is
/// the same one line and 125 as any other refusal.
#[test]
fn list_that_may_not_read_a_semaphore_says_so_instead_of_leaving_it_out() {
    let _serial = serial();
    let server = RedisServer::start();
    for args in [
        &["acquire", "--limit", "2", "sem"][..],
        &["acquire", "plain"],
    ] {
        let out = against(&server.url(), args);
        assert_eq!(out.code, 0, "{out:?}");
    }
    let _: () = server.cmd(&[
        "ACL",
        "SETUSER",
        "carol",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-zrangebyscore",
    ]);
    let url = format!("redis://carol:pw@127.0.0.1:{}", server.port);
    let out = against(&url, &["list"]);
    assert_plain_failure(&out, "permission");
    assert!(
        out.stdout.is_empty() || !out.stdout.contains("sem"),
        "{out:?}"
    );
}

#[test]
fn a_database_the_server_does_not_have_is_named() {
    let _serial = serial();
    let server = RedisServer::start();
    let url = format!("{}/99", server.url());
    for args in [&["acquire", "x"][..], &["list"]] {
        let out = against(&url, args);
        assert_plain_failure(&out, "database");
    }
}

#[test]
fn tls_to_a_plain_port_says_tls() {
    let _serial = serial();
    let server = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}", server.port);
    for args in [
        &["run", "--ttl", "1s", "x", "--", "true"][..],
        &["acquire", "--ttl", "1s", "x"],
        &["inspect", "x"],
    ] {
        let out = against(&url, args);
        assert_plain_failure(&out, "TLS");
        assert!(out.stderr.contains("redis://"), "the way out: {out:?}");
    }
}

#[test]
fn a_port_where_something_else_answers_is_not_a_redis_server() {
    let _serial = serial();
    let http = not_redis::NotRedis::start(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        not_redis::Speaks::WhenSpokenTo,
    );
    let ssh = not_redis::NotRedis::start(b"SSH-2.0-OpenSSH_9.6\r\n", not_redis::Speaks::First);
    for fake in [&http, &ssh] {
        for args in [
            &["run", "x", "--", "true"][..],
            &["acquire", "x"],
            &["inspect", "x"],
            &["list"],
        ] {
            let out = against(&fake.url("redis"), args);
            assert_plain_failure(&out, "not a Redis server");
        }
    }
    // The same over TLS: no TLS answers either.
    let out = against(&http.url("rediss"), &["acquire", "--ttl", "1s", "x"]);
    assert_plain_failure(&out, "TLS");
}

/// A caller that ignored SIGRTMAX-1 (which CMD must inherit ignored) must
/// not take the whole-call deadline away. When the deadline rested on a
/// realtime signal that kicked a blocked read, the timer sent the ignored
/// signal and `inspect` against a trickling server hung until killed.
#[test]
fn an_ignored_realtime_signal_does_not_take_the_whole_call_deadline_away() {
    use std::os::unix::process::CommandExt;
    let _s = serial();
    let fake = FakeServer::trickling();
    let mut cmd = distlock_at(&fake.url());
    cmd.args(["inspect", "t"]);
    // SAFETY: signal(2) is async-signal-safe, run in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGRTMAX() - 1, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = exec(&mut cmd, ms(20_000));
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.took < ms(8_000), "took {:?}", out.took);
}

/// Runs `run`, `run -w 20s`, `acquire` and `inspect` against `url` (a
/// server that trickles bytes or never answers) at once, each with every
/// realtime signal ignored, as a caller may leave them, and checks each
/// ends by its 5 s call deadline, exit 125 with one line.
fn every_subcommand_ends_by_its_deadline_with_realtime_signals_ignored(url: &str) {
    use std::os::unix::process::CommandExt;
    let (first, last) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    let cases: [&[&str]; 4] = [
        &["run", "t", "--", "true"],
        &["run", "-w", "20s", "t", "--", "true"],
        &["acquire", "t"],
        &["inspect", "t"],
    ];
    let outs: Vec<Out> = std::thread::scope(|s| {
        let running: Vec<_> = cases
            .iter()
            .map(|args| {
                s.spawn(|| {
                    let mut cmd = if url.starts_with("etcd:") {
                        crate::common::etcd::at(url)
                    } else {
                        distlock_at(url)
                    };
                    if url.starts_with("rediss:") {
                        cmd.env("DISTLOCK_TLS_CA", Pki::get().path("ca.pem"));
                    }
                    cmd.args(*args);
                    // SAFETY: signal(2) is async-signal-safe, run in the
                    // child before exec.
                    unsafe {
                        cmd.pre_exec(move || {
                            for sig in first..=last {
                                libc::signal(sig, libc::SIG_IGN);
                            }
                            Ok(())
                        });
                    }
                    exec(&mut cmd, ms(30_000))
                })
            })
            .collect();
        running.into_iter().map(|h| h.join().unwrap()).collect()
    });
    each_ended_by_its_deadline(&cases, outs);
}

/// A caller that ignores every realtime signal takes no call deadline
/// away. Before the fix the deadline rested on a realtime signal chosen
/// among those not ignored: with none left there was silently no deadline,
/// and against a server trickling bytes `run` hung for minutes.
#[test]
fn a_caller_that_ignores_every_realtime_signal_keeps_the_whole_call_deadline() {
    let _s = serial();
    let fake = FakeServer::trickling();
    every_subcommand_ends_by_its_deadline_with_realtime_signals_ignored(&fake.url());
}

/// The same over TLS, where the deadline used to be per read only (the
/// TLS library retries a read a signal interrupts), so a server trickling
/// bytes held every subcommand for as long as it trickled.
#[test]
fn a_tls_server_that_trickles_bytes_holds_no_subcommand_past_its_deadline() {
    let _s = serial();
    let fake = FakeServer::trickling_tls();
    every_subcommand_ends_by_its_deadline_with_realtime_signals_ignored(&fake.url());
}

/// etcd calls are bounded by the store's watchdog, as Redis calls are,
/// which no signal disposition touches: with every realtime signal ignored, an etcd
/// endpoint that accepts and never answers holds no subcommand past its
/// deadline either (this held before the Redis fix too; it guards the
/// promise that the two backends behave alike).
#[test]
fn an_etcd_call_keeps_its_deadline_when_the_caller_ignores_every_realtime_signal() {
    let _s = serial();
    let fake = FakeServer::silent();
    let url = fake.url().replace("redis://", "etcd://");
    every_subcommand_ends_by_its_deadline_with_realtime_signals_ignored(&url);
}

/// Each of `cases` (run at once) failed by its 5 s call deadline: exit
/// 125, one `distlock: ` line, well before a hang would have ended it.
fn each_ended_by_its_deadline(cases: &[&[&str]], outs: Vec<Out>) {
    for (args, out) in cases.iter().zip(outs) {
        assert_eq!(out.code, 125, "{args:?}: {out:?}");
        assert!(out.took < ms(8_000), "{args:?} took {:?}", out.took);
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:?}");
        assert!(out.stderr.starts_with("distlock: "), "{args:?}: {out:?}");
    }
}
