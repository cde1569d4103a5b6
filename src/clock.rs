//! The one clock distlock reads: CLOCK_BOOTTIME, a monotonic clock that,
//! unlike CLOCK_MONOTONIC (Rust's `Instant`), keeps counting while the
//! machine is suspended. Redis's expiry keeps counting then too, so a
//! laptop lid must not stretch a lease. A leaf: it imports nothing of
//! distlock's.

use std::time::Duration;

/// Now, on the boot-time monotonic clock.
pub fn now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills ts; CLOCK_BOOTTIME exists on every Linux
    // distlock runs on (2.6.39+).
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
