//! What `doctor` asks a Redis, and how it judges the answers: PING for the
//! round trips, INFO for the version, persistence, eviction policy and
//! role, and TIME of the master and of each replica it lists, so that
//! `doctor` builds no Redis command itself.

use std::collections::HashMap;
use std::time::{Duration, Instant, UNIX_EPOCH};

use redis::{Connection, Value};

use super::error::describe;
use super::replies::{Info, ServerTime};
use super::Call;
use super::{Result, Store};
use crate::store::{Check, Verdict};

/// One reading of a server's clock (TIME) and this host's monotonic clock
/// around the request.
#[derive(Debug, Clone, Copy)]
struct ClockReading {
    /// The server's TIME, since the Unix epoch.
    time: Duration,
    sent: Instant,
    received: Instant,
}

impl ClockReading {
    fn rtt(&self) -> Duration {
        self.received.saturating_duration_since(self.sent)
    }
}

/// A replica's clock beside its master's.
#[derive(Debug)]
struct ReplicaClock {
    /// `host:port` of the master, in a Cluster; None: the one master.
    master: Option<String>,
    /// `host:port` as the master lists it.
    replica: String,
    /// The master's reading, then the replica's; or why there is none.
    readings: std::result::Result<(ClockReading, ClockReading), String>,
}

impl Store {
    /// One PING, for `doctor`'s round-trip times.
    pub fn ping(&mut self) -> Result<()> {
        self.call_raw("PING", |c| redis::cmd("PING").query(c))
    }

    /// `doctor`'s checks of the server: its version, persistence, eviction
    /// policy and role (one INFO of the default sections), its clock, and
    /// its replicas' clocks.
    pub fn checks(&mut self) -> Result<Vec<Check>> {
        let info = self.info("default")?;
        let field = |k: &str| info.get(k).map_or("", String::as_str);
        let version = field("redis_version");
        let major: u32 = version.split('.').next().unwrap_or("").parse().unwrap_or(0);
        let aof = field("aof_enabled") == "1";
        let policy = info
            .get("maxmemory_policy")
            .map_or("unknown", String::as_str);
        let evicts = policy.starts_with("allkeys-") || policy.starts_with("volatile-");
        let replicas: u32 = field("connected_slaves").parse().unwrap_or(0);
        let (verdict, detail, advice) = match (field("role"), replicas) {
            ("slave" | "replica", _) => (
                Verdict::Danger,
                "role replica: writes are refused".to_owned(),
                "point distlock at the master",
            ),
            (_, 0) => (Verdict::Ok, "role master, no replicas".to_owned(), ""),
            (_, n) => (
                Verdict::Warn,
                format!("role master with {n} replica(s)"),
                "replication is asynchronous: a failover can lose a lease; see the README's High availability",
            ),
        };
        let mut checks = vec![
            Check::new(
                "version",
                Verdict::Danger.when(major < 5),
                format!("redis {version}"),
                "distlock's scripts read the server clock (TIME), which needs Redis 5 or later",
            ),
            Check::new(
                "persistence",
                Verdict::Danger.when(!aof),
                if aof {
                    "appendonly yes"
                } else {
                    "appendonly no: a restart forgets held leases (fencing tokens still go up: they are at least the server clock in µs)"
                },
                "set appendonly yes (appendfsync everysec or always), or a second holder can start after a restart while the first still runs",
            ),
            Check::new(
                "maxmemory-policy",
                Verdict::Danger.when(evicts),
                format!("maxmemory-policy {policy}"),
                "use noeviction: under memory pressure this policy can evict a held lease (two holders)",
            ),
            Check::new("role", verdict, detail, advice),
        ];

        let local = UNIX_EPOCH.elapsed().unwrap_or_default();
        let first = self.master_reading()?.time;
        let second = self.master_reading()?.time;
        let skew = first.as_secs_f64() - local.as_secs_f64();
        let detail = format!("server TIME is {skew:+.3}s from this host's clock, and advances");
        checks.push(if second < first {
            let advice = "the server clock went backwards between two calls: leases and queues are judged on it";
            Check::new("clock", Verdict::Danger, detail, advice)
        } else {
            let advice = "leases do not depend on it, but acquired/last-run times shown by inspect will be off; run NTP";
            Check::new("clock", Verdict::Warn.when(skew.abs() > 5.0), detail, advice)
        });
        checks.push(replica_clocks(&self.replica_clocks()?));
        Ok(checks)
    }

    /// `INFO section`, field by field.
    fn info(&mut self, section: &str) -> Result<HashMap<String, String>> {
        let info: Info = self.call("INFO", |c| redis::cmd("INFO").arg(section).query(c))?;
        Ok(info.0)
    }

    /// TIME, with this host's monotonic clock read just before the request
    /// and just after the reply, so that readings of two servers can be
    /// compared.
    fn clock_reading(conn: &mut Connection) -> redis::RedisResult<(Value, Instant, Instant)> {
        let sent = Instant::now();
        let v = redis::cmd("TIME").query(conn)?;
        Ok((v, sent, Instant::now()))
    }

    /// The clocks of every replica that a master lists (INFO replication),
    /// each read right after its master's, three times, keeping the pair
    /// read fastest. Every master of a Cluster; the one master otherwise.
    /// A replica that cannot be reached from here is listed with why.
    fn replica_clocks(&mut self) -> Result<Vec<ReplicaClock>> {
        self.on_each_master(|s, master| {
            let master = master.map(|(h, p)| format!("{h}:{p}"));
            let info = s.info("replication")?;
            Ok(listed_replicas(&info)
                .into_iter()
                .map(|(host, port)| ReplicaClock {
                    master: master.clone(),
                    replica: format!("{host}:{port}"),
                    readings: s.read_pair(&host, port),
                })
                .collect())
        })
    }

    /// A clock reading of the server the connection points at.
    fn master_reading(&mut self) -> Result<ClockReading> {
        let (v, sent, received) = self.call_raw("TIME", Self::clock_reading)?;
        self.reading(v, sent, received)
    }

    fn reading(&self, v: Value, sent: Instant, received: Instant) -> Result<ClockReading> {
        let time = self.parse::<ServerTime>("TIME", v)?.0;
        Ok(ClockReading {
            time,
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
        let mut pairs = Vec::new();
        for _ in 0..3 {
            let m = self.master_reading().map_err(|e| e.to_string())?;
            let call = Call::start(self.timeout, &[]);
            let (v, sent, received) = Self::clock_reading(&mut replica)
                .map_err(|e| describe(e, &self.target).to_string())?;
            drop(call);
            let r = self.reading(v, sent, received).map_err(|e| e.to_string())?;
            pairs.push((m, r));
        }
        let best = pairs.into_iter().min_by_key(|(m, r)| m.rtt() + r.rtt());
        best.ok_or_else(|| "no reading".to_owned())
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
    let base = master.sent.min(replica.sent);
    let mid = |r: &ClockReading| (r.sent - base + r.rtt() / 2).as_secs_f64();
    let between = mid(replica) - mid(master);
    let offset = replica.time.as_secs_f64() - master.time.as_secs_f64() - between;
    let error = (master.rtt() + replica.rtt()).as_secs_f64() / 2.0;
    (offset, error)
}

/// The `replica-clocks` line: each reachable replica's offset from its
/// master, a warning above [`MAX_OFFSET`].
fn replica_clocks(replicas: &[ReplicaClock]) -> Check {
    if replicas.is_empty() {
        return Check::new("replica-clocks", Verdict::Ok, "no replicas to compare", "");
    }
    let mut verdict = Verdict::Ok;
    let mut parts = Vec::new();
    for r in replicas {
        let of = r
            .master
            .as_ref()
            .map_or(String::new(), |m| format!(" (of {m})"));
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
    Check::new(
        "replica-clocks",
        verdict,
        parts.join("; "),
        "after a failover the promoted replica's clock is the floor of the next fencing token: a clock behind its master's can hand out a token below one already issued; run NTP on every Redis host",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let clock = |master: Option<&str>, replica: &str, time_ms| ReplicaClock {
            master: master.map(Into::into),
            replica: replica.into(),
            readings: Ok((reading(base, 0, 2, 10_000), reading(base, 2, 2, time_ms))),
        };
        let c = replica_clocks(&[clock(None, "r1:6379", 10_002)]);
        assert_eq!(c.verdict, Verdict::Ok);
        assert!(
            c.detail
                .contains("replica r1:6379 is +0.000s from its master (±0.002s)"),
            "{}",
            c.detail
        );
        let c = replica_clocks(&[
            clock(Some("m:7000"), "r1:7001", 10_002),
            clock(Some("m:7002"), "r2:7003", 8_000),
            ReplicaClock {
                master: Some("m:7004".into()),
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
