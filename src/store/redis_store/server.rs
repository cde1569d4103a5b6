//! Questions about the server rather than about one lock: `list`'s SCAN
//! over every node, and `doctor`'s PING, INFO and TIME (of the master and
//! of each replica it lists), so that `doctor` builds no Redis command
//! itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::Value;

use super::error::describe;
use super::replies::{Info, ScanPage, ServerTime};
use super::Call;
use super::{ClockReading, Found, ReplicaClock, Result, Store};

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

    /// TIME, with this host's monotonic clock read just before the request
    /// and just after the reply, so that readings of two servers can be
    /// compared.
    fn clock_reading(
        conn: &mut redis::Connection,
    ) -> redis::RedisResult<(Value, Instant, Instant)> {
        let sent = Instant::now();
        let v = redis::cmd("TIME").query(conn)?;
        Ok((v, sent, Instant::now()))
    }

    /// The clocks of every replica that a master lists (INFO replication),
    /// each read right after its master's, three times, keeping the pair
    /// read fastest. Every master of a Cluster; the one master otherwise.
    /// A replica that cannot be reached from here is listed with why.
    pub fn replica_clocks(&mut self) -> Result<Vec<ReplicaClock>> {
        let masters: Vec<Option<(String, u16)>> = match self.target.cluster.clone() {
            Some(cluster) => {
                let map = cluster
                    .slot_map(self.timeout)
                    .map_err(|e| describe(e, &self.target))?;
                let mut m: Vec<(String, u16)> = map.into_iter().map(|r| (r.2, r.3)).collect();
                m.sort();
                m.dedup();
                m.into_iter().map(Some).collect()
            }
            None => vec![None],
        };
        let mut out = Vec::new();
        for master in masters {
            if master.is_some() {
                self.conn = None;
                self.node = master.clone();
            }
            let info = self.info("replication")?;
            for (host, port) in listed_replicas(&info) {
                let addr = format!("{host}:{port}");
                let master_addr = master
                    .as_ref()
                    .map_or_else(|| "the master".to_owned(), |(h, p)| format!("{h}:{p}"));
                let readings = self.read_pair(&host, port);
                out.push(ReplicaClock {
                    master: master_addr,
                    replica: addr,
                    readings,
                });
            }
        }
        if self.target.cluster.is_some() {
            self.conn = None;
            self.node = None;
        }
        Ok(out)
    }

    /// A clock reading of the server the connection points at.
    fn master_reading(&mut self) -> Result<ClockReading> {
        let mut read = None;
        let v = self.call_raw("TIME", |c| {
            let (v, sent, received) = Self::clock_reading(c)?;
            read = Some((sent, received));
            Ok(v)
        })?;
        let (sent, received) = read.expect("set when the call succeeded");
        Ok(ClockReading {
            time: self.parse::<ServerTime>("TIME", v)?.0,
            sent,
            received,
        })
    }

    /// The master's and one replica's clock readings, best of three.
    fn read_pair(
        &mut self,
        host: &str,
        port: u16,
    ) -> std::result::Result<(ClockReading, ClockReading), String> {
        // The replica's connection is our own, not the store's: each of its
        // calls gets a whole-call deadline here (see `store/call.rs`).
        let call = Call::start(self.timeout, &[]);
        let mut replica = self
            .target
            .connect_peer(host, port, call.left())
            .map_err(|e| describe(e, &self.target).to_string())?;
        drop(call);
        let mut best: Option<(ClockReading, ClockReading)> = None;
        for _ in 0..3 {
            let m = self.master_reading().map_err(|e| e.to_string())?;
            let call = Call::start(self.timeout, &[]);
            let (v, sent, received) = Self::clock_reading(&mut replica)
                .map_err(|e| describe(e, &self.target).to_string())?;
            drop(call);
            let r = ClockReading {
                time: self
                    .parse::<ServerTime>("TIME", v)
                    .map_err(|e| e.to_string())?
                    .0,
                sent,
                received,
            };
            let spread = |(m, r): &(ClockReading, ClockReading)| m.rtt() + r.rtt();
            if best.as_ref().is_none_or(|b| spread(&(m, r)) < spread(b)) {
                best = Some((m, r));
            }
        }
        best.ok_or_else(|| "no reading".to_owned())
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

/// The replicas an `INFO replication` lists: `slaveN:ip=…,port=…,…`.
fn listed_replicas(info: &HashMap<String, String>) -> Vec<(String, u16)> {
    let mut out: Vec<(usize, String, u16)> = info
        .iter()
        .filter_map(|(k, v)| {
            let n: usize = k.strip_prefix("slave")?.parse().ok()?;
            let field = |name: &str| {
                v.split(',')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            };
            Some((n, field("ip")?.to_owned(), field("port")?.parse().ok()?))
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, h, p)| (h, p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_read_from_info_replication_in_order() {
        let info: HashMap<String, String> = [
            ("role", "master"),
            ("connected_slaves", "2"),
            (
                "slave1",
                "ip=10.0.0.2,port=6380,state=online,offset=1,lag=0",
            ),
            (
                "slave0",
                "ip=10.0.0.1,port=6379,state=online,offset=1,lag=0",
            ),
            ("slave2", "ip=10.0.0.3,state=online"),
            ("master_replid", "abc"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(
            listed_replicas(&info),
            [("10.0.0.1".to_owned(), 6379), ("10.0.0.2".to_owned(), 6380)]
        );
    }
}
