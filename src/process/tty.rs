//! The controlling terminal: whose process group is in the foreground, and
//! handing the terminal to CMD's group and back.

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use nix::fcntl::OFlag;
use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};

/// The controlling terminal, if distlock has one (cron jobs and CI do not).
pub struct Tty {
    fd: OwnedFd,
}

impl Tty {
    /// Opens `/dev/tty` rather than trusting stdin, so `cmd < file` from a
    /// terminal still gets job control right.
    pub fn open() -> Option<Tty> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(OFlag::O_NOCTTY.bits())
            .open("/dev/tty")
            .ok()
            .map(|f| Tty { fd: f.into() })
    }

    /// The terminal's fd, for CMD's child to take the terminal with before
    /// exec.
    pub(super) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether distlock's process group is the terminal's foreground group,
    /// i.e. whether the user's shell gave distlock the terminal.
    pub fn we_are_foreground(&self) -> bool {
        tcgetpgrp(&self.fd) == Ok(getpgrp())
    }

    /// Makes `pgid` the foreground group. SIGTTOU is blocked in distlock, so
    /// this works from the background too (tcsetpgrp(3)). A failure (e.g.
    /// ENOTTY) only means no handoff.
    pub fn give_to(&self, pgid: i32) {
        let _ = tcsetpgrp(&self.fd, Pid::from_raw(pgid));
    }

    /// Makes distlock's own process group the foreground group again.
    pub fn take_back(&self) {
        self.give_to(getpgrp().as_raw());
    }

    /// Whether `pgid` is the terminal's foreground group now.
    pub fn is_foreground(&self, pgid: i32) -> bool {
        tcgetpgrp(&self.fd) == Ok(Pid::from_raw(pgid))
    }
}
