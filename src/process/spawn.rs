//! Starting a process without copying distlock: `clone(CLONE_VM |
//! CLONE_VFORK)`, the technique of glibc's and musl's `posix_spawn`.
//!
//! Why not std's `Command`: with a `pre_exec` closure (which distlock needs
//! for PR_SET_PDEATHSIG, the caller's signal mask and the terminal
//! hand-off) std falls back to a full `fork`, which copies distlock's page
//! tables and then makes every page distlock writes afterwards fault and
//! be copied, for a child that only calls `execve`. Here the child borrows
//! distlock's memory and runs on a small stack of its own until `execve`
//! (or `_exit`), while the calling thread is suspended by the kernel
//! (CLONE_VFORK). Nothing is copied.
//!
//! The price is discipline in the child. It shares the parent's memory, so
//! it must not allocate, take a lock, panic, or run a signal handler:
//! - every string and pointer array (argv, envp, the PATH candidates, the
//!   `/bin/sh` fallback) is built before the clone ([`Exec::new`]);
//! - the parent blocks every signal around the clone, and the child resets
//!   every handled signal to SIG_DFL before it restores the mask it is
//!   meant to start CMD with, so no handler ever runs on shared memory;
//! - the child calls only async-signal-safe libc functions and writes
//!   nothing of the parent's but errno (the suspended thread's, which the
//!   parent reads nowhere after the clone) and one slot of the `/bin/sh`
//!   argv that is reserved for it;
//! - exec errors come back through a close-on-exec pipe, not through
//!   shared memory, so they are reported right also where CLONE_VM|
//!   CLONE_VFORK is emulated with a fork (valgrind, qemu-user).

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_void, CString, OsStr, OsString};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{getpid, gettid, pipe2, read, Pid};

use super::guardian::{ArmMessage, Arming};
use super::signals::{caller_ignored, Signals};
use super::tty::Tty;

/// How spawning CMD failed, mapped to timeout(1)'s statuses by the caller.
/// 126 and 127 blame CMD, so they are kept for what `execve` says about
/// CMD's file; distlock running out of descriptors, processes or memory is
/// not CMD's fault.
pub enum SpawnError {
    /// No such file (127).
    NotFound(io::Error),
    /// Found but not executable, or exec failed otherwise (126).
    CannotExecute(io::Error),
    /// distlock could not start a process at all: its pipe or the clone
    /// failed, the child's set-up before exec failed, or exec ran out of
    /// descriptors or memory (EMFILE, ENFILE, EAGAIN, ENOMEM): 125.
    Failed(io::Error),
}

/// Why `start` failed: before `execve` (distlock's own doing) or in it.
enum StartError {
    Setup(io::Error),
    Exec(io::Error),
}

/// Whether `errno` says the system ran out of something, not that CMD's
/// file is wrong.
fn out_of_resources(errno: Option<c_int>) -> bool {
    matches!(
        errno,
        Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM)
    )
}

/// Starts CMD in a new process group, from the calling (main) thread,
/// with `clone(CLONE_VM | CLONE_VFORK)` (see the module docs: nothing of
/// distlock is copied, unlike std's fork for a `pre_exec`).
///
/// In the child, before exec, and only with async-signal-safe calls:
/// 1. `setpgid(0, 0)`: CMD's own process group.
/// 2. PR_SET_PDEATHSIG=SIGKILL, then check the parent is still the one that
///    cloned us (the signal is not retroactive). The "parent" is the
///    creating *thread*, which is why this must be called from the main
///    thread (`start` refuses any other).
/// 3. With `tty`, make CMD's group the terminal's foreground group while
///    SIGTTOU is still blocked (tini's isolate_child; doing it in the child
///    avoids racing the parent).
/// 4. Give CMD the caller's SIGPIPE: distlock's start-up ignores it in
///    distlock, which is right for CMD only if the caller had ignored it.
/// 5. Restore the caller's signal mask.
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, &str)],
    signals: &Signals,
    tty: Option<&Tty>,
    arming: Option<Arming>,
) -> Result<i32, SpawnError> {
    let mut exec =
        Exec::new(argv, &["DISTLOCK_REDIS_PASSWORD"], env).map_err(SpawnError::CannotExecute)?;
    let setup = ChildSetup {
        new_group: true,
        death_signal_parent: Some(std::process::id() as i32),
        tty: tty.map(Tty::raw_fd),
        ignore_sigpipe: caller_ignored(Signal::SIGPIPE as i32),
        mask: *signals.caller_mask.as_ref(),
        lifeline: super::lifeline::read_end(),
        arming,
    };
    start(&mut exec, &setup).map_err(|e| match e {
        StartError::Setup(e) => SpawnError::Failed(e),
        StartError::Exec(e) if out_of_resources(e.raw_os_error()) => SpawnError::Failed(e),
        StartError::Exec(e) if e.kind() == io::ErrorKind::NotFound => SpawnError::NotFound(e),
        StartError::Exec(e) => SpawnError::CannotExecute(e),
    })
}

/// The program, its arguments and its environment, as the C arrays
/// `execve` takes, built before the clone because the child must not
/// allocate. The pointer arrays point into the `CString`s owned here (and,
/// for the inherited environment, into the process's own `environ`, which
/// nothing in distlock modifies).
pub struct Exec {
    /// The paths to try, in order: CMD itself when it contains a slash,
    /// else one per `PATH` entry, as `execvp(3)` would try them.
    _candidates: Vec<CString>,
    candidate_ptrs: Vec<*const c_char>,
    /// Whether `candidates` came from a PATH search (errors then follow
    /// execvp's rules: ENOENT-like ones move on, EACCES is remembered).
    searched: bool,
    _args: Vec<CString>,
    argv: Vec<*const c_char>,
    /// `["/bin/sh", <the candidate>, argv[1..], NULL]`: execvp runs a file
    /// that is executable but not a binary (ENOEXEC) with the shell; slot 1
    /// is filled in by the child.
    sh_argv: Vec<*const c_char>,
    _added_env: Vec<CString>,
    envp: Vec<*const c_char>,
}

/// The shell execvp falls back to for ENOEXEC (glibc's `_PATH_BSHELL`).
const BSHELL: &std::ffi::CStr = c"/bin/sh";

impl Exec {
    /// Prepares `argv` to run with the current environment, minus the
    /// variables named in `remove`, plus `add` (which replaces variables of
    /// the same name). `argv[0]` is looked up in `PATH` unless it contains
    /// a slash, as `execvp(3)` does (no `PATH`: `/bin:/usr/bin`, glibc's
    /// default).
    pub fn new(
        argv: &[impl AsRef<OsStr>],
        remove: &[&str],
        add: &[(&str, &str)],
    ) -> io::Result<Exec> {
        let invalid = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} contains a NUL byte"),
            )
        };
        let args = argv
            .iter()
            .map(|a| CString::new(a.as_ref().as_bytes()).map_err(|_| invalid("an argument")))
            .collect::<io::Result<Vec<_>>>()?;
        let name = args.first().map_or(&b""[..], |a| a.as_bytes());
        let searched = !name.is_empty() && !name.contains(&b'/');
        let candidates = if name.is_empty() {
            // execvp("") fails with ENOENT without trying anything.
            Vec::new()
        } else if !searched {
            vec![args[0].clone()]
        } else {
            let path = std::env::var_os("PATH");
            let path = path
                .as_deref()
                .map_or(&b"/bin:/usr/bin"[..], |p| p.as_bytes());
            path.split(|&b| b == b':')
                .map(|dir| {
                    // An empty entry is the current directory: the bare name.
                    let mut full = Vec::with_capacity(dir.len() + 1 + name.len());
                    if !dir.is_empty() {
                        full.extend_from_slice(dir);
                        full.push(b'/');
                    }
                    full.extend_from_slice(name);
                    CString::new(full).map_err(|_| invalid("PATH"))
                })
                .collect::<io::Result<Vec<_>>>()?
        };
        let candidate_ptrs = candidates.iter().map(|c| c.as_ptr()).collect();

        let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut sh_argv = vec![BSHELL.as_ptr(), std::ptr::null()];
        // argv[1..] with its terminating NULL.
        sh_argv.extend(argv.iter().skip(1));

        let added = add
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(|_| invalid("a variable")))
            .collect::<io::Result<Vec<_>>>()?;
        let mut envp = Vec::new();
        // SAFETY: `environ` is the process's environment, a NULL-terminated
        // array of NUL-terminated strings; nothing in distlock changes it
        // (no set_var/remove_var), so the pointers stay valid.
        unsafe {
            let mut p = environ;
            while !p.is_null() && !(*p).is_null() {
                let entry = std::ffi::CStr::from_ptr(*p).to_bytes();
                let name = entry.split(|&b| b == b'=').next().unwrap_or(entry);
                let dropped = remove.iter().any(|r| r.as_bytes() == name)
                    || add.iter().any(|(k, _)| k.as_bytes() == name);
                if !dropped {
                    envp.push(*p);
                }
                p = p.add(1);
            }
        }
        envp.extend(added.iter().map(|c| c.as_ptr()));
        envp.push(std::ptr::null());

        Ok(Exec {
            _candidates: candidates,
            candidate_ptrs,
            searched,
            _args: args,
            argv,
            sh_argv,
            _added_env: added,
            envp,
        })
    }
}

extern "C" {
    static environ: *const *const c_char;
}

/// What the child does before `execve`, besides what it always does
/// (reset handled signals to SIG_DFL, restore `mask`).
pub struct ChildSetup {
    /// `setpgid(0, 0)`: a process group of its own.
    pub new_group: bool,
    /// PR_SET_PDEATHSIG=SIGKILL, then check that the parent is still this
    /// pid (the signal is not retroactive); `None` for no death signal.
    pub death_signal_parent: Option<libc::pid_t>,
    /// Make the child's group the foreground group of this terminal.
    pub tty: Option<c_int>,
    /// SIGPIPE: ignored (the caller ignored it) or default. Rust's runtime
    /// ignores it in distlock, and ignored dispositions survive exec.
    pub ignore_sigpipe: bool,
    /// The signal mask the program starts with.
    pub mask: libc::sigset_t,
    /// The lifeline's read end, handed to the child ([`super::lifeline`]);
    /// -1 for none.
    pub lifeline: c_int,
    /// A standby guardian the child arms with its own group before exec.
    pub arming: Option<Arming>,
}

/// The child's stack. It only needs room for a few libc calls, and in
/// `.bss` it costs nothing until touched (the child touches its top page
/// or two): no mmap, no munmap, no probing of a big frame. One stack is
/// enough: `spawn` runs only on the main thread, and the main thread is
/// suspended while a child uses it.
const STACK_SIZE: usize = 16 * 1024;

#[repr(C, align(64))]
struct Stack(UnsafeCell<[u8; STACK_SIZE]>);

// SAFETY: used only by `spawn`, on the main thread, by one child at a time
// while that thread is suspended (CLONE_VFORK).
unsafe impl Sync for Stack {}

static STACK: Stack = Stack(UnsafeCell::new([0; STACK_SIZE]));

/// What the child reads: plain values and raw pointers only.
#[repr(C)]
struct ChildArgs {
    candidates: *const *const c_char,
    n_candidates: usize,
    searched: bool,
    argv: *const *const c_char,
    sh_argv: *mut *const c_char,
    envp: *const *const c_char,
    new_group: bool,
    parent: libc::pid_t,
    tty: c_int,
    ignore_sigpipe: bool,
    mask: libc::sigset_t,
    lifeline: c_int,
    /// The standby guardian's pipe (-1 for none) and the deadline to arm
    /// it with.
    arm_fd: c_int,
    arm_deadline: u64,
    /// The write end of the close-on-exec error pipe.
    err_fd: c_int,
}

/// Starts `exec` with `setup`, from the calling thread, which must be the
/// main thread (the death signal is tied to the creating thread, and the
/// child's stack is shared). Returns the child's pid once it has called
/// `execve` successfully; an `execve` failure (or a failure of the setup)
/// comes back as the child's errno, and the child is reaped.
fn start(exec: &mut Exec, setup: &ChildSetup) -> Result<libc::pid_t, StartError> {
    if gettid() != getpid() {
        return Err(StartError::Setup(io::Error::other(
            "spawn must run on the main thread",
        )));
    }
    let setup_err = |e: Errno| StartError::Setup(e.into());
    let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC).map_err(setup_err)?;
    let args = ChildArgs {
        candidates: exec.candidate_ptrs.as_ptr(),
        n_candidates: exec.candidate_ptrs.len(),
        searched: exec.searched,
        argv: exec.argv.as_ptr(),
        sh_argv: exec.sh_argv.as_mut_ptr(),
        envp: exec.envp.as_ptr(),
        new_group: setup.new_group,
        parent: setup.death_signal_parent.unwrap_or(0),
        tty: setup.tty.unwrap_or(-1),
        ignore_sigpipe: setup.ignore_sigpipe,
        mask: setup.mask,
        lifeline: setup.lifeline,
        arm_fd: setup.arming.map_or(-1, |a| a.fd),
        arm_deadline: setup.arming.map_or(0, |a| a.deadline),
        err_fd: write_end.as_raw_fd(),
    };
    // Every signal is blocked across the clone so that none is handled in
    // the child before it has reset the handlers; the parent's mask is
    // restored right after.
    let mut old = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )
    .map_err(setup_err)?;
    // SAFETY: the child runs `child_main` on STACK (16-byte aligned top)
    // with a pointer to `args`, which outlives it: the clone returns only
    // after the child has exec'd or exited. Raw: nix's `clone` takes a Rust
    // closure, which the child could not run without touching the parent's
    // allocator and unwinding machinery.
    let (pid, clone_err) = unsafe {
        let top = STACK.0.get().cast::<u8>().add(STACK_SIZE).cast::<c_void>();
        let arg = (&args as *const ChildArgs).cast_mut().cast();
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        let mut pid = libc::clone(child_main, top, flags, arg);
        let mut clone_err = io::Error::last_os_error();
        if pid < 0
            && matches!(
                clone_err.raw_os_error(),
                Some(libc::ENOSYS | libc::EPERM | libc::EINVAL)
            )
        {
            // A sandbox (seccomp) that refuses this clone: fork as std
            // would. The child code is the same; in a copy of our memory it
            // is all the safer.
            pid = libc::fork();
            if pid == 0 {
                child_main(arg);
                libc::_exit(127);
            }
            clone_err = io::Error::last_os_error();
        }
        (pid, clone_err)
    };
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    drop(write_end);
    if pid < 0 {
        return Err(StartError::Setup(clone_err));
    }
    // EOF (0): the exec succeeded and closed the pipe; 4 bytes: errno
    // (negated for a failure before exec, see `fail`).
    // With a real CLONE_VFORK the child is past exec by now, so this does
    // not block; where it is emulated by a fork, it waits for it.
    let mut errno_buf = [0u8; 4];
    let got = loop {
        match read(&read_end, &mut errno_buf) {
            Err(Errno::EINTR) => {}
            got => break got,
        }
    };
    if got == Ok(4) {
        // Reaps our own child, which has _exit'ed or is about to.
        let _ = waitpid(Pid::from_raw(pid), None);
        let code = i32::from_ne_bytes(errno_buf);
        return Err(if code < 0 {
            StartError::Setup(io::Error::from_raw_os_error(code.saturating_neg()))
        } else {
            StartError::Exec(io::Error::from_raw_os_error(code))
        });
    }
    Ok(pid)
}

/// The child, up to `execve`. Shares the parent's memory: only
/// async-signal-safe calls, no allocation, no panics (no indexing, no
/// arithmetic that could overflow), and it never returns into Rust code of
/// the parent: it ends in `execve` or `_exit`.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's ChildArgs, alive while the parent is
    // suspended; every call below is async-signal-safe.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        reset_handlers();
        if a.new_group && libc::setpgid(0, 0) != 0 {
            fail(a, -errno());
        }
        super::lifeline::hand_to_cmd(a.lifeline);
        if a.parent != 0 {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                fail(a, -errno());
            }
            if libc::getppid() != a.parent {
                fail(a, -libc::ESRCH);
            }
        }
        if a.tty >= 0 {
            // While every signal is blocked, so a background group may take
            // the terminal (tcsetpgrp(3)); failure only means no hand-off.
            libc::tcsetpgrp(a.tty, libc::getpid());
        }
        if a.arm_fd >= 0 {
            // Once CMD's group exists; one atomic write (16 bytes). A
            // set-up that fails after this is reported to distlock, which
            // then stands the guardian down. A guardian that died makes
            // this EPIPE and a SIGPIPE, pending while blocked: discarded by
            // ignoring it, before CMD's disposition is set below.
            let msg = ArmMessage {
                pgid: libc::getpid() as u64,
                deadline: a.arm_deadline,
            };
            let size = std::mem::size_of::<ArmMessage>();
            if libc::write(a.arm_fd, (&msg as *const ArmMessage).cast(), size) < 0 {
                libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            }
        }
        let pipe = if a.ignore_sigpipe {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        if libc::signal(libc::SIGPIPE, pipe) == libc::SIG_ERR {
            fail(a, -errno());
        }
        if libc::sigprocmask(libc::SIG_SETMASK, &a.mask, std::ptr::null_mut()) != 0 {
            fail(a, -errno());
        }
        let e = exec_all(a);
        fail(a, e)
    }
}

/// Tries the candidates as `execvp(3)` (glibc) does, and returns the errno
/// to report if none could be executed: in a PATH search, ENOENT-like
/// errors move on to the next entry and an EACCES is remembered (reported
/// if nothing else is found); any other error ends the search. A file that
/// is executable but not a binary (ENOEXEC) is run with `/bin/sh`.
///
/// # Safety
///
/// Only in the child, with `a` the parent's `ChildArgs` (its arrays valid
/// and NULL-terminated while the parent waits); on success it does not
/// return.
unsafe fn exec_all(a: &ChildArgs) -> c_int {
    let candidates = std::slice::from_raw_parts(a.candidates, a.n_candidates);
    let mut eacces = false;
    for &path in candidates {
        libc::execve(path, a.argv, a.envp);
        let mut e = errno();
        if e == libc::ENOEXEC {
            *a.sh_argv.add(1) = path;
            libc::execve(BSHELL.as_ptr(), a.sh_argv, a.envp);
            e = errno();
        }
        if !a.searched {
            return e;
        }
        match e {
            libc::EACCES => eacces = true,
            libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return e,
        }
    }
    if eacces {
        libc::EACCES
    } else {
        libc::ENOENT
    }
}

/// Sets every signal that has a handler back to SIG_DFL (ignored ones stay
/// ignored), as exec would: a handler must never run in a child that
/// shares the parent's memory (std's SIGSEGV/SIGBUS handlers, for one, use
/// the parent's alternate signal stack).
///
/// # Safety
///
/// Only in the child before exec, with every signal blocked. Without
/// CLONE_SIGHAND the child has its own copy of the dispositions, so the
/// parent's handlers are untouched.
unsafe fn reset_handlers() {
    for sig in 1..=libc::SIGRTMAX() {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            continue;
        }
        if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
    }
}

/// The calling thread's errno, without std's `io::Error` machinery.
fn errno() -> c_int {
    // SAFETY: `__errno_location` always returns a valid pointer to the
    // calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Reports `err` to the parent and ends the child with 127 (never seen as
/// CMD's status: the parent reaps it and reports the error instead): an
/// errno of `execve`'s, or a negated errno for a failure before it, which
/// is distlock's, not CMD's.
///
/// # Safety
///
/// Only in the child: it ends the calling process with `_exit`.
unsafe fn fail(a: &ChildArgs, err: c_int) -> ! {
    let buf = err.to_ne_bytes();
    libc::syscall(libc::SYS_write, a.err_fd, buf.as_ptr(), 4usize);
    libc::_exit(127)
}
