//! `--limit N` semaphores and the hold options (`--min-hold`, `--max-hold`,
//! `--at-risk-signal`) on etcd, through the real binary against a real
//! `etcd`. Held to the contract's `--limit` and run options, and to
//! docs/guide.md "etcd"; the same outputs and exit codes as the Redis
//! tests in cron_ci.rs.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::etcd::at;
use crate::common::etcd::{shared, EtcdServer};
use crate::common::etcd_proc;
use crate::common::*;

fn run(args: &[&str]) -> Out {
    exec(at(&shared().url()).args(args), LIMIT)
}

/// `acquire ARGS --json` on the shared member: (owner, token).
fn take(args: &[&str]) -> (String, u64) {
    let mut all = vec!["acquire", "--json"];
    all.extend(args);
    let out = run(&all);
    assert_eq!(out.code, 0, "{args:?}: {out:?}");
    let j = json(&out.stdout);
    (
        j["owner"].as_str().unwrap().to_owned(),
        j["fencing_token"].as_u64().unwrap(),
    )
}

/// A background `run --limit 2 NAME` whose CMD writes its token to
/// `token.I` and waits for `go.I`.
fn spawn_slot(dir: &Path, name: &str, i: usize) -> Child {
    let cmd = format!(
        "echo $DISTLOCK_FENCING_TOKEN > token.{i}.tmp; mv token.{i}.tmp token.{i}; \
         while [ ! -e go.{i} ]; do sleep 0.02; done"
    );
    at(&shared().url())
        .current_dir(dir)
        .args(["run", "--limit", "2", "--ttl", "5s", name, "--", "sh", "-c"])
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("w{i}.err"))).unwrap())
        .spawn()
        .unwrap()
}

fn token_in(dir: &Path, i: usize) -> Option<u64> {
    std::fs::read_to_string(dir.join(format!("token.{i}")))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The last token issued for NAME: the fence key's mod revision.
fn fence_rev(e: &EtcdServer, name: &str) -> Option<u64> {
    let out = e.ctl(&["get", &fence(name), "-w", "json"]);
    json(&out)["kvs"][0]["mod_revision"].as_u64()
}

fn slot_keys(e: &EtcdServer, name: &str) -> Vec<String> {
    e.ctl(&[
        "get",
        &format!("{}:slot/", key(name)),
        "--prefix",
        "--keys-only",
    ])
    .lines()
    .filter(|l| !l.is_empty())
    .map(str::to_owned)
    .collect()
}

#[test]
fn limit_2_runs_two_holders_at_once_and_a_third_is_busy_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let before = shared().revision();
    let mut kids: Vec<Child> = (0..2).map(|i| spawn_slot(d, "lim-two", i)).collect();
    assert!(
        wait_until(LIMIT, || (0..2).all(|i| token_in(d, i).is_some())),
        "both holders must run at once: {} / {}",
        std::fs::read_to_string(d.join("w0.err")).unwrap_or_default(),
        std::fs::read_to_string(d.join("w1.err")).unwrap_or_default()
    );
    let tokens: BTreeSet<u64> = (0..2).filter_map(|i| token_in(d, i)).collect();
    assert_eq!(tokens.len(), 2, "each holder has its own token: {tokens:?}");
    assert!(tokens.iter().all(|&t| t > before), "{tokens:?} vs {before}");

    let third = run(&["run", "--limit", "2", "lim-two", "--", "true"]);
    assert_eq!(third.code, 75, "{third:?}");
    assert!(third.stdout.is_empty());
    assert!(
        third.stderr.starts_with("distlock: ") && third.stderr.contains("lim-two is held by"),
        "{third:?}"
    );
    let insp = json(&run(&["inspect", "--limit", "2", "--json", "lim-two"]).stdout);
    let owners: Vec<&str> = insp["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners.len(), 2, "{insp}");
    assert!(
        owners.iter().any(|o| third.stderr.contains(o)),
        "the busy line names a holder's full owner id: {third:?} {owners:?}"
    );

    // One finishes: its slot goes to the next, with a larger token.
    std::fs::write(d.join("go.0"), "").unwrap();
    assert_eq!(wait_with_timeout(&mut kids[0], LIMIT).code(), Some(0));
    let next = run(&[
        "run",
        "--limit",
        "2",
        "lim-two",
        "--",
        "sh",
        "-c",
        "echo $DISTLOCK_FENCING_TOKEN",
    ]);
    assert_eq!(next.code, 0, "a released slot is free again: {next:?}");
    let late: u64 = next.stdout.trim().parse().unwrap();
    assert!(
        tokens.iter().all(|&t| t < late),
        "tokens increase: {tokens:?} then {late}"
    );
    std::fs::write(d.join("go.1"), "").unwrap();
    assert_eq!(wait_with_timeout(&mut kids[1], LIMIT).code(), Some(0));
    assert!(slot_keys(shared(), "lim-two").is_empty(), "all slots freed");
    assert_eq!(fence_rev(shared(), "lim-two"), Some(late), "none burned");
}

#[test]
fn users_of_a_name_must_agree_on_its_limit_as_on_redis() {
    let e = shared();
    let (owner, _) = take(&["--limit", "2", "--ttl", "10s", "lim-agree"]);
    let before = fence_rev(e, "lim-agree");

    let three = run(&["run", "--limit", "3", "lim-agree", "--", "true"]);
    assert_eq!(three.code, 2, "{three:?}");
    assert_eq!(
        three.stderr.trim_end(),
        "distlock: lim-agree is in use as a semaphore with --limit 2, but this call says \
         --limit 3: every user of a name must agree on its limit",
    );
    for args in [
        &["run", "lim-agree", "--", "true"][..],
        &["acquire", "lim-agree"],
        &["inspect", "lim-agree"],
        &["inspect", "--limit", "3", "lim-agree"],
        &["release", "--owner", &owner, "lim-agree"],
        &["release", "--force", "lim-agree"],
        &["release", "--force", "--limit", "3", "lim-agree"],
    ] {
        let out = run(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains("limit"), "{args:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:?}");
    }
    assert_eq!(fence_rev(e, "lim-agree"), before, "no token was issued");
    assert_eq!(slot_keys(e, "lim-agree").len(), 1, "nothing was released");
    assert_eq!(
        run(&["release", "--limit", "2", "--owner", &owner, "lim-agree"]).code,
        0
    );

    // The other way round: a plain lock held, a semaphore user is refused.
    let (plain, _) = take(&["--ttl", "10s", "lim-plain"]);
    let sem = run(&["run", "--limit", "3", "lim-plain", "--", "true"]);
    assert_eq!(sem.code, 2, "{sem:?}");
    assert!(
        sem.stderr.contains("as a plain lock (--limit 1)"),
        "{sem:?}"
    );
    assert!(slot_keys(e, "lim-plain").is_empty());
    assert_eq!(run(&["inspect", "--limit", "3", "lim-plain"]).code, 2);
    assert_eq!(run(&["release", "--owner", &plain, "lim-plain"]).code, 0);
}

#[test]
fn release_frees_a_slot_and_force_frees_them_all() {
    let e = shared();
    let (a, ta) = take(&["--limit", "2", "--ttl", "10s", "lim-rel"]);
    let (b, tb) = take(&["--limit", "2", "--ttl", "10s", "lim-rel"]);
    assert!(ta < tb, "{ta} {tb}");
    assert_eq!(run(&["acquire", "--limit", "2", "lim-rel"]).code, 75);
    // A retry by the same owner (a lost reply) gets the same slot and token.
    let again = run(&[
        "acquire", "--json", "--limit", "2", "--ttl", "10s", "--owner", &a, "lim-rel",
    ]);
    assert_eq!(json(&again.stdout)["fencing_token"], ta, "{again:?}");
    assert_eq!(slot_keys(e, "lim-rel").len(), 2);

    let wrong = run(&["release", "--limit", "2", "--owner", "x:1:2", "lim-rel"]);
    assert_eq!(wrong.code, 1, "{wrong:?}");
    assert_eq!(
        run(&["renew", "--limit", "2", "--owner", &a, "--ttl", "10s", "lim-rel"]).code,
        0,
        "renew renews our slot"
    );
    assert_eq!(
        run(&["renew", "--limit", "2", "--owner", "x:1:2", "--ttl", "10s", "lim-rel"]).code,
        1
    );
    assert_eq!(
        run(&["release", "--limit", "2", "--owner", &a, "lim-rel"]).code,
        0
    );
    assert_eq!(slot_keys(e, "lim-rel").len(), 1, "one slot freed");
    let (_c, tc) = take(&["--limit", "2", "--ttl", "10s", "lim-rel"]);
    assert!(tc > tb, "{tc} after {tb}");

    let forced = run(&["release", "--force", "--limit", "2", "lim-rel"]);
    assert_eq!(forced.code, 0, "{forced:?}");
    assert!(
        forced.all().contains(&b),
        "names who it evicted: {forced:?}"
    );
    assert!(slot_keys(e, "lim-rel").is_empty());
    assert_eq!(
        run(&["release", "--force", "--limit", "2", "lim-rel"]).code,
        1
    );
    assert_eq!(fence_rev(e, "lim-rel"), Some(tc), "the token stays");
}

#[test]
fn inspect_and_list_show_a_semaphore_as_on_redis() {
    let (a, ta) = take(&["--limit", "2", "--ttl", "20s", "lim-show"]);
    let (b, tb) = take(&["--limit", "2", "--ttl", "10s", "lim-show"]);

    let text = run(&["inspect", "--limit", "2", "lim-show"]);
    assert_eq!(text.code, 0, "{text:?}");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("lim-show: 2 of 2 slots held, last token {tb}"),
        "{text:?}"
    );
    // Soonest expiry first, as on Redis.
    assert!(
        lines[1].starts_with(&format!("  {b}, expires in "))
            && lines[1].ends_with(&format!(", token {tb}")),
        "{text:?}"
    );
    assert!(
        lines[2].starts_with(&format!("  {a}, expires in "))
            && lines[2].ends_with(&format!(", token {ta}")),
        "{text:?}"
    );

    let j = json(&run(&["inspect", "--limit", "2", "--json", "lim-show"]).stdout);
    assert_eq!(j["name"], "lim-show", "{j}");
    assert_eq!(j["held"], true, "{j}");
    assert_eq!(j["limit"], 2, "{j}");
    assert_eq!(j["fencing_token"], tb, "{j}");
    assert_eq!(j["holders"][0]["owner"], b.as_str(), "{j}");
    assert_eq!(j["holders"][0]["fencing_token"], tb, "{j}");
    assert_eq!(j["holders"][1]["owner"], a.as_str(), "{j}");
    let ttl = j["holders"][1]["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 10_000 && ttl <= 20_000, "{j}");

    let list = run(&["list"]);
    assert_eq!(list.code, 0, "{list:?}");
    let row = list
        .stdout
        .lines()
        .find(|l| l.starts_with("lim-show "))
        .unwrap_or_else(|| panic!("no row for lim-show: {list:?}"));
    assert!(row.contains(&format!("2 of 2 slots: {b}, {a}")), "{row}");
    let all = json(&run(&["list", "--json"]).stdout);
    let entry = all
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "lim-show")
        .unwrap_or_else(|| panic!("{all}"));
    assert_eq!(entry, &j, "list --json carries the inspect --json object");

    run(&["release", "--force", "--limit", "2", "lim-show"]);
    let free = json(&run(&["inspect", "--limit", "2", "--json", "lim-show"]).stdout);
    assert_eq!(free["held"], false, "{free}");
    assert_eq!(free["holders"], serde_json::json!([]), "{free}");
    assert!(!run(&["list"]).stdout.contains("lim-show"));
}

#[test]
fn a_run_renews_its_slot_and_losing_it_is_exit_124() {
    let e = shared();
    let start = Instant::now();
    let out = run(&[
        "run",
        "--limit",
        "2",
        "--ttl",
        "2s",
        "lim-renew",
        "--",
        "sleep",
        "3",
    ]);
    assert_eq!(out.code, 0, "renewed past its 2s lease: {out:?}");
    assert!(start.elapsed() >= Duration::from_secs(3));

    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let mut child = at(&e.url())
        .args([
            "run", "--limit", "2", "--ttl", "3s", "lim-lost", "--", "sh", "-c",
        ])
        .arg(format!("echo go > {}; exec sleep 60", started.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for_line(&started, LIMIT).is_some());
    let slots = slot_keys(e, "lim-lost");
    assert_eq!(slots.len(), 1, "{slots:?}");
    e.ctl(&["del", &slots[0]]);
    let status = wait_with_timeout(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(124), "a deleted slot is a lost lease");
}

#[test]
fn a_cmd_cannot_release_the_slot_its_run_holds() {
    let out = at(&shared().url())
        .args(["run", "--limit", "2", "lim-own", "--", "sh", "-c"])
        .arg(format!(
            "{} release --limit 2 lim-own; echo \"release=$?\"",
            bin().display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("release=1"));
    assert!(
        slot_keys(shared(), "lim-own").is_empty(),
        "the run released it"
    );
}

/// A waiter for a slot watches the slots: a release wakes it at once, long
/// before its backstop (its own TTL, 30 s here) would.
#[test]
fn a_waiter_for_a_slot_is_woken_by_a_release() {
    // A member of its own: the test counts its watchers.
    let e = EtcdServer::start();
    let take_on = |args: &[&str]| {
        let mut all = vec!["acquire", "--json"];
        all.extend(args);
        let out = exec(at(&e.url()).args(&all), LIMIT);
        assert_eq!(out.code, 0, "{out:?}");
        json(&out.stdout)["owner"].as_str().unwrap().to_owned()
    };
    let first = take_on(&["--limit", "2", "--ttl", "30s", "lim-wait"]);
    take_on(&["--limit", "2", "--ttl", "30s", "lim-wait"]);
    let child = e.spawn_token_waiter(
        &[
            "run", "--limit", "2", "--ttl", "30s", "--wait", "20s", "lim-wait",
        ],
        "the slots",
    );
    let released = Instant::now();
    let out = exec(
        at(&e.url()).args(["release", "--limit", "2", "--owner", &first, "lim-wait"]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "woken by the release, not by its 30 s backstop: {:?}",
        released.elapsed()
    );
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(token > 0);
}

// ---------------------------------------------------------------------------
// The hold options

#[test]
fn max_hold_stops_cmd_and_exits_124_on_etcd() {
    let e = shared();
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = exec(
        at(&e.url()).current_dir(dir.path()).args([
            "run",
            "--max-hold",
            "2s",
            "--ttl",
            "10s",
            "etcd-bounded",
            "--",
            "sh",
            "-c",
            "echo $$ > pid; exec sleep 30",
        ]),
        LIMIT,
    );
    let took = start.elapsed();
    assert_eq!(out.code, 124, "{out:?}");
    assert!(out.stderr.contains("max-hold"), "{out:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "stopped after {took:?}"
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "CMD must be dead");
    assert_eq!(
        e.get(&key("etcd-bounded")),
        None,
        "released, not left to expire"
    );
}

#[test]
fn at_risk_signal_reaches_cmd_once_before_the_kill_when_etcd_stops_answering() {
    let e = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cmd = r#"trap 'echo risk >> marker; date +%s%N > risk' USR1
trap 'date +%s%N > term; exit 0' TERM
echo $$ > pid
while :; do sleep 30 & wait $!; done"#;
    let mut child = at(&e.url())
        .current_dir(d)
        .args([
            "run",
            "--ttl",
            "3s",
            "--at-risk-signal",
            "USR1",
            "etcd-risk",
            "--",
            "sh",
            "-c",
            cmd,
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("run.err")).unwrap())
        .spawn()
        .unwrap();
    let pid: i32 = wait_for_line(&d.join("pid"), LIMIT)
        .expect("CMD never started")
        .parse()
        .unwrap();
    let etcd_pid = etcd_proc::pid_of(&e);
    let stopped_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    signal(etcd_pid, libc::SIGSTOP);
    let st = wait_with_timeout(&mut child, LIMIT);
    signal(etcd_pid, libc::SIGCONT);
    let err = std::fs::read_to_string(d.join("run.err")).unwrap_or_default();
    assert_eq!(st.code(), Some(124), "{err}");
    assert!(!alive(pid), "CMD must be dead");
    assert_eq!(
        std::fs::read_to_string(d.join("marker")).ok().as_deref(),
        Some("risk\n"),
        "CMD gets USR1 exactly once: {err}"
    );
    let ns = |f: &str| -> u128 {
        std::fs::read_to_string(d.join(f))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert!(
        ns("risk") < ns("term"),
        "the warning comes before the kill signal"
    );
    // The last confirmed renewal was sent before etcd stopped: the kill
    // signal must come within the 3s lease of it.
    let term_after = Duration::from_nanos((ns("term") - stopped_at) as u64);
    assert!(
        term_after < Duration::from_secs(3),
        "the kill signal came {term_after:?} after etcd stopped answering"
    );
}

#[test]
fn min_hold_keeps_the_lock_after_cmd_ends_on_etcd() {
    let e = shared();
    let k = key("etcd-nightly");
    let out = run(&["run", "--min-hold", "3s", "etcd-nightly", "--", "true"]);
    assert_eq!(out.code, 0, "{out:?}");
    let first = fence_rev(e, "etcd-nightly").unwrap();
    assert!(e.get(&k).is_some(), "still held for the rest of --min-hold");
    let second = run(&["run", "etcd-nightly", "--", "true"]);
    assert_eq!(second.code, 75, "held for the minimum hold: {second:?}");
    assert!(
        second.stderr.contains("etcd-nightly is held by"),
        "{second:?}"
    );
    assert!(
        poll(Duration::from_secs(8), Duration::from_millis(100), || e
            .get(&k)
            .is_none()),
        "the key goes once the minimum hold has passed"
    );
    let third = run(&["run", "etcd-nightly", "--", "true"]);
    assert_eq!(third.code, 0, "free again: {third:?}");
    assert_eq!(e.get(&k), None, "a run without --min-hold releases at once");
    assert!(fence_rev(e, "etcd-nightly").unwrap() > first);

    // acquire --min-hold, then release: exit 0, says why it stays.
    let (owner, _) = take(&["--min-hold", "3s", "etcd-step"]);
    let rel = run(&["release", "--owner", &owner, "etcd-step"]);
    assert_eq!(rel.code, 0, "{rel:?}");
    assert!(rel.stderr.contains("min-hold"), "{rel:?}");
    assert_eq!(e.get(&key("etcd-step")).as_deref(), Some(owner.as_str()));
    assert_eq!(run(&["acquire", "etcd-step"]).code, 75);
}

#[test]
fn min_hold_shorter_than_cmd_releases_at_once_on_etcd() {
    let out = run(&["run", "--min-hold", "1s", "etcd-quick", "--", "sleep", "3"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(shared().get(&key("etcd-quick")), None);
}

/// A fair waiter on a plain lock whose name becomes a semaphore while it
/// waits (another client's slot appears): when the lock goes, the waiter
/// is refused with the usage error of a disagreeing limit, as on Redis,
/// instead of retrying until its wait runs out.
#[test]
fn a_fair_waiter_on_a_name_that_became_a_semaphore_is_refused_not_spinning() {
    let e = EtcdServer::start();
    let name = "lim-became";
    let take = exec(
        at(&e.url()).args(["acquire", "--json", "--ttl", "30s", name]),
        LIMIT,
    );
    assert_eq!(take.code, 0, "{take:?}");
    let owner = json(&take.stdout)["owner"].as_str().unwrap().to_owned();
    let waiter = at(&e.url())
        .args(["run", "--wait", "20s", name, "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let queue = format!("distlock:{{{name}}}:queue/");
    assert!(
        poll(LIMIT, Duration::from_millis(20), || !e
            .ctl(&["get", "--prefix", "--keys-only", &queue])
            .trim()
            .is_empty()),
        "the waiter queued"
    );
    // Another client's slot of a semaphore of 2, then the lock goes.
    e.ctl(&["put", &format!("distlock:{{{name}}}:slot/2/0"), "someone"]);
    let out = exec(
        at(&e.url()).args(["release", "--owner", &owner, name]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    let released = Instant::now();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{name} is in use as a semaphore with --limit 2, but this call says --limit 1"
        )),
        "{err}"
    );
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "refused at once, not when the wait ran out: {:?}",
        released.elapsed()
    );
    assert!(
        e.ctl(&["get", "--prefix", "--keys-only", &queue])
            .trim()
            .is_empty(),
        "it left the queue"
    );
}
