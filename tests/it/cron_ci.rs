//! The cron and CI features against a real redis-server: `--min-hold` (and
//! the crontab-on-three-hosts scenario it exists for), the last-run record,
//! semaphores (`--limit N`), `hold` across CI steps, `--max-hold` and
//! `--at-risk-signal`.
//!
//! Nothing here sleeps to synchronise: CMDs report through ready files and
//! wait for go files, and the tests poll Redis state with a deadline.

use crate::common::*;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `distlock ARGS...` against `server`.
fn dl(server: &RedisServer, args: &[&str]) -> Out {
    let mut cmd = distlock(server);
    cmd.args(args);
    exec(&mut cmd, LIMIT)
}

/// `distlock ARGS...` in `dir`.
fn dl_in(server: &RedisServer, dir: &Path, args: &[&str]) -> Out {
    let mut cmd = distlock(server);
    cmd.current_dir(dir).args(args);
    exec(&mut cmd, LIMIT)
}

/// `distlock ARGS...` with DISTLOCK_OWNER set.
fn dl_as(server: &RedisServer, owner: &str, args: &[&str]) -> Out {
    let mut cmd = distlock(server);
    cmd.env("DISTLOCK_OWNER", owner).args(args);
    exec(&mut cmd, LIMIT)
}

/// `distlock ARGS...` started in the background in `dir`, its output in
/// `dir/TAG.out` and `dir/TAG.err`.
fn spawn_in(server: &RedisServer, dir: &Path, tag: &str, args: &[&str]) -> Child {
    let mut cmd = distlock(server);
    cmd.current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("{tag}.out"))).unwrap())
        .stderr(std::fs::File::create(dir.join(format!("{tag}.err"))).unwrap());
    cmd.spawn().unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The server's clock in ms (what semaphore slots expire by).
fn server_now_ms(server: &RedisServer) -> i64 {
    let t: Vec<String> = server.cmd(&["TIME"]);
    t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000
}

/// Live processes (not zombies) started for `server`: distlock itself, its
/// guardian, CMD and CMD's children all carry `DISTLOCK_REDIS_URL` pointing
/// at this test's own server in their environment.
fn processes_of(server: &RedisServer) -> Vec<i32> {
    let needle = format!("DISTLOCK_REDIS_URL={}\0", server.url());
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let hit = env.windows(needle.len()).any(|w| w == needle.as_bytes());
        if hit && alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// Waits for a background child; kills and fails on timeout.
fn finish(child: &mut Child) -> ExitStatus {
    wait_with_timeout(child, LIMIT)
}

// ---------------------------------------------------------------------------
// --min-hold

#[test]
fn run_min_hold_keeps_the_lock_after_cmd_ends_without_any_process_lingering() {
    let server = RedisServer::start();
    let k = key("nightly");

    let out = dl(
        &server,
        &["run", "--min-hold", "1500ms", "nightly", "--", "true"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let first = fence_of(&server, "nightly");
    // distlock has exited, and so has everything it started...
    let lingering = processes_of(&server);
    assert!(lingering.is_empty(), "processes left behind: {lingering:?}");
    // ...yet the lock is still held for the rest of the minimum hold.
    let left = pttl(&server, &k);
    assert!(
        left > 0 && left <= 1500,
        "the key must keep a TTL for the rest of --min-hold, PTTL {left}"
    );

    let second = dl(&server, &["run", "nightly", "--", "true"]);
    assert_eq!(second.code, 75, "held for the minimum hold: {second:?}");
    assert!(second.stderr.contains("nightly is held by"), "{second:?}");

    assert!(
        wait_until(Duration::from_secs(5), || !exists(&server, &k)),
        "the key must expire once the minimum hold has passed"
    );
    let third = dl(&server, &["run", "nightly", "--", "true"]);
    assert_eq!(
        third.code, 0,
        "free again after the minimum hold: {third:?}"
    );
    assert!(
        !exists(&server, &k),
        "a run without --min-hold releases at once"
    );
    assert!(fence_of(&server, "nightly") > first, "two acquisitions");
}

/// The guardian stands down before distlock exits, not just after: a
/// wrapper that has returned leaves no process of its own behind (the
/// guardian used to linger for a few microseconds, a window a loaded
/// machine widens). Many runs, since the window is a race.
#[test]
fn run_leaves_no_guardian_behind_when_it_exits() {
    let server = RedisServer::start();
    for i in 0..40 {
        let out = dl(&server, &["run", "quick", "--", "true"]);
        assert_eq!(out.code, 0, "{out:?}");
        let lingering = processes_of(&server);
        assert!(
            lingering.is_empty(),
            "run {i}: processes left behind after distlock exited: {lingering:?}"
        );
    }
}

/// A waiter forks its guardian before it has the lock; one that gives up
/// (the wait ran out, or a signal ended it) takes that guardian with it.
#[test]
fn a_waiter_that_gives_up_leaves_no_guardian_behind() {
    let server = RedisServer::start();
    let holder = holder::Holder::start(&server.url(), &["run", "busy"]);
    let holders: Vec<i32> = vec![holder.pid() as i32, holder.cmd_pid()];
    let others = || -> Vec<i32> {
        processes_of(&server)
            .into_iter()
            .filter(|p| !holders.contains(p) && !holders.contains(&parent_of(*p)))
            .collect()
    };
    for i in 0..10 {
        let out = dl(&server, &["run", "--wait", "20ms", "busy", "--", "true"]);
        assert_eq!(out.code, 75, "{out:?}");
        let lingering = others();
        assert!(
            lingering.is_empty(),
            "wait {i}: processes left behind after distlock gave up: {lingering:?}"
        );
    }
    let mut waiter = distlock_at(&server.url())
        .args(["run", "--wait", "1m", "busy", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let waiter_pid = waiter.id() as i32;
    assert!(
        wait_until(LIMIT, || others().len() == 2),
        "the waiter and its guardian: {:?}",
        others()
    );
    signal(waiter_pid, libc::SIGTERM);
    let status = wait_with_timeout(&mut waiter, LIMIT);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    let lingering = others();
    assert!(
        lingering.is_empty(),
        "processes left behind after a waiter was stopped by SIGTERM: {lingering:?}"
    );
}

#[test]
fn run_min_hold_shorter_than_cmd_releases_at_once() {
    let server = RedisServer::start();
    let out = dl(
        &server,
        &["run", "--min-hold", "100ms", "quick", "--", "sleep", "0.3"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        !exists(&server, &key("quick")),
        "CMD outlasted --min-hold: the release must delete the key"
    );
}

#[test]
fn acquire_min_hold_then_release_exits_0_but_the_key_stays_until_the_minimum_passes() {
    let server = RedisServer::start();
    let k = key("step");
    let out = dl(&server, &["acquire", "--min-hold", "1500ms", "step"]);
    assert_eq!(out.code, 0, "{out:?}");
    let owner = eval_exports(&out.stdout, &["DISTLOCK_OWNER"]).remove(0);

    let rel = dl_as(&server, &owner, &["release", "step"]);
    assert_eq!(rel.code, 0, "release within the minimum hold: {rel:?}");
    assert!(
        rel.stderr.contains("min-hold"),
        "says why it stays: {rel:?}"
    );
    assert_eq!(server.get(&k).as_deref(), Some(owner.as_str()));
    let left = pttl(&server, &k);
    assert!(left > 0 && left <= 1500, "PTTL {left}");

    let other = dl(&server, &["acquire", "step"]);
    assert_eq!(other.code, 75, "{other:?}");

    assert!(
        wait_until(Duration::from_secs(5), || !exists(&server, &k)),
        "the key must go once the minimum hold has passed"
    );
    let other = dl(&server, &["acquire", "step"]);
    assert_eq!(other.code, 0, "{other:?}");
}

/// The scenario `--min-hold` exists for: the same crontab line on three
/// hosts whose clocks (or cron daemons) are a little apart. Each "host"
/// starts only after the previous one has finished and released, so
/// without a minimum hold every host finds the lock free.
fn crontab_on_three_hosts(min_hold: Option<&str>) -> (usize, Vec<i32>) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut codes = Vec::new();
    for host in ["web-1", "web-2", "web-3"] {
        let mut args = vec!["run", "nightly"];
        if let Some(d) = min_hold {
            args.extend(["--min-hold", d]);
        }
        let job = format!("echo ran on {host} >> \"$1\"; sleep 0.1");
        args.extend(["--", "sh", "-c", &job, "sh", log.to_str().unwrap()]);
        // The next host starts only once this one has exited: the skew
        // between the hosts is larger than the job takes.
        codes.push(dl(&server, &args).code);
    }
    let lines = read(&log).lines().count();
    (lines, codes)
}

#[test]
fn crontab_on_three_hosts_with_skewed_starts_runs_once_with_min_hold_and_more_without() {
    let (with, with_codes) = crontab_on_three_hosts(Some("2s"));
    let (without, without_codes) = crontab_on_three_hosts(None);
    println!(
        "crontab on three hosts, skewed starts: with --min-hold 2s: {with} run(s) \
         (exit codes {with_codes:?}); without: {without} run(s) (exit codes {without_codes:?})"
    );
    assert_eq!(with, 1, "exactly one run per night with --min-hold");
    assert_eq!(with_codes, [0, 75, 75]);
    assert!(without > 1, "without --min-hold the late hosts run again");
    assert_eq!(without_codes, [0, 0, 0]);
}

// ---------------------------------------------------------------------------
// The last-run record

#[test]
fn last_run_is_recorded_shown_by_inspect_and_kept_for_seven_days() {
    let server = RedisServer::start();
    let before = std::time::SystemTime::now();
    let out = dl(
        &server,
        &["run", "report", "--", "sh", "-c", "sleep 0.3; exit 3"],
    );
    assert_eq!(out.code, 3, "{out:?}");
    let host = hostname();

    // The lease is gone, the record is not.
    assert!(!exists(&server, &key("report")));
    let last = format!("{}:last", key("report"));
    let keep = pttl(&server, &last);
    assert!(
        (604_800_000 - 60_000..=604_800_000).contains(&keep),
        "the record is kept 7 days by default, PTTL {keep}"
    );

    let text = dl(&server, &["inspect", "report"]);
    assert_eq!(text.code, 0, "{text:?}");
    let line = text
        .stdout
        .lines()
        .find(|l| l.contains("last run:"))
        .unwrap_or_else(|| panic!("no last run line: {:?}", text.stdout));
    let token = format!(
        "token {}",
        server.get(&format!("{}:fence", key("report"))).unwrap()
    );
    for part in [host.as_str(), "exit 3", token.as_str(), " UTC"] {
        assert!(line.contains(part), "{part:?} missing in {line:?}");
    }

    let j = json(&dl(&server, &["inspect", "--json", "report"]).stdout);
    let lr = &j["last_run"];
    assert_eq!(lr["host"], host.as_str(), "{j}");
    assert_eq!(lr["exit"], 3, "{j}");
    assert_eq!(
        lr["fencing_token"].to_string(),
        token["token ".len()..],
        "{j}"
    );
    let owner = lr["owner"].as_str().unwrap_or_else(|| panic!("{j}"));
    assert!(
        owner.starts_with(&format!("{host}:")),
        "owner is the run's owner id: {owner}"
    );
    let took = lr["duration_ms"].as_u64().unwrap_or_else(|| panic!("{j}"));
    assert!((300..10_000).contains(&took), "duration_ms {took}");
    let started = lr["started_at"].as_str().unwrap_or_else(|| panic!("{j}"));
    let started = humantime::parse_rfc3339(started).unwrap_or_else(|e| panic!("{started}: {e}"));
    let skew = started
        .duration_since(before)
        .unwrap_or_else(|e| e.duration());
    assert!(
        skew < Duration::from_secs(5),
        "started_at {started:?} vs {before:?}"
    );
    assert_eq!(j["held"], false);
}

/// The last fencing token issued for NAME.
fn fence_of(server: &RedisServer, name: &str) -> u64 {
    server
        .get(&format!("{}:fence", key(name)))
        .expect("a counter")
        .parse()
        .unwrap()
}

#[test]
fn last_run_keep_sets_how_long_the_record_lives() {
    let server = RedisServer::start();
    let out = dl(
        &server,
        &["run", "--last-run-keep", "1h", "hourly", "--", "true"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let first = fence_of(&server, "hourly");
    let keep = pttl(&server, &format!("{}:last", key("hourly")));
    assert!(
        (3_600_000 - 60_000..=3_600_000).contains(&keep),
        "--last-run-keep 1h, PTTL {keep}"
    );
    // The next run replaces the record.
    let out = dl(&server, &["run", "hourly", "--", "sh", "-c", "exit 5"]);
    assert_eq!(out.code, 5);
    let j = json(&dl(&server, &["inspect", "--json", "hourly"]).stdout);
    assert_eq!(j["last_run"]["exit"], 5, "{j}");
    let second = fence_of(&server, "hourly");
    assert!(second > first);
    assert_eq!(j["last_run"]["fencing_token"], second, "{j}");
}

#[test]
fn a_run_whose_lease_was_lost_records_exit_124() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_in(
        &server,
        dir.path(),
        "run",
        &[
            "run",
            "--ttl",
            "600ms",
            "lost",
            "--",
            "sh",
            "-c",
            "touch ready; exec sleep 30",
        ],
    );
    assert!(
        wait_until(LIMIT, || dir.path().join("ready").exists()),
        "CMD never started"
    );
    // Someone deletes the lease under the running job.
    let _: i64 = server.cmd(&["DEL", &key("lost")]);
    let st = finish(&mut child);
    assert_eq!(
        st.code(),
        Some(124),
        "{}",
        read(&dir.path().join("run.err"))
    );
    let j = json(&dl(&server, &["inspect", "--json", "lost"]).stdout);
    assert_eq!(j["last_run"]["exit"], 124, "{j}");
    assert_eq!(
        j["last_run"]["fencing_token"],
        fence_of(&server, "lost"),
        "{j}"
    );
}

// ---------------------------------------------------------------------------
// Semaphores

/// CMD for the semaphore tests, run as `sh -c SLOT sh I`: records its
/// token, marks itself running, records how many are running (itself
/// included), waits for `go.I`, then unmarks itself.
const SLOT: &str = r#"
echo "$DISTLOCK_FENCING_TOKEN" > "token.$1.tmp" && mv "token.$1.tmp" "token.$1"
touch "run/$1"
ls run | wc -l >> counts
while [ ! -e "go.$1" ]; do sleep 0.01; done
rm "run/$1"
"#;

fn running(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("run")).map_or(0, |d| d.count())
}

fn token_of(dir: &Path, i: usize) -> Option<u64> {
    read(&dir.join(format!("token.{i}"))).trim().parse().ok()
}

fn max_count(dir: &Path) -> usize {
    read(&dir.join("counts"))
        .lines()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap_or(0)
}

fn spawn_slot(server: &RedisServer, dir: &Path, i: usize, extra: &[&str]) -> Child {
    let idx = i.to_string();
    let mut args = vec!["run", "--limit", "3", "pool"];
    args.extend(extra);
    args.extend(["--", "sh", "-c", SLOT, "sh", &idx]);
    spawn_in(server, dir, &format!("w{i}"), &args)
}

#[test]
fn four_concurrent_runs_with_limit_3_exactly_three_run_and_the_fourth_exits_75() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("run")).unwrap();
    let mut kids: Vec<Child> = (0..4).map(|i| spawn_slot(&server, d, i, &[])).collect();

    let mut exited: Vec<(usize, ExitStatus)> = Vec::new();
    let settled = wait_until(LIMIT, || {
        for (i, k) in kids.iter_mut().enumerate() {
            if !exited.iter().any(|(j, _)| *j == i) {
                if let Some(st) = k.try_wait().unwrap() {
                    exited.push((i, st));
                }
            }
        }
        running(d) == 3 && !exited.is_empty()
    });
    assert!(
        settled,
        "expected 3 running and 1 turned away: running {}, exited {exited:?}",
        running(d)
    );
    assert_eq!(exited.len(), 1, "only the extra one ends early: {exited:?}");
    let (extra, st) = exited[0];
    assert_eq!(
        st.code(),
        Some(75),
        "{}",
        read(&d.join(format!("w{extra}.err")))
    );
    assert!(token_of(d, extra).is_none(), "the extra CMD never started");
    let j = json(&dl(&server, &["inspect", "--limit", "3", "--json", "pool"]).stdout);
    assert_eq!(j["holders"].as_array().map(Vec::len), Some(3), "{j}");

    for i in 0..4 {
        std::fs::write(d.join(format!("go.{i}")), "").unwrap();
    }
    for (i, k) in kids.iter_mut().enumerate() {
        if i != extra {
            assert_eq!(
                finish(k).code(),
                Some(0),
                "{}",
                read(&d.join(format!("w{i}.err")))
            );
        }
    }
    assert_eq!(max_count(d), 3, "never more than 3 at once");
    let tokens: BTreeSet<u64> = (0..4).filter_map(|i| token_of(d, i)).collect();
    assert_eq!(tokens.len(), 3, "unique tokens: {tokens:?}");
    assert_eq!(
        tokens.last().copied(),
        Some(fence_of(&server, "pool")),
        "none burned"
    );
    assert_eq!(server.cmd::<i64>(&["ZCARD", "distlock:{pool}:slots"]), 0);
}

#[test]
fn with_wait_forever_the_fourth_waits_and_runs_once_a_slot_is_released() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("run")).unwrap();
    let mut kids: Vec<Child> = (0..4)
        .map(|i| spawn_slot(&server, d, i, &["-w", "forever"]))
        .collect();

    assert!(
        wait_until(LIMIT, || running(d) == 3),
        "three must get in, running {}",
        running(d)
    );
    let waiter = (0..4)
        .find(|&i| token_of(d, i).is_none())
        .expect("one of four waits");
    assert!(
        kids[waiter].try_wait().unwrap().is_none(),
        "the fourth waits instead of giving up: {}",
        read(&d.join(format!("w{waiter}.err")))
    );
    let first: Vec<u64> = (0..4).filter_map(|i| token_of(d, i)).collect();
    assert_eq!(first.len(), 3);

    // One holder finishes: its slot goes to the waiter.
    let done = (0..4).find(|&i| i != waiter).unwrap();
    assert!(
        token_of(d, waiter).is_none(),
        "the waiter ran before a release"
    );
    std::fs::write(d.join(format!("go.{done}")), "").unwrap();
    assert_eq!(finish(&mut kids[done]).code(), Some(0));
    assert!(
        wait_until(LIMIT, || token_of(d, waiter).is_some()),
        "the waiter must run once a slot is free: {}",
        read(&d.join(format!("w{waiter}.err")))
    );
    let late = token_of(d, waiter).unwrap();
    assert!(
        first.iter().all(|&t| t < late),
        "the later acquisition gets a larger token: {first:?} then {late}"
    );

    for i in 0..4 {
        std::fs::write(d.join(format!("go.{i}")), "").unwrap();
    }
    for (i, k) in kids.iter_mut().enumerate() {
        if i != done {
            assert_eq!(
                finish(k).code(),
                Some(0),
                "{}",
                read(&d.join(format!("w{i}.err")))
            );
        }
    }
    assert!(max_count(d) <= 3, "never more than 3 at once");
    let tokens: BTreeSet<u64> = (0..4).filter_map(|i| token_of(d, i)).collect();
    assert_eq!(tokens.len(), 4, "four different tokens: {tokens:?}");
}

#[test]
fn a_crashed_holders_slot_is_reclaimed_after_its_ttl_on_the_server_clock() {
    let server = RedisServer::start();
    let slots = "distlock:{crash}:slots";
    let mut owners = Vec::new();
    let mut last = 0;
    for _ in 1..=2 {
        let before = server_now_ms(&server);
        let out = dl(
            &server,
            &["acquire", "--limit", "2", "--ttl", "2s", "crash"],
        );
        assert_eq!(out.code, 0, "{out:?}");
        let v = eval_exports(&out.stdout, &["DISTLOCK_OWNER", "DISTLOCK_FENCING_TOKEN"]);
        let token: u64 = v[1].parse().unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
        // The slot's expiry is the server's clock plus the ttl.
        let score: String = server.cmd(&["ZSCORE", slots, &v[0]]);
        let score: i64 = score.parse().unwrap();
        let after = server_now_ms(&server);
        assert!(
            (before + 2000..=after + 2000).contains(&score),
            "slot expiry {score} is not server time + 2000 ({before}..{after})"
        );
        owners.push(v[0].clone());
    }
    // Nobody renews: both holders "crashed".
    let third = dl(
        &server,
        &["acquire", "--limit", "2", "--ttl", "2s", "crash"],
    );
    assert_eq!(third.code, 75, "both slots are taken: {third:?}");

    assert!(
        wait_until(Duration::from_secs(5), || {
            let now = server_now_ms(&server);
            let live: i64 = server.cmd(&["ZCOUNT", slots, &(now + 1).to_string(), "+inf"]);
            live == 0
        }),
        "the slots must expire on the server clock"
    );
    let fourth = dl(
        &server,
        &["acquire", "--limit", "2", "--ttl", "5s", "crash"],
    );
    assert_eq!(fourth.code, 0, "expired slots are reclaimed: {fourth:?}");
    let v = eval_exports(
        &fourth.stdout,
        &["DISTLOCK_OWNER", "DISTLOCK_FENCING_TOKEN"],
    );
    assert!(v[1].parse::<u64>().unwrap() > last, "a new, larger token");
    // The crashed holders cannot release what was reclaimed; the new one can.
    assert_eq!(
        dl_as(&server, &owners[0], &["release", "--limit", "2", "crash"]).code,
        1
    );
    assert_eq!(
        dl_as(&server, &v[0], &["release", "--limit", "2", "crash"]).code,
        0
    );
    assert_eq!(server.cmd::<i64>(&["ZCARD", slots]), 0);
}

#[test]
fn a_crashed_slot_is_reclaimed_while_a_renewed_slot_stays_held() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let slots = "distlock:{mixed}:slots";
    // One holder keeps renewing its slot...
    let mut live = spawn_in(
        &server,
        d,
        "live",
        &[
            "run",
            "--limit",
            "2",
            "--ttl",
            "600ms",
            "mixed",
            "--",
            "sh",
            "-c",
            "touch ready; while [ ! -e go ]; do sleep 0.01; done",
        ],
    );
    assert!(
        wait_until(LIMIT, || d.join("ready").exists()),
        "holder never started"
    );
    // ...the other takes one and "crashes": nobody renews it.
    let crashed = dl(
        &server,
        &["acquire", "--limit", "2", "--ttl", "1500ms", "mixed"],
    );
    assert_eq!(crashed.code, 0, "{crashed:?}");
    let crashed_owner = eval_exports(&crashed.stdout, &["DISTLOCK_OWNER"]).remove(0);
    let before = fence_of(&server, "mixed");
    let full = dl(&server, &["acquire", "--limit", "2", "mixed"]);
    assert_eq!(full.code, 75, "{full:?}");

    let expiry: String = server.cmd(&["ZSCORE", slots, &crashed_owner]);
    let expiry: i64 = expiry.parse().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || server_now_ms(&server) > expiry),
        "server time never passed the crashed slot's expiry"
    );
    let next = dl(
        &server,
        &["acquire", "--limit", "2", "--ttl", "5s", "mixed"],
    );
    assert_eq!(next.code, 0, "the crashed slot is reclaimed: {next:?}");
    let v = eval_exports(&next.stdout, &["DISTLOCK_OWNER", "DISTLOCK_FENCING_TOKEN"]);
    assert!(v[1].parse::<u64>().unwrap() > before, "a new, larger token");
    let score: Option<String> = server.cmd(&["ZSCORE", slots, &crashed_owner]);
    assert_eq!(score, None, "the crashed holder's slot is gone");
    assert_eq!(
        server.cmd::<i64>(&["ZCARD", slots]),
        2,
        "the renewed holder kept its slot across 1.5s of a 600ms ttl"
    );
    assert_eq!(dl(&server, &["acquire", "--limit", "2", "mixed"]).code, 75);

    std::fs::write(d.join("go"), "").unwrap();
    assert_eq!(
        finish(&mut live).code(),
        Some(0),
        "{}",
        read(&d.join("live.err"))
    );
    assert_eq!(
        dl_as(&server, &v[0], &["release", "--limit", "2", "mixed"]).code,
        0
    );
    assert_eq!(server.cmd::<i64>(&["ZCARD", slots]), 0);
}

#[test]
fn users_of_a_name_must_agree_on_its_limit() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("run")).unwrap();
    let mut holder = spawn_slot(&server, d, 0, &[]);
    assert!(
        wait_until(LIMIT, || running(d) == 1),
        "holder never started"
    );
    let before = fence_of(&server, "pool");

    let two = dl(&server, &["run", "--limit", "2", "pool", "--", "true"]);
    assert_eq!(two.code, 2, "{two:?}");
    assert!(
        two.stderr.starts_with("distlock: ") && two.stderr.contains("limit 3"),
        "the error names the limit in use: {two:?}"
    );
    let plain = dl(&server, &["run", "pool", "--", "true"]);
    assert_eq!(
        plain.code, 2,
        "a plain lock on a semaphore's name: {plain:?}"
    );
    assert!(plain.stderr.contains("limit"), "{plain:?}");
    let acq = dl(&server, &["acquire", "--limit", "2", "pool"]);
    assert_eq!(acq.code, 2, "{acq:?}");
    let insp = dl(&server, &["inspect", "--limit", "2", "pool"]);
    assert_eq!(insp.code, 2, "{insp:?}");
    // Agreeing users still get in, and the mismatches took no slot or token.
    assert_eq!(fence_of(&server, "pool"), before);
    let same = dl(&server, &["run", "--limit", "3", "pool", "--", "true"]);
    assert_eq!(same.code, 0, "{same:?}");
    assert!(fence_of(&server, "pool") > before);

    std::fs::write(d.join("go.0"), "").unwrap();
    assert_eq!(finish(&mut holder).code(), Some(0));

    // The other way round: a plain lock held, a semaphore user is refused.
    let out = dl(&server, &["acquire", "plain"]);
    assert_eq!(out.code, 0);
    let sem = dl(&server, &["run", "--limit", "3", "plain", "--", "true"]);
    assert_eq!(sem.code, 2, "{sem:?}");
    assert!(sem.stderr.contains("limit"), "{sem:?}");
}

#[test]
fn inspect_and_release_also_refuse_a_mismatched_limit_and_change_nothing() {
    let server = RedisServer::start();
    let out = dl(&server, &["acquire", "--limit", "3", "pool"]);
    assert_eq!(out.code, 0, "{out:?}");
    let owner = eval_exports(&out.stdout, &["DISTLOCK_OWNER"]).remove(0);
    let slots = "distlock:{pool}:slots";

    // A plain inspect must not call a held semaphore "free".
    let insp = dl(&server, &["inspect", "pool"]);
    assert_eq!(insp.code, 2, "{insp:?}");
    assert!(insp.stderr.contains("limit 3"), "{insp:?}");
    assert_eq!(dl(&server, &["inspect", "--json", "pool"]).code, 2);
    for args in [
        &["release", "pool"][..],
        &["release", "--limit", "2", "pool"],
        &["release", "--force", "pool"],
        &["release", "--force", "--limit", "2", "pool"],
    ] {
        let out = dl_as(&server, &owner, args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains("limit"), "{args:?}: {out:?}");
        assert_eq!(
            server.cmd::<i64>(&["ZCARD", slots]),
            1,
            "{args:?} must not release anything"
        );
    }
    assert_eq!(
        dl_as(&server, &owner, &["release", "--limit", "3", "pool"]).code,
        0
    );

    // And a plain lock is not a semaphore.
    let out = dl(&server, &["acquire", "plain"]);
    assert_eq!(out.code, 0, "{out:?}");
    let owner = eval_exports(&out.stdout, &["DISTLOCK_OWNER"]).remove(0);
    assert_eq!(dl(&server, &["inspect", "--limit", "3", "plain"]).code, 2);
    for args in [
        &["release", "--limit", "3", "plain"][..],
        &["release", "--force", "--limit", "3", "plain"],
    ] {
        let out = dl_as(&server, &owner, args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert_eq!(server.get(&key("plain")).as_deref(), Some(owner.as_str()));
    }
    assert_eq!(dl_as(&server, &owner, &["release", "plain"]).code, 0);
}

#[test]
fn inspect_with_limit_shows_the_last_run_of_a_semaphore() {
    let server = RedisServer::start();
    let out = dl(
        &server,
        &["run", "--limit", "3", "pool", "--", "sh", "-c", "exit 4"],
    );
    assert_eq!(out.code, 4, "{out:?}");
    let text = dl(&server, &["inspect", "--limit", "3", "pool"]);
    assert_eq!(text.code, 0, "{text:?}");
    let line = text
        .stdout
        .lines()
        .find(|l| l.contains("last run:"))
        .unwrap_or_else(|| panic!("no last run line: {:?}", text.stdout));
    let token = fence_of(&server, "pool");
    assert!(
        line.contains("exit 4") && line.contains(&format!("token {token}")),
        "{line}"
    );
    let j = json(&dl(&server, &["inspect", "--limit", "3", "--json", "pool"]).stdout);
    assert_eq!(j["last_run"]["exit"], 4, "{j}");
    assert_eq!(j["last_run"]["host"], hostname().as_str(), "{j}");
    assert_eq!(j["last_run"]["fencing_token"], token, "{j}");
}

#[test]
fn twenty_workers_with_limit_3_never_overlap_more_than_three() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let job = r#"echo "start $DISTLOCK_FENCING_TOKEN $(date +%s%N)" >> log
sleep 0.1
echo "end $DISTLOCK_FENCING_TOKEN $(date +%s%N)" >> log"#;
    let mut kids: Vec<Child> = (0..20)
        .map(|i| {
            spawn_in(
                &server,
                d,
                &format!("w{i}"),
                &[
                    "run", "--limit", "3", "-w", "forever", "stress", "--", "sh", "-c", job,
                ],
            )
        })
        .collect();
    for (i, k) in kids.iter_mut().enumerate() {
        let st = wait_with_timeout(k, Duration::from_secs(60));
        assert_eq!(st.code(), Some(0), "{}", read(&d.join(format!("w{i}.err"))));
    }

    let mut events: Vec<(u128, i32, u64)> = Vec::new();
    for l in read(&d.join("log")).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let [kind, token, ns] = f[..] else {
            panic!("bad log line {l:?}")
        };
        // At the same instant an end counts before a start.
        let delta = if kind == "start" { 1 } else { -1 };
        events.push((ns.parse().unwrap(), delta, token.parse().unwrap()));
    }
    assert_eq!(events.len(), 40, "20 starts and 20 ends");
    let starts: BTreeSet<u64> = events.iter().filter(|e| e.1 == 1).map(|e| e.2).collect();
    assert_eq!(starts.len(), 20, "20 distinct tokens");
    assert_eq!(
        starts.last().copied(),
        Some(fence_of(&server, "stress")),
        "none burned"
    );
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta, _) in &events {
        now += delta;
        max = max.max(now);
    }
    println!("20 workers, --limit 3: at most {max} ran at once");
    assert!(max <= 3, "more than 3 holders at once: {max}");
    assert!(max >= 2, "a semaphore of 3 lets several in at once: {max}");
    assert_eq!(server.cmd::<i64>(&["ZCARD", "distlock:{stress}:slots"]), 0);
}

// ---------------------------------------------------------------------------
// hold

struct Held {
    name: String,
    owner: String,
    token: String,
    pid: i32,
}

fn hold(server: &RedisServer, args: &[&str]) -> (Held, KillOnDrop) {
    let mut all = vec!["hold"];
    all.extend(args);
    let out = dl(server, &all);
    assert_eq!(out.code, 0, "{out:?}");
    for var in [
        "DISTLOCK_NAME",
        "DISTLOCK_OWNER",
        "DISTLOCK_FENCING_TOKEN",
        "DISTLOCK_HOLD_PID",
    ] {
        assert!(
            out.stdout.contains(&format!("export {var}=")),
            "{var} missing: {:?}",
            out.stdout
        );
    }
    let v = eval_exports(
        &out.stdout,
        &[
            "DISTLOCK_NAME",
            "DISTLOCK_OWNER",
            "DISTLOCK_FENCING_TOKEN",
            "DISTLOCK_HOLD_PID",
        ],
    );
    let pid: i32 = v[3].parse().unwrap();
    let held = Held {
        name: v[0].clone(),
        owner: v[1].clone(),
        token: v[2].clone(),
        pid,
    };
    (held, KillOnDrop(pid))
}

#[test]
fn hold_renews_across_several_ttls_until_release_then_the_renewer_exits() {
    let server = RedisServer::start();
    let k = key("deploy");
    let (h, _guard) = hold(&server, &["--ttl", "600ms", "deploy"]);
    assert_eq!(h.name, "deploy");
    assert_eq!(server.get(&format!("{k}:fence")), Some(h.token.clone()));
    assert!(alive(h.pid), "the renewer runs in the background");
    assert_eq!(server.get(&k).as_deref(), Some(h.owner.as_str()));

    // The lease outlives several TTLs because the renewer refreshes it:
    // watch PTTL jump back up, never letting it reach zero.
    let start = Instant::now();
    let (mut prev, mut renewals, mut last_renewal) = (pttl(&server, &k), 0, start);
    wait_until(Duration::from_secs(10), || {
        let p = pttl(&server, &k);
        assert!(p > 0, "the lease lapsed after {:?}", start.elapsed());
        if p > prev {
            renewals += 1;
            last_renewal = Instant::now();
        }
        assert!(
            last_renewal.elapsed() < Duration::from_millis(600),
            "no renewal within a ttl"
        );
        prev = p;
        start.elapsed() >= Duration::from_millis(2000)
    });
    assert!(renewals >= 3, "{renewals} renewals in 2s");
    assert_eq!(server.get(&k).as_deref(), Some(h.owner.as_str()));

    let rel = dl_as(&server, &h.owner, &["release", "deploy"]);
    assert_eq!(rel.code, 0, "{rel:?}");
    assert!(!exists(&server, &k), "released");
    assert!(
        wait_until(Duration::from_secs(3), || !alive(h.pid)),
        "the renewer must exit once the lock is released"
    );
    assert!(!exists(&server, &k), "the renewer did not take it back");
}

#[test]
fn hold_max_releases_the_lock_when_it_passes() {
    let server = RedisServer::start();
    let k = key("ci");
    let start = Instant::now();
    // A ttl far longer than --max: only a release can free it that soon.
    let (h, _guard) = hold(&server, &["--ttl", "5s", "--max", "800ms", "ci"]);
    assert!(exists(&server, &k));
    assert!(
        wait_until(Duration::from_secs(5), || !exists(&server, &k)),
        "the hold must end at --max"
    );
    let gone = start.elapsed();
    assert!(
        gone >= Duration::from_millis(800) && gone < Duration::from_millis(4000),
        "released after {gone:?}, expected just after --max 800ms"
    );
    assert!(
        wait_until(Duration::from_secs(3), || !alive(h.pid)),
        "the renewer exits after --max"
    );
}

#[test]
fn a_hold_whose_lease_was_lost_makes_the_later_release_exit_1() {
    let server = RedisServer::start();
    let k = key("lost");
    let (h, _guard) = hold(&server, &["--ttl", "600ms", "lost"]);
    signal(h.pid, libc::SIGSTOP);
    assert!(
        wait_until(Duration::from_secs(5), || !exists(&server, &k)),
        "with its renewer stopped the lease must expire"
    );
    // Someone else takes the lock meanwhile.
    let other = dl(&server, &["acquire", "--ttl", "30s", "lost"]);
    assert_eq!(other.code, 0, "{other:?}");
    let other_owner = eval_exports(&other.stdout, &["DISTLOCK_OWNER"]).remove(0);

    let rel = dl_as(&server, &h.owner, &["release", "lost"]);
    assert_eq!(rel.code, 1, "the hold's lease was lost: {rel:?}");
    assert_eq!(server.get(&k).as_deref(), Some(other_owner.as_str()));

    // Woken up, the renewer sees its deadline has passed and leaves the
    // new holder alone.
    signal(h.pid, libc::SIGCONT);
    assert!(
        wait_until(Duration::from_secs(3), || !alive(h.pid)),
        "the renewer must exit once its lease is lost"
    );
    assert_eq!(server.get(&k).as_deref(), Some(other_owner.as_str()));
}

#[test]
fn hold_in_a_command_substitution_returns_while_the_renewer_keeps_running() {
    let server = RedisServer::start();
    let mut sh = Command::new("sh");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("DISTLOCK_") {
            sh.env_remove(k);
        }
    }
    sh.env("DISTLOCK_REDIS_URL", server.url())
        .env("DL", bin())
        .args([
            "-c",
            r#"out=$("$DL" hold --ttl 600ms step) || exit 9
eval "$out"
echo "$DISTLOCK_HOLD_PID"
echo "$DISTLOCK_OWNER""#,
        ]);
    let start = Instant::now();
    let out = exec(&mut sh, LIMIT);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "$(distlock hold) took {:?}",
        start.elapsed()
    );
    let mut lines = out.stdout.lines();
    let pid: i32 = lines.next().unwrap().parse().unwrap();
    let _guard = KillOnDrop(pid);
    let owner = lines.next().unwrap().to_owned();
    assert!(alive(pid), "the renewer outlives the command substitution");
    assert_eq!(server.get(&key("step")).as_deref(), Some(owner.as_str()));

    assert_eq!(dl_as(&server, &owner, &["release", "step"]).code, 0);
    assert!(wait_until(Duration::from_secs(3), || !alive(pid)));
}

// ---------------------------------------------------------------------------
// --max-hold

#[test]
fn max_hold_stops_cmd_and_exits_124() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = dl_in(
        &server,
        dir.path(),
        &[
            "run",
            "--max-hold",
            "500ms",
            "--ttl",
            "5s",
            "bounded",
            "--",
            "sh",
            "-c",
            "echo $$ > pid; exec sleep 30",
        ],
    );
    let took = start.elapsed();
    assert_eq!(out.code, 124, "{out:?}");
    assert!(out.stderr.contains("max-hold"), "{out:?}");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(4),
        "stopped after {took:?}"
    );
    let pid: i32 = read(&dir.path().join("pid")).trim().parse().unwrap();
    assert!(!alive(pid), "CMD must be dead");
    assert!(
        !exists(&server, &key("bounded")),
        "the lock is released, not left to expire"
    );
    let j = json(&dl(&server, &["inspect", "--json", "bounded"]).stdout);
    assert_eq!(j["last_run"]["exit"], 124, "{j}");
}

#[test]
fn max_hold_sends_sigkill_after_the_grace_to_a_cmd_that_ignores_the_kill_signal() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = dl_in(
        &server,
        dir.path(),
        &[
            "run",
            "--max-hold",
            "300ms",
            "--kill-grace",
            "400ms",
            "--ttl",
            "5s",
            "stubborn",
            "--",
            "sh",
            "-c",
            r#"trap "" TERM; echo $$ > pid; while :; do sleep 0.05; done"#,
        ],
    );
    let took = start.elapsed();
    assert_eq!(out.code, 124, "{out:?}");
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(4),
        "SIGKILL comes after --max-hold plus the grace: {took:?}"
    );
    let pid: i32 = read(&dir.path().join("pid")).trim().parse().unwrap();
    assert!(!alive(pid), "CMD must be dead");
}

// ---------------------------------------------------------------------------
// --at-risk-signal

/// CMD for the at-risk tests: writes a marker line on USR1 and waits in the
/// `wait` builtin, which a trapped signal interrupts at once.
const AT_RISK_CMD: &str = r#"trap 'echo risk >> marker' USR1
echo $$ > pid
while :; do sleep 30 & wait $!; done"#;

fn run_with_redis_paused(extra: &[&str]) -> (i32, String, Option<String>) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut args = vec!["run", "--ttl", "1500ms"];
    args.extend(extra);
    args.extend(["atrisk", "--", "sh", "-c", AT_RISK_CMD]);
    let mut child = spawn_in(&server, d, "run", &args);
    let pid = wait_for_line(&d.join("pid"), LIMIT).expect("CMD never started");
    let pid: i32 = pid.parse().unwrap();
    server.pause();
    let st = wait_with_timeout(&mut child, LIMIT);
    server.resume();
    assert!(!alive(pid), "CMD must be dead");
    let marker = std::fs::read_to_string(d.join("marker")).ok();
    (st.code().unwrap_or(-1), read(&d.join("run.err")), marker)
}

#[test]
fn at_risk_signal_reaches_cmd_once_before_the_kill_when_renewals_stall() {
    let (code, stderr, marker) = run_with_redis_paused(&["--at-risk-signal", "USR1"]);
    assert_eq!(code, 124, "{stderr}");
    assert_eq!(
        marker.as_deref(),
        Some("risk\n"),
        "CMD gets USR1 exactly once before it is stopped; stderr: {stderr}"
    );
}

/// The warning comes as soon as a renewal is overdue, not when its request
/// finally times out: with --ttl 3s (renewals every 1s, kill signal 2.215s
/// after the last confirmed one), CMD hears USR1 at about 1.5s and TERM at
/// 2.215s. The check leaves slack only on the side of a late warning: it
/// asks for 400ms of the expected 715ms (waiting for the timeout, as before,
/// left about 215ms).
#[test]
fn at_risk_signal_comes_well_before_the_kill_signal() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cmd = r#"trap 'date +%s%N > risk' USR1
trap 'date +%s%N > term; exit 0' TERM
echo $$ > pid
while :; do sleep 30 & wait $!; done"#;
    let mut child = spawn_in(
        &server,
        d,
        "run",
        &[
            "run",
            "--ttl",
            "3s",
            "--at-risk-signal",
            "USR1",
            "early",
            "--",
            "sh",
            "-c",
            cmd,
        ],
    );
    wait_for_line(&d.join("pid"), LIMIT).expect("CMD never started");
    // Pause right after a renewal, so a whole period passes before the next.
    let key = key("early");
    let mut last = pttl(&server, &key);
    assert!(wait_until(LIMIT, || {
        let now = pttl(&server, &key);
        let renewed = now > last;
        last = now;
        renewed
    }));
    server.pause();
    let st = wait_with_timeout(&mut child, LIMIT);
    server.resume();
    assert_eq!(st.code(), Some(124), "{}", read(&d.join("run.err")));
    let ns = |f: &str| -> u128 { read(&d.join(f)).trim().parse().unwrap() };
    let warning = (ns("term") - ns("risk")) / 1_000_000;
    assert!(warning >= 400, "USR1 came only {warning} ms before TERM");
}

#[test]
fn without_at_risk_signal_cmd_gets_no_warning_signal() {
    let (code, stderr, marker) = run_with_redis_paused(&[]);
    assert_eq!(code, 124, "{stderr}");
    assert_eq!(marker, None, "no at-risk signal by default");
}

// ---------------------------------------------------------------------------
// Help

#[test]
fn run_help_mentions_the_cron_options_and_hold_help_has_examples() {
    let out = bare_distlock().args(["run", "--help"]).output_within(LIMIT);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for opt in [
        "--min-hold",
        "--max-hold",
        "--at-risk-signal",
        "--limit",
        "--last-run-keep",
    ] {
        assert!(text.contains(opt), "run --help lacks {opt}");
    }
    let out = bare_distlock()
        .args(["hold", "--help"])
        .output_within(LIMIT);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Examples:"), "{text}");
    assert!(text.contains("distlock hold"), "{text}");
    assert!(text.contains("--max"), "{text}");
}

/// `list` shows held semaphores next to plain locks, sorted by name, in
/// text and JSON; an expired or released semaphore is not listed.
#[test]
fn list_shows_held_semaphores_beside_plain_locks() {
    let server = RedisServer::start();
    let mut owners = Vec::new();
    for _ in 0..2 {
        let out = dl(&server, &["acquire", "--limit", "3", "--ttl", "30s", "sem"]);
        assert_eq!(out.code, 0, "{out:?}");
        owners.push(eval_exports(&out.stdout, &["DISTLOCK_OWNER"]).remove(0));
    }
    assert_eq!(dl(&server, &["acquire", "alpha"]).code, 0);
    assert_eq!(dl(&server, &["acquire", "zulu"]).code, 0);

    let out = dl(&server, &["list", "--json"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = json(&out.stdout);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "sem", "zulu"]);
    let sem = &v[1];
    assert_eq!(sem["limit"], 3, "{sem}");
    let mut listed: Vec<&str> = sem["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["owner"].as_str().unwrap())
        .collect();
    listed.sort();
    let mut expected: Vec<&str> = owners.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(listed, expected);

    let text = dl(&server, &["list"]);
    assert!(text.stdout.contains("2 of 3 slots"), "{}", text.stdout);

    for owner in &owners {
        assert_eq!(
            dl_as(&server, owner, &["release", "--limit", "3", "sem"]).code,
            0
        );
    }
    let v = json(&dl(&server, &["list", "--json"]).stdout);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "zulu"]);
}

// ---------------------------------------------------------------------------
// No controlling terminal: no job control

/// The scheduler state letter of `pid` (`R`, `S`, `T`, `Z`, …).
fn proc_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// Who sends the SIGCONT that resumes CMD.
#[derive(Clone, Copy, Debug)]
enum ContinueVia {
    /// `kill -CONT <CMD's pid>`, whoever stopped it.
    Cmd,
    /// `kill -CONT <distlock's pid>`, passed on to CMD's group.
    Distlock,
}

/// As under cron: distlock has no controlling terminal (a session of its
/// own). Someone stops CMD (`kill -STOP <CMD's pid>`). distlock must not
/// stop with it: it keeps renewing while CMD is stopped, and a later
/// SIGCONT resumes CMD, whose status then comes out after a release.
fn without_a_terminal_a_stopped_cmd_leaves_distlock_supervising(via: ContinueVia) {
    use std::os::unix::process::CommandExt;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = distlock(&server);
    cmd.current_dir(dir.path())
        .args(["run", "nightly", "--ttl", "1s", "--", "perl", "-e"])
        .arg(
            "open(my $p, '>', 'pid'); print $p \"$$\\n\"; close $p; \
             until (-e 'go') { select(undef, undef, undef, 0.01) } exit 7",
        )
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.path().join("out")).unwrap())
        .stderr(std::fs::File::create(dir.path().join("err")).unwrap());
    // SAFETY: setsid is async-signal-safe and needs no allocation.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let _kill = KillOnDrop(child.id() as i32);
    let line = wait_for_line(&dir.path().join("pid"), LIMIT).expect("CMD's pid");
    let pid: i32 = line.trim().parse().unwrap();
    let owner = server.get(&key("nightly")).unwrap();

    signal(pid, libc::SIGSTOP);
    assert!(wait_until(LIMIT, || proc_state(pid) == Some('T')));
    // Renewals every 333ms: three rises of the TTL after CMD stopped are
    // renewals sent while it was stopped, by a distlock still running.
    let mut last = i64::MAX;
    let mut rises = 0;
    let renewed = wait_until(LIMIT, || {
        let ttl = pttl(&server, &key("nightly"));
        if ttl > last {
            rises += 1;
        }
        last = ttl;
        ttl > 0 && rises >= 3
    });
    assert!(
        renewed,
        "no renewals while CMD was stopped (pttl {last}); distlock is {:?}, CMD {:?}; stderr: {}",
        proc_state(child.id() as i32),
        proc_state(pid),
        read(&dir.path().join("err"))
    );
    assert_ne!(proc_state(child.id() as i32), Some('T'), "distlock stopped");
    assert_eq!(proc_state(pid), Some('T'), "CMD was continued by no one");
    assert_eq!(server.get(&key("nightly")), Some(owner));

    std::fs::write(dir.path().join("go"), "").unwrap();
    match via {
        ContinueVia::Cmd => signal(pid, libc::SIGCONT),
        ContinueVia::Distlock => signal(child.id() as i32, libc::SIGCONT),
    }
    let status = finish(&mut child);
    assert_eq!(
        status.code(),
        Some(7),
        "{status:?}; stderr: {}",
        read(&dir.path().join("err"))
    );
    assert!(
        !exists(&server, &key("nightly")),
        "the lock was not released"
    );
}

#[test]
fn without_a_terminal_a_stopped_cmd_does_not_stop_distlock_and_sigcont_to_cmd_resumes_it() {
    without_a_terminal_a_stopped_cmd_leaves_distlock_supervising(ContinueVia::Cmd);
}

#[test]
fn without_a_terminal_a_stopped_cmd_does_not_stop_distlock_and_sigcont_to_distlock_resumes_it() {
    without_a_terminal_a_stopped_cmd_leaves_distlock_supervising(ContinueVia::Distlock);
}
