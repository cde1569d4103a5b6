//! `run --once-per D` against a real redis-server and the real binary:
//! once per window, on whichever host is up.
//!
//! - three concurrent waiting runs: CMD runs once, all exit 0, and the two
//!   late ones burn no fencing token;
//! - the first run fails (or its distlock is SIGKILLed): exactly one of the
//!   waiters runs CMD again and succeeds, the third finds the mark;
//! - only a CMD that exited 0 by itself with the lease still held writes
//!   the mark: non-zero, a signal, 126/127, a lost lease (124, also when CMD
//!   exits 0 on the kill signal), an interrupted waiter write none;
//! - the mark expires D after the acquisition (server clock), not after
//!   the release, and each run judges it by its own D;
//! - `--done-exit-code`, `-q`, `inspect` (plain and JSON), `list`,
//!   `release --forget-done`, and the usage errors.
//!
//! "Hosts" are concurrent distlock processes, told apart by a label their
//! CMD writes. CMDs report through files and block on a gate file the test
//! creates; every wait is a poll with a deadline, every process is bounded.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn done_key(name: &str) -> String {
    format!("distlock:{{{name}}}:done")
}

fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// The done mark's fields, empty when there is none.
fn mark(server: &RedisServer, name: &str) -> Vec<(String, String)> {
    server.cmd(&["HGETALL", &done_key(name)])
}

fn field(mark: &[(String, String)], f: &str) -> Option<String> {
    mark.iter().find(|(k, _)| k == f).map(|(_, v)| v.clone())
}

/// A finished distlock.
#[derive(Debug)]
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `distlock ARGS…` in `dir`, to completion (bounded).
fn dl(server: &RedisServer, dir: &Path, args: &[&str]) -> Out {
    let mut child = spawn(server, dir, args, "x");
    finish(&mut child, dir, "x")
}

/// A distlock in the background in `dir`; its output goes to
/// `dir/TAG.out` and `dir/TAG.err`.
fn spawn(server: &RedisServer, dir: &Path, args: &[&str], tag: &str) -> Child {
    distlock(server)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{tag}.err"))).unwrap())
        .spawn()
        .unwrap()
}

fn finish(child: &mut Child, dir: &Path, tag: &str) -> Out {
    let st = wait_with_timeout(child, LIMIT);
    let read = |ext: &str| std::fs::read_to_string(dir.join(format!("{tag}.{ext}"))).unwrap();
    Out {
        code: st.code(),
        stdout: read("out"),
        stderr: read("err"),
    }
}

/// CMD for a "host": appends its label (`$0`) to `./runs`, then waits for
/// `./gate` (bounded), then succeeds, or fails when `./fail-first` exists
/// and it was the first run.
const JOB: &str = r#"echo "$0 $DISTLOCK_FENCING_TOKEN" >> runs
n=$(wc -l < runs)
i=0; while [ ! -e gate ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done
if [ -e fail-first ] && [ "$n" -eq 1 ]; then exit 3; fi
exit 0"#;

/// `run --wait 20s --once-per 1h NAME -- sh -c JOB LABEL` in the background.
fn host(server: &RedisServer, dir: &Path, name: &str, label: &str, extra: &[&str]) -> Child {
    let mut args = vec!["run", "--wait", "20s", "--once-per", "1h"];
    args.extend(extra);
    args.extend([name, "--", "sh", "-c", JOB, label]);
    spawn(server, dir, &args, label)
}

fn runs(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("runs"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The hosts whose CMD ran, in order, each with its fencing token; the
/// tokens must be strictly increasing.
fn runs_by(dir: &Path) -> (Vec<String>, Vec<u64>) {
    let (labels, tokens): (Vec<String>, Vec<u64>) = runs(dir)
        .iter()
        .map(|l| {
            let (label, token) = l.split_once(' ').unwrap();
            (label.to_owned(), token.parse::<u64>().unwrap())
        })
        .unzip();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    (labels, tokens)
}

/// The last fencing token issued for NAME.
fn last_token(server: &RedisServer, name: &str) -> u64 {
    server
        .get(&format!("{}:fence", lock_key(name)))
        .expect("a counter")
        .parse()
        .unwrap()
}

fn open_gate(dir: &Path) {
    std::fs::write(dir.join("gate"), "").unwrap();
}

/// Waits until `n` CMDs have started.
fn wait_runs(dir: &Path, n: usize) {
    assert!(
        wait_until(LIMIT, || runs(dir).len() >= n),
        "expected {n} runs, got {:?}",
        runs(dir)
    );
}

/// Waits until `n` waiters are queued for `name`.
fn wait_queued(server: &RedisServer, name: &str, n: u64) {
    let queue = format!("{}:queue", lock_key(name));
    assert!(
        wait_until(LIMIT, || server.cmd::<u64>(&["ZCARD", &queue]) == n),
        "expected {n} waiters in {queue}"
    );
}

/// A plain run that records whether CMD started (`./ran-TAG`).
fn once(server: &RedisServer, dir: &Path, pre: &[&str], name: &str, tag: &str) -> Out {
    let mut args = pre.to_vec();
    args.extend(["run", "--once-per", "1h", name, "--", "touch"]);
    let file = format!("ran-{tag}");
    args.push(&file);
    let mut child = spawn(server, dir, &args, tag);
    finish(&mut child, dir, tag)
}

fn ran(dir: &Path, tag: &str) -> bool {
    dir.join(format!("ran-{tag}")).exists()
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().to_owned();
    (d, p)
}

// ---------------------------------------------------------------------------

#[test]
fn three_concurrent_waiting_hosts_run_cmd_once_and_all_exit_0() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    let mut a = host(&server, &dir, "billing", "A", &[]);
    wait_runs(&dir, 1);
    let mut b = host(&server, &dir, "billing", "B", &[]);
    let mut c = host(&server, &dir, "billing", "C", &[]);
    wait_queued(&server, "billing", 2);
    open_gate(&dir);
    let opened = Instant::now();
    let outs = [
        finish(&mut a, &dir, "A"),
        finish(&mut b, &dir, "B"),
        finish(&mut c, &dir, "C"),
    ];
    // A sees its hand-off through, and B and C, skipping, end it: A does
    // not stay for the turns its release promised them (B's claim window
    // alone is 900 ms).
    let a_done = opened.elapsed();
    for o in &outs {
        assert_eq!(o.code, Some(0), "{o:?}");
    }
    assert!(
        a_done < Duration::from_millis(900),
        "A stayed after nobody was left to claim: {a_done:?}"
    );
    let (labels, tokens) = runs_by(&dir);
    assert_eq!(labels, ["A"], "CMD must run exactly once");
    let token = tokens[0];
    for o in &outs[1..] {
        assert!(
            o.stderr.contains("billing: already done")
                && o.stderr.contains(&format!("fencing token {token}")),
            "{o:?}"
        );
        assert_eq!(o.stderr.lines().count(), 1, "one line: {o:?}");
    }
    // The late hosts took no lease: no token was burnt, nothing is held,
    // nobody is left in the queue.
    assert_eq!(last_token(&server, "billing"), token);
    assert_eq!(server.get(&lock_key("billing")), None);
    wait_queued(&server, "billing", 0);
    let m = mark(&server, "billing");
    assert_eq!(field(&m, "fencing_token"), Some(token.to_string()), "{m:?}");
    assert_eq!(field(&m, "host"), Some(hostname()), "{m:?}");
    assert_eq!(
        field(&m, "once_per_ms").as_deref(),
        Some("3600000"),
        "{m:?}"
    );
}

#[test]
fn a_failed_first_run_is_retried_by_exactly_one_waiter_and_the_third_skips() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    std::fs::write(dir.join("fail-first"), "").unwrap();
    let mut a = host(&server, &dir, "nightly", "A", &[]);
    wait_runs(&dir, 1);
    let mut b = host(&server, &dir, "nightly", "B", &[]);
    wait_queued(&server, "nightly", 1);
    let mut c = host(&server, &dir, "nightly", "C", &[]);
    wait_queued(&server, "nightly", 2);
    open_gate(&dir);
    let (oa, ob, oc) = (
        finish(&mut a, &dir, "A"),
        finish(&mut b, &dir, "B"),
        finish(&mut c, &dir, "C"),
    );
    assert_eq!(oa.code, Some(3), "the failure is A's own status: {oa:?}");
    assert_eq!(ob.code, Some(0), "{ob:?}");
    assert_eq!(oc.code, Some(0), "{oc:?}");
    // FIFO: B was next in line, so B ran it; C found B's mark.
    let (labels, tokens) = runs_by(&dir);
    assert_eq!(labels, ["A", "B"]);
    let b_token = tokens[1];
    assert!(
        oc.stderr.contains("already done")
            && oc.stderr.contains(&format!("fencing token {b_token}")),
        "{oc:?}"
    );
    assert_eq!(
        field(&mark(&server, "nightly"), "fencing_token"),
        Some(b_token.to_string())
    );
}

#[test]
fn a_host_killed_mid_job_is_replaced_by_the_next_waiter() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    // A short lease, so the dead host's lease runs out soon.
    let ttl = ["--ttl", "2s"];
    let mut a = host(&server, &dir, "crashy", "A", &ttl);
    wait_runs(&dir, 1);
    // B queues before C: the queue is FIFO, so B is next.
    let mut b = host(&server, &dir, "crashy", "B", &ttl);
    wait_queued(&server, "crashy", 1);
    let mut c = host(&server, &dir, "crashy", "C", &ttl);
    wait_queued(&server, "crashy", 2);
    // A's distlock dies: no release, no mark; its guardian kills CMD.
    signal(a.id() as i32, libc::SIGKILL);
    let _ = a.wait();
    wait_runs(&dir, 2);
    assert!(
        mark(&server, "crashy").is_empty(),
        "a killed host must leave no mark"
    );
    open_gate(&dir);
    let (ob, oc) = (finish(&mut b, &dir, "B"), finish(&mut c, &dir, "C"));
    assert_eq!((ob.code, oc.code), (Some(0), Some(0)), "{ob:?} {oc:?}");
    assert_eq!(runs_by(&dir).0, ["A", "B"]);
    assert!(oc.stderr.contains("already done"), "{oc:?}");
}

#[test]
fn only_a_cmd_that_exits_0_by_itself_writes_the_mark() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    let noexec = dir.join("noexec.sh");
    std::fs::write(&noexec, "#!/bin/sh\nexit 0\n").unwrap();
    let noexec = noexec.to_str().unwrap().to_owned();
    let cases: [(&[&str], i32); 4] = [
        (&["sh", "-c", "exit 1"], 1),
        (&["sh", "-c", "kill -TERM $$"], 128 + libc::SIGTERM),
        (&["/nonexistent/distlock-test-cmd"], 127),
        (&[noexec.as_str()], 126),
    ];
    for (cmd, code) in cases {
        let mut args = vec!["run", "--once-per", "1h", "job", "--"];
        args.extend(cmd);
        let out = dl(&server, &dir, &args);
        assert_eq!(out.code, Some(code), "{cmd:?}: {out:?}");
        assert!(mark(&server, "job").is_empty(), "{cmd:?} left a mark");
        assert_eq!(server.get(&lock_key("job")), None, "{cmd:?} left the lease");
    }
    // So the next run runs CMD, and its success counts.
    let out = once(&server, &dir, &[], "job", "ok");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(ran(&dir, "ok"));
    assert_eq!(
        field(&mark(&server, "job"), "fencing_token"),
        Some(last_token(&server, "job").to_string())
    );
}

#[test]
fn a_lost_lease_exits_124_and_leaves_no_mark_even_if_cmd_then_exits_0() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    // CMD exits 0 on the kill signal: still not a success.
    let cmd = r#"trap 'exit 0' TERM; echo up > started; while :; do sleep 0.01; done"#;
    let mut child = spawn(
        &server,
        &dir,
        &[
            "run",
            "--ttl",
            "3s",
            "--once-per",
            "1h",
            "lost",
            "--",
            "sh",
            "-c",
            cmd,
        ],
        "r",
    );
    assert!(wait_until(LIMIT, || dir.join("started").exists()));
    let _: u64 = server.cmd(&["DEL", &lock_key("lost")]);
    let out = finish(&mut child, &dir, "r");
    assert_eq!(out.code, Some(124), "{out:?}");
    assert!(
        mark(&server, "lost").is_empty(),
        "a lost lease wrote a mark"
    );
}

#[test]
fn an_interrupted_waiter_leaves_no_mark() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    let held = dl(
        &server,
        &dir,
        &["acquire", "--ttl", "30s", "--owner", "op", "w"],
    );
    assert_eq!(held.code, Some(0), "{held:?}");
    let mut waiter = spawn(
        &server,
        &dir,
        &[
            "run",
            "--wait",
            "20s",
            "--once-per",
            "1h",
            "w",
            "--",
            "touch",
            "ran-w",
        ],
        "w",
    );
    wait_queued(&server, "w", 1);
    signal(waiter.id() as i32, libc::SIGTERM);
    let out = finish(&mut waiter, &dir, "w");
    assert_eq!(out.code, Some(128 + libc::SIGTERM), "{out:?}");
    assert!(!ran(&dir, "w"));
    assert!(mark(&server, "w").is_empty());
    assert_eq!(server.get(&lock_key("w")).as_deref(), Some("op"));
}

#[test]
fn the_mark_expires_d_after_the_acquisition_not_the_release() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    let before = server_ms(&server);
    let out = dl(
        &server,
        &dir,
        &["run", "--once-per", "10s", "slow", "--", "sleep", "1"],
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let m = mark(&server, "slow");
    let left = pttl(&server, &done_key("slow"));
    assert!(
        left > 0 && left <= 9_000,
        "a CMD that ran 1s leaves at most D - 1s: PTTL {left}"
    );
    let at: u64 = field(&m, "at_ms").unwrap().parse().unwrap();
    assert!(
        at >= before && at + 1_000 <= server_ms(&server),
        "at_ms is the acquisition time: {at} (test began at {before})"
    );

    // A short window: the mark vanishes by itself, and then a run runs CMD.
    let out = dl(
        &server,
        &dir,
        &["run", "--once-per", "1500ms", "short", "--", "sleep", "1"],
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(pttl(&server, &done_key("short")) <= 500);
    assert!(
        wait_until(LIMIT, || pttl(&server, &done_key("short")) == -2),
        "the mark never expired"
    );
    let mut args = vec![
        "run",
        "--once-per",
        "1500ms",
        "short",
        "--",
        "touch",
        "ran-again",
    ];
    let out = dl(&server, &dir, &args);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        dir.join("ran-again").exists(),
        "CMD must run once the window is over"
    );

    // A run that outlasts its window leaves no mark at all.
    args = vec!["run", "--once-per", "300ms", "longer", "--", "sleep", "0.5"];
    let out = dl(&server, &dir, &args);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(mark(&server, "longer").is_empty());
}

#[test]
fn each_run_judges_the_mark_by_its_own_window() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    assert_eq!(once(&server, &dir, &[], "win", "first").code, Some(0));
    let at: u64 = field(&mark(&server, "win"), "at_ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait_until(LIMIT, || server_ms(&server) > at + 300));
    // The mark is younger than 1h but older than 200ms.
    let args = [
        "run",
        "--once-per",
        "200ms",
        "win",
        "--",
        "touch",
        "ran-short",
    ];
    let out = dl(&server, &dir, &args);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(dir.join("ran-short").exists(), "{out:?}");
}

#[test]
fn done_exit_code_and_quiet() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    assert_eq!(once(&server, &dir, &[], "rep", "1").code, Some(0));
    assert!(ran(&dir, "1"));

    let out = dl(
        &server,
        &dir,
        &[
            "run",
            "--once-per",
            "1h",
            "--done-exit-code",
            "7",
            "rep",
            "--",
            "touch",
            "ran-2",
        ],
    );
    assert_eq!(out.code, Some(7), "{out:?}");
    assert!(!ran(&dir, "2"), "CMD must not start when the job is done");
    let line = out.stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{out:?}");
    // When (RFC 3339 UTC and how long ago), where, and with which token.
    assert!(line.starts_with("distlock: rep: already done "), "{line}");
    assert!(line.contains(" ago ("), "{line}");
    let at = line.split('(').nth(1).unwrap().split(')').next().unwrap();
    assert!(
        humantime::parse_rfc3339(at).is_ok() && at.ends_with('Z'),
        "{at:?} in {line}"
    );
    assert!(line.contains(&format!(" on {} ", hostname())), "{line}");
    let token = last_token(&server, "rep");
    assert!(line.contains(&format!("fencing token {token}")), "{line}");
    assert!(out.stdout.is_empty());

    let out = once(&server, &dir, &["-q"], "rep", "3");
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!ran(&dir, "3"));
    assert_eq!(out.stderr, "", "-q silences the done line");
}

#[test]
fn forget_done_deletes_only_the_mark_and_exits_0_either_way() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    assert_eq!(once(&server, &dir, &[], "fd", "1").code, Some(0));
    // A held lease is left alone, and no owner is needed.
    assert_eq!(
        dl(
            &server,
            &dir,
            &["acquire", "--owner", "op", "--ttl", "30s", "fd"]
        )
        .code,
        Some(0)
    );
    let token = field(&mark(&server, "fd"), "fencing_token").unwrap();
    let out = dl(&server, &dir, &["release", "--forget-done", "fd"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with("forgot the done mark of fd: ")
            && out.stdout.contains(&format!("token {token}")),
        "{out:?}"
    );
    assert!(mark(&server, "fd").is_empty());
    assert_eq!(server.get(&lock_key("fd")).as_deref(), Some("op"));
    assert!(pttl(&server, &lock_key("fd")) > 0);

    // No mark: says so, still 0. DISTLOCK_OWNER in the environment (a
    // shell that took a lock) is no conflict.
    let out = distlock(&server)
        .env("DISTLOCK_OWNER", "op")
        .args(["release", "--forget-done", "fd"])
        .output_within(Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "fd had no done mark\n"
    );
    assert_eq!(server.get(&lock_key("fd")).as_deref(), Some("op"));

    // With the mark gone, the next run runs CMD again.
    assert_eq!(
        dl(&server, &dir, &["release", "--owner", "op", "fd"]).code,
        Some(0)
    );
    assert_eq!(once(&server, &dir, &[], "fd", "2").code, Some(0));
    assert!(ran(&dir, "2"));
}

#[test]
fn inspect_and_list_show_the_mark() {
    let server = RedisServer::start();
    let (_d, dir) = tmp();
    let out = dl(&server, &dir, &["inspect", "--json", "ins"]);
    assert_eq!(json(&out.stdout)["done"], Value::Null, "{out:?}");

    let before = server_ms(&server);
    assert_eq!(once(&server, &dir, &[], "ins", "1").code, Some(0));
    let token = last_token(&server, "ins");
    let out = dl(&server, &dir, &["inspect", "ins"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let done = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("done: "))
        .unwrap_or_else(|| panic!("{out:?}"));
    assert!(
        done.contains(&format!(" on {}, token {token}, expires in ", hostname())),
        "{done}"
    );

    let out = dl(&server, &dir, &["inspect", "--json", "ins"]);
    let v = json(&out.stdout);
    let d = &v["done"];
    let at = humantime::parse_rfc3339(d["at"].as_str().unwrap()).unwrap();
    let at_ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(at_ms >= before && at_ms <= server_ms(&server), "{d}");
    assert_eq!(d["host"], hostname().as_str());
    assert_eq!(d["fencing_token"], token);
    let left = d["expires_in_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 3_600_000, "{d}");

    // `list` shows held locks: hold it, and the mark shows beside it.
    assert_eq!(
        dl(
            &server,
            &dir,
            &["acquire", "--owner", "op", "--ttl", "30s", "ins"]
        )
        .code,
        Some(0)
    );
    let out = dl(&server, &dir, &["list"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut lines = out.stdout.lines();
    assert!(lines.next().unwrap().ends_with("DONE"), "{out:?}");
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("ins ") && row.contains(&format!(" token {token}, expires in ")),
        "{row}"
    );
    let out = dl(&server, &dir, &["list", "--json"]);
    let arr = json(&out.stdout);
    assert_eq!(arr[0]["done"]["fencing_token"], token, "{arr}");
    assert_eq!(arr[0]["owner"], "op");
}

#[test]
fn bad_input_is_one_usage_line_exit_2() {
    // An unreachable server: all of these fail before any connection.
    let bad: &[&[&str]] = &[
        &["run", "--once-per", "0", "x", "--", "true"],
        &["run", "--once-per", "0s", "x", "--", "true"],
        &["run", "--once-per", "-1s", "x", "--", "true"],
        &["run", "--once-per", "20", "x", "--", "true"],
        &["run", "--once-per", "100001y", "x", "--", "true"],
        &["run", "--once-per", "1h", "--limit", "2", "x", "--", "true"],
        &[
            "run",
            "--once-per",
            "1h",
            "--done-exit-code",
            "256",
            "x",
            "--",
            "true",
        ],
        &[
            "run",
            "--once-per",
            "1h",
            "--done-exit-code",
            "-1",
            "x",
            "--",
            "true",
        ],
        &["run", "--done-exit-code", "3", "x", "--", "true"],
        &["release", "--forget-done", "--owner", "op", "x"],
        &["release", "--forget-done", "--force", "x"],
    ];
    for args in bad {
        let out = bare_distlock()
            .env("DISTLOCK_REDIS_URL", "redis://127.0.0.1:1")
            .args(*args)
            .output_within(Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("distlock: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = bare_distlock()
        .args(["run", "--once-per", "-1s", "x", "--", "true"])
        .output_within(Duration::from_secs(30));
    assert!(String::from_utf8_lossy(&out.stderr).contains("positive"));
    let out = bare_distlock()
        .args(["run", "--once-per", "1h", "--limit", "3", "x", "--", "true"])
        .output_within(Duration::from_secs(30));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--limit 3"));
}
