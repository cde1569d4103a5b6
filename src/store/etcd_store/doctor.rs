//! What `doctor` asks an etcd cluster, and how it judges the answers: the
//! member list (from any member), each member's own status (asked of that
//! member alone, so one that is down shows as down rather than being
//! balanced away), and the TTL etcd grants for a 1 s lease, which is its
//! minimum; and which cluster each host of the URL is a member of.

use std::time::Duration;

use super::{error_chain, one_line, secs, Store};
use crate::store::{Check, Result, Verdict};

/// An etcd cluster as `doctor` sees it: each member (from the member
/// list) with its own answer, and the smallest lease etcd grants.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClusterStatus {
    members: Vec<MemberStatus>,
    /// The TTL etcd granted for a 1 s lease request (its minimum, 1.5
    /// election timeouts rounded up), or why none was granted.
    min_lease_ttl: std::result::Result<Duration, String>,
    /// Each host of the URL (`host:port`) and the id of the cluster its
    /// member is in, or why it did not say.
    clusters: Vec<(String, std::result::Result<u64, String>)>,
}

/// One member of an etcd cluster, and what it said about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberStatus {
    id: u64,
    name: String,
    client_urls: Vec<String>,
    /// Its status reply, or why it gave none.
    status: std::result::Result<MemberHealth, String>,
}

/// A member's status reply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberHealth {
    /// The server version, e.g. `3.4.23`.
    version: String,
    /// The member id of the leader it follows; 0 when it knows none.
    leader: u64,
    raft_term: u64,
    /// Alarms it reports (e.g. `NOSPACE`): writes are refused while one is
    /// raised.
    errors: Vec<String>,
}

impl Store {
    /// One status request, for `doctor`'s round trips. Its connection
    /// takes members of two clusters, which every other call refuses, so
    /// that `checks` can show them as a danger of its own.
    pub fn ping(&mut self) -> Result<()> {
        self.target.one_cluster = false;
        self.call("status", |mut c| async move { c.status().await.map(drop) })
    }

    /// `doctor`'s checks of the cluster.
    pub fn checks(&mut self) -> Result<Vec<Check>> {
        Ok(cluster_checks(&self.cluster_status()?))
    }

    fn cluster_status(&mut self) -> Result<ClusterStatus> {
        let listed = self.call("member list", |mut c| async move {
            let r = c.member_list().await?;
            Ok(r.members()
                .iter()
                .map(|m| (m.id(), m.name().to_owned(), m.client_urls().to_vec()))
                .collect::<Vec<_>>())
        })?;
        // Half the call's time each, all at once: a member that does not
        // answer leaves time for the lease check.
        let each = self.timeout / 2;
        let target = self.target.clone();
        let asks: Vec<_> = listed.iter().map(|(_, _, urls)| urls.clone()).collect();
        let url_asks: Vec<Vec<String>> = self.target.endpoints().map(|e| vec![e]).collect();
        let mut answers = self.call("status", |_| async move {
            let tasks: Vec<_> = asks
                .into_iter()
                .chain(url_asks)
                .map(|urls| {
                    let target = target.clone();
                    tokio::spawn(async move {
                        if urls.is_empty() {
                            return Err("advertises no client URL".to_owned());
                        }
                        let ask = async {
                            let mut c = target.connect_to(&urls, each).await?;
                            c.status().await
                        };
                        match tokio::time::timeout(each, ask).await {
                            Ok(Ok(s)) => Ok((
                                MemberHealth {
                                    version: s.version().to_owned(),
                                    leader: s.leader(),
                                    raft_term: s.raft_term(),
                                    errors: s.errors().to_vec(),
                                },
                                s.header().map_or(0, |h| h.cluster_id()),
                            )),
                            Ok(Err(e)) => Err(reason(&e)),
                            Err(_) => Err(format!("no answer within {}", secs(each, false))),
                        }
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
            }
            Ok(out)
        })?;
        let by_url = answers.split_off(listed.len());
        let by_url = by_url.into_iter().map(|a| a.map(|(_, id)| id));
        let clusters = self.target.addrs.iter().cloned().zip(by_url).collect();
        let members = listed
            .into_iter()
            .zip(answers)
            .map(|((id, name, client_urls), status)| MemberStatus {
                id,
                name,
                client_urls,
                status: status.map(|(health, _)| health),
            })
            .collect();
        let min_lease_ttl = self
            .call("lease grant", |mut c| async move {
                let g = c.lease_grant(1, None).await?;
                let _ = c.lease_revoke(g.id()).await;
                Ok(g.ttl())
            })
            .map(|ttl| Duration::from_secs(ttl.max(0) as u64))
            .map_err(|e| e.to_string());
        Ok(ClusterStatus {
            members,
            min_lease_ttl,
            clusters,
        })
    }
}

/// A member's error in a few words: the server's message, or the cause of
/// a transport failure (tonic's top line says only "transport error").
fn reason(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => one_line(s.message()),
        etcd_client::Error::TransportError(t) => one_line(&error_chain(t)),
        other => one_line(&other.to_string()),
    }
}

/// Whether the URL's hosts are members of one cluster (None for a URL
/// of one host): of two, runs would split between them, which every
/// other call refuses.
fn split_check(clusters: &[(String, std::result::Result<u64, String>)]) -> Option<Check> {
    if clusters.len() < 2 {
        return None;
    }
    let (mut said, mut silent) = (Vec::new(), Vec::new());
    for (h, id) in clusters {
        match id {
            Ok(id) => said.push((h.as_str(), *id)),
            Err(_) => silent.push(h.as_str()),
        }
    }
    let unasked = if silent.is_empty() {
        String::new()
    } else {
        format!(" ({} did not answer)", silent.join(", "))
    };
    let check = |verdict, detail, advice| Some(Check::new("cluster", verdict, detail, advice));
    match said.as_slice() {
        [(a, x), rest @ ..] => match rest.iter().find(|(_, y)| y != x) {
            Some((b, y)) => check(
                Verdict::Danger,
                format!("{a} is a member of etcd cluster {x:x} but {b} of cluster {y:x}{unasked}"),
                "runs split between the clusters (two holders at once), so run, acquire and the rest refuse this URL: name members of one cluster only",
            ),
            None => check(
                Verdict::Ok,
                format!("{} hosts of the URL are members of etcd cluster {x:x}{unasked}", said.len()),
                "",
            ),
        },
        [] => check(
            Verdict::Warn,
            format!("no host of the URL said which cluster it is in{unasked}"),
            "",
        ),
    }
}

/// Why an etcd before 3.4.31 or 3.5.13 is a warning: the nemesis lab saw
/// it give a lock to two holders (docs/guarantees.md, §10).
const STALL_ADVICE: &str = "a leader of this etcd that stalls past an election (a pause, a slow disk) revokes, once awake, leases the new leader kept alive (etcd-io/etcd#15247): a holder loses its lock until its next renewal sees it; upgrade to 3.4.31 or 3.5.13 or later, and fence writes";

/// [`STALL_ADVICE`] for a cluster in the middle of an upgrade.
const MIXED_STALL_ADVICE: &str = "members run different versions: finish the upgrade, to 3.4.31 or 3.5.13 or later: before those a leader that stalls past an election revokes, once awake, leases the new leader kept alive (etcd-io/etcd#15247); fence writes";

/// Whether etcd `version` lets a stalled old leader's lessor revoke leases
/// through the new leader (etcd-io/etcd#12528, #15247; fixed in 3.4.31
/// and 3.5.13 by etcd-io/etcd#16822). A version it cannot read is given
/// the benefit of the doubt.
fn revokes_after_a_stall(version: &str) -> bool {
    // The leading digits of each part: "3.5.12-rc.0", "3.4.13-eks".
    let number = |p: &str| {
        let digits = p.find(|c: char| !c.is_ascii_digit()).unwrap_or(p.len());
        p[..digits].parse::<u32>().ok()
    };
    let version = version.trim().trim_start_matches('v');
    let mut parts = version.split('.').map(number);
    match (
        parts.next().flatten(),
        parts.next().flatten(),
        parts.next().flatten(),
    ) {
        (Some(3), Some(5), Some(patch)) => patch < 13,
        (Some(3), Some(4), Some(patch)) => patch < 31,
        (Some(3), Some(minor), _) => minor < 4,
        (Some(major), _, _) => major < 3,
        _ => false,
    }
}

/// The smallest `--ttl` distlock takes on etcd (whole seconds).
const ETCD_MIN_TTL: Duration = Duration::from_secs(2);

/// The checks of an etcd cluster: its members' health, its leader, its
/// version and the smallest lease it grants. Every acquisition and renewal
/// is a Raft commit, so what matters is that a majority of members is
/// healthy and follows one leader.
fn cluster_checks(c: &ClusterStatus) -> Vec<Check> {
    let name_of = |id: u64| {
        c.members
            .iter()
            .find(|m| m.id == id)
            .map_or_else(|| format!("{id:x}"), |m| m.name.clone())
    };
    let (mut parts, mut up, mut alarms) = (Vec::new(), 0, false);
    for m in &c.members {
        let state = match &m.status {
            Ok(h) if h.leader != 0 && h.errors.is_empty() => {
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
        (Verdict::Ok, "")
    } else if alarms || up * 2 <= n {
        (
            Verdict::Danger,
            "without a majority of healthy members no lease can be taken or renewed (running CMDs are stopped at their deadline); an alarm refuses writes until it is cleared",
        )
    } else {
        (
            Verdict::Warn,
            "leases still work, but the cluster has less to lose: bring the member back",
        )
    };
    let mut checks: Vec<Check> = split_check(&c.clusters).into_iter().collect();
    let detail = format!("{up} of {n} healthy: {}", parts.join("; "));
    checks.push(Check::new("members", verdict, detail, advice));

    let mut leaders: Vec<(u64, u64)> = c
        .members
        .iter()
        .filter_map(|m| m.status.as_ref().ok())
        .filter(|h| h.leader != 0)
        .map(|h| (h.leader, h.raft_term))
        .collect();
    leaders.sort();
    leaders.dedup_by_key(|l| l.0);
    let leader = |verdict, detail, advice| Check::new("leader", verdict, detail, advice);
    checks.push(match leaders.as_slice() {
        [] => {
            let advice = "etcd needs a majority of its members up to elect one; until then no lease can be taken or renewed";
            leader(Verdict::Danger, "no member follows a leader".into(), advice)
        }
        [(id, term)] => {
            let following = c
                .members
                .iter()
                .filter(|m| matches!(&m.status, Ok(h) if h.leader == *id))
                .count();
            // A leader cut off from the others still believes it leads
            // until its election timeout passes; without a majority
            // behind it, it commits nothing.
            let who = name_of(*id);
            if following * 2 > n {
                leader(Verdict::Ok, format!("{who} leads (raft term {term})"), "")
            } else {
                let detail = format!("{who} claims to lead (raft term {term}), but only {following} of {n} members follow it");
                let advice = "etcd needs a majority of its members up to commit; until then no lease can be taken or renewed";
                leader(Verdict::Danger, detail, advice)
            }
        }
        many => {
            let names: Vec<_> = many.iter().map(|(id, _)| name_of(*id)).collect();
            let detail = format!("members follow different leaders: {}", names.join(", "));
            let advice = "an election is under way or a member is cut off; run doctor again";
            leader(Verdict::Warn, detail, advice)
        }
    });

    let mut versions: Vec<(&str, &str)> = c
        .members
        .iter()
        .filter_map(|m| Some((m.name.as_str(), m.status.as_ref().ok()?.version.as_str())))
        .collect();
    versions.sort_by_key(|v| v.1);
    checks.push(match versions.as_slice() {
        [] => Check::new("version", Verdict::Warn, "no member told its version", ""),
        [first, .., last] if first.1 != last.1 => {
            let each = versions.iter().map(|(n, v)| format!("{v} on {n}"));
            let detail = format!("etcd {}", each.collect::<Vec<_>>().join(", "));
            let stall = versions.iter().any(|(_, v)| revokes_after_a_stall(v));
            let advice = if stall {
                MIXED_STALL_ADVICE
            } else {
                "members run different versions: finish the upgrade"
            };
            Check::new("version", Verdict::Warn, detail, advice)
        }
        [(_, v), ..] if revokes_after_a_stall(v) => {
            Check::new("version", Verdict::Warn, format!("etcd {v}"), STALL_ADVICE)
        }
        [(_, v), ..] => Check::new("version", Verdict::Ok, format!("etcd {v}"), ""),
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
            Check::new("lease-ttl", Verdict::Ok, detail, "")
        }
        Err(e) => {
            let advice = "distlock cannot take a lease on this cluster";
            Check::new("lease-ttl", Verdict::Danger, format!("no lease granted: {e}"), advice)
        }
    });
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn an_etcd_whose_stalled_leader_revokes_live_leases_is_a_warning() {
        for (v, warn) in [
            ("3.4.23", true),
            ("3.4.30", true),
            ("3.4.31", false),
            ("3.5.12", true),
            ("3.5.13", false),
            ("3.5.17", false),
            ("3.6.0", false),
            ("3.3.27", true),
            ("4.0.0", false),
            ("3.5.0-alpha.0", true),
            ("3.5.12-rc.0", true),
            ("3.4.13-eks", true),
            ("3.4.23\n", true),
            ("v3.5.17", false),
            ("3.6.0-rc.1", false),
            ("", false),
        ] {
            assert_eq!(revokes_after_a_stall(v), warn, "{v}");
        }
        let mut old = ClusterStatus {
            members: (1..=3).map(|i| member(i, Ok((2, "3.4.23")))).collect(),
            min_lease_ttl: Ok(Duration::from_secs(2)),
            clusters: Vec::new(),
        };
        let version = &cluster_checks(&old)[2];
        assert_eq!(
            (version.name, version.verdict, version.detail.as_str()),
            ("version", Verdict::Warn, "etcd 3.4.23")
        );
        assert!(version.advice.contains("etcd-io/etcd#15247"));
        for m in &mut old.members {
            m.status.as_mut().unwrap().version = "3.4.31".into();
        }
        assert_eq!(cluster_checks(&old)[2].verdict, Verdict::Ok);
    }

    #[test]
    fn an_etcd_cluster_is_judged_by_its_majority_its_leader_and_its_lease_floor() {
        use Verdict::{Danger, Ok as Fine, Warn};
        let whole = ClusterStatus {
            members: vec![
                member(1, Ok((2, "3.5.17"))),
                member(2, Ok((2, "3.5.17"))),
                member(3, Ok((2, "3.5.17"))),
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
        // 3.5.1 among them has etcd-io/etcd#15247: the advice says so.
        assert!(checks[2].advice.contains("etcd-io/etcd#15247"));

        // A leader cut off still claims to lead: not a majority.
        let cut_off = ClusterStatus {
            members: vec![
                member(1, Err("refused")),
                member(2, Ok((2, "3.5.17"))),
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
        none.members[1] = member(2, Ok((0, "3.5.17")));
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
}
