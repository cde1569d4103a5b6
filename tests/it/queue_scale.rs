//! What one hand-off costs the server as the queue grows (contract, run
//! behaviour 2): the same at 100 waiters as at 10, and no script call that
//! blocks the server for 1 ms or more.
//!
//! Commands are counted with `INFO commandstats`, which counts those run
//! inside scripts too, from just before the holder releases until the last
//! waiter has run and exited; the queue is built before the count starts.

use crate::common::*;

use std::process::{Child, Stdio};
use std::time::Duration;

/// The scale runs take far longer than common's `LIMIT`.
const SCALE_LIMIT: Duration = Duration::from_secs(120);

/// Server commands per hand-off, by name, and the SLOWLOG entries, for a
/// queue of `n` `run --wait forever` waiters drained by one release.
fn drain(n: usize) -> (f64, Vec<(String, u64)>, redis::Value) {
    let server = RedisServer::start();
    let name = format!("scale{n}");
    let queue = format!("distlock:{{{name}}}:queue");
    let out = distlock(&server)
        .args(["acquire", "--ttl", "120s", "--owner", "holder:0:1", &name])
        .output_within(SCALE_LIMIT);
    assert!(out.status.success(), "{out:?}");
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
    // Every script loaded and run once before the count: a first call
    // (NOSCRIPT, SCRIPT LOAD) is not a hand-off.
    for sub in ["acquire", "release"] {
        let out = distlock(&server)
            .args([sub, "--owner", "warm:0:1", "warm"])
            .output_within(SCALE_LIMIT);
        assert!(out.status.success(), "{out:?}");
    }
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
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let slow: redis::Value = server.cmd(&["SLOWLOG", "GET", "10"]);
    let mut per = Vec::new();
    let mut total = 0;
    for line in info.lines() {
        let Some((cmd, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        // The test's own commands.
        if [
            "info",
            "config|resetstat",
            "slowlog|get",
            "config|set",
            "slowlog|reset",
        ]
        .contains(&cmd)
        {
            continue;
        }
        let calls: u64 = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .unwrap()
            .parse()
            .unwrap();
        total += calls;
        per.push((cmd.to_owned(), calls));
    }
    (total as f64 / n as f64, per, slow)
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
    let _heavy = heavy();
    let (small, small_per, small_slow) = drain(10);
    let (large, large_per, large_slow) = drain(100);
    eprintln!("slow log (>= 1 ms): 10 waiters {small_slow:?}; 100 waiters {large_slow:?}");
    eprintln!("per hand-off: 10 waiters {small:.1} commands {small_per:?}");
    eprintln!("per hand-off: 100 waiters {large:.1} commands {large_per:?}");
    assert!(
        large <= small * 1.5,
        "per hand-off: {small:.1} commands at 10 waiters, {large:.1} at 100\n\
         10: {small_per:?}\n100: {large_per:?}"
    );
}
