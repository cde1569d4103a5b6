//! What a `run` leaves behind on etcd, through the real binary against a
//! real `etcd`: `--once-per` (the done mark, judged in the acquisition,
//! written with the release of a success only), `release --forget-done`,
//! the last-run record and holder metadata in `inspect`, and the run
//! history with its cap. The same output as on Redis (tests/it/once_per.rs,
//! tests/it/history.rs); held to docs/guide.md "etcd".

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::etcd::shared;
use crate::common::*;

fn at() -> std::process::Command {
    crate::common::etcd::at(&shared().url())
}

fn dl(args: &[&str]) -> Out {
    exec(at().args(args), LIMIT)
}

/// `run --once-per 1h NAME -- sh -c SCRIPT`, whose CMD appends its token to
/// `ran` in `dir`.
fn once(dir: &Path, name: &str, window: &str, exit: u8) -> Out {
    let script = format!(
        "echo \"$DISTLOCK_FENCING_TOKEN\" >> '{}'; exit {exit}",
        dir.join("ran").display()
    );
    dl(&["run", "--once-per", window, name, "--", "sh", "-c", &script])
}

/// The tokens of the runs whose CMD started, oldest first.
fn ran(dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(dir.join("ran"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

fn done_key(name: &str) -> String {
    format!("distlock:{{{name}}}:done")
}

fn inspect_json(name: &str) -> Value {
    let out = dl(&["inspect", name, "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

/// The lease a key is attached to and that lease's TTL left, in seconds.
fn lease_ttl(key: &str) -> i64 {
    let e = shared();
    let got: Value = serde_json::from_str(&e.ctl(&["get", key, "-w", "json"])).unwrap();
    let lease = got["kvs"][0]["lease"].as_i64().expect("under a lease");
    let ttl: Value =
        serde_json::from_str(&e.ctl(&["lease", "timetolive", &format!("{lease:x}"), "-w", "json"]))
            .unwrap();
    ttl["ttl"].as_i64().unwrap()
}

#[test]
fn three_runs_in_a_row_run_cmd_once_and_the_later_ones_say_it_was_done() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-once";
    let first = once(dir.path(), name, "1h", 0);
    assert_eq!(first.code, 0, "{first:?}");
    let token = ran(dir.path())[0];
    let fence_before = inspect_json(name)["fencing_token"].clone();
    for _ in 0..2 {
        let later = once(dir.path(), name, "1h", 0);
        assert_eq!(later.code, 0, "the done exit code: {later:?}");
        assert_eq!(later.stderr.lines().count(), 1, "{}", later.stderr);
        let line = later.stderr.trim_end();
        assert!(
            line.starts_with(&format!("distlock: {name}: already done ")),
            "{line}"
        );
        assert!(
            line.ends_with(&format!(
                "on {} with fencing token {token}; CMD not started (--once-per 1h)",
                hostname()
            )),
            "{line}"
        );
    }
    assert_eq!(ran(dir.path()), [token], "CMD ran once");
    assert_eq!(
        inspect_json(name)["fencing_token"],
        fence_before,
        "a run that found the mark took no lease"
    );
    // The mark expires with a lease of the window's length at most.
    let left = lease_ttl(&done_key(name));
    assert!((3590..=3600).contains(&left), "mark's lease TTL {left}");
    // --done-exit-code and -q, as on Redis.
    let out = dl(&[
        "-q",
        "run",
        "--once-per",
        "1h",
        "--done-exit-code",
        "9",
        name,
        "--",
        "true",
    ]);
    assert_eq!((out.code, out.stderr.as_str()), (9, ""), "{out:?}");
}

#[test]
fn a_failing_run_leaves_no_mark_and_the_next_run_runs() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-fail";
    assert_eq!(once(dir.path(), name, "1h", 3).code, 3);
    assert_eq!(
        shared().get(&done_key(name)),
        None,
        "no mark after a failure"
    );
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    assert_eq!(ran(dir.path()).len(), 2, "the run after a failure ran CMD");
    assert!(shared().get(&done_key(name)).is_some(), "a success marks");
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    assert_eq!(ran(dir.path()).len(), 2, "then the job is done");
}

#[test]
fn forget_done_removes_the_mark_and_the_next_run_runs() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-forget";
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    let token = ran(dir.path())[0];
    let out = dl(&["release", name, "--forget-done"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .starts_with(&format!("forgot the done mark of {name}: "))
            && out
                .stdout
                .contains(&format!(" on {}, token {token}", hostname())),
        "{out:?}"
    );
    assert_eq!(shared().get(&done_key(name)), None);
    let again = dl(&["release", name, "--forget-done"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.stdout, format!("{name} had no done mark\n"));
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    assert_eq!(ran(dir.path()).len(), 2, "the next run ran CMD");
}

#[test]
fn each_run_judges_the_mark_by_its_own_window() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-window";
    let start = Instant::now();
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    // Whole seconds only, as for --ttl: a usage error that says so.
    let out = once(dir.path(), name, "1500ms", 0);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("whole number of seconds"), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    // Younger than a 3s window: done.
    assert_eq!(once(dir.path(), name, "3s", 0).code, 0);
    assert_eq!(ran(dir.path()).len(), 1, "{:?}", start.elapsed());
    // Older than it (by the mark's lease, etcd's clock): runs again.
    while start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(once(dir.path(), name, "3s", 0).code, 0);
    assert_eq!(ran(dir.path()).len(), 2, "the 3s window is over");
}

#[test]
fn inspect_shows_holder_metadata_the_last_run_and_the_mark() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-inspect";
    let inside = dir.path().join("inside");
    let script = format!(
        "{bin} inspect {name} --json > '{i}.json'; {bin} inspect {name} > '{i}.txt'; echo $DISTLOCK_FENCING_TOKEN > '{i}.token'",
        bin = bin().display(),
        i = inside.display()
    );
    let out = dl(&["run", "--once-per", "1h", name, "--", "sh", "-c", &script]);
    assert_eq!(out.code, 0, "{out:?}");
    let read = |ext: &str| std::fs::read_to_string(inside.with_extension(ext)).unwrap();
    let token: u64 = read("token").trim().parse().unwrap();
    let held: Value = serde_json::from_str(&read("json")).unwrap();
    let host = hostname();
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["host"], host.as_str(), "{held}");
    assert!(held["pid"].as_u64().unwrap() > 0, "{held}");
    assert!(
        held["command"].as_str().unwrap().starts_with("sh -c "),
        "{held}"
    );
    let acquired = held["acquired_at"].as_str().unwrap();
    assert!(acquired.ends_with('Z') && acquired.contains('T'), "{held}");
    let text = read("txt");
    let second: Vec<&str> = text.lines().collect();
    assert!(second[0].contains(&format!("held by {host}:")), "{text}");
    assert!(
        second[1].starts_with(&format!("  acquired {acquired} on {host}, pid ")),
        "{text}"
    );
    assert!(second[1].contains(": sh -c "), "{text}");

    let after = inspect_json(name);
    assert_eq!(after["held"], false, "{after}");
    assert!(after["host"].is_null(), "no metadata once free: {after}");
    let last = &after["last_run"];
    assert_eq!(last["host"], host.as_str(), "{after}");
    assert_eq!(last["exit"], 0, "{after}");
    assert_eq!(last["fencing_token"], token, "{after}");
    assert!(
        last["owner"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{host}:")),
        "{after}"
    );
    assert!(
        last["started_at"].as_str().unwrap().ends_with('Z'),
        "{after}"
    );
    assert!(last["duration_ms"].as_u64().is_some(), "{after}");
    let done = &after["done"];
    assert_eq!(done["host"], host.as_str(), "{after}");
    assert_eq!(done["fencing_token"], token, "{after}");
    assert!(done["at"].as_str().unwrap().ends_with('Z'), "{after}");
    let left = done["expires_in_ms"].as_u64().unwrap();
    assert!((3_500_000..=3_600_000).contains(&left), "{after}");

    let plain = dl(&["inspect", name]);
    assert_eq!(plain.code, 0, "{plain:?}");
    let lines: Vec<&str> = plain.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("{name}: free, last token {token}"),
        "{plain:?}"
    );
    assert!(
        lines[1].starts_with(&format!("  last run: {host}, "))
            && lines[1].ends_with(&format!(", exit 0, token {token}")),
        "{plain:?}"
    );
    assert!(
        lines[2].starts_with("  done: ")
            && lines[2].contains(&format!(" on {host}, token {token}, expires in ")),
        "{plain:?}"
    );
}

fn outcomes(recs: &[Value]) -> Vec<&str> {
    recs.iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect()
}

fn history(name: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["history", name, "--json"];
    args.extend(extra);
    let out = dl(&args);
    assert_eq!(out.code, 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn history_lists_the_runs_newest_first_with_their_exit_codes() {
    let name = "etcd-rec-history";
    let e = shared();
    assert_eq!(dl(&["history", name]).stdout, "", "no records: nothing");
    assert!(history(name, &[]).is_empty());
    let run = |args: &[&str]| {
        let mut all = vec!["run", name];
        all.extend(args);
        dl(&all).code
    };
    assert_eq!(run(&["--", "true"]), 0);
    assert_eq!(run(&["--", "sh", "-c", "exit 3"]), 3);
    assert_eq!(run(&["--", "sh", "-c", "kill -TERM $$"]), 143);
    assert_eq!(run(&["--", "/nonexistent/distlock-test-cmd"]), 127);
    // Lease lost: the key deleted under a running CMD.
    let key = format!("distlock:{{{name}}}");
    let mut child = at()
        .args(["run", name, "--ttl", "3s", "--", "sleep", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(LIMIT, || e.get(&key).is_some()));
    e.ctl(&["del", &key]);
    assert_eq!(wait_with_timeout(&mut child, LIMIT).code(), Some(124));
    let once = ["--once-per", "1h", "--done-exit-code", "9", "--", "true"];
    assert_eq!(run(&once), 0);
    assert_eq!(run(&once), 9);

    let recs = history(name, &[]);
    assert_eq!(
        outcomes(&recs),
        [
            "skipped_done",
            "success",
            "lease_lost",
            "not_started",
            "signaled",
            "failed",
            "success"
        ]
    );
    let codes: Vec<i64> = recs
        .iter()
        .map(|r| r["exit_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [9, 0, 124, 127, 143, 3, 0]);
    let host = hostname();
    let mut last_token = u64::MAX;
    for r in &recs {
        assert_eq!(r["host"], host.as_str(), "{r}");
        let pid = r["pid"].as_u64().unwrap();
        let owner = r["owner"].as_str().unwrap();
        assert!(owner.starts_with(&format!("{host}:{pid}:")), "{r}");
        let started = r["started_at"].as_str().unwrap();
        assert!(started.ends_with('Z') && started.contains('T'), "{r}");
        assert!(r["duration_ms"].as_u64().is_some(), "{r}");
        if r["outcome"] == "skipped_done" {
            assert!(r["fencing_token"].is_null(), "{r}");
        } else {
            let token = r["fencing_token"].as_u64().unwrap();
            assert!(token < last_token, "newest first: {r}");
            last_token = token;
        }
    }
    assert!(recs[2]["duration_ms"].as_u64().unwrap() < 15_000);

    let out = dl(&["history", name]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1 + recs.len(), "{}", out.stdout);
    assert_eq!(lines[0], "+xxx!+-", "{}", out.stdout);
    for (line, outcome) in lines[1..].iter().zip(outcomes(&recs)) {
        assert!(line.contains(outcome) && line.contains(&host), "{line}");
    }
    assert_eq!(
        outcomes(&history(name, &["-n", "2"])),
        ["skipped_done", "success"]
    );
}

/// A key under a name's history prefix that another client wrote used to
/// make `history` fail with 125, hiding every run; as on Redis it is now
/// skipped with one warning (none with `-q`) and the records are shown.
#[test]
fn a_foreign_history_key_is_skipped_with_one_warning() {
    let name = "etcd-rec-stray";
    assert_eq!(dl(&["run", name, "--", "true"]).code, 0);
    // Sorts after every record's key, so it is among the newest read.
    let stray = format!("distlock:{{{name}}}:history/zzz");
    shared().ctl(&["put", &stray, "not a record"]);

    let out = dl(&["history", "--json", name]);
    assert_eq!(out.code, 0, "{out:?}");
    let recs: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(outcomes(&recs), ["success"]);
    let warnings: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{out:?}");
    assert!(warnings[0].contains("skipped 1"), "{out:?}");
    assert!(warnings[0].contains("history"), "{out:?}");

    let out = dl(&["-q", "history", name]);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    assert!(out.stdout.contains("success"), "{out:?}");
    shared().ctl(&["del", &stray]);
}

#[test]
fn history_keeps_at_most_the_configured_number() {
    let name = "etcd-rec-cap";
    let prefix = format!("distlock:{{{name}}}:history/");
    let stored = || {
        shared()
            .ctl(&["get", &prefix, "--prefix", "--keys-only"])
            .lines()
            .filter(|l| !l.is_empty())
            .count()
    };
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let out = dl(&[
            "run",
            "--history-keep",
            "2",
            name,
            "--",
            "sh",
            "-c",
            "echo $DISTLOCK_FENCING_TOKEN",
        ]);
        assert_eq!(out.code, 0, "{out:?}");
        tokens.push(out.stdout.trim().parse::<u64>().unwrap());
    }
    let recs = history(name, &[]);
    let kept: Vec<u64> = recs
        .iter()
        .map(|r| r["fencing_token"].as_u64().unwrap())
        .collect();
    assert_eq!(kept, [tokens[3], tokens[2]], "the newest two");
    assert_eq!(stored(), 2, "the older records are deleted from etcd");
    assert_eq!(
        dl(&["run", "--history-keep", "0", name, "--", "true"]).code,
        0
    );
    assert!(history(name, &[]).is_empty(), "0 keeps none");
    assert_eq!(stored(), 0);
}

#[test]
fn a_done_mark_distlock_cannot_read_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-foreign";
    shared().ctl(&["put", &done_key(name), "not a mark"]);
    let out = once(dir.path(), name, "1h", 0);
    assert_eq!(out.code, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains(&done_key(name)), "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("the key {} is an etcd value", done_key(name))),
        "named as an etcd key, not a Redis one: {out:?}"
    );
    assert!(ran(dir.path()).is_empty(), "CMD not started");
    assert_eq!(
        shared().get(&format!("distlock:{{{name}}}")),
        None,
        "no lease left behind"
    );
    let out = dl(&["release", name, "--forget-done"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    assert_eq!(ran(dir.path()).len(), 1);
}

/// Fair waiting and `--once-per` together: a waiter queued behind a run
/// that succeeds finds the job done when its turn comes, runs nothing,
/// exits 0 and leaves the queue.
#[test]
fn a_waiter_behind_a_successful_run_finds_the_job_done_and_leaves_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-wait-done";
    let go = dir.path().join("go");
    let mut holder = at()
        .args(["run", "--once-per", "1h", name, "--", "sh", "-c"])
        .arg(format!(
            "while [ ! -e '{}' ]; do sleep 0.02; done",
            go.display()
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        poll(LIMIT, Duration::from_millis(20), || inspect_json(name)
            ["held"]
            == true),
        "the first run holds the lock"
    );
    let marker = dir.path().join("ran");
    let waiter = at()
        .args([
            "run",
            "--once-per",
            "1h",
            "--wait",
            "20s",
            name,
            "--",
            "touch",
        ])
        .arg(&marker)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let queue = || {
        shared().ctl(&[
            "get",
            "--prefix",
            "--keys-only",
            &format!("distlock:{{{name}}}:queue/"),
        ])
    };
    assert!(
        poll(LIMIT, Duration::from_millis(20), || !queue()
            .trim()
            .is_empty()),
        "the waiter queued"
    );
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_with_timeout(&mut holder, LIMIT).code(), Some(0));
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!("distlock: {name}: already done ")),
        "{err}"
    );
    assert!(!marker.exists(), "the waiter's CMD never ran");
    assert!(queue().trim().is_empty(), "the waiter left the queue");
    assert_eq!(inspect_json(name)["held"], false);
}

/// `--min-hold` and `--once-per` together: the lock is kept for its
/// minimum hold, and the done mark of the successful run is written all
/// the same (as the Redis release script does), so a run after the hold
/// ends finds the job done.
#[test]
fn a_run_kept_for_its_min_hold_still_leaves_its_done_mark() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-hold-done";
    let script = format!(
        "echo \"$DISTLOCK_FENCING_TOKEN\" >> '{}'",
        dir.path().join("ran").display()
    );
    let first = dl(&[
        "run",
        "--once-per",
        "1h",
        "--min-hold",
        "3s",
        name,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(inspect_json(name)["held"], true, "kept for --min-hold");
    // The mark's lease: about the window, so it was written at the release.
    let left = lease_ttl(&done_key(name));
    assert!(
        left > 3500,
        "the done mark is there while the lock is kept ({left}s)"
    );
    assert!(
        poll(LIMIT, Duration::from_millis(50), || inspect_json(name)
            ["held"]
            == false),
        "the hold ends"
    );
    let later = once(dir.path(), name, "1h", 0);
    assert_eq!(later.code, 0, "{later:?}");
    assert!(
        later
            .stderr
            .starts_with(&format!("distlock: {name}: already done ")),
        "{later:?}"
    );
    assert_eq!(ran(dir.path()).len(), 1, "CMD ran once");
}

/// etcd gives every lease its whole TTL again when it restarts (a new
/// leader): a done mark dated by its lease was young again, and the
/// next run came a whole window late.
#[test]
fn an_etcd_restart_near_the_end_of_a_window_does_not_restart_the_window() {
    let mut e = crate::common::etcd::EtcdServer::start();
    let url = e.url();
    crate::common::etcd::window_outlives(&url, "etcd-rec-restart", || e.restart());
}

/// The done mark's `at`, rewritten an hour into the past as a host whose
/// clock is an hour ahead would date it: with no new leader since the
/// mark's lease was granted, its age is etcd's (the lease), so the job is
/// still done and the skip line says seconds, not an hour. Dated by the
/// hosts' clocks, it ran again. A mark without the raft term of its lease
/// (an older distlock's) is as old as the older of the two says.
#[test]
fn without_a_new_leader_a_done_mark_is_dated_by_etcds_clock_not_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let name = "etcd-rec-clock";
    let start = Instant::now();
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    let key = done_key(name);
    let lease_before = lease_ttl(&key);
    let mut mark: Value = serde_json::from_str(&shared().get(&key).unwrap()).unwrap();
    assert!(mark["raft_term"].as_u64().is_some(), "{mark}");
    let hour_ago = mark["at_ms"].as_u64().unwrap() - 3_600_000;
    mark["at_ms"] = hour_ago.into();
    let rewrite = |mark: &Value| {
        shared().ctl(&["put", "--ignore-lease", &key, &mark.to_string()]);
    };
    rewrite(&mark);

    let skip = once(dir.path(), name, "1h", 0);
    assert_eq!(skip.code, 0, "{skip:?}");
    assert_eq!(
        ran(dir.path()).len(),
        1,
        "judged by the hosts' clock: {skip:?}"
    );
    let ago = crate::common::etcd::done_ago_secs(&skip.stderr);
    assert!(
        ago <= start.elapsed().as_secs(),
        "the skip line says {ago}s ago: {}",
        skip.stderr
    );
    assert!(lease_ttl(&key) <= lease_before, "the mark kept its lease");

    mark.as_object_mut().unwrap().remove("raft_term");
    rewrite(&mark);
    assert_eq!(once(dir.path(), name, "1h", 0).code, 0);
    assert_eq!(
        ran(dir.path()).len(),
        2,
        "a mark without its lease's term: the hosts' clocks witness too"
    );
}
