//! The renewer thread, which keeps a held lease alive while CMD runs.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::panic::resume_unwind;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::pipe::{drain_pipe, pipe, poke};
use super::supervisor::{Attempt, RenewalPolicy};
use crate::clock::now;
use crate::config::Timings;
use crate::store::{LockKeys, Store};

/// What the renewer reports: to the supervisor, and (the caller decides
/// how, if at all) to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A renewal sent at this time was confirmed: the lease now runs until
    /// at least `sent_at + ttl` in the store. `after_failures` renewals had
    /// failed since the last confirmed one.
    Renewed {
        sent_at: Duration,
        after_failures: u32,
    },
    /// The store says someone else (or nobody) holds the lock.
    NotOwner,
    /// A renewal could not be confirmed: the `failures`-th in a row (the
    /// first of a run is what the supervisor hears of), with the error,
    /// and how long is left before CMD is stopped unless one succeeds.
    Failed {
        error: String,
        failures: u32,
        left: Duration,
    },
}

/// The renewer: a thread with its own channels once started. It is
/// started lazily, when the first renewal is due (or on `renew_now`), so a
/// short CMD never pays for a thread. Events come with a byte on a pipe so
/// the supervisor sleeps in one poll on signals and events.
pub struct Renewer {
    /// Before the thread starts: the store and what it will need.
    idle: Option<(Store, LeaseSpec)>,
    running: Option<Running>,
}

struct Running {
    /// A `()` asks for a renewal at once (after a SIGCONT); dropping the
    /// sender stops the thread, which hands the store back.
    orders: mpsc::Sender<()>,
    events: mpsc::Receiver<Event>,
    wake: OwnedFd,
    handle: JoinHandle<Store>,
}

/// Everything the renewer needs to know about the lease.
pub struct LeaseSpec {
    pub keys: LockKeys,
    pub owner: String,
    pub timings: Timings,
    /// When the last confirmed request was sent.
    pub t0: Duration,
}

impl Renewer {
    /// A renewer for the lease in `spec`; no thread yet.
    pub fn new(store: Store, spec: LeaseSpec) -> Renewer {
        Renewer {
            idle: Some((store, spec)),
            running: None,
        }
    }

    /// When the thread must be running (the first renewal is due), while
    /// it is not started.
    pub fn start_at(&self) -> Option<Duration> {
        let spec = &self.idle.as_ref()?.1;
        Some(spec.t0 + spec.timings.renew_every)
    }

    /// Starts the thread if it is due. A thread that cannot be started
    /// means no renewal: the supervisor's deadline then stops CMD; the
    /// error is returned for the user.
    pub fn start_if_due(&mut self, now: Duration) -> Option<std::io::Error> {
        let due = self.start_at().is_some_and(|at| now >= at);
        due.then(|| self.start()).flatten()
    }

    /// Starts renewing every `renew_every`, retrying failures quickly (no
    /// error when already started, or when no pipe could be made: then it
    /// tries again next time). The thread never sends a renewal once the
    /// kill deadline has passed: by then the supervisor is stopping CMD and
    /// a late "renewed" would be a lie.
    fn start(&mut self) -> Option<std::io::Error> {
        self.idle.as_ref()?;
        let (wake, wake_tx) = pipe().ok()?;
        // A thread that could not be started leaves neither idle nor running.
        let (store, spec) = self.idle.take()?;
        let (orders, order_rx) = mpsc::channel();
        let (event_tx, events) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("renewer".into())
            .spawn(move || renew_loop(store, &spec, &order_rx, &event_tx, &wake_tx));
        let handle = match spawned {
            Ok(handle) => handle,
            Err(e) => return Some(e),
        };
        self.running = Some(Running {
            orders,
            events,
            wake,
            handle,
        });
        None
    }

    /// The fd that becomes readable when events are waiting.
    pub fn wake_fd(&self) -> Option<RawFd> {
        Some(self.running.as_ref()?.wake.as_raw_fd())
    }

    /// Takes every waiting event (and the wake-up bytes with them).
    pub fn events(&self) -> Vec<Event> {
        let Some(r) = &self.running else {
            return Vec::new();
        };
        drain_pipe(&r.wake);
        r.events.try_iter().collect()
    }

    /// Asks for a renewal now, starting the thread if need be; the error
    /// if it could not be started.
    pub fn renew_now(&mut self) -> Option<std::io::Error> {
        let failed = self.start();
        if let Some(r) = &self.running {
            let _ = r.orders.send(());
        }
        failed
    }

    /// Stops the thread (waiting for an attempt in flight, bounded by its
    /// timeout) and returns the store for the release, None only if the
    /// thread could not be started at all, with the events not taken yet.
    pub fn stop(self) -> (Option<Store>, Vec<Event>) {
        let Some(r) = self.running else {
            return (self.idle.map(|(store, _)| store), Vec::new());
        };
        drop(r.orders);
        let store = r.handle.join().unwrap_or_else(|e| resume_unwind(e));
        (Some(store), r.events.try_iter().collect())
    }
}

/// The renewer thread: sends renewals when [`RenewalPolicy`] says so (or
/// when told to after a SIGCONT) and reports each outcome; hands the store
/// back when told to stop.
fn renew_loop(
    mut store: Store,
    spec: &LeaseSpec,
    orders: &mpsc::Receiver<()>,
    events: &mpsc::Sender<Event>,
    wake: &OwnedFd,
) -> Store {
    let mut policy = RenewalPolicy::new(spec.timings, spec.t0);
    let send = |e: Event| {
        let _ = events.send(e);
        poke(wake);
    };
    loop {
        // Nothing due (too late, or not ours): wait to be told to stop
        // (`recv_timeout` takes `Duration::MAX` as no limit).
        let idle = policy
            .next_due()
            .map_or(Duration::MAX, |next| next.saturating_sub(now()));
        if let Err(mpsc::RecvTimeoutError::Disconnected) = orders.recv_timeout(idle) {
            return store;
        }
        let sent_at = now();
        // Too late to matter; the supervisor is stopping CMD.
        let Attempt::Send { timeout } = policy.attempt(sent_at) else {
            continue;
        };
        store.set_timeout(timeout);
        match store.renew(&spec.keys, &spec.owner, spec.timings.ttl_ms()) {
            Ok(true) => {
                let after_failures = policy.failures();
                policy.confirmed(sent_at);
                send(Event::Renewed {
                    sent_at,
                    after_failures,
                });
            }
            Ok(false) => {
                send(Event::NotOwner);
                policy.not_owner();
            }
            Err(e) => {
                let now_t = now();
                policy.failed(now_t);
                send(Event::Failed {
                    error: format!("{e:#}"),
                    failures: policy.failures(),
                    left: policy.deadline().saturating_sub(now_t),
                });
            }
        }
    }
}
