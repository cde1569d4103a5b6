//! The etcd backend (`etcd://` URLs) through the real binary against a
//! real `etcd`: the lease, the fencing token (etcd's revision), losing the
//! key, the manual subcommands, and the usage errors where etcd differs.
//! Held to docs/guide.md "etcd" and the contract's "Backends".

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::etcd;
use crate::common::etcd::at;
use crate::common::*;
use etcd::{shared, EtcdServer};

fn run(args: &[&str]) -> Out {
    exec(at(&shared().url()).args(args), LIMIT)
}

#[test]
fn run_holds_the_key_under_a_lease_and_exports_etcds_revision_as_the_token() {
    let e = shared();
    let before = e.revision();
    let out = exec(
        at(&e.url())
            .env("EP", format!("127.0.0.1:{}", e.port))
            .args([
                "run",
                "etcd-run",
                "--",
                "sh",
                "-c",
                "echo \"$DISTLOCK_FENCING_TOKEN $DISTLOCK_KEY $DISTLOCK_OWNER\"; \
                 ETCDCTL_API=3 etcdctl --endpoints=\"$EP\" get \"$DISTLOCK_KEY\" -w json; exit 3",
            ]),
        LIMIT,
    );
    assert_eq!(out.code, 3, "CMD's status is distlock's: {out:?}");
    let mut lines = out.stdout.lines();
    let first: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let token: u64 = first[0].parse().unwrap();
    assert!(
        token > before,
        "the token is a revision after the start: {token} <= {before}"
    );
    assert_eq!(first[1], "distlock:{etcd-run}");
    let json: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let kv = &json["kvs"][0];
    assert_eq!(
        kv["create_revision"].as_u64(),
        Some(token),
        "token = create revision"
    );
    assert_ne!(
        kv["lease"].as_i64().unwrap_or(0),
        0,
        "the key is under a lease"
    );
    assert_eq!(
        e.get("distlock:{etcd-run}"),
        None,
        "released when CMD ended"
    );
}

#[test]
fn tokens_increase_across_runs_and_acquire() {
    let e = shared();
    let token = |o: &Out| -> u64 { o.stdout.trim().parse().unwrap() };
    let a = run(&[
        "run",
        "etcd-tokens",
        "--",
        "sh",
        "-c",
        "echo $DISTLOCK_FENCING_TOKEN",
    ]);
    let acq = run(&["acquire", "etcd-tokens", "--json"]);
    assert_eq!(acq.code, 0, "{acq:?}");
    let j: serde_json::Value = serde_json::from_str(&acq.stdout).unwrap();
    let t2 = j["fencing_token"].as_u64().unwrap();
    let owner = j["owner"].as_str().unwrap().to_owned();
    let rel = run(&["release", "etcd-tokens", "--owner", &owner]);
    assert_eq!(rel.code, 0, "{rel:?}");
    let b = run(&[
        "run",
        "etcd-tokens",
        "--",
        "sh",
        "-c",
        "echo $DISTLOCK_FENCING_TOKEN",
    ]);
    assert!(
        token(&a) < t2 && t2 < token(&b),
        "{} {t2} {}",
        token(&a),
        token(&b)
    );
    let _ = e;
}

#[test]
fn a_held_lock_is_busy_naming_its_holder() {
    let acq = run(&["acquire", "etcd-busy", "--json", "--ttl", "10s"]);
    assert_eq!(acq.code, 0, "{acq:?}");
    let j: serde_json::Value = serde_json::from_str(&acq.stdout).unwrap();
    let owner = j["owner"].as_str().unwrap().to_owned();
    let out = run(&["run", "etcd-busy", "--", "true"]);
    assert_eq!(out.code, 75, "{out:?}");
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr.starts_with("distlock: ") && out.stderr.contains(&owner),
        "{}",
        out.stderr
    );
    // Renew by its owner works, by another fails with 1.
    assert_eq!(
        run(&["renew", "etcd-busy", "--owner", &owner, "--ttl", "10s"]).code,
        0
    );
    assert_eq!(
        run(&["renew", "etcd-busy", "--owner", "x:1:2", "--ttl", "10s"]).code,
        1
    );
    let insp = run(&["inspect", "etcd-busy", "--json"]);
    let i: serde_json::Value = serde_json::from_str(&insp.stdout).unwrap();
    assert_eq!(i["owner"].as_str(), Some(owner.as_str()), "{insp:?}");
    assert_eq!(i["fencing_token"], j["fencing_token"]);
    assert!(i["ttl_ms"].as_u64().unwrap() > 0);
    let list = run(&["list", "--json"]);
    assert!(list.stdout.contains("\"etcd-busy\""), "{list:?}");
    let forced = run(&["release", "etcd-busy", "--force"]);
    assert_eq!(forced.code, 0, "{forced:?}");
    assert!(forced.stdout.contains(&owner) || forced.stderr.contains(&owner));
    assert_eq!(shared().get("distlock:{etcd-busy}"), None);
    assert_eq!(run(&["release", "etcd-busy", "--force"]).code, 1);
}

#[test]
fn deleting_the_key_is_a_lost_lease() {
    let e = shared();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let mut child = at(&e.url())
        .args(["run", "etcd-lost", "--ttl", "3s", "--", "sh", "-c"])
        .arg(format!("echo go > {}; exec sleep 60", started.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for_line(&started, LIMIT).is_some());
    e.ctl(&["del", "distlock:{etcd-lost}"]);
    let status = wait_with_timeout(&mut child, Duration::from_secs(10));
    assert_eq!(
        status.code(),
        Some(124),
        "lost lease: CMD stopped, exit 124"
    );
}

#[test]
fn where_etcd_differs_options_are_usage_errors() {
    for (args, says) in [
        (
            &["run", "--ttl", "1s", "u", "--", "true"][..],
            "at least 2s",
        ),
        (
            &["run", "--ttl", "2500ms", "u", "--", "true"][..],
            "whole number of seconds",
        ),
        (
            &["--min-replicas", "1", "run", "u", "--", "true"][..],
            "--min-replicas",
        ),
    ] {
        let out = run(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    }
    for url in ["etcd://", "etcd://h:x", "etcd://h/db"] {
        let out = exec(at(url).args(["run", "u", "--", "true"]), LIMIT);
        assert_eq!(out.code, 2, "{url}: {out:?}");
    }
}

#[test]
fn an_unreachable_etcd_is_125_with_one_line() {
    let url = format!("etcd://127.0.0.1:{}", free_port());
    let out = exec(at(&url).args(["run", "u", "--", "true"]), LIMIT);
    assert_eq!(out.code, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.starts_with("distlock: "), "{}", out.stderr);
    assert!(out.stderr.contains("etcd at"), "{}", out.stderr);
}

#[test]
fn the_password_never_shows() {
    let url = format!("etcd://me:hunter2secret@127.0.0.1:{}", free_port());
    let out = exec(at(&url).args(["run", "u", "--", "true"]), LIMIT);
    assert_eq!(out.code, 125, "{out:?}");
    assert!(!out.all().contains("hunter2secret"), "{}", out.all());
}

/// As on Redis (guarantees.md §4): CMD has `DISTLOCK_OWNER`, but a
/// `release` by owner of the lease its `run` holds is refused (exit 1,
/// nothing changed), so no second holder can start while CMD runs; the
/// run's own release still ends it.
#[test]
fn cmd_cannot_release_the_lease_its_run_holds() {
    let e = shared();
    let out = at(&e.url())
        .args(["run", "etcd-own", "--ttl", "5s", "--", "sh", "-c"])
        .arg(format!(
            "{} release etcd-own; echo \"release=$?\"; {} inspect etcd-own --json",
            bin().display(),
            bin().display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("release=1"), "{stdout}");
    assert!(
        stdout.contains("\"held\":true"),
        "still held after CMD's release: {stdout}"
    );
    assert_eq!(e.get("distlock:{etcd-own}"), None, "released after CMD");
    // A lease taken by `acquire` is released by owner as before.
    let taken = run(&["acquire", "etcd-own2", "--owner", "me", "--ttl", "5s"]);
    assert_eq!(taken.code, 0, "{taken:?}");
    let freed = run(&["release", "etcd-own2", "--owner", "me"]);
    assert_eq!(freed.code, 0, "{freed:?}");
}

/// The async runtime etcd's client needs is made only for an etcd URL: a
/// Redis `run` holds no epoll instance (tokio's driver), an etcd `run`
/// does. Read from distlock's descriptors by its CMD.
#[test]
fn only_an_etcd_url_starts_an_async_runtime() {
    let fds_of_distlock = |cmd: &mut std::process::Command| {
        let out = exec(
            cmd.args([
                "run",
                "runtime-probe",
                "--",
                "sh",
                "-c",
                "for f in /proc/$PPID/fd/*; do readlink \"$f\"; done",
            ]),
            LIMIT,
        );
        assert_eq!(out.code, 0, "{out:?}");
        out.stdout
    };
    let redis = RedisServer::start();
    let on_redis = fds_of_distlock(&mut distlock(&redis));
    assert!(
        on_redis.contains("socket:["),
        "distlock's own descriptors (its Redis connection) are seen: {on_redis}"
    );
    assert!(
        !on_redis.contains("anon_inode:[eventpoll]"),
        "a Redis run made an async runtime: {on_redis}"
    );
    let on_etcd = fds_of_distlock(&mut at(&shared().url()));
    assert!(
        on_etcd.contains("anon_inode:[eventpoll]"),
        "an etcd run's runtime is seen: {on_etcd}"
    );
}

/// `hold` on etcd: the background renewer keeps the key past several of
/// its TTLs, a release by the printed owner frees it and the renewer
/// exits.
#[test]
fn hold_keeps_the_lease_past_its_ttl_until_released() {
    let e = shared();
    let key = "distlock:{etcd-hold}";
    let out = run(&["hold", "--ttl", "2s", "etcd-hold"]);
    assert_eq!(out.code, 0, "{out:?}");
    let v = eval_exports(&out.stdout, &["DISTLOCK_OWNER", "DISTLOCK_HOLD_PID"]);
    let (owner, pid): (String, i32) = (v[0].clone(), v[1].parse().unwrap());
    let _renewer = KillOnDrop(pid);
    assert_eq!(e.get(key).as_deref(), Some(owner.as_str()));
    // Three TTLs: only renewal keeps the key.
    let since = std::time::Instant::now();
    while since.elapsed() < Duration::from_secs(6) {
        assert_eq!(
            e.get(key).as_deref(),
            Some(owner.as_str()),
            "lapsed after {:?}",
            since.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = exec(
        at(&e.url())
            .env("DISTLOCK_OWNER", &owner)
            .args(["release", "etcd-hold"]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(e.get(key), None, "released");
    assert!(
        poll(LIMIT, Duration::from_millis(20), || !alive(pid)),
        "the renewer exits once the lock is released"
    );
}

/// etcd refreshes a lease to the TTL it was granted with, so a second
/// acquisition or a renewal with the same owner and a longer --ttl cannot
/// be honoured: it is refused (exit 2, nothing changed) rather than
/// reported as held for a TTL the lease does not have.
#[test]
fn the_same_owner_cannot_claim_a_longer_ttl_than_its_lease_was_granted() {
    let e = shared();
    let owner = ["--owner", "ttl-owner"];
    let take = |ttl: &str| {
        exec(
            at(&e.url())
                .args(["acquire"])
                .args(owner)
                .args(["--ttl", ttl, "etcd-ttl"]),
            LIMIT,
        )
    };
    assert_eq!(take("2s").code, 0);
    let longer = take("10s");
    assert_eq!(longer.code, 2, "{longer:?}");
    assert!(
        longer.stderr.contains("etcd cannot lengthen a lease"),
        "{longer:?}"
    );
    let renew = |ttl: &str| {
        exec(
            at(&e.url())
                .args(["renew"])
                .args(owner)
                .args(["--ttl", ttl, "etcd-ttl"]),
            LIMIT,
        )
    };
    let out = renew("10s");
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(renew("2s").code, 0, "the granted TTL renews");
    assert_eq!(take("2s").code, 0, "a retry with the granted TTL is ours");
    let out = exec(
        at(&e.url()).args(["release"]).args(owner).arg("etcd-ttl"),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
}

/// `list` read the whole prefix in one range request, and etcd-client
/// refuses a reply over 4 MiB: with about 760 names of 100 history
/// records each, `list` failed with "decoded message length too large".
/// It reads pages now, and skips a history as a whole; the names on
/// either side of a 5 MB history, and the one that owns it, are listed.
#[test]
fn list_reads_past_more_keys_than_one_reply_may_carry() {
    let server = EtcdServer::start();
    // 2,500 keys of 2 KB under one name's history: 5 MB of keys, written
    // 125 to a transaction (etcd allows 128).
    let pad = "x".repeat(2000);
    for t in 0..20 {
        let mut ops = String::from("\n");
        for i in 0..125 {
            ops.push_str(&format!(
                "put distlock:{{big}}:history/{pad}-{t:02}-{i:03} v\n"
            ));
        }
        ops.push_str("\n\n");
        let mut ctl = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=127.0.0.1:{}", server.port))
            .arg("txn")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        ctl.stdin.take().unwrap().write_all(ops.as_bytes()).unwrap();
        assert!(wait_with_timeout(&mut ctl, LIMIT).success(), "txn {t}");
    }
    let url = server.url();
    for name in ["aaa", "big", "zzz"] {
        let out = exec(at(&url).args(["acquire", "--ttl", "60s", name]), LIMIT);
        assert_eq!(out.code, 0, "{name}: {out:?}");
    }
    let out = exec(at(&url).args(["list", "--json"]), LIMIT);
    assert_eq!(out.code, 0, "{out:?}");
    let names: Vec<String> = json(&out.stdout)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["aaa", "big", "zzz"]);
}

/// A run's renewals keep alive the lease its own acquisition granted, so
/// they need not ask etcd what TTL it was granted with: no
/// LeaseTimeToLive (it used to be one per renewal), and after the first
/// one a message each on one keep-alive stream.
/// The `renew` subcommand, in another process, still asks (the same owner
/// cannot claim a longer TTL than granted: the test above).
#[test]
fn a_runs_renewals_do_not_ask_etcd_for_the_granted_ttl() {
    let server = EtcdServer::start();
    let asked = || {
        server.metric(
            "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"LeaseTimeToLive\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"unary\"}",
        )
    };
    let kept = || {
        server.metric(
            "grpc_server_msg_received_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"bidi_stream\"}",
        )
    };
    let streams = || {
        server.metric(
            "grpc_server_started_total{grpc_method=\"LeaseKeepAlive\",grpc_service=\"etcdserverpb.Lease\",grpc_type=\"bidi_stream\"}",
        )
    };
    let (asked_before, kept_before, streams_before) = (asked(), kept(), streams());
    // --ttl 3s renews every second: three renewals or more in 3.5 s.
    let out = exec(
        at(&server.url()).args(["run", "--ttl", "3s", "renewing", "--", "sleep", "3.5"]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        kept() - kept_before >= 3,
        "renewals: {} keep-alives",
        kept() - kept_before
    );
    assert_eq!(
        asked() - asked_before,
        0,
        "LeaseTimeToLive calls during the run"
    );
    // One stream for all the renewals (a new one per renewal made each
    // a round trip more); the release keeps the last-run record's lease
    // alive on one more.
    assert!(
        streams() - streams_before <= 2,
        "keep-alive streams: {}",
        streams() - streams_before
    );
}

/// The release reuses the old last-run record's lease only when the
/// record says that lease has the TTL wanted (its `lease_s`): a changed
/// `--last-run-keep` puts the record under a new lease of the new TTL
/// and revokes the old one.
#[test]
fn a_changed_last_run_keep_puts_the_record_under_a_lease_of_the_new_ttl() {
    let e = shared();
    let name = "rt-keep";
    let last = format!("distlock:{{{name}}}:last");
    let lease_of = |id: i64| {
        let t = e.ctl(&["lease", "timetolive", &format!("{id:x}"), "-w", "json"]);
        serde_json::from_str::<serde_json::Value>(&t).unwrap()["granted-ttl"]
            .as_i64()
            .unwrap()
    };
    let granted = || {
        let kv = e.ctl(&["get", &last, "-w", "json"]);
        let j: serde_json::Value = serde_json::from_str(&kv).unwrap();
        let id = j["kvs"][0]["lease"].as_i64().unwrap();
        (id, lease_of(id))
    };
    let run = |keep: &str| {
        let args = ["run", "--last-run-keep", keep, name, "--", "true"];
        let out = exec(at(&e.url()).args(args), LIMIT);
        assert_eq!(out.code, 0, "{out:?}");
    };
    run("1h");
    let (first, ttl) = granted();
    assert_eq!(ttl, 3600);
    run("1h");
    assert_eq!(granted(), (first, 3600), "the same TTL reuses the lease");
    run("2h");
    let (second, ttl) = granted();
    assert_eq!(ttl, 7200);
    assert_ne!(second, first);
    assert_eq!(lease_of(first), 0, "the old lease is revoked");
}

/// A `run -- true` on a name whose history is full asked etcd eleven
/// requests (a lease for the last-run record and a revoke of the old one,
/// reads of the minimum hold, the lock, the old record and the history,
/// the trim's delete). It takes five now: a lease and a transaction to
/// take, and to release a keep-alive of the old record's lease (whose
/// TTL the record itself says, so no read of it), one transaction
/// (records and trim included) and the revoke of the run's lease; the
/// history still keeps its newest.
#[test]
fn a_run_on_a_full_history_asks_etcd_five_requests() {
    let server = EtcdServer::start();
    let received = |method: &str, service: &str, kind: &str| {
        server.metric(&format!(
            "grpc_server_msg_received_total{{grpc_method=\"{method}\",grpc_service=\"etcdserverpb.{service}\",grpc_type=\"{kind}\"}}"
        ))
    };
    let total = || {
        let unary = [
            ("Range", "KV"),
            ("Put", "KV"),
            ("DeleteRange", "KV"),
            ("Txn", "KV"),
            ("LeaseGrant", "Lease"),
            ("LeaseRevoke", "Lease"),
            ("LeaseTimeToLive", "Lease"),
            ("Status", "Maintenance"),
        ];
        let streams = [("LeaseKeepAlive", "Lease"), ("Watch", "Watch")];
        unary
            .iter()
            .map(|(m, s)| received(m, s, "unary"))
            .sum::<u64>()
            + streams
                .iter()
                .map(|(m, s)| received(m, s, "bidi_stream"))
                .sum::<u64>()
    };
    let run_true = || {
        let out = exec(
            at(&server.url()).args(["run", "--history-keep", "3", "full", "--", "true"]),
            LIMIT,
        );
        assert_eq!(out.code, 0, "{out:?}");
    };
    for _ in 0..4 {
        run_true();
    }
    let before = total();
    for _ in 0..3 {
        run_true();
    }
    let per_run = (total() - before) as f64 / 3.0;
    assert!(per_run <= 5.0, "{per_run} etcd requests per run");
    let asked = received("LeaseTimeToLive", "Lease", "unary");
    let asked_before = asked;
    run_true();
    assert_eq!(
        received("LeaseTimeToLive", "Lease", "unary") - asked_before,
        0,
        "the release read its old record's lease"
    );
    let history = server
        .try_ctl(&["get", "--prefix", "--keys-only", "distlock:{full}:history/"])
        .unwrap();
    let kept = history.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(kept, 3, "{history}");
}
