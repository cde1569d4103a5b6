//! What a `run` leaves behind on etcd, and `--once-per`'s check: holder
//! metadata, the done mark, the last-run record and the run history. The
//! values are JSON (the field names of the Redis hashes), so that other
//! clients can read them.
//!
//! etcd has no clock a transaction can read and keys expire only with
//! leases, so: what must expire (the done mark, the last-run record) is put
//! under a lease of its own; the times shown (acquired, started, the mark's
//! `at`) are the running host's clock. How old a done mark is comes from
//! its lease, that is from etcd's clock, as long as the raft term is the
//! one its lease was granted in. Each new leader (a restart, a leader lost)
//! starts a term and gives every lease its whole TTL again; after that etcd
//! has no clock left for the mark and the hosts' clocks (its `at`) are the
//! only witness: the mark is as old as the older of the two says.
//!
//! History: one key per record, `P:{N}:history/<zero-padded revision>`,
//! the revision being the run's fencing token (a run that found the job
//! done has none: the revision it found the mark at, then `-<owner>`), so
//! a range read sorted by key, newest first, is the history, and trimming
//! is one range delete below the oldest record kept. One key holding a
//! bounded list was the other way: etcd keeps every revision of a key
//! until compaction, and rewriting up to `--history-keep` records (20 kB
//! at the default 100) on every run would store that much per run, where
//! a key per record stores one record and one deletion; and a list needs a
//! read before the release and a retry when another run wrote in between.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse,
};

use super::semaphore::{prefix_end, Ec};
use super::Store;
use crate::config::fmt_duration;
use crate::store::{
    DoneMark, ForeignKey, History, HistoryRecord, LastRun, LockKeys, Release, Result, RunRecord,
    StoreError, Watched,
};

/// A record's fields as `inspect` shows them.
type Fields = Vec<(String, String)>;

/// What `run --once-per` found before taking the lock.
pub(super) enum Look {
    /// Take the lock only if the done mark's mod revision is still this
    /// (0: absent), so the check and the taking are one transaction; None
    /// without `--once-per`.
    Free(Option<i64>),
    /// A run succeeded less than this run's window ago.
    Done(DoneMark),
}

/// `--once-per`'s window in etcd's whole seconds: its done mark expires
/// with a lease, and leases are whole seconds. Refused otherwise, as a
/// TTL is, rather than silently rounded.
fn window_secs(keys: &LockKeys) -> Result<Option<u64>> {
    match keys.once_per {
        None => Ok(None),
        Some(w) if w.subsec_nanos() == 0 && w.as_secs() > 0 => Ok(Some(w.as_secs())),
        Some(w) => Err(StoreError::Unsupported(format!(
            "--once-per {}: on etcd a window must be a whole number of seconds",
            fmt_duration(w)
        ))),
    }
}

fn holder_key(keys: &LockKeys) -> String {
    format!("{}:holder", keys.lock)
}

fn history_prefix(keys: &LockKeys) -> String {
    format!("{}/", keys.history)
}

/// A record's key: by its fencing token, or by the revision a skipped run
/// found the mark at and its owner.
fn history_key(keys: &LockKeys, rev: u64, skipped_by: Option<&str>) -> String {
    let by = skipped_by.map_or(String::new(), |owner| format!("-{owner}"));
    format!("{}{rev:020}{by}", history_prefix(keys))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whole seconds that last at least `ms`.
fn secs_up(ms: u64) -> i64 {
    i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX).max(1)
}

/// The done mark's lease: what is left of the window once the run has
/// held the lock `elapsed_ms`, rounded up (a mark may outlast its window
/// by under a second, never fall short of it); None when the run outlasted
/// its window, which leaves no mark, as on Redis.
fn done_ttl(window_ms: u64, elapsed_ms: u64) -> Option<i64> {
    let left = window_ms.checked_sub(elapsed_ms).filter(|&l| l > 0)?;
    Some(secs_up(left))
}

/// A done mark as stored: the mark, its window, how old it was when
/// written, and the raft term its lease was granted at (None: written by
/// a distlock that did not record it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    mark: DoneMark,
    window_ms: u64,
    age_ms: u64,
    term: Option<u64>,
}

/// What etcd said of a mark's lease when it was read: the TTL granted and
/// left (whole seconds; negative once gone) and the raft term it answered
/// at.
#[derive(Debug, Clone, Copy)]
struct LeaseSeen {
    granted: i64,
    left: i64,
    term: u64,
}

impl Stored {
    /// How old the mark is. In the term its lease was granted in, the
    /// lease has never been refreshed: its age when written plus the time
    /// since the grant (etcd's TTL in whole seconds, counted low: a mark is
    /// never taken for older than it is), etcd's clock alone. In a later
    /// term a new leader has given the lease its whole TTL again and etcd
    /// has no clock left for the mark, so the hosts' clocks witness too
    /// (`now_ms` minus `at`): the older of the two (docs/guarantees.md §6).
    /// A mark without a lease (not distlock's put) has only the hosts'.
    fn age(&self, lease: Option<LeaseSeen>, now_ms: u64) -> Duration {
        let by_hosts = Duration::from_millis(now_ms.saturating_sub(self.mark.at_ms));
        let Some(l) = lease else {
            return by_hosts;
        };
        if l.left < 0 {
            // Its lease is gone: so is the mark, any moment now.
            return Duration::MAX;
        }
        let since = (l.granted.saturating_sub(l.left).saturating_sub(1)).max(0) as u64;
        let by_etcd = Duration::from_millis(self.age_ms.saturating_add(since.saturating_mul(1000)));
        if self.term == Some(l.term) {
            by_etcd
        } else {
            by_etcd.max(by_hosts)
        }
    }

    /// Whether a mark of `age` still says done to a run of window
    /// `own_ms`: younger than it, and than the window it was written with,
    /// after which it would have expired on Redis (its lease may outlive it
    /// here).
    fn still_done(&self, age: Duration, own_ms: u64) -> bool {
        age < Duration::from_millis(own_ms.min(self.window_ms))
    }
}

/// The done mark's value, but for its lease's raft term, which `puts`
/// adds once the lease is granted.
fn mark_value(mark: &DoneMark, window_ms: u64, age_ms: u64) -> String {
    serde_json::json!({
        "at_ms": mark.at_ms,
        "host": mark.host,
        "fencing_token": mark.token,
        "owner": mark.owner,
        "once_per_ms": window_ms,
        "age_ms": age_ms,
    })
    .to_string()
}

fn done_mark(at_ms: u64, host: String, token: u64, owner: Option<&str>) -> DoneMark {
    let owner = owner.map(str::to_owned);
    DoneMark {
        at_ms,
        host,
        token,
        owner,
        age: None,
        expires_in: None,
    }
}

/// A stored done mark; None for a value that is not one.
fn parse_mark(v: &[u8]) -> Option<Stored> {
    let j: serde_json::Value = serde_json::from_slice(v).ok()?;
    let u = |f: &str| j.get(f)?.as_u64();
    let owner = j.get("owner").and_then(|o| o.as_str());
    let host = j.get("host")?.as_str()?.to_owned();
    Some(Stored {
        mark: done_mark(u("at_ms")?, host, u("fencing_token")?, owner),
        window_ms: u("once_per_ms")?,
        age_ms: u("age_ms").unwrap_or(0),
        term: u("raft_term"),
    })
}

/// What a waiter's status line shows of the holder, from its metadata
/// (`holder_put`); how long it has held by the acquiring host's clock
/// (etcd has none a read can give), so only roughly.
pub(super) fn holder_watched(v: Option<&[u8]>, place: u64) -> Watched {
    let f = v.and_then(fields).unwrap_or_default();
    let get = |k: &str| f.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone());
    Watched {
        host: get("host"),
        pid: get("pid").and_then(|p| p.parse().ok()),
        command: get("command"),
        held: get("acquired_ms")
            .and_then(|a| a.parse::<u64>().ok())
            .map(|a| Duration::from_millis(now_ms().saturating_sub(a))),
        place: Some(place),
    }
}

/// Holder metadata: the acquisition time and `meta`'s pairs.
pub(super) fn holder_put(keys: &LockKeys, meta: &[(&str, &str)]) -> (String, String) {
    let mut m = serde_json::Map::new();
    m.insert("acquired_ms".into(), now_ms().into());
    for (k, v) in meta {
        m.insert((*k).into(), (*v).into());
    }
    (holder_key(keys), serde_json::Value::Object(m).to_string())
}

/// The last-run record; `lease_s`, the TTL of the lease it is put
/// under, tells the next run's release whether it can reuse that lease
/// (etcd-client keeps the keep-alive's TTL to itself, and a read of it
/// would be a request more).
fn last_value(l: &LastRun, lease_s: i64) -> String {
    serde_json::json!({
        "host": l.host,
        "owner": l.owner,
        "started_ms": l.started_ms,
        "duration_ms": l.duration_ms,
        "exit": l.exit,
        "token": l.token,
        "lease_s": lease_s,
    })
    .to_string()
}

/// A history record as stored: as on Redis, with the start first.
fn history_value(r: &HistoryRecord, started_ms: u64) -> String {
    format!("{{\"started_ms\":{started_ms},{}", &r.tail()[1..])
}

/// A JSON object's fields as text (numbers as digits), as `inspect` reads
/// the Redis hashes; None for a value that is not such an object.
fn fields(v: &[u8]) -> Option<Fields> {
    let j: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(v).ok()?;
    j.into_iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Some((k, s)),
            serde_json::Value::Number(n) => Some((k, n.to_string())),
            _ => None,
        })
        .collect()
}

pub(super) fn unreadable(key: &[u8], what: &str) -> StoreError {
    ForeignKey {
        key: String::from_utf8_lossy(key).into_owned(),
        kind: format!("value that is not {what},"),
        store: "an etcd",
    }
    .into()
}

/// A key to write with a transaction, its value, and the TTL in seconds
/// of the new lease to put it under, if any.
type Write = (String, String, Option<i64>);

/// What a run's end writes, prepared outside any call so that it can ride
/// in another module's transaction: a lock kept for its `--min-hold`
/// writes its records and done mark with the transaction that keeps it,
/// as the Redis release script does, never in a second one that could
/// fail after the first.
pub(super) struct EndWrites {
    writes: Vec<Write>,
    last: String,
    done: String,
    /// The history's prefix and keep count, for the trim.
    trim: Option<(String, u32)>,
}

/// What a run's acquisition read, in its own transaction, for its
/// release: the lease of the last-run record the release replaces, and
/// where the history's trim ends. With it the release is one
/// transaction: the old record's lease is kept alive and reused (no
/// grant, no revoke, no read of the old record), and the trim is a range
/// delete in that transaction (no read, no second request).
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    /// The old record's lease and the TTL its value says it has.
    last_lease: Option<(i64, i64)>,
    /// `--history-keep` it was read for, and the history records to
    /// delete once ours is written: those before this key; None when
    /// fewer than `keep - 1` were there (nothing to trim).
    trim: Option<(u32, Option<Vec<u8>>)>,
}

impl Plan {
    /// The reads for the acquiring transaction, before its writes (so
    /// they see what was there): the last-run record and the newest
    /// `keep - 1` history keys, for a `run` (whose keys carry the skip
    /// record, and so its `--history-keep`).
    pub(super) fn reads(keys: &LockKeys, by_run: bool) -> Vec<TxnOp> {
        let mut ops = Vec::new();
        if by_run {
            ops.push(TxnOp::get(keys.last.clone(), None));
        }
        if let Some(keep @ 2..) = keys.skip_record.as_ref().map(|(k, _)| *k) {
            let kept = newest(keep - 1).with_keys_only();
            ops.push(TxnOp::get(history_prefix(keys), Some(kept)));
        }
        ops
    }

    /// The plan from the replies to [`Plan::reads`], which come first.
    pub(super) fn of(
        keys: &LockKeys,
        by_run: bool,
        replies: &[etcd_client::TxnOpResponse],
    ) -> Plan {
        let mut replies = replies.iter().map(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => Some(g),
            _ => None,
        });
        let mut plan = Plan::default();
        if by_run {
            let last = replies.next().flatten().and_then(|g| g.kvs().first());
            let lease_s = |kv: &KeyValue| {
                let j: serde_json::Value = serde_json::from_slice(kv.value()).ok()?;
                Some((kv.lease(), j.get("lease_s")?.as_i64()?))
            };
            plan.last_lease = last.and_then(lease_s).filter(|&(l, _)| l != 0);
        }
        if let Some(keep @ 2..) = keys.skip_record.as_ref().map(|(k, _)| *k) {
            if let Some(g) = replies.next().flatten() {
                let full = g.count() > i64::from(keep - 1);
                let end = g.kvs().last().filter(|_| full).map(|kv| kv.key().to_vec());
                plan.trim = Some((keep, end));
            }
        }
        plan
    }
}

impl EndWrites {
    /// The records of `record` and, with `mark_done` and `--once-per`, the
    /// done mark.
    pub(super) fn of(
        keys: &LockKeys,
        owner: &str,
        record: &RunRecord,
        mark_done: bool,
    ) -> Result<EndWrites> {
        let window_ms = window_secs(keys)?
            .filter(|_| mark_done)
            .map(|s| s.saturating_mul(1000));
        Ok(EndWrites::new(keys, owner, record, window_ms))
    }

    /// The last-run record, the history record and the done mark (with
    /// `window_ms`).
    fn new(keys: &LockKeys, owner: &str, record: &RunRecord, window_ms: Option<u64>) -> EndWrites {
        let now = now_ms();
        let mut writes = Vec::new();
        if let Some((l, keep)) = record.last {
            let ttl = secs_up(keep.as_millis() as u64);
            writes.push((keys.last.clone(), last_value(l, ttl), Some(ttl)));
        }
        if let Some((h, 1..)) = record.history {
            // The acquisition, on this host's clock: the duration counts
            // from the acquire request.
            let key = match h.token {
                Some(t) => history_key(keys, t, None),
                None => history_key(keys, 0, Some(&h.owner)),
            };
            let started_ms = now.saturating_sub(h.duration_ms);
            writes.push((key, history_value(h, started_ms), None));
        }
        let ran = record
            .last
            .map(|(l, _)| (l.duration_ms, l.host.clone(), l.token))
            .or(record
                .history
                .map(|(h, _)| (h.duration_ms, h.host.clone(), h.token.unwrap_or(0))));
        if let (Some(window_ms), Some((elapsed, host, token))) = (window_ms, ran) {
            if let Some(ttl) = done_ttl(window_ms, elapsed) {
                let mark = done_mark(now.saturating_sub(elapsed), host, token, Some(owner));
                let value = mark_value(&mark, window_ms, elapsed);
                writes.push((keys.done.clone(), value, Some(ttl)));
            }
        }
        EndWrites {
            writes,
            last: keys.last.clone(),
            done: keys.done.clone(),
            trim: record.history.map(|(_, keep)| (history_prefix(keys), keep)),
        }
    }
}

impl EndWrites {
    /// Grants the writes' leases: the puts, the compares for the
    /// transaction, and what `settle` needs after it. The last-run record
    /// goes under the old one's lease when the plan has
    /// it (the transaction compares that the old record is still under it:
    /// a lease revoked since would fail the put; and a keep-alive beside
    /// the transaction keeps it alive) if the record there says its lease
    /// has the TTL wanted; the history is trimmed in
    /// the transaction when the plan knows where. Without a plan, the old
    /// record's lease is read in the transaction (its first reply) and
    /// revoked after, and the trim is done after.
    pub(super) async fn prepare(
        mut self,
        c: &mut Client,
        plan: Plan,
        ours: Option<Vec<u8>>,
    ) -> Ec<(Vec<TxnOp>, Vec<Compare>, Settle)> {
        let wanted = self
            .writes
            .iter()
            .find(|w| w.0 == self.last)
            .and_then(|w| w.2);
        let same = |&(_, s): &(i64, i64)| Some(s) == wanted;
        let reused = plan.last_lease.filter(same).map(|(l, _)| l).zip(wanted);
        let mut ops = Vec::new();
        let mut when = Vec::new();
        let mut reuse = None;
        if let Some((lease, ttl)) = reused {
            let (key, value, _) = self.take_write(&self.last.clone()).expect("wanted");
            let under = Some(PutOptions::new().with_lease(lease));
            ops.push(TxnOp::put(key.clone(), value.clone(), under));
            when.push(Compare::lease(key.clone(), CompareOp::Equal, lease));
            reuse = Some(Reused {
                lease,
                ttl,
                key,
                value,
            });
        }
        // Else the old record's lease, read first, is revoked once the
        // new record replaces it.
        let read_old_last = reused.is_none() && wanted.is_some();
        if read_old_last {
            ops.insert(0, TxnOp::get(self.last.clone(), None));
        }
        let trim = self.trim.take();
        let (puts, granted) = puts(c, self.writes, &self.done).await?;
        ops.extend(puts);
        // Where the trim ends: None when the plan does not know (trimmed
        // after, as before); Some(None) when there is nothing to trim. Our
        // own record sorts after every key the plan read.
        let end = match (&trim, &plan.trim) {
            (None, _) => Some(None),
            (Some((prefix, 0)), _) => Some(Some(prefix_end(prefix))),
            (Some((_, 1)), _) if ours.is_some() => Some(ours),
            (Some((_, keep)), Some((k, end))) if k == keep => Some(end.clone()),
            _ => None,
        };
        if let (Some((prefix, _)), Some(Some(end))) = (&trim, &end) {
            let range = DeleteOptions::new().with_range(end.clone());
            ops.push(TxnOp::delete(prefix.clone(), Some(range)));
        }
        let settle = Settle {
            granted,
            read_old_last,
            trim: trim.filter(|_| end.is_none()),
            reused: reuse,
        };
        Ok((ops, when, settle))
    }

    fn take_write(&mut self, key: &str) -> Option<Write> {
        let at = self.writes.iter().position(|w| w.0 == key)?;
        Some(self.writes.remove(at))
    }
}

/// The last-run record put under the old record's lease.
#[derive(Clone)]
pub(super) struct Reused {
    lease: i64,
    ttl: i64,
    key: String,
    value: String,
}

impl Reused {
    /// The record written at `rev` under a lease that was gone (the
    /// keep-alive found it so): written again under a lease of its own,
    /// unless another run wrote one since (a record gone with its lease
    /// has mod revision 0).
    pub(super) async fn repair(self, c: &mut Client, rev: i64) -> Ec<()> {
        let id = super::grant(c, self.ttl).await?;
        let unmoved = Compare::mod_revision(self.key.clone(), CompareOp::Less, rev + 1);
        let under = Some(PutOptions::new().with_lease(id));
        let put = TxnOp::put(self.key, self.value, under);
        let written = c.txn(Txn::new().when([unmoved]).and_then([put])).await?;
        let stale = if written.succeeded() { self.lease } else { id };
        super::revoke_leases(c, [stale]).await;
        Ok(())
    }
}

/// What is left to do once the transaction carrying [`EndWrites`] ran.
pub(super) struct Settle {
    granted: Vec<i64>,
    /// The transaction's first reply is the old last-run record.
    read_old_last: bool,
    pub(super) reused: Option<Reused>,
    trim: Option<(String, u32)>,
}

impl Settle {
    /// Written (the transaction's replies): the replaced last-run
    /// record's lease goes and the history is trimmed. Not written (None):
    /// the new leases go.
    pub(super) async fn after(self, c: &mut Client, written: Option<&[TxnOpResponse]>) -> Ec<()> {
        let Some(replies) = written else {
            super::revoke_leases(c, self.granted).await;
            return Ok(());
        };
        let old = super::kv_at(replies, 0).filter(|_| self.read_old_last);
        super::revoke_leases(c, old.map(|kv| kv.lease())).await;
        match self.trim {
            Some((prefix, keep)) => trim(c, prefix, keep).await,
            None => Ok(()),
        }
    }
}

/// The puts of `writes`, each under a new lease of its TTL; the leases
/// granted, to revoke if the transaction does not happen. The done mark
/// (the key `done`) gets the raft term its lease was granted at (the term
/// the grant answered at: a new leader between the grant and that answer
/// refreshed the lease by at most the call's length): that term is what
/// says whether the lease can still date the mark. Its JSON object is
/// closed after that field, where inserting it would put it.
async fn puts(c: &mut Client, writes: Vec<Write>, done: &str) -> Ec<(Vec<TxnOp>, Vec<i64>)> {
    let (mut ops, mut granted) = (Vec::new(), Vec::new());
    for (key, mut value, ttl) in writes {
        let mut opts = None;
        if let Some(ttl) = ttl {
            let (id, term) = super::grant_with_term(c, ttl).await?;
            granted.push(id);
            opts = Some(PutOptions::new().with_lease(id));
            if let Some(t) = term.filter(|_| key == done) {
                value.insert_str(value.len() - 1, &format!(",\"raft_term\":{t}"));
            }
        }
        ops.push(TxnOp::put(key, value, opts));
    }
    Ok((ops, granted))
}

/// What etcd says now of the lease `id` of a done mark (None: no lease);
/// `term` is the raft term of the read that found the mark, for an answer
/// without a header.
async fn lease_seen(c: &mut Client, id: i64, term: u64) -> Ec<Option<LeaseSeen>> {
    Ok(super::lease_now(c, id).await?.map(|r| LeaseSeen {
        granted: r.granted_ttl(),
        left: r.ttl(),
        term: r.header().map_or(term, |h| h.raft_term()),
    }))
}

/// Keeps the newest `keep` history records: one range delete below the
/// oldest kept (everything with 0).
async fn trim(c: &mut Client, prefix: String, keep: u32) -> Ec<()> {
    let mut end = prefix_end(&prefix);
    if keep > 0 {
        let kept = newest(keep).with_keys_only();
        let got = c.get(prefix.clone(), Some(kept)).await?;
        match got.kvs().last() {
            Some(oldest_kept) if got.count() > i64::from(keep) => end = oldest_kept.key().to_vec(),
            _ => return Ok(()),
        }
    }
    c.delete(prefix, Some(DeleteOptions::new().with_range(end)))
        .await?;
    Ok(())
}

/// A read of the newest `n` keys under a prefix, newest first.
fn newest(n: u32) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Key, SortOrder::Descend)
        .with_limit(i64::from(n))
}

impl Store {
    /// `run --once-per`: the done mark, judged by this run's own window
    /// (its age from its lease, and from its `at` too once a new leader
    /// has refreshed that: `Stored::age`), before the lock is taken. A run
    /// that finds the job done takes no lease and writes its
    /// `skipped_done` history record here, as the Redis acquire script
    /// does.
    pub(super) fn look_done(&mut self, keys: &LockKeys, owner: &str) -> Result<Look> {
        let Some(window) = window_secs(keys)? else {
            return Ok(Look::Free(None));
        };
        let done = keys.done.clone();
        let found = self.call("reading the done mark", |mut c| async move {
            let got = c.get(done, None).await?;
            let (rev, term) = got
                .header()
                .map_or((0, 0), |h| (h.revision(), h.raft_term()));
            let Some(kv) = got.kvs().first().cloned() else {
                return Ok(None);
            };
            // A lookup that fails is an error, never "no lease": judged
            // by this host's clock alone, a clock running ahead would find
            // a fresh mark old.
            let lease = lease_seen(&mut c, kv.lease(), term).await?;
            Ok(Some((kv, rev, lease)))
        })?;
        let Some((kv, rev, lease)) = found else {
            return Ok(Look::Free(Some(0)));
        };
        let Some(stored) = parse_mark(kv.value()) else {
            return Err(unreadable(kv.key(), "a done mark"));
        };
        let age = stored.age(lease, now_ms());
        if !stored.still_done(age, window.saturating_mul(1000)) {
            return Ok(Look::Free(Some(kv.mod_revision())));
        }
        let mut mark = stored.mark;
        mark.age = Some(age);
        if let Some((keep, tail)) = keys.skip_record.clone() {
            let (prefix, me) = (history_prefix(keys), owner.to_owned());
            let key = history_key(keys, u64::try_from(rev).unwrap_or(0), Some(&me));
            let value = format!("{{\"started_ms\":{},{}", now_ms(), &tail[1..]);
            self.call("recording the run", |mut c| async move {
                if keep > 0 {
                    c.put(key, value, None).await?;
                }
                trim(&mut c, prefix, keep).await
            })?;
        }
        Ok(Look::Done(mark))
    }

    /// `release`, with a run's records, in one transaction while no
    /// minimum hold is kept (the key `hold`, if given, absent) and, with
    /// `unless_run`, no run marks the lease: if the lock holds our owner,
    /// it and its metadata are deleted and the records written (see
    /// [`EndWrites::prepare`]); then our lease is revoked. None: the lock
    /// is ours but this transaction could not release it (a minimum hold
    /// is kept, a run marks it, or the last-run record moved to another
    /// lease), so the caller decides.
    pub(super) fn release_at_once(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        (record, mark_done): (RunRecord, bool),
        hold: Option<String>,
        unless_run: bool,
    ) -> Result<Option<Release>> {
        let end = EndWrites::of(keys, owner, &record, mark_done)?;
        let marker = Some(keys.meta.clone()).filter(|_| unless_run);
        let plan = self.plan.take().unwrap_or_default();
        let ours = record
            .history
            .and_then(|(h, _)| h.token)
            .map(|t| history_key(keys, t, None).into_bytes());
        let (lock, me) = (keys.lock.clone(), owner.to_owned());
        let deletes = [keys.lock.clone(), keys.meta.clone(), holder_key(keys)];
        let found = self.call("release", |mut c| async move {
            let (mut ops, mut when, mut settle) = end.prepare(&mut c, plan, ours).await?;
            when.push(Compare::value(lock.clone(), CompareOp::Equal, me.clone()));
            when.extend(hold.into_iter().chain(marker).map(super::semaphore::absent));
            let at = ops.len();
            ops.push(TxnOp::get(lock.clone(), None));
            ops.extend(deletes.map(|k| TxnOp::delete(k, None)));
            let txn = Txn::new()
                .when(when)
                .and_then(ops)
                .or_else([TxnOp::get(lock, None)]);
            let reused = settle.reused.take();
            // The keep-alive goes beside the transaction, not before it:
            // the hand-off waits for that one.
            let (lease, mut k) = (reused.as_ref().map(|r| r.lease), c.clone());
            let (resp, confirmed) = tokio::join!(c.txn(txn), async move {
                match lease {
                    Some(l) => super::alive(k.lease_keep_alive(l).await),
                    None => Ok(true),
                }
            });
            let resp = resp?;
            let replies = super::replies::op_responses(&resp)?;
            let written = resp.succeeded();
            if let Some(r) = reused.filter(|_| written && !matches!(confirmed, Ok(true))) {
                // Best effort: the release stands, and what failed the
                // check (etcd out of reach) would fail this too.
                let _ = r
                    .repair(&mut c, resp.header().map_or(0, |h| h.revision()))
                    .await;
            }
            settle
                .after(&mut c, Some(&replies[..]).filter(|_| written))
                .await?;
            if written {
                let lease = super::kv_at(&replies, at).map(|kv| kv.lease());
                super::revoke_leases(&mut c, lease).await;
                return Ok(Ok(()));
            }
            Ok(Err(super::kv_at(&replies, 0).map(|kv| kv.value().to_vec())))
        })?;
        match found {
            Ok(()) => Ok(Some(Release::Released(None))),
            Err(Some(h)) if h == owner.as_bytes() => Ok(None),
            Err(holder) => Ok(Some(Release::NotOwner(self.holder(keys, holder)?))),
        }
    }

    /// The last-run and history records on their own, in one transaction,
    /// for a lost lease: no release to carry them.
    pub fn record_run(&mut self, keys: &LockKeys, record: RunRecord) -> Result<()> {
        if record.last.is_none() && record.history.is_none() {
            return Ok(());
        }
        // No done mark, so no owner to write in one.
        let end = EndWrites::new(keys, "", &record, None);
        self.call("recording the run", |mut c| async move {
            let (ops, _, settle) = end.prepare(&mut c, Plan::default(), None).await?;
            let resp = c.txn(Txn::new().and_then(ops)).await?;
            let replies = super::replies::op_responses(&resp)?;
            settle.after(&mut c, Some(&replies)).await
        })
    }

    /// `release --forget-done`: deletes the mark only, and its lease; the
    /// mark that was there (one distlock cannot read is deleted all the
    /// same, and shown as unreadable).
    pub fn forget_done(&mut self, keys: &LockKeys) -> Result<Option<DoneMark>> {
        let done = keys.done.clone();
        let prev = self.call("forgetting the done mark", |mut c| async move {
            let with_prev = DeleteOptions::new().with_prev_key();
            let resp = c.delete(done, Some(with_prev)).await?;
            let kv = resp.prev_kvs().first().cloned();
            super::revoke_leases(&mut c, kv.as_ref().map(KeyValue::lease)).await;
            Ok(kv.map(|kv| kv.value().to_vec()))
        })?;
        let blank = || done_mark(u64::MAX, String::new(), 0, None);
        Ok(prev.map(|v| parse_mark(&v).map_or_else(blank, |m| m.mark)))
    }

    /// What `inspect` shows beside the lock, read at `rev` (the revision
    /// the lock was read at, so it is one snapshot): holder metadata (only
    /// while `held`), the last-run record and the done mark.
    pub(super) fn records_at(
        &mut self,
        keys: &LockKeys,
        rev: i64,
        held: bool,
    ) -> Result<(Fields, Fields, Option<DoneMark>)> {
        let names = [holder_key(keys), keys.last.clone(), keys.done.clone()];
        let (kvs, lease) = self.call("inspect", |mut c| async move {
            let mut kvs = Vec::new();
            let mut term = 0;
            for key in names {
                let opts = GetOptions::new().with_revision(rev.max(0));
                let got = c.get(key, Some(opts)).await?;
                term = got.header().map_or(term, |h| h.raft_term());
                kvs.push(got.kvs().first().cloned());
            }
            let lease = match kvs[2].as_ref() {
                Some(kv) => lease_seen(&mut c, kv.lease(), term).await.ok().flatten(),
                None => None,
            };
            Ok((kvs, lease))
        })?;
        let read = |kv: Option<&KeyValue>, what: &str| -> Result<Fields> {
            kv.map_or(Ok(Vec::new()), |kv| {
                fields(kv.value()).ok_or_else(|| unreadable(kv.key(), what))
            })
        };
        let meta = read(kvs[0].as_ref().filter(|_| held), "holder metadata")?;
        let last = read(kvs[1].as_ref(), "a last-run record")?;
        let Some(kv) = &kvs[2] else {
            return Ok((meta, last, None));
        };
        let stored = parse_mark(kv.value()).ok_or_else(|| unreadable(kv.key(), "a done mark"))?;
        let age = stored.age(lease, now_ms());
        let mut mark = stored.mark;
        mark.expires_in = Some(Duration::from_millis(stored.window_ms).saturating_sub(age));
        Ok((meta, last, Some(mark)))
    }

    /// `distlock history`: the newest `n` records, newest first. A key
    /// under the history prefix that is not a distlock record (another
    /// client wrote it) is counted and skipped, as on Redis: one stray key
    /// must not hide every run from the operator.
    pub fn history(&mut self, keys: &LockKeys, n: u32) -> Result<History> {
        if n == 0 {
            return Ok(History::default());
        }
        let prefix = history_prefix(keys);
        let kvs = self.call("reading the history", |mut c| async move {
            Ok(c.get(prefix, Some(newest(n))).await?.kvs().to_vec())
        })?;
        let mut history = History::default();
        for kv in &kvs {
            match HistoryRecord::parse(kv.value()) {
                Some(r) => history.records.push(r),
                None => history.foreign += 1,
            }
        }
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RunOutcome;

    #[test]
    fn a_mark_lasts_what_is_left_of_its_window_rounded_up() {
        assert_eq!(done_ttl(3_600_000, 0), Some(3600));
        assert_eq!(done_ttl(3_600_000, 1), Some(3600));
        assert_eq!(done_ttl(3_600_000, 1000), Some(3599));
        assert_eq!(done_ttl(3_600_000, 3_599_999), Some(1));
        assert_eq!(done_ttl(3_600_000, 3_600_000), None, "outlasted: no mark");
        assert_eq!(done_ttl(3_600_000, u64::MAX), None);
    }

    fn stored(at_ms: u64, window_ms: u64, age_ms: u64, term: Option<u64>) -> Stored {
        Stored {
            mark: DoneMark {
                at_ms,
                host: "h".into(),
                token: 1,
                owner: None,
                age: None,
                expires_in: None,
            },
            window_ms,
            age_ms,
            term,
        }
    }

    #[test]
    fn in_its_leases_term_a_mark_is_dated_by_etcd_alone() {
        let seen = |granted, left, term| {
            Some(LeaseSeen {
                granted,
                left,
                term,
            })
        };
        // Written 2.5 s old, granted 10 s, 7 s left: 3 s to 4 s since.
        let m = stored(1_000, 60_000, 2_500, Some(4));
        let s = Duration::from_millis;
        assert_eq!(m.age(seen(10, 7, 4), 1_000), s(4_500));
        assert_eq!(
            m.age(seen(10, 7, 4), 3_600_000),
            s(4_500),
            "whatever the host's clock"
        );
        assert_eq!(m.age(seen(10, 10, 4), 0), s(2_500));
        assert_eq!(m.age(seen(10, 11, 4), 0), s(2_500));
        assert_eq!(m.age(seen(10, -1, 4), 0), Duration::MAX, "lease gone");
        // A later term: the lease was refreshed, the hosts' clocks witness.
        assert_eq!(m.age(seen(10, 10, 5), 3_600_000), s(3_599_000));
        assert_eq!(m.age(seen(10, 7, 5), 0), s(4_500), "the older of the two");
        let old = stored(1_000, 60_000, 0, None);
        assert_eq!(
            old.age(seen(10, 10, 4), 61_000),
            s(60_000),
            "no term: a later one"
        );
        assert_eq!(old.age(None, 61_000), s(60_000), "no lease: the hosts'");
    }

    #[test]
    fn a_mark_is_done_until_the_shorter_of_its_window_and_ours() {
        let s = Duration::from_secs;
        assert!(stored(0, 3_600_000, 0, None).still_done(s(59), 60_000));
        assert!(!stored(0, 3_600_000, 0, None).still_done(s(60), 60_000));
        assert!(
            !stored(0, 60_000, 0, None).still_done(s(60), 3_600_000),
            "expired on Redis"
        );
        assert!(stored(0, 1_000, 0, None).still_done(Duration::ZERO, 1_000));
    }

    #[test]
    fn windows_are_whole_seconds() {
        let keys = |d: u64| LockKeys::new("p", "n").with_once_per(Some(Duration::from_millis(d)));
        assert_eq!(window_secs(&keys(3_600_000)).unwrap(), Some(3600));
        assert!(window_secs(&keys(1500)).unwrap_err().is_usage());
        assert!(window_secs(&keys(500)).unwrap_err().is_usage());
        assert_eq!(window_secs(&LockKeys::new("p", "n")).unwrap(), None);
    }

    #[test]
    fn records_read_back_as_written() {
        let mark = DoneMark {
            at_ms: 1_700_000_000_123,
            host: "web-1\n".into(),
            token: 41,
            owner: Some("web-1:1:ab".into()),
            age: None,
            expires_in: None,
        };
        let mut value = mark_value(&mark, 60_000, 1_500);
        let back = parse_mark(value.as_bytes());
        assert_eq!(
            back.unwrap(),
            Stored {
                mark: mark.clone(),
                window_ms: 60_000,
                age_ms: 1_500,
                term: None
            }
        );
        value.insert_str(value.len() - 1, ",\"raft_term\":7");
        let back = parse_mark(value.as_bytes()).unwrap();
        assert_eq!(back.term, Some(7));
        assert_eq!(parse_mark(b"not a mark"), None);
        assert_eq!(
            parse_mark(br#"{"at_ms":-1,"host":"h","fencing_token":1,"once_per_ms":1}"#),
            None
        );

        let (key, value) = holder_put(&LockKeys::new("p", "n"), &[("host", "h"), ("pid", "7")]);
        assert_eq!(key, "p:{n}:holder");
        let f = fields(value.as_bytes()).unwrap();
        assert!(f.contains(&("pid".into(), "7".into())), "{f:?}");
        assert!(f
            .iter()
            .any(|(k, v)| k == "acquired_ms" && v.parse::<u64>().is_ok()));
        assert_eq!(fields(b"[1]"), None);
        assert_eq!(fields(br#"{"a":[1]}"#), None);

        let r = HistoryRecord {
            started_ms: 0,
            duration_ms: 5,
            host: "h".into(),
            pid: 1,
            owner: "o".into(),
            token: Some(9),
            outcome: RunOutcome::Failed,
            exit_code: 3,
        };
        let back = HistoryRecord::parse(history_value(&r, 77).as_bytes()).unwrap();
        assert_eq!(
            back,
            HistoryRecord {
                started_ms: 77,
                ..r
            }
        );
    }

    #[test]
    fn history_keys_sort_by_revision() {
        let k = LockKeys::new("p", "n");
        assert_eq!(
            history_key(&k, 42, None),
            "p:{n}:history/00000000000000000042"
        );
        assert!(history_key(&k, 9, None) < history_key(&k, 10, None));
        assert!(history_key(&k, 10, None) < history_key(&k, 10, Some("o")));
        assert!(history_key(&k, 10, Some("o")) < history_key(&k, 11, None));
    }
}
