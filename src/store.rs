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

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use redis::{Connection, IntoConnectionInfo, Script, Value};

use crate::config::UsageError;

/// The source of every script built so far, by SHA1, so that an error
/// raised inside a script (Redis names only the script's SHA and a line)
/// can be told in words: which command on that line was refused.
static SOURCES: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// `Script::new`, remembering the source for `script_commands`.
fn lua(code: &str) -> Script {
    let script = Script::new(code);
    if let Ok(mut sources) = SOURCES.lock() {
        sources.push((script.get_hash().to_owned(), code.to_owned()));
    }
    script
}

/// The Redis commands called on line `line` of the script with this SHA1,
/// upper-cased, e.g. `["PTTL", "PEXPIRE"]`.
fn script_commands(sha: &str, line: usize) -> Vec<String> {
    let sources = match SOURCES.lock() {
        Ok(s) => s,
        Err(_) => return Vec::new(),
    };
    let Some(text) = sources
        .iter()
        .find(|(h, _)| h == sha)
        .and_then(|(_, code)| code.lines().nth(line.checked_sub(1)?))
    else {
        return Vec::new();
    };
    text.split("redis.call('")
        .skip(1)
        .filter_map(|rest| rest.split_once('\'').map(|(c, _)| c.to_uppercase()))
        .collect()
}

/// Lua shared by the scripts that can hand the lock on: drop waiters whose
/// keep-alive deadline (server clock) has passed, then wake the oldest live
/// waiter through its own channel. PUBLISH returns how many subscribers got
/// the message, and a waiter is subscribed for as long as it waits, so 0
/// means that waiter is gone: drop it and try the next. Only one waiter is
/// woken per release: no thundering herd.
///
/// `queue`: zset, owner → arrival (server µs). `deadlines`: zset, owner →
/// keep-alive deadline (server ms). `chan`: the wake channel prefix.
const WAKE_NEXT: &str = r"
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function prune(queue, deadlines, now_ms)
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_ms)) do
    redis.call('ZREM', queue, w)
    redis.call('ZREM', deadlines, w)
  end
end
-- Drops the waiters whose deadline has passed, then wakes the oldest live
-- waiter other than `me`; returns it, or false. Pruning first matters: a
-- stopped waiter (Ctrl-Z) keeps its connection, so PUBLISH would count it
-- and the live waiters behind it would sleep until their backstop.
local function wake_next(queue, deadlines, chan, me)
  prune(queue, deadlines, math.floor(now_us() / 1000))
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head or head == me then return false end
    if redis.call('PUBLISH', chan .. head, 'wake') > 0 then return head end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', deadlines, head)
  end
end
";

/// `acquire`: take the lease if it is free and no live waiter is ahead, or
/// refresh it if this owner already holds it (a retry after a lost reply
/// must not burn a token).
///
/// KEYS: lock, fence, meta, queue, deadlines, slots, limit (the last two
/// only to refuse a name in use as a semaphore). ARGV: owner, ttl ms, mode
/// (`once`: do not queue; `fair`: queue in arrival order; `any`: ignore the
/// queue), wake channel prefix, then metadata field/value pairs.
/// Returns `{1, token}`, `{0, holder|false, pttl, waiter ahead|false}`, or
/// `{-1, N}` when the name is in use as a semaphore of N.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{WAKE_NEXT}{}",
        r"
local lock, fence, meta, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, mode, chan = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('GET', lock)
if holder == false and redis.call('EXISTS', KEYS[6]) == 1 then
  local t = redis.call('TIME')
  if redis.call('ZCOUNT', KEYS[6], tonumber(t[1]) * 1000 + 1, '+inf') > 0 then
    return {-1, tonumber(redis.call('GET', KEYS[7]) or '0')}
  end
end
if holder == owner then
  redis.call('PEXPIRE', lock, ttl)
  redis.call('PEXPIRE', meta, ttl)
  return {1, tonumber(redis.call('GET', fence) or '0')}
end
local now = now_us()
local ahead = false
if holder == false and mode ~= 'any' then
  ahead = wake_next(queue, deadlines, chan, owner)
end
if holder == false and not ahead then
  redis.call('SET', lock, owner, 'PX', ttl)
  local token = redis.call('INCR', fence)
  redis.call('ZREM', queue, owner)
  redis.call('ZREM', deadlines, owner)
  redis.call('DEL', meta)
  if #ARGV > 4 then
    redis.call('HSET', meta, 'acquired_ms', string.format('%d', math.floor(now / 1000)),
      'token', token, unpack(ARGV, 5))
    redis.call('PEXPIRE', meta, ttl)
  end
  return {1, token}
end
local pttl = -2
if holder then pttl = redis.call('PTTL', lock) end
if mode == 'fair' then
  -- Keep our place while we wait: we try again at least once per
  -- max(pttl, ttl), so twice that plus slack only lapses if we are gone.
  local keep = 2 * math.max(pttl, tonumber(ttl)) + 2000
  redis.call('ZADD', queue, 'NX', now, owner)
  redis.call('ZADD', deadlines, math.floor(now / 1000) + keep, owner)
  for _, k in ipairs({queue, deadlines}) do
    if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
  end
end
return {0, holder, pttl, ahead}
"
    ))
});

/// `leave`: a waiter gives up (its wait ran out, or it was interrupted).
/// KEYS: lock, queue, deadlines. ARGV: owner, wake channel prefix. If the
/// lock is free, the next waiter is woken, since it may have been waiting
/// behind us.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{WAKE_NEXT}{}",
        r"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake_next(KEYS[2], KEYS[3], ARGV[2], ARGV[1])
end
return 1
"
    ))
});

/// `renew`: compare-and-extend. KEYS: lock, metadata. ARGV: owner, ttl ms.
/// Returns 1 when extended, 0 when someone else (or nobody) holds the lock.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    lua(r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
")
});

/// Lua that writes the last-run record: a hash of the given field/value
/// pairs, replacing the previous one, kept for `keep` ms.
const RECORD_LAST_RUN: &str = r"
local function record_last_run(key, keep, first)
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(ARGV, first))
  redis.call('PEXPIRE', key, keep)
end
";

/// Lua for the plain-lock scripts that must refuse a name in use as a
/// semaphore (users must agree on `--limit`): the semaphore's N when one of
/// its slots is live by the server's clock, else false.
const SEMAPHORE_IN_USE: &str = r"
local function semaphore_in_use(slots, limit)
  if redis.call('EXISTS', slots) == 0 then return false end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('ZCOUNT', slots, now + 1, '+inf') == 0 then return false end
  return tonumber(redis.call('GET', limit) or '0')
end
";

/// `release`: compare-and-delete, then wake the next waiter in line and
/// tell `--wait-order any` waiters, in the same round trip. A lease taken
/// with a minimum hold (`min_hold_ms` in its metadata) that has not run
/// yet is kept, by the server's clock, until the minimum has passed. `run`
/// also writes its last-run record here, so ending costs one round trip.
///
/// KEYS: lock, meta, queue, deadlines, last, slots, limit. ARGV: owner,
/// wake channel prefix, release channel, last-run keep ms ('' for no
/// record), then the record's field/value pairs. Returns `{1}` when
/// deleted, `{2, ms}` when kept for the minimum hold, `{-1, N}` when the
/// name is in use as a semaphore of N, else `{0, holder|false}`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{WAKE_NEXT}{RECORD_LAST_RUN}{SEMAPHORE_IN_USE}{}",
        r"
local holder = redis.call('GET', KEYS[1])
if holder == false then
  local n = semaphore_in_use(KEYS[6], KEYS[7])
  if n then return {-1, n} end
end
if holder ~= ARGV[1] then return {0, holder} end
if ARGV[4] ~= '' then record_last_run(KEYS[5], ARGV[4], 5) end
local m = redis.call('HMGET', KEYS[2], 'acquired_ms', 'min_hold_ms')
local left = (tonumber(m[1]) or 0) + (tonumber(m[2]) or 0) - math.floor(now_us() / 1000)
if tonumber(m[2]) and left > 0 then
  redis.call('PEXPIRE', KEYS[1], left)
  redis.call('PEXPIRE', KEYS[2], left)
  return {2, left}
end
redis.call('DEL', KEYS[1], KEYS[2])
wake_next(KEYS[3], KEYS[4], ARGV[2], false)
redis.call('PUBLISH', ARGV[3], 'released')
return {1}
"
    ))
});

/// The last-run record on its own, for a `run` whose lease was lost (no
/// release to carry it). KEYS: last. ARGV: keep ms, field/value pairs.
static LAST_RUN: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{RECORD_LAST_RUN}{}",
        r"
record_last_run(KEYS[1], ARGV[1], 2)
return 1
"
    ))
});

/// `release --force`: delete whoever holds the lock, leave the fencing
/// counter alone, wake the next waiter. KEYS: lock, meta, queue,
/// deadlines, slots, limit; ARGV: wake channel prefix, release channel.
/// Returns the evicted holder or nil, or `{-1, N}` when the name is in use
/// as a semaphore of N.
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{WAKE_NEXT}{SEMAPHORE_IN_USE}{}",
        r"
local holder = redis.call('GET', KEYS[1])
if holder == false then
  local n = semaphore_in_use(KEYS[5], KEYS[6])
  if n then return {-1, n} end
end
if holder then
  redis.call('DEL', KEYS[1], KEYS[2])
  wake_next(KEYS[3], KEYS[4], ARGV[1], false)
  redis.call('PUBLISH', ARGV[2], 'released')
end
return holder
"
    ))
});

/// `inspect`: one consistent snapshot. KEYS: lock, fence, metadata, last
/// run, slots, limit. Returns `{holder|nil, pttl, last token|nil,
/// {metadata…}, {last run…}, N|nil}`, N when the name is in use as a
/// semaphore of N.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{SEMAPHORE_IN_USE}{}",
        r"
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('HGETALL', KEYS[3]),
  redis.call('HGETALL', KEYS[4]),
  semaphore_in_use(KEYS[5], KEYS[6]),
}
"
    ))
});

/// Lua shared by the semaphore scripts (`--limit N`). Each holder has its
/// own slot: `slots` is a zset owner → expiry (server ms), so expired slots
/// are reclaimed on the server's clock, never a client's. `tokens` maps
/// owner → fencing token; `limit` holds the N every user must agree on.
/// All three keys expire with the latest slot.
const SLOTS: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function reclaim(slots, tokens, now)
  for _, o in ipairs(redis.call('ZRANGEBYSCORE', slots, '-inf', now)) do
    redis.call('ZREM', slots, o)
    redis.call('HDEL', tokens, o)
  end
end
local function keep(slots, limit, tokens, now)
  local top = redis.call('ZRANGE', slots, -1, -1, 'WITHSCORES')[2]
  if not top then return end
  local left = math.max(tonumber(top) - now, 1)
  for _, k in ipairs({slots, limit, tokens}) do redis.call('PEXPIRE', k, left) end
end
";

/// `acquire --limit N`: take a free slot, or refresh ours.
/// KEYS: slots, limit, tokens, fence, plain lock. ARGV: owner, ttl ms, N.
/// Returns `{1, token}`, `{0, holder expiring first, its pttl}`, or
/// `{-1, the N in use}` when users disagree on N (`{-1, 0}`: a plain lock).
static ACQUIRE_SLOT: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{SLOTS}{}",
        r"
local slots, limit, tokens, fence, plain = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
reclaim(slots, tokens, now)
if redis.call('EXISTS', plain) == 1 then return {-1, 0} end
local held = redis.call('ZCARD', slots)
local agreed = tonumber(redis.call('GET', limit))
if held > 0 and agreed and agreed ~= n then return {-1, agreed} end
if redis.call('ZSCORE', slots, owner) then
  redis.call('ZADD', slots, 'XX', now + ttl, owner)
  keep(slots, limit, tokens, now)
  return {1, tonumber(redis.call('HGET', tokens, owner) or '0')}
end
if held < n then
  redis.call('ZADD', slots, now + ttl, owner)
  local token = redis.call('INCR', fence)
  redis.call('HSET', tokens, owner, token)
  redis.call('SET', limit, n)
  keep(slots, limit, tokens, now)
  return {1, token}
end
local first = redis.call('ZRANGE', slots, 0, 0, 'WITHSCORES')
return {0, first[1], tonumber(first[2]) - now}
"
    ))
});

/// `renew --limit N`: extend our slot if it is still live.
/// KEYS: slots, limit, tokens. ARGV: owner, ttl ms. Returns 1 or 0.
static RENEW_SLOT: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{SLOTS}{}",
        r"
local now = now_ms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) > now then
  redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
  keep(KEYS[1], KEYS[2], KEYS[3], now)
  return 1
end
reclaim(KEYS[1], KEYS[3], now)
return 0
"
    ))
});

/// `release --limit N`: free our slot and tell waiters.
/// KEYS: slots, limit, tokens, plain lock. ARGV: owner, release channel, N.
/// Returns `{1}`, `{0}`, or `{-1, the N in use}` when users disagree on N
/// (`{-1, 0}`: a plain lock); then nothing is released.
static RELEASE_SLOT: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{SLOTS}{}",
        r"
local now = now_ms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
reclaim(KEYS[1], KEYS[3], now)
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1, 0} end
local agreed = tonumber(redis.call('GET', KEYS[2]))
if agreed and agreed ~= tonumber(ARGV[3]) and redis.call('ZCARD', KEYS[1]) > 0 then
  return {-1, agreed}
end
if s and tonumber(s) > now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return {1}
end
return {0}
"
    ))
});

/// `release --force --limit N`: free every slot; returns the evicted
/// owners, or `{-1, the N in use}` as `release --limit N` does.
/// KEYS: slots, limit, tokens, plain lock. ARGV: release channel, N.
static FORCE_RELEASE_SLOTS: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{SLOTS}{}",
        r"
local now = now_ms()
reclaim(KEYS[1], KEYS[3], now)
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1, 0} end
local agreed = tonumber(redis.call('GET', KEYS[2]))
if agreed and agreed ~= tonumber(ARGV[2]) and redis.call('ZCARD', KEYS[1]) > 0 then
  return {-1, agreed}
end
local all = redis.call('ZRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if #all > 0 then redis.call('PUBLISH', ARGV[1], 'released') end
return all
"
    ))
});

/// `inspect` of a semaphore: `{N|nil, {owner, ms left, token, …}, last token,
/// {last run…}, 1 if the name is held as a plain lock}`. KEYS: slots,
/// limit, tokens, fence, last run, plain lock.
static INSPECT_SLOTS: LazyLock<Script> = LazyLock::new(|| {
    lua(&format!(
        "{SLOTS}{}",
        r"
local now = now_ms()
local out = {}
for _, o in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now + 1, '+inf')) do
  table.insert(out, o)
  table.insert(out, tonumber(redis.call('ZSCORE', KEYS[1], o)) - now)
  table.insert(out, redis.call('HGET', KEYS[3], o) or '0')
end
return {redis.call('GET', KEYS[2]) or false, out, redis.call('GET', KEYS[4]) or false,
  redis.call('HGETALL', KEYS[5]), redis.call('EXISTS', KEYS[6])}
"
    ))
});

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
            wake_prefix: format!("{lock}:wake:"),
            released: format!("{lock}:released"),
            last: format!("{lock}:last"),
            slots: format!("{lock}:slots"),
            limit_key: format!("{lock}:limit"),
            tokens: format!("{lock}:tokens"),
            limit: None,
            lock,
        }
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

/// Where Redis is, parsed once; the password never leaves this struct.
#[derive(Clone)]
pub struct Target {
    client: redis::Client,
    /// With `redis+sentinel://`: where to ask for the current master.
    sentinel: Option<Sentinel>,
    /// With `redis+cluster://`: seed nodes to learn the slot map from.
    cluster: Option<Cluster>,
    /// The same target without the password from DISTLOCK_REDIS_PASSWORD,
    /// for a server that has none configured (see `Store::conn`).
    without_env_password: Option<redis::Client>,
    /// The URL with any password replaced by `***`, for messages.
    pub display: String,
    /// Host name the TLS certificate must match (for messages).
    tls_host: Option<String>,
    /// Where trust comes from (for messages): a CA file or the system's.
    tls_trust: String,
}

/// TLS and password settings from the command line and environment.
#[derive(Debug, Default, Clone)]
pub struct Security {
    /// A password from --redis-password-file or DISTLOCK_REDIS_PASSWORD;
    /// overrides one in the URL.
    pub password: Option<String>,
    /// The password came from DISTLOCK_REDIS_PASSWORD, which may be set in
    /// an environment shared with servers that need none.
    pub password_from_env: bool,
    /// PEM file of the CA(s) to trust instead of the system's.
    pub tls_ca: Option<std::path::PathBuf>,
    /// PEM client certificate and key, for mutual TLS.
    pub tls_cert: Option<std::path::PathBuf>,
    /// See `tls_cert`.
    pub tls_key: Option<std::path::PathBuf>,
    /// Skip certificate verification (testing only).
    pub tls_insecure: bool,
}

impl Target {
    /// Parses a Redis URL and applies `sec`. Errors are usage errors and
    /// never echo a password.
    pub fn parse(url: &str, sec: &Security) -> Result<Target> {
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            return Sentinel::parse(url, rest, sec);
        }
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            return Cluster::parse(url, rest, sec);
        }
        let Some((scheme, _)) = url.split_once("://") else {
            // Without a scheme we cannot tell which part might be a
            // password, so the value is not echoed.
            bail!(UsageError(
                "invalid redis URL: it must start with redis://, rediss://, redis+unix:// or unix://"
                    .into()
            ));
        };
        let display = redact(url);
        let tls = match scheme {
            "redis" | "redis+unix" | "unix" => false,
            "rediss" => true,
            _ => {
                return Err(UsageError(format!(
                    "invalid redis URL {display}: use redis://host:port, rediss://host:port, redis+unix:///path or unix:///path"
                ))
                .into())
            }
        };
        let uses_tls_options = sec.tls_ca.is_some()
            || sec.tls_cert.is_some()
            || sec.tls_key.is_some()
            || sec.tls_insecure;
        if !tls && uses_tls_options {
            bail!(UsageError(format!(
                "--tls-ca, --tls-cert, --tls-key and --tls-insecure need a rediss:// URL, not {display}"
            )));
        }
        if sec.tls_cert.is_some() != sec.tls_key.is_some() {
            bail!(UsageError(
                "--tls-cert and --tls-key go together (mutual TLS needs both)".into()
            ));
        }
        let info = url.into_connection_info().map_err(|_| {
            UsageError(format!(
                "invalid redis URL {display}: expected redis://[user[:password]@]host[:port][/db]"
            ))
        })?;
        // The handshake then is AUTH/SELECT at most: no CLIENT SETINFO round
        // trip on every start.
        let mut info = info;
        let mut tls_host = None;
        if let redis::ConnectionAddr::TcpTls { host, port, .. } = info.addr().clone() {
            tls_host = Some(host.clone());
            if sec.tls_insecure {
                info = info.set_addr(redis::ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: true,
                    tls_params: None,
                });
            }
        }
        let redis = info.redis_settings().clone().set_skip_set_lib_name();
        let url_has_password = redis.password().is_some();
        info = info.set_redis_settings(redis.clone());
        let mut plain_info = None;
        if let Some(p) = &sec.password {
            if sec.password_from_env && !url_has_password {
                plain_info = Some(info.clone());
            }
            info = info.set_redis_settings(redis.set_password(p));
        }
        let read = |what: &str, p: &Option<std::path::PathBuf>| -> Result<Option<Vec<u8>>> {
            match p {
                None => Ok(None),
                Some(p) => std::fs::read(p).map(Some).map_err(|e| {
                    UsageError(format!("cannot read {what} {}: {e}", p.display())).into()
                }),
            }
        };
        let build = |info: redis::ConnectionInfo| -> Result<redis::Client> {
            if !tls {
                return redis::Client::open(info)
                    .map_err(|_| UsageError(format!("invalid redis URL {display}")).into());
            }
            install_crypto_provider();
            let root_cert = read("--tls-ca", &sec.tls_ca)?;
            let client_tls = match (
                read("--tls-cert", &sec.tls_cert)?,
                read("--tls-key", &sec.tls_key)?,
            ) {
                (Some(client_cert), Some(client_key)) => Some(redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
                _ => None,
            };
            if root_cert.is_none() && client_tls.is_none() {
                redis::Client::open(info)
            } else {
                redis::Client::build_with_tls(
                    info,
                    redis::TlsCertificates {
                        client_tls,
                        root_cert,
                    },
                )
            }
            .map_err(|e| {
                UsageError(format!(
                    "invalid TLS files for {display}: {}",
                    e.to_string().replace('\n', " ")
                ))
                .into()
            })
        };
        let client = build(info)?;
        let without_env_password = plain_info.map(build).transpose()?;
        Ok(Target {
            client,
            sentinel: None,
            cluster: None,
            without_env_password,
            display,
            tls_host,
            tls_trust: match &sec.tls_ca {
                Some(p) => format!("the CA in {}", p.display()),
                None => "the system's trusted CAs".into(),
            },
        })
    }
}

/// A Redis Sentinel set and the master it watches.
#[derive(Clone, Debug)]
struct Sentinel {
    /// Sentinel addresses, asked in order until one answers.
    nodes: Vec<(String, u16)>,
    /// The master's name as the sentinels know it.
    master: String,
    /// How to talk to the master once found (user, password, db).
    redis: redis::RedisConnectionInfo,
}

impl Sentinel {
    /// `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db]`,
    /// as other Redis clients spell it; sentinel ports default to 26379.
    /// The credentials and db are the master's.
    fn parse(url: &str, rest: &str, sec: &Security) -> Result<Target> {
        let display = redact(url);
        let bad = |why: &str| -> anyhow::Error {
            UsageError(format!(
                "invalid sentinel URL {display}: {why} (expected redis+sentinel://host:26379,host:26379/mastername[/db])"
            ))
            .into()
        };
        if sec.tls_ca.is_some()
            || sec.tls_cert.is_some()
            || sec.tls_key.is_some()
            || sec.tls_insecure
        {
            return Err(bad("TLS with sentinels is not supported"));
        }
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((a, r)) => (Some(a), r),
            None => (None, rest),
        };
        let (hosts, path) = rest.split_once('/').ok_or_else(|| bad("no master name"))?;
        let mut parts = path.split('/');
        let master = parts
            .next()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| bad("no master name"))?;
        let db: i64 = match parts.next().filter(|d| !d.is_empty()) {
            Some(d) => d.parse().map_err(|_| bad("the db is not a number"))?,
            None => 0,
        };
        let mut nodes = Vec::new();
        for h in hosts.split(',').filter(|h| !h.is_empty()) {
            let (host, port) = match h.rsplit_once(':') {
                Some((host, port)) => (host, port.parse().map_err(|_| bad("bad port"))?),
                None => (h, 26379),
            };
            nodes.push((host.trim_matches(['[', ']']).to_owned(), port));
        }
        if nodes.is_empty() {
            return Err(bad("no sentinel address"));
        }
        let mut redis = redis::RedisConnectionInfo::default()
            .set_db(db)
            .set_skip_set_lib_name();
        if let Some(auth) = auth {
            let (user, pass) = auth.split_once(':').unwrap_or((auth, ""));
            if !user.is_empty() {
                redis = redis.set_username(user);
            }
            if !pass.is_empty() {
                redis = redis.set_password(pass);
            }
        }
        if let Some(p) = &sec.password {
            redis = redis.set_password(p);
        }
        let sentinel = Sentinel {
            nodes,
            master: master.to_owned(),
            redis,
        };
        // A placeholder: every connection asks the sentinels first.
        let client = redis::Client::open(sentinel.master_info("127.0.0.1", 6379))
            .map_err(|_| bad("unusable"))?;
        Ok(Target {
            client,
            sentinel: Some(sentinel),
            cluster: None,
            without_env_password: None,
            display,
            tls_host: None,
            tls_trust: String::new(),
        })
    }

    fn master_info(&self, host: &str, port: u16) -> redis::ConnectionInfo {
        redis::ConnectionAddr::Tcp(host.to_owned(), port)
            .into_connection_info()
            .expect("a TCP address is always a valid connection info")
            .set_redis_settings(self.redis.clone())
    }

    /// Asks the sentinels, in order, where the master is, then connects to
    /// it and checks that it is a master (a sentinel can be behind a
    /// failover). Every step is bounded by `timeout`: redis-rs's own
    /// sentinel code connects without timeouts.
    fn connect(&self, timeout: Duration) -> redis::RedisResult<Connection> {
        let mut last = None;
        for (host, port) in &self.nodes {
            let asked = redis::ConnectionAddr::Tcp(host.clone(), *port)
                .into_connection_info()
                .map(|i| {
                    let r = i.redis_settings().clone().set_skip_set_lib_name();
                    i.set_redis_settings(r)
                })
                .and_then(redis::Client::open)
                .and_then(|c| c.get_connection_with_timeout(timeout))
                .and_then(|mut c| {
                    c.set_read_timeout(Some(timeout))?;
                    c.set_write_timeout(Some(timeout))?;
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(&self.master)
                        .query::<Option<(String, u16)>>(&mut c)
                });
            match asked {
                Ok(Some((mhost, mport))) => {
                    // A master that cannot be reached or is no longer one
                    // means this sentinel is behind: ask the next.
                    let checked = redis::Client::open(self.master_info(&mhost, mport))
                        .and_then(|c| c.get_connection_with_timeout(timeout))
                        .and_then(|mut conn| {
                            conn.set_read_timeout(Some(timeout))?;
                            conn.set_write_timeout(Some(timeout))?;
                            let role: Vec<Value> = redis::cmd("ROLE").query(&mut conn)?;
                            Ok((conn, role))
                        });
                    match checked {
                        Ok((conn, role)) if matches!(role.first(), Some(Value::BulkString(b)) if b == b"master") => {
                            return Ok(conn)
                        }
                        Ok(_) => {
                            last = Some(redis::RedisError::from((
                                redis::ErrorKind::Io,
                                "the sentinels' master is not a master (failover in progress)",
                            )))
                        }
                        Err(e) => last = Some(e),
                    }
                }
                Ok(None) => {
                    last = Some(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "sentinel knows no master by that name",
                    )))
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Io, "no sentinel answered"))
        }))
    }
}

/// A Redis Cluster, reached through seed nodes. distlock routes each lock
/// to the master that owns the slot of its `{NAME}` hash tag, with a plain
/// connection and its own timeouts (redis-rs's sync cluster client has no
/// response timeout by default), and relearns the slot map after any error
/// (MOVED after a resharding or failover included).
#[derive(Clone, Debug)]
struct Cluster {
    /// Seed nodes, asked in order for the slot map.
    seeds: Vec<(String, u16)>,
    /// User, password (and no db: Cluster has only db 0).
    redis: redis::RedisConnectionInfo,
}

/// One range of the slot map: slots `start..=end` live on `host:port`.
type SlotRange = (u16, u16, String, u16);

impl Cluster {
    /// `redis+cluster://[[user]:password@]host:port[,host:port…]`.
    fn parse(url: &str, rest: &str, sec: &Security) -> Result<Target> {
        let display = redact(url);
        let bad = |why: &str| -> anyhow::Error {
            UsageError(format!(
                "invalid cluster URL {display}: {why} (expected redis+cluster://host:port,host:port)"
            ))
            .into()
        };
        if sec.tls_ca.is_some()
            || sec.tls_cert.is_some()
            || sec.tls_key.is_some()
            || sec.tls_insecure
        {
            return Err(bad("TLS with Redis Cluster is not supported"));
        }
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((a, r)) => (Some(a), r),
            None => (None, rest),
        };
        let hosts = rest.trim_end_matches('/');
        let mut seeds = Vec::new();
        for h in hosts.split(',').filter(|h| !h.is_empty()) {
            let (host, port) = h
                .rsplit_once(':')
                .ok_or_else(|| bad("a seed without a port"))?;
            let port = port.parse().map_err(|_| bad("bad port"))?;
            seeds.push((host.trim_matches(['[', ']']).to_owned(), port));
        }
        if seeds.is_empty() {
            return Err(bad("no seed node"));
        }
        let mut redis = redis::RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(auth) = auth {
            let (user, pass) = auth.split_once(':').unwrap_or((auth, ""));
            if !user.is_empty() {
                redis = redis.set_username(user);
            }
            if !pass.is_empty() {
                redis = redis.set_password(pass);
            }
        }
        if let Some(p) = &sec.password {
            redis = redis.set_password(p);
        }
        let cluster = Cluster { seeds, redis };
        let (h, p) = cluster.seeds[0].clone();
        let client = redis::Client::open(cluster.node_info(&h, p)).map_err(|_| bad("unusable"))?;
        Ok(Target {
            client,
            sentinel: None,
            cluster: Some(cluster),
            without_env_password: None,
            display,
            tls_host: None,
            tls_trust: String::new(),
        })
    }

    fn node_info(&self, host: &str, port: u16) -> redis::ConnectionInfo {
        redis::ConnectionAddr::Tcp(host.to_owned(), port)
            .into_connection_info()
            .expect("a TCP address is always a valid connection info")
            .set_redis_settings(self.redis.clone())
    }

    /// A connection to one node, with timeouts.
    fn connect_node(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> redis::RedisResult<Connection> {
        let c = redis::Client::open(self.node_info(host, port))?
            .get_connection_with_timeout(timeout)?;
        c.set_read_timeout(Some(timeout))?;
        c.set_write_timeout(Some(timeout))?;
        Ok(c)
    }

    /// The slot map (masters only), from the first seed that answers.
    fn slot_map(&self, timeout: Duration) -> redis::RedisResult<Vec<SlotRange>> {
        let mut last = None;
        for (host, port) in &self.seeds {
            let seed_host = host;
            let map = self.connect_node(host, *port, timeout).and_then(|mut c| {
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query::<Vec<Value>>(&mut c)
            });
            match map {
                Ok(ranges) => {
                    let mut out = Vec::new();
                    for r in ranges {
                        let Value::Array(r) = r else { continue };
                        let (Some(start), Some(end), Some(Value::Array(master))) =
                            (r.first(), r.get(1), r.get(2))
                        else {
                            continue;
                        };
                        let (Ok(start), Ok(end)) = (int(start), int(end)) else {
                            continue;
                        };
                        let host = master
                            .first()
                            .and_then(|h| string(h).ok().flatten())
                            .unwrap_or_default();
                        let port = master.get(1).and_then(|p| int(p).ok()).unwrap_or(0);
                        // An empty host means "the node you asked".
                        let host = if host.is_empty() {
                            seed_host.clone()
                        } else {
                            host
                        };
                        out.push((start as u16, end as u16, host, port as u16));
                    }
                    return Ok(out);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Io, "no seed node answered"))
        }))
    }
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, the
/// part between the first `{` and the next `}` when not empty, mod 16384.
fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}').map(|len| (open + 1, len)))
        .filter(|&(_, len)| len > 0)
        .map_or(bytes, |(start, len)| &bytes[start..start + len]);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

impl Target {
    /// A new connection: through the sentinels when there are some, else
    /// directly (with the DISTLOCK_REDIS_PASSWORD fallback of `Store::conn`).
    fn connect(
        &mut self,
        timeout: Duration,
        node: Option<&(String, u16)>,
    ) -> redis::RedisResult<Connection> {
        if let Some(s) = &self.sentinel {
            return s.connect(timeout);
        }
        if let Some(c) = &self.cluster {
            let (host, port) = match node {
                Some(n) => n.clone(),
                None => c.seeds[0].clone(),
            };
            return c.connect_node(&host, port, timeout);
        }
        match self.client.get_connection_with_timeout(timeout) {
            // DISTLOCK_REDIS_PASSWORD is an ambient setting, and a
            // server with no password at all refuses AUTH rather than
            // ignoring it (redis-rs reports both refusals alike). Try
            // once without it: a server that does want a password then
            // answers the first command with NOAUTH, exit 125 still.
            Err(e) if matches!(e.kind(), redis::ErrorKind::AuthenticationFailed) => {
                match self.without_env_password.take() {
                    Some(plain) => {
                        self.client = plain;
                        self.client.get_connection_with_timeout(timeout)
                    }
                    None => Err(e),
                }
            }
            other => other,
        }
    }
}

/// rustls needs a process-wide crypto provider; distlock builds with ring
/// only. Installing twice is harmless (the second call reports an error we
/// ignore).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Replaces the password of a Redis URL with `***`, both in the userinfo
/// (`redis://user:pass@host`) and in a `pass=`/`password=` query parameter
/// (`unix:///s?pass=…`). Works on unparsable input too, since it is used in
/// the error for an unparsable URL.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let rest = &out[start..];
        let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..auth_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                out.replace_range(start + colon + 1..start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k == "pass" || k == "password" => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// The URL with its password taken out altogether (the `:password` of the
/// userinfo, a `pass=`/`password=` query parameter), user, host, port and
/// database kept: what CMD may see of `DISTLOCK_REDIS_URL`.
pub fn without_password(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let rest = &out[start..];
        let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let cut = rest[..auth_end].rfind('@').and_then(|at| {
            rest[..at].find(':').map(|colon| match colon {
                // `redis://:pw@host`: no user either, drop the userinfo.
                0 => start..start + at + 1,
                // `redis://user:pw@host` → `redis://user@host`.
                c => start + c..start + at,
            })
        });
        if let Some(range) = cut {
            out.replace_range(range, "");
        }
    }
    if let Some(q) = out.find('?') {
        let kept: Vec<&str> = out[q + 1..]
            .split('&')
            .filter(|kv| {
                let key = kv.split_once('=').map_or(*kv, |(k, _)| k);
                key != "pass" && key != "password"
            })
            .collect();
        out = if kept.is_empty() {
            out[..q].to_owned()
        } else {
            format!("{}?{}", &out[..q], kept.join("&"))
        };
    }
    out
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
    /// next call starts clean.
    fn call(
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
        let v = self.call("acquire", |c| {
            let mut inv = ACQUIRE.key(&keys.lock);
            inv.key(&keys.fence)
                .key(&keys.meta)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .key(&keys.slots)
                .key(&keys.limit_key)
                .arg(owner)
                .arg(ttl_ms)
                .arg(mode.as_arg())
                .arg(&keys.wake_prefix);
            for (k, v) in meta {
                inv.arg(*k).arg(*v);
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
        self.call(what, |c| cmd.query(c))
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
                inv.key(&keys.limit_key).key(&keys.tokens);
                inv
            } else {
                let mut inv = RENEW.key(&keys.lock);
                inv.key(&keys.meta);
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
        self.release_recording(keys, owner, None)
    }

    /// `release`, writing `run`'s last-run record (kept for `keep`) in the
    /// same round trip.
    pub fn release_recording(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        last: Option<(&LastRun, Duration)>,
    ) -> Result<Release> {
        self.route(keys)?;
        if keys.limit.is_some() {
            let v = self.call("release", |c| {
                RELEASE_SLOT
                    .key(&keys.slots)
                    .key(&keys.limit_key)
                    .key(&keys.tokens)
                    .key(&keys.lock)
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
                .arg(owner)
                .arg(&keys.wake_prefix)
                .arg(&keys.released);
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
    /// keys. Locks released between the SCAN and now come back free.
    pub fn inspect_many(&mut self, keys: &[LockKeys]) -> Result<Vec<LockInfo>> {
        if self.target.cluster.is_some() {
            // Keys live on different nodes: one at a time, each routed.
            return keys.iter().map(|k| self.inspect(k)).collect();
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
                            .key(&k.limit_key);
                        inv
                    })
                    .collect();
                for inv in &invocations {
                    p.invoke_script(inv);
                }
                p.query(c)
            })?;
            for v in replies {
                out.push(parse_info(v)?);
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
            let v = self.call("scan", |c| {
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
    let [holder, pttl, token, meta, last, semaphore] = items.as_slice() else {
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

/// Turns a redis-rs error into one plain sentence that names the server
/// (password redacted) but never the password itself.
fn describe(e: redis::RedisError, target: &Target) -> anyhow::Error {
    let display = &target.display;
    let text = e.to_string();
    if let Some(why) = tls_failure(&text, target) {
        return anyhow::anyhow!("redis at {display}: TLS: {why}");
    }
    if let Some(why) = acl_refusal(&text) {
        return anyhow::anyhow!("redis at {display}: {why}");
    }
    let what = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connection_refusal() {
        "connection refused".to_owned()
    } else if text.contains("NOAUTH") || text.contains("unauthenticated") {
        "authentication required: the server refused the password, or got none".to_owned()
    } else if matches!(e.kind(), redis::ErrorKind::AuthenticationFailed) {
        format!(
            "authentication failed ({})",
            e.detail().unwrap_or("refused")
        )
    } else {
        // redis-rs messages carry the server's words and never the
        // password; keep them on one line.
        text.replace('\n', " ")
    };
    anyhow::anyhow!("redis at {display}: {what}")
}

/// A TLS failure (rustls's words, as redis-rs passes them on) in plain
/// words that name the host name and the CA involved.
fn tls_failure(text: &str, target: &Target) -> Option<String> {
    let host = target.tls_host.as_deref().unwrap_or("the server");
    let trust = &target.tls_trust;
    if text.contains("KeyMismatch") {
        return Some("--tls-key is not the private key of the certificate in --tls-cert".into());
    }
    if let Some(alert) = text.split("received fatal alert: ").nth(1) {
        let alert = alert.split_whitespace().next().unwrap_or("");
        return Some(
            if alert == "CertificateRequired" || alert == "HandshakeFailure" {
                format!(
                "{host} requires a client certificate (mutual TLS): pass --tls-cert and --tls-key (the server's alert: {alert})"
            )
            } else {
                format!("{host} ended the handshake with the alert {alert}: if it checks client certificates, it did not accept the one in --tls-cert")
            },
        );
    }
    if !text.contains("certificate") {
        return None;
    }
    let why = if let Some(rest) = text.split("not valid for name ").nth(1) {
        match rest.split("only valid for ").nth(1) {
            Some(names) => {
                let names = names
                    .replace("DnsName(", "")
                    .replace("IpAddress(", "")
                    .replace(['"', ')'], "");
                format!(
                    "it is issued for {}, not for the host name {host:?} in the URL; connect by a name it lists",
                    names.trim()
                )
            }
            None => format!("it is not valid for the host name {host:?} in the URL"),
        }
    } else if text.contains("NotValidForName") {
        format!("it is not valid for the host name {host:?} in the URL")
    } else if text.contains("UnknownIssuer") {
        format!("it is not signed by {trust}")
    } else if text.contains("NotValidYet") || text.contains("not valid yet") {
        "it is not valid yet (check the clocks)".to_owned()
    } else if text.to_lowercase().contains("expired") {
        "it has expired".to_owned()
    } else {
        format!("{} (trusting {trust})", text.replace('\n', " "))
    };
    Some(format!("the certificate of {host} does not verify: {why}"))
}

/// A refusal by the server's ACL, naming what was refused. Redis names the
/// command when distlock sends it, but inside a script it only says "this
/// command" with the script's SHA1 and line: the line is looked up in
/// distlock's own scripts.
fn acl_refusal(text: &str) -> Option<String> {
    const HINT: &str = "grant it (see the README's ACL SETUSER line)";
    let between = |s: &str, from: &str, to: &str| -> Option<String> {
        let rest = s.split(from).nth(1)?;
        Some(rest.split(to).next()?.to_owned())
    };
    if let Some(cmd) = between(text, "no permissions to run the '", "'") {
        return Some(format!(
            "permission denied: this Redis user may not run {}; {HINT}",
            cmd.to_uppercase()
        ));
    }
    let in_script = text.contains("The user executing the script");
    let denied_keys = text.contains("permissions to access one of the keys")
        || text.contains("access at least one of the keys");
    let denied_channel = text.contains("permissions to access one of the channels")
        || text.contains("publish to the channel");
    if !in_script && !denied_keys && !denied_channel {
        return None;
    }
    let commands = match (
        between(text, "script: ", ","),
        between(text, "@user_script:", ".").and_then(|l| l.trim().parse().ok()),
    ) {
        (Some(sha), Some(line)) => script_commands(sha.trim(), line),
        _ => Vec::new(),
    };
    let mut commands = commands;
    commands.dedup();
    let which = match commands.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("one of {}", many.join(", "))),
    };
    let in_script = if in_script {
        " in one of distlock's scripts"
    } else {
        ""
    };
    let with = which
        .as_ref()
        .map(|w| format!(" with {w}"))
        .unwrap_or_default();
    Some(if denied_keys {
        format!("permission denied: this Redis user may not access distlock's keys{with}{in_script}; grant the key pattern ~PREFIX:* (see the README's ACL SETUSER line)")
    } else if denied_channel {
        format!("permission denied: this Redis user may not use distlock's channels{with}{in_script}; grant the channel pattern &PREFIX:* (see the README's ACL SETUSER line)")
    } else {
        format!(
            "permission denied: this Redis user may not run {}{in_script}; {HINT}",
            which.as_deref().unwrap_or("a command")
        )
    })
}

fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        other => bail!("unexpected reply from redis: {other:?}"),
    }
}

fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => Ok(std::str::from_utf8(b)?.parse()?),
        other => bail!("expected an integer from redis, got {other:?}"),
    }
}

fn string(v: &Value) -> Result<Option<String>> {
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
    fn cluster_slots_follow_the_hash_tag() {
        // Values from the Redis Cluster specification.
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(
            key_slot("distlock:{deploy}:fence"),
            key_slot("distlock:{deploy}")
        );
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_ne!(key_slot("foo{}{bar}"), key_slot("bar"));
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = LockKeys::new("distlock", "deploy/prod");
        assert_eq!(k.lock, "distlock:{deploy/prod}");
        assert_eq!(k.fence, "distlock:{deploy/prod}:fence");
        assert_eq!(k.meta, "distlock:{deploy/prod}:meta");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(
            redact("unix:///s.sock?db=1&pass=secret"),
            "unix:///s.sock?db=1&pass=***"
        );
        assert!(!redact("redis://a:b:c@d@h").contains("b:c"));
    }

    #[test]
    fn acl_refusals_name_the_command_even_inside_a_script() {
        // Line 3 of the renew script is its PEXPIRE.
        let text = format!(
            "ResponseError: The user executing the script can't run this command or subcommand script: {}, on @user_script:3.",
            RENEW.get_hash()
        );
        let why = acl_refusal(&text).unwrap();
        assert!(
            why.contains("may not run PEXPIRE in one of distlock's scripts"),
            "{why}"
        );
        let why = acl_refusal("NoPerm: this user has no permissions to run the 'evalsha' command")
            .unwrap();
        assert!(why.contains("may not run EVALSHA"), "{why}");
        let why = acl_refusal("Pipeline failure: [(Index 0, error: NoPerm: this user has no permissions to run the 'script|load' command)]").unwrap();
        assert!(why.contains("SCRIPT|LOAD"), "{why}");
        assert!(acl_refusal("connection refused").is_none());
    }

    #[test]
    fn passwords_can_be_taken_out_of_a_url() {
        assert_eq!(
            without_password("redis://u:secret@h:1/0"),
            "redis://u@h:1/0"
        );
        assert_eq!(without_password("rediss://:secret@h"), "rediss://h");
        assert_eq!(without_password("redis://h:6379"), "redis://h:6379");
        assert_eq!(without_password("redis://u@h"), "redis://u@h");
        assert_eq!(
            without_password("unix:///s.sock?db=1&pass=secret&user=u"),
            "unix:///s.sock?db=1&user=u"
        );
        assert_eq!(
            without_password("unix:///s.sock?password=x"),
            "unix:///s.sock"
        );
    }

    #[test]
    fn bad_urls_are_usage_errors_without_the_password() {
        for bad in [
            "http://u:hunter2@h",
            "redis//x",
            "hunter2",
            "redis://u:hunter2@[::",
        ] {
            let e = Target::parse(bad, &Security::default()).err().unwrap();
            assert!(e.is::<UsageError>(), "{bad}: {e:#}");
            assert!(!format!("{e:#}").contains("hunter2"), "{e:#}");
        }
        assert!(Target::parse("redis://127.0.0.1:6379/2", &Security::default()).is_ok());
        assert!(Target::parse("unix:///tmp/r.sock", &Security::default()).is_ok());
        assert!(Target::parse("redis+unix:///tmp/r.sock?db=3", &Security::default()).is_ok());
    }
}
