//! What a signal means while distlock waits for the lock: the one place
//! for that policy. `lease` waits through [`Sleep`] and knows no signals.
//!
//! - SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 end the wait
//!   (exit 128+N), also when they arrived during an attempt (which they
//!   cut short: `Store::set_interrupt_signals`), before CMD starts;
//! - SIGTSTP, SIGTTIN and SIGTTOU stop distlock, which has no CMD yet; the
//!   wait goes on once it is continued;
//! - anything else is dropped: there is nobody to pass it on to.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::lease::{Sleep, Wakeup};
use crate::process::{self, Signals};

/// Whether `sig` ends a wait for the lock.
pub fn ends_wait(sig: i32) -> bool {
    process::WAIT_ENDERS.contains(&sig)
}

impl Sleep for Signals {
    fn sleep(&self, timeout: Duration, fd: RawFd) -> Wakeup {
        let (sigs, readable) = self.wait(Some(timeout), Some(fd));
        for sig in sigs {
            if ends_wait(sig) {
                return Wakeup::Interrupted(sig);
            }
            if process::STOPS.contains(&sig) {
                process::stop_self(false);
            }
        }
        if readable {
            Wakeup::Readable
        } else {
            Wakeup::Nothing
        }
    }

    fn interrupted(&self) -> Option<i32> {
        let mut ended = None;
        for sig in self.drain() {
            if ends_wait(sig) {
                ended = ended.or(Some(sig));
            } else if process::STOPS.contains(&sig) && ended.is_none() {
                process::stop_self(false);
            }
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Timings;
    use crate::lease::supervisor::{Action, Input, Supervisor, TtyFacts};

    #[test]
    fn a_wait_is_ended_by_the_six_terminating_signals_and_a_hold_by_three_of_them() {
        let t0 = Duration::from_secs(1);
        let six = [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ];
        for sig in 1..=libc::SIGRTMAX() {
            assert_eq!(ends_wait(sig), six.contains(&sig), "signal {sig}");
            let mut hold =
                Supervisor::without_cmd(Timings::for_holder(Duration::from_secs(30)), t0, None);
            let tty = TtyFacts::default();
            let releases = hold
                .step(t0, Input::Signal { sig, tty })
                .contains(&Action::Release);
            // `hold` documents SIGINT, SIGTERM and SIGHUP only (`kill
            // $DISTLOCK_HOLD_PID`, the session's end); SIGUSR1 is ignored.
            assert_eq!(releases, six[..3].contains(&sig), "signal {sig}");
        }
    }
}
