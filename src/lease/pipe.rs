//! Wake-up pipes: a thread with news writes a byte, so the thread it tells
//! sleeps in one poll on signals and news.

use std::os::fd::OwnedFd;

/// A pipe whose read end is non-blocking; both ends close-on-exec so CMD
/// never inherits them.
pub(super) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    Ok(nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?)
}

/// Writes one byte to a wake-up pipe; a full pipe already means "wake up".
pub(super) fn poke(fd: &OwnedFd) {
    let _ = nix::unistd::write(fd, b"!");
}

/// Empties a non-blocking wake-up pipe.
pub(super) fn drain_pipe(fd: &OwnedFd) {
    let mut buf = [0u8; 64];
    while nix::unistd::read(fd, &mut buf).is_ok_and(|n| n > 0) {}
}
