//! The signal mask, the signalfd and boot-time timer `run` and the waiters
//! sleep on, the caller's dispositions (SIGPIPE's read first thing in `main`), and
//! stopping distlock itself.

use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::signal::Signal::*;
use nix::sys::signal::{kill, killpg, signal, SigHandler, SigSet, SigmaskHow};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::unistd::{getpgrp, getpid};

/// Signals distlock never blocks or forwards: the unblockable ones, the
/// synchronous faults (they concern distlock itself) and SIGCHLD (ours to
/// consume). SIGPIPE is forwarded like any other signal when the caller
/// did not ignore it, except the ones distlock's own writes raise (see
/// `Signals::drain`).
const NOT_FORWARDED: &[i32] = &[
    SIGKILL as i32,
    SIGSTOP as i32,
    SIGSEGV as i32,
    SIGBUS as i32,
    SIGILL as i32,
    SIGFPE as i32,
    SIGTRAP as i32,
    SIGSYS as i32,
    SIGABRT as i32,
    SIGCHLD as i32,
];

/// Whether SIGPIPE was ignored when the process started, before distlock's
/// start-up set it to SIG_IGN (`main.rs`, as std's own start would). `timeout(1)` and tini
/// hand CMD the caller's SIGPIPE, so `(trap '' PIPE; distlock run …)` must
/// give CMD an ignored SIGPIPE, and a caller that left it alone must give
/// CMD the default. Written once, by `record_caller_sigpipe`.
static CALLER_IGNORED_SIGPIPE: AtomicBool = AtomicBool::new(false);

/// Called by `main` before it ignores SIGPIPE itself, so before anything
/// else touches it. Under the unit-test harness, whose std start has set it
/// already, it is never called and CMD gets the default.
#[cfg_attr(test, allow(dead_code))]
pub fn record_caller_sigpipe() {
    CALLER_IGNORED_SIGPIPE.store(is_ignored(SIGPIPE as i32), Ordering::Relaxed);
}

/// Whether the caller (whoever exec'd distlock) ignored `sig`: the current
/// disposition, except for SIGPIPE, which the runtime has changed since.
pub(super) fn caller_ignored(sig: i32) -> bool {
    if sig == SIGPIPE as i32 {
        return CALLER_IGNORED_SIGPIPE.load(Ordering::Relaxed);
    }
    is_ignored(sig)
}

/// Whether `sig`'s disposition is SIG_IGN now. Raw, because nix's
/// `sigaction` always installs an action (a set-and-restore would change
/// the disposition for a moment) and its `Signal` cannot name realtime
/// signals; and because it runs first thing in `main`, before std's set-up.
fn is_ignored(sig: i32) -> bool {
    // SAFETY: sigaction with a null new action only writes the current one
    // into a zeroed local; no allocation and no Rust runtime needed. A
    // failure (an invalid number) leaves it zeroed, SIG_DFL.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old);
        old.sa_sigaction == libc::SIG_IGN
    }
}

/// The set of `sigs`, realtime signals included, which nix's `SigSet::add`
/// cannot take (its `Signal` has only the standard ones).
fn sigset(sigs: impl IntoIterator<Item = i32>) -> SigSet {
    // SAFETY: sigemptyset/sigaddset write only into the local set, which
    // sigemptyset initialises before `from_sigset_t_unchecked` reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in sigs {
            libc::sigaddset(&mut set, sig);
        }
        SigSet::from_sigset_t_unchecked(set)
    }
}

/// Signals that end an acquisition or a wait for the lock at once (exit
/// 128+N), whatever the server is doing: those whose default action ends
/// a process and that a user sends to stop one.
pub const WAIT_ENDERS: &[i32] = &[
    SIGINT as i32,
    SIGTERM as i32,
    SIGHUP as i32,
    SIGQUIT as i32,
    SIGUSR1 as i32,
    SIGUSR2 as i32,
];

/// Job-control stop signals. Sent to `run` itself (not through the
/// terminal, which sends them to CMD's foreground group directly), they
/// stop CMD's whole group with SIGSTOP, which CMD cannot catch, and then
/// distlock; a waiter, with no CMD yet, just stops itself.
pub const STOPS: &[i32] = &[SIGTSTP as i32, SIGTTIN as i32, SIGTTOU as i32];

/// The blocked signals and the signalfd they are read from.
pub struct Signals {
    fd: SignalFd,
    /// A CLOCK_BOOTTIME timer for `wait`'s timeout: a poll timeout runs on
    /// CLOCK_MONOTONIC, which stands still while the machine is suspended,
    /// so after a resume distlock would act late while CMD already runs on
    /// an expired lease. An absolute boot-time timer fires at resume.
    timer: TimerFd,
    /// The mask distlock started with; CMD gets it back before exec.
    pub(super) caller_mask: SigSet,
}

impl Signals {
    /// Blocks every forwardable signal the caller did not ignore, plus
    /// SIGCHLD, and opens a close-on-exec, non-blocking signalfd for them.
    /// Must run before any thread is started: threads inherit the mask, and
    /// a process-directed signal goes to any thread that leaves it unblocked.
    pub fn install() -> Result<Signals> {
        // An inherited SIGCHLD=SIG_IGN makes the kernel reap children for
        // us and wait() fail with ECHILD (flock: "clear any inherited
        // settings").
        if is_ignored(SIGCHLD as i32) {
            // SAFETY: SIG_DFL installs no handler, so no code of ours can
            // run in signal context. A failure only keeps the inherited one.
            let _ = unsafe { signal(SIGCHLD, SigHandler::SigDfl) };
        }
        let forwarded = (1..32)
            .chain(libc::SIGRTMIN()..=libc::SIGRTMAX())
            .filter(|&sig| !NOT_FORWARDED.contains(&sig) && !caller_ignored(sig));
        // SIGCONT is always ours to see, even if the caller ignored it:
        // after stopping itself, distlock must notice it was continued.
        let mask = sigset(
            [SIGCHLD as i32, SIGCONT as i32]
                .into_iter()
                .chain(forwarded),
        );
        let caller_mask = mask
            .thread_swap_mask(SigmaskHow::SIG_BLOCK)
            .map_err(std::io::Error::from)
            .context("cannot block signals")?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .context("cannot create a signalfd")?;
        let timer = TimerFd::new(
            ClockId::CLOCK_BOOTTIME,
            TimerFlags::TFD_CLOEXEC | TimerFlags::TFD_NONBLOCK,
        )
        .map_err(std::io::Error::from)
        .context("cannot create a timerfd")?;
        Ok(Signals {
            fd,
            timer,
            caller_mask,
        })
    }

    /// Every signal that is pending now, in arrival order (per signal).
    ///
    /// A SIGPIPE that distlock raised itself (a write of the main thread to
    /// a closed pipe: the kernel marks it as sent by our own pid) is
    /// dropped: it says distlock's stdout or stderr went away, which is no
    /// news for CMD. The write itself fails with EPIPE, as when ignored.
    pub fn drain(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let me = std::process::id();
        while let Ok(Some(info)) = self.fd.read_signal() {
            let sig = info.ssi_signo as i32;
            if sig == SIGPIPE as i32 && info.ssi_pid == me {
                continue;
            }
            out.push(sig);
        }
        out
    }

    /// Sleeps until a signal arrives, `extra` becomes readable, or `timeout`
    /// passes (None: no limit). Returns the pending signals and whether
    /// `extra` is readable. `extra` must stay open for the call.
    pub fn wait(&self, timeout: Option<Duration>, extra: Option<RawFd>) -> (Vec<i32>, bool) {
        // Arm (or, with no timeout, disarm) the boot-time timer.
        let _ = match timeout {
            Some(t) => {
                let at = crate::clock::now() + t.max(Duration::from_nanos(1));
                self.timer.set(
                    Expiration::OneShot(TimeSpec::from_duration(at)),
                    TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                )
            }
            None => self.timer.unset(),
        };
        // SAFETY: the caller keeps `extra` open for the call (see above);
        // the borrow ends with it.
        let extra = extra.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
        let poll_in = |fd| PollFd::new(fd, PollFlags::POLLIN);
        // The third slot is polled only with an `extra`.
        let mut fds = [
            poll_in(self.fd.as_fd()),
            poll_in(self.timer.as_fd()),
            poll_in(extra.unwrap_or(self.fd.as_fd())),
        ];
        let used = if extra.is_some() { 3 } else { 2 };
        let ready = ppoll(&mut fds[..used], None, None);
        // Drain the timer's 8-byte expiry count (EAGAIN if it did not fire).
        let _ = nix::unistd::read(self.timer.as_fd(), &mut [0u8; 8]);
        if !matches!(ready, Ok(n) if n > 0) {
            return (Vec::new(), false);
        }
        let extra_ready = extra.is_some() && fds[2].revents() != Some(PollFlags::empty());
        (self.drain(), extra_ready)
    }
}

/// Stops distlock (and, when it is the foreground job that handed the
/// terminal to CMD, the rest of its own process group, as the terminal's
/// Ctrl-Z would have), so the shell sees the job stopped and prints its
/// prompt. Returns once distlock is continued. SIGSTOP cannot be blocked,
/// so this stops us even with every other signal blocked.
pub fn stop_self(whole_group: bool) {
    let _ = if whole_group {
        killpg(getpgrp(), SIGSTOP)
    } else {
        kill(getpid(), SIGSTOP)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sigset_holds_realtime_signals_too() {
        let rt = libc::SIGRTMIN() + 1;
        let set = sigset([SIGUSR1 as i32, rt]);
        // SAFETY: sigismember only reads the initialised set.
        let has = |sig| unsafe { libc::sigismember(set.as_ref(), sig) } == 1;
        assert!(has(SIGUSR1 as i32));
        assert!(has(rt));
        assert!(!has(SIGUSR2 as i32));
        assert!(set.contains(SIGUSR1));
    }
}
