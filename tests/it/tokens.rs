//! Fencing tokens never go backwards (guarantees.md §3), against real servers: a
//! token is `max(last token + 1, the server's TIME in µs)`, so losing the
//! counter (a restart without persistence, FLUSHALL, DEL, eviction, a
//! failover to a replica that missed the last increments) still hands out
//! a token above every earlier one. Each test first checks that the loss
//! really happened (the counter is gone or behind), so a pass means the
//! clock floor did the work.

use std::time::Duration;

use crate::common::ha;
use crate::common::*;
use ha::{fields, replicas_online, Node, SentinelSet, MASTER};

/// 2^53: above it a token is no longer exact as a JSON number or a
/// JavaScript double.
const EXACT: u64 = 1 << 53;

/// The server's clock (TIME) in µs.
fn server_us(url: &str) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut connect(url)).unwrap();
    s * 1_000_000 + us
}

/// `acquire NAME --owner OWNER --json`, which must succeed; its token.
fn acquire_as(url: &str, name: &str, owner: &str) -> u64 {
    let out = exec(
        distlock_at(url).args(["acquire", name, "--owner", owner, "--json"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, 0, "{out:?}");
    json(&out.stdout)["fencing_token"]
        .as_u64()
        .unwrap_or_else(|| panic!("no token: {out:?}"))
}

fn release_as(url: &str, name: &str, owner: &str) {
    let out = exec(
        distlock_at(url).args(["release", name, "--owner", owner]),
        Duration::from_secs(30),
    );
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn a_restart_without_persistence_between_two_holders_still_gives_the_second_a_larger_token() {
    let mut node = Node::data(&[]);
    let url = node.url();
    let first = token_run(&url, &[], "amnesia");
    node.kill();
    node.restart(&[]);
    assert_eq!(
        node.get(&fence("amnesia")),
        None,
        "the restart lost the counter"
    );
    let second = token_run(&url, &[], "amnesia");
    assert!(second > first, "{second} after {first}");
}

#[test]
fn flushall_and_del_of_the_counter_do_not_send_tokens_back() {
    let server = RedisServer::start();
    let url = server.url();
    let first = token_run(&url, &[], "lost");
    let _: () = server.cmd(&["FLUSHALL"]);
    let second = token_run(&url, &[], "lost");
    assert!(second > first, "after FLUSHALL: {second} after {first}");
    let deleted: i64 = server.cmd(&["DEL", &fence("lost")]);
    assert_eq!(deleted, 1);
    let third = token_run(&url, &[], "lost");
    assert!(third > second, "after DEL: {third} after {second}");
}

#[test]
fn an_evicted_counter_does_not_send_tokens_back() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let url = server.url();
    let first = token_run(&url, &[], "evicted");
    // Room for about a thousand more 1 KiB values, then fill it until the
    // counter (the least recently used key) is evicted.
    let info: String = server.cmd(&["INFO", "memory"]);
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let _: () = server.cmd(&[
        "CONFIG",
        "SET",
        "maxmemory",
        &(used + (1 << 20)).to_string(),
    ]);
    let mut con = server.conn();
    let filler = "x".repeat(1024);
    let mut evicted = false;
    for batch in 0..200 {
        let mut p = redis::pipe();
        for i in 0..100 {
            p.cmd("SET")
                .arg(format!("filler:{batch}:{i}"))
                .arg(&filler)
                .ignore();
        }
        let _: () = p.query(&mut con).unwrap();
        let exists: i64 = redis::cmd("EXISTS")
            .arg(fence("evicted"))
            .query(&mut con)
            .unwrap();
        if exists == 0 {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "the counter was never evicted");
    let second = token_run(&url, &[], "evicted");
    assert!(second > first, "{second} after {first}");
}

#[test]
fn every_acquisition_path_gets_a_token_above_one_lost_before_it() {
    let server = RedisServer::start();
    let url = server.url();
    let mut last = 0;
    let mut next = |what: &str, token: u64| {
        assert!(token > last, "{what}: {token} after {last}");
        assert!(token < EXACT, "{what}: {token}");
        last = token;
        let _: () = server.cmd(&["FLUSHALL"]);
    };
    next("run", token_run(&url, &[], "paths"));
    let run_limit = exec(
        distlock_at(&url)
            .args(["run", "paths", "--limit", "3", "--"])
            .args(ECHO_TOKEN),
        Duration::from_secs(30),
    );
    assert_eq!(run_limit.code, 0, "{run_limit:?}");
    next("run --limit", run_limit.stdout.trim().parse().unwrap());
    let once = exec(
        distlock_at(&url)
            .args(["run", "paths", "--once-per", "1h", "--"])
            .args(ECHO_TOKEN),
        Duration::from_secs(30),
    );
    assert_eq!(once.code, 0, "{once:?}");
    next("run --once-per", once.stdout.trim().parse().unwrap());
    next("acquire", acquire_as(&url, "paths", "me"));
    let hold = exec(
        distlock_at(&url).args(["hold", "paths", "--ttl", "5s"]),
        Duration::from_secs(30),
    );
    assert_eq!(hold.code, 0, "{hold:?}");
    let token = exported(&hold.stdout, "DISTLOCK_FENCING_TOKEN");
    let owner = exported(&hold.stdout, "DISTLOCK_OWNER");
    let released = exec(
        distlock_at(&url).args(["release", "paths", "--owner", &owner]),
        Duration::from_secs(30),
    );
    assert_eq!(released.code, 0, "{released:?}");
    next("hold", token.parse().unwrap());
}

#[test]
fn a_counter_at_41_moves_to_the_clock_and_a_retry_keeps_its_token() {
    let server = RedisServer::start();
    let url = server.url();
    let _: () = server.cmd(&["SET", &fence("old"), "41"]);
    let before = server_us(&url);
    let token = acquire_as(&url, "old", "me");
    let after = server_us(&url);
    assert!(
        before <= token && token <= after,
        "{token} not on the server clock [{before}, {after}]"
    );
    assert_eq!(server.get(&fence("old")), Some(token.to_string()));
    // The same owner again (a retry after a lost reply): the same token,
    // the counter left where it was.
    assert_eq!(acquire_as(&url, "old", "me"), token);
    assert_eq!(server.get(&fence("old")), Some(token.to_string()));
    release_as(&url, "old", "me");
    // A counter ahead of the clock (a server whose clock was set back)
    // still counts up by one.
    let ahead = server_us(&url) + 3_600_000_000;
    let _: () = server.cmd(&["SET", &fence("old"), &ahead.to_string()]);
    assert_eq!(acquire_as(&url, "old", "you"), ahead + 1);
    assert_eq!(server.get(&fence("old")), Some((ahead + 1).to_string()));
}

#[test]
fn a_hundred_acquisitions_as_fast_as_possible_are_strictly_increasing_and_exact() {
    let server = RedisServer::start();
    let url = server.url();
    let before = server_us(&url);
    let mut tokens = Vec::new();
    for _ in 0..100 {
        tokens.push(token_run(&url, &[], "fast"));
    }
    assert!(
        tokens[0] >= before,
        "{} below the clock {before}",
        tokens[0]
    );
    for w in tokens.windows(2) {
        assert!(w[0] < w[1], "{} then {}", w[0], w[1]);
    }
    assert!(*tokens.last().unwrap() < EXACT);
    assert_eq!(server.get(&fence("fast")), Some(tokens[99].to_string()));
}

/// The replica's replication link is cut (its user is deleted on the
/// master), tokens are handed out on the master only, the master dies and
/// the sentinels promote the replica: the next token is still larger.
#[test]
fn a_failover_to_a_replica_that_missed_the_last_increments_still_gives_a_larger_token() {
    let mut set = SentinelSet::start();
    let url = set.url();
    let name = "failover";
    token_run(&url, &[], name);
    // The replica authenticates as a user of its own, so that deleting
    // that user cuts replication and nothing else.
    let _: String = set
        .master
        .cmd(&["ACL", "SETUSER", "repl", "on", ">pw", "+@all", "~*", "&*"]);
    let _: () = set.replica.cmd(&["CONFIG", "SET", "masteruser", "repl"]);
    let _: () = set.replica.cmd(&["CONFIG", "SET", "masterauth", "pw"]);
    let _: i64 = set.master.cmd(&["CLIENT", "KILL", "TYPE", "replica"]);
    let relinked = poll(LIMIT, Duration::from_millis(10), || {
        replicas_online(&set.master.info("replication")) == 1
    });
    assert!(relinked, "the replica never came back as user repl");
    let synced = token_run(&url, &[], name);
    let caught_up = poll(LIMIT, Duration::from_millis(10), || {
        set.replica.get(&fence(name)) == Some(synced.to_string())
    });
    assert!(caught_up, "the replica never got token {synced}");

    let _: i64 = set.master.cmd(&["ACL", "DELUSER", "repl"]);
    let cut = poll(LIMIT, Duration::from_millis(10), || {
        replicas_online(&set.master.info("replication")) == 0
    });
    assert!(cut, "replication was never cut");
    let mut last = synced;
    for _ in 0..3 {
        let t = token_run(&url, &[], name);
        assert!(t > last);
        last = t;
    }
    assert_eq!(
        set.replica.get(&fence(name)),
        Some(synced.to_string()),
        "the replica missed the last increments"
    );

    set.master.kill();
    let promoted = poll(Duration::from_secs(30), Duration::from_millis(20), || {
        set.promoted()
    });
    assert!(promoted, "the sentinels never promoted the replica");
    let m = fields(&set.sentinels[0].cmd::<Vec<String>>(&["SENTINEL", "MASTER", MASTER]));
    assert_eq!(m.get("port"), Some(&set.replica.port.to_string()));
    let after = token_run(&url, &[], name);
    assert!(
        after > last,
        "the promoted replica handed out {after} after {last}"
    );
}
