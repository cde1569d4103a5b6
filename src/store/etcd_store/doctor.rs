//! What `doctor` asks an etcd cluster: the member list (from any member),
//! each member's own status (asked of that member alone, so one that is
//! down shows as down rather than being balanced away), and the TTL etcd
//! grants for a 1 s lease, which is its minimum; and which cluster each
//! host of the URL is a member of.

use std::time::Duration;

use super::{error_chain, one_line, secs, Store};
use crate::store::{ClusterStatus, MemberHealth, MemberStatus, Result};

impl Store {
    /// `doctor` shows members of different clusters as a check of its
    /// own (see `cluster_status`) where a run refuses to connect.
    pub fn report_split_clusters(&mut self) {
        self.target.one_cluster = false;
        self.client = None;
    }

    pub fn cluster_status(&mut self) -> Result<ClusterStatus> {
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
        let hosts: Vec<String> = self.target.hosts().map(str::to_owned).collect();
        let url_asks: Vec<Vec<String>> = self.target.endpoints().map(|e| vec![e]).collect();
        let (answers, clusters) = self.call("status", |_| async move {
            let n = asks.len();
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
                            Err(_) => Err(format!("no answer within {}", secs(each))),
                        }
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
            }
            let by_url = out.split_off(n);
            let members: Vec<_> = out.into_iter().map(|a| a.map(|(h, _)| h)).collect();
            let clusters = by_url.into_iter().map(|a| a.map(|(_, id)| id));
            Ok((members, hosts.into_iter().zip(clusters).collect()))
        })?;
        let members = listed
            .into_iter()
            .zip(answers)
            .map(|((id, name, client_urls), status)| MemberStatus {
                id,
                name,
                client_urls,
                status,
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
