//! Unix process work for `run`: the signal mask, spawning CMD in its own
//! process group, handing it the terminal, the guardian, reaping and killing.
//! It knows nothing of Redis or leases; `commands` drives it.
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
//!   SIGPIPE included: distlock ignores it for itself at start-up, so the
//!   caller's choice is read first (see `signals`).
//! - distlock is a child subreaper, so whatever CMD leaves behind is
//!   reparented to it and can be reaped; "the group is empty" is then
//!   `killpg(pgid, 0)` failing with ESRCH.
//!
//! One module a job: `signals` (the mask, the signalfd and timer, stopping
//! ourselves), `tty` (the foreground group), `spawn` (CMD's start, up to
//! exec), `reap` (CMD's group afterwards), `guardian` and `lifeline` (the
//! kernel's SIGKILL of CMD's group once distlock and the guardian are both
//! gone). Parent-side code
//! uses nix; raw libc is left where nix 0.32 has no equivalent (realtime
//! signals, a query-only sigaction, a clone without a closure), in the
//! child between clone and exec, and in the forked guardian, where only
//! async-signal-safe calls may run. Each such `unsafe` block says why.

mod guardian;
mod lifeline;
mod reap;
mod signals;
mod spawn;
#[cfg(test)]
mod test_support;
mod tty;

pub use guardian::{Guardian, Standby};
pub use reap::{
    become_subreaper, group_is_empty, kill_and_reap, reap, signal_group, signal_process, ChildState,
};
#[cfg(not(test))]
pub use signals::record_caller_sigpipe;
pub use signals::{stop_self, Signals, STOPS, WAIT_ENDERS};
pub use spawn::{spawn, SpawnError};
pub use tty::Tty;

/// The nemesis lab's deliberately broken distlock (tests/lab/,
/// `a_distlock_that_lets_cmd_outlive_its_lease_fails_the_checker`): with
/// DISTLOCK_TEST_BREAK=no-kill, a debug build never signals CMD and its
/// guardian never reaches a deadline, so CMD runs on past a lost lease.
/// The lab must fail such a distlock, or it could pass by being gentle.
/// Release builds have no such switch: there this is `false`.
#[cfg(debug_assertions)]
pub fn no_kill() -> bool {
    static NO_KILL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NO_KILL.get_or_init(|| std::env::var_os("DISTLOCK_TEST_BREAK").is_some_and(|v| v == "no-kill"))
}

#[cfg(not(debug_assertions))]
pub const fn no_kill() -> bool {
    false
}
