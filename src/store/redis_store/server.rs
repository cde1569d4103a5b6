//! `list`'s SCAN over every node, and how a question goes to every master
//! of a Cluster (`doctor` asks each for its replicas the same way).

use super::error::describe;
use super::replies::ScanPage;
use super::{Found, Result, Store};

impl Store {
    /// `f` on every master of a Cluster (with its `host:port`), one after
    /// the other, or once on the one master otherwise (with None); their
    /// answers together.
    pub(super) fn on_each_master<T>(
        &mut self,
        mut f: impl FnMut(&mut Store, Option<&(String, u16)>) -> Result<Vec<T>>,
    ) -> Result<Vec<T>> {
        let Some(cluster) = self.target.cluster.clone() else {
            return f(self, None);
        };
        let map = cluster
            .slot_map(self.timeout)
            .map_err(|e| describe(e, &self.target))?;
        let mut masters: Vec<(String, u16)> = map.into_iter().map(|r| (r.2, r.3)).collect();
        masters.sort();
        masters.dedup();
        let mut out = Vec::new();
        for node in masters {
            self.conn = None;
            self.node = Some(node.clone());
            out.extend(f(self, Some(&node))?);
        }
        self.conn = None;
        self.node = None;
        Ok(out)
    }

    /// Names of every held lock under `prefix`, sorted. Uses SCAN (never
    /// KEYS, which blocks the server) with a glob that only matches lock
    /// keys: they are the only ones that end in `}`. SCAN sees one node, so
    /// every master of a Cluster is scanned.
    pub fn list_names(&mut self, prefix: &str) -> Result<Vec<Found>> {
        let mut names = self.on_each_master(|s, _| s.scan_names(prefix))?;
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// SCANs the node the connection points at for lock keys.
    fn scan_names(&mut self, prefix: &str) -> Result<Vec<Found>> {
        let pattern = format!("{prefix}:{{*}}*");
        let mut cursor: u64 = 0;
        let mut names = Vec::new();
        loop {
            let args = (cursor, "MATCH", &pattern, "COUNT", 1000);
            let page: ScanPage = self.call("scan", |c| redis::cmd("SCAN").arg(args).query(c))?;
            cursor = page.cursor;
            for k in page.keys {
                let Some(rest) = k.strip_prefix(prefix).and_then(|r| r.strip_prefix(":{")) else {
                    continue;
                };
                // Names hold no braces, so the tag ends at the first one.
                let plain = rest.strip_suffix('}').map(|n| (n, false));
                let found = plain.or_else(|| rest.strip_suffix("}:slots").map(|n| (n, true)));
                if let Some((name, semaphore)) = found {
                    let name = name.to_owned();
                    names.push(Found { name, semaphore });
                }
            }
            if cursor == 0 {
                break;
            }
        }
        Ok(names)
    }
}
