//! CMD's process group once it runs: signalling it, reaping it and the
//! orphans it leaves, and telling when it is empty.
//!
//! Signal numbers here are plain `i32`s, and two calls stay raw libc,
//! because distlock forwards realtime signals (SIGRTMIN..SIGRTMAX) and
//! nix 0.32's `Signal` cannot name them: nix's `kill`/`killpg` could not
//! send one, and nix's `waitpid` reaps a child killed by one and then fails
//! to decode its status, losing it.

use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// Makes distlock a child subreaper: CMD's orphaned descendants are then
/// reparented to distlock, so their exits are seen and reaped here even
/// where PID 1 does not reap (some containers). A failure only loses the
/// reaping of orphans.
pub fn become_subreaper() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
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
        // SAFETY: waitpid writes only into the local status. Raw: a CMD
        // killed by a realtime signal is a status nix cannot decode.
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
    // SAFETY: killpg takes two integers and touches no memory of ours.
    // Raw: `sig` may be a realtime signal, which nix cannot send.
    unsafe {
        libc::killpg(pgid, sig);
    }
}

/// Sends `sig` to one process.
pub fn signal_process(pid: i32, sig: i32) {
    // SAFETY: kill takes two integers and touches no memory of ours. Raw:
    // `sig` may be a realtime signal, which nix cannot send.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Whether no process is left in the group (ESRCH from a null signal).
pub fn group_is_empty(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH)
}

/// Kills CMD's group and reaps CMD, for a CMD that must not run
/// (distlock cannot supervise it).
pub fn kill_and_reap(pgid: i32) {
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    let _ = waitpid(Pid::from_raw(pgid), None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    /// Why `reap` stays raw: a child killed by a realtime signal must come
    /// back with its status, not be reaped and lost. `reap` waits for any
    /// child, so the check runs alone in a child test process: in this one
    /// it could take another test's child (`cli::fast` and `guardian` start
    /// some) from under that test's own wait.
    #[test]
    fn a_child_killed_by_a_realtime_signal_is_reaped_with_its_status() {
        crate::process::test_support::run_alone(
            "process::reap::tests::reap_a_child_killed_by_a_realtime_signal_alone",
            |child| {
                child.env("DISTLOCK_REAP_TEST_CHILD", "1");
            },
        );
    }

    #[test]
    #[ignore = "a helper: run alone in a child process by the test above"]
    fn reap_a_child_killed_by_a_realtime_signal_alone() {
        if std::env::var_os("DISTLOCK_REAP_TEST_CHILD").is_none() {
            // `cargo test -- --ignored` in the harness's own process, where
            // it could take other tests' children: the parent test above
            // runs it alone, so here it does nothing.
            return;
        }
        // `reap` below is what waits for it.
        let pid = Command::new("sleep").arg("30").spawn().unwrap().id() as i32;
        let rt = libc::SIGRTMIN() + 3;
        signal_process(pid, rt);
        // SAFETY: waitid with WNOWAIT only fills the local siginfo; it
        // returns once the child is a zombie, which `reap` then collects.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            );
        }
        assert_eq!(
            reap(pid),
            Some(ChildState::Exited(ExitStatus::from_raw(rt)))
        );
    }
}
