//! The operations on a semaphore of N holders (`--limit N`): slots in
//! `P:{N}:slots` (owner → expiry, server ms), their fencing tokens in
//! `P:{N}:tokens`, and the N every user must agree on in `P:{N}:limit`.
//! Reached through the same `Store` calls as a plain lock (`lock.rs`
//! dispatches on `LockKeys::limit`), except `inspect_slots`.

use super::replies::{Evicted, Limited, Renewed, SlotsReply};
use super::scripts::*;
use super::{Acquire, LockKeys, Release, Result, RunRecord, SlotsInfo, Store, StoreError};

impl Store {
    /// `acquire` of one of `n` slots.
    pub(super) fn acquire_slot(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        ttl_ms: u64,
        n: u32,
        by_run: bool,
    ) -> Result<Acquire> {
        let (reply, acks) = self.call_acked("acquire", &ACQUIRE_SLOT, ttl_ms, || {
            let mut inv = invocation!(ACQUIRE_SLOT, keys; slots, limit_key, tokens, fence, lock);
            inv.arg(owner).arg(ttl_ms).arg(n);
            inv.arg(if by_run { "run" } else { "" });
            inv
        })?;
        let mut reply = Limited::<Acquire>::of(reply, keys)?;
        // A slot is never promised to a waiter ahead: no queue.
        if let Acquire::Busy { ahead, .. } = &mut reply {
            *ahead = None;
        }
        self.acquired(keys, owner, reply, acks)
    }

    /// `renew` of our slot: the reply and the replicas that acknowledged it.
    pub(super) fn renew_slot(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        ttl_ms: u64,
    ) -> Result<(Renewed, i64)> {
        self.call_acked("renewal", &RENEW_SLOT, ttl_ms, || {
            let mut inv = invocation!(RENEW_SLOT, keys; slots, limit_key, tokens, fence, lock);
            inv.arg(owner).arg(ttl_ms);
            inv
        })
    }

    /// `release_recording` of our slot; the last-run record, if any, is
    /// written by a second call (the slot script does not carry it).
    /// `caller` as for `RELEASE_SLOT`.
    pub(super) fn release_slot(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        record: RunRecord,
        caller: &str,
    ) -> Result<Release> {
        let reply: Limited<Release> = self.call("release", |c| {
            invocation!(RELEASE_SLOT, keys; slots, limit_key, tokens, lock, fence)
                .arg(owner)
                .arg(&keys.released)
                .arg(keys.limit.unwrap_or(1))
                .arg(caller)
                .invoke(c)
        })?;
        let released = reply.of(keys)?;
        self.record_run(keys, record)?;
        Ok(released)
    }

    /// `force_release` of every slot.
    pub(super) fn force_release_slots(&mut self, keys: &LockKeys) -> Result<Limited<Evicted>> {
        self.call("forced release", |c| {
            invocation!(FORCE_RELEASE_SLOTS, keys; slots, limit_key, tokens, lock, fence)
                .arg(&keys.released)
                .arg(keys.limit.unwrap_or(1))
                .invoke(c)
        })
    }

    /// A semaphore's agreed N, its live holders (owner, time left, token)
    /// and the last token issued, atomically.
    pub fn inspect_slots(&mut self, keys: &LockKeys) -> Result<SlotsInfo> {
        self.route(keys)?;
        let reply: SlotsReply = self.call("inspect", |c| {
            invocation!(INSPECT_SLOTS, keys; slots, limit_key, tokens, fence, last, lock).invoke(c)
        })?;
        if reply.plain {
            return Err(StoreError::limit_mismatch(keys, 0));
        }
        Ok(reply.info)
    }
}
