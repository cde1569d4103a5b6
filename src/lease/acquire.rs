//! Taking the lock, and waiting in line for it when it is busy.

use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use anyhow::Result;

use super::pipe::pipe;
use super::subscriber::Subscriber;
use crate::clock::now;
use crate::config::{Wait, WaitOrder};
use crate::store::{Acquire, DoneMark, LockKeys, Mode, Store, StoreError, Watched};

/// How a wait for the lock ended.
pub enum Acquired {
    /// We hold it; `sent_at` is when the successful request was sent (t0).
    Yes { token: u64, sent_at: Duration },
    /// Not acquired, and no wait left: held by `holder`, or free but
    /// promised to `ahead`, the next waiter in line, or (`unacked`) taken
    /// but not acknowledged by `--min-replicas` replicas, and released.
    Busy {
        holder: Option<String>,
        ahead: Option<String>,
        unacked: bool,
    },
    /// A terminating signal arrived while waiting.
    Interrupted(i32),
    /// `run --once-per`: our turn came, but a run succeeded less than the
    /// window ago (no lease was taken).
    Done(DoneMark),
    /// Our place in the queue was taken away while we waited (etcd: our
    /// queue key deleted or our lease revoked): not acquired.
    Evicted,
}

/// How a waiter for the lock sleeps. What a signal means during the wait
/// (end it, stop distlock, nothing) is the caller's policy: `lease` knows
/// no signals, `commands` implements this on top of its signalfd.
pub trait Sleep {
    /// Sleeps until `fd` is readable, `timeout` passes or a signal ends the
    /// wait.
    fn sleep(&self, timeout: Duration, fd: RawFd) -> Wakeup;

    /// The signal that ends the wait, if one is pending: asked after a
    /// failed attempt, which such a signal cuts short.
    fn interrupted(&self) -> Option<i32>;
}

/// Someone watching a wait (a person at a terminal): shown what the
/// waiter knows, while it sleeps, from data it already has. How it is
/// shown is the caller's business; `lease` prints nothing.
pub trait Watch {
    /// How often to show the wait again; None when nobody watches, and
    /// then the waiter never wakes up for it.
    fn every(&self) -> Option<Duration>;

    /// Shows the wait as it stands at `now`.
    fn show(&self, waiting: &Waiting, now: Duration);

    /// The wait is over, however it ended: take away what was shown.
    fn end(&self);
}

/// A wait as the last busy reply left it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// The holder's owner id, if held.
    pub holder: Option<String>,
    /// The waiter promised the lock, if free but handed over.
    pub ahead: Option<String>,
    /// Taken but not acknowledged by enough replicas (and released).
    pub unacked: bool,
    /// The reply's part for the status line.
    pub watched: Watched,
    /// When that reply came (CLOCK_BOOTTIME).
    pub seen_at: Duration,
    /// When the wait started.
    pub since: Duration,
}

/// Why [`Sleep::sleep`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// The fd is readable.
    Readable,
    /// The timeout passed, or nothing the waiter must act on happened.
    Nothing,
    /// A signal that ends the wait arrived (the exit status is 128+N).
    Interrupted(i32),
}

/// Takes the lock, waiting as long as `wait` allows.
///
/// The first attempt is the fast path: one round trip on the one
/// connection. Only when the lock is busy and we may wait does distlock
/// subscribe to its wake-ups (on Redis a second connection, confirmed
/// before going on, so no release can slip past; on etcd the same one),
/// join the queue (fair order) and
/// sleep until one of:
/// - a release wakes us (only the next waiter is woken;
///   the ones behind it are told when their turn comes should the ones
///   ahead not claim theirs: see [`Notice::Turn`](crate::store::Notice::Turn));
/// - the holder's lease runs out (it read the remaining TTL: a holder that
///   crashed sends nothing), or, when queued behind another waiter, our own
///   TTL passes: the backstop, at most one command per waiter per TTL;
/// - the wait ends, or a signal that ends it arrives (exit 128+N); such a
///   signal also cuts short an attempt in progress (the store's calls are
///   interruptible for the acquisition).
///
/// A dropped connection (a restart, a failover, a reset) does not end the
/// wait: the waiter subscribes again, then tries again, which checks the
/// lock (a release may have come while nobody listened) and keeps its
/// place in the queue if the queue survived. While no server answers it
/// retries with backoff (doubling up to [`RETRY_MAX`], jittered, within
/// the wait); only when the wait runs out that way is the last error
/// returned. Other errors (refused credentials, a foreign key) end it at
/// once. The first attempt does so on a URL naming several servers too,
/// for a while (see `failover_until`).
///
/// A grant answered `usable` or more after it was sent (`run`: past the
/// lease's soft deadline, so CMD could not start under it) is given back
/// and tried again, like one too few replicas acknowledged, while the wait
/// lasts; with no wait left it is returned as it is, for the caller to
/// refuse.
///
/// A Ctrl-Z stops distlock like any job. A waiter that gives up leaves the
/// queue; one that dies is dropped at the next release (nobody receives
/// its wake-up) or when its keep-alive deadline passes on the server clock;
/// one that is stopped when its turn comes loses it when its claim window
/// (under a second, server clock) passes, and queues again at the back
/// when it is continued.
#[allow(clippy::too_many_arguments)]
pub fn acquire(
    store: &mut Store,
    keys: &LockKeys,
    owner: &str,
    ttl_ms: u64,
    meta: &[(&str, &str)],
    wait: Wait,
    order: WaitOrder,
    usable: Option<Duration>,
    sleep: &dyn Sleep,
    watch: &dyn Watch,
) -> Result<Acquired> {
    store.set_watched(watch.every().is_some());
    let since = now();
    // A wait too long for the clock to count to is a wait without limit.
    let give_up_at = match wait {
        Wait::For(d) => now().checked_add(d),
        Wait::Forever => None,
    };
    // The first attempt is not queued and does not subscribe: the fast
    // path. Semaphore slots have no queue: their waiters listen for any
    // release.
    let (mut first, mode) = match (order, keys.limit) {
        (WaitOrder::Fair, None) => (Some(Mode::Once), Mode::Fair),
        _ => (Some(Mode::Any), Mode::Any),
    };
    // Whether we may be in the wait queue.
    let mut queued = false;
    let mut subscriber: Option<Subscriber> = None;
    let mut fallback = Duration::from_millis(20);
    let mut retry = RETRY_FIRST;
    // A URL naming several servers (etcd members, Sentinels): one member
    // cut off, stopped or killed is not "no server answers". A first
    // attempt that fails so is tried again at once on a new connection
    // (which prefers another member, or asks Sentinel again for the
    // master), as etcdctl tries each endpoint; and, within the wait, for
    // up to FAILOVER_GRACE, as a waiter does, while an election or a
    // failover runs its course.
    let mut other_server = store.several_servers();
    let failover_until = other_server.then(|| since + FAILOVER_GRACE);
    let outcome = loop {
        let this = first.unwrap_or(mode);
        let subscribed = match first {
            Some(_) => Ok(()),
            None => subscribe(store, keys, owner, mode, &mut subscriber),
        };
        let sent_at = now();
        queued |= subscribed.is_ok() && this == Mode::Fair;
        let attempt = subscribed.and_then(|()| store.acquire(keys, owner, ttl_ms, this, meta));
        let seen_at = now();
        let late = usable.is_some_and(|u| seen_at >= sent_at + u);
        let (holder, ahead, unacked, watched, ttl) = match attempt {
            Ok(Acquire::Acquired { token })
                if !late || give_up_at.is_some_and(|t| t <= seen_at) =>
            {
                break Ok(Acquired::Yes { token, sent_at })
            }
            Ok(Acquire::Acquired { .. }) => {
                // Compare-and-delete, no minimum hold (we would wait on our
                // own key), best effort and brief: the lease expires anyway.
                let before = store.set_timeout(LEAVE_TIMEOUT);
                let _ = store.give_back(keys, owner);
                store.set_timeout(before);
                (None, None, false, Watched::default(), None)
            }
            // The store left the queue and woke the next waiter itself.
            Ok(Acquire::Done(mark)) => break Ok(Acquired::Done(mark)),
            Ok(Acquire::Evicted) => break Ok(Acquired::Evicted),
            Ok(Acquire::Busy {
                holder,
                ttl,
                ahead,
                watched,
            }) => (holder, ahead, false, watched, ttl),
            // Taken but not acknowledged (and released): wait as if busy.
            Ok(Acquire::Unacknowledged) => (None, None, true, Watched::default(), None),
            Err(e) => {
                if let Some(sig) = sleep.interrupted() {
                    break Ok(Acquired::Interrupted(sig));
                }
                let now_t = now();
                // A server that does not answer the first attempt is a
                // failure (125) at once, as without --wait: the caller
                // learns of a wrong URL or a server that is down now, not
                // when the wait runs out. Only a waiter, one that reached
                // the server, rides out a dropped connection; and on a URL
                // naming several servers, a first attempt for a while.
                if first.is_some() && e.is_connectivity() && std::mem::take(&mut other_server) {
                    continue;
                }
                let rides = first.is_none() || failover_until.is_some_and(|t| now_t < t);
                if !rides || !e.is_connectivity() || give_up_at.is_some_and(|t| t <= now_t) {
                    break Err(e.into());
                }
                // No server answered: pause (doubling, jittered, within
                // the wait), then reconnect and try again.
                let pause = jitter(retry).min(give_up_at.map_or(retry, |t| t - now_t));
                retry = (retry * 2).min(RETRY_MAX);
                // Slept on while there is no subscriber to wake us.
                let (idle, _open) = match pipe() {
                    Ok(p) => p,
                    Err(e) => break Err(e.into()),
                };
                match sleep_until(sleep, now_t + pause, idle.as_raw_fd(), None) {
                    Wakeup::Interrupted(sig) => break Ok(Acquired::Interrupted(sig)),
                    _ => continue,
                }
            }
        };
        if give_up_at.is_some_and(|t| t <= seen_at) {
            break Ok(Acquired::Busy {
                holder,
                ahead,
                unacked,
            });
        }
        if first.take().is_some() {
            continue;
        }
        retry = RETRY_FIRST;
        let mut wake_at = seen_at
            + ttl.map_or(Duration::from_millis(ttl_ms), |t| {
                t + Duration::from_millis(1)
            });
        if unacked || late {
            // Replicas lagging, or a slow answer: try again soon, with
            // backoff.
            wake_at = wake_at.min(seen_at + jitter(fallback));
            fallback = (fallback * 2).min(Duration::from_secs(1));
        }
        wake_at = give_up_at.map_or(wake_at, |t| wake_at.min(t));
        let waiting = Waiting {
            holder,
            ahead,
            unacked,
            watched,
            seen_at,
            since,
        };
        let s = subscriber.as_ref().expect("subscribed before the attempt");
        match sleep_until(sleep, wake_at, s.fd(), Some((watch, &waiting))) {
            Wakeup::Interrupted(sig) => break Ok(Acquired::Interrupted(sig)),
            Wakeup::Readable => s.drain(),
            Wakeup::Nothing => {}
        }
    };
    if let Some(s) = subscriber {
        s.stop();
    }
    watch.end();
    // The acquisition is over: from here on (the leave below, the
    // release, the renewals) a signal is CMD's or the supervisor's.
    store.set_interrupt_signals(&[]);
    if queued && !matches!(outcome, Ok(Acquired::Yes { .. } | Acquired::Done(_))) {
        // Best effort, and brief: a waiter that vanishes is dropped at the
        // next release anyway.
        store.set_timeout(LEAVE_TIMEOUT);
        let _ = store.leave(keys, owner);
    }
    outcome
}

/// How long a waiter that gives up spends telling the queue.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a first attempt on a URL naming several servers is retried
/// while none answers: an etcd election takes a second or two, a Sentinel
/// failover its `down-after-milliseconds` and a few seconds more.
const FAILOVER_GRACE: Duration = Duration::from_secs(10);

/// The first pause after a failed attempt while no server answers.
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two attempts while no server answers.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Sleeps until `until` (then `Nothing`), `fd` is readable or a signal
/// ends the wait. A watcher is shown the wait from what the last reply
/// said, redrawn between sleeps of at most `every`: no command of its own.
fn sleep_until(
    sleep: &dyn Sleep,
    until: Duration,
    fd: RawFd,
    shown: Option<(&dyn Watch, &Waiting)>,
) -> Wakeup {
    let every = shown.and_then(|(watch, _)| watch.every());
    loop {
        let now_t = now();
        let left = until.saturating_sub(now_t);
        if left.is_zero() {
            return Wakeup::Nothing;
        }
        if let (Some(_), Some((watch, waiting))) = (every, shown) {
            watch.show(waiting, now_t);
        }
        match sleep.sleep(every.map_or(left, |e| left.min(e)), fd) {
            Wakeup::Nothing => {}
            woken => return woken,
        }
    }
}

/// Before each attempt of the wait loop: subscribes when there is no live
/// subscription, so that no release after the attempt (which re-checks the
/// lock and joins or keeps the queue) is missed.
fn subscribe(
    store: &mut Store,
    keys: &LockKeys,
    owner: &str,
    mode: Mode,
    subscriber: &mut Option<Subscriber>,
) -> std::result::Result<(), StoreError> {
    // A dead subscriber's thread has ended: replacing it is all it takes.
    if subscriber.as_ref().is_none_or(Subscriber::is_dead) {
        let sub = store.subscribe(keys, owner, mode)?;
        *subscriber = Some(Subscriber::start(sub).map_err(|e| {
            StoreError::Unreachable(crate::store::Failure {
                op: Some("subscribe".into()),
                server: store.display().to_owned(),
                detail: format!("{e:#}"),
            })
        })?);
    }
    if let Some(s) = subscriber {
        // The attempt itself tells us again if we still have a turn.
        s.forget_turn();
    }
    Ok(())
}

/// A uniformly random duration in [d/2, d], so waiters spread out.
fn jitter(d: Duration) -> Duration {
    let mut b = [0u8; 4];
    let r = getrandom::fill(&mut b).map_or(0, |_| u32::from_ne_bytes(b));
    d / 2 + d.mul_f64(f64::from(r) / f64::from(u32::MAX) / 2.0)
}
