//! A deadline for a whole call (connect, handshake, request, reply), and
//! calls that signals end at once.
//!
//! redis-rs bounds each read by the socket's timeout, so a server that
//! sends one byte of its reply every 200 ms holds a call for ever, and its
//! sockets are out of reach. A signal reaches a blocked read, though: with
//! a handler installed without SA_RESTART, read(2) fails with EINTR, which
//! neither std's socket reads nor redis-rs's parser retry, and the call
//! fails. So, for the length of a call, a per-thread POSIX timer sends
//! [`kick`] to the calling thread at the deadline and every
//! [`KICK_EVERY`] after it, until the call returns: repeated, because a
//! kick that lands between two reads interrupts nothing.
//!
//! In an interruptible call (an acquisition, a wait) the signals that end
//! it are unblocked in the calling thread only, with a handler that notes
//! them and starts the kicks at once. When the call returns they are
//! blocked again and raised again for the process, so the caller's
//! signalfd sees them as if the call had not been there.
//!
//! Not over TLS: rustls retries a read that EINTR interrupted, with the
//! socket's timeout started afresh, so kicks every 2 ms would keep such a
//! read going for ever instead of ending it. A TLS call therefore gets no
//! timer ([`Call::start`]'s `kicks`): it stays bounded per read, and an
//! ending signal is noted and acted on when the read returns. connect(2)
//! (std retries EINTR too) is bounded by the connect timeout, which is the
//! time left.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// How often a call past its deadline (or interrupted) is kicked again.
const KICK_EVERY: Duration = Duration::from_millis(2);

/// The signal the call timer sends: a realtime one, so that nobody's
/// SIGALRM is taken; chosen once by [`choose_kick`]. 0: none (every
/// realtime signal ignored), and then calls have no timer.
static KICK: AtomicI32 = AtomicI32::new(0);

fn kick() -> i32 {
    KICK.load(Ordering::Relaxed)
}

/// Picks the kick signal, from SIGRTMAX-1 down: the first one the caller
/// did not ignore, with `on_kick` installed for it. An ignored one must
/// stay ignored (CMD inherits it so, as `timeout(1)` keeps it), and a
/// timer sending an ignored signal would interrupt nothing: the deadline
/// would silently be gone.
fn choose_kick() {
    for sig in (libc::SIGRTMIN()..libc::SIGRTMAX()).rev() {
        if install(sig, on_kick) {
            KICK.store(sig, Ordering::Relaxed);
            return;
        }
    }
}

/// Signals (as bits) caught during an interruptible call.
static CAUGHT: AtomicU64 = AtomicU64::new(0);
/// The timer of the interruptible call in progress, plus one (0: none),
/// for the handler to start kicking. Plus one because a timer's id can be
/// 0 (the kernel numbers a process's timers from 0): stored as it is, the
/// first call's timer read as "none", and a signal that landed while the
/// thread was between two reads interrupted nothing until the deadline.
static KICK_TIMER: AtomicUsize = AtomicUsize::new(0);
/// A kick that another process sent (a signal meant for CMD): raised again
/// for the process when the call ends.
static FOREIGN_KICK: AtomicBool = AtomicBool::new(false);

extern "C" fn on_kick(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    if unsafe { (*info).si_code } != libc::SI_TIMER {
        FOREIGN_KICK.store(true, Ordering::SeqCst);
    }
}

extern "C" fn on_ender(sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if (0..64).contains(&sig) {
        CAUGHT.fetch_or(1 << sig, Ordering::SeqCst);
    }
    let timer = KICK_TIMER.load(Ordering::SeqCst);
    if let Some(timer) = timer.checked_sub(1) {
        // timer_settime is async-signal-safe; errno is the interrupted
        // code's, so it is kept.
        // SAFETY: __errno_location is this thread's errno.
        let saved = unsafe { *libc::__errno_location() };
        arm(timer as libc::timer_t, Duration::from_nanos(1));
        unsafe { *libc::__errno_location() = saved };
    }
}

/// Installs `handler` for `sig` (no SA_RESTART: that is the point),
/// unless the caller ignored `sig`, which stays ignored. False if not
/// installed.
fn install(
    sig: i32,
    handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void),
) -> bool {
    // SAFETY: sigaction with a zeroed action plus our handler, whose code
    // only touches atomics and calls timer_settime.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old);
        if old.sa_sigaction == libc::SIG_IGN {
            return false;
        }
        if old.sa_sigaction == handler as usize {
            return true;
        }
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, std::ptr::null_mut()) == 0
    }
}

/// Starts `timer`: first in `after`, then every `KICK_EVERY`.
fn arm(timer: libc::timer_t, after: Duration) {
    let ts = |d: Duration| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    let spec = libc::itimerspec {
        it_interval: ts(KICK_EVERY),
        it_value: ts(after.max(Duration::from_nanos(1))),
    };
    // SAFETY: a timer of ours, a valid itimerspec.
    unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) };
}

/// One call in progress on this thread; ends (timer gone, mask restored,
/// caught signals raised again) when dropped.
pub(super) struct Call {
    timer: Option<libc::timer_t>,
    old_mask: libc::sigset_t,
    deadline: Instant,
    interruptible: bool,
}

impl Call {
    /// Starts a call that must be over `timeout` from now; with `enders`
    /// (signal numbers), one that any of them ends at once. Without
    /// `kicks` (a transport that retries EINTR: TLS) no timer is started.
    pub(super) fn start(timeout: Duration, enders: &[i32], kicks: bool) -> Call {
        static KICK_INSTALLED: Once = Once::new();
        KICK_INSTALLED.call_once(choose_kick);
        let deadline = Instant::now() + timeout;
        // SAFETY: sigevent and sigset_t are plain C structs, zeroed then
        // filled; timer_create writes the new timer's id.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, kick());
            for &sig in enders {
                if install(sig, on_ender) {
                    libc::sigaddset(&mut set, sig);
                }
            }
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = kick();
            ev.sigev_notify_thread_id = libc::gettid();
            let mut timer: libc::timer_t = std::mem::zeroed();
            let timer = (kicks
                && kick() != 0
                && libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut timer) == 0)
                .then_some(timer);
            let interruptible = !enders.is_empty();
            if let Some(t) = timer {
                if interruptible {
                    CAUGHT.store(0, Ordering::SeqCst);
                    KICK_TIMER.store(t as usize + 1, Ordering::SeqCst);
                }
                arm(t, timeout);
            }
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, &mut old_mask);
            Call {
                timer,
                old_mask,
                deadline,
                interruptible,
            }
        }
    }

    /// Whether the deadline has passed.
    pub(super) fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// The time left before the deadline (at least 1 ms: redis-rs refuses
    /// a zero timeout).
    pub(super) fn left(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// Whether the call that failed with `e` ran out of time: past its
    /// deadline and not ended by a signal. A timeout the error already
    /// names (with a TLS hint, say) keeps its own words, so it is not
    /// counted here.
    pub(super) fn ran_out(&self, e: &super::StoreError) -> bool {
        self.expired() && !self.interrupted() && !matches!(e, super::StoreError::Timeout(_))
    }

    /// Whether a signal that ends the call arrived during it.
    pub(super) fn interrupted(&self) -> bool {
        self.interruptible && CAUGHT.load(Ordering::SeqCst) != 0
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // SAFETY: our own timer, deleted once; the mask saved by `start`.
        unsafe {
            if let Some(t) = self.timer {
                if self.interruptible {
                    KICK_TIMER.store(0, Ordering::SeqCst);
                }
                libc::timer_delete(t);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut());
            if self.interruptible {
                let caught = CAUGHT.swap(0, Ordering::SeqCst);
                for sig in (1..64).filter(|s| caught & (1 << s) != 0) {
                    libc::kill(libc::getpid(), sig);
                }
            }
            if FOREIGN_KICK.swap(false, Ordering::SeqCst) {
                libc::kill(libc::getpid(), kick());
            }
        }
    }
}
