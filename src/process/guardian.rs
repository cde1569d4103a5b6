//! The guardian: a forked process that kills CMD's group when distlock
//! cannot. Its parent side uses nix; the forked child keeps to raw,
//! async-signal-safe libc calls, since another thread may exist at the fork.

use std::ffi::{c_int, CStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{fork, pipe2, write, ForkResult, Pid};

use super::lifeline;

/// A small forked process that SIGKILLs CMD's process group if distlock
/// dies (even by SIGKILL), or if distlock cannot act when the lease may
/// end: PR_SET_PDEATHSIG reaches only CMD itself, not what CMD started, and
/// a distlock that is stopped (SIGSTOP, a debugger, or a job-control stop
/// after which someone continued CMD itself) kills nothing. The guardian
/// is in a process group of its own, so none of that stops it. (A frozen
/// cgroup freezes CMD and the guardian alike; CMD then does not run.)
///
/// Its name (comm) and command line are `dl-guard`, with no "distlock" in
/// them: `pkill -9 distlock` (or `pkill -9 -f distlock`) kills distlock
/// and leaves the guardian to kill CMD's group. If it dies alone anyway,
/// distlock sees its pipe lose its reader (`is_gone`) and starts another.
///
/// It waits on a pipe whose write end only distlock holds (and CMD's
/// process, until its exec, for the arm message), with a
/// deadline: the time (boot-time clock) by which no part of CMD may be
/// alive unless distlock says the lease was renewed. Messages are 8-byte
/// native-endian nanoseconds: a later deadline, or one of the commands
/// above [`LATEST`]. EOF means distlock is gone; the deadline passing means
/// distlock could not renew (or act) in time; both kill the group.
///
/// At the deadline it also continues distlock (SIGCONT), unless distlock
/// stopped itself for job control: a distlock that someone else stopped
/// (`kill -STOP $PPID` from CMD) would otherwise never end, and its caller
/// would wait for ever on a job whose CMD is dead. Continued, it finds the
/// deadline passed, exits 124 and releases what is left of the lease. A
/// job the user suspended (Ctrl-Z) stays suspended: `fg` then ends it.
pub struct Guardian {
    pipe: OwnedFd,
    pid: Pid,
    /// A pidfd of the guardian, opened while it is certainly our unreaped
    /// child, so that `wait_gone` can wait for and reap exactly it (no pid
    /// reuse). None before Linux 5.3; before 5.4 `waitid` refuses it, and
    /// the exited guardian is left to whoever inherits it, as without one.
    pidfd: Option<OwnedFd>,
}

/// The "stand down" message.
const STAND_DOWN: u64 = u64::MAX;
/// distlock is about to stop itself for job control: at the deadline,
/// leave it stopped.
const STOPPING: u64 = u64::MAX - 1;
/// distlock was continued after stopping itself.
const RESUMED: u64 = u64::MAX - 2;
/// The latest deadline a message can carry; larger values are commands.
const LATEST: u64 = u64::MAX - 3;

/// The guardian's name and command line: what `ps` shows, and nothing
/// that `pkill distlock` (name) or `pkill -f distlock` (command line)
/// would match. Kept short: a comm holds 15 bytes.
pub const NAME: &CStr = c"dl-guard";

/// Where this process's command line lies in memory, as `(address,
/// length)`: `arg_start` and `arg_end` of /proc/self/stat (fields 48 and
/// 49, Linux 3.5+), the block the kernel reads /proc/PID/cmdline from,
/// which `pkill -f` matches. None where /proc does not tell (not mounted,
/// or zeros).
///
/// Read by the guardian itself after the fork (its copy of distlock's
/// memory has the block at the same address), so that distlock's own path
/// pays nothing for it; hence raw calls and a stack buffer, no allocation.
/// Not from argv: Rust hands a program no pointer to it, and catching one
/// in an `.init_array` function ties distlock to glibc's calling
/// convention for those (tests/it/architecture.rs forbids them).
///
/// # Safety
///
/// Async-signal-safe: may run in the forked guardian.
unsafe fn command_line_block() -> Option<(usize, usize)> {
    let fd = libc::open(
        c"/proc/self/stat".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return None;
    }
    // 52 numbers of at most 20 digits and a 15-byte name fit with room.
    let mut buf = [0u8; 2048];
    let mut len = 0;
    while len < buf.len() {
        let n = libc::read(fd, buf.as_mut_ptr().add(len).cast(), buf.len() - len);
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    libc::close(fd);
    arg_block(&buf[..len])
}

/// `arg_start` and `arg_end - arg_start` from the text of a
/// /proc/PID/stat. Allocates nothing.
fn arg_block(stat: &[u8]) -> Option<(usize, usize)> {
    // After the name's closing parenthesis (the name may hold one), field
    // 3 comes first.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat[close + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .skip(48 - 3);
    let number = |digits: &[u8]| {
        digits.iter().try_fold(0usize, |n, &d| {
            d.is_ascii_digit()
                .then(|| n.checked_mul(10)?.checked_add(usize::from(d - b'0')))?
        })
    };
    let start = number(fields.next()?)?;
    let end = number(fields.next()?)?;
    (start != 0 && end > start).then_some((start, end - start))
}

/// How long `wait_gone` waits for the guardian to be gone; it takes
/// microseconds unless it is stopped.
const STAND_DOWN_WAIT_MS: u16 = 100;

impl Guardian {
    /// Forks the guardian for `pgid`, with `deadline` on the boot-time clock
    /// (t0 + ttl - margin). Another thread may exist at this point (the
    /// subscriber of a wait winds down in the background), so the child
    /// runs only async-signal-safe system calls: no allocation, no locks.
    pub fn start(pgid: i32, deadline: Duration) -> Result<Guardian> {
        let deadline = told(deadline);
        let parent = std::process::id() as libc::pid_t;
        let lifeline = lifeline::write_end();
        let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC)
            .map_err(io::Error::from)
            .context("cannot create the guardian pipe")?;
        // distlock never blocks on the guardian: a full pipe can only mean a
        // guardian that is not reading, and then a message is moot.
        let _ = fcntl(&write_end, FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
        // SAFETY: the child runs only `guardian_main`, which calls only
        // async-signal-safe functions, so other threads' locks cannot
        // deadlock it; it never returns, so nothing of ours is dropped twice.
        let forked = unsafe { fork() }.map_err(io::Error::from);
        match forked.context("cannot fork the guardian")? {
            // SAFETY: this is the forked child, `read_end` the pipe's read
            // end and `parent` distlock's pid (guardian_main's contract).
            ForkResult::Child => unsafe {
                let watch = Watch {
                    pgid,
                    deadline: nanos(deadline),
                    parent,
                    lifeline,
                };
                guardian_main(read_end.as_raw_fd(), watch)
            },
            ForkResult::Parent { child } => {
                drop(read_end);
                Ok(Guardian {
                    pipe: write_end,
                    pid: child,
                    pidfd: pidfd_open(child),
                })
            }
        }
    }

    /// Forks a guardian with nothing to guard yet, before CMD starts:
    /// CMD's own process arms it ([`Standby::arming`]). `run --wait` forks
    /// it before it waits, so that the fork costs nothing at the hand-off,
    /// where it would compete for the CPU with CMD's own start (and the
    /// next holder's, and the server's). Until armed it only waits for
    /// that message, and exits when distlock is gone or tells it to stand
    /// down.
    pub fn standby() -> Result<Standby> {
        Guardian::start(0, Duration::MAX).map(|g| Standby(Some(g)))
    }

    /// Moves the deadline later, after a confirmed renewal.
    pub fn extend(&self, deadline: Duration) {
        // A full pipe means a guardian that is not reading (stopped): it
        // then acts on an earlier deadline, which only errs early.
        let _ = self.send(nanos(told(deadline)).min(LATEST));
    }

    /// Stops distlock for job control ([`super::stop_self`]), telling the
    /// guardian first: a stop distlock chose is the user's to end (`fg`),
    /// so the guardian leaves it in place at the deadline. Returns once
    /// distlock is continued. A message that cannot be queued (a guardian
    /// stopped with a full pipe) only means the guardian may continue a
    /// suspended distlock after the deadline, which then ends with 124.
    pub fn stop_self(&self, whole_group: bool) {
        let _ = self.send(STOPPING);
        super::stop_self(whole_group);
        let _ = self.send(RESUMED);
    }

    /// Whether the guardian has died: its pipe's only read end, which it
    /// holds until it exits, is closed (POLLERR on our write end). Reaped
    /// or not, and with no pid involved.
    pub fn is_gone(&self) -> bool {
        let mut fds = [PollFd::new(self.pipe.as_fd(), PollFlags::empty())];
        poll(&mut fds, PollTimeout::ZERO) == Ok(1)
            && fds[0]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLERR))
    }

    /// One 8-byte write, atomic on a pipe.
    fn send(&self, msg: u64) -> nix::Result<usize> {
        write(&self.pipe, &msg.to_ne_bytes())
    }

    /// Tells the guardian to exit without killing anything. Only once
    /// CMD's group is empty: then there is nothing left to guard, and the
    /// sooner it goes the better (its group id could be reused by an
    /// unrelated process group later). `run` calls this before its release
    /// round trip, so the guardian's exit overlaps it.
    ///
    /// If the message cannot be queued (someone stopped the guardian for
    /// thousands of renewals and its pipe is full), the guardian is killed
    /// instead: continued later, it would read only old deadlines, then
    /// EOF, and kill a group id that might by then be someone else's. A
    /// full pipe (EAGAIN, not EPIPE) means it is alive, so not yet reaped,
    /// and its pid is still its own.
    pub fn stand_down(&self) {
        if self.send(STAND_DOWN) == Err(Errno::EAGAIN) {
            let _ = kill(self.pid, Signal::SIGKILL);
        }
    }

    /// Waits (briefly) until a guardian that was told to stand down has
    /// exited, and reaps it: a wrapper that has returned must leave no
    /// process of its own behind, not even a zombie for its caller (or a
    /// subreaper above it) to reap, as flock(1) or timeout(1) leave none;
    /// and its CPU time then counts in the caller's `RUSAGE_CHILDREN`
    /// (`time distlock run …`), as CMD's does.
    ///
    /// The pidfd turns readable when the guardian has exited, and waiting
    /// on it reaps that process and no other: `reap` may have reaped it
    /// already (then ECHILD), and its pid may since belong to an orphan of
    /// CMD's, which a `waitpid` by pid would wait for. Without a pidfd,
    /// the guardian's end of the pipe, the only read end (close-on-exec,
    /// and distlock dropped its copy at the fork), tells the same a moment
    /// earlier (POLLERR), and the exited guardian is left to whoever
    /// inherits it. The wait is bounded: a guardian someone stopped must
    /// not hold distlock's exit, and it stands down by itself once
    /// continued.
    pub fn wait_gone(self) {
        let timeout = PollTimeout::from(STAND_DOWN_WAIT_MS);
        let Some(pidfd) = &self.pidfd else {
            let mut fds = [PollFd::new(self.pipe.as_fd(), PollFlags::empty())];
            let _ = poll(&mut fds, timeout);
            return;
        };
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, timeout) == Ok(1) {
            // SAFETY: plain syscall; siginfo is plain data, written only
            // by the kernel. WNOHANG: it has exited, but a tracer (strace
            // -f, gdb) sees its exit first, and until it does, a blocking
            // wait would wait on the tracer.
            unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::waitid(
                    libc::P_PIDFD,
                    pidfd.as_raw_fd() as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG,
                );
            }
        }
    }
}

/// A guardian forked ahead of CMD ([`Guardian::standby`]). Dropped
/// unarmed (the wait ended without the lock), it stands down and is
/// reaped, like a guardian whose CMD ended.
pub struct Standby(Option<Guardian>);

/// What CMD's own process sends a standby guardian before it execs
/// ([`Standby::arming`]): the pipe, and the deadline to send with its pid.
#[derive(Clone, Copy)]
pub struct Arming {
    pub(super) fd: RawFd,
    pub(super) deadline: u64,
}

/// The arm message as CMD's process writes it, in one `write`: its pid
/// (CMD's group), then the deadline, native-endian, as the guardian reads
/// them.
#[repr(C)]
pub(super) struct ArmMessage {
    pub(super) pgid: u64,
    pub(super) deadline: u64,
}

impl Standby {
    /// For [`super::spawn`]: CMD's process arms the guardian itself, after
    /// its `setpgid` and before its `execve`, so that CMD is guarded
    /// before it runs an instruction of its own. Armed by distlock after
    /// the spawn instead, a CMD that stops distlock at once (`kill -STOP
    /// $PPID`, before distlock reaches the next line) would run unguarded,
    /// past its lease, for ever.
    pub fn arming(&self, deadline: Duration) -> Option<Arming> {
        let guardian = self.0.as_ref()?;
        Some(Arming {
            fd: guardian.pipe.as_raw_fd(),
            deadline: nanos(told(deadline)).min(LATEST),
        })
    }

    /// The guardian CMD's process armed ([`Standby::arming`]); if it died
    /// meanwhile (then the message found no reader), a new one.
    pub fn armed(mut self, pgid: i32, deadline: Duration) -> Result<Guardian> {
        let guardian = self.0.take().expect("armed once");
        if !guardian.is_gone() {
            return Ok(guardian);
        }
        guardian.wait_gone();
        Guardian::start(pgid, deadline)
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        if let Some(guardian) = self.0.take() {
            guardian.stand_down();
            guardian.wait_gone();
        }
    }
}

/// A pidfd for our child `pid` (close-on-exec), or None where the kernel
/// has no pidfd_open (before 5.3) or a sandbox refuses it.
fn pidfd_open(pid: Pid) -> Option<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscall; a descriptor it returns is new, and owned by
    // nothing else.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0);
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd as RawFd))
    }
}

/// The deadline the guardian is told: never, in the lab's broken
/// distlock ([`super::no_kill`]). Read before a fork, never in the child.
fn told(deadline: Duration) -> Duration {
    if super::no_kill() {
        Duration::MAX
    } else {
        deadline
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// What a guardian watches: CMD's group (0 for a standby, until armed),
/// the deadline in boot-time nanoseconds, and distlock's pid; and the
/// lifeline's write end it keeps (-1 for none).
struct Watch {
    pgid: i32,
    deadline: u64,
    parent: libc::pid_t,
    lifeline: RawFd,
}

/// The guardian's whole life. It keeps distlock's blocked signal mask, so
/// terminal and job signals cannot end it early; only SIGKILL can.
///
/// # Safety
///
/// Only in the child of `fork`, with `read_end` the guardian pipe's read
/// end and `watch.parent` the pid of the process that forked us.
/// Everything here is a
/// raw, async-signal-safe libc call on fds and stack values (and
/// `clock::now`, one clock_gettime; and plain stores to this process's
/// copy of the command line): another thread of distlock may have held a
/// lock (the allocator's, say) at the fork, so the child must allocate
/// nothing and take no lock, which nix's wrappers do not promise.
unsafe fn guardian_main(read_end: RawFd, watch: Watch) -> ! {
    let Watch {
        mut pgid,
        mut deadline,
        parent,
        lifeline,
    } = watch;
    // Its own process group: a Ctrl-Z or `kill %1` aimed at distlock's job
    // must not stop or kill the guardian.
    libc::setpgid(0, 0);
    libc::prctl(libc::PR_SET_NAME, NAME.as_ptr(), 0, 0, 0);
    // Our copy of distlock's command line becomes NAME, NUL-padded.
    if let Some((start, len)) = command_line_block() {
        let args = start as *mut u8;
        std::ptr::write_bytes(args, 0, len);
        let name = NAME.to_bytes();
        std::ptr::copy_nonoverlapping(name.as_ptr(), args, name.len().min(len - 1));
    }
    // Hold nothing of distlock's open: not its stdout (a `$(distlock …)`
    // would wait for us), not the Redis socket, not the tty. Only our pipe
    // (3) and the lifeline (4), moved out of the way first.
    let keep = libc::fcntl(read_end, libc::F_DUPFD_CLOEXEC, 100);
    let line = if lifeline >= 0 {
        libc::fcntl(lifeline, libc::F_DUPFD_CLOEXEC, 100)
    } else {
        -1
    };
    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    for fd in 0..3 {
        libc::dup2(null, fd);
    }
    libc::dup2(keep, 3);
    let first_closed: u32 = if line >= 0 && libc::dup2(line, 4) == 4 {
        5
    } else {
        4
    };
    libc::syscall(libc::SYS_close_range, first_closed, u32::MAX, 0u32);
    // distlock, to continue at the deadline: a pidfd, which cannot reach
    // another process that later gets its pid; without one (before Linux
    // 5.3) its pid, checked against our parent when used. None if distlock
    // is gone already (then EOF follows).
    let distlock = if libc::getppid() == parent {
        libc::syscall(libc::SYS_pidfd_open, parent, 0) as c_int
    } else {
        -2
    };
    // A standby (pgid 0) has nothing to guard until distlock sends CMD's
    // group and the deadline in one write; EOF or a stand-down before that
    // leaves nothing to kill.
    while pgid == 0 {
        let mut buf = [0u8; 16];
        match libc::read(3, buf.as_mut_ptr().cast(), 16) {
            16 => {
                let (mut group, mut at) = ([0u8; 8], [0u8; 8]);
                group.copy_from_slice(&buf[..8]);
                at.copy_from_slice(&buf[8..]);
                pgid = u64::from_ne_bytes(group) as i32;
                deadline = u64::from_ne_bytes(at);
            }
            -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => libc::_exit(0),
        }
    }
    // distlock stopped itself (job control) and was not continued since.
    let mut self_stopped = false;
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
                    STOPPING => self_stopped = true,
                    RESUMED => self_stopped = false,
                    later => deadline = deadline.max(later),
                },
                -1 if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                // EOF: distlock is gone.
                _ => {
                    libc::killpg(pgid, libc::SIGKILL);
                    libc::_exit(0)
                }
            }
        }
        if nanos(crate::clock::now()) >= deadline {
            libc::killpg(pgid, libc::SIGKILL);
            if !self_stopped {
                continue_distlock(distlock, parent);
            }
            libc::_exit(0)
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

/// Sends SIGCONT to distlock: through `pidfd` if there is one (>= 0), or
/// else by `pid` while it is still our parent (once distlock has exited we
/// are someone else's child, and its pid may be reused). A distlock that
/// is running ignores it: it is past its deadline too.
///
/// # Safety
///
/// Only in the guardian (async-signal-safe calls only).
unsafe fn continue_distlock(pidfd: c_int, pid: libc::pid_t) {
    if pidfd >= 0 {
        let sent = libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            libc::SIGCONT,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        );
        if sent == 0 {
            return;
        }
    }
    if pidfd != -2 && libc::getppid() == pid {
        libc::kill(pid, libc::SIGCONT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// Gone means exited: a zombie, or already reaped.
    fn gone(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => {
                let state = stat.rsplit(')').next().unwrap_or("").trim_start();
                state.starts_with('Z') || state.starts_with('X')
            }
            Err(_) => true,
        }
    }

    #[test]
    fn a_stopped_guardian_with_a_full_pipe_is_killed_not_left_to_fire_later() {
        let mut cmd = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = cmd.id() as i32;
        let guardian =
            Guardian::start(pgid, crate::clock::now() + Duration::from_secs(60)).unwrap();
        let pid = guardian.pid;
        kill(pid, Signal::SIGSTOP).unwrap();
        // Renewals while it is stopped, until its pipe is full.
        let mut sent = 0;
        while guardian.send(1) != Err(Errno::EAGAIN) {
            sent += 1;
            assert!(sent < 1 << 20, "the pipe never filled");
        }
        guardian.stand_down();
        guardian.wait_gone();
        // Its pipe closes as it exits, a moment before /proc shows it a
        // zombie (and another test's fork may hold the pipe a moment):
        // give the exit a bounded moment. Unfixed, it stays stopped.
        let limit = std::time::Instant::now() + Duration::from_secs(5);
        while !gone(pid.as_raw()) && std::time::Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(gone(pid.as_raw()), "the stopped guardian must be killed");
        assert!(!gone(pgid), "and CMD's group left alone");
        let _ = cmd.kill();
        let _ = cmd.wait();
    }

    /// Waits (bounded) for `cond`, which other tests' forks can delay: a
    /// child of theirs holds a copy of our pipe until it execs.
    fn soon(mut cond: impl FnMut() -> bool) -> bool {
        let limit = std::time::Instant::now() + Duration::from_secs(5);
        while !cond() {
            if std::time::Instant::now() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    #[test]
    fn the_command_line_block_is_the_memory_proc_shows_as_the_command_line() {
        // SAFETY: only raw reads of /proc into a local buffer.
        let (start, len) = unsafe { command_line_block() }.expect("/proc/self/stat has arg_start");
        // SAFETY: the kernel's arg_start..arg_end of this process: its
        // argv strings, mapped and never freed.
        let memory = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
        assert_eq!(memory, std::fs::read("/proc/self/cmdline").unwrap());
    }

    #[test]
    fn the_arg_block_is_read_after_the_last_parenthesis_of_the_name() {
        let mut stat = b"42 (a) b) S".to_vec();
        for field in 4..=52u32 {
            stat.extend_from_slice(format!(" {}", field * 1000).as_bytes());
        }
        stat.push(b'\n');
        assert_eq!(arg_block(&stat), Some((48_000, 1_000)));
        assert_eq!(arg_block(b"42 (x) S 1 2"), None);
    }

    #[test]
    fn the_guardian_is_named_without_distlock_and_its_death_is_seen() {
        let has = |text: &[u8]| text.windows(8).any(|w| w == b"distlock");
        // This test binary is `distlock-<hash>`: the guardian starts with
        // "distlock" in its command line and must lose it.
        assert!(has(&std::fs::read("/proc/self/cmdline").unwrap()));
        let mut cmd = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let guardian = Guardian::start(
            cmd.id() as i32,
            crate::clock::now() + Duration::from_secs(60),
        )
        .unwrap();
        let pid = guardian.pid.as_raw();
        let comm = || std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert!(soon(|| comm() == b"dl-guard\n"), "{:?}", comm());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(cmdline.starts_with(b"dl-guard\0"), "{cmdline:?}");
        assert!(!has(&cmdline), "{cmdline:?}");
        assert!(!guardian.is_gone());

        kill(guardian.pid, Signal::SIGKILL).unwrap();
        assert!(soon(|| guardian.is_gone()), "its death went unseen");
        guardian.wait_gone();
        assert!(gone(pid));
        let _ = cmd.kill();
        let _ = cmd.wait();
    }
}
