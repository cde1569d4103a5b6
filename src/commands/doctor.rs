//! `distlock doctor`: is the Redis that the URL points at fit to hold
//! leases? One line per check, with a verdict and advice.

use std::time::Duration;

use anyhow::Result;

use super::output::{print_json, print_lines};
use super::{Global, IO_TIMEOUT};
use crate::exit;

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
            "appendonly no: a restart forgets leases and resets fencing counters".into()
        },
        advice: if aof {
            String::new()
        } else {
            "set appendonly yes (appendfsync everysec or always), or fencing tokens can go backwards after a restart".into()
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
            "use noeviction: under memory pressure this policy can evict a held lease (two holders) or a fencing counter (allkeys-*)".into()
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
