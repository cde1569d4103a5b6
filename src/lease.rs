//! A held lease over time: taking it (with waiting), and the renewer thread
//! that keeps it alive while CMD runs.
//!
//! Time is read from CLOCK_BOOTTIME, a monotonic clock that, unlike
//! CLOCK_MONOTONIC (Rust's `Instant`), keeps counting while the machine is
//! suspended: Redis's expiry keeps counting then too, so a laptop lid must
//! not stretch a lease.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;

use crate::config::{fmt_duration, Timings, Wait};
use crate::store::{Acquire, LockKeys, Store};
use crate::supervise::{self, Signals};

/// Now, on the boot-time monotonic clock.
pub fn now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills ts; CLOCK_BOOTTIME exists on every Linux
    // distlock runs on (2.6.39+).
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// How a wait for the lock ended.
pub enum Acquired {
    /// We hold it; `sent_at` is when the successful request was sent (t0).
    Yes { token: u64, sent_at: Duration },
    /// Busy, and no wait left; who holds it.
    Busy { holder: String },
    /// A terminating signal arrived while waiting.
    Interrupted(i32),
}

/// Takes the lock, retrying with capped exponential backoff and full jitter
/// while `wait` allows. Sleeps in `Signals::wait`, so SIGINT, SIGTERM or
/// SIGHUP end the wait at once; a Ctrl-Z stops distlock like any job.
///
/// All waiting lives here, so a push-based wake-up can replace the sleeps
/// without touching the callers.
pub fn acquire(
    store: &mut Store,
    keys: &LockKeys,
    owner: &str,
    ttl_ms: u64,
    meta: &[(&str, &str)],
    wait: Wait,
    signals: &Signals,
) -> Result<Acquired> {
    let give_up_at = match wait {
        Wait::For(d) => Some(now() + d),
        Wait::Forever => None,
    };
    let mut backoff = Duration::from_millis(20);
    loop {
        let sent_at = now();
        let (holder, holder_ttl) = match store.acquire(keys, owner, ttl_ms, meta)? {
            Acquire::Acquired { token } => return Ok(Acquired::Yes { token, sent_at }),
            Acquire::Busy { holder, ttl } => (holder, ttl),
        };
        let now_t = now();
        let left = match give_up_at {
            Some(t) if t <= now_t => return Ok(Acquired::Busy { holder }),
            Some(t) => Some(t - now_t),
            None => None,
        };
        // Never sleep past the holder's expiry or the end of the wait.
        let mut sleep = jitter(backoff);
        if let Some(ttl) = holder_ttl {
            sleep = sleep.min(ttl + Duration::from_millis(1));
        }
        if let Some(left) = left {
            sleep = sleep.min(left);
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
        let wake_at = now_t + sleep;
        loop {
            let remaining = wake_at.saturating_sub(now());
            if remaining.is_zero() {
                break;
            }
            let (sigs, _) = signals.wait(Some(remaining), None);
            for sig in sigs {
                if supervise::WAIT_ENDERS.contains(&sig) {
                    return Ok(Acquired::Interrupted(sig));
                }
                if supervise::STOPS.contains(&sig) {
                    supervise::stop_self(false);
                }
            }
        }
    }
}

/// A uniformly random duration in [d/2, d], so waiters spread out.
fn jitter(d: Duration) -> Duration {
    let mut b = [0u8; 4];
    let r = getrandom::fill(&mut b).map_or(0, |_| u32::from_ne_bytes(b));
    d / 2 + d.mul_f64(f64::from(r) / f64::from(u32::MAX) / 2.0)
}

/// What the renewer reports to the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A renewal sent at this time was confirmed: the lease now runs until
    /// at least `sent_at + ttl` in Redis.
    Renewed { sent_at: Duration },
    /// Redis says someone else (or nobody) holds the lock.
    NotOwner,
}

enum Order {
    /// Renew at once (after a SIGCONT).
    RenewNow,
    /// Stop and hand the store back.
    Stop,
}

/// The renewer thread and its two channels. Events come with a byte on a
/// pipe so the supervisor can sleep in one poll on signals and events.
pub struct Renewer {
    orders: mpsc::Sender<Order>,
    events: mpsc::Receiver<Event>,
    wake: OwnedFd,
    handle: JoinHandle<Store>,
}

/// Everything the renewer needs to know about the lease.
pub struct LeaseSpec {
    /// The lock's keys.
    pub keys: LockKeys,
    /// Our owner id.
    pub owner: String,
    /// Timings (ttl, period, grace, margin).
    pub timings: Timings,
    /// When the last confirmed request was sent.
    pub t0: Duration,
    /// Print each renewal (-vv) / failures (unless -q).
    pub verbose: u8,
    /// Suppress warnings.
    pub quiet: bool,
}

impl Renewer {
    /// Starts renewing every `renew_every`, retrying failures quickly. It
    /// never sends a renewal once the kill deadline has passed: by then the
    /// supervisor is stopping CMD and a late "renewed" would be a lie.
    pub fn start(mut store: Store, spec: LeaseSpec) -> Result<Renewer> {
        let (order_tx, order_rx) = mpsc::channel();
        let (event_tx, event_rx) = mpsc::channel();
        let (wake_rx, wake_tx) = pipe()?;
        let handle = std::thread::Builder::new()
            .name("renewer".into())
            .spawn(move || {
                renew_loop(&mut store, &spec, &order_rx, &event_tx, &wake_tx);
                store
            })?;
        Ok(Renewer {
            orders: order_tx,
            events: event_rx,
            wake: wake_rx,
            handle,
        })
    }

    /// The fd that becomes readable when events are waiting.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Takes every waiting event (and the wake-up bytes with them).
    pub fn events(&self) -> Vec<Event> {
        let mut buf = [0u8; 64];
        // SAFETY: non-blocking read into a local buffer.
        while unsafe { libc::read(self.wake.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {
        }
        self.events.try_iter().collect()
    }

    /// Asks for a renewal now.
    pub fn renew_now(&self) {
        let _ = self.orders.send(Order::RenewNow);
    }

    /// Stops the thread (waiting for an attempt in flight, bounded by its
    /// timeout) and returns the store for the release.
    pub fn stop(self) -> Store {
        let _ = self.orders.send(Order::Stop);
        self.handle
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}

fn renew_loop(
    store: &mut Store,
    spec: &LeaseSpec,
    orders: &mpsc::Receiver<Order>,
    events: &mpsc::Sender<Event>,
    wake: &OwnedFd,
) {
    let t = spec.timings;
    let retry = (t.renew_every / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    let mut last_ok = spec.t0;
    let mut next = last_ok + t.renew_every;
    let mut failures = 0u32;
    let send = |e: Event| {
        let _ = events.send(e);
        // SAFETY: one-byte write on a pipe we own; a full pipe already
        // means "events waiting".
        unsafe { libc::write(wake.as_raw_fd(), b"!".as_ptr().cast(), 1) };
    };
    loop {
        match orders.recv_timeout(next.saturating_sub(now())) {
            Ok(Order::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Ok(Order::RenewNow) | Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let sent_at = now();
        let kill_at = last_ok + t.soft_after();
        if sent_at >= kill_at {
            // Too late to matter; the supervisor is stopping CMD. Wait to
            // be told to stop.
            next = sent_at + Duration::from_secs(3600);
            continue;
        }
        // A reply that arrives after the kill deadline is useless, and a
        // stalled connection is better replaced than waited on.
        store.set_timeout((kill_at - sent_at).min(t.renew_every));
        match store.renew(&spec.keys, &spec.owner, t.ttl_ms()) {
            Ok(true) => {
                if failures > 0 && !spec.quiet {
                    eprintln!("distlock: renewal of {} confirmed again", spec.keys.name);
                }
                failures = 0;
                last_ok = sent_at;
                next = sent_at + t.renew_every;
                if spec.verbose >= 2 {
                    eprintln!("distlock: renewed {}", spec.keys.name);
                }
                send(Event::Renewed { sent_at });
            }
            Ok(false) => {
                send(Event::NotOwner);
                next = sent_at + Duration::from_secs(3600);
            }
            Err(e) => {
                failures += 1;
                if !spec.quiet && (failures == 1 || spec.verbose >= 1) {
                    let left = kill_at.saturating_sub(now());
                    eprintln!(
                        "distlock: warning: {e:#}; retrying, CMD will be stopped in {} unless a renewal of {} succeeds",
                        fmt_duration(left),
                        spec.keys.name
                    );
                }
                next = now() + retry;
            }
        }
    }
}

/// A pipe whose read end is non-blocking; both ends close-on-exec so CMD
/// never inherits them.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds that we then own.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}
