//! `distlock doctor` against redis-servers configured each way: without
//! persistence, with AOF and noeviction, with an evicting maxmemory
//! policy, as a replica, as a master with a replica (whose clock is right,
//! or, announced as a fake node, 3 s behind), through Sentinel, behind a
//! password, and unreachable; in both the text and the JSON form.

use std::process::Output;
use std::time::Duration;

use crate::common::ha;
use crate::common::skewed_clock;
use crate::common::*;
use serde_json::Value;

/// Every check doctor makes, in the order it prints them.
const CHECKS: &[&str] = &[
    "reachable",
    "version",
    "persistence",
    "maxmemory-policy",
    "role",
    "clock",
    "replica-clocks",
];

/// A server fit for leases: AOF on, nothing evicted.
const SAFE: &[&str] = &["--appendonly", "yes", "--maxmemory-policy", "noeviction"];

fn doctor_at(url: &str, json: bool) -> Output {
    let mut cmd = distlock_at(url);
    cmd.arg("doctor");
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output_within(Duration::from_secs(30));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{out:?}"
    );
    out
}

/// The text report as (verdict, check, rest of the line), checking its
/// shape on the way.
fn report(out: &Output) -> Vec<(String, String, String)> {
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    text.lines()
        .map(|l| {
            let mut f = l.splitn(3, char::is_whitespace).filter(|s| !s.is_empty());
            let verdict = f.next().unwrap_or_default().to_owned();
            let rest = l[verdict.len()..].trim_start();
            let (check, detail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            assert!(
                ["ok", "warn", "danger"].contains(&verdict.as_str()),
                "bad verdict in {l:?}"
            );
            (verdict, check.to_owned(), detail.trim().to_owned())
        })
        .collect()
}

fn verdict_of<'a>(r: &'a [(String, String, String)], check: &str) -> &'a str {
    r.iter()
        .find(|(_, c, _)| c == check)
        .map(|(v, _, _)| v.as_str())
        .unwrap_or_else(|| panic!("no {check} line in {r:?}"))
}

/// Asserts every check is there, in order, and only `expected` differ
/// from ok.
fn assert_verdicts(out: &Output, expected: &[(&str, &str)]) {
    let r = report(out);
    let checks: Vec<&str> = r.iter().map(|(_, c, _)| c.as_str()).collect();
    assert_eq!(checks, CHECKS, "{r:?}");
    for (v, c, detail) in &r {
        let want = expected
            .iter()
            .find(|(ec, _)| ec == c)
            .map_or("ok", |(_, ev)| ev);
        assert_eq!(v, want, "{c}: {detail}");
        if v != "ok" {
            assert!(
                detail.contains(" — "),
                "{c} {v} comes with advice: {detail}"
            );
        }
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap()
}

#[test]
fn a_server_without_persistence_is_a_danger_and_exits_1() {
    let server = RedisServer::start(); // appendonly no, as the tests' default
    let out = doctor_at(&server.url(), false);
    assert_eq!(code(&out), 1, "{out:?}");
    assert_verdicts(&out, &[("persistence", "danger")]);
    let r = report(&out);
    let (_, _, detail) = r.iter().find(|(_, c, _)| c == "persistence").unwrap();
    assert!(detail.contains("appendonly no"), "{detail}");
    assert!(
        detail.contains("appendonly yes"),
        "the advice says what to set"
    );
}

#[test]
fn a_server_with_appendonly_and_noeviction_is_all_ok_and_exits_0() {
    let server = RedisServer::start_with(SAFE);
    let out = doctor_at(&server.url(), false);
    assert_eq!(code(&out), 0, "{out:?}");
    assert_verdicts(&out, &[]);
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[test]
fn an_evicting_maxmemory_policy_is_a_danger() {
    // Either kind can evict a held lease (it always has a TTL); an
    // evicted fencing counter no longer matters (tests/it/tokens.rs).
    for policy in [
        "allkeys-lru",
        "allkeys-random",
        "volatile-lru",
        "volatile-ttl",
    ] {
        let server =
            RedisServer::start_with(&["--appendonly", "yes", "--maxmemory-policy", policy]);
        let out = doctor_at(&server.url(), false);
        assert_eq!(code(&out), 1, "{policy}: {out:?}");
        assert_verdicts(&out, &[("maxmemory-policy", "danger")]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(policy), "{policy}: {text}");
    }
}

#[test]
fn a_replica_is_a_danger_and_a_master_with_a_replica_a_warning() {
    let master = RedisServer::start_with(SAFE);
    let port = master.port.to_string();
    let mut replica_args = SAFE.to_vec();
    replica_args.extend(["--replicaof", "127.0.0.1", &port]);
    let replica = RedisServer::start_with(&replica_args);

    // The replica refuses writes: leases cannot be taken there.
    let out = doctor_at(&replica.url(), false);
    assert_eq!(code(&out), 1, "{out:?}");
    assert_verdicts(&out, &[("role", "danger")]);

    // Once it is attached, the master warns (a failover can lose a
    // lease) but is not a danger: exit 0.
    let attached = wait_until(Duration::from_secs(20), || {
        master
            .cmd::<String>(&["INFO", "replication"])
            .lines()
            .any(|l| l.trim() == "connected_slaves:1")
    });
    assert!(attached, "the replica never attached");
    let out = doctor_at(&master.url(), false);
    assert_eq!(code(&out), 0, "{out:?}");
    assert_verdicts(&out, &[("role", "warn")]);
    let r = report(&out);
    assert_eq!(verdict_of(&r, "role"), "warn");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 replica"), "{text}");
    let (_, _, detail) = r.iter().find(|(_, c, _)| c == "replica-clocks").unwrap();
    assert!(
        detail.starts_with(&format!("replica 127.0.0.1:{} is ", replica.port))
            && detail.contains("s from its master (±"),
        "{detail}"
    );
}

/// The offset in `replica HOST:PORT is +0.123s from its master (±…)`.
fn offset_in(detail: &str) -> f64 {
    detail
        .split(" is ")
        .nth(1)
        .and_then(|rest| rest.split("s from").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no offset in {detail:?}"))
}

#[test]
fn a_replica_clock_3s_behind_its_master_is_a_warning() {
    // The master lists the replica at the port it announces: a fake node
    // there answers TIME 3 s behind this host (and the master) clock.
    let behind = skewed_clock::SkewedClock::start(-3000);
    let master = RedisServer::start_with(SAFE);
    let port = master.port.to_string();
    let announce = behind.port.to_string();
    let mut replica_args = SAFE.to_vec();
    replica_args.extend(["--replicaof", "127.0.0.1", &port]);
    replica_args.extend(["--replica-announce-port", &announce]);
    let _replica = RedisServer::start_with(&replica_args);
    let attached = wait_until(Duration::from_secs(20), || {
        master
            .cmd::<String>(&["INFO", "replication"])
            .contains(&format!("port={announce},state=online"))
    });
    assert!(attached, "the replica never attached");

    let out = doctor_at(&master.url(), false);
    assert_eq!(code(&out), 0, "a warning, not a danger: {out:?}");
    assert_verdicts(&out, &[("role", "warn"), ("replica-clocks", "warn")]);
    let r = report(&out);
    let (_, _, detail) = r.iter().find(|(_, c, _)| c == "replica-clocks").unwrap();
    assert!(
        detail.starts_with(&format!("replica 127.0.0.1:{announce} is -")),
        "{detail}"
    );
    let offset = offset_in(detail);
    assert!((-3.5..-2.5).contains(&offset), "{detail}");
    assert!(
        detail.contains("fencing token"),
        "the advice says why: {detail}"
    );
}

#[test]
fn through_sentinel_the_masters_replica_clock_is_compared() {
    let set = ha::SentinelSet::start();
    let out = doctor_at(&set.url(), false);
    let r = report(&out);
    assert_eq!(verdict_of(&r, "replica-clocks"), "ok", "{r:?}");
    let (_, _, detail) = r.iter().find(|(_, c, _)| c == "replica-clocks").unwrap();
    assert!(
        detail.starts_with(&format!("replica 127.0.0.1:{} is ", set.replica.port)),
        "{detail}"
    );
    assert!(offset_in(detail).abs() < 1.0, "{detail}");
}

#[test]
fn json_is_an_array_of_check_verdict_detail_advice() {
    for (args, exit, dangers) in [
        (&[][..], 1, &["persistence"][..]),
        (SAFE, 0, &[][..]),
        (
            &["--appendonly", "yes", "--maxmemory-policy", "allkeys-lru"][..],
            1,
            &["maxmemory-policy"][..],
        ),
    ] {
        let server = RedisServer::start_with(args);
        let out = doctor_at(&server.url(), true);
        assert_eq!(code(&out), exit, "{args:?}: {out:?}");
        let stdout = String::from_utf8(out.stdout.clone()).unwrap();
        assert_eq!(stdout.lines().count(), 1, "one line of JSON: {stdout}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let items = v.as_array().expect("an array");
        let names: Vec<&str> = items.iter().map(|i| i["check"].as_str().unwrap()).collect();
        assert_eq!(names, CHECKS);
        for item in items {
            let obj = item.as_object().unwrap();
            let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            assert_eq!(keys, ["check", "verdict", "detail", "advice"], "{item}");
            let verdict = item["verdict"].as_str().unwrap();
            let check = item["check"].as_str().unwrap();
            let want = if dangers.contains(&check) {
                "danger"
            } else {
                "ok"
            };
            assert_eq!(verdict, want, "{item}");
            assert!(!item["detail"].as_str().unwrap().is_empty(), "{item}");
            // Advice where something is wrong, null where all is well.
            if verdict == "ok" {
                assert!(item["advice"].is_null(), "{item}");
            } else {
                assert!(!item["advice"].as_str().unwrap().is_empty(), "{item}");
            }
        }
    }
}

#[test]
fn an_unreachable_server_exits_125_and_says_so_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://u:hunter2@127.0.0.1:{port}");
    let out = doctor_at(&url, false);
    assert_eq!(code(&out), 125, "{out:?}");
    let r = report(&out);
    assert_eq!(r.len(), 1, "only the reachable check: {r:?}");
    assert_eq!((r[0].0.as_str(), r[0].1.as_str()), ("danger", "reachable"));
    let all = format!("{out:?}");
    assert!(!all.contains("hunter2"), "{all}");
    assert!(all.contains("u:***@"), "{all}");

    let out = doctor_at(&url, true);
    assert_eq!(code(&out), 125, "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["check"], "reachable");
    assert_eq!(v[0]["verdict"], "danger");
    assert!(!format!("{out:?}").contains("hunter2"));
}

#[test]
fn a_server_behind_a_password_is_checked_with_it_and_refused_without_it() {
    let server = RedisServer::start_with(SAFE);
    // Set after start: the helper checks the server is up without one.
    server.cmd::<()>(&["CONFIG", "SET", "requirepass", "s3cret-pw"]);
    let port = server.port;

    let out = doctor_at(&format!("redis://:s3cret-pw@127.0.0.1:{port}"), false);
    assert_eq!(code(&out), 0, "{out:?}");
    assert_verdicts(&out, &[]);
    assert!(!format!("{out:?}").contains("s3cret-pw"));

    let out = doctor_at(&format!("redis://127.0.0.1:{port}"), false);
    assert_eq!(code(&out), 125, "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("danger  reachable"), "{text}");
    assert!(text.contains("authentication"), "{text}");
}
