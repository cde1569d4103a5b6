//! Every Lua script distlock runs, in one place. Each is one atomic
//! operation on the keys of one lock (one hash tag, so one Cluster slot)
//! and one round trip; shared Lua pieces are macros that expand to string
//! literals, so each script is one `concat!` and its SHA-1 is computed by
//! the compiler: a run spends no start-up time on building or hashing
//! scripts.
//!
//! Redis does not roll a script back when a command in it fails (a
//! WRONGTYPE, an unreadable counter, a command an ACL denies): what it
//! wrote before stays. So each script first checks every key it will
//! touch (`foreign_key!`), and the lease's own key (`P:{N}`, or a
//! semaphore's slot) is the last thing it writes, after every PUBLISH:
//! an acquisition that fails leaves no lease behind, and a release that
//! fails leaves the lease whole, to expire by itself as `run`'s warning
//! says, never deleted yet reported as failed. (Only `acquire --limit`
//! still sets the expiry of the semaphore's keys after the slot, since it
//! must count that slot.)

use redis::{ConnectionLike, FromRedisValue, RedisResult, ToRedisArgs};

/// A Lua script called by SHA-1 (EVALSHA), loaded on NOSCRIPT, as
/// `redis::Script` does, but with its source and SHA-1 fixed at build time.
pub(super) struct Script {
    code: &'static str,
    sha: [u8; 40],
}

impl Script {
    const fn new(code: &'static str) -> Script {
        Script {
            code,
            sha: sha1_hex(code.as_bytes()),
        }
    }

    /// The SHA-1 Redis knows the script by, in lower-case hex.
    pub(super) fn get_hash(&self) -> &str {
        std::str::from_utf8(&self.sha).unwrap_or_default()
    }

    /// The Lua source, as sent by SCRIPT LOAD.
    #[cfg(test)]
    pub(super) fn code(&self) -> &'static str {
        self.code
    }

    /// `SCRIPT LOAD`, for pipelines, which get no NOSCRIPT recovery.
    pub(super) fn load_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.code);
        cmd
    }

    /// An invocation with these keys (see [`invocation!`]).
    pub(super) fn keys(&'static self, keys: &[&str]) -> Invocation {
        Invocation {
            script: self,
            keys: keys.to_redis_args(),
            args: Vec::new(),
        }
    }
}

/// An invocation of a script with these keys of a `LockKeys`, in order:
/// `invocation!(RENEW, keys; lock, meta, fence)`.
macro_rules! invocation {
    ($script:expr, $keys:expr; $($key:ident),+) => {
        $script.keys(&[$(&$keys.$key),+])
    };
}
pub(super) use invocation;

/// One call of a script: its keys (`KEYS`) and arguments (`ARGV`).
pub(super) struct Invocation {
    script: &'static Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation {
    pub(super) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(super) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// `EVALSHA sha numkeys keys… args…`.
    pub(super) fn eval_cmd(&self) -> redis::Cmd {
        let data = self
            .keys
            .iter()
            .chain(&self.args)
            .map(Vec::len)
            .sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(3 + self.keys.len() + self.args.len(), data + 51);
        cmd.arg("EVALSHA")
            .arg(&self.script.sha[..])
            .arg(self.keys.len())
            .arg(&*self.keys)
            .arg(&*self.args);
        cmd
    }

    /// Runs the script by SHA-1; on NOSCRIPT (a restarted server, `SCRIPT
    /// FLUSH`, a failover) loads it and tries once more, as
    /// `redis::ScriptInvocation::invoke` does.
    pub(super) fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        let eval = self.eval_cmd();
        match eval.query(con) {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let _: String = self.script.load_cmd().query(con)?;
                eval.query(con)
            }
            other => other,
        }
    }
}

/// SHA-1 in lower-case hex, for the compiler to run.
const fn sha1_hex(data: &[u8]) -> [u8; 40] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = const_sha1::sha1(data).as_bytes();
    let mut out = [0u8; 40];
    let mut i = 0;
    while i < 20 {
        out[2 * i] = HEX[(digest[i] >> 4) as usize];
        out[2 * i + 1] = HEX[(digest[i] & 0xf) as usize];
        i += 1;
    }
    out
}

/// Every script, so that an error raised inside one (Redis names only the
/// script's SHA-1 and a line) can be told in words, and so the tests can
/// check each.
pub(super) static ALL: [&Script; 15] = [
    &ACQUIRE,
    &LEAVE,
    &RELAY,
    &RENEW,
    &RELEASE,
    &LAST_RUN,
    &HISTORY,
    &FORGET_DONE,
    &FORCE_RELEASE,
    &INSPECT,
    &ACQUIRE_SLOT,
    &RENEW_SLOT,
    &RELEASE_SLOT,
    &FORCE_RELEASE_SLOTS,
    &INSPECT_SLOTS,
];

/// The Redis commands called on line `line` of the script with this SHA1,
/// upper-cased, e.g. `["PTTL", "PEXPIRE"]`.
pub(super) fn script_commands(sha: &str, line: usize) -> Vec<String> {
    let Some(text) = ALL
        .iter()
        .find(|s| s.get_hash() == sha)
        .and_then(|s| s.code.lines().nth(line.checked_sub(1)?))
    else {
        return Vec::new();
    };
    text.replace("redis.pcall('", "redis.call('")
        .split("redis.call('")
        .skip(1)
        .filter_map(|rest| rest.split_once('\'').map(|(c, _)| c.to_uppercase()))
        .collect()
}

/// Lua shared by every script: refuse, before any write, a key of this
/// lock that holds another Redis type (something else wrote it). Redis
/// does not roll back the writes a script made before an error, so a
/// WRONGTYPE half way through would leave the lock half changed (a lease
/// set and its fencing counter not incremented, say). `expected` is a flat
/// list of key, type pairs; a type may name alternatives (`hash|string`).
/// Returns `{-2, key, its type}` for the first foreign key, or false; a
/// missing key is never foreign. Each script calls it first, as
/// `local foreign = foreign_key({...}) if foreign then return foreign end`.
///
/// The type `counter` is the fencing counter: a string that must also be
/// one distlock can read, else `{-2, key, 'counter'}`; `counter+1`, for
/// the scripts that issue a token (`next_token!`), must also leave room
/// for one more. It is read as a string because Lua numbers are doubles:
/// past 2^53 a token would come back rounded, and every acquisition would
/// hand out the same one. So a counter must be a decimal integer below
/// 2^53, and below 2^53 - 1 to be counted on; anything else is refused
/// before the script writes anything.
macro_rules! foreign_key {
    () => {
        r"
-- 9007199254740992 is 2^53: every integer below it is exact in a double.
local function readable_counter(v, room)
  if not (v == '0' or string.find(v, '^[1-9]%d*$')) then return false end
  local limit = room and '9007199254740991' or '9007199254740992'
  return #v < 16 or (#v == 16 and v < limit)
end
local function foreign_key(expected)
  for i = 1, #expected, 2 do
    local want = expected[i + 1]
    local counter = string.find(want, '^counter')
    local room = want == 'counter+1'
    if counter then want = 'string' end
    local t = redis.call('TYPE', expected[i])['ok']
    if t ~= 'none' and not string.find('|' .. want .. '|', '|' .. t .. '|', 1, true) then
      return {-2, expected[i], t}
    end
    if counter and t == 'string' then
      local v = redis.call('GET', expected[i])
      if not readable_counter(v, room) then return {-2, expected[i], 'counter'} end
    end
  end
  return false
end
"
    };
}

/// Lua shared by the scripts that can hand the lock on: drop waiters whose
/// keep-alive deadline (server clock) has passed or who let their turn go
/// by, then wake the oldest live waiter, and only it (no thundering herd),
/// through its own channel (PUBLISH counts its subscribers: 0 means that
/// waiter is gone, so the next is tried); promise turns to the `AHEAD`
/// behind it. The protocol (claim windows, `turn MS`, `claimed`, `settled`
/// and `RELAY`), why nothing here loops over the queue, and why `settled`
/// is a stream: docs/queue.md.
///
/// The keys are `LockKeys`' (`turns` holds at most `AHEAD` + 1 waiters);
/// `chan` is the wake channel prefix.
macro_rules! wake_next {
    () => {
        r"
-- Below one second, so that the contract's 'at most 1 s after the release
-- for each stopped waiter ahead' holds with the waiter's retry slack.
local CLAIM_MS = 900
-- Waiters behind the head promised a turn: covers that many stopped
-- waiters in a row at a constant cost per hand-off.
local AHEAD = 2
-- Waiters past their keep-alive deadline dropped per call at most: they
-- are dropped once each, and a stopped one left over only costs one claim
-- window.
local PRUNE_MAX = 16
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function drop(queue, deadlines, turns, w)
  redis.call('ZREM', queue, w)
  redis.call('ZREM', deadlines, w)
  redis.call('ZREM', turns, w)
end
-- Drops waiters past their keep-alive deadline and waiters whose claim
-- window has passed unclaimed: they lost their turn (they queue again, at
-- the back, when they come back).
local function prune(queue, deadlines, turns, now_ms)
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', deadlines, '-inf', now_ms, 'LIMIT', 0, PRUNE_MAX)) do
    drop(queue, deadlines, turns, w)
  end
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', turns, '-inf', now_ms)) do
    drop(queue, deadlines, turns, w)
  end
end
-- Keeps `turns` as long as the queue, so a window that passed unclaimed is
-- still known when the next acquire comes, however late.
local function keep_turns(queue, turns, last_ms, now_ms)
  local keep = math.max(last_ms - now_ms + CLAIM_MS, redis.call('PTTL', queue))
  if keep > 0 then redis.call('PEXPIRE', turns, keep) end
end
-- Tops up the promises: each of the first AHEAD + 1 waiters without a
-- turn is told when its turn starts (the end of the last window promised)
-- and gets the window after it; a dead one is dropped on the spot. The
-- head must already hold its window. Returns the waiters told.
local function promise(queue, deadlines, turns, chan, now_ms)
  local last = redis.call('ZRANGE', turns, -1, -1, 'WITHSCORES')[2]
  if not last then return {} end
  last = tonumber(last)
  local told = {}
  for _, w in ipairs(redis.call('ZRANGE', queue, 0, AHEAD)) do
    if not redis.call('ZSCORE', turns, w) then
      if redis.call('PUBLISH', chan .. w, 'turn ' .. math.max(last - now_ms, 0)) > 0 then
        last = last + CLAIM_MS
        redis.call('ZADD', turns, last, w)
        told[w] = true
      else
        drop(queue, deadlines, turns, w)
      end
    end
  end
  keep_turns(queue, turns, last, now_ms)
  return told
end
-- Drops the waiters that are gone or lost their turn, then wakes the
-- oldest live waiter other than `me`; returns it, or false. Pruning first
-- matters: a stopped waiter (Ctrl-Z) keeps its connection, so PUBLISH
-- would count it and the live waiters behind it would sleep until their
-- backstop.
-- At most PRUNE_MAX heads that no longer listen are dropped per call
-- (all of them go at once after a restart that kept the queue, or a
-- `kill -9` of many waiters): past that, the head is reported as ahead
-- without a wake-up, so nobody jumps the queue, and the next attempt or a
-- waiter's own backstop goes on from there.
local function wake_next(queue, deadlines, turns, chan, me)
  local now_ms = math.floor(now_us() / 1000)
  prune(queue, deadlines, turns, now_ms)
  for _ = 1, PRUNE_MAX do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head or head == me then return false end
    if redis.call('PUBLISH', chan .. head, 'wake') > 0 then
      if not redis.call('ZSCORE', turns, head) then
        redis.call('ZADD', turns, now_ms + CLAIM_MS, head)
      end
      promise(queue, deadlines, turns, chan, now_ms)
      return head
    end
    drop(queue, deadlines, turns, head)
  end
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if not head or head == me then return false end
  return head
end
-- How long (ms from now) until the last promised window ends: when the
-- releaser must act unless the hand-off has ended first.
local function schedule_end(turns)
  local last = redis.call('ZRANGE', turns, -1, -1, 'WITHSCORES')[2]
  if not last then return 0 end
  return math.max(tonumber(last) - math.floor(now_us() / 1000), 0)
end
-- The hand-off has ended (claimed, or nobody left to take it): tells a
-- releaser reading `settled` that it may go. Only the newest entry
-- matters, and nobody may be reading, so it expires by itself.
-- XADD is the one write that can fail on a key of the right type: a
-- stream another client left at its last possible id takes no entry, and
-- a user's ACL may lack XADD. So every caller settles before its other
-- writes, and a failure changes nothing: the stream comes back as a
-- foreign key, `{-2, settled, 'stream_full'}`; any other error (ACL, out
-- of memory) is raised again as the server gave it, from the XADD's own
-- line (the server names the line an error is raised on, and the ACL
-- sentence looks the command up there).
local function settle(settled)
  local added = redis.pcall('XADD', settled, 'MAXLEN', '1', '*', 'settled', '1') if type(added) == 'table' and added.err and not string.find(added.err, 'last possible ID', 1, true) then error(added) end
  if type(added) == 'table' and added.err then return {-2, settled, 'stream_full'} end
  redis.call('PEXPIRE', settled, 10000)
  return false
end
-- The newest entry of `settled`: the releaser waits for one after it.
local function last_settled(settled)
  local newest = redis.call('XREVRANGE', settled, '+', '-', 'COUNT', 1)[1]
  return newest and newest[1] or '0-0'
end
-- A successful acquire ends the promises: whoever still holds one
-- (`promised`, the members of `turns`: at most AHEAD + 1 waiters) is told
-- to forget it. Publishes only (no write): the caller deletes `turns`
-- once its first write has passed the memory check.
local function end_turns(promised, chan, me)
  for _, w in ipairs(promised) do
    if w ~= me then redis.call('PUBLISH', chan .. w, 'claimed') end
  end
end
"
    };
}

/// Lua for the up-front ACL check of a claim, shared by the plain lock's
/// and the semaphore's.
macro_rules! refused {
    () => {
        r"
-- Redis 7 tells a script what its user may run (`redis.acl_check_cmd`;
-- older servers cannot, and refuse half way): a claim refused after its
-- first write would burn a token with nobody holding the lock or slot, so
-- its writes are checked first, each as `{command, key, args...}`. The
-- refusal is the server's own NOPERM reply, so it reads as one.
local function refused(writes)
  if not redis.acl_check_cmd then return false end
  for _, w in ipairs(writes) do
    if not redis.acl_check_cmd(unpack(w)) then
      return redis.error_reply('NOPERM this user has no permissions to run the \'' .. string.lower(w[1]) .. '\' command')
    end
  end
  return false
end
"
    };
}

/// Lua for the callers that only learn whether they must settle after
/// writing (`wake_next` woke nobody): the LEAVE of a waiter, a done mark
/// found by ACQUIRE. Comes after `refused!`.
macro_rules! cannot_settle {
    () => {
        r"
-- Whether `settle` would fail, found without writing, so that such a
-- caller fails with nothing changed, as a claim does: the user's ACL, and
-- a stream at its last possible id (`settle`'s `stream_full`). A stream
-- emptied by XDEL after reaching that id is not seen here; `settle` still
-- reports it, after the queue changed.
local function cannot_settle(settled)
  local denied = refused({{'XADD', settled, 'MAXLEN', '1', '*', 'settled', '1'}, {'PEXPIRE', settled, '10000'}})
  if denied then return denied end
  local newest = redis.call('XREVRANGE', settled, '+', '-', 'COUNT', 1)[1]
  if newest and newest[1] == '18446744073709551615-18446744073709551615' then
    return {-2, settled, 'stream_full'}
  end
  return false
end
"
    };
}

/// Lua for the done mark of `run --once-per D` (`P:{N}:done`, a hash):
/// read by `acquire`, written by `release` when CMD exited 0. Kept apart
/// from the lock and queue logic so each script only gains one call.
///
/// The mark holds the acquisition time (server ms), host, fencing token,
/// owner and window of the run that succeeded, and expires by itself at
/// acquisition + window (that instant less the server's now, as PEXPIRE:
/// the window counts from the acquisition, not from the release, no
/// host's clock takes part, and no command beyond the README's ACL line
/// is needed). `done_within` tells whether the mark is younger than the
/// caller's own window (callers may disagree on D: each is judged by its
/// own) and returns `{2, at_ms, age_ms, host, token}`, else false.
/// `arg_field` finds a field among the metadata pairs in ARGV.
macro_rules! done_mark {
    () => {
        r"
local function arg_field(first, name)
  for i = first, #ARGV - 1, 2 do
    if ARGV[i] == name then return ARGV[i + 1] end
  end
  return nil
end
local function done_within(done, now_ms, window)
  local m = redis.call('HMGET', done, 'at_ms', 'host', 'fencing_token')
  local at = tonumber(m[1])
  if at and window and now_ms - at < window then
    return {2, m[1], math.max(now_ms - at, 0), m[2] or '', m[3] or '0'}
  end
  return false
end
local function write_done(done, meta, owner, now_ms)
  local m = redis.call('HMGET', meta, 'acquired_ms', 'once_per_ms', 'host', 'token')
  local at, window = tonumber(m[1]), tonumber(m[2])
  if not (at and window) then return end
  redis.call('DEL', done)
  local left = at + window - now_ms
  -- A run that outlasted its window leaves no mark: the window is over.
  if left <= 0 then return end
  redis.call('HSET', done, 'at_ms', m[1], 'host', m[3] or '', 'fencing_token', m[4] or '',
    'owner', owner, 'once_per_ms', m[2])
  redis.call('PEXPIRE', done, string.format('%d', left))
end
"
    };
}

/// Lua for refreshing a held lease (a re-acquire by the same owner; RENEW
/// spells the same out): a renewal only ever extends. Anyone
/// who knows the owner id can renew (a CMD has it in `DISTLOCK_OWNER`), so
/// a shorter `--ttl` must not cut short the lease a `run` counts on, nor a
/// key that expires with it. A key without expiry (PTTL -1) is left so.
/// A later expiry is written again all the same (PTTL is exact within a
/// script, whose clock stands still), so that with `--min-replicas` the
/// WAIT behind the script counts replicas that have it, even when another
/// client set it.
macro_rules! extend {
    () => {
        r"
local function extend(key, ttl)
  local left = redis.call('PTTL', key)
  if left >= 0 then redis.call('PEXPIRE', key, math.max(left, tonumber(ttl))) end
end
"
    };
}

/// Lua shared by every script that hands out a fencing token: the next
/// token is `max(last + 1, the server's TIME in µs)`, stored back in the
/// counter. A counter lost to a restart without persistence, FLUSHALL,
/// eviction or a failover to a replica that missed it then still moves
/// past every earlier token, as long as this server's clock is not behind
/// the one that issued them. Returned as a decimal string: a Lua number
/// handed to `redis.call` becomes `1.8e+15`; callers reply with
/// `tonumber(token)`, exact below 2^53 (the year 2255 in µs).
macro_rules! next_token {
    () => {
        r"
local function next_token(fence)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local token = string.format('%d', math.max((tonumber(redis.call('GET', fence)) or 0) + 1, now))
  redis.call('SET', fence, token)
  return token
end
"
    };
}

/// Lua that adds a record to a run history (`P:{N}:history`): a LIST,
/// newest first, LPUSH then LTRIM to the newest `keep` (0 deletes it). A
/// list rather than a stream: the log is read newest first and a few at a
/// time (LRANGE 0 N-1), capped exactly by count (XADD MAXLEN without `~`
/// costs the same, but stream ids are times of the server, of no use to
/// a reader who wants the acquisition time), and lists exist on every
/// Redis distlock supports. Each entry is one JSON object: `tail` is the
/// record as distlock built it, and the start on the server's clock is
/// spliced in front as text. (cjson would re-encode every number as a
/// double with 14 digits, and fencing tokens are longer.) The start is the
/// lease's acquisition time (`meta`), else now less the duration. A record
/// already the newest (it names its run's owner) is not pushed again: a
/// release sent twice (`Store::once_more`) that finds the lease kept
/// records its run once.
macro_rules! record_history {
    () => {
        r#"
local function record_history(history, keep, duration_ms, tail, meta)
  keep = tonumber(keep)
  if not keep then return end
  if keep <= 0 then redis.call('DEL', history) return end
  local rest = string.sub(tail, 2)
  local newest = redis.call('LRANGE', history, 0, 0)[1]
  if newest and string.sub(newest, -#rest) == rest then return end
  local t = redis.call('TIME')
  local at = meta and tonumber(redis.call('HGET', meta, 'acquired_ms'))
  if not at then
    at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - (tonumber(duration_ms) or 0)
  end
  redis.call('LPUSH', history, '{"started_ms":' .. string.format('%d', at) .. ',' .. rest)
  redis.call('LTRIM', history, 0, keep - 1)
end
"#
    };
}

/// `acquire`: take the lease if it is free and no live waiter is ahead, or
/// refresh it if this owner already holds it (a retry after a lost reply
/// must not burn a token).
///
/// KEYS: lock, fence, meta, queue, deadlines, slots, limit (those two
/// only to refuse a name in use as a semaphore), turns, settled, and with
/// `--once-per` the done mark and the history. ARGV: owner, ttl ms, mode
/// (`once`: do not queue; `fair`: queue in arrival order; `any`: ignore the
/// queue), wake channel prefix, history keep count and record for a
/// skipped run ('' '' for none), then metadata field/value pairs. Its
/// reply: `Acquire` in `replies.rs`.
///
/// The busy reply's tail is what a waiter's status line shows, so that
/// the line costs no command of its own: the holder's host, pid and
/// command and how long it has held the lease by the server's clock (false
/// when unknown: HMGET on the metadata, O(1)), and for a `fair` waiter its
/// 0-based place in the queue (ZRANK, O(log N)).
///
/// `run --once-per D` adds KEYS[10], the done mark, KEYS[11], the history,
/// and `once_per_ms` among the metadata: when the lease would be ours but a
/// mark younger than D is there, the lease is not taken at all (no token
/// burnt, nothing to release, still one round trip): we leave the queue,
/// wake the next waiter (who finds the mark too), add the `skipped_done`
/// history record (see `record_history!`) and return the mark, `{2, at_ms,
/// age_ms, host, token}` (see `done_mark!`).
pub(super) static ACQUIRE: Script = Script::new(concat!(
    foreign_key!(),
    wake_next!(),
    refused!(),
    cannot_settle!(),
    done_mark!(),
    record_history!(),
    extend!(),
    next_token!(),
    r"
local expect = {KEYS[1], 'string', KEYS[2], 'counter+1', KEYS[3], 'hash', KEYS[4], 'zset', KEYS[5], 'zset', KEYS[6], 'zset', KEYS[7], 'string', KEYS[8], 'zset', KEYS[9], 'stream'}
if KEYS[10] then table.insert(expect, KEYS[10]) table.insert(expect, 'hash') end
if KEYS[11] and ARGV[5] ~= '' then table.insert(expect, KEYS[11]) table.insert(expect, 'list') end
local foreign = foreign_key(expect)
if foreign then return foreign end
local lock, fence, meta, queue, deadlines = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local turns, settled = KEYS[8], KEYS[9]
local owner, ttl, mode, chan = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('GET', lock)
if holder == false and redis.call('EXISTS', KEYS[6]) == 1 then
  local t = redis.call('TIME')
  if redis.call('ZCOUNT', KEYS[6], tonumber(t[1]) * 1000 + 1, '+inf') > 0 then
    return {-1, tonumber(redis.call('GET', KEYS[7]) or '0')}
  end
end
if holder == owner then
  extend(lock, ttl)
  extend(meta, ttl)
  return {1, tonumber(redis.call('GET', fence) or '0')}
end
local now = now_us()
local ahead = false
if holder == false and mode ~= 'any' then
  ahead = wake_next(queue, deadlines, turns, chan, owner)
end
if holder == false and not ahead then
  -- run --once-per: done already in this window?
  if KEYS[10] then
    local done = done_within(KEYS[10], math.floor(now / 1000), tonumber(arg_field(7, 'once_per_ms')))
    if done then
      local blocked = cannot_settle(settled)
      if blocked then return blocked end
      drop(queue, deadlines, turns, owner)
      if not wake_next(queue, deadlines, turns, chan, owner) then
        local full = settle(settled)
        if full then return full end
      end
      if KEYS[11] and ARGV[5] ~= '' then record_history(KEYS[11], ARGV[5], 0, ARGV[6], false) end
      return done
    end
  end
  -- The lease's own key is written last (see the top of this file), and
  -- the first write is one that may fail (`settle`) or the new token:
  -- Redis refuses a script's write for lack of memory only up to its
  -- first write, so out of memory (noeviction) ends the acquisition here,
  -- with nothing changed. The waiters promised a turn are told `claimed`
  -- only once the claim cannot fail.
  local promised = redis.call('ZRANGE', turns, 0, -1)
  local handed = #promised > 0
  local writes = {
    {'SET', fence, '1'}, {'ZREM', queue, owner}, {'ZREM', deadlines, owner},
    {'DEL', meta}, {'HSET', meta, 'token', '1'}, {'PEXPIRE', meta, ttl},
    {'SET', lock, owner, 'PX', ttl},
  }
  if handed then
    table.insert(writes, {'XADD', settled, 'MAXLEN', '1', '*', 'settled', '1'})
    table.insert(writes, {'PEXPIRE', settled, '10000'})
    table.insert(writes, {'DEL', turns})
  end
  local denied = refused(writes)
  if denied then return denied end
  if handed then
    local full = settle(settled)
    if full then return full end
  end
  end_turns(promised, chan, owner)
  local token = next_token(fence)
  if handed then redis.call('DEL', turns) end
  redis.call('ZREM', queue, owner)
  redis.call('ZREM', deadlines, owner)
  redis.call('DEL', meta)
  if #ARGV > 6 then
    redis.call('HSET', meta, 'acquired_ms', string.format('%d', math.floor(now / 1000)),
      'token', token, unpack(ARGV, 7))
    redis.call('PEXPIRE', meta, ttl)
  end
  redis.call('SET', lock, owner, 'PX', ttl)
  return {1, tonumber(token)}
end
local pttl = -2
if holder then pttl = redis.call('PTTL', lock) end
local place = false
if mode == 'fair' then
  -- Our place (0-based) for the status line, read before anything is
  -- written here: a user whose ACL predates ZRANK is refused with nothing
  -- changed. A newcomer joins at the end.
  place = redis.call('ZRANK', queue, owner)
  if not place then place = redis.call('ZCARD', queue) end
  -- Keep our place while we wait: we try again at least once per
  -- max(pttl, ttl), so twice that plus slack only lapses if we are gone.
  local keep = 2 * math.max(pttl, tonumber(ttl)) + 2000
  redis.call('ZADD', queue, 'NX', now, owner)
  redis.call('ZADD', deadlines, math.floor(now / 1000) + keep, owner)
  -- Free but promised to `ahead`: if we are among the next few, we hold
  -- a turn (just given, or given before: the attempt forgot it, so it is
  -- told again), as the release tells the others.
  if ahead then
    local now_ms = math.floor(now / 1000)
    local told = promise(queue, deadlines, turns, chan, now_ms)
    local mine = redis.call('ZSCORE', turns, owner)
    if mine and not told[owner] then
      local starts = math.max(tonumber(mine) - CLAIM_MS - now_ms, 0)
      redis.call('PUBLISH', chan .. owner, 'turn ' .. starts)
    end
  end
  for _, k in ipairs({queue, deadlines, turns}) do
    if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
  end
end
local who = {false, false, false, false}
if holder then
  who = redis.call('HMGET', meta, 'host', 'pid', 'command', 'acquired_ms')
  local at = tonumber(who[4])
  who[4] = at and string.format('%d', math.max(math.floor(now / 1000) - at, 0)) or false
end
return {0, holder, pttl, ahead, who[1], who[2], who[3], who[4], place}
"
));

/// `leave`: a waiter gives up (its wait ran out, or it was interrupted).
/// KEYS: lock, queue, deadlines, turns, settled. ARGV: owner, wake channel
/// prefix. If the lock is free, the next waiter is woken, since it may
/// have been waiting behind us (or for our turn to pass); with nobody left,
/// a releaser still seeing the hand-off through may go (`settle`). On a
/// free lock, a settle that would fail fails the call before the queue
/// changes (`cannot_settle`).
pub(super) static LEAVE: Script = Script::new(concat!(
    foreign_key!(),
    wake_next!(),
    refused!(),
    cannot_settle!(),
    r"
local foreign = foreign_key({KEYS[1], 'string', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5], 'stream'})
if foreign then return foreign end
local free = redis.call('EXISTS', KEYS[1]) == 0
if free then
  local blocked = cannot_settle(KEYS[5])
  if blocked then return blocked end
end
drop(KEYS[2], KEYS[3], KEYS[4], ARGV[1])
if free then
  if not wake_next(KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[1]) then
    local full = settle(KEYS[5])
    if full then return full end
  end
end
return 1
"
));

/// `relay`: the releaser's step when the last promised window has ended
/// and nobody has claimed (every waiter promised a turn was stopped or
/// frozen): drop them, wake the next live waiter and promise the ones
/// behind it, exactly as a release would. KEYS: lock, queue, deadlines,
/// turns, settled (type check only). ARGV: wake channel prefix. Returns
/// the ms until the new schedule ends, or -1 when there is nothing left to
/// see through (the lock is held, or nobody waits).
pub(super) static RELAY: Script = Script::new(concat!(
    foreign_key!(),
    wake_next!(),
    r"
local foreign = foreign_key({KEYS[1], 'string', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5], 'stream'})
if foreign then return foreign end
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if not wake_next(KEYS[2], KEYS[3], KEYS[4], ARGV[1], false) then return -1 end
return schedule_end(KEYS[4])
"
));

/// `renew`: compare-and-extend, never shorten (see `extend!`). KEYS: lock,
/// metadata, fence (only for its type check: a name whose counter was
/// overwritten is refused by every operation). ARGV: owner, ttl ms.
/// Returns 1 when the lease is ours and now lasts at least the ttl, 0 when
/// someone else (or nobody) holds the lock.
pub(super) static RENEW: Script = Script::new(concat!(
    foreign_key!(),
    r"
local foreign = foreign_key({KEYS[1], 'string', KEYS[2], 'hash', KEYS[3], 'counter'})
if foreign then return foreign end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- `extend!` for the lease and its metadata, one command a line.
  local ttl = tonumber(ARGV[2])
  local left = {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}
  if left[1] >= 0 then
    redis.call('PEXPIRE', KEYS[1], math.max(left[1], ttl))
  end
  if left[2] >= 0 then
    redis.call('PEXPIRE', KEYS[2], math.max(left[2], ttl))
  end
  return 1
end
return 0
"
));

/// Lua that writes the last-run record: a hash of the given field/value
/// pairs, replacing the previous one, kept for `keep` ms.
macro_rules! record_last_run {
    () => {
        r"
local function record_last_run(key, keep, first)
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(ARGV, first))
  redis.call('PEXPIRE', key, keep)
end
"
    };
}

/// Lua for the plain-lock scripts that must refuse a name in use as a
/// semaphore (users must agree on `--limit`): the semaphore's N when one of
/// its slots is live by the server's clock, else false.
macro_rules! semaphore_in_use {
    () => {
        r"
local function semaphore_in_use(slots, limit)
  if redis.call('EXISTS', slots) == 0 then return false end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('ZCOUNT', slots, now + 1, '+inf') == 0 then return false end
  return tonumber(redis.call('GET', limit) or '0')
end
"
    };
}

/// `release`: compare-and-delete, then wake the next waiter in line and
/// tell `--wait-order any` waiters, in the same round trip. A lease taken
/// with a minimum hold (`min_hold_ms` in its metadata) that has not run
/// yet is kept, by the server's clock, until the minimum has passed, but
/// for a grant given back unused (caller `unused`: CMD never started). `run`
/// also writes its last-run record here, so ending costs one round trip.
///
/// A lease a `run` holds (`run` in its metadata) is ended only by that
/// run (the caller `holder`): CMD knows the owner id, and a release by
/// owner (caller `owner`, the `release` subcommand) would let a second
/// holder in while CMD still runs. That refusal comes before anything is
/// written, the minimum hold's expiry included.
///
/// KEYS: lock, meta, queue, deadlines, last, slots, limit, turns, fence
/// (type check only), history, settled. ARGV: owner,
/// wake channel prefix, release channel, last-run keep ms ('' for no
/// record), caller (`holder`, `unused` or `owner`), history keep count
/// ('' for no record), duration ms, history record (see
/// `record_history!`), then the last-run record's field/value pairs. Its
/// reply: `Release` in `replies.rs`.
///
/// `run --once-per` whose CMD exited 0 adds KEYS[12], the done mark: it is
/// written from the lease's metadata (see `done_mark!`) only if the lease is
/// still ours, in the same round trip as the release.
pub(super) static RELEASE: Script = Script::new(concat!(
    foreign_key!(),
    wake_next!(),
    record_last_run!(),
    record_history!(),
    semaphore_in_use!(),
    done_mark!(),
    r"
local expect = {KEYS[1], 'string', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5], 'hash', KEYS[6], 'zset', KEYS[7], 'string', KEYS[8], 'zset', KEYS[9], 'counter', KEYS[11], 'stream'}
if ARGV[6] ~= '' then table.insert(expect, KEYS[10]) table.insert(expect, 'list') end
if KEYS[12] then table.insert(expect, KEYS[12]) table.insert(expect, 'hash') end
local foreign = foreign_key(expect)
if foreign then return foreign end
local holder = redis.call('GET', KEYS[1])
if holder == false then
  local n = semaphore_in_use(KEYS[6], KEYS[7])
  if n then return {-1, n} end
end
if holder ~= ARGV[1] then return {0, holder} end
local m = redis.call('HMGET', KEYS[2], 'acquired_ms', 'min_hold_ms', 'run')
if m[3] and ARGV[5] == 'owner' then return {3} end
-- Read before the first write: a command the ACL denies fails the release
-- with nothing changed.
local since = last_settled(KEYS[11])
if KEYS[12] then write_done(KEYS[12], KEYS[2], ARGV[1], math.floor(now_us() / 1000)) end
record_history(KEYS[10], ARGV[6], ARGV[7], ARGV[8], KEYS[2])
if ARGV[4] ~= '' then record_last_run(KEYS[5], ARGV[4], 9) end
local left = (tonumber(m[1]) or 0) + (tonumber(m[2]) or 0) - math.floor(now_us() / 1000)
-- The lease's own key is written last (see the top of this file).
if tonumber(m[2]) and left > 0 and ARGV[5] ~= 'unused' then
  redis.call('PEXPIRE', KEYS[2], left)
  redis.call('PEXPIRE', KEYS[1], left)
  return {2, left}
end
local woken = wake_next(KEYS[3], KEYS[4], KEYS[8], ARGV[2], false)
redis.call('PUBLISH', ARGV[3], 'released')
redis.call('DEL', KEYS[1], KEYS[2])
if woken then return {1, schedule_end(KEYS[8]), since} end
return {1}
"
));

/// The last-run record and the history record on their own, for a `run`
/// whose lease was lost or was never taken (`--once-per` found the job
/// done): no release to carry them. KEYS: last, history. ARGV: last-run
/// keep ms ('' for none), history keep count ('' for none), duration ms,
/// history record, then the last-run field/value pairs.
pub(super) static LAST_RUN: Script = Script::new(concat!(
    foreign_key!(),
    record_last_run!(),
    record_history!(),
    r"
local expect = {}
if ARGV[1] ~= '' then table.insert(expect, KEYS[1]) table.insert(expect, 'hash') end
if ARGV[2] ~= '' then table.insert(expect, KEYS[2]) table.insert(expect, 'list') end
local foreign = foreign_key(expect)
if foreign then return foreign end
record_history(KEYS[2], ARGV[2], ARGV[3], ARGV[4], false)
if ARGV[1] ~= '' then record_last_run(KEYS[1], ARGV[1], 5) end
return 1
"
));

/// `distlock history`: the newest records. KEYS: history. ARGV: how many.
pub(super) static HISTORY: Script = Script::new(concat!(
    foreign_key!(),
    r"
local foreign = foreign_key({KEYS[1], 'list'})
if foreign then return foreign end
return redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
"
));

/// `release --forget-done`: delete the done mark of `run --once-per`, and
/// only it (a held lease is left alone). KEYS: done mark. Returns the mark
/// that was there (field/value pairs, empty if none).
pub(super) static FORGET_DONE: Script = Script::new(concat!(
    foreign_key!(),
    r"
local foreign = foreign_key({KEYS[1], 'hash'})
if foreign then return foreign end
local mark = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return mark
"
));

/// `release --force`: delete whoever holds the lock, leave the fencing
/// counter alone, wake the next waiter. KEYS: lock, meta, queue,
/// deadlines, slots, limit, turns, fence (type check only); ARGV: wake
/// channel prefix, release channel. Its reply: `Evicted` in `replies.rs`.
pub(super) static FORCE_RELEASE: Script = Script::new(concat!(
    foreign_key!(),
    wake_next!(),
    semaphore_in_use!(),
    r"
local foreign = foreign_key({KEYS[1], 'string', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5], 'zset', KEYS[6], 'string', KEYS[7], 'zset', KEYS[8], 'counter'})
if foreign then return foreign end
local holder = redis.call('GET', KEYS[1])
if holder == false then
  local n = semaphore_in_use(KEYS[5], KEYS[6])
  if n then return {-1, n} end
end
-- The lease's own key is written last (see the top of this file).
if holder then
  wake_next(KEYS[3], KEYS[4], KEYS[7], ARGV[1], false)
  redis.call('PUBLISH', ARGV[2], 'released')
  redis.call('DEL', KEYS[1], KEYS[2])
end
return holder
"
));

/// `inspect`: one consistent snapshot. KEYS: lock, fence, metadata, last
/// run, slots, limit, done mark. Returns `{holder|nil, pttl, last
/// token|nil, {metadata…}, {last run…}, N|nil, {done mark…}, its pttl}`, N
/// when the name is in use as a semaphore of N.
pub(super) static INSPECT: Script = Script::new(concat!(
    foreign_key!(),
    semaphore_in_use!(),
    r"
local foreign = foreign_key({KEYS[1], 'string', KEYS[2], 'counter', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'zset', KEYS[6], 'string', KEYS[7], 'hash'})
if foreign then return foreign end
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('HGETALL', KEYS[3]),
  redis.call('HGETALL', KEYS[4]),
  semaphore_in_use(KEYS[5], KEYS[6]),
  redis.call('HGETALL', KEYS[7]),
  redis.call('PTTL', KEYS[7]),
}
"
));

/// Lua shared by the semaphore scripts (`--limit N`). Each holder has its
/// own slot: `slots` is a zset owner → expiry (server ms), so expired slots
/// are reclaimed on the server's clock, never a client's. `tokens` maps
/// owner → fencing token, and `owner .. ' run'` → 1 for a slot a `run`
/// holds (an owner id has no spaces), which only that run may release;
/// `limit` holds the N every user must agree on. All three keys expire
/// with the latest slot.
macro_rules! slots {
    () => {
        r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function reclaim(slots, tokens, now)
  for _, o in ipairs(redis.call('ZRANGEBYSCORE', slots, '-inf', now)) do
    redis.call('ZREM', slots, o)
    redis.call('HDEL', tokens, o, o .. ' run')
  end
end
local function keep(slots, limit, tokens, now)
  local top = redis.call('ZRANGE', slots, -1, -1, 'WITHSCORES')[2]
  if not top then return end
  local left = math.max(tonumber(top) - now, 1)
  for _, k in ipairs({slots, limit, tokens}) do redis.call('PEXPIRE', k, left) end
end
"
    };
}

/// `acquire --limit N`: take a free slot, or refresh ours.
/// KEYS: slots, limit, tokens, fence, plain lock. ARGV: owner, ttl ms, N,
/// `run` when a `run` takes it (else ''). Its reply: `Acquire` in
/// `replies.rs`, the holder whose slot expires first when busy.
pub(super) static ACQUIRE_SLOT: Script = Script::new(concat!(
    foreign_key!(),
    slots!(),
    refused!(),
    next_token!(),
    r"
local foreign = foreign_key({KEYS[1], 'zset', KEYS[2], 'string', KEYS[3], 'hash', KEYS[4], 'counter+1', KEYS[5], 'string'})
if foreign then return foreign end
local slots, limit, tokens, fence, plain = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
reclaim(slots, tokens, now)
if redis.call('EXISTS', plain) == 1 then return {-1, 0} end
local held = redis.call('ZCARD', slots)
local agreed = tonumber(redis.call('GET', limit))
if held > 0 and agreed and agreed ~= n then return {-1, agreed} end
local mine = redis.call('ZSCORE', slots, owner)
if mine then
  -- A refresh only ever extends, as `extend!` says for a plain lock.
  redis.call('ZADD', slots, 'XX', math.max(tonumber(mine), now + ttl), owner)
  keep(slots, limit, tokens, now)
  return {1, tonumber(redis.call('HGET', tokens, owner) or '0')}
end
if held < n then
  -- The slot itself is written last (see the top of this file), and every
  -- write is checked first: a refused ZADD must not leave a token burnt.
  local writes = {
    {'SET', fence, '1'}, {'HSET', tokens, owner, '1'}, {'SET', limit, '1'},
    {'ZADD', slots, '1', owner}, {'PEXPIRE', slots, '1'},
  }
  local denied = refused(writes)
  if denied then return denied end
  local token = next_token(fence)
  redis.call('HSET', tokens, owner, token)
  if ARGV[4] == 'run' then redis.call('HSET', tokens, owner .. ' run', 1) end
  redis.call('SET', limit, n)
  redis.call('ZADD', slots, now + ttl, owner)
  keep(slots, limit, tokens, now)
  return {1, tonumber(token)}
end
local first = redis.call('ZRANGE', slots, 0, 0, 'WITHSCORES')
return {0, first[1], tonumber(first[2]) - now}
"
));

/// `renew --limit N`: extend our slot if it is still live (never shorten).
/// KEYS: slots, limit, tokens, fence and plain lock (these two for the
/// type check only). ARGV: owner, ttl ms. Returns 1 or 0.
pub(super) static RENEW_SLOT: Script = Script::new(concat!(
    foreign_key!(),
    slots!(),
    r"
local foreign = foreign_key({KEYS[1], 'zset', KEYS[2], 'string', KEYS[3], 'hash', KEYS[4], 'counter', KEYS[5], 'string'})
if foreign then return foreign end
local now = now_ms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) > now then
  -- Only ever extends, as `extend!` says for a plain lock.
  redis.call('ZADD', KEYS[1], 'XX', math.max(tonumber(s), now + tonumber(ARGV[2])), ARGV[1])
  keep(KEYS[1], KEYS[2], KEYS[3], now)
  return 1
end
reclaim(KEYS[1], KEYS[3], now)
return 0
"
));

/// `release --limit N`: free our slot and tell waiters.
/// KEYS: slots, limit, tokens, plain lock, fence (type check only). ARGV:
/// owner, release channel, N, caller (`holder`, `unused` or `owner`, as for
/// `RELEASE`: a slot a `run` holds is released only by that run). Its
/// reply: `Release` in `replies.rs`.
pub(super) static RELEASE_SLOT: Script = Script::new(concat!(
    foreign_key!(),
    slots!(),
    r"
local foreign = foreign_key({KEYS[1], 'zset', KEYS[2], 'string', KEYS[3], 'hash', KEYS[4], 'string', KEYS[5], 'counter'})
if foreign then return foreign end
local now = now_ms()
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
reclaim(KEYS[1], KEYS[3], now)
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1, 0} end
local agreed = tonumber(redis.call('GET', KEYS[2]))
if agreed and agreed ~= tonumber(ARGV[3]) and redis.call('ZCARD', KEYS[1]) > 0 then
  return {-1, agreed}
end
-- The slot itself is written last (see the top of this file).
if s and tonumber(s) > now then
  if ARGV[4] == 'owner' and redis.call('HGET', KEYS[3], ARGV[1] .. ' run') then return {3} end
  redis.call('PUBLISH', ARGV[2], 'released')
  redis.call('HDEL', KEYS[3], ARGV[1], ARGV[1] .. ' run')
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {1}
end
return {0}
"
));

/// `release --force --limit N`: free every slot; returns the evicted
/// owners, or `{-1, the N in use}` as `release --limit N` does.
/// KEYS: slots, limit, tokens, plain lock, fence (type check only). ARGV:
/// release channel, N.
pub(super) static FORCE_RELEASE_SLOTS: Script = Script::new(concat!(
    foreign_key!(),
    slots!(),
    r"
local foreign = foreign_key({KEYS[1], 'zset', KEYS[2], 'string', KEYS[3], 'hash', KEYS[4], 'string', KEYS[5], 'counter'})
if foreign then return foreign end
local now = now_ms()
reclaim(KEYS[1], KEYS[3], now)
if redis.call('EXISTS', KEYS[4]) == 1 then return {-1, 0} end
local agreed = tonumber(redis.call('GET', KEYS[2]))
if agreed and agreed ~= tonumber(ARGV[2]) and redis.call('ZCARD', KEYS[1]) > 0 then
  return {-1, agreed}
end
local all = redis.call('ZRANGE', KEYS[1], 0, -1)
-- The slots are written last (see the top of this file).
if #all > 0 then redis.call('PUBLISH', ARGV[1], 'released') end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return all
"
));

/// `inspect` of a semaphore: `{N|nil, {owner, ms left, token, …}, last token,
/// {last run…}, 1 if the name is held as a plain lock}`. KEYS: slots,
/// limit, tokens, fence, last run, plain lock.
pub(super) static INSPECT_SLOTS: Script = Script::new(concat!(
    foreign_key!(),
    slots!(),
    r"
local foreign = foreign_key({KEYS[1], 'zset', KEYS[2], 'string', KEYS[3], 'hash', KEYS[4], 'counter', KEYS[5], 'hash', KEYS[6], 'string'})
if foreign then return foreign end
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
));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_time_sha1_is_what_redis_computes() {
        for script in ALL {
            assert_eq!(
                script.get_hash(),
                redis::Script::new(script.code()).get_hash(),
                "{}",
                script.code()
            );
        }
        // The edge cases of SHA-1 padding: empty, 55 and 56 bytes (the
        // length spills into a second block), 64 bytes.
        for len in [0, 1, 55, 56, 63, 64, 65, 119, 120, 1000] {
            let text = "x".repeat(len);
            let bytes = sha1_hex(text.as_bytes());
            assert_eq!(
                std::str::from_utf8(&bytes).unwrap(),
                redis::Script::new(&text).get_hash(),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn all_lists_every_script_once() {
        let defined = include_str!("scripts.rs")
            .lines()
            .filter(|l| {
                l.starts_with("pub(super) static ") && l.contains(": Script = Script::new(")
            })
            .count();
        assert_eq!(defined, ALL.len());
        let mut shas: Vec<_> = ALL.iter().map(|s| s.get_hash()).collect();
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(shas.len(), ALL.len());
    }

    #[test]
    fn evalsha_is_sent_as_redis_rs_sends_it() {
        let ours = {
            let mut inv = RENEW.keys(&["p:{n}"]);
            inv.key("p:{n}:meta")
                .key(&["a", "b"][..])
                .arg("owner")
                .arg(30_000u64);
            redis::pipe()
                .add_command(inv.eval_cmd())
                .get_packed_pipeline()
        };
        let theirs = {
            let script = redis::Script::new(RENEW.code());
            let mut inv = script.key("p:{n}");
            inv.key("p:{n}:meta")
                .key(&["a", "b"][..])
                .arg("owner")
                .arg(30_000u64);
            redis::pipe().invoke_script(&inv).get_packed_pipeline()
        };
        assert_eq!(ours, theirs);
        let load = redis::pipe()
            .add_command(RENEW.load_cmd())
            .get_packed_pipeline();
        let script = redis::Script::new(RENEW.code());
        assert_eq!(
            load,
            redis::pipe().load_script(&script).get_packed_pipeline()
        );
    }

    #[test]
    fn commands_on_a_line_are_found_by_sha() {
        let line = RENEW
            .code()
            .lines()
            .position(|l| l.contains("redis.call('GET', KEYS[1])"))
            .unwrap()
            + 1;
        assert_eq!(script_commands(RENEW.get_hash(), line), ["GET"]);
        assert!(script_commands("0000", line).is_empty());
    }
}
