//! The etcd backend: etcd v3 over gRPC (`etcd-client`, on tokio and
//! tonic), answering in the store's own types.
//!
//! A lock is the key `P:{N}` (the same spelling as on Redis, so
//! `DISTLOCK_KEY` reads alike), holding the owner id and attached to an
//! etcd lease of the run's TTL. Taking it is one transaction, "if the key
//! was never created, put it under our lease", so the fencing token is
//! the revision at which it was created: Raft orders it, so it never goes
//! back, whatever restarts or leader changes happen. The same transaction
//! rewrites `P:{N}:fence` (no lease), whose mod revision is therefore the
//! last token issued even once the lock is free. Renewal is a lease
//! keep-alive, the key checked to hold our owner (a key deleted by
//! someone else is a lost lease, as on Redis): by a read at a run's first
//! renewal, by a watch from then on (see `renew`). Release deletes the key
//! only if it still holds our owner, writing a run's records in the same
//! transaction (`record.rs`), then revokes the lease.
//!
//! The client is async; distlock is not. One current-thread runtime per
//! process is made on the first call (so only for an etcd URL), and each
//! call runs on it as a [`Call`] of the store's watchdog (`store/call.rs`),
//! which ends it at its deadline or at once on an ending signal.

mod doctor;
mod errors;
mod min_hold;
mod queue;
mod record;
mod replies;
mod semaphore;
mod target;

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KeyValue, LeaseKeepAliveStream, LeaseKeeper,
    LeaseTimeToLiveOptions, LeaseTimeToLiveResponse, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions, WatchStream,
};

use super::call::Call;
use super::{
    secs, Acquire, Failure, ForeignKey, Found, LockInfo, LockKeys, Mode, Release, Result,
    RunRecord, SlotsInfo, StoreError, Watched,
};

pub use queue::Subscription;
use replies::op_responses;
use semaphore::{absent, Ec};
pub use target::Target;

/// A lazily connected etcd client with a timeout on every call.
pub struct Store {
    pub(super) target: Target,
    pub(super) timeout: Duration,
    /// The client, and which member of the URL it talks to.
    client: Option<(Client, usize)>,
    pub(super) interrupt_on: &'static [i32],
    queue: queue::Queue,
    /// Someone watches the wait: see `set_watched`.
    watched: bool,
    /// The lease this store last took a lock under, and the TTL (s) it was
    /// granted with: its renewals need not ask etcd for the granted TTL
    /// (see `renew`).
    granted: Option<(i64, i64)>,
    /// What the last acquisition read for its release (`record::Plan`).
    plan: Option<record::Plan>,
    /// A run's renewals after the first: see `renew`.
    renewing: Option<Renewing>,
    /// The lease of a single attempt that found the lock busy, kept for
    /// the wait that may follow to join the queue with (`queue::join`):
    /// a grant and a revoke fewer per waiter. Revoked on drop if unused.
    spare: Option<Spare>,
}

#[derive(Debug, Clone, Copy)]
struct Spare {
    lease: i64,
    ttl: i64,
    /// When its grant was sent.
    sent: Duration,
}

impl Drop for Store {
    fn drop(&mut self) {
        if let (Some(s), Some(c)) = (self.spare.take(), self.client.clone().map(|(c, _)| c)) {
            self.revoke(&Arc::new(Mutex::new(vec![(s.lease, c)])), REVOKE_WITHIN / 5);
        }
    }
}

impl Store {
    /// A store for `target`; does no I/O (and starts no runtime) until the
    /// first call.
    pub fn new(target: Target, timeout: Duration) -> Store {
        Store {
            target,
            timeout,
            client: None,
            interrupt_on: &[],
            queue: queue::Queue::default(),
            watched: false,
            granted: None,
            plan: None,
            renewing: None,
            spare: None,
        }
    }

    /// A watched waiter's attempts also read the holder's metadata key
    /// (one more read each), for its status line.
    pub fn set_watched(&mut self, on: bool) {
        self.watched = on;
    }

    /// `--min-replicas` is refused for etcd URLs before a store is made:
    /// a commit already reaches a majority.
    pub fn set_min_replicas(&mut self, _n: u32) {}

    /// Runs `f` on a connected client, connecting first if need be, all of
    /// it one [`Call`]. On any error the client is dropped, so the next
    /// call starts clean; a member that did not answer is the next
    /// connection's last choice ([`Target::distrust`]).
    fn call<T, F, Fut>(&mut self, what: &str, f: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let rt = self.runtime()?;
        let (timeout, target) = (self.timeout, self.target.clone());
        let existing = self.client.take();
        let fresh = existing.is_none();
        let granted = Granted::default();
        let call = Call::start_async(timeout, self.interrupt_on);
        let used = std::cell::Cell::new(None);
        let out = rt.block_on(call.within(GRANTED.scope(granted.clone(), async {
            let (client, member) = match existing {
                Some(c) => c,
                None => target
                    .connect_member(timeout)
                    .await
                    .map_err(|e| (true, e))?,
            };
            used.set(Some(member));
            let out = f(client.clone()).await.map_err(|e| (false, e))?;
            Ok::<_, (bool, etcd_client::Error)>(((client, member), out))
        })));
        let failed = match out {
            Some(Ok((client, v))) => {
                if fresh {
                    self.queue.moved_to(&client.0, client.1);
                }
                self.client = Some(client);
                return Ok(v);
            }
            other => other.and_then(Result::err),
        };
        // An error the deadline had passed before (tonic's own request
        // timeout, polled before the watchdog's wake-up on a busy CPU) is
        // the deadline's: a timeout, which a waiter rides out.
        let failed = failed.filter(|_| !call.expired());
        let interrupted = failed.is_none() && call.interrupted();
        // A signal ends a call at once: a healthy member revokes in a
        // round trip, and a hung one gets no second.
        self.revoke(&granted, REVOKE_WITHIN / if interrupted { 5 } else { 1 });
        let e = match failed {
            Some((connecting, e)) => self.describe((!connecting).then_some(what), e, fresh),
            // TLS to a port that waits for a line (Redis, a plain etcd
            // behind some proxies) is silence, like a slow server: say what
            // it may be, as for rediss://.
            None if fresh && self.target.seen(false).tls => self.ended(
                interrupted,
                what,
                " (no reply over TLS: if this port has no TLS, use etcd:// instead of etcds://)",
            ),
            None => self.ended(interrupted, what, ""),
        };
        if let Some(m) = used.get().filter(|_| e.is_connectivity() && !interrupted) {
            self.target.distrust(m);
        }
        Err(e)
    }

    /// The runtime every etcd call of the process runs on, the
    /// subscription's included: made on the first, so never for a Redis
    /// URL.
    fn runtime(&self) -> Result<&'static tokio::runtime::Runtime> {
        static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        if let Some(rt) = RUNTIME.get() {
            return Ok(rt);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| self.failure(StoreError::Unreachable, None, e.to_string()))?;
        Ok(RUNTIME.get_or_init(|| rt))
    }

    /// The error of a call `what` that its [`Call`] ended: `interrupted`
    /// by a signal (`lease` asks its `Sleep` which, and ends the wait with
    /// it), or past its deadline (told with `hint`).
    fn ended(&self, interrupted: bool, what: &str, hint: &str) -> StoreError {
        let detail = if interrupted {
            "interrupted by a signal".to_owned()
        } else {
            format!(
                "no complete answer within {}{hint}",
                secs(self.timeout, false)
            )
        };
        self.failure(StoreError::Timeout, Some(what), detail)
    }

    /// Revokes the leases a failed call granted (a `run` refused by etcd's
    /// permissions, a call timed out or interrupted after its grant): left
    /// alone, each would live on for its whole TTL with nothing to show for
    /// it. Only a lease with no key under it: one that carries what the
    /// call committed before it failed (a lock whose reply was lost, a done
    /// mark written before a history trim failed) stays, as it would have
    /// had the call succeeded. Best effort, on the connections that
    /// granted them, within `within` in all: the call has failed already,
    /// and its error is what the caller must hear.
    fn revoke(&self, granted: &Granted, within: Duration) {
        let leases = std::mem::take(&mut *granted.lock().unwrap_or_else(PoisonError::into_inner));
        let Some(rt) = self.runtime().ok().filter(|_| !leases.is_empty()) else {
            return;
        };
        let call = Call::start_async(within, &[]);
        rt.block_on(call.within(async move {
            for (id, mut c) in leases {
                let keys = LeaseTimeToLiveOptions::new().with_keys();
                let r = c.lease_time_to_live(id, Some(keys)).await;
                if matches!(r, Ok(r) if r.ttl() > 0 && r.keys().is_empty()) {
                    let _ = c.lease_revoke(id).await;
                }
            }
        }));
    }

    fn failure(&self, kind: errors::Kind, op: Option<&str>, detail: String) -> StoreError {
        kind(Failure::new(op, &self.target.display, detail))
    }

    /// An etcd-client error as a [`StoreError`] of the right kind. The
    /// detail is the server's or tonic's words, which carry no password
    /// (the password is only ever sent in an Authenticate request).
    /// `fresh`: the call connected first, so a failure may be the
    /// address's fault, which a probe may tell (see `errors`).
    fn describe(&self, op: Option<&str>, e: etcd_client::Error, fresh: bool) -> StoreError {
        use etcd_client::Error as E;
        use tonic::Code;
        let below =
            |e: &(dyn std::error::Error + 'static)| errors::below_grpc(e, &self.target.seen(fresh));
        let (kind, detail): errors::Said = match e {
            E::GRpcStatus(s) => below(&s).unwrap_or_else(|| {
                let detail = one_line(s.message());
                let auth = detail.contains("authentication failed");
                let kind: errors::Kind = match s.code() {
                    Code::Unauthenticated => StoreError::Auth,
                    Code::PermissionDenied => |failure| StoreError::Denied {
                        failure,
                        command: None,
                    },
                    Code::InvalidArgument | Code::FailedPrecondition if auth => StoreError::Auth,
                    // tonic's own per-request timeout says "Timeout
                    // expired" as Cancelled: no answer in time, as ours.
                    Code::DeadlineExceeded | Code::Cancelled => StoreError::Timeout,
                    Code::Unavailable => tls_or_unreachable(&detail),
                    _ => StoreError::Server,
                };
                (kind, detail)
            }),
            E::TransportError(t) => below(&t).unwrap_or_else(|| {
                let detail = one_line(&error_chain(&t));
                (tls_or_unreachable(&detail), detail)
            }),
            E::IoError(io) => {
                below(&io).unwrap_or_else(|| (StoreError::Unreachable, io.to_string()))
            }
            other => (StoreError::Server, one_line(&other.to_string())),
        };
        self.failure(kind, op, detail)
    }

    pub fn acquire(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        ttl_ms: u64,
        mode: Mode,
        meta: &[(&str, &str)],
    ) -> Result<Acquire> {
        if let Some(n) = keys.limit {
            let got = self.acquire_slot(keys, owner, lease_secs(ttl_ms)?, n, by_run(meta))?;
            // A waiter for a slot (in any order, as on Redis) is woken by
            // a change among the slots.
            if mode != Mode::Once && matches!(got, Acquire::Busy { .. }) {
                self.watch_slots(semaphore::slots_prefix(keys), n)?;
            }
            return Ok(got);
        }
        if mode == Mode::Fair {
            return self.acquire_fair(keys, owner, ttl_ms, meta);
        }
        let ttl = lease_secs(ttl_ms)?;
        // `--once-per`: the done mark, judged first; the lock is then taken
        // only if the mark is still as judged.
        let done_rev = match self.look_done(keys, owner)? {
            record::Look::Done(mark) => return Ok(Acquire::Done(mark)),
            record::Look::Free(rev) => rev,
        };
        let done = keys.done.clone();
        let taking = Taking::new(keys, owner, meta);
        let mut when = vec![absent(keys.lock.clone()), semaphore::no_slots(keys)];
        // A single attempt yields to the queue; `any` ignores it.
        if mode == Mode::Once {
            when.push(Self::nobody_waits(keys));
        }
        when.extend(done_rev.map(|r| Compare::mod_revision(done.clone(), CompareOp::Equal, r)));
        let (key, me) = (keys.lock.clone(), owner.to_owned());
        let stale = self.spare.take().map(|s| s.lease);
        let (outcome, done_moved, short, spare) = self.call("acquire", |mut c| async move {
            revoke_leases(&mut c, stale).await;
            let sent = crate::clock::now();
            let lease = grant(&mut c, ttl).await?;
            let hold = min_hold::grant(&mut c, taking.hold_secs).await?;
            let txn = Txn::new()
                .when(when)
                .and_then(taking.ops(lease, hold))
                .or_else([TxnOp::get(key, None), TxnOp::get(done, None)]);
            let resp = c.txn(txn).await?;
            let replies = op_responses(&resp)?;
            if resp.succeeded() {
                let rev = resp.header().map_or(0, |h| h.revision());
                let plan = taking.plan(&replies);
                return Ok((Ok((rev, Some((lease, plan)))), false, None, None));
            }
            let kv = kv_at(&replies, 0);
            // The done mark is not as judged: judge it again.
            let mark_rev = kv_at(&replies, 1).map_or(0, |kv| kv.mod_revision());
            let done_moved = done_rev.is_some_and(|r| r != mark_rev);
            // Not taken: our new leases are of no use, but for a single
            // attempt's, kept for the wait that may follow (`spare`).
            let ours = kv.as_ref().is_some_and(|kv| kv.value() == me.as_bytes());
            let spare = (mode == Mode::Once && !ours).then_some((lease, sent));
            let unused = hold.into_iter().chain(spare.is_none().then_some(lease));
            revoke_leases(&mut c, unused).await;
            let Some(kv) = kv else {
                // Deleted between the compare and now: busy for a moment.
                return Ok((Err((None, None)), done_moved, None, spare));
            };
            if kv.value() == me.as_bytes() {
                // A retry after a lost reply (or another call with our
                // owner id): ours already, same token, if its lease lasts.
                let ours = Ok((kv.create_revision(), None));
                return Ok(match keep_alive_for(&mut c, kv.lease(), ttl).await? {
                    Kept::Yes => (ours, false, None, None),
                    Kept::Short(granted) => (ours, false, Some(granted), None),
                    Kept::Gone => (Err((None, None)), false, None, None),
                });
            }
            let ttl = lease_left(&mut c, kv.lease(), AtZero::Gone).await;
            Ok((
                Err((Some(kv.value().to_vec()), ttl)),
                done_moved,
                None,
                spare,
            ))
        })?;
        self.spare = spare.map(|(lease, sent)| Spare { lease, ttl, sent });
        if let Some(granted) = short {
            return Err(short_lease(keys, granted, ttl));
        }
        if let Err((None, _)) = outcome {
            self.refuse_semaphore(keys)?;
        }
        match outcome {
            Ok((rev, taken)) => {
                if let Some((lease, plan)) = taken {
                    self.granted = Some((lease, ttl));
                    self.plan = Some(plan);
                }
                Ok(Acquire::Acquired {
                    token: self.token(keys, rev)?,
                })
            }
            // Free, and the done mark failed the compare: judge it again.
            Err((None, _)) if done_moved => self.acquire(keys, owner, ttl_ms, mode, meta),
            Err((holder, ttl)) => {
                let busy = Acquire::Busy {
                    holder: holder.map(|h| text(&keys.lock, h)).transpose()?,
                    ttl,
                    ahead: None,
                    watched: Watched::default(),
                };
                self.after_busy(keys, mode, busy)
            }
        }
    }

    /// A revision as a fencing token: positive, below 2^53.
    fn token(&self, keys: &LockKeys, rev: i64) -> Result<u64> {
        match u64::try_from(rev) {
            Ok(t) if t > 0 && t < 1 << 53 => Ok(t),
            _ => Err(ForeignKey {
                key: keys.lock.clone(),
                kind: format!("key at revision {rev}, not a fencing token,"),
                store: "an etcd",
            }
            .into()),
        }
    }

    /// The holder a read of the lock key found, as text. None may be a
    /// name that became a semaphore, which is refused as on Redis.
    fn holder(&mut self, keys: &LockKeys, h: Option<Vec<u8>>) -> Result<Option<String>> {
        if h.is_none() {
            self.refuse_semaphore(keys)?;
        }
        h.map(|h| text(&keys.lock, h)).transpose()
    }

    /// Renews our lease: the key must still hold our owner (deleted or
    /// taken over is a lost lease), then one keep-alive on its lease, whose
    /// reply must confirm it (TTL > 0). The lease's TTL is the one it was
    /// granted with: etcd cannot change it, so one granted shorter than
    /// `--ttl` is refused (see `keep_alive_for`).
    ///
    /// Under a lease this store granted long enough (a run's own
    /// renewals), the first renewal also opens what the next ones use: the
    /// lease's keep-alive stream and a watch on the key from just after
    /// the read that found it ours. Each later renewal is then one message
    /// on that stream, and a key deleted or taken over (by `etcdctl del`:
    /// distlock's own releases and `--force` revoke the lease too) is told
    /// by the watch, at the first renewal that finds its event received.
    pub fn renew(&mut self, keys: &LockKeys, owner: &str, ttl_ms: u64) -> Result<bool> {
        let ttl = lease_secs(ttl_ms)?;
        if let Some(n) = keys.limit {
            return self.renew_slot(keys, owner, n, ttl);
        }
        let (key, me) = (keys.lock.clone(), owner.to_owned());
        let granted = self.granted;
        let renewing = self.renewing.take();
        let (kept, renewing) = self.call("renewal", |mut c| async move {
            if let Some(r) = renewing {
                if let Some(kept) = r.renew(&me).await? {
                    return Ok(kept);
                }
            }
            let got = c.get(key.clone(), None).await?;
            let ours = |kv: &&KeyValue| kv.value() == me.as_bytes() && kv.lease() != 0;
            let Some(kv) = got.kvs().first().filter(ours) else {
                return Ok((Kept::Gone, None));
            };
            let lease = kv.lease();
            if !granted.is_some_and(|(id, secs)| id == lease && secs >= ttl) {
                return Ok((keep_alive_for(&mut c, lease, ttl).await?, None));
            }
            let from = got.header().map_or(0, |h| h.revision()) + 1;
            let mut w = c.clone();
            let watch = WatchOptions::new().with_start_revision(from);
            let (kept, watch) = tokio::join!(c.lease_keep_alive(lease), w.watch(key, Some(watch)));
            let (keeper, replies) = match kept {
                Ok(k) => k,
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => return Ok((Kept::Gone, None)),
                Err(e) => return Err(e),
            };
            let r = Renewing {
                lease,
                keeper,
                replies,
                watch: watch?,
            };
            Ok((Kept::Yes, Some(r)))
        })?;
        self.renewing = renewing;
        match kept {
            Kept::Yes => Ok(true),
            Kept::Gone => Ok(false),
            Kept::Short(granted) => Err(short_lease(keys, granted, ttl)),
        }
    }

    pub fn release(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        self.release_recording(keys, owner, RunRecord::default(), false)
    }

    /// As `release`, but refused (`HeldByRun`, nothing changed) while a
    /// `run` holds the lease: its marker key (see `acquire`) exists.
    pub fn release_by_owner(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        self.release_as(keys, owner, (RunRecord::default(), false), true)
    }

    pub fn release_recording(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        record: RunRecord,
        mark_done: bool,
    ) -> Result<Release> {
        self.release_as(keys, owner, (record, mark_done), false)
    }

    /// Deletes the key if it still holds our owner, then revokes its lease
    /// (so nothing else under it lingers); with a record or `mark_done`,
    /// writes them in the same transaction (`record.rs`); with
    /// `unless_run`, not while a run marks the lease.
    fn release_as(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        end: (RunRecord, bool),
        unless_run: bool,
    ) -> Result<Release> {
        if let Some(n) = keys.limit {
            return self.release_slot(keys, owner, n, unless_run, end.0);
        }
        let hold = Some(min_hold::hold_key(keys));
        if let Some(done) = self.release_at_once(keys, owner, end, hold, unless_run)? {
            return Ok(done);
        }
        let writes = record::EndWrites::of(keys, owner, &end.0, end.1)?;
        if let Some(left) = self.keep_for_min_hold(keys, owner, unless_run, writes)? {
            return Ok(Release::Kept(left));
        }
        // No hold left (its key may outlive its last second): ours and
        // not released now is a run's marker.
        let again = self.release_at_once(keys, owner, end, None, unless_run)?;
        Ok(again.unwrap_or(Release::HeldByRun))
    }

    /// Deletes the key whoever holds it and revokes its lease; the holder
    /// evicted, if any. The fence key is left as it is.
    pub fn force_release(&mut self, keys: &LockKeys) -> Result<Option<String>> {
        if let Some(n) = keys.limit {
            return self.force_release_slots(keys, n);
        }
        let key = keys.lock.clone();
        let holder = self.call("release --force", |mut c| async move {
            let txn =
                Txn::new().and_then([TxnOp::get(key.clone(), None), TxnOp::delete(key, None)]);
            let resp = c.txn(txn).await?;
            let kv = kv_at(&op_responses(&resp)?, 0);
            revoke_leases(&mut c, kv.as_ref().map(KeyValue::lease)).await;
            Ok(kv.map(|kv| kv.value().to_vec()))
        })?;
        self.holder(keys, holder)
    }

    pub fn inspect(&mut self, keys: &LockKeys) -> Result<LockInfo> {
        let (key, fence) = (keys.lock.clone(), keys.fence.clone());
        let queue = queue::first_waiters(keys);
        let prefix = Self::queue_prefix(keys);
        let (lock, fence_rev, ttl, rev, waiters) = self.call("inspect", |mut c| async move {
            let txn = Txn::new().and_then([TxnOp::get(key, None), TxnOp::get(fence, None), queue]);
            let resp = c.txn(txn).await?;
            let rev = resp.header().map_or(0, |h| h.revision());
            let ops = op_responses(&resp)?;
            let kv = kv_at(&ops, 0);
            let fence_rev = kv_at(&ops, 1).map(|kv| kv.mod_revision());
            let lease = kv.as_ref().map_or(0, KeyValue::lease);
            let ttl = lease_left(&mut c, lease, AtZero::Shown).await;
            let waiters = match ops.get(2) {
                Some(TxnOpResponse::Get(g)) => queue::waiters(&mut c, &prefix, g).await,
                _ => None,
            };
            let lock = kv.map(|kv| kv.value().to_vec());
            Ok((lock, fence_rev, ttl, rev, waiters))
        })?;
        let holder = self.holder(keys, lock)?;
        let token = fence_rev.map(|r| self.token(keys, r)).transpose()?;
        let (meta, last_run, done) = self.records_at(keys, rev, holder.is_some())?;
        Ok(LockInfo {
            ttl: holder.as_ref().and(ttl),
            holder,
            token,
            meta,
            last_run,
            semaphore: None,
            done,
            waiters,
        })
    }

    pub fn inspect_many(
        &mut self,
        keys: &[LockKeys],
    ) -> Result<Vec<std::result::Result<LockInfo, ForeignKey>>> {
        keys.iter()
            .map(|k| match self.inspect(k) {
                Ok(info) => Ok(Ok(info)),
                Err(StoreError::WrongType(fk)) => Ok(Err(fk)),
                Err(e) => Err(e),
            })
            .collect()
    }

    /// Every held lock under `prefix`: the keys `P:{N}`, and semaphores
    /// by their slot keys (range reads of the prefix, keys only); other
    /// keys under it are not locks.
    ///
    /// Read a page of [`LIST_PAGE`] keys at a time: one read of the whole
    /// prefix failed once its keys passed the client's 4 MiB message limit
    /// (about 760 names with 100 history records each). A page that ends
    /// in a name's history goes on past the rest of it ([`list_resume`]).
    pub fn list_names(&mut self, prefix: &str) -> Result<Vec<Found>> {
        let start = format!("{prefix}:{{");
        let end = semaphore::prefix_end(&start);
        let mut from = start.clone().into_bytes();
        let mut found = Vec::new();
        loop {
            let range = (from.clone(), end.clone());
            let (keys, more) = self.call("list", |mut c| async move {
                let page = GetOptions::new().with_range(range.1).with_keys_only();
                let got = c.get(range.0, Some(page.with_limit(LIST_PAGE))).await?;
                let keys: Vec<Vec<u8>> = got.kvs().iter().map(|kv| kv.key().to_vec()).collect();
                Ok((keys, got.more()))
            })?;
            for k in keys.iter().filter_map(|k| std::str::from_utf8(k).ok()) {
                let lock = lock_name(prefix, k).map(|name| (name, false));
                let hit = lock.or_else(|| semaphore::slot_name(prefix, k).map(|name| (name, true)));
                if let Some((name, semaphore)) = hit {
                    found.push(Found { name, semaphore });
                }
            }
            match keys.last() {
                Some(last) if more => from = list_resume(last, start.len()),
                _ => break,
            }
        }
        found.sort();
        found.dedup();
        Ok(found)
    }
}

/// What etcd says of lease `id` now; None for no lease (0). Every read
/// of a lease's time left goes through here: its TTL is whole seconds
/// rounded down, -1 once the lease is gone (see [`AtZero`] for 0).
async fn lease_now(c: &mut Client, id: i64) -> Ec<Option<LeaseTimeToLiveResponse>> {
    if id == 0 {
        return Ok(None);
    }
    c.lease_time_to_live(id, None).await.map(Some)
}

/// Time left on lease `id`, to show; None for no lease, one gone, or no
/// answer. A decision reads [`lease_now`], for its errors.
async fn lease_left(c: &mut Client, id: i64, zero: AtZero) -> Option<Duration> {
    time_left(lease_now(c, id).await.ok()??.ttl(), zero)
}

/// What a lease's TTL of 0 is to its reader: etcd rounds the time left
/// down, so 0 is a lease in its last second (or just past its end and
/// not yet revoked).
#[derive(Clone, Copy)]
enum AtZero {
    /// Alive with 0s left: `inspect` shows the holder and each waiter so.
    Shown,
    /// Gone: to a busy line, a semaphore's list of holders and the minimum
    /// hold (whose release then goes ahead).
    Gone,
}

fn time_left(ttl: i64, zero: AtZero) -> Option<Duration> {
    let alive = ttl > 0 || ttl == 0 && matches!(zero, AtZero::Shown);
    alive.then(|| Duration::from_secs(ttl as u64))
}

/// Revokes each of `ids` but 0 (no lease), best effort: what the caller
/// did stands whatever the revocations say.
async fn revoke_leases(c: &mut Client, ids: impl IntoIterator<Item = i64>) {
    for id in ids.into_iter().filter(|&id| id != 0) {
        let _ = c.lease_revoke(id).await;
    }
}

/// Whether a keep-alive stream's opening confirmed its lease: etcd-client
/// reads the first reply itself and calls a TTL of 0 a
/// LeaseKeepAliveError.
fn alive<T>(opened: Ec<T>) -> Ec<bool> {
    match opened {
        Ok(_) => Ok(true),
        Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The leases granted during one call, with the client that granted each.
type Granted = Arc<Mutex<Vec<(i64, Client)>>>;

tokio::task_local! {
    /// The current call's [`Granted`]: see [`grant`].
    static GRANTED: Granted;
}

/// How long a failed call may spend revoking the leases it granted.
const REVOKE_WITHIN: Duration = Duration::from_secs(1);

/// Grants a lease of `ttl` seconds within a store call, which revokes it
/// if the call then fails (`Store::revoke`). Every lease distlock grants
/// goes through here.
async fn grant(c: &mut Client, ttl: i64) -> Ec<i64> {
    Ok(grant_with_term(c, ttl).await?.0)
}

/// [`grant`], and the raft term etcd granted the lease in: a done mark
/// keeps it, since a new term means a new leader, which refreshed every
/// lease (record.rs dates a mark by its lease only within its term).
async fn grant_with_term(c: &mut Client, ttl: i64) -> Ec<(i64, Option<u64>)> {
    let reply = c.lease_grant(ttl, None).await?;
    let id = reply.id();
    adopt(c, id);
    Ok((id, reply.header().map(|h| h.raft_term())))
}

/// Has the current call revoke lease `id` if it fails, as one it granted.
fn adopt(c: &Client, id: i64) {
    let _ = GRANTED.try_with(|g| {
        g.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, c.clone()));
    });
}

/// Keys per read of `list`: about 60 KiB of keys a page.
const LIST_PAGE: i64 = 1000;

/// Where `list`'s next page starts after `key` (whose name starts at
/// byte `at`): just past it, or past the whole of its name's history when
/// `key` is a history key, since a name holds up to `--history-keep` of
/// them and none is a lock. Names hold no braces, so the first `}` ends
/// the name.
fn list_resume(key: &[u8], at: usize) -> Vec<u8> {
    const HISTORY: &[u8] = b"}:history/";
    let rest = key.get(at..).unwrap_or_default();
    if let Some(i) = rest.iter().position(|&b| b == b'}') {
        if rest[i..].starts_with(HISTORY) {
            // The first key after every `…}:history/…` (`…}:history0`).
            return semaphore::prefix_end(&key[..at + i + HISTORY.len()]);
        }
    }
    [key, &[0]].concat()
}

/// A value of ours as text; one that is not UTF-8 is someone else's.
fn text(key: &str, v: Vec<u8>) -> Result<String> {
    String::from_utf8(v).map_err(|_| record::unreadable(key.as_bytes(), "an owner id"))
}

/// Whether `meta` is a `run`'s: its lease also carries the run marker.
fn by_run(meta: &[(&str, &str)]) -> bool {
    meta.iter().any(|(k, _)| *k == "run")
}

/// What taking the lock writes, prepared outside the call. The plain
/// acquisition and a fair waiter's both write it, so a holder looks the
/// same (to `inspect`, a release by owner, a status line) whichever way it
/// came.
struct Taking {
    keys: LockKeys,
    owner: String,
    /// `P:{N}:holder` and its metadata (`record::holder_put`).
    holder: (String, String),
    by_run: bool,
    /// The `--min-hold` lease to grant, in seconds, if any.
    hold_secs: Option<i64>,
}

impl Taking {
    fn new(keys: &LockKeys, owner: &str, meta: &[(&str, &str)]) -> Taking {
        Taking {
            keys: keys.clone(),
            owner: owner.to_owned(),
            holder: record::holder_put(keys, meta),
            by_run: by_run(meta),
            hold_secs: min_hold::hold_secs(meta),
        }
    }

    /// The puts under the holder's `lease`: the lock key, the fence, the
    /// holder's metadata, the minimum hold's key (under `hold`) and, for a
    /// `run`, its marker `P:{N}:meta`, by which a release by owner from
    /// its CMD is refused (`release_by_owner`); the lease's end takes it.
    /// First, the reads for the run's release (`record::Plan::reads`).
    fn ops(&self, lease: i64, hold: Option<i64>) -> Vec<TxnOp> {
        let under = || Some(PutOptions::new().with_lease(lease));
        let (keys, me) = (&self.keys, self.owner.as_str());
        let mut ops = record::Plan::reads(keys, self.by_run);
        ops.extend([
            TxnOp::put(keys.lock.clone(), me, under()),
            TxnOp::put(keys.fence.clone(), me, None),
            TxnOp::put(self.holder.0.clone(), self.holder.1.clone(), under()),
        ]);
        if let Some(h) = hold {
            ops.push(min_hold::put(keys, me, h));
        }
        if self.by_run {
            ops.push(TxnOp::put(keys.meta.clone(), "run", under()));
        }
        ops
    }

    /// The plan read by a transaction of [`Taking::ops`] that took the
    /// lock.
    fn plan(&self, replies: &[TxnOpResponse]) -> record::Plan {
        record::Plan::of(&self.keys, self.by_run, replies)
    }
}

/// A run's renewals after the first (`Store::renew`): its lease's
/// keep-alive stream, and a watch on its lock key.
struct Renewing {
    lease: i64,
    keeper: LeaseKeeper,
    replies: LeaseKeepAliveStream,
    watch: WatchStream,
}

impl Renewing {
    /// One keep-alive, and what the watch told meanwhile; None when the
    /// watch was cancelled (its revision compacted, say): a renewal
    /// that reads the key decides, and watches again.
    async fn renew(mut self, me: &str) -> Ec<Option<(Kept, Option<Renewing>)>> {
        self.keeper.keep_alive().await?;
        let ended = || etcd_client::Error::WatchError("the renewal's stream ended".into());
        let mut confirmed = false;
        loop {
            // The watch first: an event that came in before the
            // keep-alive's reply is seen in this renewal.
            let watched = tokio::select! {
                biased;
                w = self.watch.message() => w?.ok_or_else(ended)?,
                k = self.replies.message(), if !confirmed => {
                    if k?.ok_or_else(ended)?.ttl() <= 0 {
                        return Ok(Some((Kept::Gone, None)));
                    }
                    confirmed = true;
                    continue;
                }
                () = std::future::ready(()), if confirmed => {
                    return Ok(Some((Kept::Yes, Some(self))));
                }
            };
            if watched.canceled() {
                return Ok(None);
            }
            let ours = |kv: Option<&KeyValue>| {
                kv.is_some_and(|kv| kv.value() == me.as_bytes() && kv.lease() == self.lease)
            };
            let lost = watched
                .events()
                .iter()
                .any(|e| e.event_type() == etcd_client::EventType::Delete || !ours(e.kv()));
            if lost {
                return Ok(Some((Kept::Gone, None)));
            }
        }
    }
}

/// What keeping the lease a lock key is under alive found.
enum Kept {
    /// Kept, and granted with at least the TTL asked for.
    Yes,
    /// Kept, but granted with this shorter TTL (seconds).
    Short(i64),
    /// No such lease any more.
    Gone,
}

/// Keeps lease `id` alive and checks it was granted with at least `ttl`
/// seconds. etcd refreshes a lease to the TTL it was granted with, so a
/// lease granted shorter (by an earlier call with the same owner id, or
/// the `--min-hold` lease a kept lock moved to) would expire before the
/// deadline distlock counts from `--ttl`: two holders. Redis extends to
/// the longer of the two instead; etcd cannot.
async fn keep_alive_for(c: &mut Client, id: i64, ttl: i64) -> Ec<Kept> {
    if !queue::kept_alive(c, id).await? {
        return Ok(Kept::Gone);
    }
    let granted = c.lease_time_to_live(id, None).await?.granted_ttl();
    let short = Some(granted).filter(|&g| g < ttl);
    Ok(short.map_or(Kept::Yes, Kept::Short))
}

/// The usage error for a lease held under a shorter TTL than asked.
fn short_lease(keys: &LockKeys, granted: i64, ttl: i64) -> StoreError {
    StoreError::Unsupported(format!(
        "{} is held by this owner under an etcd lease of {granted}s, and etcd cannot lengthen a lease: --ttl {ttl}s is refused (release it and acquire it again)",
        keys.name
    ))
}

/// The name in a lock key `P:{N}`, or None for any other key.
fn lock_name(prefix: &str, key: &str) -> Option<String> {
    let name = key
        .strip_prefix(prefix)?
        .strip_prefix(":{")?
        .strip_suffix('}')?;
    (!name.is_empty() && !name.contains(['{', '}'])).then(|| name.to_owned())
}

/// The first key-value that the `i`th of a transaction's responses, a
/// Get, found.
fn kv_at(ops: &[TxnOpResponse], i: usize) -> Option<KeyValue> {
    match ops.get(i)? {
        TxnOpResponse::Get(g) => g.kvs().first().cloned(),
        _ => None,
    }
}

/// A lease TTL in etcd's whole seconds; anything else is the user's to
/// change (etcd's smallest lease is 2 s with default election timings).
fn lease_secs(ttl_ms: u64) -> Result<i64> {
    if !ttl_ms.is_multiple_of(1000) || ttl_ms < 2000 {
        return Err(StoreError::Unsupported(format!(
            "--ttl {}: on etcd a TTL must be a whole number of seconds and at least 2s",
            crate::config::fmt_duration(Duration::from_millis(ttl_ms))
        )));
    }
    i64::try_from(ttl_ms / 1000).map_err(|_| StoreError::Unsupported("--ttl too long".into()))
}

/// A connection that failed: over TLS if its error's words say so.
fn tls_or_unreachable(detail: &str) -> errors::Kind {
    let d = detail.to_ascii_lowercase();
    let tls = "tls|certificate|handshake|invalidcontenttype|corrupt message";
    match tls.split('|').any(|w| d.contains(w)) {
        true => StoreError::Tls,
        false => StoreError::Unreachable,
    }
}

/// An error and its sources, joined: tonic's transport errors say only
/// "transport error" at the top.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    for s in std::iter::successors(e.source(), |s| s.source()).map(|s| s.to_string()) {
        if !out.contains(&s) {
            out = format!("{out}: {s}");
        }
    }
    out
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_page_ending_in_a_history_goes_on_past_it_and_else_just_past_the_key() {
        let at = "distlock:{".len();
        let next = list_resume(b"distlock:{job}:history/00000000000000000042", at);
        assert_eq!(next, b"distlock:{job}:history0".to_vec());
        // Past the history, before the name's slots and the next name.
        assert!(next.as_slice() < b"distlock:{job}:slot/2/0".as_slice());
        assert!(next.as_slice() > b"distlock:{job}:history/99999999999999999999".as_slice());
        assert_eq!(
            list_resume(b"distlock:{job}", at),
            b"distlock:{job}\0".to_vec()
        );
        assert_eq!(
            list_resume(b"distlock:{job}:done", at),
            b"distlock:{job}:done\0".to_vec()
        );
    }

    #[test]
    fn lock_names_come_only_from_lock_keys() {
        assert_eq!(
            lock_name("distlock", "distlock:{a/b}").as_deref(),
            Some("a/b")
        );
        assert_eq!(lock_name("distlock", "distlock:{a}:fence"), None);
        assert_eq!(lock_name("distlock", "other:{a}"), None);
        assert_eq!(lock_name("distlock", "distlock:{}"), None);
    }

    #[test]
    fn a_lease_ttl_of_zero_is_shown_by_inspect_and_gone_to_every_decision() {
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(time_left(0, AtZero::Shown), s(0));
        assert_eq!(time_left(0, AtZero::Gone), None);
        for zero in [AtZero::Shown, AtZero::Gone] {
            assert_eq!(time_left(3, zero), s(3));
            assert_eq!(time_left(-1, zero), None, "gone");
        }
    }

    #[test]
    fn a_request_that_tonic_timed_out_is_a_timeout_that_a_waiter_rides_out() {
        let sec = crate::config::Security::new(Default::default(), None).unwrap();
        let store = Store::new(Target::parse("etcd://a,b", &sec).unwrap(), Duration::ZERO);
        let e = etcd_client::Error::GRpcStatus(tonic::Status::cancelled("Timeout expired"));
        let e = store.describe(Some("acquire"), e, false);
        assert!(
            matches!(e, StoreError::Timeout(_)) && e.is_connectivity(),
            "{e:?}"
        );
    }

    #[test]
    fn ttls_are_whole_seconds_of_at_least_two() {
        assert_eq!(lease_secs(2000).unwrap(), 2);
        assert_eq!(lease_secs(30_000).unwrap(), 30);
        assert!(lease_secs(1000).is_err());
        assert!(lease_secs(2500).is_err());
        assert!(lease_secs(2500).unwrap_err().is_usage());
    }
}
