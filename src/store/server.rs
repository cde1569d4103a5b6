//! Questions about the server rather than about one lock: `list`'s SCAN
//! over every node, and `doctor`'s PING, INFO and TIME, so that `doctor`
//! builds no Redis command itself.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::error::describe;
use super::replies::{Info, ScanPage, ServerTime};
use super::{Found, Result, Store};

impl Store {
    /// One PING, for `doctor`'s round-trip times.
    pub fn ping(&mut self) -> Result<()> {
        let _: Value = self.call_raw("PING", |c| redis::cmd("PING").query(c))?;
        Ok(())
    }

    /// `INFO section`, field by field.
    pub fn info(&mut self, section: &str) -> Result<HashMap<String, String>> {
        let v = self.call_raw("INFO", |c| redis::cmd("INFO").arg(section).query(c))?;
        Ok(self.parse::<Info>("INFO", v)?.0)
    }

    /// The server's wall clock (`TIME`), since the Unix epoch.
    pub fn server_time(&mut self) -> Result<Duration> {
        let v = self.call_raw("TIME", |c| redis::cmd("TIME").query(c))?;
        Ok(self.parse::<ServerTime>("TIME", v)?.0)
    }

    /// Names of every held lock under `prefix`, sorted. Uses SCAN (never
    /// KEYS, which blocks the server) with a glob that only matches lock
    /// keys: they are the only ones that end in `}`.
    pub fn list_names(&mut self, prefix: &str) -> Result<Vec<Found>> {
        if let Some(cluster) = self.target.cluster.clone() {
            // SCAN sees one node: scan every master.
            let map = cluster
                .slot_map(self.timeout)
                .map_err(|e| describe(e, &self.target))?;
            let mut masters: Vec<(String, u16)> = map.into_iter().map(|r| (r.2, r.3)).collect();
            masters.sort();
            masters.dedup();
            let mut names = Vec::new();
            for node in masters {
                self.conn = None;
                self.node = Some(node);
                names.extend(self.scan_names(prefix)?);
            }
            self.conn = None;
            self.node = None;
            names.sort();
            names.dedup();
            return Ok(names);
        }
        let mut names = self.scan_names(prefix)?;
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
            let v = self.call_raw("scan", |c| {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(c)
            })?;
            let page: ScanPage = self.parse("scan", v)?;
            cursor = page.cursor;
            for k in page.keys {
                let Some(rest) = k.strip_prefix(prefix).and_then(|r| r.strip_prefix(":{")) else {
                    continue;
                };
                // Names hold no braces, so the tag ends at the first one.
                if let Some(name) = rest.strip_suffix('}') {
                    names.push(Found {
                        name: name.to_owned(),
                        semaphore: false,
                    });
                } else if let Some(name) = rest.strip_suffix("}:slots") {
                    names.push(Found {
                        name: name.to_owned(),
                        semaphore: true,
                    });
                }
            }
            if cursor == 0 {
                break;
            }
        }
        Ok(names)
    }
}
