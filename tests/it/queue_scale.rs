//! What one hand-off and one waiter's joining cost the server as the queue
//! grows (contract, run behaviour 2): the same at 100 waiters as at 10,
//! and no script call that blocks the server for 1 ms or more.
//!
//! Commands are counted with `INFO commandstats`, which counts those run
//! inside scripts too: joining from just before the waiters start until
//! all are queued (a waiter is queued by its last attempt, so its joining
//! is over then), a hand-off from just before the holder releases until
//! the last waiter has run and exited. A loop over the queue in a script
//! grows these counts with the queue; time would not tell it apart from a
//! busy machine.

use crate::common::*;

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The scale runs take far longer than common's `LIMIT`.
const SCALE_LIMIT: Duration = Duration::from_secs(120);

/// What a queue of `n` waiters cost the server.
struct Drained {
    /// Server commands per waiter while the waiters joined the queue.
    join: f64,
    join_per: Vec<(String, u64)>,
    /// Server commands per hand-off while the queue drained.
    handoff: f64,
    handoff_per: Vec<(String, u64)>,
    /// SLOWLOG entries from the release on.
    slow: redis::Value,
}

/// Calls by command from `INFO commandstats`, without the test's own.
fn commandstats(server: &RedisServer) -> HashMap<String, u64> {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let ours = [
        "info",
        "zcard",
        "config|resetstat",
        "slowlog|get",
        "config|set",
        "slowlog|reset",
    ];
    info.lines()
        .filter_map(|line| {
            let (cmd, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            (!ours.contains(&cmd)).then(|| (cmd.to_owned(), calls))
        })
        .collect()
}

/// Commands per `n` between two snapshots, and the calls by name.
fn per(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    n: usize,
) -> (f64, Vec<(String, u64)>) {
    let mut calls: Vec<(String, u64)> = after
        .iter()
        .map(|(cmd, c)| (cmd.clone(), c - before.get(cmd).copied().unwrap_or(0)))
        .filter(|(_, c)| *c > 0)
        .collect();
    calls.sort();
    let total: u64 = calls.iter().map(|(_, c)| c).sum();
    (total as f64 / n as f64, calls)
}

/// The queue at 10 and at 100 waiters, drained once for both tests.
fn drained() -> &'static (Drained, Drained) {
    static DRAINED: OnceLock<(Drained, Drained)> = OnceLock::new();
    DRAINED.get_or_init(|| {
        let _heavy = heavy();
        (drain(10), drain(100))
    })
}

/// A queue of `n` `run --wait forever` waiters, joined and then drained by
/// one release.
fn drain(n: usize) -> Drained {
    let server = RedisServer::start();
    let name = format!("scale{n}");
    let queue = format!("distlock:{{{name}}}:queue");
    let out = distlock(&server)
        .args(["acquire", "--ttl", "120s", "--owner", "holder:0:1", &name])
        .output_within(SCALE_LIMIT);
    assert!(out.status.success(), "{out:?}");
    // Every script loaded and run once before the count: a first call
    // (NOSCRIPT, SCRIPT LOAD) is not a hand-off, nor part of joining.
    for sub in ["acquire", "release"] {
        let out = distlock(&server)
            .args([sub, "--owner", "warm:0:1", "warm"])
            .output_within(SCALE_LIMIT);
        assert!(out.status.success(), "{out:?}");
    }
    let before_join = commandstats(&server);
    let mut kids: Vec<Child> = (0..n)
        .map(|_| {
            distlock(&server)
                .args([
                    "run", "--wait", "forever", "--ttl", "60s", &name, "--", "true",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    assert!(
        poll(SCALE_LIMIT, Duration::from_millis(50), || {
            server.cmd::<usize>(&["ZCARD", &queue]) == n
        }),
        "the {n} waiters never all queued"
    );
    let (join, join_per) = per(&before_join, &commandstats(&server), n);
    let _: () = server.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "1000"]);
    let _: () = server.cmd(&["SLOWLOG", "RESET"]);
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let out = distlock(&server)
        .args(["release", "--owner", "holder:0:1", &name])
        .output_within(SCALE_LIMIT);
    assert!(out.status.success(), "{out:?}");
    for kid in &mut kids {
        assert!(wait_with_timeout(kid, SCALE_LIMIT).success());
    }
    let slow: redis::Value = server.cmd(&["SLOWLOG", "GET", "10"]);
    let (handoff, handoff_per) = per(&HashMap::new(), &commandstats(&server), n);
    Drained {
        join,
        join_per,
        handoff,
        handoff_per,
        slow,
    }
}

/// The release wakes the head alone and each promise of a turn travels one
/// waiter at a time: a hand-off costs the same number of server commands
/// (PUBLISH and everything else a script runs) with 100 waiters as with
/// 10. Counted, not timed: how long a call takes (SLOWLOG, the 1 ms rule)
/// is the scale bench's to measure (docs/queue.md), since on a loaded
/// machine a descheduled server makes any call slow; the slow log is
/// printed here for whoever reads the test's output.
#[test]
fn a_hand_off_costs_the_same_with_100_waiters_as_with_10() {
    let (small, large) = drained();
    eprintln!(
        "slow log (>= 1 ms): 10 waiters {:?}; 100 waiters {:?}",
        small.slow, large.slow
    );
    eprintln!(
        "per hand-off: 10 waiters {:.1} commands {:?}",
        small.handoff, small.handoff_per
    );
    eprintln!(
        "per hand-off: 100 waiters {:.1} commands {:?}",
        large.handoff, large.handoff_per
    );
    assert!(
        large.handoff <= small.handoff * 1.5,
        "per hand-off: {:.1} commands at 10 waiters, {:.1} at 100\n\
         10: {:?}\n100: {:?}",
        small.handoff,
        large.handoff,
        small.handoff_per,
        large.handoff_per
    );
}

/// A waiter joins with the same commands whatever the queue's length: its
/// attempts read its place (ZRANK, O(log N)) and the first few waiters,
/// never the whole queue. Counted, like the hand-off.
#[test]
fn joining_the_queue_costs_the_same_with_100_waiters_as_with_10() {
    let (small, large) = drained();
    eprintln!(
        "per waiter joining: 10 waiters {:.1} commands {:?}",
        small.join, small.join_per
    );
    eprintln!(
        "per waiter joining: 100 waiters {:.1} commands {:?}",
        large.join, large.join_per
    );
    assert!(
        large.join <= small.join * 1.5,
        "per waiter joining: {:.1} commands at 10 waiters, {:.1} at 100\n\
         10: {:?}\n100: {:?}",
        small.join,
        large.join,
        small.join_per,
        large.join_per
    );
}
