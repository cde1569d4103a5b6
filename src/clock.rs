//! The one clock distlock judges leases by; a leaf that imports nothing of
//! ours, so `store`, `lease`, `process` and `commands` can all read it
//! without importing each other.
//!
//! Time is read from CLOCK_BOOTTIME, a monotonic clock that, unlike
//! CLOCK_MONOTONIC (Rust's `Instant`), keeps counting while the machine is
//! suspended: Redis's expiry keeps counting then too, so a laptop lid must
//! not stretch a lease. The guardian's timerfd runs on the same clock, so a
//! deadline computed here means the same instant there.

use std::time::Duration;

use nix::time::{clock_gettime, ClockId};

/// Now, on the boot-time monotonic clock.
///
/// Async-signal-safe (one `clock_gettime`, no allocation), so the guardian
/// may call it after `fork`. It cannot fail: CLOCK_BOOTTIME exists on every
/// Linux distlock runs on (2.6.39+), and EINVAL (an unknown clock) is the
/// only error clock_gettime has for a valid pointer. The 0 of the
/// impossible case is what the raw calls this replaces returned.
pub fn now() -> Duration {
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves_forward() {
        let a = now();
        std::thread::sleep(Duration::from_millis(2));
        let b = now();
        assert!(a > Duration::ZERO);
        assert!(b >= a + Duration::from_millis(2), "{a:?} then {b:?}");
    }
}
