//! The subcommands. Each returns the exit status for a known outcome
//! (busy, not owner, CMD's own status) and an error only when distlock
//! itself failed; `main` maps errors to 2 or 125. This file holds what
//! they share: the resolved global options and a few helpers.

mod acquire;
mod doctor;
mod history;
mod inspect;
mod man;
mod metrics;
mod output;
mod release;
mod run;
mod signal_policy;
mod status_line;

use std::time::Duration;

use crate::config::Security;
use crate::exit;
use crate::lease::Acquired;
use crate::process::{self, Signals};
use crate::store::{Handoff, LockKeys, Store, Target};

pub use acquire::{acquire, hold, hold_renewer};
pub use doctor::doctor;
pub use history::history;
pub use inspect::{inspect, list};
pub use man::man;
pub use output::print;
pub use release::{release, renew};
pub use run::run;

/// Options shared by every subcommand, resolved.
pub struct Global {
    /// The Redis URL as given (with any password): only ever passed on in
    /// the environment of `hold`'s renewer, never printed.
    pub url: String,
    /// Where Redis is.
    pub target: Target,
    /// Password and TLS settings, passed on to `hold`'s renewer.
    pub security: Security,
    /// Key prefix.
    pub prefix: String,
    /// `--min-replicas`.
    pub min_replicas: u32,
    /// -v count.
    pub verbose: u8,
    /// -q: no notices or warnings.
    pub quiet: bool,
}

impl Global {
    /// A store for this target, with `--min-replicas` applied.
    fn store(&self, timeout: Duration) -> Store {
        let mut store = Store::new(self.target.clone(), timeout);
        store.set_min_replicas(self.min_replicas);
        store
    }

    /// Prints a notice or warning unless `-q`.
    fn say(&self, msg: std::fmt::Arguments<'_>) {
        if !self.quiet {
            stderr_line(msg);
        }
    }
}

/// Writes one `distlock: …` line on stderr, and drops it if stderr is gone.
/// `eprintln!` panics when the write fails, so a reader that went away
/// (`distlock -v run … 2>&1 | head -1`) would abort distlock before CMD
/// starts, or in the middle of a run with the lease held. A lost notice
/// costs nothing; the run goes on and its exit status says what happened.
/// Control characters are escaped: a line may carry an owner id, a host
/// or a server's words (see `output`).
pub fn stderr_line(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let line = output::escape(&msg.to_string()).into_owned();
    let _ = writeln!(std::io::stderr().lock(), "distlock: {line}");
}

/// A wait that ended with something to go on with.
enum Granted {
    /// The lock, as [`Acquired::Yes`].
    Yes { token: u64, sent_at: Duration },
    /// `run --once-per`'s done mark, as [`Acquired::Done`].
    Done(crate::store::DoneMark),
}

/// What `run` and `acquire` both make of a wait's end: the lock or a done
/// mark to go on with, or the exit code of a wait that ended without them,
/// after the line that says why (busy: `conflict`; a signal: 128+N).
fn granted(
    g: &Global,
    name: &str,
    outcome: Acquired,
    conflict: u8,
) -> std::result::Result<Granted, u8> {
    let line = match outcome {
        Acquired::Yes { token, sent_at } => return Ok(Granted::Yes { token, sent_at }),
        Acquired::Done(mark) => return Ok(Granted::Done(mark)),
        Acquired::Interrupted(sig) => return Err(exit::signal_code(sig)),
        Acquired::Busy { unacked: true, .. } => format!(
            "{name} was taken but not acknowledged by --min-replicas replicas in time, so it was released"
        ),
        Acquired::Busy { holder: Some(h), .. } => format!("{name} is held by {h}"),
        Acquired::Busy { ahead: Some(a), .. } => {
            format!("{name} is being handed to the next waiter in line, {a}")
        }
        Acquired::Busy { .. } => format!("{name} is busy"),
        Acquired::Evicted => format!("{name}: this waiter's place in the queue was removed (its etcd lease revoked or its queue key deleted, e.g. by 'distlock release {name} --force'), so it stopped waiting"),
    };
    g.say(format_args!("{line}"));
    Err(conflict)
}

/// Timeout for the manual subcommands' connect and each call.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// After a release that woke the next waiter: stays until it has claimed
/// (about a millisecond), waking the waiter after it whenever promised
/// turns pass unclaimed (stopped waiters, guarantees.md §5). A failure
/// only warns: the lock is released, and the waiters' own retries go on.
/// With `signals` (`run`), a signal that ends a wait ends this one too,
/// without a word: the user asked distlock to go.
fn see_through(
    g: &Global,
    store: &mut Store,
    keys: &LockKeys,
    handoff: Option<Handoff>,
    signals: Option<&Signals>,
) {
    let Some(handoff) = handoff else {
        return;
    };
    if signals.is_some() {
        store.set_interrupt_signals(process::WAIT_ENDERS);
    }
    let Err(e) = store.relay(keys, handoff) else {
        return;
    };
    if signals.is_some_and(|s| s.drain().into_iter().any(signal_policy::ends_wait)) {
        return;
    }
    g.say(format_args!(
        "warning: {e:#}; if the waiters next in line are stopped, the one after them waits for its own retry"
    ));
}

/// Releases a lease we took but will not use (not kept for a minimum
/// hold); failures only warn, the lease expires by itself.
fn release_quietly(g: &Global, store: &mut Store, keys: &LockKeys, owner: &str) {
    if let Err(e) = store.give_back(keys, owner) {
        g.say(format_args!("warning: {e:#}"));
    }
}
