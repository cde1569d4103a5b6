//! Unix process work for `run`: the signal mask, spawning CMD in its own
//! process group, handing it the terminal, the guardian, reaping and killing.
//!
//! The model (tini's, with dumb-init's job control):
//! - Before any thread exists, every signal distlock forwards is blocked and
//!   read from a signalfd, so "handlers" run in the main loop, never inside
//!   a signal handler, and threads started later never see them.
//! - CMD runs in a process group of its own. When distlock is the
//!   terminal's foreground job, CMD's group becomes the foreground group, so
//!   the terminal's Ctrl-C, Ctrl-Z and SIGWINCH reach CMD directly and only
//!   once; distlock forwards what is sent to distlock itself.
//! - CMD starts with the caller's signal mask; signals the caller ignored
//!   stay ignored (ignored dispositions survive exec) and are not forwarded.
//!   SIGPIPE included: Rust's runtime ignores it before `main`, so the
//!   caller's choice is read even earlier (see `CALLER_IGNORED_SIGPIPE`).
//! - distlock is a child subreaper, so whatever CMD leaves behind is
//!   reparented to it and can be reaped; "the group is empty" is then
//!   `killpg(pgid, 0)` failing with ESRCH.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::SigSet;
use nix::sys::signalfd::{SfdFlags, SignalFd};

mod spawn;

use spawn::{ChildSetup, Exec};

/// Signals distlock never blocks or forwards: the unblockable ones, the
/// synchronous faults (they concern distlock itself) and SIGCHLD (ours to
/// consume). SIGPIPE is forwarded like any other signal when the caller
/// did not ignore it, except the ones distlock's own writes raise (see
/// `Signals::drain`).
const NOT_FORWARDED: &[i32] = &[
    libc::SIGKILL,
    libc::SIGSTOP,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGABRT,
    libc::SIGCHLD,
];

/// Whether SIGPIPE was ignored when the process started, before Rust's
/// runtime set it to SIG_IGN (std does that in `lang_start`, before
/// `main`, and nothing on stable Rust turns it off). `timeout(1)` and tini
/// hand CMD the caller's SIGPIPE, so `(trap '' PIPE; distlock run …)` must
/// give CMD an ignored SIGPIPE, and a caller that left it alone must give
/// CMD the default. Written once, by `record_caller_sigpipe`.
static CALLER_IGNORED_SIGPIPE: AtomicBool = AtomicBool::new(false);

/// Runs from the executable's `.init_array`, which the dynamic loader (or,
/// static, `__libc_start_main`) calls before `main` and so before the
/// runtime touches SIGPIPE: the one stable-Rust hook early enough. std uses
/// the same section to record argv. The arguments are glibc's (argc, argv,
/// envp), unused.
extern "C" fn record_caller_sigpipe(
    _argc: libc::c_int,
    _argv: *const *const libc::c_char,
    _envp: *const *const libc::c_char,
) {
    // SAFETY: a query-only sigaction on a stack value; no allocation, no
    // Rust runtime needed.
    let ignored = unsafe { disposition(libc::SIGPIPE) == libc::SIG_IGN };
    CALLER_IGNORED_SIGPIPE.store(ignored, Ordering::Relaxed);
}

/// Puts `record_caller_sigpipe` in `.init_array`. `#[used]` keeps it
/// through the linker's garbage collection and LTO.
#[used]
#[link_section = ".init_array"]
static RECORD_CALLER_SIGPIPE: extern "C" fn(
    libc::c_int,
    *const *const libc::c_char,
    *const *const libc::c_char,
) = record_caller_sigpipe;

/// Whether the caller (whoever exec'd distlock) ignored `sig`: the current
/// disposition, except for SIGPIPE, which the runtime has changed since.
fn caller_ignored(sig: i32) -> bool {
    if sig == libc::SIGPIPE {
        return CALLER_IGNORED_SIGPIPE.load(Ordering::Relaxed);
    }
    // SAFETY: a query-only sigaction.
    unsafe { disposition(sig) == libc::SIG_IGN }
}

/// Signals that end a wait for the lock at once (exit 128+N).
pub const WAIT_ENDERS: &[i32] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Job-control stop signals. Sent to `run` itself (not through the
/// terminal, which sends them to CMD's foreground group directly), they
/// stop CMD's whole group with SIGSTOP, which CMD cannot catch, and then
/// distlock; a waiter, with no CMD yet, just stops itself.
pub const STOPS: &[i32] = &[libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

/// The blocked signals and the signalfd they are read from.
pub struct Signals {
    fd: SignalFd,
    /// A CLOCK_BOOTTIME timer for `wait`'s timeout: a poll timeout runs on
    /// CLOCK_MONOTONIC, which stands still while the machine is suspended,
    /// so after a resume distlock would act late while CMD already runs on
    /// an expired lease. An absolute boot-time timer fires at resume.
    timer: OwnedFd,
    /// The mask distlock started with; CMD gets it back before exec.
    caller_mask: libc::sigset_t,
}

impl Signals {
    /// Blocks every forwardable signal the caller did not ignore, plus
    /// SIGCHLD, and opens a close-on-exec, non-blocking signalfd for them.
    /// Must run before any thread is started: threads inherit the mask, and
    /// a process-directed signal goes to any thread that leaves it unblocked.
    pub fn install() -> Result<Signals> {
        // SAFETY: plain libc calls on stack values; no handler is installed.
        unsafe {
            // An inherited SIGCHLD=SIG_IGN makes the kernel reap children
            // for us and wait() fail with ECHILD (flock: "clear any
            // inherited settings").
            if disposition(libc::SIGCHLD) == libc::SIG_IGN {
                libc::signal(libc::SIGCHLD, libc::SIG_DFL);
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
            // Always ours to see, even if the caller ignored it: after
            // stopping itself, distlock must notice it was continued.
            libc::sigaddset(&mut set, libc::SIGCONT);
            for sig in (1..32).chain(libc::SIGRTMIN()..=libc::SIGRTMAX()) {
                if NOT_FORWARDED.contains(&sig) || caller_ignored(sig) {
                    continue;
                }
                libc::sigaddset(&mut set, sig);
            }
            let mut caller_mask: libc::sigset_t = std::mem::zeroed();
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut caller_mask) != 0 {
                return Err(io::Error::last_os_error()).context("cannot block signals");
            }
            let mask = SigSet::from_sigset_t_unchecked(set);
            let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
                .context("cannot create a signalfd")?;
            let timer =
                libc::timerfd_create(libc::CLOCK_BOOTTIME, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK);
            if timer < 0 {
                return Err(io::Error::last_os_error()).context("cannot create a timerfd");
            }
            Ok(Signals {
                fd,
                timer: OwnedFd::from_raw_fd(timer),
                caller_mask,
            })
        }
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
            if sig == libc::SIGPIPE && info.ssi_pid == me {
                continue;
            }
            out.push(sig);
        }
        out
    }

    /// Sleeps until a signal arrives, `extra` becomes readable, or `timeout`
    /// passes (None: no limit). Returns the pending signals and whether
    /// `extra` is readable.
    pub fn wait(&self, timeout: Option<Duration>, extra: Option<RawFd>) -> (Vec<i32>, bool) {
        let pollfd = |fd: RawFd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [
            pollfd(self.fd.as_raw_fd()),
            pollfd(extra.unwrap_or(-1)),
            pollfd(self.timer.as_raw_fd()),
        ];
        // Arm (or, with no timeout, disarm) the boot-time timer.
        let at = timeout.map(|t| {
            let at = crate::clock::now() + t.max(Duration::from_nanos(1));
            libc::timespec {
                tv_sec: at.as_secs() as libc::time_t,
                tv_nsec: at.subsec_nanos() as libc::c_long,
            }
        });
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let spec = libc::itimerspec {
            it_interval: zero,
            it_value: at.unwrap_or(zero),
        };
        // SAFETY: timerfd_settime on our fd with local values; ppoll on
        // local pollfds (a negative fd is ignored); the read drains the
        // timer's 8-byte expiry count.
        let n = unsafe {
            libc::timerfd_settime(
                self.timer.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            );
            let n = libc::ppoll(fds.as_mut_ptr(), 3, std::ptr::null(), std::ptr::null());
            let mut expirations = 0u64;
            libc::read(
                self.timer.as_raw_fd(),
                (&mut expirations as *mut u64).cast(),
                8,
            );
            n
        };
        if n <= 0 {
            return (Vec::new(), false);
        }
        let extra_ready = fds[1].revents != 0;
        (self.drain(), extra_ready)
    }
}

/// The current disposition of `sig` (SIG_DFL, SIG_IGN or a handler).
unsafe fn disposition(sig: i32) -> libc::sighandler_t {
    let mut old: libc::sigaction = std::mem::zeroed();
    if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
        return libc::SIG_DFL;
    }
    old.sa_sigaction
}

/// The controlling terminal, if distlock has one (cron jobs and CI do not).
pub struct Tty {
    fd: OwnedFd,
}

impl Tty {
    /// Opens `/dev/tty` rather than trusting stdin, so `cmd < file` from a
    /// terminal still gets job control right.
    pub fn open() -> Option<Tty> {
        // SAFETY: open(2) with a static path; the fd is owned below.
        let fd = unsafe {
            libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        // SAFETY: fd was just returned by open and is owned by nobody else.
        (fd >= 0).then(|| Tty {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Whether distlock's process group is the terminal's foreground group,
    /// i.e. whether the user's shell gave distlock the terminal.
    pub fn we_are_foreground(&self) -> bool {
        // SAFETY: plain syscalls on an fd we own.
        unsafe { libc::tcgetpgrp(self.fd.as_raw_fd()) == libc::getpgrp() }
    }

    /// Makes `pgid` the foreground group. SIGTTOU is blocked in distlock, so
    /// this works from the background too (tcsetpgrp(3)).
    pub fn give_to(&self, pgid: i32) {
        // SAFETY: plain syscall; failure (e.g. ENOTTY) only means no handoff.
        unsafe {
            libc::tcsetpgrp(self.fd.as_raw_fd(), pgid);
        }
    }

    /// Whether `pgid` is the terminal's foreground group now.
    pub fn is_foreground(&self, pgid: i32) -> bool {
        // SAFETY: plain syscall on an fd we own.
        unsafe { libc::tcgetpgrp(self.fd.as_raw_fd()) == pgid }
    }
}

/// How spawning CMD failed, mapped to timeout(1)'s statuses by the caller.
pub enum SpawnError {
    /// No such file (127).
    NotFound(io::Error),
    /// Found but not executable, or exec failed otherwise (126).
    CannotExecute(io::Error),
}

/// Starts CMD in a new process group, from the calling (main) thread,
/// with `clone(CLONE_VM | CLONE_VFORK)` (see `spawn.rs`: nothing of
/// distlock is copied, unlike std's fork for a `pre_exec`).
///
/// In the child, before exec, and only with async-signal-safe calls:
/// 1. `setpgid(0, 0)`: CMD's own process group.
/// 2. PR_SET_PDEATHSIG=SIGKILL, then check the parent is still the one that
///    cloned us (the signal is not retroactive). The "parent" is the
///    creating *thread*, which is why this must be called from the main
///    thread (`spawn::spawn` refuses any other).
/// 3. With `tty`, make CMD's group the terminal's foreground group while
///    SIGTTOU is still blocked (tini's isolate_child; doing it in the child
///    avoids racing the parent).
/// 4. Give CMD the caller's SIGPIPE: Rust's runtime ignores it in
///    distlock, which is right for CMD only if the caller had ignored it.
/// 5. Restore the caller's signal mask.
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, &str)],
    signals: &Signals,
    tty: Option<&Tty>,
) -> Result<i32, SpawnError> {
    let classify = |e: io::Error| {
        if e.kind() == io::ErrorKind::NotFound {
            SpawnError::NotFound(e)
        } else {
            SpawnError::CannotExecute(e)
        }
    };
    let mut exec = Exec::new(argv, &["DISTLOCK_REDIS_PASSWORD"], env).map_err(classify)?;
    let setup = ChildSetup {
        new_group: true,
        death_signal_parent: Some(std::process::id() as i32),
        tty: tty.map(|t| t.fd.as_raw_fd()),
        ignore_sigpipe: caller_ignored(libc::SIGPIPE),
        mask: signals.caller_mask,
    };
    spawn::spawn(&mut exec, &setup).map_err(classify)
}

/// Makes distlock a child subreaper: CMD's orphaned descendants are then
/// reparented to distlock, so their exits are seen and reaped here even
/// where PID 1 does not reap (some containers).
pub fn become_subreaper() {
    // SAFETY: plain prctl; failure only loses the reaping of orphans.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// What `reap` learnt about CMD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Ended, with this wait status.
    Exited(ExitStatus),
    /// Stopped by this signal (job control).
    Stopped(i32),
    /// Continued after a stop.
    Continued,
}

/// Reaps every child that changed state (SIGCHLD coalesces, so loop until
/// none is left) and returns CMD's latest state change, if any. Orphans
/// reparented to us are reaped and otherwise ignored.
pub fn reap(cmd: i32) -> Option<ChildState> {
    use std::os::unix::process::ExitStatusExt;
    let mut latest = None;
    loop {
        let mut status = 0;
        // SAFETY: plain waitpid on our own children.
        let pid = unsafe {
            libc::waitpid(
                -1,
                &mut status,
                libc::WNOHANG | libc::WUNTRACED | libc::WCONTINUED,
            )
        };
        if pid <= 0 {
            return latest;
        }
        if pid != cmd {
            continue;
        }
        latest = Some(if libc::WIFSTOPPED(status) {
            ChildState::Stopped(libc::WSTOPSIG(status))
        } else if libc::WIFCONTINUED(status) {
            ChildState::Continued
        } else {
            ChildState::Exited(ExitStatus::from_raw(status))
        });
    }
}

/// Sends `sig` to the process group `pgid`; a group that is already gone
/// is not an error.
pub fn signal_group(pgid: i32, sig: i32) {
    // SAFETY: plain syscall.
    unsafe {
        libc::killpg(pgid, sig);
    }
}

/// Sends `sig` to one process.
pub fn signal_process(pid: i32, sig: i32) {
    // SAFETY: plain syscall.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Whether no process is left in the group (ESRCH from a null signal).
pub fn group_is_empty(pgid: i32) -> bool {
    // SAFETY: plain syscall.
    let r = unsafe { libc::killpg(pgid, 0) };
    r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Stops distlock (and, when it is the foreground job that handed the
/// terminal to CMD, the rest of its own process group, as the terminal's
/// Ctrl-Z would have), so the shell sees the job stopped and prints its
/// prompt. Returns once distlock is continued.
pub fn stop_self(whole_group: bool) {
    // SAFETY: plain syscalls. SIGSTOP cannot be blocked, so this stops us
    // even with every other signal blocked.
    unsafe {
        if whole_group {
            libc::killpg(libc::getpgrp(), libc::SIGSTOP);
        } else {
            libc::kill(libc::getpid(), libc::SIGSTOP);
        }
    }
}

/// A small forked process that SIGKILLs CMD's process group if distlock
/// dies (even by SIGKILL), or if distlock cannot act when the lease may
/// end: PR_SET_PDEATHSIG reaches only CMD itself, not what CMD started, and
/// a distlock that is stopped (SIGSTOP, a debugger, or a job-control stop
/// after which someone continued CMD itself) kills nothing. The guardian
/// is in a process group of its own, so none of that stops it. (A frozen
/// cgroup freezes CMD and the guardian alike; CMD then does not run.)
///
/// It waits on a pipe whose write end only distlock holds, with a
/// deadline: the time (boot-time clock) by which no part of CMD may be
/// alive unless distlock says the lease was renewed. Messages are 8-byte
/// native-endian nanoseconds: a later deadline, or `u64::MAX` for "all done,
/// stand down". EOF means distlock is gone; the deadline passing means
/// distlock could not renew (or act) in time; both kill the group.
pub struct Guardian {
    pipe: OwnedFd,
}

/// The "stand down" message.
const STAND_DOWN: u64 = u64::MAX;

impl Guardian {
    /// Forks the guardian for `pgid`, with `deadline` on the boot-time clock
    /// (t0 + ttl - margin). Another thread may exist at this point (the
    /// subscriber of a wait winds down in the background), so the child
    /// runs only async-signal-safe system calls: no allocation, no locks.
    pub fn start(pgid: i32, deadline: Duration) -> Result<Guardian> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fds we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error()).context("cannot create the guardian pipe");
        }
        let (read_end, write_end) = (fds[0], fds[1]);
        // distlock never blocks on the guardian: a full pipe can only mean a
        // guardian that is not reading, and then a message is moot.
        // SAFETY: fcntl on an fd we own.
        unsafe { libc::fcntl(write_end, libc::F_SETFL, libc::O_NONBLOCK) };
        // SAFETY: the child calls only async-signal-safe functions (see
        // guardian_main), so other threads' locks cannot deadlock it.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()).context("cannot fork the guardian"),
            0 => unsafe { guardian_main(read_end, pgid, nanos(deadline)) },
            _ => {
                // SAFETY: read_end is ours to close; write_end to own.
                unsafe { libc::close(read_end) };
                Ok(Guardian {
                    pipe: unsafe { OwnedFd::from_raw_fd(write_end) },
                })
            }
        }
    }

    /// Moves the deadline later, after a confirmed renewal.
    pub fn extend(&self, deadline: Duration) {
        self.send(nanos(deadline).min(STAND_DOWN - 1));
    }

    fn send(&self, msg: u64) {
        // SAFETY: an 8-byte write (atomic on a pipe) from a local buffer.
        unsafe { libc::write(self.pipe.as_raw_fd(), msg.to_ne_bytes().as_ptr().cast(), 8) };
    }

    /// Tells the guardian to exit without killing anything. distlock does
    /// not wait for it: it is about to exit itself, and the guardian reads
    /// the message before it could see the pipe close.
    pub fn disarm(self) {
        self.send(STAND_DOWN);
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// The guardian's whole life. It keeps distlock's blocked signal mask, so
/// terminal and job signals cannot end it early; only SIGKILL can.
unsafe fn guardian_main(read_end: RawFd, pgid: i32, mut deadline: u64) -> ! {
    // Its own process group: a Ctrl-Z or `kill %1` aimed at distlock's job
    // must not stop or kill the guardian.
    libc::setpgid(0, 0);
    libc::prctl(libc::PR_SET_NAME, c"distlock-guard".as_ptr(), 0, 0, 0);
    // Hold nothing of distlock's open: not its stdout (a `$(distlock …)`
    // would wait for us), not the Redis socket, not the tty.
    let keep = libc::fcntl(read_end, libc::F_DUPFD_CLOEXEC, 100);
    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    for fd in 0..3 {
        libc::dup2(null, fd);
    }
    libc::dup2(keep, 3);
    libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
    let kill_all = || -> ! {
        libc::killpg(pgid, libc::SIGKILL);
        libc::_exit(0)
    };
    // The deadline is on the boot-time clock, and so is this timer: a poll
    // timeout (CLOCK_MONOTONIC) would not count a suspend and fire late.
    let timer = libc::timerfd_create(libc::CLOCK_BOOTTIME, libc::TFD_CLOEXEC);
    let pollfd = |fd: RawFd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // Messages first: after a stop (the guardian itself frozen), a
        // stand-down or a later deadline that distlock sent meanwhile wins
        // over a deadline that seems to have passed.
        loop {
            let mut p = [pollfd(3)];
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            if libc::ppoll(p.as_mut_ptr(), 1, &zero, std::ptr::null()) <= 0 {
                break;
            }
            let mut buf = [0u8; 8];
            match libc::read(3, buf.as_mut_ptr().cast(), 8) {
                8 => match u64::from_ne_bytes(buf) {
                    STAND_DOWN => libc::_exit(0),
                    later => deadline = deadline.max(later),
                },
                -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                // EOF: distlock is gone.
                _ => kill_all(),
            }
        }
        if nanos(crate::clock::now()) >= deadline {
            kill_all();
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (deadline / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
            },
        };
        libc::timerfd_settime(timer, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut());
        // Wakes on a message, the pipe closing, or the deadline; the checks
        // above decide.
        let mut pfds = [pollfd(3), pollfd(timer)];
        libc::ppoll(pfds.as_mut_ptr(), 2, std::ptr::null(), std::ptr::null());
    }
}
