//! What a `run` leaves behind on etcd, and `--once-per`'s check: holder
//! metadata, the done mark, the last-run record and the run history. The
//! values are JSON (the field names of the Redis hashes), so that other
//! clients can read them.
//!
//! etcd has no clock a transaction can read and keys expire only with
//! leases, so: what must expire (the done mark, the last-run record) is put
//! under a lease of its own; the times shown (acquired, started, the mark's
//! `at`) are the running host's clock. How old a done mark is comes from
//! its `at` and the reading host's clock, never from its lease: a new
//! leader (a restart, a member lost) gives every lease its whole TTL
//! again, so a lease's TTL left would make a mark young again and skip a
//! window. The mark's lease only removes it once it is old.
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
    SortTarget, Txn, TxnOp,
};

use super::Store;

/// A record's fields as `inspect` shows them.
type Fields = Vec<(String, String)>;

/// What a call to etcd gives back.
type Ec<T> = std::result::Result<T, etcd_client::Error>;
use crate::config::fmt_duration;
use crate::store::{
    DoneMark, ForeignKey, HistoryRecord, LastRun, LockKeys, Release, Result, RunRecord, StoreError,
    Watched,
};

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
    match skipped_by {
        None => format!("{}{rev:020}", history_prefix(keys)),
        Some(owner) => format!("{}{rev:020}-{owner}", history_prefix(keys)),
    }
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

/// How old a mark written at `at_ms` is at `now_ms`, both hosts' clocks
/// (docs/guarantees.md §6 says what that asks of them); a mark from this
/// host's future is new.
fn mark_age(at_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(now_ms.saturating_sub(at_ms))
}

/// Whether a mark of `age` still says done: younger than this run's
/// window, and than the window it was written with, after which it would
/// have expired on Redis (its lease may outlive it here).
fn still_done(age: Duration, own_ms: u64, written_ms: u64) -> bool {
    age < Duration::from_millis(own_ms.min(written_ms))
}

/// The done mark's value.
fn mark_value(mark: &DoneMark, window_ms: u64) -> String {
    serde_json::json!({
        "at_ms": mark.at_ms,
        "host": mark.host,
        "fencing_token": mark.token,
        "owner": mark.owner,
        "once_per_ms": window_ms,
    })
    .to_string()
}

/// A stored done mark and its window; None for a value that is not one.
fn parse_mark(v: &[u8]) -> Option<(DoneMark, u64)> {
    let j: serde_json::Value = serde_json::from_slice(v).ok()?;
    let u = |f: &str| j.get(f)?.as_u64();
    let mark = DoneMark {
        at_ms: u("at_ms")?,
        host: j.get("host")?.as_str()?.to_owned(),
        token: u("fencing_token")?,
        owner: j.get("owner").and_then(|o| o.as_str()).map(str::to_owned),
        age: None,
        expires_in: None,
    };
    Some((mark, u("once_per_ms")?))
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

fn last_value(l: &LastRun) -> String {
    serde_json::json!({
        "host": l.host,
        "owner": l.owner,
        "started_ms": l.started_ms,
        "duration_ms": l.duration_ms,
        "exit": l.exit,
        "token": l.token,
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

fn unreadable(key: &[u8], what: &str) -> StoreError {
    ForeignKey {
        key: String::from_utf8_lossy(key).into_owned(),
        kind: format!("value that is not {what},"),
        store: "an etcd",
    }
    .into()
}

/// A key to write with a transaction, under a new lease of `ttl` s if any.
struct Write {
    key: String,
    value: String,
    ttl: Option<i64>,
}

/// What a run's end writes: the last-run record, the history record, the
/// done mark (with `window_ms`), and the history's keep count for the trim.
fn run_writes(
    keys: &LockKeys,
    owner: &str,
    record: &RunRecord,
    window_ms: Option<u64>,
) -> (Vec<Write>, Option<u32>) {
    let now = now_ms();
    let mut out = Vec::new();
    if let Some((l, keep)) = record.last {
        out.push(Write {
            key: keys.last.clone(),
            value: last_value(l),
            ttl: Some(secs_up(keep.as_millis() as u64)),
        });
    }
    let mut trim = None;
    if let Some((h, keep)) = record.history {
        trim = Some(keep);
        if keep > 0 {
            // The acquisition, on this host's clock: the duration counts
            // from the acquire request.
            let key = match h.token {
                Some(t) => history_key(keys, t, None),
                None => history_key(keys, 0, Some(&h.owner)),
            };
            out.push(Write {
                key,
                value: history_value(h, now.saturating_sub(h.duration_ms)),
                ttl: None,
            });
        }
    }
    let ran = record
        .last
        .map(|(l, _)| (l.duration_ms, l.host.clone(), l.token))
        .or(record
            .history
            .map(|(h, _)| (h.duration_ms, h.host.clone(), h.token.unwrap_or(0))));
    if let (Some(window_ms), Some((elapsed, host, token))) = (window_ms, ran) {
        if let Some(ttl) = done_ttl(window_ms, elapsed) {
            let mark = DoneMark {
                at_ms: now.saturating_sub(elapsed),
                host,
                token,
                owner: Some(owner.to_owned()),
                age: None,
                expires_in: None,
            };
            out.push(Write {
                key: keys.done.clone(),
                value: mark_value(&mark, window_ms),
                ttl: Some(ttl),
            });
        }
    }
    (out, trim)
}

/// What a run's end writes, prepared outside any call so that it can ride
/// in another module's transaction: a lock kept for its `--min-hold`
/// writes its records and done mark with the transaction that keeps it,
/// as the Redis release script does, never in a second one that could
/// fail after the first.
pub(super) struct EndWrites {
    writes: Vec<Write>,
    last: String,
    prefix: String,
    keep: Option<u32>,
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
        let (writes, keep) = run_writes(keys, owner, record, window_ms);
        Ok(EndWrites {
            writes,
            last: keys.last.clone(),
            prefix: history_prefix(keys),
            keep,
        })
    }

    /// Grants the writes' leases and reads the lease of the last-run
    /// record they replace: the puts for the transaction, and what
    /// `settle` needs after it.
    pub(super) async fn prepare(self, c: &mut Client) -> Ec<(Vec<TxnOp>, Settle)> {
        let old_last = last_lease(c, &self.last).await?;
        let (ops, granted) = puts(c, self.writes).await?;
        let settle = Settle {
            granted,
            old_last,
            prefix: self.prefix,
            keep: self.keep,
        };
        Ok((ops, settle))
    }
}

/// What is left to do once the transaction carrying [`EndWrites`] ran.
pub(super) struct Settle {
    granted: Vec<i64>,
    old_last: Option<i64>,
    prefix: String,
    keep: Option<u32>,
}

impl Settle {
    /// Written: the replaced last-run record's lease goes and the history
    /// is trimmed. Not written: the new leases go.
    pub(super) async fn after(self, c: &mut Client, written: bool) -> Ec<()> {
        if !written {
            for id in self.granted {
                let _ = c.lease_revoke(id).await;
            }
            return Ok(());
        }
        if let Some(id) = self.old_last {
            let _ = c.lease_revoke(id).await;
        }
        if let Some(keep) = self.keep {
            trim(c, self.prefix, keep).await?;
        }
        Ok(())
    }
}

/// The puts of `writes`, each under a new lease of its TTL; the leases
/// granted, to revoke if the transaction does not happen.
async fn puts(c: &mut Client, writes: Vec<Write>) -> Ec<(Vec<TxnOp>, Vec<i64>)> {
    let (mut ops, mut granted) = (Vec::new(), Vec::new());
    for w in writes {
        let opts = match w.ttl {
            Some(ttl) => {
                let id = c.lease_grant(ttl, None).await?.id();
                granted.push(id);
                Some(PutOptions::new().with_lease(id))
            }
            None => None,
        };
        ops.push(TxnOp::put(w.key, w.value, opts));
    }
    Ok((ops, granted))
}

/// The lease of the last-run record now in place, revoked once a new one
/// replaces it: a lease left without keys would live on for days.
async fn last_lease(c: &mut Client, last: &str) -> Ec<Option<i64>> {
    let got = c.get(last, None).await?;
    Ok(got.kvs().first().map(KeyValue::lease).filter(|&l| l != 0))
}

/// Keeps the newest `keep` history records: one range delete below the
/// oldest kept (everything with 0).
async fn trim(c: &mut Client, prefix: String, keep: u32) -> Ec<()> {
    if keep == 0 {
        c.delete(prefix, Some(DeleteOptions::new().with_prefix()))
            .await?;
        return Ok(());
    }
    let got = c
        .get(
            prefix.clone(),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_keys_only()
                    .with_sort(SortTarget::Key, SortOrder::Descend)
                    .with_limit(i64::from(keep)),
            ),
        )
        .await?;
    if got.count() > i64::from(keep) {
        if let Some(oldest_kept) = got.kvs().last() {
            let end = oldest_kept.key().to_vec();
            c.delete(prefix, Some(DeleteOptions::new().with_range(end)))
                .await?;
        }
    }
    Ok(())
}

impl Store {
    /// `run --once-per`: the done mark, judged by this run's own window
    /// (its age from its `at` and this host's clock), before the lock is
    /// taken. A run that finds the job done takes no lease and writes its
    /// `skipped_done` history record here, as the Redis acquire script
    /// does.
    pub(super) fn look_done(&mut self, keys: &LockKeys, owner: &str) -> Result<Look> {
        let Some(window) = window_secs(keys)? else {
            return Ok(Look::Free(None));
        };
        let done = keys.done.clone();
        let found = self.call("reading the done mark", |mut c| async move {
            let got = c.get(done, None).await?;
            let rev = got.header().map_or(0, |h| h.revision());
            Ok(got.kvs().first().cloned().map(|kv| (kv, rev)))
        })?;
        let Some((kv, rev)) = found else {
            return Ok(Look::Free(Some(0)));
        };
        let Some((mut mark, written_window)) = parse_mark(kv.value()) else {
            return Err(unreadable(kv.key(), "a done mark"));
        };
        let age = mark_age(mark.at_ms, now_ms());
        if !still_done(age, window.saturating_mul(1000), written_window) {
            return Ok(Look::Free(Some(kv.mod_revision())));
        }
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

    /// `release` of a run that leaves records: if the lock still holds
    /// our owner (at the revision read), one transaction deletes it and
    /// its metadata and writes the last-run and history records and, with
    /// `mark_done`, the done mark; else nothing is written. Then our lease
    /// and the replaced last-run record's lease are revoked and the
    /// history trimmed.
    pub(super) fn release_with_records(
        &mut self,
        keys: &LockKeys,
        owner: &str,
        record: RunRecord,
        mark_done: bool,
    ) -> Result<Release> {
        let EndWrites {
            writes,
            last,
            prefix,
            keep,
        } = EndWrites::of(keys, owner, &record, mark_done)?;
        let (lock, me) = (keys.lock.clone(), owner.to_owned());
        let deletes = [keys.lock.clone(), keys.meta.clone(), holder_key(keys)];
        let found = self.call("release", |mut c| async move {
            let got = c.get(lock.clone(), None).await?;
            let Some(kv) = got.kvs().first().cloned() else {
                return Ok(Err(None));
            };
            if kv.value() != me.as_bytes() {
                return Ok(Err(Some(kv.value().to_vec())));
            }
            let old_last = last_lease(&mut c, &last).await?;
            let (mut ops, granted) = puts(&mut c, writes).await?;
            ops.extend(deletes.into_iter().map(|k| TxnOp::delete(k, None)));
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    lock.clone(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then(ops);
            if !c.txn(txn).await?.succeeded() {
                for id in granted {
                    let _ = c.lease_revoke(id).await;
                }
                let now = c.get(lock, None).await?;
                return Ok(Err(now.kvs().first().map(|kv| kv.value().to_vec())));
            }
            for id in [Some(kv.lease()), old_last].into_iter().flatten() {
                if id != 0 {
                    let _ = c.lease_revoke(id).await;
                }
            }
            if let Some(keep) = keep {
                trim(&mut c, prefix, keep).await?;
            }
            Ok(Ok(()))
        })?;
        match found {
            Ok(()) => Ok(Release::Released(None)),
            Err(holder) => Ok(Release::NotOwner(
                holder.map(|h| self.text(keys, &keys.lock, h)).transpose()?,
            )),
        }
    }

    /// The last-run and history records on their own, in one transaction,
    /// for a lost lease: no release to carry them.
    pub(super) fn write_records(&mut self, keys: &LockKeys, record: RunRecord) -> Result<()> {
        if record.last.is_none() && record.history.is_none() {
            return Ok(());
        }
        let owner = record
            .last
            .map(|(l, _)| l.owner.clone())
            .unwrap_or_default();
        let (writes, keep) = run_writes(keys, &owner, &record, None);
        let (last, prefix) = (keys.last.clone(), history_prefix(keys));
        self.call("recording the run", |mut c| async move {
            let old_last = last_lease(&mut c, &last).await?;
            let (ops, _) = puts(&mut c, writes).await?;
            c.txn(Txn::new().and_then(ops)).await?;
            if let Some(id) = old_last {
                let _ = c.lease_revoke(id).await;
            }
            if let Some(keep) = keep {
                trim(&mut c, prefix, keep).await?;
            }
            Ok(())
        })
    }

    /// `release --forget-done`: deletes the mark only, and its lease; the
    /// mark that was there (one distlock cannot read is deleted all the
    /// same, and shown as unreadable).
    pub(super) fn delete_done(&mut self, keys: &LockKeys) -> Result<Option<DoneMark>> {
        let done = keys.done.clone();
        let prev = self.call("forgetting the done mark", |mut c| async move {
            let resp = c
                .delete(done, Some(DeleteOptions::new().with_prev_key()))
                .await?;
            let kv = resp.prev_kvs().first().cloned();
            if let Some(l) = kv.as_ref().map(KeyValue::lease).filter(|&l| l != 0) {
                let _ = c.lease_revoke(l).await;
            }
            Ok(kv.map(|kv| kv.value().to_vec()))
        })?;
        Ok(prev.map(|v| {
            parse_mark(&v).map_or(
                DoneMark {
                    at_ms: u64::MAX,
                    host: String::new(),
                    token: 0,
                    owner: None,
                    age: None,
                    expires_in: None,
                },
                |m| m.0,
            )
        }))
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
        let kvs = self.call("inspect", |mut c| async move {
            let mut kvs = Vec::new();
            for key in names {
                let opts = GetOptions::new().with_revision(rev.max(0));
                kvs.push(c.get(key, Some(opts)).await?.kvs().first().cloned());
            }
            Ok(kvs)
        })?;
        let read = |kv: &Option<KeyValue>, what: &str| -> Result<Fields> {
            match kv {
                None => Ok(Vec::new()),
                Some(kv) => fields(kv.value()).ok_or_else(|| unreadable(kv.key(), what)),
            }
        };
        let meta = if held {
            read(&kvs[0], "holder metadata")?
        } else {
            Vec::new()
        };
        let last = read(&kvs[1], "a last-run record")?;
        let done = match &kvs[2] {
            None => None,
            Some(kv) => {
                let (mut mark, window) =
                    parse_mark(kv.value()).ok_or_else(|| unreadable(kv.key(), "a done mark"))?;
                let ends = mark.at_ms.saturating_add(window);
                mark.expires_in = Some(Duration::from_millis(ends.saturating_sub(now_ms())));
                Some(mark)
            }
        };
        Ok((meta, last, done))
    }

    /// `distlock history`: the newest `n` records, newest first. A record
    /// distlock cannot read is refused by its key.
    pub(super) fn read_history(&mut self, keys: &LockKeys, n: u32) -> Result<Vec<HistoryRecord>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let prefix = history_prefix(keys);
        let kvs = self.call("reading the history", |mut c| async move {
            let got = c
                .get(
                    prefix,
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Key, SortOrder::Descend)
                            .with_limit(i64::from(n)),
                    ),
                )
                .await?;
            Ok(got.kvs().to_vec())
        })?;
        kvs.iter()
            .map(|kv| {
                HistoryRecord::parse(kv.value())
                    .ok_or_else(|| unreadable(kv.key(), "a distlock run record"))
            })
            .collect()
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

    #[test]
    fn a_mark_is_done_until_the_shorter_of_its_window_and_ours() {
        assert_eq!(mark_age(1_000, 4_500), Duration::from_millis(3_500));
        assert_eq!(mark_age(5_000, 4_500), Duration::ZERO, "from the future");
        let s = Duration::from_secs;
        assert!(still_done(s(59), 60_000, 3_600_000));
        assert!(!still_done(s(60), 60_000, 3_600_000));
        assert!(!still_done(s(60), 3_600_000, 60_000), "expired on Redis");
        assert!(still_done(Duration::ZERO, 1_000, 1_000));
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
        let (back, window) = parse_mark(mark_value(&mark, 60_000).as_bytes()).unwrap();
        assert_eq!((back, window), (mark, 60_000));
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
