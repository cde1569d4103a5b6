//! `--min-hold` on etcd: the lock stays held until the minimum hold has
//! passed, counted by etcd, not by a host's clock, as on Redis.
//!
//! The hold lease, `P:{N}:hold` and the release that moves `P:{N}` onto
//! it: docs/data-model.md. etcd raises a hold shorter than its minimum
//! TTL (2 s with default timings); the moved key keeps its create
//! revision (the token); once the hold lease has expired, the key is gone
//! with it and the release deletes as usual.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, TxnOp};

use super::record::EndWrites;
use super::semaphore::{absent, Ec};
use super::{lease_now, time_left, AtZero};
use super::{LockKeys, Release, Result};

/// `P:{N}:hold`.
pub(super) fn hold_key(keys: &LockKeys) -> String {
    format!("{}:hold", keys.lock)
}

/// The hold lease's TTL for a `min_hold_ms` in the holder metadata, in
/// whole seconds, rounded up; None without one.
pub(super) fn hold_secs(meta: &[(&str, &str)]) -> Option<i64> {
    let (_, ms) = meta.iter().find(|(k, _)| *k == "min_hold_ms")?;
    let ms: u64 = ms.parse().ok()?;
    i64::try_from(ms.div_ceil(1000).max(1)).ok()
}

/// Grants the hold lease, if there is a minimum hold.
pub(super) async fn grant(c: &mut Client, secs: Option<i64>) -> Ec<Option<i64>> {
    match secs {
        Some(s) => Ok(Some(super::grant(c, s).await?)),
        None => Ok(None),
    }
}

/// The put of `P:{N}:hold` for the acquiring transaction.
pub(super) fn put(keys: &LockKeys, owner: &str, lease: i64) -> TxnOp {
    let under = PutOptions::new().with_lease(lease);
    TxnOp::put(hold_key(keys), owner, Some(under))
}

impl super::Store {
    /// `release` of a grant CMD never ran under: the hold lease goes first.
    pub fn give_back(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        let (hold, me) = (hold_key(keys), owner.to_owned());
        self.call("release", |mut c| async move {
            let kv = ours(&mut c, &hold, &me).await?;
            super::revoke_leases(&mut c, kv.map(|kv| kv.lease())).await;
            Ok(())
        })?;
        self.release(keys, owner)
    }

    /// Keeps our lock for the rest of its minimum hold, if any is left:
    /// the time left, or None when the release should go ahead. With
    /// `unless_run`, a lock a `run` marks is not touched (the release then
    /// refuses it as usual). `end`, a run's records and done mark, is
    /// written by the same transaction that keeps the lock, so a kept
    /// lock never lacks its done mark.
    pub(super) fn keep_for_min_hold(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        unless_run: bool,
        end: EndWrites,
    ) -> Result<Option<Duration>> {
        let (lock, hold, marker) = (keys.lock.clone(), hold_key(keys), keys.meta.clone());
        let me = owner.to_owned();
        self.call("release", |mut c| async move {
            let Some(h) = ours(&mut c, &hold, &me).await? else {
                return Ok(None);
            };
            // An error here is an error: read as "no hold", it would
            // release the lock before its minimum hold.
            let lease = lease_now(&mut c, h.lease()).await?;
            let Some(left) = lease.and_then(|r| time_left(r.ttl(), AtZero::Gone)) else {
                return Ok(None);
            };
            let Some(l) = ours(&mut c, &lock, &me).await? else {
                return Ok(None);
            };
            let (mut ops, _, settle) = end.prepare(&mut c, Default::default(), None).await?;
            let mut when = vec![
                Compare::mod_revision(lock.clone(), CompareOp::Equal, l.mod_revision()),
                Compare::mod_revision(hold, CompareOp::Equal, h.mod_revision()),
            ];
            if unless_run {
                when.push(absent(marker));
            }
            // Kept already by an earlier release: only the records, if any.
            let moving = l.lease() != h.lease();
            if moving {
                let under = PutOptions::new().with_lease(h.lease());
                ops.push(TxnOp::put(lock, me, Some(under)));
            }
            let written = if ops.is_empty() {
                Some(Vec::new())
            } else {
                let txn = etcd_client::Txn::new().when(when).and_then(ops);
                let resp = c.txn(txn).await?;
                let replies = super::replies::op_responses(&resp)?;
                Some(replies).filter(|_| resp.succeeded())
            };
            settle.after(&mut c, written.as_deref()).await?;
            if written.is_none() {
                return Ok(None);
            }
            if moving && l.lease() != 0 {
                let _ = c.lease_revoke(l.lease()).await;
            }
            Ok(Some(left))
        })
    }
}

/// The key `key` if it holds `me`.
async fn ours(c: &mut Client, key: &str, me: &str) -> Ec<Option<etcd_client::KeyValue>> {
    let got = c.get(key, None).await?;
    let kv = got.kvs().first().filter(|kv| kv.value() == me.as_bytes());
    Ok(kv.cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimum_hold_is_rounded_up_to_whole_seconds() {
        assert_eq!(hold_secs(&[("min_hold_ms", "1500")]), Some(2));
        assert_eq!(hold_secs(&[("min_hold_ms", "3000")]), Some(3));
        assert_eq!(hold_secs(&[("min_hold_ms", "1")]), Some(1));
        assert_eq!(hold_secs(&[("host", "h")]), None);
    }
}
