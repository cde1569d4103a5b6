//! The command line as clap sees it: raw, typed values and their help text.
//!
//! Nothing here touches Redis or processes. Values that can be checked on
//! their own (names, durations, signals, exit codes) are checked by the value
//! parsers below, so clap reports them as usage errors; checks that relate
//! several values (timings) live in `config`.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::config::{self, Signal, Wait};

const RUN_EXAMPLES: &str = "\
Examples:
  # Nightly billing on three hosts: whoever comes first runs, the others exit 75
  distlock run billing -- /usr/local/bin/bill-customers

  # Wait up to two minutes for the lock, then run
  distlock run -w 2m deploy/prod -- ./deploy.sh

  # Give the job a 2-minute lease, renewed every 20s
  distlock run --ttl 2m --renew-every 20s reindex -- ./reindex --full

  # Exit 0 instead of 75 when another host holds the lock
  distlock run -E 0 report -- ./make-report";

const AFTER_HELP: &str = "\
Exit status: CMD's own status (128+N if signal N ended it); 2 usage error;
75 lock busy; 124 lease lost and CMD stopped; 125 distlock failed (Redis
unreachable); 126 CMD not executable; 127 CMD not found.

See 'distlock run --help' and man distlock(1).";

/// Run a command while holding a lease in Redis, so one worker at a time acts
/// across many machines.
#[derive(Debug, Parser)]
#[command(
    name = "distlock",
    version,
    about = "Run a command while holding a lease in Redis: one worker at a time across many machines",
    after_help = AFTER_HELP,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand accepts, before or after the subcommand name.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Redis to hold leases in: redis://[user[:pass]@]host[:port][/db],
    /// rediss://… (TLS), redis+unix:///path or unix:///path[?db=N]
    #[arg(
        short = 'r',
        long,
        global = true,
        env = "DISTLOCK_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis_url: String,

    /// Key prefix; locks live at PREFIX:{NAME}
    #[arg(
        long,
        global = true,
        env = "DISTLOCK_PREFIX",
        default_value = "distlock",
        value_name = "P",
        value_parser = config::parse_prefix
    )]
    pub prefix: String,

    /// Say more on stderr (repeat for more)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Print nothing on stderr except the error line of a failure (exit 2 or 125)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run CMD while holding the lock NAME; renew the lease while it runs
    #[command(
        long_about = "Run CMD while holding the lock NAME.\n\n\
            Takes a lease in Redis (one atomic script: SET NX PX plus a fencing \
            token), starts CMD in its own process group with DISTLOCK_NAME, \
            DISTLOCK_KEY, DISTLOCK_OWNER and DISTLOCK_FENCING_TOKEN set, renews \
            the lease while CMD runs, and releases it when CMD ends. If the lease \
            cannot be renewed, CMD's process group gets --kill-signal before the \
            lease can expire and SIGKILL --kill-grace later; distlock then exits 124.",
        after_long_help = RUN_EXAMPLES
    )]
    Run(RunArgs),

    /// Print shell completions for SHELL on stdout
    Completions {
        /// bash, zsh, fish, elvish or powershell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Write man pages into DIR (used to regenerate man/)
    #[command(hide = true)]
    Man {
        /// Directory to write distlock.1 and one page per subcommand into
        #[arg(long, value_name = "DIR", default_value = "man")]
        dir: std::path::PathBuf,
    },
}

/// Options of `distlock run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Lock name: 1-200 characters from A-Z a-z 0-9 . _ - : / @ +
    #[arg(value_parser = config::parse_name)]
    pub name: String,

    /// Lease length; distlock renews it while CMD runs
    #[arg(
        long,
        env = "DISTLOCK_TTL",
        default_value = "30s",
        value_name = "D",
        value_parser = config::parse_duration
    )]
    pub ttl: Duration,

    /// How long to wait for a busy lock: a duration, 0 (do not wait) or forever
    #[arg(short, long, default_value = "0", value_name = "D", value_parser = config::parse_wait)]
    pub wait: Wait,

    /// Exit code when the lock was not acquired
    #[arg(
        short = 'E',
        long,
        default_value_t = 75,
        value_name = "N",
        value_parser = config::parse_exit_code
    )]
    pub conflict_exit_code: u8,

    /// Renewal period [default: ttl/3]
    #[arg(long, value_name = "D", value_parser = config::parse_duration)]
    pub renew_every: Option<Duration>,

    /// First signal sent to CMD's process group when the lease is lost
    #[arg(long, default_value = "TERM", value_name = "SIG", value_parser = config::parse_signal)]
    pub kill_signal: Signal,

    /// Time between the kill signal and SIGKILL [default: min(5s, ttl/4)]
    #[arg(long, value_name = "D", value_parser = config::parse_duration)]
    pub kill_grace: Option<Duration>,

    /// The command and its arguments, after --
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
