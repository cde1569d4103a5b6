//! Waiting on etcd: etcd's own lock recipe (`concurrency/mutex.go`), on
//! distlock's keys (so it does not exclude that recipe's users).
//!
//! A fair waiter puts `P:{N}:queue/<owner>` under a lease of its own (its
//! `--ttl`); waiters are served in the order of those keys' create
//! revisions. Each waiter watches only the key just ahead of it (the
//! newest with a smaller create revision), from the revision of the read
//! that found it, so no deletion between the read and the watch is
//! missed (the watch starts now, and one read covers the time since: see
//! `Subscription::next_message`); when that key goes it looks again, and
//! the head watches the lock key. Once a read found no key older than
//! ours, each attempt is the take itself, its reads in the else branch.
//! The head takes the lock in one transaction: the lock key was
//! never created and our queue key is still ours (that no queue key is
//! older than ours the attempt's read showed, and no older one can
//! appear); then the lock key is put under our waiter lease (kept alive at
//! the start of the same attempt, so it lasts a full TTL from the
//! attempt's send time, which is t0) and our queue key is deleted. A
//! release therefore wakes one waiter, and each hand-off wakes one more
//! (the one behind the new holder): the work does not grow with the queue.
//!
//! A waiter that dies keeps its key until its lease runs out, then the
//! one behind it is woken; one that gives up or is signalled revokes its
//! lease (`leave`), which deletes its key at once. A waiter that finds its
//! key or its lease taken while it was in touch (revoked, deleted by
//! `release --force`) stops waiting ([`Acquire::Evicted`]), as etcd's own
//! Mutex does when its session ends; nobody decided that for a lease that
//! ran out while the waiter was stopped or cut off, so that one joins
//! again at the back, as on Redis.
//!
//! `--wait-order any` takes no queue key: it watches the lock key and
//! races for it whenever it goes. A single attempt (no `--wait`) yields to
//! the queue: it takes a free lock only when nobody waits.
//!
//! Between attempts the main thread sleeps in poll(); etcd needs a task
//! driven meanwhile (the watch, and the lease keep-alive every TTL/3). The
//! [`Subscription`] is driven by the thread that `lease` already blocks on
//! it (its `next_message` runs the store's runtime for as long as it
//! waits, and the store's calls from the main thread meanwhile share that
//! runtime's driver): no thread of our own, and `lease` stays unaware of
//! which store it reads. Each attempt tells it, over a channel, what to
//! watch next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, LeaseKeepAliveResponse,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions, WatchResponse, WatchStream,
};
use tokio::sync::mpsc;

use super::semaphore::Ec;
use super::{lease_secs, text, Acquire, Call, LockKeys, Mode, Result, Store, StoreError};
use crate::store::{Notice, Waiter, Waiters};

/// What this process knows of its place in a queue.
#[derive(Default)]
pub struct Queue {
    /// Our waiter lease and our queue key's create revision, once joined.
    joined: Option<Joined>,
    /// Orders to the subscription that watches for us.
    follow: Option<mpsc::UnboundedSender<Follow>>,
    /// When (boot clock, ms) the last keep-alive of our waiter lease that
    /// etcd confirmed was sent; shared with the subscription, which sends
    /// most of them. A lease gone at least a TTL after that ran out while
    /// we were away (stopped, partitioned); one gone sooner was taken from
    /// us (see [`ran_out`]).
    kept: Arc<AtomicU64>,
}

impl Queue {
    /// After a call of the store connected afresh to `member` (its last
    /// call failed, on the connection the subscription may still be on):
    /// the subscription follows, so that its keep-alives go on vouching
    /// for the member the next take goes to. Left on the old connection,
    /// it could wake the waiter in time while the take waited out a call
    /// timeout on a member cut off since (the lab saw it after a slow
    /// election). Even to the same member of the URL: one host name may
    /// front several members.
    pub(super) fn moved_to(&self, client: &Client, member: usize) {
        if let Some(follow) = &self.follow {
            let _ = follow.send(Follow::Move(Box::new(client.clone()), member));
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Joined {
    lease: i64,
    rev: i64,
    ttl: i64,
    /// A read found no key older than ours: see `acquire_fair`.
    first: bool,
}

/// What the subscription must do next.
enum Follow {
    /// Keep this lease alive, every this long.
    KeepAlive(i64, Duration),
    /// Wake us when this key changes, from this revision on; with the
    /// count of keys seen under it as a prefix (a semaphore's slots), when
    /// any key under it changes.
    Watch(String, i64, Option<i64>),
    /// Wake us at once: there was nothing to watch.
    WakeNow,
    /// Go on with this client, on this member: the store's calls moved
    /// to it (see [`Queue::moved_to`]). The watch is dropped (the attempt
    /// that connected orders the next one) and the lease's keep-alives
    /// open a new stream there.
    Move(Box<Client>, usize),
}

/// What one fair attempt found.
enum Fair {
    Taken(i64, super::record::Plan),
    /// Our queue key is gone while our lease lives: someone ended our wait.
    Evicted,
    /// Our waiter lease is gone: revoked, or run out while we were away.
    LeaseGone,
    Busy(Busy),
}

/// What a fair attempt that did not take the lock saw.
#[derive(Default)]
struct Busy {
    holder: Option<Vec<u8>>,
    /// The holder's metadata, for the status line.
    meta: Option<Vec<u8>>,
    /// The owner at the head of the queue, while the lock is free.
    head: Option<String>,
    place: u64,
    watch: Option<(String, i64)>,
    /// No key older than ours is left in the queue.
    first: bool,
}

impl Store {
    /// `P:{N}:queue/`: the prefix of every waiter's queue key.
    pub(super) fn queue_prefix(keys: &LockKeys) -> String {
        format!("{}/", keys.queue)
    }

    /// The compare that lets a single attempt (no `--wait`) take a free
    /// lock only when nobody waits: the queue range is empty (an empty
    /// range compares as one key of create revision 0).
    pub(super) fn nobody_waits(keys: &LockKeys) -> Compare {
        Compare::create_revision(Self::queue_prefix(keys), CompareOp::Equal, 0).with_prefix()
    }

    /// One attempt of a fair waiter: join (or keep our place), then take
    /// the lock if we are first and it is free, else tell the subscription
    /// what to watch.
    pub(super) fn acquire_fair(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        ttl_ms: u64,
        meta: &[(&str, &str)],
    ) -> Result<Acquire> {
        let ttl = lease_secs(ttl_ms)?;
        // `--once-per`: a waiter that finds the job done leaves the queue
        // (the next one then judges the mark for itself).
        let done_rev = match self.look_done(keys, owner)? {
            super::record::Look::Done(mark) => {
                self.leave(keys, owner)?;
                return Ok(Acquire::Done(mark));
            }
            super::record::Look::Free(rev) => rev,
        };
        let taking = super::Taking::new(keys, owner, meta);
        let prefix = Self::queue_prefix(keys);
        let mine = format!("{prefix}{owner}");
        let lock = keys.lock.clone();
        let me = owner.to_owned();
        let was = self.queue.joined.filter(|j| j.ttl == ttl);
        let watched = self.watched;
        let kept = self.queue.kept.clone();
        // Joining is a call of its own, recorded before anything else can
        // fail: a waiter interrupted (or timed out) later in its first
        // attempt still revokes its lease when it leaves, so its key does
        // not block the one behind it for a whole TTL.
        // The single attempt's lease to join with, if young; once joined, the store's to revoke.
        let spare = self.spare.take_if(|_| was.is_none());
        let young = |s: &super::Spare| {
            s.ttl == ttl && crate::clock::now().saturating_sub(s.sent) < keep_every(ttl)
        };
        let (joined, fresh) = match was {
            Some(j) => (j, false),
            None => {
                let (mine, me, kept) = (mine.clone(), me.clone(), kept.clone());
                let j = self.call("acquire", |mut c| async move {
                    let (spare, stale) = match spare {
                        Some(s) if young(&s) => (Some((s.lease, s.sent)), None),
                        other => (None, other.map(|s| s.lease)),
                    };
                    super::revoke_leases(&mut c, stale).await;
                    join(&mut c, &mine, &me, ttl, &kept, spare).await
                })?;
                self.queue.joined = Some(j);
                (j, true)
            }
        };
        let mut when = vec![
            Compare::create_revision(lock.clone(), CompareOp::Equal, 0),
            Compare::create_revision(mine.clone(), CompareOp::Equal, joined.rev),
            super::semaphore::no_slots(keys),
        ];
        let unchanged = |r| Compare::mod_revision(keys.done.clone(), CompareOp::Equal, r);
        when.extend(done_rev.map(unchanged));
        let found = self.call("acquire", |mut c| async move {
            // Our lease must last a full TTL from this attempt's send time:
            // just granted, or kept alive now, beside the attempt's first
            // request (the take waits for both). Gone (revoked, or run out
            // while we were stopped): our place is gone with it.
            let mut keep = (!fresh).then(|| c.clone());
            let mut first = joined.first;
            for _ in 0..3 {
                // The key just ahead of ours, to watch. A status line also
                // shows our place, which takes every key ahead (etcd's
                // count ignores the revision filter): read only when
                // someone watches, so an attempt costs the same at the
                // back of a long queue as at its head (a limit of 0 is none).
                let ahead_of_us = GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_max_create_revision(joined.rev - 1)
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_limit(if watched { 0 } else { 1 });
                // In one request, so one round trip and one snapshot.
                let reads = [
                    TxnOp::get(prefix.clone(), Some(ahead_of_us)),
                    TxnOp::get(lock.clone(), None),
                    TxnOp::get(mine.clone(), None),
                ];
                // First in line (a read found no key older than ours, and
                // none can appear since: a new key's create revision is
                // later than that read's): the take at once, the reads
                // only if it fails. A compare over the whole queue, as
                // etcd evaluates one on every key in its range, would cost
                // each hand-off the length of the queue.
                let mut hold = None;
                let txn = if first {
                    hold = super::min_hold::grant(&mut c, taking.hold_secs).await?;
                    let mut ops = taking.ops(joined.lease, hold);
                    ops.push(TxnOp::delete(mine.clone(), None));
                    Txn::new().when(when.clone()).and_then(ops).or_else(reads)
                } else {
                    Txn::new().and_then(reads)
                };
                let sent = crate::clock::now();
                let resp = match keep.take() {
                    Some(mut k) => {
                        let (alive, resp) =
                            tokio::join!(kept_alive(&mut k, joined.lease), c.txn(txn));
                        if !alive? {
                            super::revoke_leases(&mut c, hold).await;
                            return Ok(Fair::LeaseGone);
                        }
                        confirmed(&kept, sent);
                        resp?
                    }
                    None => c.txn(txn).await?,
                };
                let replies = super::replies::op_responses(&resp)?;
                if first && resp.succeeded() {
                    let rev = resp.header().map_or(0, |h| h.revision());
                    return Ok(Fair::Taken(rev, taking.plan(&replies)));
                }
                super::revoke_leases(&mut c, hold).await;
                let get = |i: usize| match replies.get(i) {
                    Some(TxnOpResponse::Get(g)) => Ok(g),
                    _ => Err(etcd_client::Error::Internal(
                        "a read without its reply".into(),
                    )),
                };
                let (ahead, held) = (get(0)?, get(1)?);
                // Ours already: our take's reply was lost (a timeout, a
                // reset connection) and this is its retry. Busy here would
                // have us wait on ourselves.
                let kv = held.kvs().first();
                if let Some(kv) = kv.filter(|kv| ours(kv.value(), kv.lease(), &me, joined.lease)) {
                    return Ok(Fair::Taken(kv.create_revision(), Default::default()));
                }
                // Our take failed and our key is gone (deleted by hand or
                // by `release --force`).
                let mine_now = get(2)?.kvs().first().map(|kv| kv.create_revision());
                if first && mine_now != Some(joined.rev) {
                    return Ok(Fair::Evicted);
                }
                first |= ahead.kvs().is_empty();
                let holder = kv.map(|kv| kv.value().to_vec());
                // The holder's metadata, for a status line: read only when
                // someone watches (under contention each read on the way
                // to the lock measured dear) and the lock is held.
                let meta = match &holder {
                    Some(_) if watched => {
                        let m = c.get(taking.holder.0.clone(), None).await?;
                        m.kvs().first().map(|kv| kv.value().to_vec())
                    }
                    _ => None,
                };
                // The key ahead, else the lock if held: watched from just
                // after the read that found it.
                let watch = match ahead.kvs().first() {
                    Some(next) => Some(String::from_utf8_lossy(next.key()).into_owned()),
                    None => holder.as_ref().map(|_| lock.clone()),
                };
                if let Some(key) = watch {
                    let from = resp.header().map_or(0, |h| h.revision()) + 1;
                    // Free, and so promised to the head: named, as on Redis.
                    let head = match holder {
                        None => queue_head(&mut c, &prefix).await?,
                        Some(_) => None,
                    };
                    return Ok(Fair::Busy(Busy {
                        holder,
                        meta,
                        head,
                        place: ahead.kvs().len() as u64,
                        watch: Some((key, from)),
                        first,
                    }));
                }
            }
            Ok(Fair::Busy(Busy::default()))
        })?;
        let last_kept = Duration::from_millis(self.queue.kept.load(Ordering::Relaxed));
        match found {
            // Run out while we were away (stopped, partitioned): nobody
            // meant to end our wait, so we join again at the back, as a
            // waiter whose key expired does on Redis.
            Fair::LeaseGone if ran_out(last_kept, crate::clock::now(), joined.ttl) => {
                self.queue.joined = None;
                self.acquire_fair(keys, owner, ttl_ms, meta)
            }
            // As etcd's own Mutex ends a wait whose session is gone: queueing
            // again at the back would run CMD after whoever cleared the
            // queue meant it not to. What is left of our lease goes now.
            Fair::Evicted | Fair::LeaseGone => {
                let _ = self.leave(keys, owner);
                Ok(Acquire::Evicted)
            }
            Fair::Taken(rev, plan) => {
                // The waiter lease is the holder's now; nothing to leave.
                self.queue.joined = None;
                self.granted = Some((joined.lease, joined.ttl));
                self.plan = Some(plan);
                Ok(Acquire::Acquired {
                    token: self.token(keys, rev)?,
                })
            }
            Fair::Busy(busy) => {
                if let Some(j) = self.queue.joined.as_mut() {
                    j.first |= busy.first;
                }
                if fresh {
                    self.order(Follow::KeepAlive(joined.lease, keep_every(joined.ttl)));
                }
                // Free, yet not ours after three tries: the name may have
                // become a semaphore (its slots fail our compare), which is
                // the usage error it is on Redis, not a reason to spin.
                if busy.watch.is_none() && busy.holder.is_none() {
                    self.refuse_semaphore(keys)?;
                }
                self.watch(busy.watch);
                Ok(Acquire::Busy {
                    holder: busy.holder.map(|h| text(&keys.lock, h)).transpose()?,
                    ttl: None,
                    ahead: busy.head,
                    watched: super::record::holder_watched(busy.meta.as_deref(), busy.place),
                })
            }
        }
    }

    /// After a busy single or `any` attempt (the plain acquire): a single
    /// attempt that found the lock free yields to the head of the queue,
    /// named as `ahead`; an `any` waiter watches the lock key (or, if it
    /// is gone already, tries again at once).
    pub(super) fn after_busy(
        &mut self,
        keys: &LockKeys,
        mode: Mode,
        mut busy: Acquire,
    ) -> Result<Acquire> {
        let Acquire::Busy { holder, ahead, .. } = &mut busy else {
            return Ok(busy);
        };
        let (prefix, lock) = (Self::queue_prefix(keys), keys.lock.clone());
        match mode {
            Mode::Once if holder.is_none() => {
                let head = self.call("acquire", |mut c| async move {
                    queue_head(&mut c, &prefix).await
                })?;
                *ahead = head.or(ahead.take());
            }
            Mode::Any => {
                let found = self.call("acquire", |mut c| async move {
                    let got = c.get(lock.clone(), None).await?;
                    let from = got.header().map_or(0, |h| h.revision()) + 1;
                    Ok((!got.kvs().is_empty()).then_some((lock, from)))
                })?;
                self.watch(found);
            }
            _ => {}
        }
        Ok(busy)
    }

    /// `release --force`'s clearing of the queue: one transaction reads
    /// and deletes every queue key, then their leases are revoked (a
    /// killed waiter's would live on for its TTL with nothing under it).
    /// A live waiter finds its key gone at its next look and stops
    /// waiting. The owners removed, in the order they waited.
    pub fn clear_queue(&mut self, keys: &LockKeys) -> Result<Vec<String>> {
        let prefix = Self::queue_prefix(keys);
        self.call("release --force", |mut c| async move {
            let txn = Txn::new().and_then([
                TxnOp::get(prefix.clone(), Some(in_line())),
                TxnOp::delete(prefix.clone(), Some(DeleteOptions::new().with_prefix())),
            ]);
            let resp = c.txn(txn).await?;
            let kvs = match super::op_responses(&resp)?.into_iter().next() {
                Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
                _ => Vec::new(),
            };
            let mut leases: Vec<i64> = kvs.iter().map(KeyValue::lease).collect();
            leases.retain(|&l| l != 0);
            leases.dedup();
            super::revoke_leases(&mut c, leases).await;
            Ok(kvs
                .iter()
                .map(|kv| {
                    owner_of(&prefix, kv.key())
                        .unwrap_or_else(|| String::from_utf8_lossy(kv.key()).into_owned())
                })
                .collect())
        })
    }

    /// Leaves the queue: revoking our waiter lease deletes our key at
    /// once, so the one behind us is woken now, not when the lease ends.
    pub fn leave(&mut self, _keys: &LockKeys, _owner: &str) -> Result<()> {
        self.queue.follow = None;
        let Some(j) = self.queue.joined.take() else {
            return Ok(());
        };
        self.call("leave", move |mut c| async move {
            c.lease_revoke(j.lease).await.map(|_| ())
        })
    }

    /// A subscription for this waiter, told of our lease at once if we are
    /// queued already (a subscription made again after a lost connection).
    /// On the store's own connection, unless that is on the member the
    /// lost one was on: then on a new one, which the store takes too.
    /// Each attempt says what to watch.
    pub fn subscribe(&mut self) -> Result<Subscription> {
        let runtime = self.runtime()?;
        // One member for the attempts and the subscription, on one
        // connection: the keep-alives it sends every TTL/3 then also
        // watch the member the next attempt goes to. On two members, one
        // cut off from the leader while the other watched on, the take a
        // wake-up called for waited out a whole call timeout on it (a
        // client cut into a minority: the next holder 3.5 s after the
        // cut, not 2.5). The store's client on a member the lost
        // subscription was on goes, and the new connection is the
        // store's too.
        let kept = self
            .client
            .clone()
            .filter(|(_, m)| !self.target.distrusts(*m));
        let (client, member) = match kept {
            Some(c) => c,
            None => {
                let call = Call::start_async(self.timeout, self.interrupt_on);
                let connect = self.target.connect_member(self.timeout);
                let c = match runtime.block_on(call.within(connect)) {
                    Some(Ok(c)) => c,
                    Some(Err(e)) => return Err(self.describe(None, e, true)),
                    None => return Err(self.ended(call.interrupted(), "subscribe", "")),
                };
                self.client = Some(c.clone());
                c
            }
        };
        let (tx, orders) = mpsc::unbounded_channel();
        if let Some(j) = self.queue.joined {
            let _ = tx.send(Follow::KeepAlive(j.lease, keep_every(j.ttl)));
        }
        self.queue.follow = Some(tx);
        Ok(Subscription {
            kept: self.queue.kept.clone(),
            runtime,
            client,
            target: self.target.clone(),
            member,
            orders: Some(orders),
            watch: None,
            keep: None,
            wake_now: false,
            display: self.target.display.clone(),
        })
    }

    /// After a busy slot attempt of a waiter: wake it when a slot of the
    /// name changes. Counted at revision R, and any change after R wakes
    /// it (see [`Follow::Watch`]); fewer than `n` slots now means one is
    /// free already.
    pub(super) fn watch_slots(&mut self, prefix: String, n: u32) -> Result<()> {
        let (free, from) = self.call("acquire", |mut c| async move {
            let count = GetOptions::new().with_prefix().with_count_only();
            let got = c.get(prefix.clone(), Some(count)).await?;
            let from = got.header().map_or(0, |h| h.revision()) + 1;
            Ok((got.count() < i64::from(n), (prefix, from, got.count())))
        })?;
        self.order(if free {
            Follow::WakeNow
        } else {
            Follow::Watch(from.0, from.1, Some(from.2))
        });
        Ok(())
    }

    /// Has the subscription wake us when `key` changes from revision
    /// `from` on, or at once when there is nothing to watch.
    fn watch(&mut self, key_from: Option<(String, i64)>) {
        self.order(key_from.map_or(Follow::WakeNow, |(k, from)| Follow::Watch(k, from, None)));
    }

    fn order(&mut self, f: Follow) {
        if let Some(tx) = &self.queue.follow {
            let _ = tx.send(f);
        }
    }
}

/// How many waiters `inspect` names, first in line first.
const WAITERS_SHOWN: i64 = 10;

/// The read of a name's queue for `inspect`: the first waiters in the
/// order they are served, and (the reply's count) how many there are.
pub(super) fn first_waiters(keys: &LockKeys) -> TxnOp {
    let first = in_line().with_limit(WAITERS_SHOWN);
    TxnOp::get(Store::queue_prefix(keys), Some(first))
}

/// A read of the keys under a prefix in the order they were created: a
/// queue's in the order its waiters are served.
fn in_line() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

/// The queue [`first_waiters`] read, with each waiter's lease left.
pub(super) async fn waiters(
    c: &mut Client,
    prefix: &str,
    got: &etcd_client::GetResponse,
) -> Option<Waiters> {
    let mut first = Vec::new();
    for kv in got.kvs() {
        let owner = owner_of(prefix, kv.key()).unwrap_or_else(|| {
            let key = String::from_utf8_lossy(kv.key());
            key.strip_prefix(prefix).unwrap_or(&key).to_owned()
        });
        let ttl = super::lease_left(c, kv.lease(), super::AtZero::Shown).await;
        first.push(Waiter { owner, ttl });
    }
    let shown = first.len() as u64;
    let count = u64::try_from(got.count()).unwrap_or(0).max(shown);
    Some(Waiters { count, first })
}

/// The owner of the oldest key in the queue under `prefix`, if any: its
/// head.
async fn queue_head(c: &mut Client, prefix: &str) -> Ec<Option<String>> {
    let first = in_line().with_keys_only().with_limit(1);
    let got = c.get(prefix, Some(first)).await?;
    Ok(got.kvs().first().and_then(|kv| owner_of(prefix, kv.key())))
}

/// Joins the queue: a new lease (its grant noted in `kept`) and our key
/// under it; the key's create revision.
/// `spare`: a lease of `ttl` granted already, and when (`Store::spare`).
async fn join(
    c: &mut Client,
    mine: &str,
    me: &str,
    ttl: i64,
    kept: &AtomicU64,
    spare: Option<(i64, Duration)>,
) -> Ec<Joined> {
    let (lease, sent) = match spare {
        Some((lease, sent)) => {
            super::adopt(c, lease);
            (lease, sent)
        }
        None => {
            let sent = crate::clock::now();
            (super::grant(c, ttl).await?, sent)
        }
    };
    let opts = PutOptions::new().with_lease(lease).with_prev_key();
    let put = c.put(mine, me, Some(opts)).await?;
    let rev = match put.prev_key() {
        Some(kv) => kv.create_revision(),
        None => put.header().map_or(0, |h| h.revision()),
    };
    if rev <= 0 {
        let what = "a put without a revision";
        return Err(etcd_client::Error::Internal(what.into()));
    }
    confirmed(kept, sent);
    Ok(Joined {
        lease,
        rev,
        ttl,
        first: false,
    })
}

/// One keep-alive of `lease`, confirmed by its reply: false when the
/// lease is gone (TTL 0), and our key with it.
pub(super) async fn kept_alive(c: &mut Client, lease: i64) -> Ec<bool> {
    super::alive(c.lease_keep_alive(lease).await)
}

/// Notes a keep-alive (or grant) sent at `sent` that etcd confirmed.
fn confirmed(kept: &AtomicU64, sent: Duration) {
    kept.fetch_max(millis(sent), Ordering::Relaxed);
}

/// A boot-clock time as [`Queue::kept`] holds it.
fn millis(t: Duration) -> u64 {
    u64::try_from(t.as_millis()).unwrap_or(u64::MAX)
}

/// Whether a waiter lease found gone at `now` ran out by itself: at least
/// its TTL has passed since the send of its last confirmed keep-alive
/// (etcd counts the TTL from its receipt, which is later). Sooner, it was
/// revoked (or its key deleted) while we were in touch.
fn ran_out(last_kept: Duration, now: Duration, ttl_secs: i64) -> bool {
    now.saturating_sub(last_kept) >= Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0))
}

/// Whether the lock key's holder is this waiter: our owner id, under our
/// waiter lease (which a take puts it under).
fn ours(value: &[u8], lease: i64, owner: &str, our_lease: i64) -> bool {
    value == owner.as_bytes() && lease == our_lease
}

/// A keep-alive three times per TTL, as etcd's own client does.
fn keep_every(ttl: i64) -> Duration {
    Duration::from_millis(u64::try_from(ttl).unwrap_or(2) * 1000 / 3)
}

/// The owner id in a queue key.
fn owner_of(prefix: &str, key: &[u8]) -> Option<String> {
    std::str::from_utf8(key)
        .ok()?
        .strip_prefix(prefix)
        .filter(|o| !o.is_empty())
        .map(str::to_owned)
}

/// A waiter's wake-ups on etcd: the watch on the key ahead and the keep-
/// alive of the waiter lease, on the store's connection (see
/// [`Store::subscribe`], [`Queue::moved_to`]), driven while
/// `next_message` waits.
pub struct Subscription {
    runtime: &'static tokio::runtime::Runtime,
    client: Client,
    /// Told which member (`member`, of the URL's) to trust least when
    /// this subscription is lost.
    target: super::target::Target,
    member: usize,
    /// None once the store dropped its end (it left the queue).
    orders: Option<mpsc::UnboundedReceiver<Follow>>,
    watch: Option<WatchStream>,
    keep: Option<Keep>,
    wake_now: bool,
    /// The URL, password redacted, for error sentences.
    display: String,
    /// See [`Queue::kept`].
    kept: Arc<AtomicU64>,
}

struct Keep {
    lease: i64,
    every: Duration,
    next: tokio::time::Instant,
    /// When the keep-alive the next reply answers was sent (boot clock).
    sent: Duration,
    /// When that keep-alive must have been answered: see `Got::KeepDue`.
    answer_by: Option<tokio::time::Instant>,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

/// What woke the subscription's loop.
enum Got {
    Timeout,
    Order(Option<Follow>),
    Watch(std::result::Result<Option<WatchResponse>, etcd_client::Error>),
    Kept(std::result::Result<Option<LeaseKeepAliveResponse>, etcd_client::Error>),
    KeepDue,
}

impl Subscription {
    /// A wake-up when the watched key changed (or its watch was cancelled,
    /// or our lease is gone: the attempt finds it so and stops), or when
    /// there was nothing to watch; Ok(None) after `timeout`. An error
    /// (connection lost) loses the subscription: `lease` makes a new one.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<Notice>> {
        let Subscription {
            runtime,
            client,
            target,
            member,
            orders,
            watch,
            keep,
            wake_now,
            display,
            kept,
        } = self;
        let out = runtime.block_on(async {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                if std::mem::take(wake_now) {
                    return Ok(Some(Notice::Wake));
                }
                let due = keep
                    .as_ref()
                    .map(|k| k.answer_by.map_or(k.next, |a| a.min(k.next)));
                let got = tokio::select! {
                    () = tokio::time::sleep_until(deadline) => Got::Timeout,
                    f = recv(orders) => Got::Order(f),
                    m = watch_next(watch) => Got::Watch(m),
                    k = kept_next(keep) => Got::Kept(k),
                    () = at(due) => Got::KeepDue,
                };
                match got {
                    Got::Timeout => return Ok(None),
                    Got::Order(None) => *orders = None,
                    Got::Order(Some(Follow::WakeNow)) => {
                        *watch = None;
                        *wake_now = true;
                    }
                    Got::Order(Some(Follow::Watch(key, from, slots))) => {
                        // From now, not from `from`: etcd serves a watch
                        // that starts in the past from a loop that runs
                        // every 100 ms, and under contention the deletion
                        // waited for often came in that window (a hand-off's
                        // p90 was 84 ms). A change since the attempt's read
                        // (the watch began at a later revision) is looked
                        // for with one read: a key gone or written since.
                        *watch = None;
                        let prefix = slots.map(|_| WatchOptions::new().with_prefix());
                        let mut w = client.watch(key.clone(), prefix).await?;
                        let created = w.message().await?.ok_or_else(watch_ended)?;
                        *watch = Some(w);
                        if created.header().map_or(i64::MAX, |h| h.revision()) >= from {
                            let prefix = slots.map(|_| GetOptions::new().with_prefix());
                            let got = client.get(key, prefix).await?;
                            let moved = |kv: &KeyValue| kv.mod_revision() >= from;
                            if got.count() != slots.unwrap_or(1) || got.kvs().iter().any(moved) {
                                *watch = None;
                                *wake_now = true;
                            }
                        }
                    }
                    Got::Order(Some(Follow::Move(to, m))) => {
                        (*client, *member) = (*to, m);
                        *watch = None;
                        if let Some(k) = keep.as_mut() {
                            k.stream = None;
                            k.answer_by = None;
                        }
                    }
                    Got::Order(Some(Follow::KeepAlive(lease, every))) => {
                        *keep = Some(Keep {
                            lease,
                            every,
                            next: tokio::time::Instant::now() + every,
                            sent: Duration::ZERO,
                            answer_by: None,
                            stream: None,
                        });
                    }
                    Got::Watch(Ok(Some(w))) => {
                        // Any change of the key ahead (its deletion, in
                        // practice) or a cancelled watch: look again.
                        if w.canceled() || !w.events().is_empty() {
                            *watch = None;
                            return Ok(Some(Notice::Wake));
                        }
                    }
                    Got::Watch(Ok(None)) => return Err(watch_ended()),
                    Got::Watch(Err(e)) | Got::Kept(Err(e)) => return Err(e),
                    Got::Kept(Ok(Some(r))) if r.ttl() > 0 => {
                        if let Some(k) = keep.as_ref() {
                            confirmed(kept, k.sent);
                        }
                    }
                    Got::Kept(_) => {
                        // Our lease is gone, and our key with it.
                        *keep = None;
                        return Ok(Some(Notice::Wake));
                    }
                    Got::KeepDue => {
                        let k = keep.as_mut().expect("due only when kept");
                        let now = tokio::time::Instant::now();
                        // A keep-alive unanswered half an interval after
                        // its send (at least 500 ms: a busy machine is not
                        // a cut-off member): our member is cut off from the leader
                        // (in a minority, isolated), which it does not
                        // say: it retries the leader for seconds, and a
                        // watch on it sees no deletion meanwhile, while
                        // the next holder may be us. A new connection
                        // prefers a member that names a leader. Checked
                        // before our own next attempt (a TTL after the
                        // last) would find out the slow way.
                        if k.answer_by.is_some_and(|a| a <= now) {
                            k.answer_by = None;
                            let sent = k.sent;
                            if kept.load(Ordering::Relaxed) < millis(sent) {
                                // Its reply may be waiting behind this
                                // wake-up (a thread stopped past the
                                // deadline finds both ready, and select!
                                // picks either): one look first.
                                let now_ready =
                                    tokio::time::timeout(Duration::ZERO, kept_next(keep));
                                match now_ready.await {
                                    Ok(Ok(Some(r))) if r.ttl() > 0 => confirmed(kept, sent),
                                    _ => return Err(unanswered()),
                                }
                            }
                        }
                        let k = keep.as_mut().expect("due only when kept");
                        if now < k.next {
                            continue;
                        }
                        k.next = now + k.every;
                        k.answer_by = Some(now + answer_within(k.every));
                        k.sent = crate::clock::now();
                        match &mut k.stream {
                            Some((keeper, _)) => keeper.keep_alive().await?,
                            None => match tokio::time::timeout(
                                answer_within(k.every),
                                client.lease_keep_alive(k.lease),
                            )
                            .await
                            .map_err(|_| unanswered())?
                            {
                                Ok(stream) => {
                                    confirmed(kept, k.sent);
                                    k.stream = Some(stream);
                                }
                                Err(etcd_client::Error::LeaseKeepAliveError(_)) => {
                                    *keep = None;
                                    return Ok(Some(Notice::Wake));
                                }
                                Err(e) => return Err(e),
                            },
                        }
                    }
                }
            }
        });
        out.map_err(|e: etcd_client::Error| {
            target.distrust(*member);
            let detail = super::one_line(&super::error_chain(&e));
            StoreError::Unreachable(super::Failure::new(Some("watch"), display, detail))
        })
    }
}

fn watch_ended() -> etcd_client::Error {
    etcd_client::Error::WatchError("watch ended".into())
}

/// How long a keep-alive sent every `every` may go unanswered.
fn answer_within(every: Duration) -> Duration {
    (every / 2).max(Duration::from_millis(500)).min(every)
}

fn unanswered() -> etcd_client::Error {
    etcd_client::Error::LeaseKeepAliveError(
        "a keep-alive went unanswered for half its interval".into(),
    )
}

/// What `f` gives, or never without one: a `select!` arm for something
/// that may not be there.
async fn maybe<F: std::future::Future>(f: Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn recv(orders: &mut Option<mpsc::UnboundedReceiver<Follow>>) -> Option<Follow> {
    maybe(orders.as_mut().map(|rx| rx.recv())).await
}

async fn watch_next(watch: &mut Option<WatchStream>) -> Ec<Option<WatchResponse>> {
    maybe(watch.as_mut().map(|w| w.message())).await
}

async fn kept_next(keep: &mut Option<Keep>) -> Ec<Option<LeaseKeepAliveResponse>> {
    let stream = keep.as_mut().and_then(|k| k.stream.as_mut());
    maybe(stream.map(|(_, s)| s.message())).await
}

async fn at(due: Option<tokio::time::Instant>) {
    maybe(due.map(tokio::time::sleep_until)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_name_their_owner_and_nothing_else() {
        let p = "distlock:{a}:queue/";
        assert_eq!(
            owner_of(p, b"distlock:{a}:queue/h:1:ff").as_deref(),
            Some("h:1:ff")
        );
        assert_eq!(owner_of(p, b"distlock:{a}:queue/"), None);
        assert_eq!(owner_of(p, b"distlock:{b}:queue/x"), None);
        assert_eq!(owner_of(p, b"distlock:{a}:queue/\xff"), None);
    }

    #[test]
    fn a_lock_under_our_owner_id_and_waiter_lease_is_ours_after_a_lost_take_reply() {
        assert!(ours(b"h:1:ff", 7, "h:1:ff", 7));
        assert!(!ours(b"h:1:ff", 8, "h:1:ff", 7), "another lease of ours");
        assert!(!ours(b"h:2:ff", 7, "h:1:ff", 7), "someone else");
    }

    #[test]
    fn a_lease_gone_a_ttl_after_its_last_keep_alive_ran_out_sooner_was_revoked() {
        let s = Duration::from_secs;
        assert!(ran_out(s(100), s(102), 2));
        assert!(ran_out(s(100), s(500), 2));
        assert!(!ran_out(s(100), s(101), 2));
        assert!(!ran_out(s(100), s(100), 2));
    }

    #[test]
    fn a_waiter_lease_is_kept_alive_three_times_per_ttl() {
        assert_eq!(keep_every(3), Duration::from_secs(1));
        assert_eq!(keep_every(30), Duration::from_secs(10));
    }
}
