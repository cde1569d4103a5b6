//! `distlock doctor`: is the Redis or etcd that the URL points at fit to
//! hold leases? One line per check, with a verdict and advice: whether
//! the server answers is judged here, the rest by the store's backend.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::output::{print_json, print_lines};
use super::{Global, IO_TIMEOUT};
use crate::exit;
use crate::store::{Check, Verdict};

/// `distlock doctor`: is this Redis fit to hold leases?
/// With `json`, a JSON array instead of lines.
pub fn doctor(g: &Global, json: bool) -> Result<u8> {
    let mut store = g.store(IO_TIMEOUT);
    let mut rtts = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        if let Err(e) = store.ping() {
            let advice = "check the URL, the network, the password and TLS settings";
            let unreachable = Check::new("reachable", Verdict::Danger, format!("{e:#}"), advice);
            print_checks(&[unreachable], json)?;
            return Ok(exit::FAILURE);
        }
        rtts.push(t.elapsed());
    }
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    let question = if g.target.is_etcd() {
        "a status request"
    } else {
        "PING"
    };
    let mut checks = vec![Check::new(
        "reachable",
        Verdict::Warn.when(median > Duration::from_millis(100)),
        format!(
            "{} answered {question} in {:.2} ms (median of {})",
            store.display(),
            median.as_secs_f64() * 1000.0,
            rtts.len()
        ),
        "slow round trips eat into the lease: use a --ttl far above them",
    )];
    checks.extend(store.checks()?);
    print_checks(&checks, json)?;
    let worst = checks.iter().map(|c| c.verdict).max();
    Ok(if worst == Some(Verdict::Danger) {
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
                    "advice": if c.advice.is_empty() { None } else { Some(c.advice) },
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
