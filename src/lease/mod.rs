//! A held lease over time, a file per job: taking the lock, waiting in line
//! if need be (`acquire`), the thread that reads the store's wake-up
//! notices (`subscriber`) and when a promised turn comes (`turn`), and
//! keeping the lease alive while CMD runs (`renewer`). The decisions (when to renew, when CMD must be
//! signalled) are pure and live in [`supervisor`]; the other files do the
//! store and thread work, and know the store only through `Store`.
//!
//! Time is read from CLOCK_BOOTTIME (`crate::clock`), so a suspended
//! machine does not stretch a lease.

mod acquire;
mod pipe;
mod renewer;
mod subscriber;
pub mod supervisor;
mod turn;

#[cfg(test)]
mod model;
#[cfg(test)]
mod queue_model;

pub use acquire::{acquire, Acquired, Sleep, Waiting, Wakeup, Watch};
pub use renewer::{Event, LeaseSpec, Renewer};
