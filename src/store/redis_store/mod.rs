//! The Redis backend: everything that talks to Redis, answering in the
//! store's own types (lock snapshots, [`Acquire`], [`Release`],
//! [`Subscription`], [`StoreError`]).
//!
//! Every lock operation is one Lua script, run atomically on the node that
//! owns the lock's hash slot and called by SHA (EVALSHA; `scripts.rs`
//! loads the script and retries once on NOSCRIPT, e.g. after a restart or
//! `SCRIPT FLUSH`). In the steady state each operation is one round trip.
//!
//! Connections always carry read and write timeouts: redis-rs only bounds
//! the connect and handshake, then clears the socket timeouts, and a renewal
//! that hangs on a stalled server must never hold up the supervisor. After
//! any error the connection is dropped and the next call reconnects, because
//! after a timeout the outcome of the request (and of anything still in
//! flight on that socket) is unknown.
//!
//! Its files by job: docs/design.md, "Architecture". This one holds the
//! `Store` itself and how it calls.

mod connection;
mod doctor;
mod error;
mod lock;
mod pubsub;
mod replies;
mod scripts;
mod semaphore;
mod server;

use std::time::Duration;

use redis::{Connection, FromRedisValue, Value};

use crate::config::Timings;

use super::{call::Call, secs};
use connection::{key_slot, SlotRange};
use error::{describe, timed_out};
use replies::{foreign_key, int};
use scripts::{Invocation, Script};

pub use connection::Target;
pub use pubsub::Subscription;

pub(super) use super::{
    Acquire, DoneMark, Failure, ForeignKey, Found, Handoff, History, HistoryRecord, LockInfo,
    LockKeys, Mode, Release, Result, RunRecord, SlotsInfo, StoreError, Watched,
};

impl RunRecord<'_> {
    fn is_empty(&self) -> bool {
        self.last.is_none() && self.history.is_none()
    }

    /// ARGV of the scripts that write it (`RELEASE` from its 4th, with
    /// `caller` in between; `LAST_RUN`): last-run keep ms, history keep,
    /// duration ms, history record, then the last-run fields.
    fn args(&self, inv: &mut scripts::Invocation, caller: Option<&str>) {
        match self.last {
            Some((_, keep)) => inv.arg(keep.as_millis().max(1) as u64),
            None => inv.arg(""),
        };
        if let Some(caller) = caller {
            inv.arg(caller);
        }
        match self.history {
            Some((r, keep)) => inv.arg(keep).arg(r.duration_ms).arg(r.tail()),
            None => inv.arg("").arg("").arg(""),
        };
        if let Some((r, _)) = self.last {
            inv.arg("host").arg(&r.host).arg("owner").arg(&r.owner);
            inv.arg("started_ms").arg(r.started_ms);
            inv.arg("duration_ms").arg(r.duration_ms);
            inv.arg("exit").arg(r.exit).arg("token").arg(r.token);
        }
    }
}

/// A lazily (re)connected Redis connection with a timeout on every call.
pub struct Store {
    pub(super) target: Target,
    conn: Option<Connection>,
    pub(super) timeout: Duration,
    /// `--min-replicas`: acquisitions and renewals count only once this
    /// many replicas have them (WAIT, in the same round trip).
    min_replicas: u32,
    /// Redis Cluster: the slot map, learnt on first use and after errors.
    slot_map: Option<Vec<SlotRange>>,
    /// Redis Cluster: the node the connection is (to be) open to.
    node: Option<(String, u16)>,
    /// Hashes of the scripts loaded through the current connection with
    /// `--min-replicas` (see `invoke_acked`); cleared on every reconnect.
    loaded: Vec<&'static str>,
    /// Signals that end a call at once (see `store/call.rs`): those that
    /// end an acquisition, while there is one; else none.
    pub(super) interrupt_on: &'static [i32],
}

impl Store {
    pub fn new(target: Target, timeout: Duration) -> Store {
        Store {
            target,
            conn: None,
            timeout,
            min_replicas: 0,
            slot_map: None,
            node: None,
            loaded: Vec::new(),
            interrupt_on: &[],
        }
    }

    /// Redis Cluster: points the connection at the master that owns the
    /// slot of `keys` (all of a lock's keys share one hash tag, so one
    /// slot). Elsewhere a no-op.
    fn route(&mut self, keys: &LockKeys) -> Result<()> {
        let Some(cluster) = &self.target.cluster else {
            return Ok(());
        };
        if self.slot_map.is_none() {
            let call = Call::start(self.timeout, self.interrupt_on);
            let map = cluster.slot_map(call.left());
            self.slot_map = Some(map.map_err(|e| describe(e, &self.target))?);
        }
        let slot = key_slot(&keys.lock);
        let node = self
            .slot_map
            .as_ref()
            .and_then(|m| m.iter().find(|r| r.0 <= slot && slot <= r.1))
            .map(|r| (r.2.clone(), r.3));
        let Some(node) = node else {
            self.slot_map = None;
            let detail = format!("no node serves slot {slot}");
            let at = Failure::new(None, &self.target.display, detail);
            return Err(StoreError::Unreachable(at));
        };
        if self.node.as_ref() != Some(&node) {
            self.conn = None;
            self.node = Some(node);
        }
        Ok(())
    }

    /// The busy reply of every acquire script carries the holder's
    /// details already: nothing to do.
    pub fn set_watched(&mut self, _on: bool) {}

    pub fn set_min_replicas(&mut self, n: u32) {
        self.min_replicas = n;
    }

    /// The connection, opened if need be, its socket timeouts set to what
    /// is left of `call`.
    fn conn(&mut self, call: &Call) -> Result<&mut Connection> {
        if self.conn.is_none() {
            let conn = self.target.connect(call.left(), self.node.as_ref());
            self.conn = Some(conn.map_err(|e| describe(e, &self.target))?);
            self.loaded.clear();
        }
        let target = &self.target;
        let conn = self.conn.as_mut().expect("connected above");
        // redis-rs clears the socket timeouts after connecting: set them on
        // every call, since the timeout may have changed since.
        conn.set_read_timeout(Some(call.left()))
            .and_then(|()| conn.set_write_timeout(Some(call.left())))
            .map_err(|e| describe(e, target))?;
        Ok(conn)
    }

    /// Runs one script invocation and reads its reply as `T`; on any error
    /// drops the connection so the next call starts clean.
    fn call<T: FromRedisValue>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<Value>,
    ) -> Result<T> {
        let v = self.call_raw(what, f)?;
        self.parse(what, v)
    }

    /// Reads a reply as `T`: a script's "foreign key" reply becomes
    /// [`StoreError::WrongType`], a reply of another shape a protocol error.
    fn parse<T: FromRedisValue>(&self, what: &str, v: Value) -> Result<T> {
        if let Some(fk) = foreign_key(&v) {
            return Err(fk.into());
        }
        T::from_redis_value(v)
            .map_err(|e| StoreError::protocol(&self.target.display, e.to_string()).during(what))
    }

    /// `call` for a plain command or a pipeline, whose reply is taken as it
    /// is. An error while connecting is told as it is; an error of the
    /// request itself names the request (`renewal failed: ...`).
    /// Connects if need be and runs `f`, all of it within the timeout (not
    /// per read: see `store/call.rs`) and, during an acquisition, ended at
    /// once by a signal in `interrupt_on`. On any error the connection is
    /// dropped.
    fn call_raw<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let call = Call::start(self.timeout, self.interrupt_on);
        let out = match self.conn(&call) {
            Ok(conn) => f(conn).map_err(|e| describe(e, &self.target).during(what)),
            Err(e) => Err(e),
        };
        out.map_err(|e| {
            let ran_out = call.ran_out(&e);
            // Off the watchdog's list before the socket is closed, so the
            // watchdog never cuts a number another thread's socket reuses.
            drop(call);
            self.conn = None;
            self.slot_map = None;
            if ran_out {
                let words = format!("no complete answer within {}", secs(self.timeout, true));
                let detail = timed_out(&words, &self.target);
                StoreError::Timeout(Failure::new(None, &self.target.display, detail)).during(what)
            } else {
                e
            }
        })
    }

    /// `--min-replicas` and the WAIT timeout: most of the call's timeout,
    /// so WAIT answers before the socket gives up, and never longer than
    /// the lease of `ttl_ms` just set, less the safety margin
    /// (`Timings::margin_for`, in whole milliseconds): an acknowledgement that comes once the lease may have expired
    /// must not count as an acquisition or a renewal.
    fn wait_args(&self, ttl_ms: u64) -> (u32, u64) {
        let call = self.timeout.as_millis() as u64 * 8 / 10;
        let margin = Timings::margin_for(Duration::from_millis(ttl_ms)).as_millis() as u64;
        let lease = ttl_ms.saturating_sub(margin);
        (self.min_replicas, call.min(lease).max(1))
    }

    /// Runs a script with `invoke_acked` (WAIT behind it with
    /// `--min-replicas`) and reads its reply as `T`, with how many replicas
    /// acknowledged it (0 without `--min-replicas`).
    fn call_acked<T: FromRedisValue>(
        &mut self,
        what: &str,
        script: &'static Script,
        ttl_ms: u64,
        build: impl FnOnce() -> Invocation,
    ) -> Result<(T, i64)> {
        let (replicas, wait_ms) = self.wait_args(ttl_ms);
        // With `--min-replicas`, load the script in the same round trip on
        // its first use on a connection (a new connection may well reach a
        // server that has never seen it: restarted, or promoted by a
        // failover).
        let loaded = self.conn.is_some() && self.loaded.contains(&script.get_hash());
        let load = replicas > 0 && !loaded;
        let v = self.call_raw(what, |c| {
            let inv = build();
            invoke_acked(script, &inv, c, replicas, wait_ms, load)
        })?;
        if load {
            self.loaded.push(script.get_hash());
        }
        let (v, acks) = split_acks(v, replicas)
            .map_err(|d| StoreError::protocol(&self.target.display, d).during(what))?;
        Ok((self.parse(what, v)?, acks))
    }
}

impl StoreError {
    /// Whether this failure says nothing about the lock, only that no
    /// server answered (in time): a waiter reconnects and tries again.
    /// Also the replies a server gives while it cannot serve yet: loading
    /// its data after a restart, a replica or a master without its
    /// replicas during a failover.
    pub fn is_connectivity(&self) -> bool {
        match self {
            StoreError::Timeout(_) | StoreError::Unreachable(_) => true,
            StoreError::Server(f) => ["LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN"]
                .iter()
                .any(|code| f.detail.contains(code)),
            _ => false,
        }
    }
}

/// Runs a script; with `replicas` > 0, pipelines `WAIT replicas wait_ms`
/// behind it (one round trip) and returns `[result, acks]`. Pipelines get
/// no NOSCRIPT recovery, and a NOSCRIPT reply would cost a
/// whole WAIT before the retry (WAIT waits for the replicas to catch up
/// with the server even when our script did not run), so with `load` the
/// script is loaded first in the same round trip (SCRIPT LOAD is
/// idempotent). A NOSCRIPT all the same (the cache flushed under an open
/// connection) is retried once that way.
fn invoke_acked(
    script: &Script,
    inv: &Invocation,
    c: &mut Connection,
    replicas: u32,
    wait_ms: u64,
    load: bool,
) -> redis::RedisResult<Value> {
    if replicas == 0 {
        return inv.invoke(c);
    }
    let send = |c: &mut Connection, load: bool| -> redis::RedisResult<Vec<Value>> {
        let mut p = redis::pipe();
        if load {
            p.add_command(script.load_cmd()).ignore();
        }
        p.add_command(inv.eval_cmd()).cmd("WAIT");
        p.arg(replicas).arg(wait_ms).query(c)
    };
    let noscript = redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
    let out = match send(c, load) {
        Err(e) if e.kind() == noscript => send(c, true)?,
        other => other?,
    };
    Ok(Value::Array(out))
}

/// Undoes `invoke_acked`: (script result, replicas that acknowledged), or
/// what is wrong with the reply.
fn split_acks(v: Value, replicas: u32) -> std::result::Result<(Value, i64), String> {
    if replicas == 0 {
        return Ok((v, 0));
    }
    match v {
        Value::Array(mut items) if items.len() == 2 => {
            let acks = int(&items[1]).map_err(|e| e.to_string())?;
            Ok((items.swap_remove(0), acks))
        }
        other => Err(format!(
            "unexpected reply to a script and WAIT: {}",
            replies::shape(&other)
        )),
    }
}
