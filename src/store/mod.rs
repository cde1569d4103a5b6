//! The only module that talks to a store: nothing outside it names a
//! `redis::` or `etcd_client::` item, and what it hands out are distlock's
//! own types (lock snapshots, [`Acquire`], [`Release`], [`Subscription`]
//! and its [`Notice`]s, [`StoreError`]).
//!
//! Two backends, side by side: `redis_store` (Redis, Sentinel, Cluster;
//! Lua scripts) and `etcd_store` (etcd v3 over gRPC, behind the `etcd`
//! feature). [`Store`] is an enum of the two, not a trait object: the
//! backend is fixed by the URL at start-up, there is no third one to plug
//! in from outside, a variant can be compiled out with its feature, and
//! callers keep calling methods on one concrete type (no boxing, no
//! object-safety limits on the operations' signatures). This file holds
//! the dispatch and the types of the answers; `check`, `error`, `keys`,
//! `record` and `url` what else both backends share (neither names the
//! other).

mod call;
mod check;
mod error;
mod keys;
mod record;
mod redis_store;
mod url;

#[cfg(feature = "etcd")]
mod etcd_store;

use std::time::Duration;

use crate::config::{Security, UsageError};

pub use check::{Check, Verdict};
pub use error::{Failure, ForeignKey, StoreError};
pub use keys::LockKeys;
pub use record::{History, HistoryRecord, LastRun, RunOutcome, RunRecord};
pub use url::{redact_urls_in, url_passwords, without_password};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

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
        watched: Watched,
    },
    /// Taken, but fewer than `--min-replicas` replicas acknowledged it in
    /// time, so it was released again: a failover could have lost it.
    Unacknowledged,
    /// `--once-per`: the lock was ours to take, but a run succeeded less
    /// than the window ago; no lease was taken and the next waiter was
    /// woken.
    Done(DoneMark),
    /// A fair waiter's place in the queue was taken away while it waited
    /// (on etcd: its queue key deleted or its lease revoked, while in touch):
    /// the wait is over, not acquired. Redis never answers this.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Evicted,
}

/// What a busy reply says for a waiter's status line, read in the same
/// round trip (the line costs no command): the holder's host, pid and
/// command (from its metadata), how long it has held the lease by the
/// server's clock, and this waiter's 0-based place in the queue. Each is
/// None when unknown (no metadata, another client's, not queued).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watched {
    pub host: Option<String>,
    pub pid: Option<u64>,
    pub command: Option<String>,
    pub held: Option<Duration>,
    pub place: Option<u64>,
}

/// The done mark of `run --once-per`: which run succeeded, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneMark {
    /// When that run acquired the lease (Unix ms, the server's clock).
    pub at_ms: u64,
    pub host: String,
    pub token: u64,
    /// Its owner id, when known.
    pub owner: Option<String>,
    /// How long ago it acquired, by the server's clock (from `acquire`).
    pub age: Option<Duration>,
    /// How long until the mark expires (from `inspect`).
    pub expires_in: Option<Duration>,
}

/// What a compare-and-delete found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Our lease was deleted; with a [`Handoff`] when that woke a waiter
    /// whose claim the releaser is to see through ([`Store::relay`]).
    Released(Option<Handoff>),
    /// Our lease is kept for this much longer: its minimum hold.
    Kept(Duration),
    /// Not ours: held by this other owner, or by nobody (None).
    NotOwner(Option<String>),
    /// Ours, but a running `run` holds it: only that run ends it (a release
    /// by owner, e.g. from its CMD, is refused; nothing was changed).
    HeldByRun,
    /// Held by nobody when sent again after its answer was lost, with no
    /// record to tell: ours until then, so most likely deleted by the lost
    /// send, unless it expired in between ([`Store::once_more`]).
    Gone,
}

/// A release woke the next waiter, and promised turns to the few behind
/// it, which end `until` from the release; `since` is where the release
/// found the store's record of ended hand-offs. A stopped (Ctrl-Z,
/// SIGSTOP) or frozen waiter cannot be told from a live one, and nothing
/// in the store acts when a window ends: if every promised waiter is
/// stopped, only the releaser is left to wake the next live one
/// (docs/queue.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    until: Duration,
    since: String,
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
    /// The wait queue, where the store reads it for `inspect` (etcd, whose
    /// queue keys can block a free name); None where it does not (Redis).
    pub waiters: Option<Waiters>,
}

/// A name's wait queue as `inspect` shows it: how many wait, and the
/// first of them in the order they will be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiters {
    pub count: u64,
    pub first: Vec<Waiter>,
}

/// One waiter: its owner id (a foreign key's name after the queue
/// prefix) and what is left of its lease (None: no lease, so its key stays
/// until deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub owner: String,
    pub ttl: Option<Duration>,
}

/// A lock key found by `list`: a plain lock, or a semaphore's slots.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
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

/// Runs the same call on whichever backend this `$enum` is.
macro_rules! each {
    ($enum:ident, $self:expr, $s:ident => $call:expr) => {
        match $self {
            $enum::Redis($s) => $call,
            #[cfg(feature = "etcd")]
            $enum::Etcd($s) => $call,
        }
    };
}

/// What a wake-up asks of a waiter. Each backend reads its own protocol
/// into these: Redis its channel's messages, etcd its watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Notice {
    /// Try now: the lock is free and it is our turn (or, for `--wait-order
    /// any` and semaphores, the lock was released). Also any message not
    /// understood: one attempt too many is harmless.
    Wake,
    /// The lock is being handed to a waiter ahead; try after `starts_in`,
    /// by when each waiter ahead has had its claim window. A stopped
    /// waiter cannot claim, so the first live one behind it gets the lock
    /// within a second for each stopped waiter ahead.
    Turn { starts_in: Duration },
    /// A waiter ahead claimed the lock: forget the turn and sleep on.
    Claimed,
}

/// A waiter's wake-ups, read one at a time with a timeout by a thread of
/// its own: a Redis connection subscribed to the waiter's channel, or, on
/// etcd, a watch on the key just ahead (driven, with the waiter's lease
/// keep-alive, by the reading thread). An error means the subscription is
/// lost.
// One per wait, made once and moved to its thread: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum Subscription {
    Redis(redis_store::Subscription),
    #[cfg(feature = "etcd")]
    Etcd(etcd_store::Subscription),
}

impl Subscription {
    /// The next notice, waiting at most `timeout`; Ok(None) if none came.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<Notice>> {
        each!(Subscription, self, s => s.next_message(timeout))
    }
}

/// Where the store is: a Redis deployment or an etcd cluster.
// One per process, made once: boxing a variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum Target {
    Redis(redis_store::Target),
    #[cfg(feature = "etcd")]
    Etcd(etcd_store::Target),
}

impl Target {
    /// Parses a URL (password redaction, TLS and password settings as the
    /// scheme allows). An etcd URL in a binary built without the `etcd`
    /// feature is a usage error that says so.
    pub fn parse(url: &str, sec: &Security) -> anyhow::Result<Target> {
        if url::password_needs_escaping(url) {
            anyhow::bail!(UsageError(format!(
                "invalid URL {}: its password holds an unescaped /, ? or #: percent-encode them (%2F, %3F, %23, and @ as %40)",
                url::redact(url)
            )));
        }
        let scheme = url.split("://").next().unwrap_or("").to_ascii_lowercase();
        if scheme == "etcd" || scheme == "etcds" {
            #[cfg(feature = "etcd")]
            return Ok(Target::Etcd(etcd_store::Target::parse(url, sec)?));
            #[cfg(not(feature = "etcd"))]
            anyhow::bail!(UsageError(format!(
                "{scheme}:// URLs need distlock built with its `etcd` feature; this one is Redis-only"
            )));
        }
        Ok(Target::Redis(redis_store::Target::parse(url, sec)?))
    }

    /// Whether this is an etcd target (whose options differ: whole-second
    /// TTLs, no `--min-replicas`).
    pub fn is_etcd(&self) -> bool {
        !matches!(self, Target::Redis(_))
    }
}

/// A connection to the store, made lazily, with a timeout on every call.
#[allow(clippy::large_enum_variant)]
pub enum Store {
    Redis(redis_store::Store),
    #[cfg(feature = "etcd")]
    Etcd(etcd_store::Store),
}

/// `pub fn`s that make the same call, arguments as given, on whichever
/// backend this is.
macro_rules! pass {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?;)*) => {
        $($(#[$doc])* pub fn $name(&mut self, $($arg: $ty),*) $(-> $ret)? {
            each!(Store, self, s => s.$name($($arg),*))
        })*
    };
}

/// A timeout in words: `5s`, `200ms`, and `1.5s`, or with etcd's words
/// (no `tenths`) `1500ms`.
fn secs(d: Duration, tenths: bool) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) || !tenths {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The `--tls-ca` file's PEM, and the `--tls-cert` and `--tls-key` files'
/// (both or neither, else a usage error). A CA file that holds no
/// certificate (an empty file, a key by mistake) is refused up front on
/// both stores, since TLS would then trust nobody and blame every server's
/// certificate; `signed`: whose certificates the CA signed, for that error.
type TlsFiles = (Option<Vec<u8>>, Option<(Vec<u8>, Vec<u8>)>);

fn tls_files(sec: &Security, signed: &str) -> anyhow::Result<TlsFiles> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    if sec.tls_cert.is_some() != sec.tls_key.is_some() {
        let e = "--tls-cert and --tls-key go together (mutual TLS needs both)";
        anyhow::bail!(UsageError(e.into()));
    }
    let read = |what: &str, p: &Option<std::path::PathBuf>| -> anyhow::Result<_> {
        let Some(p) = p else { return Ok(None) };
        let e = |e| UsageError(format!("cannot read {what} {}: {e}", p.display()));
        Ok(Some(std::fs::read(p).map_err(e)?))
    };
    let ca = read("--tls-ca", &sec.tls_ca)?;
    if let (Some(pem), Some(path)) = (&ca, &sec.tls_ca) {
        if !CertificateDer::pem_slice_iter(pem).any(|c| c.is_ok()) {
            anyhow::bail!(UsageError(format!(
                "--tls-ca {} holds no PEM certificate: give the CA that signed {signed}",
                path.display()
            )));
        }
    }
    Ok((
        ca,
        read("--tls-cert", &sec.tls_cert)?.zip(read("--tls-key", &sec.tls_key)?),
    ))
}

impl Store {
    /// A store for `target` whose connects and calls each give up after
    /// `timeout`. Does no I/O until the first call.
    pub fn new(target: Target, timeout: Duration) -> Store {
        match target {
            Target::Redis(t) => Store::Redis(redis_store::Store::new(t, timeout)),
            #[cfg(feature = "etcd")]
            Target::Etcd(t) => Store::Etcd(etcd_store::Store::new(t, timeout)),
        }
    }

    /// Makes every call from now on (an acquisition, a wait) end at once
    /// when one of `sigs` arrives (the call then fails, and the signal is
    /// left pending for the caller to read); `&[]` ends that. Returns the
    /// previous set.
    pub fn set_interrupt_signals(&mut self, sigs: &'static [i32]) -> &'static [i32] {
        each!(Store, self, s => std::mem::replace(&mut s.interrupt_on, sigs))
    }

    /// The URL for messages, password redacted.
    pub fn display(&self) -> &str {
        each!(Store, self, s => &s.target.display)
    }

    /// Whether the URL names several servers that can answer for the
    /// lock (etcd members, Sentinels): one of them failing is not all.
    pub fn several_servers(&self) -> bool {
        match self {
            Store::Redis(s) => s.target.asks_sentinels(),
            #[cfg(feature = "etcd")]
            Store::Etcd(s) => s.target.members() > 1,
        }
    }

    /// Changes the per-call timeout, e.g. to the time left before a
    /// deadline. Applied at the next call. Returns the previous one.
    pub fn set_timeout(&mut self, timeout: Duration) -> Duration {
        each!(Store, self, s => std::mem::replace(&mut s.timeout, timeout.max(Duration::from_millis(1))))
    }

    pub fn release(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        let release = |s: &mut Store| each!(Store, s, s => s.release(keys, owner));
        self.once_more(keys, owner, RunRecord::default(), release)
    }

    pub fn release_by_owner(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        let release = |s: &mut Store| each!(Store, s, s => s.release_by_owner(keys, owner));
        self.once_more(keys, owner, RunRecord::default(), release)
    }

    /// Releases a grant CMD never ran under: `--min-hold` is for runs.
    pub fn give_back(&mut self, keys: &LockKeys, owner: &str) -> Result<Release> {
        let give_back = |s: &mut Store| each!(Store, s, s => s.give_back(keys, owner));
        self.once_more(keys, owner, RunRecord::default(), give_back)
    }

    pub fn release_recording(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        record: RunRecord,
        mark_done: bool,
    ) -> Result<Release> {
        let release = |s: &mut Store| each!(Store, s, s => s.release_recording(keys, owner, record, mark_done));
        self.once_more(keys, owner, record, release)
    }

    /// A release that no server answered (in time) is sent once more, on a
    /// new connection, when the URL names several servers: the first may
    /// have gone to a member just cut off (an etcd leader isolated), and
    /// the key would stay until its lease expires, or longer (a new etcd
    /// leader refreshes every lease). Sending it twice is safe: a
    /// compare-and-delete, and records that are one per run (etcd keys the
    /// history record by the run's token; Redis does not push the newest
    /// again), so a second that finds the lease kept (`--min-hold`) answers
    /// Kept. If the first was carried out and its answer lost, a second
    /// that finds the lease gone finds the run's history record and
    /// answers Released, or the caller would record the run again as one
    /// whose lease was lost; with no record to look for (`release`,
    /// `--history-keep 0`), Gone.
    fn once_more(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        record: RunRecord,
        release: impl Fn(&mut Store) -> Result<Release>,
    ) -> Result<Release> {
        match release(self) {
            Err(e) if e.is_connectivity() && self.several_servers() => {}
            answer => return answer,
        }
        let keep = record.history.map_or(0, |(_, keep)| keep.min(100));
        let recorded = |s: &mut Store| {
            let found = s.history(keys, keep);
            found.is_ok_and(|h| h.records.iter().any(|r| r.owner == owner))
        };
        match release(self)? {
            Release::NotOwner(_) if keep > 0 && recorded(self) => Ok(Release::Released(None)),
            Release::NotOwner(None) if keep == 0 => Ok(Release::Gone),
            answer => Ok(answer),
        }
    }

    pass! {
        fn set_min_replicas(n: u32);
        /// Whether someone watches this wait (a status line): a store whose
        /// busy reply does not carry the holder's details reads them then,
        /// and only then.
        fn set_watched(on: bool);
        fn acquire(keys: &LockKeys, owner: &str, ttl_ms: u64, mode: Mode, meta: &[(&str, &str)])
            -> Result<Acquire>;
        fn leave(keys: &LockKeys, owner: &str) -> Result<()>;
        fn renew(keys: &LockKeys, owner: &str, ttl_ms: u64) -> Result<bool>;
        fn record_run(keys: &LockKeys, record: RunRecord) -> Result<()>;
        fn forget_done(keys: &LockKeys) -> Result<Option<DoneMark>>;
        fn force_release(keys: &LockKeys) -> Result<Option<String>>;
        fn inspect(keys: &LockKeys) -> Result<LockInfo>;
        fn inspect_many(keys: &[LockKeys]) -> Result<Vec<std::result::Result<LockInfo, ForeignKey>>>;
        fn inspect_slots(keys: &LockKeys) -> Result<SlotsInfo>;
        fn history(keys: &LockKeys, n: u32) -> Result<History>;
        fn ping() -> Result<()>;
        fn list_names(prefix: &str) -> Result<Vec<Found>>;
        /// `doctor`'s checks after its round trips: each backend judges its
        /// own server.
        fn checks() -> Result<Vec<Check>>;
    }

    /// Sees a hand-off through: returns once the next holder has claimed
    /// or nobody is left to take the lock, waking the next live waiter
    /// whenever a whole schedule of promised turns has passed unclaimed.
    /// About a millisecond when the woken waiter is live; 0.9 s more per
    /// stopped waiter in a row at the front of the queue; never more than
    /// 5.4 s (the Redis store's `MAX_STAY`).
    pub fn relay(&mut self, keys: &LockKeys, handoff: Handoff) -> Result<()> {
        match self {
            Store::Redis(s) => s.relay(keys, handoff),
            // etcd's queue needs no releaser: a stopped waiter's key goes
            // with its lease, and the next waiter watches it.
            #[cfg(feature = "etcd")]
            Store::Etcd(_) => Ok(()),
        }
    }

    /// `release --force`'s other half: removes every waiter from the
    /// name's queue (those removed end their wait, exit 75), returning
    /// their owner ids. Only etcd's queue can block a free name (a killed
    /// waiter's key lasts its whole `--ttl`, a foreign one for ever);
    /// Redis drops dead waiters as it meets them, so there it is a no-op.
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    pub fn clear_queue(&mut self, keys: &LockKeys) -> Result<Vec<String>> {
        match self {
            Store::Redis(_) => Ok(Vec::new()),
            #[cfg(feature = "etcd")]
            Store::Etcd(s) => s.clear_queue(keys),
        }
    }

    /// The wake-ups of `owner` waiting for `keys` in `mode` (`Fair`: its
    /// own; otherwise every release's).
    pub fn subscribe(&mut self, keys: &LockKeys, owner: &str, mode: Mode) -> Result<Subscription> {
        match self {
            Store::Redis(s) => s.subscribe(keys, owner, mode).map(Subscription::Redis),
            #[cfg(feature = "etcd")]
            Store::Etcd(s) => s.subscribe().map(Subscription::Etcd),
        }
    }
}
