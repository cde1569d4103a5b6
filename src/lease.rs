//! A held lease over time: taking it (with waiting), and the renewer thread
//! that keeps it alive while CMD runs.
//!
//! The decisions (when to renew, when CMD must be signalled) are pure and
//! live in [`supervisor`]; this file does the store and thread work, and
//! knows the store only through `crate::store::Store`.
//!
//! Time is read from CLOCK_BOOTTIME (`crate::clock`), so a suspended
//! machine does not stretch a lease.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;

use crate::config::{Timings, Wait, WaitOrder};
use crate::store::{Acquire, DoneMark, LockKeys, Mode, Store, StoreError, Subscription, Watched};

pub mod supervisor;

#[cfg(test)]
mod model;

#[cfg(test)]
mod queue_model;

use supervisor::{Attempt, RenewalPolicy};

use crate::clock::now;

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
/// connection. Only when the lock is busy and we may wait does distlock open
/// a second connection, SUBSCRIBE to its wake-up channel (confirmed before
/// going on, so no release can slip past), join the queue (fair order) and
/// sleep until one of:
/// - a release publishes to our channel (only the next waiter is woken;
///   the ones behind it are told when their turn comes should the ones
///   ahead not claim theirs: see [`Notice::Turn`]);
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
/// once.
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
    sleep: &dyn Sleep,
    watch: &dyn Watch,
) -> Result<Acquired> {
    // Semaphore slots have no queue: their waiters listen for any release.
    let order = if keys.limit.is_some() {
        WaitOrder::Any
    } else {
        order
    };
    let mut queued = false;
    let outcome = wait_for(
        store,
        &Attempts {
            keys,
            owner,
            ttl_ms,
            meta,
            wait,
            order,
        },
        sleep,
        watch,
        &mut queued,
    );
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

/// The first pause after a failed attempt while no server answers.
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two attempts while no server answers.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// What each attempt of one acquisition sends.
struct Attempts<'a> {
    keys: &'a LockKeys,
    owner: &'a str,
    ttl_ms: u64,
    meta: &'a [(&'a str, &'a str)],
    wait: Wait,
    order: WaitOrder,
}

/// `acquire` without the clean-up; `queued` tells whether we may be in
/// the wait queue.
fn wait_for(
    store: &mut Store,
    a: &Attempts<'_>,
    sleep: &dyn Sleep,
    watch: &dyn Watch,
    queued: &mut bool,
) -> Result<Acquired> {
    let (keys, owner, ttl_ms, meta) = (a.keys, a.owner, a.ttl_ms, a.meta);
    store.set_watched(watch.every().is_some());
    let since = now();
    // A wait too long for the clock to count to is a wait without limit.
    let give_up_at = match a.wait {
        Wait::For(d) => now().checked_add(d),
        Wait::Forever => None,
    };
    let first = match a.order {
        WaitOrder::Fair => Mode::Once,
        WaitOrder::Any => Mode::Any,
    };
    let sent_at = now();
    // A server that does not answer the first attempt is a failure (125)
    // at once, as without --wait: the caller learns of a wrong URL or a
    // server that is down now, not when the wait runs out. Only a waiter,
    // one that reached the server, rides out a dropped connection.
    let (holder, ahead, unacked) = match store.acquire(keys, owner, ttl_ms, first, meta) {
        Ok(Acquire::Acquired { token }) => return Ok(Acquired::Yes { token, sent_at }),
        Ok(Acquire::Busy { holder, ahead, .. }) => (holder, ahead, false),
        Ok(Acquire::Unacknowledged) => (None, None, true),
        Ok(Acquire::Done(mark)) => return Ok(Acquired::Done(mark)),
        Ok(Acquire::Evicted) => return Ok(Acquired::Evicted),
        Err(e) => {
            if let Some(sig) = sleep.interrupted() {
                return Ok(Acquired::Interrupted(sig));
            }
            return Err(e.into());
        }
    };
    let mut down = None;
    if give_up_at.is_some_and(|t| t <= now()) {
        return Ok(Acquired::Busy {
            holder,
            ahead,
            unacked,
        });
    }

    let (mode, channel) = match a.order {
        WaitOrder::Fair => (Mode::Fair, format!("{}{owner}", keys.wake_prefix)),
        WaitOrder::Any => (Mode::Any, keys.released.clone()),
    };
    // Slept on while there is no subscriber (no server answers).
    let (idle, _idle_w) = pipe()?;
    let mut subscriber: Option<Subscriber> = None;
    let own_ttl = Duration::from_millis(ttl_ms);
    let mut fallback = Duration::from_millis(20);
    let mut retry = RETRY_FIRST;
    let outcome = 'attempts: loop {
        if down.is_none() {
            let step = try_once(store, a, mode, &channel, &mut subscriber, queued);
            match step {
                Err(e) => {
                    if let Some(sig) = sleep.interrupted() {
                        break Ok(Acquired::Interrupted(sig));
                    }
                    if !e.is_connectivity() {
                        break Err(e.into());
                    }
                    down = Some(e);
                }
                Ok(Step::Done(outcome)) => break Ok(outcome),
                Ok(Step::Busy {
                    holder,
                    ttl,
                    ahead,
                    unacked,
                    watched,
                }) => {
                    retry = RETRY_FIRST;
                    let now_t = now();
                    let waiting = Waiting {
                        holder: holder.clone(),
                        ahead: ahead.clone(),
                        unacked,
                        watched,
                        seen_at: now_t,
                        since,
                    };
                    let mut wake_at = now_t
                        + match ttl {
                            Some(t) => t + Duration::from_millis(1),
                            None => own_ttl,
                        };
                    if unacked {
                        // Replicas lagging: try again soon, with backoff.
                        wake_at = wake_at.min(now_t + jitter(fallback));
                        fallback = (fallback * 2).min(Duration::from_secs(1));
                    }
                    if let Some(t) = give_up_at {
                        if t <= now_t {
                            break Ok(Acquired::Busy {
                                holder,
                                ahead,
                                unacked,
                            });
                        }
                        wake_at = wake_at.min(t);
                    }
                    let fd = subscriber.as_ref().map_or(idle.as_raw_fd(), Subscriber::fd);
                    // A watcher is shown the wait from what this reply
                    // said, redrawn between sleeps of at most `every`:
                    // no command of its own.
                    let every = watch.every();
                    loop {
                        let now_t = now();
                        let left = wake_at.saturating_sub(now_t);
                        if left.is_zero() {
                            continue 'attempts;
                        }
                        if every.is_some() {
                            watch.show(&waiting, now_t);
                        }
                        match sleep.sleep(every.map_or(left, |e| left.min(e)), fd) {
                            Wakeup::Interrupted(sig) => {
                                break 'attempts Ok(Acquired::Interrupted(sig))
                            }
                            Wakeup::Readable => {
                                if let Some(s) = &subscriber {
                                    s.drain();
                                }
                                continue 'attempts;
                            }
                            Wakeup::Nothing => {}
                        }
                    }
                }
            }
        }
        // No server answered: pause (doubling, jittered, within the wait),
        // then reconnect and try again.
        let now_t = now();
        if give_up_at.is_some_and(|t| t <= now_t) {
            break Err(down.take().expect("set above").into());
        }
        let pause = jitter(retry).min(give_up_at.map_or(retry, |t| t - now_t));
        retry = (retry * 2).min(RETRY_MAX);
        let until = now_t + pause;
        loop {
            let left = until.saturating_sub(now());
            if left.is_zero() {
                break;
            }
            if let Wakeup::Interrupted(sig) = sleep.sleep(left, idle.as_raw_fd()) {
                break 'attempts Ok(Acquired::Interrupted(sig));
            }
        }
        down = None;
    };
    if let Some(s) = subscriber {
        s.stop();
    }
    outcome
}

/// What one attempt of the wait loop found, when the server answered.
enum Step {
    /// The wait is over: acquired, or `--once-per` found the job done.
    Done(Acquired),
    /// Busy (or taken but not acknowledged by enough replicas, and
    /// released): sleep until woken or `ttl` passes.
    Busy {
        holder: Option<String>,
        ttl: Option<Duration>,
        ahead: Option<String>,
        unacked: bool,
        watched: Watched,
    },
}

/// One attempt of the wait loop: subscribes first when there is no live
/// subscription (so that no release after the attempt is missed), then
/// tries to acquire (which re-checks the lock and joins or keeps the
/// queue).
fn try_once(
    store: &mut Store,
    a: &Attempts<'_>,
    mode: Mode,
    channel: &str,
    subscriber: &mut Option<Subscriber>,
    queued: &mut bool,
) -> std::result::Result<Step, StoreError> {
    if subscriber.as_ref().is_none_or(Subscriber::is_dead) {
        if let Some(old) = subscriber.take() {
            old.stop();
        }
        let sub = store.subscribe(channel)?;
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
    let sent_at = now();
    *queued |= mode == Mode::Fair;
    Ok(
        match store.acquire(a.keys, a.owner, a.ttl_ms, mode, a.meta)? {
            Acquire::Acquired { token } => Step::Done(Acquired::Yes { token, sent_at }),
            Acquire::Busy {
                holder,
                ttl,
                ahead,
                watched,
            } => Step::Busy {
                holder,
                ttl,
                ahead,
                unacked: false,
                watched,
            },
            Acquire::Unacknowledged => Step::Busy {
                holder: None,
                ttl: None,
                ahead: None,
                unacked: true,
                watched: Watched::default(),
            },
            // The script left the queue and woke the next waiter itself.
            Acquire::Done(mark) => Step::Done(Acquired::Done(mark)),
            Acquire::Evicted => Step::Done(Acquired::Evicted),
        },
    )
}

/// How long after its turn starts (by the server's word) a waiter tries:
/// enough for the one ahead's window to have passed on the server's clock
/// despite rounding and delivery, far below the window (900 ms), so the
/// attempt lands inside our own window.
const TURN_SLACK: Duration = Duration::from_millis(50);

/// What a message on the wake-up channel asks of a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Notice {
    /// Try now: the lock is free and it is our turn (or, for `--wait-order
    /// any` and semaphores, the lock was released). Also any message we do
    /// not know: one attempt too many is harmless.
    Wake,
    /// The lock is being handed to a waiter ahead; try after this long, by
    /// when each waiter ahead has had its claim window. A stopped waiter
    /// cannot claim, so the first live one behind it gets the lock within
    /// a second for each stopped waiter ahead.
    Turn(Duration),
    /// A waiter ahead claimed the lock: forget the turn and sleep on.
    Claimed,
}

impl Notice {
    fn parse(payload: &[u8]) -> Notice {
        match payload {
            b"claimed" => Notice::Claimed,
            p => match p.strip_prefix(b"turn ") {
                Some(ms) => std::str::from_utf8(ms)
                    .ok()
                    .and_then(|ms| ms.parse().ok())
                    .map_or(Notice::Wake, |ms| Notice::Turn(Duration::from_millis(ms))),
                None => Notice::Wake,
            },
        }
    }
}

/// A uniformly random duration in [d/2, d], so waiters spread out.
fn jitter(d: Duration) -> Duration {
    let mut b = [0u8; 4];
    let r = getrandom::fill(&mut b).map_or(0, |_| u32::from_ne_bytes(b));
    d / 2 + d.mul_f64(f64::from(r) / f64::from(u32::MAX) / 2.0)
}

/// The start of our turn, if a hand-over promised us one, kept by the
/// subscriber thread. A hand-over sends `turn` and then `claimed` to every
/// waiter behind the head; keeping the turn here rather than in the main
/// thread means those messages wake only the subscriber thread, and the
/// main thread wakes once per attempt it must make: a `wake`, or a turn
/// that has come. (8 workers × 25 runs on one lock: about 0.08 ms less
/// CPU per run, 3%.)
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash)]
struct Turn(Option<Duration>);

impl Turn {
    /// Takes in a message read at `now`; true when it asks for an attempt.
    fn take(&mut self, notice: Notice, now: Duration) -> bool {
        match notice {
            Notice::Wake => return true,
            Notice::Turn(d) => self.0 = Some(now + d + TURN_SLACK),
            Notice::Claimed => self.0 = None,
        }
        false
    }

    /// True, once, when the turn has come by `now`.
    fn has_come(&mut self, now: Duration) -> bool {
        let come = self.0.is_some_and(|t| t <= now);
        if come {
            self.0 = None;
        }
        come
    }

    /// How long the thread may block on the socket: until the turn comes,
    /// and at most `tick`.
    fn read_timeout(&self, now: Duration, tick: Duration) -> Duration {
        self.0.map_or(tick, |t| t.saturating_sub(now).min(tick))
    }
}

/// A thread that blocks on the subscribed connection and writes a byte to
/// a pipe when the main thread must make an attempt (a `wake`, our turn
/// come, or the connection lost), so the main thread can sleep in one poll
/// on signals and wake-ups. The store's [`Subscription`] reads with a
/// timeout but exposes no socket to poll, hence the thread.
struct Subscriber {
    stop: Arc<AtomicBool>,
    dead: Arc<AtomicBool>,
    turn: Arc<Mutex<Turn>>,
    wake: OwnedFd,
}

impl Subscriber {
    /// How often the thread looks up from the socket to see whether it
    /// should stop; costs no request to the store.
    const TICK: Duration = Duration::from_millis(200);

    fn start(mut sub: Subscription) -> Result<Subscriber> {
        let (wake, notify) = pipe()?;
        let stop = Arc::new(AtomicBool::new(false));
        let dead = Arc::new(AtomicBool::new(false));
        let turn = Arc::new(Mutex::new(Turn::default()));
        let (stop2, dead2, turn2) = (stop.clone(), dead.clone(), turn.clone());
        std::thread::Builder::new()
            .name("subscriber".into())
            .spawn(move || {
                let turn = || turn2.lock().unwrap_or_else(PoisonError::into_inner);
                while !stop2.load(Ordering::Relaxed) {
                    let timeout = turn().read_timeout(now(), Self::TICK);
                    let attempt = match sub.next_message(timeout) {
                        Ok(Some(payload)) => turn().take(Notice::parse(&payload), now()),
                        Ok(None) => false,
                        Err(_) => {
                            dead2.store(true, Ordering::Relaxed);
                            poke(&notify);
                            break;
                        }
                    };
                    if attempt || turn().has_come(now()) {
                        poke(&notify);
                    }
                }
                // Dropping `sub` closes the socket without an UNSUBSCRIBE
                // round trip.
            })?;
        Ok(Subscriber {
            stop,
            dead,
            turn,
            wake,
        })
    }

    fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    /// Forgets the turn we were promised: called before each attempt,
    /// whose reply (or a message its script publishes) tells us again.
    fn forget_turn(&self) {
        *self.turn.lock().unwrap_or_else(PoisonError::into_inner) = Turn::default();
    }

    /// Empties the wake-up pipe before the attempt it asked for.
    fn drain(&self) {
        drain_pipe(&self.wake);
    }

    /// Lets the thread finish on its own (within one tick); nothing waits
    /// for it, so CMD starts at once.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Writes one byte to a wake-up pipe; a full pipe already means "wake up".
fn poke(fd: &OwnedFd) {
    let _ = nix::unistd::write(fd, b"!");
}

/// Empties a non-blocking wake-up pipe.
fn drain_pipe(fd: &OwnedFd) {
    let mut buf = [0u8; 64];
    while nix::unistd::read(fd, &mut buf).is_ok_and(|n| n > 0) {}
}

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

enum Order {
    /// Renew at once (after a SIGCONT).
    RenewNow,
    /// Stop and hand the store back.
    Stop,
}

/// The renewer: a thread with its own channels once started. It is
/// started lazily, when the first renewal is due (or on `renew_now`), so a
/// short CMD never pays for a thread. Events come with a byte on a pipe so
/// the supervisor sleeps in one poll on signals and events.
pub struct Renewer {
    state: State,
}

enum State {
    /// Not started: the store and what it will need.
    Idle(Box<(Store, LeaseSpec)>),
    /// The thread is running.
    Running(Running),
    /// Only while switching from one to the other.
    Gone,
}

struct Running {
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
}

impl Renewer {
    /// A renewer for the lease in `spec`; no thread yet.
    pub fn new(store: Store, spec: LeaseSpec) -> Renewer {
        Renewer {
            state: State::Idle(Box::new((store, spec))),
        }
    }

    /// When the thread must be running (the first renewal is due), while
    /// it is not started.
    pub fn start_at(&self) -> Option<Duration> {
        match &self.state {
            State::Idle(b) => Some(b.1.t0 + b.1.timings.renew_every),
            _ => None,
        }
    }

    /// Starts the thread if it is due. A thread that cannot be started
    /// means no renewal: the supervisor's deadline then stops CMD; the
    /// error is returned for the user.
    pub fn start_if_due(&mut self, now: Duration) -> Option<std::io::Error> {
        if self.start_at().is_some_and(|at| now >= at) {
            return self.start();
        }
        None
    }

    /// Starts renewing every `renew_every`, retrying failures quickly. The
    /// thread never sends a renewal once the kill deadline has passed: by
    /// then the supervisor is stopping CMD and a late "renewed" would be a
    /// lie.
    fn start(&mut self) -> Option<std::io::Error> {
        let (mut store, spec) = match std::mem::replace(&mut self.state, State::Gone) {
            State::Idle(b) => *b,
            // Running (or gone): put it back untouched.
            other => {
                self.state = other;
                return None;
            }
        };
        let (order_tx, order_rx) = mpsc::channel();
        let (event_tx, event_rx) = mpsc::channel();
        let Ok((wake_rx, wake_tx)) = pipe() else {
            self.state = State::Idle(Box::new((store, spec)));
            return None;
        };
        let spawned = std::thread::Builder::new()
            .name("renewer".into())
            .spawn(move || {
                renew_loop(&mut store, &spec, &order_rx, &event_tx, &wake_tx);
                store
            });
        match spawned {
            Ok(handle) => {
                self.state = State::Running(Running {
                    orders: order_tx,
                    events: event_rx,
                    wake: wake_rx,
                    handle,
                });
                None
            }
            Err(e) => {
                self.state = State::Gone;
                Some(e)
            }
        }
    }

    /// The fd that becomes readable when events are waiting.
    pub fn wake_fd(&self) -> Option<RawFd> {
        match &self.state {
            State::Running(r) => Some(r.wake.as_raw_fd()),
            _ => None,
        }
    }

    /// Takes every waiting event (and the wake-up bytes with them).
    pub fn events(&self) -> Vec<Event> {
        match &self.state {
            State::Running(r) => {
                drain_pipe(&r.wake);
                r.events.try_iter().collect()
            }
            _ => Vec::new(),
        }
    }

    /// Asks for a renewal now, starting the thread if need be; the error
    /// if it could not be started.
    pub fn renew_now(&mut self) -> Option<std::io::Error> {
        let failed = self.start();
        if let State::Running(r) = &self.state {
            let _ = r.orders.send(Order::RenewNow);
        }
        failed
    }

    /// Stops the thread (waiting for an attempt in flight, bounded by its
    /// timeout) and returns the store for the release, None only if the
    /// thread could not be started at all, with the events not taken yet.
    pub fn stop(self) -> (Option<Store>, Vec<Event>) {
        match self.state {
            State::Idle(b) => (Some(b.0), Vec::new()),
            State::Running(r) => {
                let _ = r.orders.send(Order::Stop);
                let store = r
                    .handle
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e));
                (Some(store), r.events.try_iter().collect())
            }
            State::Gone => (None, Vec::new()),
        }
    }
}

/// The renewer thread: sends renewals when [`RenewalPolicy`] says so (or
/// when told to after a SIGCONT) and reports each outcome.
fn renew_loop(
    store: &mut Store,
    spec: &LeaseSpec,
    orders: &mpsc::Receiver<Order>,
    events: &mpsc::Sender<Event>,
    wake: &OwnedFd,
) {
    let t = spec.timings;
    let mut policy = RenewalPolicy::new(t, spec.t0);
    let send = |e: Event| {
        let _ = events.send(e);
        poke(wake);
    };
    loop {
        // Nothing due (too late, or not ours): wait to be told to stop.
        let order = match policy.next_due() {
            Some(next) => orders.recv_timeout(next.saturating_sub(now())),
            None => orders
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match order {
            Ok(Order::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Ok(Order::RenewNow) | Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let sent_at = now();
        let timeout = match policy.attempt(sent_at) {
            Attempt::Send { timeout } => timeout,
            // Too late to matter; the supervisor is stopping CMD.
            Attempt::TooLate => continue,
        };
        store.set_timeout(timeout);
        match store.renew(&spec.keys, &spec.owner, t.ttl_ms()) {
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

/// A pipe whose read end is non-blocking; both ends close-on-exec so CMD
/// never inherits them.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    let fds =
        nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(std::io::Error::from)?;
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_channel_messages_are_read_as_notices() {
        assert_eq!(Notice::parse(b"wake"), Notice::Wake);
        assert_eq!(Notice::parse(b"released"), Notice::Wake);
        assert_eq!(Notice::parse(b"claimed"), Notice::Claimed);
        assert_eq!(
            Notice::parse(b"turn 1800"),
            Notice::Turn(Duration::from_millis(1800))
        );
        assert_eq!(Notice::parse(b"turn 0"), Notice::Turn(Duration::ZERO));
        // Anything garbled is one attempt too many, never a lost wake-up.
        assert_eq!(Notice::parse(b"turn -5"), Notice::Wake);
        assert_eq!(Notice::parse(b"turn"), Notice::Wake);
    }

    const TICK: Duration = Duration::from_millis(200);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn only_a_wake_or_a_turn_that_has_come_asks_for_an_attempt() {
        let mut turn = Turn::default();
        assert!(turn.take(Notice::Wake, ms(1000)));
        assert!(!turn.take(Notice::Turn(ms(900)), ms(1000)));
        // The turn starts at 1000 + 900 ms, tried TURN_SLACK after that.
        let due = ms(1900) + TURN_SLACK;
        assert!(!turn.has_come(due - ms(1)));
        assert!(turn.has_come(due));
        assert!(
            !turn.has_come(due),
            "a turn asks for one attempt, not one per tick"
        );
    }

    #[test]
    fn claimed_cancels_the_turn_and_a_later_turn_replaces_it() {
        let mut turn = Turn::default();
        turn.take(Notice::Turn(ms(900)), ms(0));
        assert!(!turn.take(Notice::Claimed, ms(10)));
        assert!(!turn.has_come(ms(10_000)), "claimed: sleep on");
        turn.take(Notice::Turn(ms(1800)), ms(0));
        turn.take(Notice::Turn(ms(100)), ms(0));
        assert!(
            turn.has_come(ms(100) + TURN_SLACK),
            "the newest turn counts"
        );
    }

    #[test]
    fn the_thread_blocks_until_the_turn_comes_and_at_most_a_tick() {
        let mut turn = Turn::default();
        assert_eq!(turn.read_timeout(ms(0), TICK), TICK);
        turn.take(Notice::Turn(ms(0)), ms(0));
        assert_eq!(turn.read_timeout(ms(0), TICK), TURN_SLACK);
        assert_eq!(turn.read_timeout(ms(30), TICK), TURN_SLACK - ms(30));
        assert_eq!(turn.read_timeout(ms(999), TICK), Duration::ZERO);
        turn.take(Notice::Turn(ms(5000)), ms(0));
        assert_eq!(turn.read_timeout(ms(0), TICK), TICK);
    }
}
