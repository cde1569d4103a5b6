//! The only module that talks to Redis.
//!
//! Every lock operation is one Lua script, run atomically on the node that
//! owns the lock's hash slot and called by SHA (EVALSHA; redis-rs loads the
//! script and retries once on NOSCRIPT, e.g. after a restart or
//! `SCRIPT FLUSH`). In the steady state each operation is one round trip.
//!
//! Connections always carry read and write timeouts: redis-rs only bounds
//! the connect and handshake, then clears the socket timeouts, and a renewal
//! that hangs on a stalled server must never hold up the supervisor. After
//! any error the connection is dropped and the next call reconnects, because
//! after a timeout the outcome of the request (and of anything still in
//! flight on that socket) is unknown.

mod scripts;
mod target;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use redis::{Connection, Script, Value};

use crate::config::UsageError;
use scripts::*;
use target::{describe, key_slot, SlotRange};
pub use target::{without_password, Security, Target};

/// The Redis keys of one lock. All share the `{NAME}` hash tag, so every
/// script touches one Cluster slot.
#[derive(Debug, Clone)]
pub struct LockKeys {
    /// The lock name as the user typed it.
    pub name: String,
    /// `P:{N}`: the holder's owner id, with the lease as its expiry.
    pub lock: String,
    /// `P:{N}:fence`: the last fencing token issued; never expires.
    pub fence: String,
    /// `P:{N}:meta`: holder metadata (hash), expiring with the lease.
    pub meta: String,
    /// `P:{N}:queue`: waiters in arrival order (zset, score = server µs).
    pub queue: String,
    /// `P:{N}:deadlines`: each waiter's keep-alive deadline (zset, server ms).
    pub deadlines: String,
    /// `P:{N}:turns`: while the lock is being handed over, each fair
    /// waiter's claim window end (zset, server ms); a stopped waiter lets
    /// its window pass and loses its turn.
    pub turns: String,
    /// `P:{N}:wake:`: prefix of each fair waiter's own wake-up channel.
    pub wake_prefix: String,
    /// `P:{N}:released`: channel told of every release (`--wait-order any`).
    pub released: String,
    /// `P:{N}:last`: the last run's record (hash), kept for days.
    pub last: String,
    /// `P:{N}:slots`: semaphore holders (zset, owner → expiry, server ms).
    pub slots: String,
    /// `P:{N}:limit`: the semaphore's N, which every user must agree on.
    pub limit_key: String,
    /// `P:{N}:tokens`: semaphore holders' fencing tokens (hash).
    pub tokens: String,
    /// `P:{N}:done`: the done mark of `run --once-per` (hash), expiring at
    /// the acquisition of the run that succeeded + its window.
    pub done: String,
    /// `run --once-per D`: acquisitions look at the done mark and do not
    /// take a lease that a success less than D ago makes pointless.
    pub once_per: Option<Duration>,
    /// `--limit N`: Some(N) for a semaphore of N > 1 holders; None for a
    /// plain lock (which is what `--limit 1` means).
    pub limit: Option<u32>,
}

impl LockKeys {
    /// Builds the keys for `name` under `prefix` (both already validated).
    pub fn new(prefix: &str, name: &str) -> LockKeys {
        let lock = format!("{prefix}:{{{name}}}");
        LockKeys {
            name: name.to_owned(),
            fence: format!("{lock}:fence"),
            meta: format!("{lock}:meta"),
            queue: format!("{lock}:queue"),
            deadlines: format!("{lock}:deadlines"),
            turns: format!("{lock}:turns"),
            wake_prefix: format!("{lock}:wake:"),
            released: format!("{lock}:released"),
            last: format!("{lock}:last"),
            slots: format!("{lock}:slots"),
            limit_key: format!("{lock}:limit"),
            tokens: format!("{lock}:tokens"),
            done: format!("{lock}:done"),
            once_per: None,
            limit: None,
            lock,
        }
    }

    /// The same lock for `run --once-per window`.
    pub fn with_once_per(mut self, window: Option<Duration>) -> LockKeys {
        self.once_per = window;
        self
    }

    /// The same lock as a semaphore of `n` holders (`n` ≤ 1: a plain lock).
    pub fn with_limit(mut self, n: u32) -> LockKeys {
        self.limit = (n > 1).then_some(n);
        self
    }
}

/// How an acquisition treats other waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One attempt, not queued; still yields to a live waiter that is next.
    Once,
    /// Queue up and be served in arrival order.
    Fair,
    /// Take the lock whenever it is free, ignoring the queue.
    Any,
}

impl Mode {
    fn as_arg(self) -> &'static str {
        match self {
            Mode::Once => "once",
            Mode::Fair => "fair",
            Mode::Any => "any",
        }
    }
}

/// What an acquisition attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// We hold the lease; the fencing token of this acquisition.
    Acquired { token: u64 },
    /// Not ours: held by `holder` for about `ttl` more (None if free or
    /// without expiry), or free but `ahead` is a live waiter served first.
    Busy {
        holder: Option<String>,
        ttl: Option<Duration>,
        ahead: Option<String>,
    },
    /// Taken, but fewer than `--min-replicas` replicas acknowledged it in
    /// time, so it was released again: a failover could have lost it.
    Unacknowledged,
    /// `--once-per`: the lock was ours to take, but a run succeeded less
    /// than the window ago; no lease was taken and the next waiter was
    /// woken.
    Done(DoneMark),
}

/// The done mark of `run --once-per`: which run succeeded, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneMark {
    /// When that run acquired the lease (Unix ms, the server's clock).
    pub at_ms: u64,
    /// Host that ran it.
    pub host: String,
    /// Its fencing token.
    pub token: u64,
    /// Its owner id, when known.
    pub owner: Option<String>,
    /// How long ago it acquired, by the server's clock (from `acquire`).
    pub age: Option<Duration>,
    /// How long until the mark expires (from `inspect`).
    pub expires_in: Option<Duration>,
}

impl DoneMark {
    /// A mark from its hash fields (as HGETALL returns them) and PTTL;
    /// None when there is no mark.
    fn from_fields(fields: &[(String, String)], pttl: i64) -> Option<DoneMark> {
        let get = |f: &str| fields.iter().find(|(k, _)| k == f).map(|(_, v)| v.as_str());
        Some(DoneMark {
            at_ms: get("at_ms")?.parse().ok()?,
            host: get("host").unwrap_or("").to_owned(),
            token: get("fencing_token")
                .and_then(|t| t.parse().ok())
                .unwrap_or(0),
            owner: get("owner").map(str::to_owned),
            age: None,
            expires_in: pttl_to_ttl(pttl),
        })
    }
}

/// What a compare-and-delete found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Our lease was deleted.
    Released,
    /// Our lease is kept for this much longer: its minimum hold.
    Kept(Duration),
    /// Not ours: held by this other owner, or by nobody (None).
    NotOwner(Option<String>),
}

/// A snapshot of one lock, as `inspect` and `list` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// Current holder's owner id; None when free.
    pub holder: Option<String>,
    /// Remaining lease; None when free (or, oddly, without expiry).
    pub ttl: Option<Duration>,
    /// Last fencing token issued; None if the name was never acquired.
    pub token: Option<u64>,
    /// Holder metadata (acquired_ms, host, pid, command), field by field.
    pub meta: Vec<(String, String)>,
    /// The last `run`'s record (host, owner, started_ms, duration_ms, exit,
    /// token), field by field; empty if none is kept.
    pub last_run: Vec<(String, String)>,
    /// Some(N) when the name is in use as a semaphore of N (`--limit N`)
    /// with a live slot: then it is not a plain lock to inspect or release.
    pub semaphore: Option<u32>,
    /// The done mark of `run --once-per`, if one is kept.
    pub done: Option<DoneMark>,
}

/// A lock key found by `list`: a plain lock, or a semaphore's slots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// The lock name.
    pub name: String,
    /// Found as `P:{N}:slots` (a semaphore) rather than `P:{N}`.
    pub semaphore: bool,
}

/// A snapshot of a semaphore (`--limit N`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotsInfo {
    /// The N its users agreed on; None when nobody holds a slot.
    pub limit: Option<u32>,
    /// Live holders, soonest expiry first: owner, time left, fencing token.
    pub holders: Vec<(String, Duration, u64)>,
    /// Last fencing token issued for the name.
    pub token: Option<u64>,
    /// The last `run`'s record, as in [`LockInfo::last_run`].
    pub last_run: Vec<(String, String)>,
}

/// What `run` records about itself when it ends.
#[derive(Debug, Clone)]
pub struct LastRun {
    /// Host that ran CMD.
    pub host: String,
    /// Owner id of that run.
    pub owner: String,
    /// When the lock was acquired (Unix ms, the runner's wall clock).
    pub started_ms: u64,
    /// How long CMD held the lock.
    pub duration_ms: u64,
    /// distlock's exit status.
    pub exit: u8,
    /// The fencing token of that run.
    pub token: u64,
}

impl LastRun {
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("host", self.host.clone()),
            ("owner", self.owner.clone()),
            ("started_ms", self.started_ms.to_string()),
            ("duration_ms", self.duration_ms.to_string()),
            ("exit", self.exit.to_string()),
            ("token", self.token.to_string()),
        ]
    }
}

/// A key of a lock that holds a value of another Redis type than distlock
/// gives it (something else wrote it). Every script checks the types of
/// the keys it touches before it writes anything, and answers
/// `{-2, key, type}` instead (see `FOREIGN_KEY` in `scripts.rs`), so such
/// a key is never changed and the user learns which key it is, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    /// The full Redis key, e.g. `distlock:{billing}:fence`.
    pub key: String,
    /// Its Redis type, as TYPE names it (`hash`, `list`, ...).
    pub kind: String,
}

impl std::fmt::Display for ForeignKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the key {} is a Redis {} written by something else: it does not hold a distlock lease (distlock left it alone; delete it, or use another name or --prefix)",
            self.key, self.kind
        )
    }
}

impl std::error::Error for ForeignKey {}

/// The `{-2, key, type}` reply of a script that found a foreign key.
fn foreign_key(v: &Value) -> Option<ForeignKey> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(-2), key, kind] => Some(ForeignKey {
                key: string(key).ok()??,
                kind: string(kind).ok()??,
            }),
            _ => None,
        },
        _ => None,
    }
}

/// A lazily (re)connected Redis connection with a timeout on every call.
pub struct Store {
    target: Target,
    conn: Option<Connection>,
    timeout: Duration,
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
}

impl Store {
    /// A store for `target` whose connects and calls each give up after
    /// `timeout`. Does no I/O until the first call.
    pub fn new(target: Target, timeout: Duration) -> Store {
        Store {
            target,
            conn: None,
            timeout,
            min_replicas: 0,
            slot_map: None,
            node: None,
            loaded: Vec::new(),
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
            self.slot_map = Some(
                cluster
                    .slot_map(self.timeout)
                    .map_err(|e| describe(e, &self.target))?,
            );
        }
        let slot = key_slot(&keys.lock);
        let node = self
            .slot_map
            .as_ref()
            .and_then(|m| m.iter().find(|r| r.0 <= slot && slot <= r.1))
            .map(|r| (r.2.clone(), r.3));
        let Some(node) = node else {
            self.slot_map = None;
            bail!(
                "redis cluster at {}: no node serves slot {slot}",
                self.target.display
            );
        };
        if self.node.as_ref() != Some(&node) {
            self.conn = None;
            self.node = Some(node);
        }
        Ok(())
    }

    /// Requires acknowledgement by `n` replicas (0: none) for acquisitions
    /// and renewals.
    pub fn set_min_replicas(&mut self, n: u32) {
        self.min_replicas = n;
    }

    /// Changes the per-call timeout, e.g. to the time left before a
    /// deadline. Applied at the next call.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout.max(Duration::from_millis(1));
    }

    /// The URL for messages, password redacted.
    pub fn display(&self) -> &str {
        &self.target.display
    }

    fn conn(&mut self) -> Result<&mut Connection> {
        if self.conn.is_none() {
            let conn = self
                .target
                .connect(self.timeout, self.node.as_ref())
                .map_err(|e| describe(e, &self.target))?;
            self.conn = Some(conn);
            self.loaded.clear();
        }
        let conn = self.conn.as_mut().expect("connected above");
        // redis-rs clears the socket timeouts after connecting: set them on
        // every call, since the timeout may have changed since.
        conn.set_read_timeout(Some(self.timeout))?;
        conn.set_write_timeout(Some(self.timeout))?;
        Ok(conn)
    }

    /// Runs one script invocation; on any error drops the connection so the
    /// next call starts clean. A script's "foreign key" reply becomes a
    /// [`ForeignKey`] error.
    fn call(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<Value>,
    ) -> Result<Value> {
        let v = self.call_raw(what, f)?;
        match foreign_key(&v) {
            Some(fk) => Err(fk.into()),
            None => Ok(v),
        }
    }

    /// `call` for a plain command, whose reply is taken as it is.
    fn call_raw(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<Value>,
    ) -> Result<Value> {
        let conn = self.conn()?;
        match f(conn) {
            Ok(v) => Ok(v),
            Err(e) => {
                self.conn = None;
                self.slot_map = None;
                Err(describe(e, &self.target)).with_context(|| format!("{what} failed"))
            }
        }
    }

    /// Takes the lease for `owner`, or reports who holds it.
    pub fn acquire(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        ttl_ms: u64,
        mode: Mode,
        meta: &[(&str, &str)],
    ) -> Result<Acquire> {
        self.route(keys)?;
        if let Some(n) = keys.limit {
            return self.acquire_slot(keys, owner, ttl_ms, n);
        }
        let (replicas, wait_ms) = self.wait_args(ttl_ms);
        let load = self.needs_load(&ACQUIRE);
        let once_per_ms = keys.once_per.map(|d| d.as_millis().max(1).to_string());
        let v = self.call("acquire", |c| {
            let mut inv = ACQUIRE.key(&keys.lock);
            inv.key(&keys.fence)
                .key(&keys.meta)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .key(&keys.slots)
                .key(&keys.limit_key)
                .key(&keys.turns);
            if once_per_ms.is_some() {
                inv.key(&keys.done);
            }
            inv.arg(owner)
                .arg(ttl_ms)
                .arg(mode.as_arg())
                .arg(&keys.wake_prefix);
            for (k, v) in meta {
                inv.arg(*k).arg(*v);
            }
            if let Some(ms) = &once_per_ms {
                // Kept in the lease's metadata: the release that writes the
                // mark reads the window from there.
                inv.arg("once_per_ms").arg(ms);
            }
            invoke_acked(&ACQUIRE, &inv, c, replicas, wait_ms, load)
        })?;
        self.mark_loaded(&ACQUIRE);
        let (v, acks) = split_acks(v, replicas)?;
        let items = array(v)?;
        match items.as_slice() {
            [Value::Int(1), token] if acks < i64::from(replicas) => {
                let _ = token;
                self.release(keys, owner)?;
                Ok(Acquire::Unacknowledged)
            }
            [Value::Int(1), token] => Ok(Acquire::Acquired {
                token: int(token)?.max(0) as u64,
            }),
            [Value::Int(0), holder, pttl, rest @ ..] => Ok(Acquire::Busy {
                holder: string(holder)?,
                ttl: pttl_to_ttl(int(pttl)?),
                ahead: match rest.first() {
                    Some(a) => string(a)?,
                    None => None,
                },
            }),
            [Value::Int(-1), n] => Err(limit_mismatch(keys, int(n)?)),
            [Value::Int(2), at, age, host, token] => Ok(Acquire::Done(DoneMark {
                at_ms: int(at)?.max(0) as u64,
                host: string(host)?.unwrap_or_default(),
                token: int(token).unwrap_or(0).max(0) as u64,
                owner: None,
                age: Some(Duration::from_millis(int(age)?.max(0) as u64)),
                expires_in: None,
            })),
            other => bail!("unexpected reply to acquire: {other:?}"),
        }
    }

    fn acquire_slot(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        ttl_ms: u64,
        n: u32,
    ) -> Result<Acquire> {
        let (replicas, wait_ms) = self.wait_args(ttl_ms);
        let load = self.needs_load(&ACQUIRE_SLOT);
        let v = self.call("acquire", |c| {
            let mut inv = ACQUIRE_SLOT.key(&keys.slots);
            inv.key(&keys.limit_key)
                .key(&keys.tokens)
                .key(&keys.fence)
                .key(&keys.lock)
                .arg(owner)
                .arg(ttl_ms)
                .arg(n);
            invoke_acked(&ACQUIRE_SLOT, &inv, c, replicas, wait_ms, load)
        })?;
        self.mark_loaded(&ACQUIRE_SLOT);
        let (v, acks) = split_acks(v, replicas)?;
        let items = array(v)?;
        match items.as_slice() {
            [Value::Int(1), _] if acks < i64::from(replicas) => {
                self.release(keys, owner)?;
                Ok(Acquire::Unacknowledged)
            }
            [Value::Int(1), token] => Ok(Acquire::Acquired {
                token: int(token)?.max(0) as u64,
            }),
            [Value::Int(0), holder, pttl] => Ok(Acquire::Busy {
                holder: string(holder)?,
                ttl: pttl_to_ttl(int(pttl)?),
                ahead: None,
            }),
            [Value::Int(-1), n] => Err(limit_mismatch(keys, int(n)?)),
            other => bail!("unexpected reply to acquire: {other:?}"),
        }
    }

    /// Runs one plain command (for `doctor`), with the usual timeout.
    pub fn command(&mut self, what: &str, cmd: &redis::Cmd) -> Result<Value> {
        self.call_raw(what, |c| cmd.query(c))
    }

    /// Leaves the wait queue (best effort: a waiter that vanishes is
    /// dropped by the next release anyway).
    pub fn leave(&mut self, keys: &LockKeys, owner: &str) -> Result<()> {
        self.route(keys)?;
        self.call("leaving the queue", |c| {
            LEAVE
                .key(&keys.lock)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .key(&keys.turns)
                .arg(owner)
                .arg(&keys.wake_prefix)
                .invoke(c)
        })?;
        Ok(())
    }

    /// A second connection subscribed to `channel`, confirmed by the server
    /// before this returns, so no message published after it is missed.
    pub fn subscribe(&mut self, channel: &str) -> Result<Connection> {
        let mut conn = self
            .target
            .connect(self.timeout, self.node.as_ref())
            .map_err(|e| describe(e, &self.target))?;
        let target = &self.target;
        conn.set_read_timeout(Some(self.timeout))?;
        conn.set_write_timeout(Some(self.timeout))?;
        // SUBSCRIBE by hand rather than with redis-rs's PubSub::subscribe,
        // which reads the reply and throws it away: a refusal (an ACL user
        // without +subscribe or without the channel) would pass unnoticed,
        // and the waiter would sleep through every wake-up meant for it.
        let reply = conn
            .send_packed_command(&redis::cmd("SUBSCRIBE").arg(channel).get_packed_command())
            .and_then(|()| conn.recv_response())
            .and_then(Value::extract_error)
            .map_err(|e| describe(e, target).context("subscribe failed"))?;
        let confirmed = match &reply {
            Value::Array(items) => {
                matches!(items.first().map(string), Some(Ok(Some(k))) if k == "subscribe")
            }
            Value::Push { kind, .. } => *kind == redis::PushKind::Subscribe,
            _ => false,
        };
        if !confirmed {
            bail!("subscribe failed: unexpected reply from redis: {reply:?}");
        }
        Ok(conn)
    }

    /// Extends the lease if `owner` still holds it. Ok(false) means the lease
    /// is gone (expired, deleted, or taken by someone else).
    pub fn renew(&mut self, keys: &LockKeys, owner: &str, ttl_ms: u64) -> Result<bool> {
        self.route(keys)?;
        let (replicas, wait_ms) = self.wait_args(ttl_ms);
        let script: &'static Script = if keys.limit.is_some() {
            &RENEW_SLOT
        } else {
            &RENEW
        };
        let load = self.needs_load(script);
        let v = self.call("renewal", |c| {
            let mut inv = if keys.limit.is_some() {
                let mut inv = RENEW_SLOT.key(&keys.slots);
                inv.key(&keys.limit_key)
                    .key(&keys.tokens)
                    .key(&keys.fence)
                    .key(&keys.lock);
                inv
            } else {
                let mut inv = RENEW.key(&keys.lock);
                inv.key(&keys.meta).key(&keys.fence);
                inv
            };
            inv.arg(owner).arg(ttl_ms);
            invoke_acked(script, &inv, c, replicas, wait_ms, load)
        })?;
        self.mark_loaded(script);
        let (v, acks) = split_acks(v, replicas)?;
        let renewed = int(&v)? == 1;
        if renewed && acks < i64::from(replicas) {
            bail!(
                "renewal acknowledged by {acks} of --min-replicas {replicas} replicas in time: not confirmed"
            );
        }
        Ok(renewed)
    }

    /// Whether `invoke_acked` should load `script` in the same round trip:
    /// with `--min-replicas`, on the first use of the script on a
    /// connection (a new connection may well reach a server that has never
    /// seen it: restarted, or promoted by a failover).
    fn needs_load(&self, script: &'static Script) -> bool {
        self.min_replicas > 0 && (self.conn.is_none() || !self.loaded.contains(&script.get_hash()))
    }

    /// Records that `script` is loaded on the current connection.
    fn mark_loaded(&mut self, script: &'static Script) {
        if self.min_replicas > 0 && !self.loaded.contains(&script.get_hash()) {
            self.loaded.push(script.get_hash());
        }
    }

    /// `--min-replicas` and the WAIT timeout: most of the call's timeout,
    /// so WAIT answers before the socket gives up, and never longer than
    /// the lease of `ttl_ms` just set, less the safety margin (ttl/100 +
    /// 5ms): an acknowledgement that comes once the lease may have expired
    /// must not count as an acquisition or a renewal.
    fn wait_args(&self, ttl_ms: u64) -> (u32, u64) {
        let call = self.timeout.as_millis() as u64 * 8 / 10;
        let lease = ttl_ms.saturating_sub(ttl_ms / 100 + 5);
        (self.min_replicas, call.min(lease).max(1))
    }

    /// Deletes the lease if `owner` holds it (compare-and-delete).
    pub fn release(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        self.release_recording(keys, owner, None, false)
    }

    /// `release`, writing `run`'s last-run record (kept for `keep`) in the
    /// same round trip, and with `mark_done` (`run --once-per` whose CMD
    /// exited 0) the done mark, if the lease is still ours.
    pub fn release_recording(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        last: Option<(&LastRun, Duration)>,
        mark_done: bool,
    ) -> Result<Release> {
        self.route(keys)?;
        if keys.limit.is_some() {
            let v = self.call("release", |c| {
                RELEASE_SLOT
                    .key(&keys.slots)
                    .key(&keys.limit_key)
                    .key(&keys.tokens)
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .arg(owner)
                    .arg(&keys.released)
                    .arg(keys.limit.unwrap_or(1))
                    .invoke(c)
            })?;
            let items = array(v)?;
            if let [Value::Int(-1), n] = items.as_slice() {
                return Err(limit_mismatch(keys, int(n)?));
            }
            if let Some((record, keep)) = last {
                self.record_last_run(keys, record, keep)?;
            }
            return match items.as_slice() {
                [Value::Int(1)] => Ok(Release::Released),
                _ => Ok(Release::NotOwner(None)),
            };
        }
        let v = self.call("release", |c| {
            let mut inv = RELEASE.key(&keys.lock);
            inv.key(&keys.meta)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .key(&keys.last)
                .key(&keys.slots)
                .key(&keys.limit_key)
                .key(&keys.turns)
                .key(&keys.fence);
            if mark_done && keys.once_per.is_some() {
                inv.key(&keys.done);
            }
            inv.arg(owner).arg(&keys.wake_prefix).arg(&keys.released);
            match last {
                Some((record, keep)) => {
                    inv.arg(keep.as_millis().max(1) as u64);
                    for (k, v) in record.fields() {
                        inv.arg(k).arg(v);
                    }
                }
                None => {
                    inv.arg("");
                }
            }
            inv.invoke(c)
        })?;
        let items = array(v)?;
        match items.as_slice() {
            [Value::Int(1)] => Ok(Release::Released),
            [Value::Int(2), left] => Ok(Release::Kept(Duration::from_millis(
                int(left)?.max(0) as u64
            ))),
            [Value::Int(0)] => Ok(Release::NotOwner(None)),
            [Value::Int(0), holder] => Ok(Release::NotOwner(string(holder)?)),
            [Value::Int(-1), n] => Err(limit_mismatch(keys, int(n)?)),
            other => bail!("unexpected reply to release: {other:?}"),
        }
    }

    /// Writes the last-run record alone (when there is no release to
    /// carry it).
    pub fn record_last_run(
        &mut self,
        keys: &LockKeys,
        record: &LastRun,
        keep: Duration,
    ) -> Result<()> {
        self.route(keys)?;
        self.call("recording the last run", |c| {
            let mut inv = LAST_RUN.key(&keys.last);
            inv.arg(keep.as_millis().max(1) as u64);
            for (k, v) in record.fields() {
                inv.arg(k).arg(v);
            }
            inv.invoke(c)
        })?;
        Ok(())
    }

    /// `release --forget-done`: deletes the done mark only; returns the
    /// mark that was there.
    pub fn forget_done(&mut self, keys: &LockKeys) -> Result<Option<DoneMark>> {
        self.route(keys)?;
        let v = self.call("forgetting the done mark", |c| {
            FORGET_DONE.key(&keys.done).invoke(c)
        })?;
        Ok(DoneMark::from_fields(&pairs(&v), -2))
    }

    /// Deletes the lease whoever holds it; returns the evicted holder.
    pub fn force_release(&mut self, keys: &LockKeys) -> Result<Option<String>> {
        self.route(keys)?;
        if keys.limit.is_some() {
            let v = self.call("forced release", |c| {
                FORCE_RELEASE_SLOTS
                    .key(&keys.slots)
                    .key(&keys.limit_key)
                    .key(&keys.tokens)
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .arg(&keys.released)
                    .arg(keys.limit.unwrap_or(1))
                    .invoke(c)
            })?;
            let items = array(v)?;
            if let [Value::Int(-1), n] = items.as_slice() {
                return Err(limit_mismatch(keys, int(n)?));
            }
            let owners: Vec<String> = items
                .iter()
                .filter_map(|o| string(o).ok().flatten())
                .collect();
            return Ok((!owners.is_empty()).then(|| owners.join(", ")));
        }
        let v = self.call("forced release", |c| {
            FORCE_RELEASE
                .key(&keys.lock)
                .key(&keys.meta)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .key(&keys.slots)
                .key(&keys.limit_key)
                .key(&keys.turns)
                .key(&keys.fence)
                .arg(&keys.wake_prefix)
                .arg(&keys.released)
                .invoke(c)
        })?;
        if let Value::Array(items) = &v {
            if let [Value::Int(-1), n] = items.as_slice() {
                return Err(limit_mismatch(keys, int(n)?));
            }
        }
        string(&v)
    }

    /// A semaphore's agreed N, its live holders (owner, time left, token)
    /// and the last token issued, atomically.
    pub fn inspect_slots(&mut self, keys: &LockKeys) -> Result<SlotsInfo> {
        self.route(keys)?;
        let v = self.call("inspect", |c| {
            INSPECT_SLOTS
                .key(&keys.slots)
                .key(&keys.limit_key)
                .key(&keys.tokens)
                .key(&keys.fence)
                .key(&keys.last)
                .key(&keys.lock)
                .invoke(c)
        })?;
        let items = array(v)?;
        let [limit, holders, token, last, plain] = items.as_slice() else {
            bail!("unexpected reply to inspect: {items:?}");
        };
        let flat = array(holders.clone())?;
        let mut out = Vec::new();
        for h in flat.chunks(3) {
            if let [o, ms, t] = h {
                out.push((
                    string(o)?.unwrap_or_default(),
                    Duration::from_millis(int(ms)?.max(0) as u64),
                    int(t)?.max(0) as u64,
                ));
            }
        }
        if int(plain)? == 1 {
            return Err(limit_mismatch(keys, 0));
        }
        Ok(SlotsInfo {
            limit: string(limit)?.and_then(|l| l.parse().ok()),
            holders: out,
            token: string(token)?.and_then(|t| t.parse().ok()),
            last_run: pairs(last),
        })
    }

    /// Reads holder, remaining lease, last token and metadata atomically.
    pub fn inspect(&mut self, keys: &LockKeys) -> Result<LockInfo> {
        self.route(keys)?;
        let v = self.call("inspect", |c| {
            INSPECT
                .key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.meta)
                .key(&keys.last)
                .key(&keys.slots)
                .key(&keys.limit_key)
                .key(&keys.done)
                .invoke(c)
        })?;
        let info = parse_info(v)?;
        if let Some(n) = info.semaphore {
            return Err(limit_mismatch(keys, i64::from(n)));
        }
        Ok(info)
    }

    /// `inspect` for many locks in pipelined batches: one round trip per
    /// batch rather than per lock, so `list` stays quick with thousands of
    /// keys. Locks released between the SCAN and now come back free; a lock
    /// with a key of another type comes back as that [`ForeignKey`], so
    /// `list` can skip it and still show the others.
    pub fn inspect_many(
        &mut self,
        keys: &[LockKeys],
    ) -> Result<Vec<std::result::Result<LockInfo, ForeignKey>>> {
        if self.target.cluster.is_some() {
            // Keys live on different nodes: one at a time, each routed.
            return keys
                .iter()
                .map(|k| match self.inspect(k) {
                    Ok(info) => Ok(Ok(info)),
                    Err(e) => match e.downcast::<ForeignKey>() {
                        Ok(fk) => Ok(Err(fk)),
                        Err(e) => Err(e),
                    },
                })
                .collect();
        }
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(500) {
            let replies: Vec<Value> = self.call_pipeline("inspect", |c| {
                // Pipelines get no NOSCRIPT recovery: load first, in the
                // same round trip.
                let mut p = redis::pipe();
                p.load_script(&INSPECT).ignore();
                let invocations: Vec<_> = batch
                    .iter()
                    .map(|k| {
                        let mut inv = INSPECT.key(&k.lock);
                        inv.key(&k.fence)
                            .key(&k.meta)
                            .key(&k.last)
                            .key(&k.slots)
                            .key(&k.limit_key)
                            .key(&k.done);
                        inv
                    })
                    .collect();
                for inv in &invocations {
                    p.invoke_script(inv);
                }
                p.query(c)
            })?;
            for v in replies {
                out.push(match foreign_key(&v) {
                    Some(fk) => Err(fk),
                    None => Ok(parse_info(v)?),
                });
            }
        }
        Ok(out)
    }

    fn call_pipeline(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Connection) -> redis::RedisResult<Vec<Value>>,
    ) -> Result<Vec<Value>> {
        let conn = self.conn()?;
        f(conn).map_err(|e| {
            self.conn = None;
            self.slot_map = None;
            describe(e, &self.target).context(format!("{what} failed"))
        })
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
            let items = array(v)?;
            let [next, keys] = items.as_slice() else {
                bail!("unexpected reply to SCAN");
            };
            cursor = string(next)?.unwrap_or_default().parse().unwrap_or(0);
            for k in array(keys.clone())? {
                if let Some(k) = string(&k)? {
                    let Some(rest) = k.strip_prefix(prefix).and_then(|r| r.strip_prefix(":{"))
                    else {
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
            }
            if cursor == 0 {
                break;
            }
        }
        Ok(names)
    }
}

/// Decodes the INSPECT script's reply.
fn parse_info(v: Value) -> Result<LockInfo> {
    let items = array(v)?;
    let [holder, pttl, token, meta, last, semaphore, done, done_pttl] = items.as_slice() else {
        bail!("unexpected reply to inspect: {items:?}");
    };
    let holder = string(holder)?;
    let token = match string(token)? {
        Some(t) => Some(
            t.parse::<u64>()
                .context("fencing counter is not a number")?,
        ),
        None => None,
    };
    Ok(LockInfo {
        ttl: holder
            .as_ref()
            .and_then(|_| pttl_to_ttl(int(pttl).unwrap_or(-2))),
        holder,
        token,
        meta: pairs(meta),
        last_run: pairs(last),
        semaphore: string(semaphore)?.and_then(|n| n.parse().ok()),
        done: DoneMark::from_fields(&pairs(done), int(done_pttl).unwrap_or(-2)),
    })
}

/// A HGETALL reply (flat array in RESP2, map in RESP3) as pairs.
fn pairs(v: &Value) -> Vec<(String, String)> {
    let items = match v {
        Value::Array(a) => a.clone(),
        Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        _ => Vec::new(),
    };
    items
        .chunks(2)
        .filter_map(|kv| match kv {
            [k, v] => Some((string(k).ok()??, string(v).ok()??)),
            _ => None,
        })
        .collect()
}

/// Runs a script; with `replicas` > 0, pipelines `WAIT replicas wait_ms`
/// behind it (one round trip) and returns `[result, acks]`. Pipelines get
/// no NOSCRIPT recovery from redis-rs, and a NOSCRIPT reply would cost a
/// whole WAIT before the retry (WAIT waits for the replicas to catch up
/// with the server even when our script did not run), so with `load` the
/// script is loaded first in the same round trip (SCRIPT LOAD is
/// idempotent). A NOSCRIPT all the same (the cache flushed under an open
/// connection) is retried once that way.
fn invoke_acked(
    script: &Script,
    inv: &redis::ScriptInvocation<'_>,
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
            p.load_script(script).ignore();
        }
        p.invoke_script(inv)
            .cmd("WAIT")
            .arg(replicas)
            .arg(wait_ms)
            .query(c)
    };
    let out = match send(c, load) {
        Err(e)
            if matches!(
                e.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
            ) =>
        {
            send(c, true)?
        }
        other => other?,
    };
    Ok(Value::Array(out))
}

/// Undoes `invoke_acked`: (script result, replicas that acknowledged).
fn split_acks(v: Value, replicas: u32) -> Result<(Value, i64)> {
    if replicas == 0 {
        return Ok((v, 0));
    }
    match array(v)?.as_slice() {
        [result, _] if foreign_key(result).is_some() => {
            Err(foreign_key(result).expect("checked").into())
        }
        [result, acks] => Ok((result.clone(), int(acks)?)),
        other => bail!("unexpected reply to a script and WAIT: {other:?}"),
    }
}

/// The error for users who disagree on a name's `--limit`.
fn limit_mismatch(keys: &LockKeys, in_use: i64) -> anyhow::Error {
    let ours = keys.limit.map_or(1, i64::from);
    let theirs = if in_use <= 1 {
        "as a plain lock (--limit 1)".to_owned()
    } else {
        format!("as a semaphore with --limit {in_use}")
    };
    UsageError(format!(
        "{} is in use {theirs}, but this call says --limit {ours}: every user of a name must agree on its limit",
        keys.name
    ))
    .into()
}

fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        other => bail!("unexpected reply from redis: {other:?}"),
    }
}

pub(super) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => Ok(std::str::from_utf8(b)?.parse()?),
        other => bail!("expected an integer from redis, got {other:?}"),
    }
}

pub(super) fn string(v: &Value) -> Result<Option<String>> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => Ok(Some(String::from_utf8_lossy(b).into_owned())),
        Value::SimpleString(s) => Ok(Some(s.clone())),
        Value::Int(i) => Ok(Some(i.to_string())),
        other => bail!("expected a string from redis, got {other:?}"),
    }
}

/// PTTL is -2 for a missing key and -1 for one without expiry.
fn pttl_to_ttl(pttl: i64) -> Option<Duration> {
    (pttl >= 0).then(|| Duration::from_millis(pttl as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = LockKeys::new("distlock", "deploy/prod");
        assert_eq!(k.lock, "distlock:{deploy/prod}");
        assert_eq!(k.fence, "distlock:{deploy/prod}:fence");
        assert_eq!(k.meta, "distlock:{deploy/prod}:meta");
        assert_eq!(k.done, "distlock:{deploy/prod}:done");
    }
}
