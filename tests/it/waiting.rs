//! Waiting for a busy lock, against a real redis-server: the mechanisms
//! behind `run --wait`, not their speed (that is for `cargo bench`).
//!
//! - a release wakes only the next waiter in line (no thundering herd), and
//!   waiters are served in arrival order;
//! - a waiter that dies, gives up, is interrupted or is stopped past its
//!   keep-alive deadline does not block the queue;
//! - a waiter stopped when its turn comes loses it after its claim window
//!   (under a second), one window per stopped waiter, while a slow head
//!   that claims within its window keeps its turn;
//! - a crashed holder (no release, the lease just expires) wakes a waiter
//!   through the remaining TTL it read, not through polling;
//! - `--wait-order any` waits on the release channel, outside the queue;
//! - a newcomer without `--wait` does not jump a live waiter that is next.
//!
//! Commands are observed with MONITOR (each acquire attempt carries its
//! owner id, whose middle part is the waiter's pid, and MONITOR also shows
//! the commands the Lua scripts run, so each wake-up PUBLISH is visible).
//! Waits are bounded with generous limits; where a limit has to be "well
//! below a backstop" the backstop is made 30s or more.

use crate::common::holder;
use crate::common::proxy;
use crate::common::*;
use holder::Holder;
use proxy::Proxy;

use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Helpers

/// Keys and channels of one lock under the default prefix.
struct Keys {
    lock: String,
    queue: String,
    deadlines: String,
    wake_prefix: String,
    released: String,
}

fn keys(name: &str) -> Keys {
    let lock = format!("distlock:{{{name}}}");
    Keys {
        queue: format!("{lock}:queue"),
        deadlines: format!("{lock}:deadlines"),
        wake_prefix: format!("{lock}:wake:"),
        released: format!("{lock}:released"),
        lock,
    }
}

/// Members of a zset, lowest score first.
fn zrange(server: &RedisServer, key: &str) -> Vec<String> {
    server.cmd(&["ZRANGE", key, "0", "-1"])
}

fn zcard(server: &RedisServer, key: &str) -> u64 {
    server.cmd(&["ZCARD", key])
}

fn zscore(server: &RedisServer, key: &str, member: &str) -> Option<f64> {
    server.cmd(&["ZSCORE", key, member])
}

/// How many clients are subscribed to `channel`.
fn numsub(server: &RedisServer, channel: &str) -> u64 {
    let v: Vec<redis::Value> = server.cmd(&["PUBSUB", "NUMSUB", channel]);
    match v.get(1) {
        Some(redis::Value::Int(n)) => *n as u64,
        other => panic!("unexpected PUBSUB NUMSUB reply {other:?}"),
    }
}

/// Channels with at least one subscriber that match `pattern`.
fn channels(server: &RedisServer, pattern: &str) -> Vec<String> {
    server.cmd(&["PUBSUB", "CHANNELS", pattern])
}

/// The pid inside an owner id `<host>:<pid>:<hex>`.
fn owner_pid(owner: &str) -> u32 {
    let mut parts = owner.rsplitn(3, ':');
    let _hex = parts.next();
    parts
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("owner id without a pid: {owner:?}"))
}

/// Whether the process is stopped (state T in /proc).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('T')
        })
        .unwrap_or(false)
}

/// CMD: writes its fencing token to `$1`, atomically (`$1.tmp`, then a rename).
const WRITE_TOKEN: &str = r#"echo "$DISTLOCK_FENCING_TOKEN" > "$1.tmp" && mv "$1.tmp" "$1""#;

/// Writes the token like `WRITE_TOKEN`, then waits until `$2` exists.
const WRITE_TOKEN_THEN_HOLD: &str = r#"echo "$DISTLOCK_FENCING_TOKEN" > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.01; done"#;

/// Starts `distlock run ARGS -- sh -c SCRIPT sh SCRIPT_ARGS...` with its
/// stdio away from the test's (stderr to `stderr` if given).
fn spawn_run(
    server: &RedisServer,
    args: &[&str],
    script: &str,
    script_args: &[&Path],
    stderr: Option<&Path>,
) -> Child {
    let mut cmd = distlock(server);
    cmd.arg("run")
        .args(args)
        .args(["--", "sh", "-c", script, "sh"])
        .args(script_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(match stderr {
            Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
            None => Stdio::null(),
        });
    cmd.spawn().unwrap()
}

/// Waits for the queue to hold `n` waiters, the last of which is `child`;
/// returns that waiter's owner id.
fn queued(server: &RedisServer, name: &str, n: u64, child: &Child) -> String {
    let k = keys(name);
    assert!(
        wait_until(LIMIT, || zcard(server, &k.queue) >= n),
        "waiter {} never joined the queue of {name}",
        child.id()
    );
    let q = zrange(server, &k.queue);
    assert_eq!(q.len() as u64, n, "queue of {name}: {q:?}");
    let owner = q.last().unwrap().clone();
    assert_eq!(
        owner_pid(&owner),
        child.id(),
        "the newest waiter must be last in the queue: {q:?}"
    );
    owner
}

/// Reads a token file written by `WRITE_TOKEN`.
fn token_in(path: &Path) -> Option<u64> {
    wait_for_line(path, LIMIT).map(|l| l.parse().unwrap())
}

/// A token that CMD wrote, which must be larger than `prev`.
fn later(token: Option<u64>, prev: u64, what: &str) -> u64 {
    match token {
        Some(t) if t > prev => t,
        other => panic!("{what}: expected a token above {prev}, got {other:?}"),
    }
}

/// One command as MONITOR reported it.
#[derive(Debug, Clone)]
struct Entry {
    /// Server clock, µs.
    ts_us: u64,
    /// `ip:port`, `unix:/path`, or `lua` for a command run by a script.
    client: String,
    args: Vec<String>,
}

impl Entry {
    /// An acquire attempt: (owner, mode). The acquire script is the one
    /// whose keys are lock, fence, meta, queue, …; its arguments start with
    /// owner, ttl, mode.
    fn acquire(&self) -> Option<(&str, &str)> {
        let cmd = self.args.first()?;
        let is_script = cmd.eq_ignore_ascii_case("evalsha") || cmd.eq_ignore_ascii_case("eval");
        let n: usize = self.args.get(2)?.parse().ok()?;
        let keys = self.args.get(3..3 + n)?;
        let is_acquire =
            keys.len() >= 4 && keys[1].ends_with(":fence") && keys[3].ends_with(":queue");
        if is_script && is_acquire && self.args.len() >= 3 + n + 3 {
            Some((&self.args[3 + n], &self.args[3 + n + 2]))
        } else {
            None
        }
    }

    /// A PUBLISH issued by a script: the channel.
    fn script_publish(&self) -> Option<&str> {
        (self.client == "lua" && self.args.first()?.eq_ignore_ascii_case("publish"))
            .then(|| self.args[1].as_str())
    }

    /// A wake-up ("try now") issued by a script: the channel. The other
    /// messages on a waiter's channel only tell it when its turn would
    /// come (`turn MS`) or that it will not (`claimed`).
    fn script_wake(&self) -> Option<&str> {
        self.script_publish()
            .filter(|_| self.args.get(2).is_some_and(|p| p == "wake"))
    }
}

/// A MONITOR connection recording every command the server runs.
struct Monitor {
    log: Arc<Mutex<Vec<Entry>>>,
    stream: TcpStream,
    reader: Option<JoinHandle<()>>,
}

impl Monitor {
    fn start(server: &RedisServer) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok, "+OK\r\n", "MONITOR refused");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let handle = std::thread::spawn(move || {
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let text = String::from_utf8_lossy(&line);
                let entry = parse_monitor_line(&text)
                    .unwrap_or_else(|| panic!("unparsable MONITOR line {text:?}"));
                sink.lock().unwrap().push(entry);
            }
        });
        Monitor {
            log,
            stream,
            reader: Some(handle),
        }
    }

    /// Everything the server ran before this call, in order. (Redis runs
    /// commands one at a time and feeds MONITOR in that order, so once our
    /// own ECHO shows up, everything before it has too.)
    fn sync(&self, server: &RedisServer) -> Vec<Entry> {
        static N: AtomicU64 = AtomicU64::new(0);
        let mark = format!("monitor-sync-{}", N.fetch_add(1, Ordering::Relaxed));
        let _: String = server.cmd(&["ECHO", &mark]);
        let mut out = None;
        let seen = wait_until(LIMIT, || {
            let log = self.log.lock().unwrap();
            match log.iter().position(|e| e.args.get(1) == Some(&mark)) {
                Some(i) => {
                    out = Some(log[..i].to_vec());
                    true
                }
                None => false,
            }
        });
        assert!(seen, "MONITOR never showed {mark}");
        out.unwrap()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

/// Parses `+1700000000.123456 [0 127.0.0.1:5000] "CMD" "arg" ...`.
fn parse_monitor_line(line: &str) -> Option<Entry> {
    let line = line.strip_prefix('+')?.trim_end_matches(['\r', '\n']);
    let (ts, rest) = line.split_once(' ')?;
    let (secs, micros) = ts.split_once('.')?;
    let ts_us = secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?;
    let (client, rest) = rest.strip_prefix('[')?.split_once("] ")?;
    let client = client.split_once(' ').map_or(client, |(_, c)| c).to_owned();
    let mut args = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        match chars.next() {
            None => break,
            Some(' ') => continue,
            Some('"') => {}
            Some(_) => return None,
        }
        let mut arg = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => arg.push('\n'),
                    'r' => arg.push('\r'),
                    't' => arg.push('\t'),
                    'a' => arg.push('\x07'),
                    'b' => arg.push('\x08'),
                    'x' => {
                        let hex: String = [chars.next()?, chars.next()?].iter().collect();
                        arg.push(u8::from_str_radix(&hex, 16).ok()? as char);
                    }
                    c => arg.push(c),
                },
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    Some(Entry {
        ts_us,
        client,
        args,
    })
}

/// The acquire attempts in `log` made by the distlock with this pid, as
/// (time µs, mode).
fn attempts_by(log: &[Entry], pid: u32) -> Vec<(u64, String)> {
    log.iter()
        .filter_map(|e| {
            let (owner, mode) = e.acquire()?;
            (owner_pid(owner) == pid).then(|| (e.ts_us, mode.to_owned()))
        })
        .collect()
}

/// The waiters woken ("try now") by scripts in `log`, in order: the
/// wake-up channels with the channel prefix stripped (so: owner ids).
fn wakes(log: &[Entry], k: &Keys) -> Vec<String> {
    log.iter()
        .filter_map(|e| e.script_wake()?.strip_prefix(&k.wake_prefix))
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------
// Arrival order and no thundering herd

/// Four waiters, each started only once the previous one is visibly
/// queued, run in that order with strictly increasing tokens.
#[test]
fn waiters_are_served_in_arrival_order_with_increasing_tokens() {
    let server = RedisServer::start();
    let k = keys("fifo");
    let mut holder = Holder::start(&server.url(), &["run", "fifo"]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let order = dir.path().join("order");
    let mut waiters = Reaper(Vec::new());
    let mut owners = Vec::new();
    for i in 1..=4u64 {
        let idx = dir.path().join(i.to_string());
        let child = spawn_run(
            &server,
            &["--wait", "forever", "fifo"],
            r#"echo "$(basename "$1") $DISTLOCK_FENCING_TOKEN" >> "$2""#,
            &[&idx, &order],
            None,
        );
        waiters.0.push(child);
        owners.push(queued(&server, "fifo", i, waiters.0.last().unwrap()));
    }
    assert_eq!(zrange(&server, &k.queue), owners, "queue in arrival order");
    assert!(
        !order.exists(),
        "nobody runs while the holder holds the lock"
    );

    assert!(holder.finish().success());
    for w in &mut waiters.0 {
        assert!(wait_with_timeout(w, LIMIT).success());
    }
    let text = std::fs::read_to_string(&order).unwrap();
    let runs: Vec<(u64, u64)> = text
        .lines()
        .map(|l| {
            let (i, t) = l.split_once(' ').unwrap();
            (i.parse().unwrap(), t.parse().unwrap())
        })
        .collect();
    let indices: Vec<u64> = runs.iter().map(|r| r.0).collect();
    assert_eq!(indices, [1, 2, 3, 4], "served in arrival order: {text}");
    let tokens: Vec<u64> = runs.iter().map(|r| r.1).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]) && tokens[0] > first,
        "tokens must increase in that order: {text}"
    );
    assert!(!exists(&server, &k.queue) && !exists(&server, &k.deadlines));
    assert!(!exists(&server, &k.lock));
}

/// With three waiters queued, the release wakes the head alone: one wake-up
/// PUBLISH, to the head's channel, one acquire attempt, by the head; the
/// two behind it send nothing and keep their places and deadlines while
/// the head's CMD runs. Over the whole run each waiter is woken exactly
/// once and tries exactly three times (first try, joining the queue, the
/// try after its wake-up).
#[test]
fn a_release_wakes_only_the_next_waiter() {
    let server = RedisServer::start();
    let k = keys("herd");
    let mon = Monitor::start(&server);
    let mut holder = Holder::start(&server.url(), &["run", "herd"]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = (1..=3).map(|i| dir.path().join(format!("t{i}"))).collect();
    let go1 = dir.path().join("go1");
    let mut waiters = Reaper(Vec::new());
    let mut owners = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let (script, args): (&str, Vec<&Path>) = if i == 0 {
            (WRITE_TOKEN_THEN_HOLD, vec![file, &go1])
        } else {
            (WRITE_TOKEN, vec![file])
        };
        waiters.0.push(spawn_run(
            &server,
            &["--wait", "forever", "herd"],
            script,
            &args,
            None,
        ));
        owners.push(queued(
            &server,
            "herd",
            i as u64 + 1,
            waiters.0.last().unwrap(),
        ));
    }
    // Each fair waiter listens on its own channel, not on the broadcast one.
    let mut subscribed = channels(&server, &format!("{}*", k.wake_prefix));
    subscribed.sort();
    let mut expected: Vec<String> = owners
        .iter()
        .map(|o| format!("{}{o}", k.wake_prefix))
        .collect();
    expected.sort();
    assert_eq!(subscribed, expected);
    assert_eq!(numsub(&server, &k.released), 0);
    let places = |o: &String| {
        (
            zscore(&server, &k.queue, o).expect("queued"),
            zscore(&server, &k.deadlines, o).expect("has a deadline"),
        )
    };
    let before: Vec<_> = owners[1..].iter().map(places).collect();
    let mark = mon.sync(&server).len();

    assert!(holder.finish().success());
    let head = later(token_in(&files[0]), first, "the head runs");
    // Observation window: a woken waiter tries within milliseconds, so a
    // herd would show up here. (An absence cannot be awaited.)
    std::thread::sleep(Duration::from_millis(500));
    let log = mon.sync(&server);
    let after = &log[mark..];
    assert_eq!(
        wakes(after, &k),
        [owners[0].clone()],
        "the release must wake the head and only the head"
    );
    let tries: Vec<&str> = after
        .iter()
        .filter_map(|e| e.acquire())
        .map(|a| a.0)
        .collect();
    assert_eq!(tries, [owners[0].as_str()], "only the head may try");
    for (i, o) in owners.iter().enumerate().skip(1) {
        assert_eq!(places(o), before[i - 1], "waiter {} lost its place", i + 1);
        assert!(!files[i].exists(), "waiter {} ran too early", i + 1);
        assert!(alive(waiters.0[i].id() as i32));
    }
    assert_eq!(zrange(&server, &k.queue), owners[1..]);

    std::fs::write(&go1, "").unwrap();
    for (i, w) in waiters.0.iter_mut().enumerate() {
        assert!(wait_with_timeout(w, LIMIT).success(), "waiter {}", i + 1);
    }
    let second = later(token_in(&files[1]), head, "the second");
    later(token_in(&files[2]), second, "the third");
    let log = mon.sync(&server);
    assert_eq!(wakes(&log, &k), owners, "each woken once, in order");
    for (i, w) in waiters.0.iter().enumerate() {
        let modes: Vec<String> = attempts_by(&log, w.id()).into_iter().map(|a| a.1).collect();
        assert_eq!(modes, ["once", "fair", "fair"], "waiter {}", i + 1);
    }
}

// ---------------------------------------------------------------------------
// Waiters that go away

/// A waiter killed by SIGKILL (its subscription closes with its socket) is
/// skipped by the release: the one behind it is woken at once, not after
/// the 30s backstop, and the dead one is gone from the queue.
#[test]
fn a_dead_waiter_does_not_block_the_queue() {
    let server = RedisServer::start();
    let k = keys("dead");
    let mut holder = Holder::start(&server.url(), &["run", "--ttl", "30s", "dead"]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let (a_file, b_file) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = spawn_run(
        &server,
        &["--wait", "forever", "dead"],
        WRITE_TOKEN,
        &[&a_file],
        None,
    );
    let a_owner = queued(&server, "dead", 1, &a);
    let b = spawn_run(
        &server,
        &["--wait", "forever", "dead"],
        WRITE_TOKEN,
        &[&b_file],
        None,
    );
    let mut b = Reaper(vec![b]);
    let b_owner = queued(&server, "dead", 2, &b.0[0]);

    a.kill().unwrap();
    a.wait().unwrap();
    let a_chan = format!("{}{a_owner}", k.wake_prefix);
    assert!(
        wait_until(LIMIT, || numsub(&server, &a_chan) == 0),
        "the server never noticed the dead waiter's connection close"
    );
    assert_eq!(
        zrange(&server, &k.queue),
        [a_owner.clone(), b_owner.clone()],
        "nothing has happened yet that would drop the dead waiter"
    );

    assert!(holder.finish().success());
    // Well below the 30s after which B would try on its own.
    later(token_in(&b_file), first, "B must be woken");
    assert_eq!(zscore(&server, &k.queue, &a_owner), None);
    assert_eq!(zscore(&server, &k.deadlines, &a_owner), None);
    assert!(wait_with_timeout(&mut b.0[0], LIMIT).success());
    assert!(!a_file.exists());
    assert!(!exists(&server, &k.queue) && !exists(&server, &k.deadlines));
}

/// `--wait 300ms` on a held lock: exit 75, and the waiter, which had joined
/// the queue, has left it (nothing else would have removed it: the lock is
/// still held and its deadline is a minute away) and closed its
/// subscription. A waiter queued before it keeps its place.
#[test]
fn a_waiter_that_gives_up_leaves_the_queue() {
    let server = RedisServer::start();
    let k = keys("giveup");
    let mon = Monitor::start(&server);
    let mut holder = Holder::start(&server.url(), &["run", "giveup"]);
    let dir = tempfile::tempdir().unwrap();
    let patient_file = dir.path().join("patient");
    let patient = spawn_run(
        &server,
        &["--wait", "forever", "giveup"],
        WRITE_TOKEN,
        &[&patient_file],
        None,
    );
    let mut patient = Reaper(vec![patient]);
    let patient_owner = queued(&server, "giveup", 1, &patient.0[0]);
    let patient_place = zscore(&server, &k.queue, &patient_owner);

    let mark = dir.path().join("ran");
    let err = dir.path().join("stderr");
    let mut quitter = spawn_run(
        &server,
        &["--wait", "300ms", "giveup"],
        r#": > "$1""#,
        &[&mark],
        Some(&err),
    );
    let st = wait_with_timeout(&mut quitter, LIMIT);
    assert_eq!(
        st.code(),
        Some(75),
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    assert!(!mark.exists());

    let log = mon.sync(&server);
    let tries = attempts_by(&log, quitter.id());
    assert!(
        tries.iter().any(|t| t.1 == "fair"),
        "the quitter must have joined the queue: {tries:?}"
    );
    let owner = log
        .iter()
        .filter_map(|e| e.acquire())
        .find(|a| owner_pid(a.0) == quitter.id())
        .unwrap()
        .0
        .to_owned();
    assert_eq!(zscore(&server, &k.queue, &owner), None, "still queued");
    assert_eq!(zscore(&server, &k.deadlines, &owner), None);
    let chan = format!("{}{owner}", k.wake_prefix);
    assert!(wait_until(LIMIT, || numsub(&server, &chan) == 0));
    assert_eq!(
        zrange(&server, &k.queue),
        std::slice::from_ref(&patient_owner)
    );
    assert_eq!(zscore(&server, &k.queue, &patient_owner), patient_place);
    assert!(exists(&server, &k.lock), "leaving must not touch the lease");

    let first = holder.token();
    assert!(holder.finish().success());
    later(token_in(&patient_file), first, "the patient waiter");
    assert!(wait_with_timeout(&mut patient.0[0], LIMIT).success());
}

/// SIGTERM while waiting: exit 143, CMD never runs, and the waiter has
/// left the queue.
#[test]
fn an_interrupted_waiter_leaves_the_queue() {
    let server = RedisServer::start();
    let k = keys("intr");
    let _holder = Holder::start(&server.url(), &["run", "intr"]);
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let mut w = spawn_run(
        &server,
        &["--wait", "forever", "intr"],
        r#": > "$1""#,
        &[&mark],
        None,
    );
    let owner = queued(&server, "intr", 1, &w);
    signal(w.id() as i32, libc::SIGTERM);
    assert_eq!(wait_with_timeout(&mut w, LIMIT).code(), Some(143));
    assert!(!mark.exists());
    assert_eq!(zscore(&server, &k.queue, &owner), None);
    assert_eq!(zscore(&server, &k.deadlines, &owner), None);
    assert!(!exists(&server, &k.queue));
}

/// A waiter stopped (SIGSTOP, e.g. Ctrl-Z) at the head of the queue no
/// longer refreshes its place; once its keep-alive deadline has passed on
/// the server clock it is dropped, and a release wakes the live waiter
/// behind it at once instead of the stopped one (whose connection is still
/// open, so a PUBLISH to it would "succeed").
///
/// The stopped waiter's deadline is 2 * max(holder's remaining lease, its
/// own ttl) + 2s, so it is made short (holder lease 1.5s, waiter ttl 1s:
/// about 5s), then the holder renews to 60s, so the waiter behind reads a
/// 60s lease and would only try on its own after a minute.
#[test]
fn a_stopped_waiter_past_its_deadline_is_skipped_by_the_release() {
    let server = RedisServer::start();
    let k = keys("stopped");
    let mon = Monitor::start(&server);
    let out = distlock(&server)
        .args([
            "acquire", "--ttl", "1500ms", "--owner", "holder-6", "stopped",
        ])
        .output_within(LIMIT);
    assert!(out.status.success(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let (a_file, b_file) = (dir.path().join("a"), dir.path().join("b"));
    let a = spawn_run(
        &server,
        &["--wait", "forever", "--ttl", "1s", "stopped"],
        WRITE_TOKEN,
        &[&a_file],
        None,
    );
    let mut kids = Reaper(vec![a]);
    let a_owner = queued(&server, "stopped", 1, &kids.0[0]);
    signal(kids.0[0].id() as i32, libc::SIGSTOP);
    assert!(wait_until(LIMIT, || stopped(kids.0[0].id())));
    let renew = distlock(&server)
        .args(["renew", "--ttl", "60s", "--owner", "holder-6", "stopped"])
        .output_within(LIMIT);
    assert!(
        renew.status.success(),
        "setup too slow: the 1.5s holder lease ran out before the renewal: {renew:?}"
    );
    let a_deadline = zscore(&server, &k.deadlines, &a_owner).unwrap() as u64;
    assert!(
        a_deadline < server_ms(&server) + 6_000,
        "the stopped waiter's deadline must be the short one"
    );

    let b = spawn_run(
        &server,
        &["--wait", "forever", "stopped"],
        WRITE_TOKEN,
        &[&b_file],
        None,
    );
    kids.0.push(b);
    let b_owner = queued(&server, "stopped", 2, &kids.0[1]);
    assert!(
        zscore(&server, &k.deadlines, &b_owner).unwrap() as u64 > server_ms(&server) + 60_000,
        "the live waiter read the renewed 60s lease"
    );
    assert!(
        wait_until(Duration::from_secs(15), || server_ms(&server) > a_deadline),
        "the stopped waiter's deadline never passed"
    );
    assert_eq!(
        zscore(&server, &k.deadlines, &a_owner),
        Some(a_deadline as f64),
        "a stopped waiter cannot refresh its place"
    );
    let mark = mon.sync(&server).len();

    let rel = distlock(&server)
        .args(["release", "--owner", "holder-6", "stopped"])
        .output_within(LIMIT);
    assert!(rel.status.success(), "{rel:?}");
    // Well below the 60s after which B would try on its own.
    let got = token_in(&b_file);
    let log = mon.sync(&server);
    assert_eq!(
        wakes(&log[mark..], &k),
        std::slice::from_ref(&b_owner),
        "the release must wake the live waiter, not the stopped one ({a_owner})"
    );
    later(got, 0, "the live waiter must run");
    assert_eq!(zscore(&server, &k.queue, &a_owner), None);
    assert_eq!(zscore(&server, &k.deadlines, &a_owner), None);
    assert!(wait_with_timeout(&mut kids.0[1], LIMIT).success());
    assert!(!a_file.exists());
}

// ---------------------------------------------------------------------------
// Stopped waiters lose their turn (guarantees.md §5)

/// `distlock acquire --ttl 10s --owner OWNER NAME`: a holder that needs no
/// process, released by the test with `release_as`. OWNER looks like an
/// owner id (`host:0:hex`) so that the MONITOR helpers can read it.
fn hold_as(server: &RedisServer, owner: &str, name: &str) {
    let out = distlock(server)
        .args(["acquire", "--ttl", "10s", "--owner", owner, name])
        .output_within(LIMIT);
    assert!(out.status.success(), "{out:?}");
}

/// Releases NAME held by OWNER; returns the moment just before, which is
/// no later than the release itself.
fn release_as(server: &RedisServer, owner: &str, name: &str) -> Instant {
    let at = Instant::now();
    let out = distlock(server)
        .args(["release", "--owner", owner, name])
        .output_within(LIMIT);
    assert!(out.status.success(), "{out:?}");
    at
}

/// `release_as` for a release whose hand-off cannot end at once (its head
/// is stopped): starts `distlock release` and returns once the lease is
/// gone, with the moment just before it started and the process, which
/// stays until the hand-off has ended.
fn release_in_background(server: &RedisServer, owner: &str, name: &str) -> (Instant, Child) {
    let at = Instant::now();
    let child = distlock(server)
        .args(["release", "--owner", owner, name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(LIMIT, || !exists(server, &keys(name).lock)),
        "the release never went through"
    );
    (at, child)
}

/// A `run --wait 60s NAME` waiter whose CMD writes its token to `file` and
/// then holds the lock until `go` exists; its owner id once it is queued
/// as the `n`-th waiter.
fn queued_waiter(
    server: &RedisServer,
    kids: &mut Reaper,
    name: &str,
    n: u64,
    file: &Path,
    go: &Path,
) -> String {
    kids.0.push(spawn_run(
        server,
        &["--wait", "60s", "--ttl", "10s", name],
        WRITE_TOKEN_THEN_HOLD,
        &[file, go],
        None,
    ));
    queued(server, name, n, kids.0.last().unwrap())
}

/// SIGSTOPs a waiter and waits until the kernel shows it stopped.
fn stop(child: &Child) {
    signal(child.id() as i32, libc::SIGSTOP);
    assert!(wait_until(LIMIT, || stopped(child.id())));
}

/// The owners queued for NAME, lowest arrival first.
fn queue_of(server: &RedisServer, name: &str) -> Vec<String> {
    zrange(server, &keys(name).queue)
}

/// Waiter A is stopped at the head of the queue, live waiter B behind it;
/// the holder's lease is 10s, so before the fix B ran only after A's 22s
/// keep-alive deadline. Now the release promises the lock to A for its
/// claim window only (900 ms, server clock) and tells B when that window
/// ends: B's CMD starts no earlier than the window's end (A's promise is
/// kept) and within about a second, far below 22s. A has lost its turn
/// (out of the queue); continued while B holds the lock, it queues again at
/// the back and does not run until B has released, then runs next.
#[test]
fn a_stopped_waiter_loses_its_turn_within_a_second() {
    let server = RedisServer::start();
    let name = "frozen";
    hold_as(&server, "holder:0:7", name);
    let dir = tempfile::tempdir().unwrap();
    let (a_file, b_file) = (dir.path().join("a"), dir.path().join("b"));
    let (a_go, b_go) = (dir.path().join("a-go"), dir.path().join("b-go"));
    let mut kids = Reaper(Vec::new());
    let a_owner = queued_waiter(&server, &mut kids, name, 1, &a_file, &a_go);
    stop(&kids.0[0]);
    let b_owner = queued_waiter(&server, &mut kids, name, 2, &b_file, &b_go);

    let released = release_as(&server, "holder:0:7", name);
    let token = token_in(&b_file);
    let waited = released.elapsed();
    let b_token = later(token, 0, "the live waiter must get the lock");
    assert!(
        waited >= Duration::from_millis(900),
        "B took the lock inside A's claim window: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "a stopped waiter ahead must cost about a second, not its TTLs: {waited:?}"
    );
    assert!(!a_file.exists());
    assert_eq!(
        queue_of(&server, name),
        Vec::<String>::new(),
        "A lost its turn"
    );

    // A comes back while B holds the lock: it queues again, does not run.
    signal(kids.0[0].id() as i32, libc::SIGCONT);
    assert!(
        wait_until(LIMIT, || queue_of(&server, name).contains(&a_owner)),
        "A, continued, must queue again"
    );
    assert_eq!(server.get(&keys(name).lock), Some(b_owner));
    assert!(!a_file.exists(), "A must not run while B holds the lock");
    std::fs::write(&b_go, "").unwrap();
    assert!(wait_with_timeout(&mut kids.0[1], LIMIT).success());
    later(token_in(&a_file), b_token, "A runs once B has released");
    std::fs::write(&a_go, "").unwrap();
    assert!(wait_with_timeout(&mut kids.0[0], LIMIT).success());
}

/// A releaser slow to learn of its own release (its replies come 250 ms
/// late, through a proxy) starts watching for the claim only after the
/// next holder has claimed, run and released, and the one after it has
/// claimed too. It must still see that its hand-off ended and exit, not
/// wait for the turns its release promised (0.9 s each). With `settled`
/// a list, the first claim's entry was cleared by the next release, and
/// the second went to the next releaser, who had started reading first:
/// the slow releaser stayed until its promised turns had passed (the
/// bench's contention rate fell from about 400 to 140 runs/s in one
/// round). Latency on replies only: the server acts on each request when
/// it is sent.
#[test]
fn a_releaser_slow_to_read_still_sees_its_hand_off_end() {
    let server = RedisServer::start();
    let name = "slowreader";
    // The release script loaded beforehand: one round trip, not three.
    hold_as(&server, "warmup:0:1", "warmup");
    release_as(&server, "warmup:0:1", "warmup");
    let proxy = Proxy::start(server.port);
    let mut holder = Holder::start(&proxy.url(), &["run", name]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["b", "c"].iter().map(|f| dir.path().join(f)).collect();
    let mut kids = Reaper(Vec::new());
    for (i, file) in files.iter().enumerate() {
        kids.0.push(spawn_run(
            &server,
            &["--wait", "60s", name],
            WRITE_TOKEN,
            &[file],
            None,
        ));
        queued(&server, name, i as u64 + 1, &kids.0[i]);
    }
    proxy.set_latency(Duration::from_millis(250));
    let ended = Instant::now();
    holder.end_cmd();
    let b = later(token_in(&files[0]), first, "B");
    later(token_in(&files[1]), b, "C");
    assert!(holder.wait().success());
    let stayed = ended.elapsed();
    assert!(
        stayed < Duration::from_millis(1500),
        "the releaser stayed {stayed:?}: it missed the claim that ended its hand-off"
    );
    for kid in &mut kids.0 {
        assert!(wait_with_timeout(kid, LIMIT).success());
    }
}

/// How the holder ahead of the queue lets go.
#[derive(Clone, Copy)]
enum Releaser {
    /// `distlock release --owner` (a shell script's lock).
    Subcommand,
    /// `distlock run`, whose CMD ends.
    Run,
    /// `distlock hold`, whose background renewer gets SIGTERM.
    Hold,
}

/// `stopped` stopped waiters in a row, then live B: each stopped one
/// costs one claim window, so B runs after about that many windows (no
/// earlier: each promise is kept) and well below any TTL, however many
/// are stopped: past the two the release promises a turn to, the releaser
/// itself wakes the next waiter when the promised turns have passed. The
/// releaser (`release`, `run` once its CMD ended, or a hold's renewer)
/// ends only once B holds the lock. Continued, the stopped waiters queue
/// again behind B's lease and run after it, one at a time.
fn stopped_waiters_in_a_row(stopped: usize, name: &str, by: Releaser) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (h_file, h_go) = (dir.path().join("h"), dir.path().join("h-go"));
    let mut hold_pid = 0;
    let mut holder = match by {
        Releaser::Subcommand => {
            hold_as(&server, "holder:0:8", name);
            None
        }
        Releaser::Hold => {
            let out = distlock(&server)
                .args(["hold", "--ttl", "10s", name])
                .output_within(LIMIT);
            assert!(out.status.success(), "{out:?}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            hold_pid = stdout
                .lines()
                .find_map(|l| l.strip_prefix("export DISTLOCK_HOLD_PID="))
                .map(|v| v.trim_matches('\'').parse().unwrap())
                .unwrap_or_else(|| panic!("no DISTLOCK_HOLD_PID in {stdout:?}"));
            None
        }
        Releaser::Run => {
            let h = spawn_run(
                &server,
                &["--ttl", "30s", name],
                WRITE_TOKEN_THEN_HOLD,
                &[&h_file, &h_go],
                None,
            );
            token_in(&h_file).expect("the holder runs");
            Some(Reaper(vec![h]))
        }
    };
    let files: Vec<PathBuf> = (0..=stopped)
        .map(|i| dir.path().join(format!("w{i}")))
        .collect();
    let go = dir.path().join("go");
    let mut kids = Reaper(Vec::new());
    let mut b_owner = String::new();
    for (i, file) in files.iter().enumerate() {
        b_owner = queued_waiter(&server, &mut kids, name, i as u64 + 1, file, &go);
        if i < stopped {
            stop(&kids.0[i]);
        }
    }

    let released = match &mut holder {
        None if hold_pid > 0 => {
            let at = Instant::now();
            signal(hold_pid, libc::SIGTERM);
            assert!(
                wait_until(LIMIT, || !alive(hold_pid)),
                "the hold's renewer never ended"
            );
            at
        }
        None => release_as(&server, "holder:0:8", name),
        Some(h) => {
            let at = Instant::now();
            std::fs::write(&h_go, "").unwrap();
            assert!(wait_with_timeout(&mut h.0[0], LIMIT).success());
            at
        }
    };
    assert_eq!(
        server.get(&keys(name).lock),
        Some(b_owner),
        "the releaser must stay until the next live waiter has claimed"
    );
    let token = token_in(&files[stopped]);
    let waited = released.elapsed();
    let b_token = later(token, 0, "the live waiter must get the lock");
    let windows = Duration::from_millis(900) * stopped as u32;
    assert!(
        waited >= windows,
        "B took the lock inside a stopped waiter's claim window: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(stopped as u64 + 1),
        "{stopped} stopped waiters ahead must cost about a second each: {waited:?}"
    );
    assert_eq!(queue_of(&server, name), Vec::<String>::new());

    for kid in &kids.0[..stopped] {
        signal(kid.id() as i32, libc::SIGCONT);
    }
    assert!(
        wait_until(LIMIT, || queue_of(&server, name).len() == stopped),
        "the stopped waiters, continued, must queue again"
    );
    assert!(
        files[..stopped].iter().all(|f| !f.exists()),
        "nobody runs while B holds"
    );
    std::fs::write(&go, "").unwrap();
    for (i, kid) in kids.0.iter_mut().enumerate() {
        assert!(wait_with_timeout(kid, LIMIT).success(), "waiter {i}");
    }
    let mut tokens: Vec<u64> = files[..stopped]
        .iter()
        .map(|f| token_in(f).unwrap())
        .collect();
    tokens.sort();
    let mut prev = b_token;
    for t in tokens {
        prev = later(
            Some(t),
            prev,
            "the continued waiters ran after B, one at a time",
        );
    }
}

/// Two stopped waiters in a row: each promised a turn by the release.
#[test]
fn two_stopped_waiters_in_a_row_cost_about_a_second_each() {
    stopped_waiters_in_a_row(2, "frozen2", Releaser::Subcommand);
}

/// Three in a row: more than the release promises turns to, so only the
/// releaser is left to act when their windows have passed.
#[test]
fn three_stopped_waiters_in_a_row_cost_about_a_second_each() {
    stopped_waiters_in_a_row(3, "frozen3", Releaser::Subcommand);
}

/// The same behind a `run`: once CMD has ended, `run` sees the hand-off
/// through before it exits.
#[test]
fn behind_a_run_three_stopped_waiters_in_a_row_cost_about_a_second_each() {
    stopped_waiters_in_a_row(3, "frozen3run", Releaser::Run);
}

/// The same behind `hold`: its renewer, told to release by SIGTERM, sees
/// the hand-off through before it exits.
#[test]
fn behind_a_hold_three_stopped_waiters_in_a_row_cost_about_a_second_each() {
    stopped_waiters_in_a_row(3, "frozen3hold", Releaser::Hold);
}

/// Four in a row: the releaser acts twice, once per schedule of three.
#[test]
fn four_stopped_waiters_in_a_row_cost_about_a_second_each() {
    stopped_waiters_in_a_row(4, "frozen4", Releaser::Subcommand);
}

/// Twelve stopped waiters in a row, then live B: the releasing `run`
/// stays at most `MAX_STAY` (5.4 s: six claim windows) to see its
/// hand-off through, then exits; B is still served, by its own retries
/// (every 2 s, its TTL) once the stopped waiters' turns or keep-alives
/// have passed. Before the fix `run` stayed until B claimed, 0.9 s per
/// stopped waiter: 10.8 s here, and without bound for more.
#[test]
fn many_stopped_waiters_do_not_hold_the_releaser_past_its_stay() {
    const STOPPED: usize = 12;
    let server = RedisServer::start();
    let name = "frozen12";
    let dir = tempfile::tempdir().unwrap();
    let (h_file, h_go) = (dir.path().join("h"), dir.path().join("h-go"));
    let mut holder = Reaper(vec![spawn_run(
        &server,
        &["--ttl", "3s", name],
        WRITE_TOKEN_THEN_HOLD,
        &[&h_file, &h_go],
        None,
    )]);
    let first = token_in(&h_file).expect("the holder runs");
    let files: Vec<PathBuf> = (0..=STOPPED)
        .map(|i| dir.path().join(format!("w{i}")))
        .collect();
    let go = dir.path().join("go");
    let mut kids = Reaper(Vec::new());
    for (i, file) in files.iter().enumerate() {
        kids.0.push(spawn_run(
            &server,
            &["--wait", "60s", "--ttl", "2s", name],
            WRITE_TOKEN_THEN_HOLD,
            &[file, &go],
            None,
        ));
        queued(&server, name, i as u64 + 1, kids.0.last().unwrap());
        if i < STOPPED {
            stop(&kids.0[i]);
        }
    }
    let released = Instant::now();
    std::fs::write(&h_go, "").unwrap();
    assert!(wait_with_timeout(&mut holder.0[0], LIMIT).success());
    let stayed = released.elapsed();
    assert!(
        stayed < Duration::from_millis(5400 + 1500),
        "the releaser stayed {stayed:?} for {STOPPED} stopped waiters: past its bound"
    );
    later(
        token_in(&files[STOPPED]),
        first,
        "the live waiter behind the stopped ones must still get the lock",
    );
    assert!(
        files[..STOPPED].iter().all(|f| !f.exists()),
        "a stopped waiter ran"
    );
    std::fs::write(&go, "").unwrap();
    assert!(wait_with_timeout(&mut kids.0[STOPPED], LIMIT).success());
    for kid in &kids.0[..STOPPED] {
        signal(kid.id() as i32, libc::SIGCONT);
    }
}

/// A head that is stopped at the release but continued 300 ms later, inside
/// its claim window, is a live, slow head: it keeps its turn and runs
/// first. B, told when A's window would end, is told that A claimed and
/// goes back to sleep: it sends nothing until A releases (exactly three
/// attempts: first try, joining the queue, the try after A's release), and
/// then runs with the next token.
#[test]
fn a_slow_head_that_claims_within_its_window_keeps_its_turn() {
    let server = RedisServer::start();
    let name = "slowhead";
    let k = keys(name);
    let mon = Monitor::start(&server);
    hold_as(&server, "holder:0:9", name);
    let dir = tempfile::tempdir().unwrap();
    let (a_file, b_file) = (dir.path().join("a"), dir.path().join("b"));
    let (a_go, b_go) = (dir.path().join("a-go"), dir.path().join("b-go"));
    let mut kids = Reaper(Vec::new());
    let a_owner = queued_waiter(&server, &mut kids, name, 1, &a_file, &a_go);
    stop(&kids.0[0]);
    let b_owner = queued_waiter(&server, &mut kids, name, 2, &b_file, &b_go);

    let (released, releaser) = release_in_background(&server, "holder:0:9", name);
    kids.0.push(releaser);
    // The stop's length is what is under test: A is frozen for 300 ms of
    // its 900 ms window (a sleep here is the scenario, not a wait).
    std::thread::sleep(Duration::from_millis(300));
    signal(kids.0[0].id() as i32, libc::SIGCONT);
    let a_token = later(token_in(&a_file), 0, "the slow head keeps its turn");
    assert_eq!(server.get(&k.lock), Some(a_owner.clone()));
    // A's claim ended the hand-off: the releaser has gone.
    assert!(wait_with_timeout(&mut kids.0[2], LIMIT).success());
    // B would try at the end of A's window (about 950 ms after the release)
    // had it not been told that A claimed; watch until well past it.
    assert!(
        !wait_until(
            Duration::from_millis(1500).saturating_sub(released.elapsed()),
            || { b_file.exists() }
        ),
        "B must not run while A holds the lock"
    );
    assert_eq!(queue_of(&server, name), std::slice::from_ref(&b_owner));
    std::fs::write(&a_go, "").unwrap();
    assert!(wait_with_timeout(&mut kids.0[0], LIMIT).success());
    later(token_in(&b_file), a_token, "B runs after A");
    std::fs::write(&b_go, "").unwrap();
    assert!(wait_with_timeout(&mut kids.0[1], LIMIT).success());

    let log = mon.sync(&server);
    let modes: Vec<String> = attempts_by(&log, kids.0[1].id())
        .into_iter()
        .map(|a| a.1)
        .collect();
    assert_eq!(modes, ["once", "fair", "fair"], "B only tries when woken");
    let turns: Vec<&Entry> = log
        .iter()
        .filter(|e| e.script_publish() == Some(&format!("{}{b_owner}", k.wake_prefix)))
        .collect();
    let payloads: Vec<&str> = turns.iter().map(|e| e.args[2].as_str()).collect();
    assert!(
        payloads.len() >= 3
            && payloads[0].starts_with("turn ")
            && payloads[1] == "claimed"
            && payloads.last() == Some(&"wake"),
        "B is told its turn, then that A claimed, then woken by A's release: {payloads:?}"
    );
}

/// A waiter that arrives while the lock is free but promised to a stopped
/// head was never told a turn by the release: it gets one at the end of
/// the schedule, from its own acquire, and takes the lock once the stopped
/// head's window has passed instead of sleeping on its TTL backstop.
#[test]
fn a_waiter_arriving_during_a_stopped_heads_window_gets_a_turn() {
    let server = RedisServer::start();
    let name = "latecomer";
    hold_as(&server, "holder:0:10", name);
    let dir = tempfile::tempdir().unwrap();
    let (a_file, c_file) = (dir.path().join("a"), dir.path().join("c"));
    let go = dir.path().join("go");
    let mut kids = Reaper(Vec::new());
    queued_waiter(&server, &mut kids, name, 1, &a_file, &go);
    stop(&kids.0[0]);
    let released = release_as(&server, "holder:0:10", name);
    kids.0.push(spawn_run(
        &server,
        &["--wait", "60s", "--ttl", "30s", name],
        WRITE_TOKEN,
        &[&c_file],
        None,
    ));
    later(token_in(&c_file), 0, "the newcomer must get the lock");
    let waited = released.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "the newcomer slept past the stopped head's window: {waited:?}"
    );
    assert!(wait_with_timeout(&mut kids.0[1], LIMIT).success());
    assert!(!a_file.exists());
}

// ---------------------------------------------------------------------------
// Expiry, wait order, newcomers

/// The holder took the lock with `distlock acquire --ttl 2s` and vanished:
/// no renewal, no release, no notification. The waiter read the remaining
/// lease when it queued and sleeps until then: between joining the queue
/// and the expiry it sends nothing, nobody publishes to it, and it then
/// acquires with the next token in at most one more try or two.
#[test]
fn a_waiter_wakes_when_the_lease_expires_without_polling() {
    let server = RedisServer::start();
    let k = keys("expiry");
    let mon = Monitor::start(&server);
    let out = distlock(&server)
        .args(["acquire", "--ttl", "2s", "--json", "expiry"])
        .output_within(LIMIT);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = json["fencing_token"].as_u64().unwrap();
    let holder = json["owner"].as_str().unwrap().to_owned();

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t");
    let w = spawn_run(
        &server,
        &["--wait", "forever", "expiry"],
        WRITE_TOKEN,
        &[&file],
        None,
    );
    let mut w = Reaper(vec![w]);
    queued(&server, "expiry", 1, &w.0[0]);
    assert!(
        exists(&server, &k.lock),
        "setup too slow: the waiter must queue while the lease is held"
    );
    later(token_in(&file), first, "the waiter");
    assert!(wait_with_timeout(&mut w.0[0], LIMIT).success());

    let log = mon.sync(&server);
    let taken_at = log
        .iter()
        .find(|e| e.acquire().is_some_and(|a| a.0 == holder))
        .expect("the holder's acquire")
        .ts_us;
    let expires_at = taken_at + 2_000_000;
    let tries = attempts_by(&log, w.0[0].id());
    let modes: Vec<&str> = tries.iter().map(|t| t.1.as_str()).collect();
    assert!(
        (3..=4).contains(&tries.len()) && modes[..2] == ["once", "fair"],
        "first try, queueing, then one try after the expiry (two at most): {tries:?}"
    );
    // MONITOR stamps a command when it runs; allow a little for the gap
    // between the holder's stamp and its SET inside the script.
    for (ts, _) in &tries[2..] {
        assert!(
            *ts + 50_000 >= expires_at,
            "the waiter tried {}ms before the lease expired: {tries:?}",
            (expires_at - ts) / 1000
        );
    }
    assert_eq!(wakes(&log, &k), Vec::<String>::new(), "nobody released");
}

/// `--wait-order any`: not queued, no wake channel of its own, subscribed
/// to the release channel; tries only in `any` mode; the release wakes it.
#[test]
fn wait_order_any_waits_on_the_release_channel_outside_the_queue() {
    let server = RedisServer::start();
    let k = keys("any");
    let mon = Monitor::start(&server);
    let mut holder = Holder::start(&server.url(), &["run", "any"]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t");
    let w = spawn_run(
        &server,
        &["--wait", "forever", "--wait-order", "any", "any"],
        WRITE_TOKEN,
        &[&file],
        None,
    );
    let mut w = Reaper(vec![w]);
    assert!(
        wait_until(LIMIT, || numsub(&server, &k.released) == 1),
        "the any-order waiter never subscribed to {}",
        k.released
    );
    assert_eq!(
        zcard(&server, &k.queue),
        0,
        "an any-order waiter is not queued"
    );
    assert!(!exists(&server, &k.deadlines));
    assert_eq!(
        channels(&server, &format!("{}*", k.wake_prefix)),
        Vec::<String>::new()
    );
    assert!(!file.exists());

    assert!(holder.finish().success());
    later(token_in(&file), first, "the waiter");
    assert!(wait_with_timeout(&mut w.0[0], LIMIT).success());
    let log = mon.sync(&server);
    let tries = attempts_by(&log, w.0[0].id());
    assert!(!tries.is_empty());
    assert!(tries.iter().all(|t| t.1 == "any"), "{tries:?}");
    assert!(!exists(&server, &k.queue));
}

/// The lock has just been released and handed to a live queued waiter that
/// has not taken it yet (made deterministic by stopping that waiter before
/// the release; both newcomers come well inside its 900 ms claim window,
/// after which a stopped waiter loses its turn: see the tests above). A newcomer without `--wait`, `run` or `acquire`, must not
/// take it: exit 75, CMD never runs, no token burnt, and the message says
/// the lock is being handed to that waiter. Once continued, the waiter
/// takes it with the next token.
#[test]
fn a_newcomer_does_not_jump_a_live_waiter_that_is_next() {
    let server = RedisServer::start();
    let k = keys("jump");
    let mut holder = Holder::start(&server.url(), &["run", "jump"]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t");
    let w = spawn_run(
        &server,
        &["--wait", "forever", "jump"],
        WRITE_TOKEN,
        &[&file],
        None,
    );
    let mut w = Reaper(vec![w]);
    let owner = queued(&server, "jump", 1, &w.0[0]);
    signal(w.0[0].id() as i32, libc::SIGSTOP);
    assert!(wait_until(LIMIT, || stopped(w.0[0].id())));
    // The holder's CMD ends; the holder stays to see its hand-off through.
    holder.end_cmd();
    assert!(wait_until(LIMIT, || !exists(&server, &k.lock)), "released");

    let mark = dir.path().join("ran");
    let err = dir.path().join("stderr");
    let mut newcomer = spawn_run(&server, &["jump"], r#": > "$1""#, &[&mark], Some(&err));
    assert_eq!(wait_with_timeout(&mut newcomer, LIMIT).code(), Some(75));
    assert!(!mark.exists(), "the newcomer's CMD must not run");
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(
        stderr.starts_with("distlock: ") && stderr.contains(&owner),
        "{stderr:?}"
    );
    let out = distlock(&server)
        .args(["acquire", "jump"])
        .output_within(LIMIT);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(!exists(&server, &k.lock));
    assert_eq!(
        server.get(&format!("{}:fence", k.lock)),
        Some(first.to_string())
    );
    assert_eq!(zrange(&server, &k.queue), [owner]);

    signal(w.0[0].id() as i32, libc::SIGCONT);
    later(token_in(&file), first, "the waiter");
    assert!(wait_with_timeout(&mut w.0[0], LIMIT).success());
    assert!(holder.wait().success());
}

/// The helpers above parse MONITOR's quoting correctly.
#[test]
fn monitor_lines_are_parsed() {
    let e = parse_monitor_line(
        "+1700000000.000042 [0 127.0.0.1:5000] \"EVALSHA\" \"a\\\"b\\\\c\" \"\\x01\\n\"\r\n",
    )
    .unwrap();
    assert_eq!(e.ts_us, 1_700_000_000_000_042);
    assert_eq!(e.client, "127.0.0.1:5000");
    assert_eq!(e.args, ["EVALSHA", "a\"b\\c", "\u{1}\n"]);
    let e = parse_monitor_line("+1.5 [0 lua] \"PUBLISH\" \"c\" \"x\"\r\n").unwrap();
    assert_eq!(e.script_publish(), Some("c"));
    assert_eq!(e.script_wake(), None);
    let e = parse_monitor_line("+1.5 [0 lua] \"PUBLISH\" \"c\" \"wake\"\r\n").unwrap();
    assert_eq!(e.script_wake(), Some("c"));
    assert_eq!(owner_pid("host:123:abcdef"), 123);
    assert_eq!(owner_pid("my:host:9:abcdef"), 9);
}

// ---------------------------------------------------------------------------
// Dropped connections and signals (guarantees.md §8)

/// `run --wait 30s NAME -- WRITE_TOKEN FILE` against `url`, stdio away.
fn spawn_waiter_at(url: &str, name: &str, file: &Path) -> Child {
    distlock_at(url)
        .args(["run", "--wait", "30s", "--ttl", "10s", name])
        .args(["--", "sh", "-c", WRITE_TOKEN, "sh"])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Every connection of a queued waiter is reset (what a proxy or a
/// failover does): the waiter reconnects, subscribes again, keeps its
/// place, and a release then wakes it at once. Before the fix it exited
/// 125 the moment the connections were reset.
#[test]
fn a_waiter_survives_a_connection_reset_and_is_woken_by_the_release() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let k = keys("reset");
    let holder = format!("{}:0:{}", hostname(), "ab".repeat(16));
    hold_as(&server, &holder, "reset");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let mut kids = Reaper(vec![spawn_waiter_at(&proxy.url(), "reset", &file)]);
    let owner = queued(&server, "reset", 1, &kids.0[0]);
    let channel = format!("{}{owner}", k.wake_prefix);
    assert!(wait_until(LIMIT, || numsub(&server, &channel) == 1));
    let accepted = proxy.stats().accepted;

    proxy.reset_all();
    assert!(
        wait_until(LIMIT, || proxy.stats().accepted >= accepted + 2
            && numsub(&server, &channel) == 1),
        "the waiter did not reconnect and subscribe again: {:?}",
        kids.0[0].try_wait()
    );
    assert_eq!(kids.0[0].try_wait().unwrap(), None, "the waiter gave up");
    assert_eq!(queue_of(&server, "reset"), vec![owner.clone()]);

    let released = release_as(&server, &holder, "reset");
    let token = token_in(&file).expect("the waiter never ran CMD");
    let woke = released.elapsed();
    assert!(token > 0);
    assert_eq!(wait_with_timeout(&mut kids.0[0], LIMIT).code(), Some(0));
    // Woken by the release on its new subscription, not by polling.
    assert!(woke < Duration::from_millis(900), "took {woke:?}");
}

/// Redis restarts (without persistence) under a queued waiter: the waiter
/// reconnects to the new server, checks the lock again, finds it free
/// (the holder's lease went with the old server) and takes it.
#[test]
fn a_waiter_survives_a_redis_restart_and_checks_the_lock_again() {
    let server = RedisServer::start();
    let port = server.port;
    let holder = format!("{}:0:{}", hostname(), "cd".repeat(16));
    hold_as(&server, &holder, "restart");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let mut kids = Reaper(vec![spawn_waiter_at(&server.url(), "restart", &file)]);
    queued(&server, "restart", 1, &kids.0[0]);

    drop(server);
    // The same port again, a new and empty server.
    let (child, _, _dir2) = launch_redis(
        |_, d| plain_args(port, d),
        |c, _, _| answers_as(port, c.id()),
    );
    let _restarted = scopeguard(child);
    let token = token_in(&file).expect("the waiter never ran CMD");
    assert!(token > 0);
    assert_eq!(wait_with_timeout(&mut kids.0[0], LIMIT).code(), Some(0));
}

/// Kills and reaps a child on drop.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scopeguard(c: Child) -> ChildGuard {
    ChildGuard(c)
}

/// No server answers for the rest of the wait: the waiter keeps trying
/// (with backoff) until its wait runs out, and only then exits 125 with
/// one line naming the server. Before the fix it exited at once.
#[test]
fn a_waiter_exits_125_only_once_its_wait_has_run_out_without_a_server() {
    let server = RedisServer::start();
    let holder = format!("{}:0:{}", hostname(), "ef".repeat(16));
    hold_as(&server, &holder, "gone");
    let url = server.url();
    let started = Instant::now();
    let mut cmd = distlock_at(&url);
    cmd.args(["run", "--wait", "3s", "gone", "--", "true"]);
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    queued(&server, "gone", 1, &child);
    drop(server);
    let st = wait_with_timeout(&mut child, LIMIT);
    let took = started.elapsed();
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert_eq!(st.code(), Some(125), "{stderr}");
    assert!(took >= Duration::from_secs(3), "gave up after {took:?}");
    assert!(took < Duration::from_secs(9), "gave up after {took:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("distlock: ") && stderr.contains(&url),
        "{stderr}"
    );
}

/// SIGQUIT, SIGUSR1 and SIGUSR2 end a wait at once too (exit 128+N, CMD
/// never runs); before the fix they were discarded.
#[test]
fn sigquit_sigusr1_and_sigusr2_end_a_wait_at_once() {
    let server = RedisServer::start();
    let _holder = Holder::start(&server.url(), &["run", "sigs"]);
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    for sig in [libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2] {
        let mut w = spawn_run(
            &server,
            &["--wait", "forever", "sigs"],
            r#": > "$1""#,
            &[&mark],
            None,
        );
        queued(&server, "sigs", 1, &w);
        let sent = Instant::now();
        signal(w.id() as i32, sig);
        assert_eq!(wait_with_timeout(&mut w, LIMIT).code(), Some(128 + sig));
        assert!(
            sent.elapsed() < Duration::from_secs(1),
            "{:?}",
            sent.elapsed()
        );
        assert!(!mark.exists());
        assert!(wait_until(LIMIT, || zcard(&server, &keys("sigs").queue) == 0));
    }
}

/// A server that does not answer the first attempt is exit 125 at once,
/// with or without a wait: riding out a dropped connection is for a
/// waiter that reached the server, not for a wrong URL or a server down
/// when the job starts (which would otherwise wait out `-w 1h` in silence).
#[test]
fn no_server_at_the_first_attempt_is_125_at_once_even_with_a_wait() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    for wait in ["0", "1h", "forever"] {
        let started = Instant::now();
        let out = exec(
            distlock_at(&url).args(["run", "--wait", wait, "nowhere", "--", "true"]),
            LIMIT,
        );
        assert_eq!(out.code, 125, "--wait {wait}: {out:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "--wait {wait}: took {:?}",
            started.elapsed()
        );
        assert!(out.stderr.contains(&url), "{out:?}");
    }
}

/// A waiter reads its place in the queue (ZRANK, for the status line)
/// before it writes anything, so a Redis user whose ACL predates ZRANK is
/// refused with nothing changed: no queue entry left behind to hold up the
/// waiters after it. Before the fix the script joined the queue, then
/// failed on ZRANK.
#[test]
fn a_user_denied_zrank_is_refused_before_it_joins_the_queue() {
    let server = RedisServer::start();
    hold_as(
        &server,
        &format!("{}:0:{}", hostname(), "ab".repeat(16)),
        "zr",
    );
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "old", "on", ">pw", "~*", "&*", "+@all", "-zrank",
    ]);
    let url = format!("redis://old:pw@127.0.0.1:{}", server.port);
    let out = exec(
        distlock_at(&url).args(["run", "--wait", "5s", "zr", "--", "true"]),
        LIMIT,
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stderr.contains("ZRANK"), "{out:?}");
    let queued: i64 = server.cmd(&["ZCARD", "distlock:{zr}:queue"]);
    assert_eq!(queued, 0, "the refused waiter left a queue entry");
    // Not even for a moment (its clean-up would remove an entry again):
    // the script never got as far as joining.
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    assert!(
        !stats.contains("cmdstat_zadd:"),
        "the refused waiter joined the queue before it was refused: {stats}"
    );
}

/// A woken waiter whose claim cannot end the hand-off (the XADD to
/// `settled` fails) exits 125 with one line saying why, and its claim
/// changes nothing: the fence where the last holder left it, the lock free,
/// CMD never started. `prepare` makes the XADD fail before the release.
/// Before the fix the claim moved the fence first and failed on the XADD:
/// a token burnt with nobody holding the lock, and the server's text.
fn a_claim_that_cannot_settle(
    name: &str,
    waiter_url: &str,
    prepare: impl Fn(&RedisServer),
    server: &RedisServer,
    says: &str,
) {
    let k = keys(name);
    let owner = format!("{}:0:{}", hostname(), "ef".repeat(16));
    hold_as(server, &owner, name);
    let fence: String = server.get(&format!("{}:fence", k.lock)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ran, err) = (dir.path().join("ran"), dir.path().join("err"));
    let mut waiter = distlock_at(waiter_url)
        .args(["run", "--wait", "20s", name, "--", "touch"])
        .arg(&ran)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    queued(server, name, 1, &waiter);
    prepare(server);
    release_as(server, &owner, name);
    let status = wait_with_timeout(&mut waiter, LIMIT);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert_eq!(status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("distlock: ") && stderr.contains(says),
        "{stderr}"
    );
    assert!(
        !stderr.contains("script") || stderr.contains("distlock's scripts"),
        "{stderr}"
    );
    assert_eq!(
        server.get(&format!("{}:fence", k.lock)),
        Some(fence),
        "the failed claim moved the fence"
    );
    assert_eq!(
        server.get(&k.lock),
        None,
        "the failed claim left the lock held"
    );
    assert!(!ran.exists(), "CMD ran");
}

/// A `settled` stream another client left at the last possible entry id:
/// XADD with an automatic id fails on it.
#[test]
fn a_settled_stream_at_its_last_id_fails_the_claim_before_the_fence_moves() {
    let server = RedisServer::start();
    let name = "fullsettled";
    let settled = format!("distlock:{{{name}}}:settled");
    let url = server.url();
    a_claim_that_cannot_settle(
        name,
        &url,
        |s| {
            let _: String = s.cmd(&[
                "XADD",
                &settled,
                "18446744073709551615-18446744073709551615",
                "x",
                "y",
            ]);
        },
        &server,
        &settled,
    );
}

/// A waiter leaving a free lock with nobody to wake must settle, and the
/// `settled` stream at its last possible id takes no entry: the LEAVE
/// fails with the queue as it was. Before the fix the waiter had already
/// left the queue when `stream_full` came back.
#[test]
fn a_leave_that_cannot_settle_fails_before_the_queue_changes() {
    let server = RedisServer::start();
    let name = "leavefull";
    let k = keys(name);
    hold_as(
        &server,
        &format!("{}:0:{}", hostname(), "ab".repeat(16)),
        name,
    );
    let dir = tempfile::tempdir().unwrap();
    let stderr = dir.path().join("stderr");
    let mut w = spawn_run(
        &server,
        &["--wait", "forever", name],
        "true",
        &[],
        Some(&stderr),
    );
    let owner = queued(&server, name, 1, &w);
    // Free without a release, which would wake the waiter: its own next
    // try is a 10 s lease away.
    let _: i64 = server.cmd(&["DEL", &k.lock]);
    let settled = format!("distlock:{{{name}}}:settled");
    let _: String = server.cmd(&[
        "XADD",
        &settled,
        "18446744073709551615-18446744073709551615",
        "x",
        "y",
    ]);
    signal(w.id() as i32, libc::SIGTERM);
    assert_eq!(wait_with_timeout(&mut w, LIMIT).code(), Some(143));
    assert!(
        zscore(&server, &k.queue, &owner).is_some(),
        "the failed leave changed the queue"
    );
}

/// A Redis user whose ACL lacks XADD: refused by name, nothing changed.
#[test]
fn a_user_denied_xadd_fails_the_claim_before_the_fence_moves() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "noxadd", "on", ">pw", "~*", "&*", "+@all", "-xadd",
    ]);
    let url = format!("redis://noxadd:pw@127.0.0.1:{}", server.port);
    a_claim_that_cannot_settle("noxadd", &url, |_| {}, &server, "may not run XADD");
}

/// A user whose ACL lacks a write the claim makes after its token (HSET on
/// the lease's metadata here) is refused before the token: no fence, no
/// lock, CMD never started, one line naming HSET. Before the fix the
/// token was issued, then the HSET failed: every attempt burnt a token
/// with nobody holding the lock.
#[test]
fn a_user_denied_a_later_write_is_refused_before_the_token() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "nohset", "on", ">pw", "~*", "&*", "+@all", "-hset",
    ]);
    let url = format!("redis://nohset:pw@127.0.0.1:{}", server.port);
    let out = exec(
        distlock_at(&url).args(["run", "nohset", "--", "true"]),
        LIMIT,
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("may not run HSET"), "{out:?}");
    assert_eq!(server.get(&fence("nohset")), None, "a token was burnt");
    assert_eq!(server.get(&keys("nohset").lock), None);
}

/// The same for a semaphore slot: before the fix the token and the HSET
/// of `tokens` went through and the ZADD of the slot was refused.
#[test]
fn a_user_denied_the_slot_write_is_refused_before_the_token() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "nozadd", "on", ">pw", "~*", "&*", "+@all", "-zadd",
    ]);
    let url = format!("redis://nozadd:pw@127.0.0.1:{}", server.port);
    let out = exec(
        distlock_at(&url).args(["run", "--limit", "2", "nozadd", "--", "true"]),
        LIMIT,
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("may not run ZADD"), "{out:?}");
    let mut con = server.conn();
    let left: Vec<String> = redis::cmd("KEYS").arg("*nozadd*").query(&mut con).unwrap();
    assert_eq!(left, Vec::<String>::new(), "a token was burnt");
}

/// A release wakes the first waiter still listening, but drops at most a
/// bounded number of waiters that no longer listen in one call (all of
/// them go at once after a restart that kept the queue, or `kill -9` of
/// many waiters): each call stays short whatever the queue's length. The
/// releaser, seeing its hand-off through, goes on a call at a time until
/// none is left. Before the fix one release dropped all 300 here, three
/// ZREMs each, in one call.
#[test]
fn a_release_drops_a_bounded_number_of_gone_waiters() {
    let server = RedisServer::start();
    let owner = format!("{}:0:{}", hostname(), "cd".repeat(16));
    hold_as(&server, &owner, "gone-many");
    let far = "99999999999999";
    for i in 0..300 {
        let w = format!("ghost:{i}:{}", "00".repeat(16));
        let _: () = server.cmd(&["ZADD", "distlock:{gone-many}:queue", &i.to_string(), &w]);
        let _: () = server.cmd(&["ZADD", "distlock:{gone-many}:deadlines", far, &w]);
    }
    let mon = Monitor::start(&server);
    release_as(&server, &owner, "gone-many");
    let log = mon.sync(&server);
    // MONITOR shows a script's call, then the commands it ran.
    let mut zrems_per_call: Vec<u64> = Vec::new();
    for e in &log {
        let cmd = e.args[0].to_ascii_uppercase();
        if e.client != "lua" && (cmd == "EVALSHA" || cmd == "EVAL") {
            zrems_per_call.push(0);
        } else if e.client == "lua" && cmd == "ZREM" {
            *zrems_per_call.last_mut().expect("a ZREM outside a script") += 1;
        }
    }
    assert!(
        zrems_per_call.len() > 1 && zrems_per_call.iter().all(|&n| n <= 3 * 16 + 3),
        "ZREMs per script call: {zrems_per_call:?}"
    );
    let left: i64 = server.cmd(&["ZCARD", "distlock:{gone-many}:queue"]);
    assert_eq!(left, 0, "the releaser leaves no gone waiter behind");
}
