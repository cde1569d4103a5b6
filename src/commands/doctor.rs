//! `distlock doctor`: is the Redis that the URL points at fit to hold
//! leases? One line per check, with a verdict and advice.

use std::time::Duration;

use anyhow::Result;

use super::output::{print_json, print_lines};
use super::{Global, IO_TIMEOUT};
use crate::exit;
use crate::store::{ClockReading, ReplicaClock};

/// How worrying one `doctor` finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Ok,
    Warn,
    Danger,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Danger => "danger",
        }
    }
}

/// One `doctor` line.
struct Check {
    name: &'static str,
    verdict: Verdict,
    detail: String,
    advice: String,
}

/// `distlock doctor`: is this Redis fit to hold leases?
/// With `json`, a JSON array instead of lines.
pub fn doctor(g: &Global, json: bool) -> Result<u8> {
    let mut store = g.store(IO_TIMEOUT);
    let mut checks = Vec::new();
    let mut rtts = Vec::new();
    let mut reach_error = None;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        match store.ping() {
            Ok(_) => rtts.push(t.elapsed()),
            Err(e) => {
                reach_error = Some(e);
                break;
            }
        }
    }
    if let Some(e) = reach_error {
        checks.push(Check {
            name: "reachable",
            verdict: Verdict::Danger,
            detail: format!("{e:#}"),
            advice: "check the URL, the network, the password and TLS settings".into(),
        });
        print_checks(&checks, json)?;
        return Ok(exit::FAILURE);
    }
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    checks.push(Check {
        name: "reachable",
        verdict: if median > Duration::from_millis(100) {
            Verdict::Warn
        } else {
            Verdict::Ok
        },
        detail: format!(
            "{} answered PING in {:.2} ms (median of {})",
            store.display(),
            median.as_secs_f64() * 1000.0,
            rtts.len()
        ),
        advice: if median > Duration::from_millis(100) {
            "slow round trips eat into the lease: use a --ttl far above them".into()
        } else {
            String::new()
        },
    });

    let server = store.info("server")?;
    let version = server.get("redis_version").cloned().unwrap_or_default();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    checks.push(Check {
        name: "version",
        verdict: if major >= 5 {
            Verdict::Ok
        } else {
            Verdict::Danger
        },
        detail: format!("redis {version}"),
        advice: if major >= 5 {
            String::new()
        } else {
            "distlock's scripts read the server clock (TIME), which needs Redis 5 or later".into()
        },
    });

    let persistence = store.info("persistence")?;
    let aof = persistence.get("aof_enabled").map(String::as_str) == Some("1");
    checks.push(Check {
        name: "persistence",
        verdict: if aof { Verdict::Ok } else { Verdict::Danger },
        detail: if aof {
            "appendonly yes".into()
        } else {
            "appendonly no: a restart forgets held leases (fencing tokens still go up: they are at least the server clock in µs)".into()
        },
        advice: if aof {
            String::new()
        } else {
            "set appendonly yes (appendfsync everysec or always), or a second holder can start after a restart while the first still runs".into()
        },
    });

    let memory = store.info("memory")?;
    let policy = memory
        .get("maxmemory_policy")
        .cloned()
        .unwrap_or_else(|| "unknown".into());
    let evicts = policy.starts_with("allkeys-") || policy.starts_with("volatile-");
    checks.push(Check {
        name: "maxmemory-policy",
        verdict: if evicts { Verdict::Danger } else { Verdict::Ok },
        detail: format!("maxmemory-policy {policy}"),
        advice: if evicts {
            "use noeviction: under memory pressure this policy can evict a held lease (two holders)"
                .into()
        } else {
            String::new()
        },
    });

    let replication = store.info("replication")?;
    let role = replication.get("role").cloned().unwrap_or_default();
    let replicas: u32 = replication
        .get("connected_slaves")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (verdict, detail, advice) = match (role.as_str(), replicas) {
        ("slave" | "replica", _) => (
            Verdict::Danger,
            "role replica: writes are refused".to_owned(),
            "point distlock at the master".to_owned(),
        ),
        (_, 0) => (Verdict::Ok, "role master, no replicas".to_owned(), String::new()),
        (_, n) => (
            Verdict::Warn,
            format!("role master with {n} replica(s)"),
            "replication is asynchronous: a failover can lose a lease; see the README's High availability".to_owned(),
        ),
    };
    checks.push(Check {
        name: "role",
        verdict,
        detail,
        advice,
    });

    let local = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let first = store.server_time()?;
    let second = store.server_time()?;
    let skew = first.as_secs_f64() - local.as_secs_f64();
    let (verdict, advice) = if second < first {
        (
            Verdict::Danger,
            "the server clock went backwards between two calls: leases and queues are judged on it"
                .to_owned(),
        )
    } else if skew.abs() > 5.0 {
        (
            Verdict::Warn,
            "leases do not depend on it, but acquired/last-run times shown by inspect will be off; run NTP".to_owned(),
        )
    } else {
        (Verdict::Ok, String::new())
    };
    checks.push(Check {
        name: "clock",
        verdict,
        detail: format!("server TIME is {skew:+.3}s from this host's clock, and advances"),
        advice,
    });

    checks.push(replica_clocks(&store.replica_clocks()?));

    print_checks(&checks, json)?;
    let worst = checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    Ok(if worst == Verdict::Danger {
        exit::DOCTOR_DANGER
    } else {
        exit::SUCCESS
    })
}

fn print_checks(checks: &[Check], json: bool) -> Result<()> {
    if json {
        let arr: Vec<_> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "check": c.name,
                    "verdict": c.verdict.word(),
                    "detail": c.detail,
                    "advice": if c.advice.is_empty() { None } else { Some(&c.advice) },
                })
            })
            .collect();
        return print_json(&serde_json::Value::Array(arr));
    }
    print_lines(checks.iter().map(|c| {
        let mut line = format!("{:<7} {:<17} {}", c.verdict.word(), c.name, c.detail);
        if !c.advice.is_empty() {
            line.push_str(&format!(" — {}", c.advice));
        }
        line
    }))
}

/// Above this, a replica's clock is worth a warning: after a failover the
/// promoted replica's clock is the floor of the next fencing token, so a
/// replica behind by more than the failover takes could hand out a token
/// below one already issued.
const MAX_OFFSET: Duration = Duration::from_secs(1);

/// How far a replica's clock is ahead of its master's (negative: behind),
/// in seconds, and the error bound of that figure. Each TIME was taken at
/// some moment between its request and its reply; taking the midpoints on
/// this host's monotonic clock, the error is at most half of the two
/// round trips together.
fn clock_offset(master: &ClockReading, replica: &ClockReading) -> (f64, f64) {
    let mid = |r: &ClockReading| r.sent + r.rtt() / 2;
    let (m_mid, r_mid) = (mid(master), mid(replica));
    let between = if r_mid >= m_mid {
        (r_mid - m_mid).as_secs_f64()
    } else {
        -(m_mid - r_mid).as_secs_f64()
    };
    let offset = replica.time.as_secs_f64() - master.time.as_secs_f64() - between;
    let error = (master.rtt() + replica.rtt()).as_secs_f64() / 2.0;
    (offset, error)
}

/// The `replica-clocks` line: each reachable replica's offset from its
/// master, a warning above [`MAX_OFFSET`].
fn replica_clocks(replicas: &[ReplicaClock]) -> Check {
    if replicas.is_empty() {
        return Check {
            name: "replica-clocks",
            verdict: Verdict::Ok,
            detail: "no replicas to compare".into(),
            advice: String::new(),
        };
    }
    let mut verdict = Verdict::Ok;
    let mut parts = Vec::new();
    for r in replicas {
        let of = if r.master == "the master" {
            String::new()
        } else {
            format!(" (of {})", r.master)
        };
        match &r.readings {
            Ok((m, rep)) => {
                let (offset, error) = clock_offset(m, rep);
                if offset.abs() > MAX_OFFSET.as_secs_f64() {
                    verdict = Verdict::Warn;
                }
                parts.push(format!(
                    "replica {}{of} is {offset:+.3}s from its master (±{error:.3}s)",
                    r.replica
                ));
            }
            Err(e) => parts.push(format!("replica {}{of} not reached: {e}", r.replica)),
        }
    }
    Check {
        name: "replica-clocks",
        verdict,
        detail: parts.join("; "),
        advice: if verdict == Verdict::Warn {
            "after a failover the promoted replica's clock is the floor of the next fencing token: a clock behind its master's can hand out a token below one already issued; run NTP on every Redis host".into()
        } else {
            String::new()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn reading(base: Instant, sent_ms: u64, rtt_ms: u64, time_ms: u64) -> ClockReading {
        ClockReading {
            time: Duration::from_millis(time_ms),
            sent: base + Duration::from_millis(sent_ms),
            received: base + Duration::from_millis(sent_ms + rtt_ms),
        }
    }

    #[test]
    fn the_offset_is_taken_between_the_midpoints_with_half_the_round_trips_as_error() {
        let base = Instant::now();
        // The master reads 1000 at local 5 (0..10); the replica, 20 ms
        // later by this host's clock, reads 2520 at local 25 (20..30):
        // 1.5 s ahead.
        let (offset, error) =
            clock_offset(&reading(base, 0, 10, 1000), &reading(base, 20, 10, 2520));
        assert!((offset - 1.5).abs() < 1e-9, "{offset}");
        assert!((error - 0.010).abs() < 1e-9, "{error}");
        // Behind, and read first.
        let (offset, _) = clock_offset(&reading(base, 40, 2, 5000), &reading(base, 0, 2, 2960));
        assert!((offset + 2.0).abs() < 1e-9, "{offset}");
    }

    #[test]
    fn replica_clocks_warn_above_one_second_and_name_each_replica() {
        let base = Instant::now();
        let clock = |master: &str, replica: &str, time_ms| ReplicaClock {
            master: master.into(),
            replica: replica.into(),
            readings: Ok((reading(base, 0, 2, 10_000), reading(base, 2, 2, time_ms))),
        };
        let c = replica_clocks(&[clock("the master", "r1:6379", 10_002)]);
        assert_eq!(c.verdict, Verdict::Ok);
        assert!(
            c.detail
                .contains("replica r1:6379 is +0.000s from its master (±0.002s)"),
            "{}",
            c.detail
        );
        let c = replica_clocks(&[
            clock("m:7000", "r1:7001", 10_002),
            clock("m:7002", "r2:7003", 8_000),
            ReplicaClock {
                master: "m:7004".into(),
                replica: "r3:7005".into(),
                readings: Err("refused".into()),
            },
        ]);
        assert_eq!(c.verdict, Verdict::Warn);
        assert!(
            c.detail.contains("replica r2:7003 (of m:7002) is -2.002s"),
            "{}",
            c.detail
        );
        assert!(
            c.detail
                .contains("replica r3:7005 (of m:7004) not reached: refused"),
            "{}",
            c.detail
        );
        assert!(c.advice.contains("fencing token"), "{}", c.advice);
        assert_eq!(replica_clocks(&[]).detail, "no replicas to compare");
    }
}
