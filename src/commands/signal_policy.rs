//! What a signal means while distlock waits for the lock: the one place
//! for that policy. `lease` waits through [`Sleep`] and knows no signals.
//!
//! - SIGINT, SIGTERM and SIGHUP end the wait (exit 128+N), also when they
//!   arrived during the last attempt, before CMD starts;
//! - SIGTSTP, SIGTTIN and SIGTTOU stop distlock, which has no CMD yet; the
//!   wait goes on once it is continued;
//! - anything else is dropped: there is nobody to pass it on to.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::lease::{Sleep, Wakeup};
use crate::supervise::{self, Signals};

/// Whether `sig` ends a wait for the lock.
pub fn ends_wait(sig: i32) -> bool {
    supervise::WAIT_ENDERS.contains(&sig)
}

impl Sleep for Signals {
    fn sleep(&self, timeout: Duration, fd: RawFd) -> Wakeup {
        let (sigs, readable) = self.wait(Some(timeout), Some(fd));
        for sig in sigs {
            if ends_wait(sig) {
                return Wakeup::Interrupted(sig);
            }
            if supervise::STOPS.contains(&sig) {
                supervise::stop_self(false);
            }
        }
        if readable {
            Wakeup::Readable
        } else {
            Wakeup::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Timings;
    use crate::lease::supervisor::{Action, Input, Supervisor, TtyFacts};

    #[test]
    fn a_hold_is_ended_by_the_signals_that_end_a_wait_and_by_no_other() {
        let t0 = Duration::from_secs(1);
        for sig in 1..=libc::SIGRTMAX() {
            let mut hold =
                Supervisor::without_cmd(Timings::for_holder(Duration::from_secs(30)), t0, None);
            let tty = TtyFacts::default();
            let releases = hold
                .step(t0, Input::Signal { sig, tty })
                .contains(&Action::Release);
            assert_eq!(releases, ends_wait(sig), "signal {sig}");
        }
    }
}
