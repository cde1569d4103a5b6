//! `distlock doctor`: is the Redis or etcd that the URL points at fit to
//! hold leases? One line per check, with a verdict and advice.

use std::time::Duration;

use anyhow::Result;

use super::output::{print_json, print_lines};
use super::{Global, IO_TIMEOUT};
use crate::exit;
use crate::store::{ClockReading, ClusterStatus, MemberHealth, ReplicaClock};

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
    store.report_split_clusters();
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
            "{} answered {} in {:.2} ms (median of {})",
            store.display(),
            if g.target.is_etcd() {
                "a status request"
            } else {
                "PING"
            },
            median.as_secs_f64() * 1000.0,
            rtts.len()
        ),
        advice: if median > Duration::from_millis(100) {
            "slow round trips eat into the lease: use a --ttl far above them".into()
        } else {
            String::new()
        },
    });

    if let Some(cluster) = store.cluster_status()? {
        checks.extend(cluster_checks(&cluster));
        return finish(&checks, json);
    }

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
    finish(&checks, json)
}

/// Prints the checks; the exit status says whether one found a danger.
fn finish(checks: &[Check], json: bool) -> Result<u8> {
    print_checks(checks, json)?;
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

/// Whether the URL's hosts are members of one cluster (None for a URL
/// of one host): of two, runs would split between them, which every
/// other call refuses.
fn split_check(clusters: &[(String, std::result::Result<u64, String>)]) -> Option<Check> {
    if clusters.len() < 2 {
        return None;
    }
    let said: Vec<(&str, u64)> = clusters
        .iter()
        .filter_map(|(h, id)| Some((h.as_str(), *id.as_ref().ok()?)))
        .collect();
    let silent: Vec<&str> = clusters
        .iter()
        .filter(|(_, id)| id.is_err())
        .map(|(h, _)| h.as_str())
        .collect();
    let unasked = if silent.is_empty() {
        String::new()
    } else {
        format!(" ({} did not answer)", silent.join(", "))
    };
    Some(match said.as_slice() {
        [(a, x), rest @ ..] => match rest.iter().find(|(_, y)| y != x) {
            Some((b, y)) => Check {
                name: "cluster",
                verdict: Verdict::Danger,
                detail: format!("{a} is a member of etcd cluster {x:x} but {b} of cluster {y:x}{unasked}"),
                advice: "runs split between the clusters (two holders at once), so run, acquire and the rest refuse this URL: name members of one cluster only".into(),
            },
            None => Check {
                name: "cluster",
                verdict: Verdict::Ok,
                detail: format!("{} hosts of the URL are members of etcd cluster {x:x}{unasked}", said.len()),
                advice: String::new(),
            },
        },
        [] => Check {
            name: "cluster",
            verdict: Verdict::Warn,
            detail: format!("no host of the URL said which cluster it is in{unasked}"),
            advice: String::new(),
        },
    })
}

/// The smallest `--ttl` distlock takes on etcd (whole seconds).
const ETCD_MIN_TTL: Duration = Duration::from_secs(2);

/// The checks of an etcd cluster: its members' health, its leader, its
/// version and the smallest lease it grants. Every acquisition and renewal
/// is a Raft commit, so what matters is that a majority of members is
/// healthy and follows one leader.
fn cluster_checks(c: &ClusterStatus) -> Vec<Check> {
    let healthy = |h: &MemberHealth| h.leader != 0 && h.errors.is_empty();
    let name_of = |id: u64| {
        c.members
            .iter()
            .find(|m| m.id == id)
            .map_or_else(|| format!("{id:x}"), |m| m.name.clone())
    };
    let mut parts = Vec::new();
    let mut up = 0;
    let mut alarms = false;
    for m in &c.members {
        let state = match &m.status {
            Ok(h) if healthy(h) => {
                up += 1;
                "healthy".to_owned()
            }
            Ok(h) if !h.errors.is_empty() => {
                alarms = true;
                format!("alarm {}", h.errors.join(", "))
            }
            Ok(_) => "up, but follows no leader".to_owned(),
            Err(e) => format!("not reached: {e}"),
        };
        parts.push(format!("{} {} {state}", m.name, m.client_urls.join(",")));
    }
    let n = c.members.len();
    let (verdict, advice) = if up == n && n > 0 {
        (Verdict::Ok, String::new())
    } else if alarms || up * 2 <= n {
        (
            Verdict::Danger,
            "without a majority of healthy members no lease can be taken or renewed (running CMDs are stopped at their deadline); an alarm refuses writes until it is cleared".to_owned(),
        )
    } else {
        (
            Verdict::Warn,
            "leases still work, but the cluster has less to lose: bring the member back".to_owned(),
        )
    };
    let mut checks: Vec<Check> = split_check(&c.clusters).into_iter().collect();
    checks.push(Check {
        name: "members",
        verdict,
        detail: format!("{up} of {n} healthy: {}", parts.join("; ")),
        advice,
    });

    let mut leaders: Vec<(u64, u64)> = c
        .members
        .iter()
        .filter_map(|m| m.status.as_ref().ok())
        .filter(|h| h.leader != 0)
        .map(|h| (h.leader, h.raft_term))
        .collect();
    leaders.sort();
    leaders.dedup_by_key(|l| l.0);
    checks.push(match leaders.as_slice() {
        [] => Check {
            name: "leader",
            verdict: Verdict::Danger,
            detail: "no member follows a leader".into(),
            advice: "etcd needs a majority of its members up to elect one; until then no lease can be taken or renewed".into(),
        },
        [(id, term)] => {
            let following = c
                .members
                .iter()
                .filter(|m| matches!(&m.status, Ok(h) if h.leader == *id))
                .count();
            // A leader cut off from the others still believes it leads
            // until its election timeout passes; without a majority
            // behind it, it commits nothing.
            if following * 2 > n {
                Check {
                    name: "leader",
                    verdict: Verdict::Ok,
                    detail: format!("{} leads (raft term {term})", name_of(*id)),
                    advice: String::new(),
                }
            } else {
                Check {
                    name: "leader",
                    verdict: Verdict::Danger,
                    detail: format!(
                        "{} claims to lead (raft term {term}), but only {following} of {n} members follow it",
                        name_of(*id)
                    ),
                    advice: "etcd needs a majority of its members up to commit; until then no lease can be taken or renewed".into(),
                }
            }
        }
        many => Check {
            name: "leader",
            verdict: Verdict::Warn,
            detail: format!(
                "members follow different leaders: {}",
                many.iter()
                    .map(|(id, _)| name_of(*id))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            advice: "an election is under way or a member is cut off; run doctor again".into(),
        },
    });

    let mut versions: Vec<(&str, &str)> = c
        .members
        .iter()
        .filter_map(|m| Some((m.name.as_str(), m.status.as_ref().ok()?.version.as_str())))
        .collect();
    versions.sort_by_key(|v| v.1);
    checks.push(match versions.as_slice() {
        [] => Check {
            name: "version",
            verdict: Verdict::Warn,
            detail: "no member told its version".into(),
            advice: String::new(),
        },
        [first, .., last] if first.1 != last.1 => Check {
            name: "version",
            verdict: Verdict::Warn,
            detail: format!(
                "etcd {}",
                versions
                    .iter()
                    .map(|(n, v)| format!("{v} on {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            advice: "members run different versions: finish the upgrade".into(),
        },
        [(_, v), ..] => Check {
            name: "version",
            verdict: Verdict::Ok,
            detail: format!("etcd {v}"),
            advice: String::new(),
        },
    });

    checks.push(match &c.min_lease_ttl {
        Ok(min) => {
            let floor = (*min).max(ETCD_MIN_TTL);
            let mut detail = format!(
                "etcd grants leases of at least {}s (1.5 election timeouts); distlock takes --ttl of whole seconds from {}s",
                min.as_secs(),
                floor.as_secs()
            );
            if *min > ETCD_MIN_TTL {
                detail.push_str(&format!(
                    ", and etcd makes a shorter one {}s: safe (the lease outlives distlock's deadline), but a holder that dies blocks the lock that long",
                    min.as_secs()
                ));
            }
            Check {
                name: "lease-ttl",
                verdict: Verdict::Ok,
                detail,
                advice: String::new(),
            }
        }
        Err(e) => Check {
            name: "lease-ttl",
            verdict: Verdict::Danger,
            detail: format!("no lease granted: {e}"),
            advice: "distlock cannot take a lease on this cluster".into(),
        },
    });
    checks
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
    use crate::store::MemberStatus;
    use std::time::Instant;

    fn reading(base: Instant, sent_ms: u64, rtt_ms: u64, time_ms: u64) -> ClockReading {
        ClockReading {
            time: Duration::from_millis(time_ms),
            sent: base + Duration::from_millis(sent_ms),
            received: base + Duration::from_millis(sent_ms + rtt_ms),
        }
    }

    fn member(id: u64, status: std::result::Result<(u64, &str), &str>) -> MemberStatus {
        MemberStatus {
            id,
            name: format!("m{id}"),
            client_urls: vec![format!("http://h{id}:2379")],
            status: status
                .map(|(leader, version)| MemberHealth {
                    version: version.into(),
                    leader,
                    raft_term: 7,
                    errors: Vec::new(),
                })
                .map_err(str::to_owned),
        }
    }

    fn verdicts(c: &ClusterStatus) -> Vec<(&'static str, Verdict)> {
        cluster_checks(c)
            .iter()
            .map(|k| (k.name, k.verdict))
            .collect()
    }

    #[test]
    fn an_etcd_cluster_is_judged_by_its_majority_its_leader_and_its_lease_floor() {
        use Verdict::{Danger, Ok as Fine, Warn};
        let whole = ClusterStatus {
            members: vec![
                member(1, Ok((2, "3.4.23"))),
                member(2, Ok((2, "3.4.23"))),
                member(3, Ok((2, "3.4.23"))),
            ],
            min_lease_ttl: Ok(Duration::from_secs(2)),
            clusters: Vec::new(),
        };
        let checks = cluster_checks(&whole);
        assert_eq!(
            verdicts(&whole),
            [
                ("members", Fine),
                ("leader", Fine),
                ("version", Fine),
                ("lease-ttl", Fine)
            ]
        );
        assert_eq!(checks[1].detail, "m2 leads (raft term 7)");
        assert!(checks[0].detail.contains("m3 http://h3:2379 healthy"));

        let mut one_down = whole.clone();
        one_down.members[2] = member(3, Err("tcp connect error"));
        one_down.members[1].status.as_mut().unwrap().version = "3.5.1".into();
        let checks = cluster_checks(&one_down);
        assert_eq!(
            verdicts(&one_down),
            [
                ("members", Warn),
                ("leader", Fine),
                ("version", Warn),
                ("lease-ttl", Fine)
            ]
        );
        assert!(checks[0]
            .detail
            .contains("m3 http://h3:2379 not reached: tcp connect error"));

        // A leader cut off still claims to lead: not a majority.
        let cut_off = ClusterStatus {
            members: vec![
                member(1, Err("refused")),
                member(2, Ok((2, "3.4.23"))),
                member(3, Err("refused")),
            ],
            min_lease_ttl: Err("no answer within 5s".into()),
            clusters: Vec::new(),
        };
        assert_eq!(
            verdicts(&cut_off),
            [
                ("members", Danger),
                ("leader", Danger),
                ("version", Fine),
                ("lease-ttl", Danger)
            ]
        );
        let mut none = cut_off.clone();
        none.members[1] = member(2, Ok((0, "3.4.23")));
        assert_eq!(
            cluster_checks(&none)[1].detail,
            "no member follows a leader"
        );

        let mut slow = whole.clone();
        slow.min_lease_ttl = Ok(Duration::from_secs(5));
        let lease = &cluster_checks(&slow)[3];
        assert_eq!(lease.verdict, Fine);
        assert!(lease.detail.contains("from 5s"), "{}", lease.detail);
    }

    #[test]
    fn hosts_of_two_etcd_clusters_are_a_danger_naming_both() {
        let hosts = |v: &[(&str, std::result::Result<u64, &str>)]| {
            v.iter()
                .map(|(h, r)| (h.to_string(), r.map_err(str::to_owned)))
                .collect::<Vec<_>>()
        };
        assert!(split_check(&hosts(&[("a:1", Ok(1))])).is_none());
        let one = split_check(&hosts(&[
            ("a:1", Ok(0xab)),
            ("b:2", Err("refused")),
            ("c:3", Ok(0xab)),
        ]))
        .unwrap();
        assert_eq!(one.verdict, Verdict::Ok);
        assert_eq!(
            one.detail,
            "2 hosts of the URL are members of etcd cluster ab (b:2 did not answer)"
        );
        let two = split_check(&hosts(&[("a:1", Ok(0xab)), ("b:2", Ok(0xcd))])).unwrap();
        assert_eq!(two.verdict, Verdict::Danger);
        assert_eq!(
            two.detail,
            "a:1 is a member of etcd cluster ab but b:2 of cluster cd"
        );
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
