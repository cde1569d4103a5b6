//! The one table of exit statuses, shared by every subcommand and copied
//! into the README and man page. Same meanings everywhere, as timeout(1).

use std::process::ExitStatus;

/// renew/release: the lock is not held by that owner.
pub const NOT_OWNER: u8 = 1;
/// Usage error: bad option, name, duration, URL.
pub const USAGE: u8 = 2;
/// Lock not acquired (busy, or the wait ran out); `-E` changes it.
pub const CONFLICT: u8 = 75;
/// `run`: the lease was lost and CMD was stopped.
pub const LEASE_LOST: u8 = 124;
/// distlock itself failed: Redis unreachable, auth refused, protocol error.
pub const FAILURE: u8 = 125;
/// CMD was found but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// CMD was not found.
pub const NOT_FOUND: u8 = 127;

/// The shell's view of how a process ended: its exit code, or 128+N when
/// signal N ended it (bash, tini, dumb-init, flock all agree).
pub fn from_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => signal_code(sig),
        (None, None) => FAILURE,
    }
}

/// 128+N for signal N, clamped to a byte as tini does.
pub fn signal_code(sig: i32) -> u8 {
    ((128 + sig) % 256) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn exit_codes_pass_through_and_signals_become_128_plus_n() {
        for code in [0, 1, 2, 64, 126, 127, 254, 255] {
            assert_eq!(from_status(ExitStatus::from_raw(code << 8)), code as u8);
        }
        assert_eq!(from_status(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(from_status(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(signal_code(libc::SIGINT), 130);
    }
}
