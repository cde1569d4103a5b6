//! The keys of one lock, named once, the same on both stores. All of a
//! lock's keys share the `{NAME}` hash tag, so every Redis script touches
//! one Cluster slot.

use std::time::Duration;

use super::record::HistoryRecord;

/// The keys of one lock.
#[derive(Debug, Clone)]
pub struct LockKeys {
    /// The lock name as the user typed it.
    pub name: String,
    /// `P:{N}`: the holder's owner id, with the lease as its expiry.
    pub lock: String,
    /// `P:{N}:fence`: the last fencing token issued; never expires.
    pub fence: String,
    /// `P:{N}:meta`: holder metadata (hash), expiring with the lease.
    pub meta: String,
    /// `P:{N}:queue`: waiters in arrival order (zset, score = server µs).
    pub queue: String,
    /// `P:{N}:deadlines`: each waiter's keep-alive deadline (zset, server ms).
    pub deadlines: String,
    /// `P:{N}:turns`: while the lock is being handed over, each fair
    /// waiter's claim window end (zset, server ms); a stopped waiter lets
    /// its window pass and loses its turn.
    pub turns: String,
    /// `P:{N}:settled`: an entry added when a hand-off ends (the claim,
    /// or nobody left to take the lock), for the releaser that sees it
    /// through (stream of one entry, XREAD; expires by itself).
    pub settled: String,
    /// `P:{N}:wake:`: prefix of each fair waiter's own wake-up channel.
    pub wake_prefix: String,
    /// `P:{N}:released`: channel told of every release (`--wait-order any`).
    pub released: String,
    /// `P:{N}:last`: the last run's record (hash), kept for days.
    pub last: String,
    /// `P:{N}:history`: `run`'s records, newest first (list of JSON
    /// objects), capped by `--history-keep`; never expires.
    pub history: String,
    /// `P:{N}:slots`: semaphore holders (zset, owner → expiry, server ms).
    pub slots: String,
    /// `P:{N}:limit`: the semaphore's N, which every user must agree on.
    pub limit_key: String,
    /// `P:{N}:tokens`: semaphore holders' fencing tokens (hash).
    pub tokens: String,
    /// `P:{N}:done`: the done mark of `run --once-per` (hash), expiring at
    /// the acquisition of the run that succeeded + its window.
    pub done: String,
    /// `run --once-per D`: acquisitions look at the done mark and do not
    /// take a lease that a success less than D ago makes pointless.
    pub once_per: Option<Duration>,
    /// `run --once-per`: the `skipped_done` history record (keep count,
    /// stored text) that an acquisition finding the done mark writes in
    /// the round trip that found it, since no release follows to carry it.
    pub skip_record: Option<(u32, String)>,
    /// `--limit N`: Some(N) for a semaphore of N > 1 holders; None for a
    /// plain lock (which is what `--limit 1` means).
    pub limit: Option<u32>,
}

impl LockKeys {
    /// Builds the keys for `name` under `prefix` (both already validated).
    pub fn new(prefix: &str, name: &str) -> LockKeys {
        let lock = format!("{prefix}:{{{name}}}");
        LockKeys {
            name: name.to_owned(),
            fence: format!("{lock}:fence"),
            meta: format!("{lock}:meta"),
            queue: format!("{lock}:queue"),
            deadlines: format!("{lock}:deadlines"),
            turns: format!("{lock}:turns"),
            settled: format!("{lock}:settled"),
            wake_prefix: format!("{lock}:wake:"),
            released: format!("{lock}:released"),
            last: format!("{lock}:last"),
            history: format!("{lock}:history"),
            slots: format!("{lock}:slots"),
            limit_key: format!("{lock}:limit"),
            tokens: format!("{lock}:tokens"),
            done: format!("{lock}:done"),
            once_per: None,
            skip_record: None,
            limit: None,
            lock,
        }
    }

    /// The same lock for `run --once-per window`.
    pub fn with_once_per(mut self, window: Option<Duration>) -> LockKeys {
        self.once_per = window;
        self
    }

    /// The same lock, recording `record` (the newest `keep` kept) when
    /// `--once-per` finds the job done.
    pub fn with_skip_record(mut self, record: &HistoryRecord, keep: u32) -> LockKeys {
        self.skip_record = Some((keep, record.tail()));
        self
    }

    /// The same lock as a semaphore of `n` holders (`n` ≤ 1: a plain lock).
    pub fn with_limit(mut self, n: u32) -> LockKeys {
        self.limit = (n > 1).then_some(n);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = LockKeys::new("distlock", "deploy/prod");
        assert_eq!(k.lock, "distlock:{deploy/prod}");
        assert_eq!(k.fence, "distlock:{deploy/prod}:fence");
        assert_eq!(k.meta, "distlock:{deploy/prod}:meta");
        assert_eq!(k.done, "distlock:{deploy/prod}:done");
        assert_eq!(k.once_per, None);
        assert_eq!(
            k.clone()
                .with_once_per(Some(Duration::from_secs(60)))
                .once_per,
            Some(Duration::from_secs(60))
        );
        assert_eq!(k.limit, None);
        assert_eq!(k.clone().with_limit(1).limit, None);
        assert_eq!(k.with_limit(3).limit, Some(3));
    }
}
