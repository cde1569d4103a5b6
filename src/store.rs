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

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use redis::{Connection, ConnectionInfo, IntoConnectionInfo, Script, Value};

use crate::config::UsageError;

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
/// KEYS: lock, fence, meta, queue, deadlines. ARGV: owner, ttl ms, mode
/// (`once`: do not queue; `fair`: queue in arrival order; `any`: ignore the
/// queue), wake channel prefix, then metadata field/value pairs.
/// Returns `{1, token}`, or `{0, holder|false, pttl, waiter ahead|false}`.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{WAKE_NEXT}{}",
        r"
local lock, fence, meta, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, mode, chan = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('GET', lock)
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
    redis.call('HSET', meta, 'acquired_ms', string.format('%d', math.floor(now / 1000)), unpack(ARGV, 5))
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
    Script::new(&format!(
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
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
",
    )
});

/// `release`: compare-and-delete, then wake the next waiter in line and
/// tell `--wait-order any` waiters, in the same round trip.
/// KEYS: lock, meta, queue, deadlines. ARGV: owner, wake channel prefix,
/// release channel. Returns `{1}` when deleted, else `{0, holder|false}`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{WAKE_NEXT}{}",
        r"
local holder = redis.call('GET', KEYS[1])
if holder ~= ARGV[1] then return {0, holder} end
redis.call('DEL', KEYS[1], KEYS[2])
wake_next(KEYS[3], KEYS[4], ARGV[2], false)
redis.call('PUBLISH', ARGV[3], 'released')
return {1}
"
    ))
});

/// `release --force`: delete whoever holds the lock, leave the fencing
/// counter alone, wake the next waiter. KEYS as `release`; ARGV: wake
/// channel prefix, release channel. Returns the evicted holder or nil.
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{WAKE_NEXT}{}",
        r"
local holder = redis.call('GET', KEYS[1])
if holder then
  redis.call('DEL', KEYS[1], KEYS[2])
  wake_next(KEYS[3], KEYS[4], ARGV[1], false)
  redis.call('PUBLISH', ARGV[2], 'released')
end
return holder
"
    ))
});

/// `inspect`: one consistent snapshot. KEYS: lock, fence, metadata.
/// Returns `{holder|nil, pttl, last token|nil, {metadata field, value, …}}`.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('HGETALL', KEYS[3]),
}
",
    )
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
            lock,
        }
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
}

/// What a compare-and-delete found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Our lease was deleted.
    Released,
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
}

/// Where Redis is, parsed once; the password never leaves this struct.
#[derive(Clone)]
pub struct Target {
    info: ConnectionInfo,
    /// The URL with any password replaced by `***`, for messages.
    pub display: String,
}

impl Target {
    /// Parses a Redis URL. Errors are usage errors and never echo a password.
    pub fn parse(url: &str) -> Result<Target> {
        let Some((scheme, _)) = url.split_once("://") else {
            // Without a scheme we cannot tell which part might be a
            // password, so the value is not echoed.
            bail!(UsageError(
                "invalid redis URL: it must start with redis://, rediss://, redis+unix:// or unix://"
                    .into()
            ));
        };
        let display = redact(url);
        match scheme {
            "redis" | "redis+unix" | "unix" => {}
            "rediss" => {
                return Err(UsageError(format!(
                    "cannot use {display}: this build of distlock has no TLS support"
                ))
                .into())
            }
            _ => {
                return Err(UsageError(format!(
                    "invalid redis URL {display}: use redis://host:port, redis+unix:///path or unix:///path"
                ))
                .into())
            }
        }
        let info = url.into_connection_info().map_err(|_| {
            UsageError(format!(
                "invalid redis URL {display}: expected redis://[user[:password]@]host[:port][/db]"
            ))
        })?;
        // The handshake then is AUTH/SELECT at most: no CLIENT SETINFO round
        // trip on every start.
        let redis = info.redis_settings().clone().set_skip_set_lib_name();
        Ok(Target {
            info: info.set_redis_settings(redis),
            display,
        })
    }
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

/// A lazily (re)connected Redis connection with a timeout on every call.
pub struct Store {
    target: Target,
    conn: Option<Connection>,
    timeout: Duration,
}

impl Store {
    /// A store for `target` whose connects and calls each give up after
    /// `timeout`. Does no I/O until the first call.
    pub fn new(target: Target, timeout: Duration) -> Store {
        Store {
            target,
            conn: None,
            timeout,
        }
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
            let conn = redis::Client::open(self.target.info.clone())
                .and_then(|c| c.get_connection_with_timeout(self.timeout))
                .map_err(|e| describe(e, &self.target.display))?;
            self.conn = Some(conn);
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
        let display = self.target.display.clone();
        let conn = self.conn()?;
        match f(conn) {
            Ok(v) => Ok(v),
            Err(e) => {
                self.conn = None;
                Err(describe(e, &display)).with_context(|| format!("{what} failed"))
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
        let v = self.call("acquire", |c| {
            let mut inv = ACQUIRE.key(&keys.lock);
            inv.key(&keys.fence)
                .key(&keys.meta)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .arg(owner)
                .arg(ttl_ms)
                .arg(mode.as_arg())
                .arg(&keys.wake_prefix);
            for (k, v) in meta {
                inv.arg(*k).arg(*v);
            }
            inv.invoke(c)
        })?;
        let items = array(v)?;
        match items.as_slice() {
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
            other => bail!("unexpected reply to acquire: {other:?}"),
        }
    }

    /// Leaves the wait queue (best effort: a waiter that vanishes is
    /// dropped by the next release anyway).
    pub fn leave(&mut self, keys: &LockKeys, owner: &str) -> Result<()> {
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
    pub fn subscribe(&self, channel: &str) -> Result<Connection> {
        let display = &self.target.display;
        let mut conn = redis::Client::open(self.target.info.clone())
            .and_then(|c| c.get_connection_with_timeout(self.timeout))
            .map_err(|e| describe(e, display))?;
        conn.set_read_timeout(Some(self.timeout))?;
        conn.set_write_timeout(Some(self.timeout))?;
        let mut pubsub = conn.as_pubsub();
        pubsub
            .subscribe(channel)
            .map_err(|e| describe(e, display).context("subscribe failed"))?;
        // Dropping the guard would UNSUBSCRIBE: the subscription must
        // outlive this function.
        std::mem::forget(pubsub);
        Ok(conn)
    }

    /// Extends the lease if `owner` still holds it. Ok(false) means the lease
    /// is gone (expired, deleted, or taken by someone else).
    pub fn renew(&mut self, keys: &LockKeys, owner: &str, ttl_ms: u64) -> Result<bool> {
        let v = self.call("renewal", |c| {
            RENEW
                .key(&keys.lock)
                .key(&keys.meta)
                .arg(owner)
                .arg(ttl_ms)
                .invoke(c)
        })?;
        Ok(int(&v)? == 1)
    }

    /// Deletes the lease if `owner` holds it (compare-and-delete).
    pub fn release(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        let v = self.call("release", |c| {
            RELEASE
                .key(&keys.lock)
                .key(&keys.meta)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .arg(owner)
                .arg(&keys.wake_prefix)
                .arg(&keys.released)
                .invoke(c)
        })?;
        let items = array(v)?;
        match items.as_slice() {
            [Value::Int(1)] => Ok(Release::Released),
            [Value::Int(0)] => Ok(Release::NotOwner(None)),
            [Value::Int(0), holder] => Ok(Release::NotOwner(string(holder)?)),
            other => bail!("unexpected reply to release: {other:?}"),
        }
    }

    /// Deletes the lease whoever holds it; returns the evicted holder.
    pub fn force_release(&mut self, keys: &LockKeys) -> Result<Option<String>> {
        let v = self.call("forced release", |c| {
            FORCE_RELEASE
                .key(&keys.lock)
                .key(&keys.meta)
                .key(&keys.queue)
                .key(&keys.deadlines)
                .arg(&keys.wake_prefix)
                .arg(&keys.released)
                .invoke(c)
        })?;
        string(&v)
    }

    /// Reads holder, remaining lease, last token and metadata atomically.
    pub fn inspect(&mut self, keys: &LockKeys) -> Result<LockInfo> {
        let v = self.call("inspect", |c| {
            INSPECT
                .key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.meta)
                .invoke(c)
        })?;
        parse_info(v)
    }

    /// `inspect` for many locks in pipelined batches: one round trip per
    /// batch rather than per lock, so `list` stays quick with thousands of
    /// keys. Locks released between the SCAN and now come back free.
    pub fn inspect_many(&mut self, keys: &[LockKeys]) -> Result<Vec<LockInfo>> {
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
                        inv.key(&k.fence).key(&k.meta);
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
        let display = self.target.display.clone();
        let conn = self.conn()?;
        f(conn).map_err(|e| {
            self.conn = None;
            describe(e, &display).context(format!("{what} failed"))
        })
    }

    /// Names of every held lock under `prefix`, sorted. Uses SCAN (never
    /// KEYS, which blocks the server) with a glob that only matches lock
    /// keys: they are the only ones that end in `}`.
    pub fn list_names(&mut self, prefix: &str) -> Result<Vec<String>> {
        let pattern = format!("{prefix}:{{*}}");
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
                    let inner = k
                        .strip_prefix(prefix)
                        .and_then(|r| r.strip_prefix(":{"))
                        .and_then(|r| r.strip_suffix('}'));
                    if let Some(name) = inner {
                        names.push(name.to_owned());
                    }
                }
            }
            if cursor == 0 {
                break;
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }
}

/// Decodes the INSPECT script's reply.
fn parse_info(v: Value) -> Result<LockInfo> {
    let items = array(v)?;
    let [holder, pttl, token, meta] = items.as_slice() else {
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
    let meta_items = match meta {
        Value::Array(a) => a.clone(),
        Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        _ => Vec::new(),
    };
    let meta = meta_items
        .chunks(2)
        .filter_map(|kv| match kv {
            [k, v] => Some((string(k).ok()??.to_owned(), string(v).ok()??.to_owned())),
            _ => None,
        })
        .collect();
    Ok(LockInfo {
        ttl: holder
            .as_ref()
            .and_then(|_| pttl_to_ttl(int(pttl).unwrap_or(-2))),
        holder,
        token,
        meta,
    })
}

/// Turns a redis-rs error into one plain sentence that names the server
/// (password redacted) but never the password itself.
fn describe(e: redis::RedisError, display: &str) -> anyhow::Error {
    let what = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connection_refusal() {
        "connection refused".to_owned()
    } else if matches!(e.kind(), redis::ErrorKind::AuthenticationFailed) {
        format!(
            "authentication failed ({})",
            e.detail().unwrap_or("refused")
        )
    } else {
        // redis-rs messages carry the server's words (e.g. NOPERM …) and
        // never the password; keep them on one line.
        e.to_string().replace('\n', " ")
    };
    anyhow::anyhow!("redis at {display}: {what}")
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
    fn bad_urls_are_usage_errors_without_the_password() {
        for bad in [
            "http://u:hunter2@h",
            "redis//x",
            "hunter2",
            "redis://u:hunter2@[::",
        ] {
            let e = Target::parse(bad).err().unwrap();
            assert!(e.is::<UsageError>(), "{bad}: {e:#}");
            assert!(!format!("{e:#}").contains("hunter2"), "{e:#}");
        }
        assert!(Target::parse("redis://127.0.0.1:6379/2").is_ok());
        assert!(Target::parse("unix:///tmp/r.sock").is_ok());
        assert!(Target::parse("redis+unix:///tmp/r.sock?db=3").is_ok());
    }
}
