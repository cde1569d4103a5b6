//! A lease on a three-member etcd cluster through the real binary
//! (`distlock -r etcd://m1,m2,m3 run …`) while members die: the leader
//! killed (CMD keeps running, tokens keep going up), quorum lost (CMD
//! stopped before the lease could expire, exit 124), every member
//! restarted (the next token is larger); a member down from the start
//! costs nothing; a new leader does not restart a `--once-per` window;
//! a URL naming members of two clusters is refused; and `doctor` on a
//! cluster, whole and with members down. Held to docs/guide.md "etcd" and
//! docs/guarantees.md.

use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use crate::common::etcd::{at, metric};
use crate::common::etcd_cluster::EtcdCluster;
use crate::common::proxy::Proxy;
use crate::common::*;

/// One cluster at a time: three etcd members per test on two cores would
/// stretch elections and renewals past the timings these tests assert.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `run NAME --ttl TTL -- sh -c SCRIPT DIR` in the background; the script
/// gets the test's directory as `$1`.
fn start_run(url: &str, name: &str, ttl: &str, script: &str, dir: &Path) -> Child {
    at(url)
        .args(["run", name, "--ttl", ttl, "--", "sh", "-c", script, "sh"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) -> (i32, String, String) {
    let mut child = child;
    wait_with_timeout(&mut child, LIMIT);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The token of one `run` of NAME.
fn token(url: &str, name: &str) -> u64 {
    let out = exec(at(url).args(["run", name, "--"]).args(ECHO_TOKEN), LIMIT);
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout.trim().parse().unwrap()
}

#[test]
fn the_leader_killed_while_cmd_runs_leaves_cmd_running_and_the_next_token_larger() {
    let _serial = serial();
    let mut c = EtcdCluster::start();
    let dir = tempfile::tempdir().unwrap();
    // CMD runs until told to stop, then exits 0 on its own.
    let run = start_run(
        &c.url(),
        "cl-leader",
        "3s",
        r#"echo "$DISTLOCK_FENCING_TOKEN" > "$1/token"
           while [ ! -e "$1/go" ]; do sleep 0.02; done; echo finished"#,
        dir.path(),
    );
    let first: u64 = wait_for_line(&dir.path().join("token"), LIMIT)
        .expect("CMD never started")
        .parse()
        .unwrap();
    let old = c.leader_within(LIMIT);
    c.kill(old);
    let new = c.leader_within(LIMIT);
    assert_ne!(new, old);
    // Twice the TTL after the leader died: had no renewal been confirmed
    // by the new leader, the deadline (well within one TTL) would have
    // stopped CMD by now.
    std::thread::sleep(Duration::from_secs(6));
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (code, stdout, stderr) = finish(run);
    assert_eq!(
        code, 0,
        "CMD ran to its end across the leader change: {stderr}"
    );
    assert_eq!(stdout.trim(), "finished", "{stderr}");
    // A renewal sent to the member that died fails once; the retry goes to
    // a live one.
    assert_eq!(
        stderr.matches("warning: renewal failed").count(),
        stderr.matches("confirmed again").count(),
        "every failed renewal was followed by a confirmed one: {stderr}"
    );
    let next = token(&c.url(), "cl-leader");
    assert!(next > first, "token {next} after {first}");
}

#[test]
fn quorum_lost_while_cmd_runs_stops_cmd_before_its_lease_could_expire() {
    let _serial = serial();
    let mut c = EtcdCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let ttl = Duration::from_secs(4);
    // The lease cannot expire in etcd before this: it was granted after
    // distlock started, and renewals only push its expiry later.
    let launched = Instant::now();
    let run = start_run(
        &c.url(),
        "cl-quorum",
        "4s",
        r#"echo $$ > "$1/pid"; exec sleep 1000"#,
        dir.path(),
    );
    let pid: i32 = wait_for_line(&dir.path().join("pid"), LIMIT)
        .expect("CMD never started")
        .parse()
        .unwrap();
    let leader = c.leader_within(LIMIT);
    // Two of three gone, the leader among them: no commit, no renewal.
    c.kill(leader);
    c.kill((leader + 1) % 3);
    let killed = Instant::now();
    assert!(
        wait_until(LIMIT, || !alive(pid)),
        "CMD still runs without a quorum"
    );
    let dead = Instant::now();
    assert!(
        dead < launched + ttl,
        "CMD was seen alive {} ms after distlock started, past the earliest \
         expiry of its {} s lease (quorum lost at {} ms)",
        (dead - launched).as_millis(),
        ttl.as_secs(),
        (killed - launched).as_millis()
    );
    let (code, _, stderr) = finish(run);
    assert_eq!(code, 124, "{stderr}");
    assert!(
        stderr.contains("no renewal of the lease on cl-quorum was confirmed in time"),
        "{stderr}"
    );
}

#[test]
fn every_member_killed_and_restarted_the_next_token_is_larger() {
    let _serial = serial();
    let mut c = EtcdCluster::start();
    let before = token(&c.url(), "cl-restart");
    for i in 0..3 {
        c.kill(i);
    }
    for i in 0..3 {
        c.restart(i);
    }
    for i in 0..3 {
        c.wait_healthy(i);
    }
    let inspect = exec(
        at(&c.url()).args(["inspect", "cl-restart", "--json"]),
        LIMIT,
    );
    assert_eq!(inspect.code, 0, "{inspect:?}");
    assert_eq!(
        json(&inspect.stdout)["fencing_token"].as_u64(),
        Some(before),
        "the last token issued survived the restart: {}",
        inspect.stdout
    );
    let after = token(&c.url(), "cl-restart");
    assert!(after > before, "token {after} after {before}");
}

/// Three renewals fall in each run. `--renew-every` also bounds each of a
/// run's calls (the release gets as long), so it is 400 ms, not less: on a
/// loaded machine an etcd transaction alone can take 100 ms.
#[test]
fn a_member_down_from_the_start_costs_no_acquisition_and_no_renewal() {
    let _serial = serial();
    let mut c = EtcdCluster::start();
    // The first member the URL names; every call must go to the others.
    c.kill(0);
    c.leader_within(LIMIT);
    for i in 0..8 {
        let out = exec(
            at(&c.url())
                .args([
                    "run",
                    "cl-down",
                    "--ttl",
                    "2s",
                    "--renew-every",
                    "400ms",
                    "--",
                ])
                .args(["sleep", "1.3"]),
            LIMIT,
        );
        assert_eq!(out.code, 0, "run {i}: {out:?}");
        assert_eq!(out.stderr, "", "run {i}: no call failed: {out:?}");
    }
}

/// `doctor` (text) as (verdict, check, detail) lines, and its exit code.
fn doctor(url: &str) -> (i32, Vec<(String, String, String)>) {
    let out = exec(at(url).arg("doctor"), LIMIT);
    assert!(!out.stderr.contains("panicked"), "{out:?}");
    let lines = out
        .stdout
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let verdict = f.next().unwrap_or_default().to_owned();
            let check = f.next().unwrap_or_default().to_owned();
            (verdict, check, f.collect::<Vec<_>>().join(" "))
        })
        .collect();
    (out.code, lines)
}

fn line<'a>(lines: &'a [(String, String, String)], check: &str) -> &'a (String, String, String) {
    lines
        .iter()
        .find(|(_, c, _)| c == check)
        .unwrap_or_else(|| panic!("no {check} line in {lines:?}"))
}

#[test]
fn doctor_reports_members_leader_version_and_lease_ttl_and_flags_members_down() {
    let _serial = serial();
    let mut c = EtcdCluster::start();
    let url = c.url();

    let (code, lines) = doctor(&url);
    let checks: Vec<&str> = lines.iter().map(|(_, c, _)| c.as_str()).collect();
    assert_eq!(
        checks,
        [
            "reachable",
            "cluster",
            "members",
            "leader",
            "version",
            "lease-ttl"
        ],
        "{lines:?}"
    );
    assert!(
        line(&lines, "cluster")
            .2
            .starts_with("3 hosts of the URL are members of etcd cluster "),
        "{lines:?}"
    );
    // An etcd whose stalled leader revokes live leases (before 3.4.31 and
    // 3.5.13; Debian's 3.4.23 is one) is a warning.
    let version = line(&lines, "version");
    let number = version.2.split_whitespace().nth(1).unwrap_or_default();
    let n: Vec<u32> = number.split('.').filter_map(|p| p.parse().ok()).collect();
    let stalls = matches!(n[..], [3, 4, p] if p < 31) || matches!(n[..], [3, 5, p] if p < 13);
    assert_eq!(version.0, if stalls { "warn" } else { "ok" }, "{lines:?}");
    assert!(
        lines.iter().all(|(v, c, _)| v == "ok" || c == "version"),
        "a whole cluster is fine: {lines:?}"
    );
    assert_eq!(code, 0, "a warning is not a danger: {lines:?}");
    let members = &line(&lines, "members").2;
    assert!(members.starts_with("3 of 3 healthy"), "{members}");
    for i in 0..3 {
        let (name, client) = c.member(i);
        assert!(
            members.contains(&format!("{name} {client} healthy")),
            "{members}"
        );
    }
    let leader = c.member(c.leader_within(LIMIT)).0;
    assert!(
        line(&lines, "leader")
            .2
            .starts_with(&format!("{leader} leads")),
        "{lines:?}"
    );
    assert!(
        line(&lines, "version").2.starts_with("etcd 3."),
        "{lines:?}"
    );
    // 500 ms elections: etcd's floor is 1 s, distlock's 2 s.
    assert!(
        line(&lines, "lease-ttl")
            .2
            .starts_with("etcd grants leases of at least 1s"),
        "{lines:?}"
    );

    let json_out = exec(at(&url).args(["doctor", "--json"]), LIMIT);
    assert_eq!(json_out.code, 0, "{json_out:?}");
    let arr = json(&json_out.stdout);
    assert_eq!(arr[1]["check"], "cluster");
    assert_eq!(arr[2]["check"], "members");
    assert_eq!(arr[2]["verdict"], "ok");
    assert!(arr[2]["advice"].is_null());

    // One member down, not the leader: the cluster still works.
    let down = (c.leader_within(LIMIT) + 1) % 3;
    c.kill(down);
    let (code, lines) = doctor(&url);
    let (verdict, _, members) = line(&lines, "members");
    assert_eq!(verdict, "warn", "{lines:?}");
    let (name, client) = c.member(down);
    assert!(members.starts_with("2 of 3 healthy"), "{members}");
    assert!(
        members.contains(&format!("{name} {client} not reached")),
        "{members}"
    );
    assert_eq!(line(&lines, "leader").0, "ok", "{lines:?}");
    assert_eq!(code, 0, "a warning is not a danger: {lines:?}");

    // A second one down: no majority, no leader, no lease.
    c.kill((down + 1) % 3);
    let (code, lines) = doctor(&url);
    assert_eq!(line(&lines, "members").0, "danger", "{lines:?}");
    assert_eq!(line(&lines, "leader").0, "danger", "{lines:?}");
    assert_eq!(line(&lines, "lease-ttl").0, "danger", "{lines:?}");
    assert_eq!(code, 1, "a danger is exit 1: {lines:?}");
}

/// A new leader gives every lease its whole TTL again: a done mark dated
/// by its lease was young again, and the next run came a whole window
/// late.
#[test]
fn a_leader_killed_near_the_end_of_a_window_does_not_restart_the_window() {
    let _serial = serial();
    let mut c = EtcdCluster::start();
    let url = c.url();
    crate::common::etcd::window_outlives(&url, "cl-window", || {
        let old = c.leader_within(LIMIT);
        c.kill(old);
        assert_ne!(c.leader_within(LIMIT), old);
    });
}

/// One URL naming members of two clusters split the runs between them
/// (two holders at once); now every call refuses it before taking
/// anything, naming both, and `doctor` says danger.
#[test]
fn a_url_naming_two_clusters_is_refused_before_any_lock_and_doctor_says_danger() {
    use crate::common::etcd::EtcdServer;
    let (a, b) = (EtcdServer::start(), EtcdServer::start());
    let url = format!("etcd://127.0.0.1:{},127.0.0.1:{}", a.port, b.port);
    let (ha, hb) = (
        format!("127.0.0.1:{}", a.port),
        format!("127.0.0.1:{}", b.port),
    );
    let names_both = |line: &str| line.contains(&ha) && line.contains(&hb);
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    for args in [
        vec!["run", "split", "--", "touch", ran.to_str().unwrap()],
        vec![
            "run",
            "split",
            "--wait",
            "5s",
            "--",
            "touch",
            ran.to_str().unwrap(),
        ],
        vec!["acquire", "split", "--ttl", "30s"],
    ] {
        let out = exec(at(&url).args(&args), LIMIT);
        assert_eq!(out.code, 125, "{args:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
        assert!(names_both(&out.stderr), "{out:?}");
        assert!(out.stderr.contains("cluster"), "{out:?}");
    }
    assert!(!ran.exists(), "CMD never ran");
    for e in [&a, &b] {
        assert_eq!(
            e.ctl(&["get", "", "--prefix", "--keys-only"]).trim(),
            "",
            "no key written"
        );
        assert_eq!(
            e.ctl(&["lease", "list"]).trim(),
            "found 0 leases",
            "no lease granted"
        );
    }
    let out = exec(at(&url).args(["doctor"]), LIMIT);
    assert_eq!(out.code, 1, "{out:?}");
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("danger") && l.contains("cluster"))
        .unwrap_or_else(|| panic!("no danger line for the clusters: {out:?}"));
    assert!(names_both(line), "{line}");
    // Hosts of one cluster pass: the same member named twice.
    let twice = format!("etcd://{ha},{ha}");
    let out = exec(at(&twice).args(["run", "split", "--", "true"]), LIMIT);
    assert_eq!(out.code, 0, "{out:?}");
}

/// A member of another cluster, too slow to answer within the first
/// connect's grace (frozen then), could be picked by a later reconnect and
/// the run went on on that cluster. Now a connection that reports another
/// cluster than this process's first is refused with 125, naming both.
#[test]
fn a_reconnect_to_a_member_of_another_cluster_than_the_first_is_refused_with_125() {
    use crate::common::etcd::EtcdServer;
    let (a, b) = (EtcdServer::start(), EtcdServer::start());
    let url = format!("etcd://127.0.0.1:{},127.0.0.1:{}", a.port, b.port);
    let (ha, hb) = (
        format!("127.0.0.1:{}", a.port),
        format!("127.0.0.1:{}", b.port),
    );
    let out = exec(
        at(&a.url()).args(["acquire", "late", "--ttl", "60s"]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let b_pid = etcd_proc::pid_of(&b);
    signal(b_pid, libc::SIGSTOP);
    let watchers = a.watchers();
    // `--wait-order any` holds no lease while it waits: on the other
    // cluster it would find the lock free and run CMD.
    let mut waiter = at(&url)
        .args([
            "run",
            "late",
            "--wait",
            "30s",
            "--wait-order",
            "any",
            "--",
            "touch",
        ])
        .arg(&ran)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let waiting = poll(LIMIT, Duration::from_millis(20), || a.watchers() > watchers);
    signal(b_pid, libc::SIGCONT);
    assert!(waiting, "the waiter watches the lock on the first member");
    drop(a);
    let st = wait_with_timeout(&mut waiter, LIMIT);
    let mut stderr = String::new();
    std::io::Read::read_to_string(waiter.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(st.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&ha) && stderr.contains(&hb), "{stderr}");
    assert!(!ran.exists(), "CMD never ran on the other cluster");
}

/// A run started while the cluster has no leader (two members of three
/// down: the one left answers, but cannot commit, as during an election
/// or with the client cut off with a minority member) rides it out within
/// its wait, as a waiter does, and takes the lock once a majority is back.
/// Before, its first attempt failed with 125 at once.
#[test]
fn a_run_started_without_a_leader_waits_for_one_and_takes_the_lock() {
    let _serial = serial();
    let mut c = EtcdCluster::start();
    c.kill(1);
    c.kill(2);
    let started = Instant::now();
    let mut child = at(&c.url())
        .args(["run", "--wait", "20s", "--ttl", "2s", "no-leader", "--"])
        .args(ECHO_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Past the first attempt (its call gives up within 1.5 s): still
    // waiting, not failed.
    while started.elapsed() < Duration::from_millis(2500) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "ended before a leader was back: {:?}",
        finish(child)
    );
    c.restart(1);
    c.restart(2);
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.trim().parse::<u64>().is_ok(), "{out}{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "{err}");
}

#[test]
fn a_release_that_a_cut_off_member_never_answers_is_sent_to_another_and_frees_the_lock_at_once() {
    let _serial = serial();
    freed_and_recorded_once(release_cut_off("cut-off", &[], Proxy::blackhole));
}

#[test]
fn a_release_whose_answer_is_lost_is_sent_again_and_the_run_recorded_once_without_a_warning() {
    // The release with records is four round trips (the lock, the
    // last-run record's lease, a lease for the new one, the transaction)
    // within 2 s: with every answer 580 ms late, the transaction is sent
    // and carried out in time, and its answer comes too late. The second
    // try finds the lock gone, and the run's record already there.
    let _serial = serial();
    freed_and_recorded_once(release_cut_off("answer-lost", &[], |p| {
        p.set_latency(Duration::from_millis(580))
    }));
}

/// `run --min-hold`: the release before the hold has passed keeps the
/// lock and writes the run's records. That answer lost (held back past the
/// call's 2 s), the release is sent again and finds the lock still ours:
/// it writes the records again, under the same keys (the history record's
/// is the run's token), so the run is recorded once and the lock stays
/// kept. (Redis pushed a second record:
/// `ha::sentinel_a_min_hold_release_whose_answer_is_lost_records_the_run_once`.)
#[test]
fn a_min_hold_release_whose_answer_is_lost_is_sent_again_and_the_run_recorded_once() {
    let _serial = serial();
    let name = "kept-lost";
    let Cut {
        c,
        delayed,
        code,
        out,
        err,
        ..
    } = release_cut_off(name, &["-v", "--min-hold", "1m"], |p| {
        // The records go in the transaction that finds the hold (and
        // releases nothing), then in the one that keeps the lock: that
        // one's answer is held back.
        p.delay_reply_to("\"exit_code\"", 2, Duration::from_secs(3));
    });
    assert_eq!(delayed, 1, "no answer was held back: {err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(
        err.contains("stays held"),
        "the second answer is Kept: {err}"
    );
    let held = exec(at(&c.url()).args(["inspect", name, "--json"]), LIMIT);
    assert_eq!(json(&held.stdout)["held"], true, "{held:?}");
    let history = exec(at(&c.url()).args(["history", name, "--json"]), LIMIT);
    let records: Vec<serde_json::Value> = serde_json::from_str(&history.stdout).unwrap();
    assert_eq!(records.len(), 1, "{history:?}");
}

/// `run --wait WAIT --ttl TTL NAME -- touch DIR/took` through `url`, in
/// the background: a waiter whose CMD says it took the lock.
fn start_taker(url: &str, name: &str, wait: &str, ttl: &str, dir: &Path) -> Child {
    at(url)
        .args(["run", "--wait", wait, "--ttl", ttl, name, "--"])
        .args(["sh", "-c", r#"touch "$1/took""#, "sh"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// CMD for a run the test ends: it touches `$1/held`, then waits for
/// `$1/go`.
const HOLD_UNTIL_GO: &str = r#"touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.02; done"#;

/// A proxy in front of each of `c`'s members (so that one can be cut off
/// from one client alone, the cluster whole), and the URL naming them.
fn proxied(c: &EtcdCluster) -> (Vec<Proxy>, String) {
    let proxies: Vec<Proxy> = (0..3).map(|i| Proxy::start(c.client_port(i))).collect();
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port()))
        .collect();
    (proxies, format!("etcd://{}", hosts.join(",")))
}

/// A run on a cluster whose members are each behind a proxy (so that one
/// can be cut off from this client alone, as a leader just isolated, the
/// cluster whole), with `args` after `run NAME --ttl 6s`: once CMD runs,
/// `cut` is done to the member the run talks to, and CMD ends.
fn release_cut_off(name: &str, args: &[&str], cut: impl FnOnce(&Proxy)) -> Cut {
    let c = EtcdCluster::start();
    let (proxies, url) = proxied(&c);
    let dir = tempfile::tempdir().unwrap();
    let run = at(&url)
        .args(["run", name, "--ttl", "6s"])
        .args(args)
        .args(["--", "sh", "-c", HOLD_UNTIL_GO, "sh"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(LIMIT, || dir.path().join("held").exists()));
    // The member the run talks to is the one its renewals (every 2 s) go
    // through; cut it off once that renewal is answered and the
    // connection is quiet, so the release is the next thing sent to it.
    let before: Vec<u64> = proxies.iter().map(|p| p.stats().requests).collect();
    let mut used = None;
    assert!(wait_until(LIMIT, || {
        used = (0..3).find(|&i| proxies[i].stats().requests > before[i]);
        used.is_some()
    }));
    let proxy = &proxies[used.unwrap()];
    let quiet = |t: Option<Instant>| t.is_some_and(|t| t.elapsed() > Duration::from_millis(150));
    assert!(wait_until(LIMIT, || {
        let s = proxy.stats();
        quiet(s.last_reply) && quiet(s.last_request_read)
    }));
    cut(proxy);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (code, out, err) = finish(run);
    Cut {
        c,
        name: name.to_owned(),
        delayed: proxy.stats().delayed,
        code,
        out,
        err,
    }
}

/// How `release_cut_off`'s run ended, and the replies its proxy held back.
struct Cut {
    c: EtcdCluster,
    name: String,
    delayed: u64,
    code: i32,
    out: String,
    err: String,
}

/// The run ended 0 without a warning, its lock free at once and its run
/// recorded once.
fn freed_and_recorded_once(cut: Cut) {
    let Cut {
        c,
        name,
        code,
        out,
        err,
        ..
    } = cut;
    let name = name.as_str();
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    // Released, not left to expire: the next run takes it at once.
    let next = exec(
        at(&c.url()).args(["run", name, "--"]).args(ECHO_TOKEN),
        LIMIT,
    );
    assert_eq!(next.code, 0, "the lock stayed held: {next:?}");
    let history = exec(at(&c.url()).args(["history", name, "--json"]), LIMIT);
    let records: Vec<serde_json::Value> = serde_json::from_str(&history.stdout).unwrap();
    assert_eq!(records.len(), 2, "{history:?}");
}

/// A waiter whose member goes silent (cut off from the leader, as one in
/// a minority or isolated: it keeps the connection and the watch, and
/// tells nothing) learns it when a keep-alive of its lease goes
/// unanswered for half a renewal interval, moves to another member, and
/// takes the lock released meanwhile. Before, it watched on the silent
/// member until its own next attempt (one TTL after the last), here after
/// its --wait.
#[test]
fn a_waiter_whose_member_goes_silent_moves_to_another_and_takes_the_lock_released_meanwhile() {
    let _serial = serial();
    let c = EtcdCluster::start();
    let (proxies, url) = proxied(&c);
    let dir = tempfile::tempdir().unwrap();
    let name = "silent-member";
    let holder = start_run(&c.url(), name, "60s", HOLD_UNTIL_GO, dir.path());
    assert!(wait_until(LIMIT, || dir.path().join("held").exists()));
    // Members 0 and 2 answer late, so the waiter's connection (its
    // attempts' and its subscription's) goes to member 1.
    proxies[0].set_latency(Duration::from_millis(400));
    proxies[2].set_latency(Duration::from_millis(400));
    let waiter = start_taker(&url, name, "14s", "15s", dir.path());
    // The waiter's lease: its queue key's, read on member 0 directly.
    let waiter_lease = || {
        let fields = c.try_ctl(&[0], &["get", "--prefix", "distlock:", "-w", "fields"])?;
        let after = fields.split(":queue/").nth(1)?;
        let lease = after.split("\"Lease\" : ").nth(1)?.lines().next()?;
        Some(format!("{:x}", lease.trim().parse::<u64>().ok()?))
    };
    let mut lease = None;
    assert!(
        wait_until(LIMIT, || {
            lease = waiter_lease();
            lease.is_some()
        }),
        "the waiter queued"
    );
    proxies[0].set_latency(Duration::ZERO);
    proxies[2].set_latency(Duration::ZERO);
    // Its first keep-alive (5 s after it joined) answered: the lease's TTL
    // runs down, then is whole again. The later ones go on the stream that
    // opened. Then member 1 goes silent.
    let id = lease.unwrap();
    let left = || {
        let ttl = c
            .try_ctl(&[0], &["lease", "timetolive", &id])
            .unwrap_or_default();
        let left = ttl
            .split("remaining(")
            .nth(1)
            .and_then(|r| r.split('s').next()?.parse().ok());
        left.unwrap_or(0u64)
    };
    assert!(
        wait_until(LIMIT, || left() <= 12),
        "the waiter's lease runs down"
    );
    assert!(
        wait_until(LIMIT, || left() >= 14),
        "the waiter's first keep-alive"
    );
    proxies[1].blackhole();
    std::fs::write(dir.path().join("go"), "").unwrap();
    let released = Instant::now();
    let (code, out, err) = finish(holder);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = finish(waiter);
    assert_eq!(code, 0, "the waiter did not take the lock: {out}{err}");
    assert!(dir.path().join("took").exists());
    // Its next keep-alive, 5 s after the first, went unanswered.
    assert!(
        released.elapsed() >= Duration::from_secs(2),
        "taken at once: member 1 was not the waiter's member"
    );
}

/// A waiter's attempts and its subscription share one connection, to one
/// member: the keep-alives the subscription sends every TTL/3 also watch
/// the member the take will go to. On two members, the attempts' one
/// could go silent alone (in the lab, a client cut into a minority with
/// it): the watch on the other woke the waiter when the lock was freed,
/// and its take then waited out a whole call timeout on the silent one
/// (the next holder 3.5 s after the cut, with a TTL of 2 s). Here the
/// waiter's one member goes silent, the waiter moves, and a release after
/// that is taken at once, not a call timeout (4.4 s) later.
#[test]
fn a_waiters_attempts_and_subscription_share_one_member_so_a_silent_one_delays_no_take() {
    let _serial = serial();
    let c = EtcdCluster::start();
    let (proxies, url) = proxied(&c);
    let dir = tempfile::tempdir().unwrap();
    let name = "one-member";
    let holder = start_run(&c.url(), name, "60s", HOLD_UNTIL_GO, dir.path());
    assert!(wait_until(LIMIT, || dir.path().join("held").exists()));
    let watchers = |i: usize| metric(c.client_port(i), "etcd_debugging_mvcc_watcher_total");
    let waiter = start_taker(&url, name, "30s", "6s", dir.path());
    let queued = || {
        c.try_ctl(&[0], &["get", "--prefix", "--keys-only", "distlock:"])
            .is_some_and(|keys| keys.contains(":queue/"))
    };
    assert!(wait_until(LIMIT, queued), "the waiter queued");
    // The connections of the first attempt's race to the members close
    // once one is chosen; the waiter keeps one, on one member.
    let live = || proxies.iter().map(Proxy::live).collect::<Vec<_>>();
    assert!(
        wait_until(Duration::from_secs(5), || live().iter().sum::<usize>() == 1),
        "the waiter keeps one connection, not one per use: {:?}",
        live()
    );
    let m = live().iter().position(|&n| n == 1).unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != m).collect();
    let before: u64 = others.iter().map(|&i| watchers(i)).sum();
    proxies[m].blackhole();
    // Its keep-alive goes unanswered: it moves to another member and
    // watches there.
    assert!(
        wait_until(LIMIT, || others.iter().map(|&i| watchers(i)).sum::<u64>()
            > before),
        "the waiter watches on another member"
    );
    std::fs::write(dir.path().join("go"), "").unwrap();
    let released = Instant::now();
    assert!(
        wait_until(LIMIT, || dir.path().join("took").exists()),
        "the waiter took the lock"
    );
    let took = released.elapsed();
    let (code, out, err) = finish(holder);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = finish(waiter);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        took < Duration::from_millis(1500),
        "the take waited {took:?} after the release: on the silent member?"
    );
}
