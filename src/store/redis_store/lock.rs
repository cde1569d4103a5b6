//! The operations on a plain lock (`P:{N}` and its fence, metadata, wait
//! queue, last-run record and `--once-per` done mark). Each is one script,
//! one round trip. With `--limit N` the same calls go to `semaphore.rs`,
//! so callers need not know which kind of name they hold.

use super::replies::{Evicted, ForgetDoneReply, Limited, Renewed};
use super::scripts::*;
use super::{
    Acquire, DoneMark, Handoff, History, HistoryRecord, LockInfo, LockKeys, Mode, Release, Result,
    RunRecord, Store, StoreError,
};
use redis::Value;
use std::time::Duration;

/// How long after the last promised window the releaser acts: the server
/// times the wait out, and `RELAY` must find that window passed by TIME.
const RELAY_SLACK: Duration = Duration::from_millis(5);

/// The longest a releaser stays to see its hand-off through: two
/// schedules of promised turns (the release's and one `RELAY`'s, three
/// claim windows of 0.9 s each), so up to six stopped waiters in a row
/// cost the next live one 0.9 s each. Past that the releaser goes (its
/// caller, a `run` or `release`, must not hang on other people's stopped
/// jobs) and the live waiter moves the queue on by its own retries
/// (guarantees.md §5).
pub(super) const MAX_STAY: Duration = Duration::from_millis(2 * 3 * 900);

impl Store {
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
            // `run` marks its lease in the metadata; a slot carries the mark.
            let by_run = meta.iter().any(|(k, _)| *k == "run");
            return self.acquire_slot(keys, owner, ttl_ms, n, by_run);
        }
        let once_per_ms = keys.once_per.map(|d| d.as_millis().max(1).to_string());
        let (reply, acks) = self.call_acked("acquire", &ACQUIRE, ttl_ms, || {
            let mut inv = invocation!(ACQUIRE, keys;
                lock, fence, meta, queue, deadlines, slots, limit_key, turns, settled);
            // `--once-per`: KEYS[10], the done mark, and KEYS[11], the
            // history, after every other key.
            if once_per_ms.is_some() {
                inv.key(&keys.done).key(&keys.history);
            }
            inv.arg(owner)
                .arg(ttl_ms)
                .arg(mode.as_arg())
                .arg(&keys.wake_prefix);
            match keys.skip_record.as_ref().filter(|_| once_per_ms.is_some()) {
                Some((keep, record)) => inv.arg(*keep).arg(record),
                None => inv.arg("").arg(""),
            };
            for (k, v) in meta {
                inv.arg(*k).arg(*v);
            }
            if let Some(ms) = &once_per_ms {
                // Kept in the lease's metadata: the release that writes the
                // mark reads the window from there.
                inv.arg("once_per_ms").arg(ms);
            }
            inv
        })?;
        self.acquired(keys, owner, Limited::<Acquire>::of(reply, keys)?, acks)
    }

    /// What an acquire reply means, with `--min-replicas`: a lease taken
    /// but acknowledged by too few replicas is released again at once (a
    /// failover could lose it) and reported as such. (A done mark took no
    /// lease, so there is nothing for replicas to keep.)
    pub(super) fn acquired(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        reply: Acquire,
        acks: i64,
    ) -> Result<Acquire> {
        if matches!(reply, Acquire::Acquired { .. }) && acks < i64::from(self.min_replicas) {
            self.release(keys, owner)?;
            return Ok(Acquire::Unacknowledged);
        }
        Ok(reply)
    }

    /// Leaves the wait queue (best effort: a waiter that vanishes is
    /// dropped by the next release anyway).
    pub fn leave(&mut self, keys: &LockKeys, owner: &str) -> Result<()> {
        self.route(keys)?;
        let _: Value = self.call("leaving the queue", |c| {
            invocation!(LEAVE, keys; lock, queue, deadlines, turns, settled)
                .arg(owner)
                .arg(&keys.wake_prefix)
                .invoke(c)
        })?;
        Ok(())
    }

    /// `Store::relay`: reads `settled` past the entry the release saw
    /// (XREAD BLOCK, timed out by the server) until the promised turns
    /// have passed, then runs `RELAY`, which wakes the next waiter and
    /// promises the next turns; again until the hand-off settles. The
    /// call's own deadline is the wait plus the usual timeout.
    pub fn relay(&mut self, keys: &LockKeys, handoff: Handoff) -> Result<()> {
        self.route(keys)?;
        let timeout = self.timeout;
        let mut left = handoff.until;
        let stay_ends = std::time::Instant::now() + MAX_STAY + RELAY_SLACK;
        loop {
            // Whole ms, at least one: XREAD BLOCK 0 would block for ever.
            let stay = stay_ends.saturating_duration_since(std::time::Instant::now());
            if stay < Duration::from_millis(1) {
                return Ok(());
            }
            // A schedule that ends past the stay is not seen through: no
            // RELAY after it, the waiters' own retries go on from there.
            let wait = (left + RELAY_SLACK).min(stay);
            let last = wait == stay;
            self.timeout = timeout + wait;
            let read: Result<Value> = self.call_raw("waiting for the next holder's claim", |c| {
                redis::cmd("XREAD")
                    .arg("BLOCK")
                    .arg(wait.as_millis() as u64)
                    .arg("STREAMS")
                    .arg(&keys.settled)
                    .arg(&handoff.since)
                    .query(c)
            });
            self.timeout = timeout;
            if read? != Value::Nil || last {
                return Ok(());
            }
            let next: i64 = self.call("handing the lock on", |c| {
                invocation!(RELAY, keys; lock, queue, deadlines, turns, settled)
                    .arg(&keys.wake_prefix)
                    .invoke(c)
            })?;
            if next < 0 {
                return Ok(());
            }
            left = Duration::from_millis(next as u64);
        }
    }

    /// Extends the lease if `owner` still holds it. Ok(false) means the lease
    /// is gone (expired, deleted, or taken by someone else). A renewal that
    /// too few replicas acknowledged is [`StoreError::Unacknowledged`]: not
    /// confirmed.
    pub fn renew(&mut self, keys: &LockKeys, owner: &str, ttl_ms: u64) -> Result<bool> {
        self.route(keys)?;
        let (Renewed(renewed), acks) = if keys.limit.is_some() {
            self.renew_slot(keys, owner, ttl_ms)?
        } else {
            self.call_acked("renewal", &RENEW, ttl_ms, || {
                let mut inv = invocation!(RENEW, keys; lock, meta, fence);
                inv.arg(owner).arg(ttl_ms);
                inv
            })?
        };
        if renewed && acks < i64::from(self.min_replicas) {
            return Err(StoreError::Unacknowledged {
                acks,
                wanted: self.min_replicas,
            });
        }
        Ok(renewed)
    }

    /// Deletes the lease if `owner` holds it (compare-and-delete), as the
    /// process that took it (`run`, `hold`, `acquire` cleaning up).
    pub fn release(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        self.release_recording(keys, owner, RunRecord::default(), false)
    }

    /// `release` of a grant CMD never ran under: a minimum hold is not kept.
    pub fn give_back(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        self.release_as(keys, owner, RunRecord::default(), false, "unused")
    }

    /// `release` by owner for someone who merely knows the owner id (the
    /// `release` subcommand): a lease a `run` holds is not ended so, only
    /// by that run ([`Release::HeldByRun`]).
    pub fn release_by_owner(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        self.release_as(keys, owner, RunRecord::default(), false, "owner")
    }

    /// `release`, writing `run`'s last-run and history records in the
    /// same round trip, and with `mark_done` (`run --once-per` whose CMD
    /// exited 0) the done mark, if the lease is still ours.
    pub fn release_recording(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        record: RunRecord,
        mark_done: bool,
    ) -> Result<Release> {
        self.release_as(keys, owner, record, mark_done, "holder")
    }

    /// The release script, for `caller` `holder` (the process that took
    /// the lease) or `owner` (see `RELEASE`).
    fn release_as(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        record: RunRecord,
        mark_done: bool,
        caller: &str,
    ) -> Result<Release> {
        self.route(keys)?;
        if keys.limit.is_some() {
            return self.release_slot(keys, owner, record, caller);
        }
        let reply: Limited<Release> = self.call("release", |c| {
            let mut inv = invocation!(RELEASE, keys; lock, meta, queue, deadlines, last, slots,
                limit_key, turns, fence, history, settled);
            // KEYS[12], the done mark, only when it is to be written.
            if mark_done && keys.once_per.is_some() {
                inv.key(&keys.done);
            }
            inv.arg(owner).arg(&keys.wake_prefix).arg(&keys.released);
            record.args(&mut inv, Some(caller));
            inv.invoke(c)
        })?;
        reply.of(keys)
    }

    /// Writes the last-run and history records alone (when there is no
    /// release to carry them).
    pub fn record_run(&mut self, keys: &LockKeys, record: RunRecord) -> Result<()> {
        if record.is_empty() {
            return Ok(());
        }
        self.route(keys)?;
        let _: Value = self.call("recording the run", |c| {
            let mut inv = invocation!(LAST_RUN, keys; last, history);
            record.args(&mut inv, None);
            inv.invoke(c)
        })?;
        Ok(())
    }

    /// `release --forget-done`: deletes the done mark only (a held lease is
    /// left alone); returns the mark that was there.
    pub fn forget_done(&mut self, keys: &LockKeys) -> Result<Option<DoneMark>> {
        self.route(keys)?;
        let ForgetDoneReply(mark) = self.call("forgetting the done mark", |c| {
            invocation!(FORGET_DONE, keys; done).invoke(c)
        })?;
        Ok(mark)
    }

    /// Deletes the lease whoever holds it; returns the evicted holder (for
    /// a semaphore: every holder, comma-separated).
    pub fn force_release(&mut self, keys: &LockKeys) -> Result<Option<String>> {
        self.route(keys)?;
        let reply: Limited<Evicted> = if keys.limit.is_some() {
            self.force_release_slots(keys)?
        } else {
            self.call("forced release", |c| {
                invocation!(FORCE_RELEASE, keys; lock, meta, queue, deadlines, slots, limit_key,
                    turns, fence)
                .arg(&keys.wake_prefix)
                .arg(&keys.released)
                .invoke(c)
            })?
        };
        let Evicted(owners) = reply.of(keys)?;
        Ok((!owners.is_empty()).then(|| owners.join(", ")))
    }

    /// Reads holder, remaining lease, last token and metadata atomically.
    pub fn inspect(&mut self, keys: &LockKeys) -> Result<LockInfo> {
        self.route(keys)?;
        let info: LockInfo = self.call("inspect", |c| {
            invocation!(INSPECT, keys; lock, fence, meta, last, slots, limit_key, done).invoke(c)
        })?;
        if let Some(n) = info.semaphore {
            return Err(StoreError::limit_mismatch(keys, n));
        }
        Ok(info)
    }

    /// `inspect` for many locks in pipelined batches: one round trip per
    /// batch rather than per lock, so `list` stays quick with thousands of
    /// keys. Locks released between the SCAN and now come back free; a lock
    /// with a key of another type comes back as that [`super::ForeignKey`],
    /// so `list` can skip it and still show the others.
    pub fn inspect_many(
        &mut self,
        keys: &[LockKeys],
    ) -> Result<Vec<std::result::Result<LockInfo, super::ForeignKey>>> {
        if self.target.cluster.is_some() {
            // Keys live on different nodes: one at a time, each routed.
            return keys
                .iter()
                .map(|k| match self.inspect(k) {
                    Ok(info) => Ok(Ok(info)),
                    Err(StoreError::WrongType(fk)) => Ok(Err(fk)),
                    Err(e) => Err(e),
                })
                .collect();
        }
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(500) {
            let replies: Vec<Value> = self.call_raw("inspect", |c| {
                // Pipelines get no NOSCRIPT recovery: load first, in the
                // same round trip.
                let mut p = redis::pipe();
                p.add_command(INSPECT.load_cmd()).ignore();
                let invocations: Vec<_> = batch
                    .iter()
                    .map(|k| invocation!(INSPECT, k; lock, fence, meta, last, slots, limit_key, done))
                    .collect();
                for inv in &invocations {
                    p.add_command(inv.eval_cmd());
                }
                p.query(c)
            })?;
            for v in replies {
                out.push(match super::replies::foreign_key(&v) {
                    Some(fk) => Err(fk),
                    None => Ok(self.parse("inspect", v)?),
                });
            }
        }
        Ok(out)
    }

    /// The newest `n` entries of `keys`' history, newest first. An entry
    /// distlock cannot read is counted and skipped, not an error: the
    /// list is distlock's (a key of another type is refused by name), a
    /// `run`'s release pushes onto it all the same, and the stray entry
    /// ages out like any record; one unreadable entry must not hide every
    /// run from the operator.
    pub fn history(&mut self, keys: &LockKeys, n: u32) -> Result<History> {
        self.route(keys)?;
        if n == 0 {
            return Ok(History::default());
        }
        let items: Vec<Value> = self.call("reading the history", |c| {
            invocation!(HISTORY, keys; history).arg(n).invoke(c)
        })?;
        let mut history = History::default();
        for v in &items {
            match v {
                Value::BulkString(b) => match HistoryRecord::parse(b) {
                    Some(r) => history.records.push(r),
                    None => history.foreign += 1,
                },
                _ => history.foreign += 1,
            }
        }
        Ok(history)
    }
}
