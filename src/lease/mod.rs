//! A held lease over time, a file per job (docs/design.md, "Architecture"):
//! the decisions are pure, in [`supervisor`]; the others do the store and
//! thread work.
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
