//! The lifeline: the kernel itself SIGKILLs CMD's process group once
//! distlock and every guardian of it are gone, also when they die
//! together (`kill -9 <distlock> <guardian>`) and neither is left to do it.
//!
//! It is a pipe that nothing is ever written to. distlock and each guardian
//! hold its write end (close-on-exec, so never CMD). CMD inherits its read
//! end, moved to descriptor 100 or above, set up before exec with
//! `F_SETOWN` to CMD's process group, `F_SETSIG` SIGKILL and `O_ASYNC`.
//! When the last write end closes while a read end is open, the kernel
//! signals the read end's owner (fs/pipe.c `pipe_release`, `kill_fasync`):
//! SIGKILL to every process in CMD's group. While distlock or a guardian
//! lives the pipe has a writer and nothing happens; after a normal end
//! CMD's group is empty, and the owner is the group itself (its `struct
//! pid`), not its number, so a later group that reuses the id is not hit.
//!
//! Best effort, on top of the guardian and CMD's death signal: it needs
//! some process (in CMD's group or one that left it) still to hold the
//! inherited descriptor, so a CMD that closes descriptors it did not open
//! (`closefrom`) gives it up; and like `killpg` it reaches only processes
//! still in CMD's group.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use nix::fcntl::OFlag;
use nix::unistd::pipe2;

/// The lowest descriptor CMD's copy of the read end may take: out of the
/// way of the small numbers scripts use (`exec 3>log`).
pub(super) const CMD_FD_MIN: libc::c_int = 100;

/// fcntl's "signal to raise" command: 10 on every Linux architecture
/// (asm-generic/fcntl.h); the libc crate has it for musl only.
const F_SETSIG: libc::c_int = 10;

/// The pipe's `(read, write)` ends, made on first use: before the first
/// guardian is forked (it must inherit the write end) and before CMD is
/// started. One per process, as distlock runs at most one CMD. None if
/// the pipe could not be made (out of descriptors): then only the guardian
/// and the death signal guard CMD.
fn ends() -> Option<&'static (OwnedFd, OwnedFd)> {
    static ENDS: OnceLock<Option<(OwnedFd, OwnedFd)>> = OnceLock::new();
    ENDS.get_or_init(|| pipe2(OFlag::O_CLOEXEC).ok()).as_ref()
}

/// The read end, for CMD to inherit; -1 if there is none.
pub(super) fn read_end() -> RawFd {
    ends().map_or(-1, |(read, _)| read.as_raw_fd())
}

/// The write end, for a guardian to keep; -1 if there is none.
pub(super) fn write_end() -> RawFd {
    ends().map_or(-1, |(_, write)| write.as_raw_fd())
}

/// Makes CMD's copy of the read end: a descriptor at [`CMD_FD_MIN`] or
/// above that survives exec, owned by the caller's process group, raising
/// SIGKILL. Failures leave CMD without the lifeline, nothing worse.
///
/// # Safety
///
/// Only in the child between clone and exec, after its `setpgid`:
/// async-signal-safe calls only.
pub(super) unsafe fn hand_to_cmd(read_end: RawFd) {
    if read_end < 0 {
        return;
    }
    // F_DUPFD's copy is not close-on-exec.
    let fd = libc::fcntl(read_end, libc::F_DUPFD, CMD_FD_MIN);
    if fd < 0 {
        return;
    }
    let flags = libc::fcntl(fd, libc::F_GETFL);
    if flags < 0
        || libc::fcntl(fd, libc::F_SETOWN, -libc::getpgrp()) != 0
        || libc::fcntl(fd, F_SETSIG, libc::SIGKILL) != 0
        || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) != 0
    {
        libc::close(fd);
    }
}
