//! Semaphores of N holders (`--limit N`) on etcd.
//!
//! A holder's slot is one of N numbered keys `P:{N}:slot/<N>/<i>`
//! (`i` in `0..N`), holding its owner id under its own etcd lease; a slot
//! a `run` holds also has `P:{N}:slotrun/<owner>` under the same lease (a
//! release by owner, from CMD, is refused while it exists). etcd compares
//! cannot count keys, so "fewer than N holders" is "slot `i` does not
//! exist" for some `i < N`: taking slot `i` is one transaction whose
//! compares say that key was never created, that no slot of another N
//! exists (two range compares around `slot/<N>/`: a range compare on
//! create revision 0 holds only for an empty range), and that the name is
//! not held as a plain lock. The agreed N is part of the slot keys' names,
//! so no key of its own can go stale. A read first finds a free `i` (and
//! our own slot, for a retry after a lost reply: same slot, same token);
//! a transaction that loses a race reads again, at most N + 2 times.
//!
//! The token is the slot key's create revision (the transaction's), and
//! the same transaction puts `P:{N}:fence`, whose mod revision is the last
//! token issued for the name, lock or semaphore. Transactions here are
//! judged by `succeeded()` alone; what they found is read with plain range
//! reads, whose replies cannot panic the client (`op_responses` can).

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, PutOptions, Txn, TxnOp,
};

use super::{
    lease_left, text, Acquire, AtZero, Kept, LockKeys, Release, Result, RunRecord, SlotsInfo,
    StoreError, Watched,
};

/// What a call to etcd gives back.
pub(super) type Ec<T> = std::result::Result<T, etcd_client::Error>;

/// The keys of `keys`'s semaphore.
struct Slots {
    /// `P:{N}:slot/`: every slot of the name, whatever its N.
    all: String,
    /// `P:{N}:slot/<n>/`: the slots of our N.
    ours: String,
    /// `P:{N}:slotrun/`.
    run: String,
}

/// `P:{N}:slot/`: every slot key of the name, whatever its N.
pub(super) fn slots_prefix(keys: &LockKeys) -> String {
    Slots::of(keys, 0).all
}

impl Slots {
    fn of(keys: &LockKeys, n: u32) -> Slots {
        Slots {
            all: format!("{}:slot/", keys.lock),
            ours: format!("{}:slot/{n}/", keys.lock),
            run: format!("{}:slotrun/", keys.lock),
        }
    }

    fn slot(&self, i: u32) -> String {
        format!("{}{i}", self.ours)
    }

    fn run_marker(&self, owner: &str) -> String {
        format!("{}{owner}", self.run)
    }

    /// Compares that hold when no slot of another N than ours exists:
    /// the ranges just below and just above `slot/<n>/` are empty.
    fn no_other_n(&self) -> [Compare; 2] {
        [
            absent(self.all.clone()).with_range(self.ours.clone()),
            absent(prefix_end(&self.ours)).with_range(prefix_end(&self.all)),
        ]
    }
}

/// The first key after every key that starts with `prefix` (etcd's
/// `with_prefix` range end; our prefixes end in `/`, never in 0xff).
pub(super) fn prefix_end(prefix: impl AsRef<[u8]>) -> Vec<u8> {
    let mut end = prefix.as_ref().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

/// The compare a plain lock's acquisition adds: no slot of the name
/// exists (a name in use as a semaphore is not a free lock).
pub(super) fn no_slots(keys: &LockKeys) -> Compare {
    absent(Slots::of(keys, 0).all).with_prefix()
}

/// The compare that holds while `key` (or, with a range, every key in
/// it) does not exist.
pub(super) fn absent(key: impl Into<Vec<u8>>) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, 0)
}

/// The name in a slot key `P:{N}:slot/<n>/<i>`, or None for any other key.
pub(super) fn slot_name(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(":{")?;
    let (name, slot) = rest.split_once("}:slot/")?;
    let (n, i) = slot.split_once('/')?;
    let valid = !name.is_empty()
        && !name.contains(['{', '}'])
        && n.parse::<u32>().is_ok()
        && i.parse::<u32>().is_ok();
    valid.then(|| name.to_owned())
}

/// What one read found: the slot keys of the name and whether the plain
/// lock key exists.
struct Seen {
    slots: Vec<KeyValue>,
    plain: bool,
}

impl Seen {
    /// The N of the slots held (None when there are none), read from
    /// their keys `…:slot/<n>/<i>`.
    fn limit(&self, all: &str) -> Option<u32> {
        self.slots.iter().find_map(|kv| {
            let rest = kv.key().strip_prefix(all.as_bytes())?;
            let n = rest.split(|&b| b == b'/').next()?;
            std::str::from_utf8(n).ok()?.parse().ok()
        })
    }

    fn mine(&self, owner: &str) -> Option<&KeyValue> {
        self.slots.iter().find(|kv| kv.value() == owner.as_bytes())
    }
}

impl super::Store {
    /// The slots and the plain key, at one revision.
    async fn seen(c: &mut Client, keys: &LockKeys, s: &Slots) -> Ec<Seen> {
        let every = GetOptions::new().with_prefix();
        let got = c.get(s.all.as_str(), Some(every)).await?;
        let rev = got.header().map_or(0, |h| h.revision());
        let at_rev = GetOptions::new().with_revision(rev).with_count_only();
        let plain = c.get(keys.lock.as_str(), Some(at_rev)).await?.count() > 0;
        let slots = got.kvs().to_vec();
        Ok(Seen { slots, plain })
    }

    /// What `seen` says about users who disagree on N, if anything.
    fn disagreeing(keys: &LockKeys, s: &Slots, seen: &Seen, n: u32) -> Result<()> {
        if seen.plain {
            return Err(StoreError::limit_mismatch(keys, 0));
        }
        match seen.limit(&s.all) {
            Some(agreed) if agreed != n => Err(StoreError::limit_mismatch(keys, agreed)),
            _ => Ok(()),
        }
    }

    /// For the plain lock's calls that found no lock: a name in use as a
    /// semaphore is the users' disagreement on `--limit`, not a free lock.
    pub(super) fn refuse_semaphore(&mut self, keys: &LockKeys) -> Result<()> {
        let all = Slots::of(keys, 0).all;
        let prefix = all.clone();
        let slots = self.call("inspect", |mut c| async move {
            let opts = GetOptions::new().with_prefix().with_keys_only();
            Ok(c.get(prefix, Some(opts)).await?.kvs().to_vec())
        })?;
        let plain = false;
        match (Seen { slots, plain }).limit(&all) {
            Some(n) => Err(StoreError::limit_mismatch(keys, n)),
            None => Ok(()),
        }
    }

    /// `acquire` of one of `n` slots (see the module's comment).
    pub(super) fn acquire_slot(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        ttl: i64,
        n: u32,
        by_run: bool,
    ) -> Result<Acquire> {
        let s = Slots::of(keys, n);
        let (k, me) = (keys.clone(), owner.to_owned());
        enum Found {
            Token(i64),
            Busy(Option<(String, Option<Duration>)>),
            Mismatch(StoreError),
        }
        let found = self.call("acquire", |mut c| async move {
            let mut lease = None;
            let mut last_busy = None;
            for _ in 0..n + 2 {
                let seen = Self::seen(&mut c, &k, &s).await?;
                if let Err(e) = Self::disagreeing(&k, &s, &seen, n) {
                    return finish(&mut c, lease, Found::Mismatch(e)).await;
                }
                if let Some(kv) = seen.mine(&me) {
                    // A retry after a lost reply: ours already, same token,
                    // if its lease lasts.
                    let found = match super::keep_alive_for(&mut c, kv.lease(), ttl).await? {
                        Kept::Yes => Found::Token(kv.create_revision()),
                        Kept::Short(g) => Found::Mismatch(super::short_lease(&k, g, ttl)),
                        Kept::Gone => continue,
                    };
                    return finish(&mut c, lease, found).await;
                }
                let taken: Vec<&[u8]> = seen.slots.iter().map(KeyValue::key).collect();
                let Some(free) = (0..n).find(|&i| !taken.contains(&s.slot(i).as_bytes())) else {
                    last_busy = Some(soonest(&mut c, &seen.slots).await);
                    break;
                };
                let id = match lease {
                    Some(id) => id,
                    None => *lease.insert(super::grant(&mut c, ttl).await?),
                };
                let (slot, under) = (s.slot(free), || Some(PutOptions::new().with_lease(id)));
                let mut when = vec![absent(slot.clone()), absent(k.lock.clone())];
                when.extend(s.no_other_n());
                let mut ops = vec![
                    TxnOp::put(slot, me.clone(), under()),
                    TxnOp::put(k.fence.clone(), me.clone(), None),
                ];
                if by_run {
                    ops.push(TxnOp::put(s.run_marker(&me), "run", under()));
                }
                let resp = c.txn(Txn::new().when(when).and_then(ops)).await?;
                if resp.succeeded() {
                    let rev = resp.header().map_or(0, |h| h.revision());
                    return Ok(Found::Token(rev));
                }
            }
            finish(&mut c, lease, Found::Busy(last_busy.flatten())).await
        })?;
        match found {
            Found::Token(rev) => Ok(Acquire::Acquired {
                token: self.token(keys, rev)?,
            }),
            Found::Mismatch(e) => Err(e),
            Found::Busy(holder) => Ok(Acquire::Busy {
                ttl: holder.as_ref().and_then(|h| h.1),
                holder: holder.map(|h| h.0),
                ahead: None,
                watched: Watched::default(),
            }),
        }
    }

    /// `renew` of our slot: a keep-alive of its lease, whose reply must
    /// confirm it.
    pub(super) fn renew_slot(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        n: u32,
        ttl: i64,
    ) -> Result<bool> {
        let ours = Slots::of(keys, n).ours;
        let me = owner.to_owned();
        let kept = self.call("renewal", |mut c| async move {
            let got = c.get(ours, Some(GetOptions::new().with_prefix())).await?;
            let mine = |kv: &&KeyValue| kv.value() == me.as_bytes() && kv.lease() != 0;
            match got.kvs().iter().find(mine) {
                Some(kv) => super::keep_alive_for(&mut c, kv.lease(), ttl).await,
                None => Ok(Kept::Gone),
            }
        })?;
        match kept {
            Kept::Yes => Ok(true),
            Kept::Gone => Ok(false),
            Kept::Short(g) => Err(super::short_lease(keys, g, ttl)),
        }
    }

    /// `release` of our slot, by the process that took it (`unless_run`
    /// false) or by owner (refused while a `run` holds it); the run's
    /// record, if any, is written after it, as on Redis.
    pub(super) fn release_slot(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        n: u32,
        unless_run: bool,
        record: RunRecord,
    ) -> Result<Release> {
        let s = Slots::of(keys, n);
        let (k, me) = (keys.clone(), owner.to_owned());
        let outcome = self.call("release", |mut c| async move {
            let seen = Self::seen(&mut c, &k, &s).await?;
            if let Err(e) = Self::disagreeing(&k, &s, &seen, n) {
                return Ok(Err(e));
            }
            let Some(kv) = seen.mine(&me).cloned() else {
                return Ok(Ok(Release::NotOwner(None)));
            };
            let marker = s.run_marker(&me);
            let mut when = vec![Compare::value(kv.key(), CompareOp::Equal, me.as_str())];
            if unless_run {
                let opts = GetOptions::new().with_count_only();
                if c.get(marker.clone(), Some(opts)).await?.count() > 0 {
                    return Ok(Ok(Release::HeldByRun));
                }
                when.push(absent(marker.clone()));
            }
            let txn = Txn::new().when(when).and_then([
                TxnOp::delete(kv.key().to_vec(), None),
                TxnOp::delete(marker, None),
            ]);
            if !c.txn(txn).await?.succeeded() {
                return Ok(Ok(Release::NotOwner(None)));
            }
            let _ = c.lease_revoke(kv.lease()).await;
            Ok(Ok(Release::Released(None)))
        })??;
        self.record_run(keys, record)?;
        Ok(outcome)
    }

    /// `release --force` of every slot: the evicted owners, comma-separated.
    pub(super) fn force_release_slots(
        &mut self,
        keys: &LockKeys,
        n: u32,
    ) -> Result<Option<String>> {
        let s = Slots::of(keys, n);
        let k = keys.clone();
        let evicted = self.call("release --force", |mut c| async move {
            let seen = Self::seen(&mut c, &k, &s).await?;
            if let Err(e) = Self::disagreeing(&k, &s, &seen, n) {
                return Ok(Err(e));
            }
            let opts = DeleteOptions::new().with_prefix().with_prev_key();
            let gone = c.delete(s.ours.clone(), Some(opts)).await?;
            super::revoke_leases(&mut c, gone.prev_kvs().iter().map(KeyValue::lease)).await;
            Ok(Ok(gone.prev_kvs().to_vec()))
        })??;
        let owners = evicted
            .into_iter()
            .map(|kv| text(&keys.slots, kv.value().to_vec()))
            .collect::<Result<Vec<_>>>()?;
        Ok((!owners.is_empty()).then(|| owners.join(", ")))
    }

    /// A semaphore's agreed N, its live holders (owner, time left, token;
    /// soonest expiry first) and the last token issued.
    pub fn inspect_slots(&mut self, keys: &LockKeys) -> Result<SlotsInfo> {
        let s = Slots::of(keys, keys.limit.unwrap_or(1));
        let (k, fence) = (keys.clone(), keys.fence.clone());
        let (plain, limit, holders, fence_rev) = self.call("inspect", |mut c| async move {
            let seen = Self::seen(&mut c, &k, &s).await?;
            let mut holders = Vec::new();
            for kv in &seen.slots {
                if let Some(left) = lease_left(&mut c, kv.lease(), AtZero::Gone).await {
                    holders.push((kv.value().to_vec(), left, kv.create_revision()));
                }
            }
            let keys_only = GetOptions::new().with_keys_only();
            let f = c.get(fence, Some(keys_only)).await?;
            let fence_rev = f.kvs().first().map(KeyValue::mod_revision);
            Ok((seen.plain, seen.limit(&s.all), holders, fence_rev))
        })?;
        if plain {
            return Err(StoreError::limit_mismatch(keys, 0));
        }
        let mut out = holders
            .into_iter()
            .map(|(owner, left, rev)| Ok((text(&keys.slots, owner)?, left, self.token(keys, rev)?)))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by_key(|h| h.1);
        Ok(SlotsInfo {
            limit: limit.filter(|_| !out.is_empty()),
            holders: out,
            token: fence_rev.map(|r| self.token(keys, r)).transpose()?,
            last_run: Vec::new(),
        })
    }
}

/// Revokes a lease granted for a slot that was not taken, then answers.
async fn finish<T>(c: &mut Client, lease: Option<i64>, out: T) -> Ec<T> {
    super::revoke_leases(c, lease).await;
    Ok(out)
}

/// The holder whose slot expires first, and its time left, for the busy
/// line (the one a waiter would see go first; one whose time left cannot
/// be read only when none can, the first of equals).
async fn soonest(c: &mut Client, slots: &[KeyValue]) -> Option<(String, Option<Duration>)> {
    let mut all = Vec::new();
    for kv in slots {
        let owner = String::from_utf8_lossy(kv.value()).into_owned();
        all.push((owner, lease_left(c, kv.lease(), AtZero::Gone).await));
    }
    all.into_iter()
        .min_by_key(|(_, left)| (left.is_none(), *left))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_ns_are_the_ranges_around_ours() {
        let k = LockKeys::new("distlock", "pool");
        let s = Slots::of(&k, 2);
        assert_eq!(s.slot(1), "distlock:{pool}:slot/2/1");
        assert_eq!(prefix_end(&s.ours), b"distlock:{pool}:slot/20".to_vec());
        assert_eq!(prefix_end(&s.all), b"distlock:{pool}:slot0".to_vec());
        // "slot/12/0" sorts below "slot/2/" and "slot/3/0" above "slot/20":
        // both are in a range that must be empty.
        assert!(b"distlock:{pool}:slot/12/0".as_slice() < s.ours.as_bytes());
        assert!(b"distlock:{pool}:slot/3/0".as_slice() >= prefix_end(&s.ours).as_slice());
        assert!(b"distlock:{pool}:slot/3/0".as_slice() < prefix_end(&s.all).as_slice());
    }

    #[test]
    fn semaphores_are_listed_by_their_slot_keys() {
        assert_eq!(
            slot_name("distlock", "distlock:{a/b}:slot/3/0").as_deref(),
            Some("a/b")
        );
        assert_eq!(slot_name("distlock", "distlock:{a}:slotrun/o"), None);
        assert_eq!(slot_name("distlock", "distlock:{a}:slot/x/0"), None);
        assert_eq!(slot_name("distlock", "distlock:{a}"), None);
        assert_eq!(slot_name("other", "distlock:{a}:slot/2/1"), None);
    }

    #[test]
    fn the_agreed_n_comes_from_the_slot_keys() {
        let seen = Seen {
            slots: Vec::new(),
            plain: false,
        };
        assert_eq!(seen.limit("distlock:{pool}:slot/"), None);
    }
}
