//! The command line as clap sees it: raw, typed values and their help text.
//!
//! Nothing here touches Redis or processes. Values that can be checked on
//! their own (names, durations, signals, exit codes) are checked by the value
//! parsers below, so clap reports them as usage errors; checks that relate
//! several values (timings) live in `config`.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::config::{self, Signal, Wait, WaitOrder};

/// Help headings, so `run --help` reads like a manual: options grouped by
/// what they are about instead of by which struct declares them. clap_mangen turns them into sections of the man pages too
/// (`commands/man.rs`). Constants, so options added later reuse the same
/// words and land in the same group.
pub const HEADING_LEASE: &str = "Lease";
/// See [`HEADING_LEASE`]: how long to wait for a busy lock and what to exit
/// with when it is not acquired.
pub const HEADING_WAITING: &str = "Waiting";
/// See [`HEADING_LEASE`]: what happens to CMD when the lease is lost or runs
/// out.
pub const HEADING_STOPPING: &str = "Stopping CMD";
/// See [`HEADING_LEASE`]: options for jobs started by cron, timers and CI.
pub const HEADING_CRON_CI: &str = "Cron and CI";
/// See [`HEADING_LEASE`]: which Redis, how to reach it and how to trust it.
pub const HEADING_CONNECTION: &str = "Connection and security";

/// Every heading, in the order `run --help` shows them.
pub const HEADINGS: [&str; 5] = [
    HEADING_LEASE,
    HEADING_WAITING,
    HEADING_STOPPING,
    HEADING_CRON_CI,
    HEADING_CONNECTION,
];

const RUN_EXAMPLES: &str = "\
Examples:
  # Nightly billing on three hosts: whoever comes first runs, the others exit 75
  distlock run billing -- /usr/local/bin/bill-customers

  # Wait up to two minutes for the lock, then run
  distlock run -w 2m deploy/prod -- ./deploy.sh

  # Give the job a 2-minute lease, renewed every 20s
  distlock run --ttl 2m --renew-every 20s reindex -- ./reindex --full

  # Exit 0 instead of 75 when another host holds the lock
  distlock run -E 0 report -- ./make-report

  # On every host: succeed once per night, on whichever host is up
  distlock run --wait 2h --once-per 20h nightly-billing -- ./bill";

const ACQUIRE_EXAMPLES: &str = "\
Examples:
  # Take the lock in a script, release it on every exit path
  eval \"$(distlock acquire --ttl 5m deploy)\" || exit
  trap 'distlock release deploy' EXIT
  ./deploy.sh --fencing-token \"$DISTLOCK_FENCING_TOKEN\"

  # Machine-readable
  distlock acquire --json billing";

const HOLD_EXAMPLES: &str = "\
Examples:
  # CI step 1: take the lock for the whole deploy, at most 30 minutes
  distlock hold --max 30m -w 10m deploy/prod > lock.env
  # later steps: . ./lock.env; ./migrate --fencing-token \"$DISTLOCK_FENCING_TOKEN\"
  # last step (also on failure):
  . ./lock.env && distlock release deploy/prod";

const RENEW_EXAMPLES: &str = "\
Examples:
  # Keep a lease taken with `eval \"$(distlock acquire x)\"` alive
  distlock renew x --ttl 30s || { echo 'lost the lock' >&2; exit 1; }";

const RELEASE_EXAMPLES: &str = "\
Examples:
  distlock release deploy                  # as $DISTLOCK_OWNER
  distlock release deploy --owner \"$OWNER\"
  distlock release --force deploy          # evict a stuck holder
  distlock release --forget-done billing   # let the next --once-per run run again";

const INSPECT_EXAMPLES: &str = "\
Examples:
  distlock inspect billing
  distlock inspect --json billing | jq .owner";

const HISTORY_EXAMPLES: &str = "\
Examples:
  distlock history nightly-billing
  distlock history -n 7 --json nightly-billing | jq -r '.[].outcome'";

const LIST_EXAMPLES: &str = "\
Examples:
  distlock list
  distlock --prefix ci list --json";

const DOCTOR_EXAMPLES: &str = "\
Examples:
  distlock doctor
  distlock -r redis://redis.internal:6379 doctor --json";

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  distlock completions bash > /usr/share/bash-completion/completions/distlock
  distlock completions zsh > /usr/local/share/zsh/site-functions/_distlock
  distlock completions fish > ~/.config/fish/completions/distlock.fish";

/// Run a command while holding a lease in Redis or etcd, so one worker at a
/// time acts across many machines.
#[derive(Debug, Parser)]
#[command(
    name = "distlock",
    // The package version, plus the commit when built from a git checkout
    // (set by build.rs), so `--version` on a fleet host names the build.
    version = env!("DISTLOCK_VERSION"),
    about = "Run a command while holding a lease in Redis or etcd: one worker at a time across many machines",
    // Generated from the one exit table at compile time.
    after_help = crate::exit::HELP,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli<C: Subcommand = Command> {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: C,
}

/// The command line, parsed. Only the subcommand `argv[1]` names is built
/// when that is one of the everyday ones: building all twelve, and copying
/// the global options into each, was a third of a `run -- true`'s own
/// instructions (callgrind) and 44 of its 209 page faults. Anything else (no
/// subcommand, options before it, help, completions) builds them all.
pub fn parse(argv: &[OsString]) -> Result<Cli, clap::Error> {
    match argv.get(1).and_then(|a| a.to_str()) {
        Some("run") => parse_with::<OnlyRun>(argv),
        Some("acquire") => parse_with::<OnlyAcquire>(argv),
        Some("hold") => parse_with::<OnlyHold>(argv),
        Some("renew") => parse_with::<OnlyRenew>(argv),
        Some("release") => parse_with::<OnlyRelease>(argv),
        Some("inspect") => parse_with::<OnlyInspect>(argv),
        Some("history") => parse_with::<OnlyHistory>(argv),
        Some("list") => parse_with::<OnlyList>(argv),
        Some("doctor") => parse_with::<OnlyDoctor>(argv),
        _ => parse_with::<Command>(argv),
    }
}

/// Parses with the subcommands of `C`: [`Command`] (all of them) or one of
/// the `Only…` enums. Those come from the same derived code: each has the
/// one variant, without attributes, as in `Command`, and every attribute
/// lives on the `…Args` struct, so the slim command is the full one minus
/// the other subcommands
/// (`tests::a_slim_parse_is_the_full_parse`).
///
/// The clap `Command` is built once and parsing moves the values out of the
/// matches instead of cloning them. Both are dropped, though freeing their
/// hundreds of small allocations costs a tenth of a `run -- true`'s
/// instructions (callgrind): kept, they were 220 KiB of the heap of every
/// holding and waiting distlock, which `main` now gives back.
fn parse_with<C>(argv: &[OsString]) -> Result<Cli, clap::Error>
where
    C: Subcommand + Into<Command>,
{
    let mut cmd = Cli::<C>::command();
    let mut m = cmd.try_get_matches_from_mut(argv)?;
    if let Some(e) = conflicts_from_command_line(&m) {
        return Err(e);
    }
    let cli = Cli::<C>::from_arg_matches_mut(&mut m)?;
    Ok(Cli {
        global: cli.global,
        command: cli.command.into(),
    })
}

/// One single-variant subcommand enum per everyday subcommand, for
/// [`parse`]; the variant has no attributes, as in [`Command`].
macro_rules! only {
    ($($only:ident: $variant:ident($args:ty);)*) => {$(
        #[derive(Debug, Subcommand)]
        pub enum $only {
            $variant($args),
        }
        impl From<$only> for Command {
            fn from(c: $only) -> Command {
                let $only::$variant(a) = c;
                Command::$variant(a)
            }
        }
    )*};
}
only! {
    OnlyRun: Run(RunArgs);
    OnlyAcquire: Acquire(AcquireArgs);
    OnlyHold: Hold(HoldArgs);
    OnlyRenew: Renew(RenewArgs);
    OnlyRelease: Release(ReleaseArgs);
    OnlyInspect: Inspect(InspectArgs);
    OnlyHistory: History(HistoryArgs);
    OnlyList: List(ListArgs);
    OnlyDoctor: Doctor(DoctorArgs);
}

/// The server URL when neither `--url` nor `DISTLOCK_URL` gives one.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Options every subcommand accepts, before or after the subcommand name.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Redis or etcd to hold leases in: redis://[user[:pass]@]host[:port][/db],
    /// rediss://… (TLS), redis+unix:///path or unix:///path[?db=N],
    /// redis+sentinel://host:26379,host:26379/master[/db],
    /// redis+cluster://host:port,host:port,
    /// etcd://[user[:pass]@]host[:port][,host[:port]…], etcds://… (TLS)
    /// [env: DISTLOCK_URL, else DISTLOCK_REDIS_URL] [default:
    /// redis://127.0.0.1:6379]
    //
    // Two variables, the new name first: clap's `env` takes one, so the
    // older name and the default are applied in `url()`.
    #[arg(
        help_heading = HEADING_CONNECTION,
        short = 'r',
        long = "url",
        visible_alias = "redis-url",
        global = true,
        env = "DISTLOCK_URL",
        value_name = "URL",
        hide_env = true
    )]
    pub url: Option<String>,

    /// Key prefix; locks live at PREFIX:{NAME}
    #[arg(
        help_heading = HEADING_CONNECTION,
        long,
        global = true,
        hide_env_values = true, env = "DISTLOCK_PREFIX",
        default_value = "distlock",
        value_name = "P",
        value_parser = config::parse_prefix
    )]
    pub prefix: String,

    /// Read the Redis password from the first line of FILE (overrides
    /// DISTLOCK_REDIS_PASSWORD and a password in the URL)
    #[arg(
        help_heading = HEADING_CONNECTION,
        long,
        global = true,
        hide_env_values = true,
        env = "DISTLOCK_REDIS_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub redis_password_file: Option<std::path::PathBuf>,

    /// Trust the CA(s) in this PEM file for rediss:// instead of the system's
    #[arg(
        help_heading = HEADING_CONNECTION,
        long,
        global = true,
        hide_env_values = true,
        env = "DISTLOCK_TLS_CA",
        value_name = "FILE"
    )]
    pub tls_ca: Option<std::path::PathBuf>,

    /// Client certificate (PEM) for mutual TLS; needs --tls-key
    #[arg(
        help_heading = HEADING_CONNECTION,
        long,
        global = true,
        hide_env_values = true,
        env = "DISTLOCK_TLS_CERT",
        value_name = "FILE"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// Client private key (PEM) for mutual TLS; needs --tls-cert
    #[arg(
        help_heading = HEADING_CONNECTION,
        long,
        global = true,
        hide_env_values = true,
        env = "DISTLOCK_TLS_KEY",
        value_name = "FILE"
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// Do not verify the server's certificate (testing only; warns every time)
    #[arg(long, global = true, help_heading = HEADING_CONNECTION)]
    pub tls_insecure: bool,

    /// Acquisitions and renewals count only once N replicas have them
    /// (Redis WAIT, bounded by the time left): a failover then keeps the
    /// lease and the fencing counter
    #[arg(
        help_heading = HEADING_CONNECTION,
        long,
        global = true,
        hide_env_values = true,
        env = "DISTLOCK_MIN_REPLICAS",
        default_value_t = 0,
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub min_replicas: u32,

    /// Say more on stderr (repeat for more)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Print nothing on stderr except the error line of a failure (exit 2 or 125)
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    // Each visible subcommand's about, long about and examples are on its
    // `...Args` struct, not here, so `parse` can build it alone.
    Run(RunArgs),
    Acquire(AcquireArgs),
    Hold(HoldArgs),

    /// Internal: the background renewer of `distlock hold`
    #[command(hide = true, name = "__hold-renewer")]
    HoldRenewer(HoldRenewerArgs),
    Renew(RenewArgs),
    Release(ReleaseArgs),
    Inspect(InspectArgs),
    History(HistoryArgs),
    List(ListArgs),
    Doctor(DoctorArgs),

    /// Print shell completions for SHELL on stdout
    #[command(after_long_help = COMPLETIONS_EXAMPLES)]
    Completions {
        /// bash, zsh, fish, elvish or powershell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Write man pages into DIR (used to regenerate man/)
    #[command(hide = true)]
    Man {
        /// Directory to write distlock.1 and one page per subcommand into
        // No default: run by mistake in the wrong directory, it must not
        // overwrite the pages there.
        #[arg(long, value_name = "DIR", required_unless_present = "exit_table")]
        dir: Option<std::path::PathBuf>,
        /// Print the README's exit-code table (Markdown) on stdout instead,
        /// for scripts/gen-assets.sh and tests/it/assets.rs
        #[arg(long, conflicts_with = "dir")]
        exit_table: bool,
    },
}

/// How a lease is taken: shared by `run`, `acquire` and `hold`.
#[derive(Debug, Args)]
pub struct LeaseArgs {
    /// Semaphore: let up to N holders in at once, each with its own lease
    /// (1: a plain lock). Every user of a name must pass the same N
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10000), allow_hyphen_values = true, help_heading = HEADING_LEASE)]
    pub limit: u32,

    /// Lease length (`run` renews it while CMD runs; after `acquire`, renew it yourself)
    #[arg(
        help_heading = HEADING_LEASE,
        long,
        hide_env_values = true, env = "DISTLOCK_TTL",
        default_value = "30s",
        value_name = "D",
        value_parser = config::parse_expiry,
        allow_hyphen_values = true
    )]
    pub ttl: Duration,

    /// How long to wait for a busy lock: a duration, 0 (do not wait) or forever
    #[arg(short, long, default_value = "0", value_name = "D", value_parser = config::parse_wait, allow_hyphen_values = true, help_heading = HEADING_WAITING)]
    pub wait: Wait,

    /// Who gets a busy lock first: fair (arrival order) or any (no queue)
    #[arg(long, value_enum, default_value = "fair", value_name = "ORDER", help_heading = HEADING_WAITING)]
    pub wait_order: WaitOrder,

    /// Exit code when the lock was not acquired
    #[arg(
        help_heading = HEADING_WAITING,
        short = 'E',
        long,
        default_value_t = crate::exit::CONFLICT,
        value_name = "N",
        value_parser = config::parse_exit_code,
        allow_hyphen_values = true
    )]
    pub conflict_exit_code: u8,

    /// Keep the lock held until D after it was acquired, even if CMD ends
    /// or `release` comes sooner (the key keeps a TTL for the rest; no
    /// process lingers)
    #[arg(long, value_name = "D", value_parser = config::parse_expiry, allow_hyphen_values = true, help_heading = HEADING_LEASE)]
    pub min_hold: Option<Duration>,
}

/// Run CMD while holding the lock NAME; renew the lease while it runs
#[derive(Debug, Args)]
#[command(
    long_about = "Run CMD while holding the lock NAME.\n\n\
        Takes a lease in Redis (one atomic script: SET NX PX plus a fencing \
        token) or etcd (one transaction; the token is etcd's revision), starts CMD in its own process group with DISTLOCK_NAME, \
        DISTLOCK_KEY, DISTLOCK_OWNER and DISTLOCK_FENCING_TOKEN set, renews \
        the lease while CMD runs, and releases it when CMD ends. If the lease \
        cannot be renewed, CMD's process group gets --kill-signal before the \
        lease can expire and SIGKILL --kill-grace later; distlock then exits 124. \
        A release that wakes a waiter returns once that waiter holds the lock \
        (about a millisecond; 0.9 s more for each stopped waiter first in line; 5.4 s at most).",
    after_long_help = RUN_EXAMPLES
)]
pub struct RunArgs {
    /// Lock name: 1-200 characters from A-Z a-z 0-9 . _ - : / @ +, not starting with -
    #[arg(value_parser = config::parse_name)]
    pub name: String,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Renewal period [default: ttl/3]
    #[arg(long, value_name = "D", value_parser = config::parse_duration, allow_hyphen_values = true, help_heading = HEADING_LEASE)]
    pub renew_every: Option<Duration>,

    /// First signal sent to CMD's process group when the lease is lost
    #[arg(long, default_value = "TERM", value_name = "SIG", value_parser = config::parse_signal, allow_hyphen_values = true, help_heading = HEADING_STOPPING)]
    pub kill_signal: Signal,

    /// Time between the kill signal and SIGKILL [default: min(5s, ttl/4)]
    #[arg(long, value_name = "D", value_parser = config::parse_duration, allow_hyphen_values = true, help_heading = HEADING_STOPPING)]
    pub kill_grace: Option<Duration>,

    /// Stop CMD (kill signal, then SIGKILL after the grace) once it has held
    /// the lock for D; exit 124
    #[arg(long, value_name = "D", value_parser = config::parse_duration, allow_hyphen_values = true, help_heading = HEADING_STOPPING)]
    pub max_hold: Option<Duration>,

    /// Send SIG to CMD once, as soon as a renewal is overdue (half a period
    /// late) or has failed, so it can checkpoint before the kill deadline
    /// [default: none]
    #[arg(long, value_name = "SIG", value_parser = config::parse_any_signal, allow_hyphen_values = true, help_heading = HEADING_STOPPING)]
    pub at_risk_signal: Option<Signal>,

    /// Once per window: after acquiring, start CMD only if no `run
    /// --once-per` of NAME succeeded (exited 0) less than D ago, by the
    /// server's clock (on etcd D is whole seconds); otherwise exit with
    /// --done-exit-code. A success
    /// writes the done mark PREFIX:{NAME}:done, which expires D after that
    /// run acquired the lock. Not with --limit above 1
    #[arg(long, value_name = "D", value_parser = config::parse_window, allow_hyphen_values = true, help_heading = HEADING_CRON_CI)]
    pub once_per: Option<Duration>,

    /// Exit code when --once-per finds the job already done in this window
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        value_parser = config::parse_exit_code,
        allow_hyphen_values = true,
        requires = "once_per",
        help_heading = HEADING_CRON_CI
    )]
    pub done_exit_code: u8,

    /// How long the store keeps the record of the last run (who, when, how
    /// long, exit status, token)
    #[arg(long, default_value = "7d", value_name = "D", value_parser = config::parse_expiry, allow_hyphen_values = true, help_heading = HEADING_CRON_CI)]
    pub last_run_keep: Duration,

    /// How many records of its runs the store keeps for NAME (`distlock
    /// history`); 0 keeps none
    #[arg(long, env = "DISTLOCK_HISTORY_KEEP", hide_env_values = true, default_value_t = 100, value_name = "N", help_heading = HEADING_CRON_CI)]
    pub history_keep: u32,

    /// When the run ends, write its metrics for node_exporter's textfile
    /// collector (Prometheus text format) to PATH, atomically; a file that
    /// cannot be written is a warning
    #[arg(long, env = "DISTLOCK_METRICS_FILE", hide_env_values = true, value_name = "PATH", help_heading = HEADING_CRON_CI)]
    pub metrics_file: Option<std::path::PathBuf>,

    /// The command and its arguments, after --
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Take the lock NAME and print shell lines to eval (for scripts)
#[derive(Debug, Args)]
#[command(
    long_about = "Take the lock NAME and print shell lines to eval.\n\n\
        Prints `export DISTLOCK_NAME=…`, `export DISTLOCK_OWNER=…` and \
        `export DISTLOCK_FENCING_TOKEN=…`, shell-quoted, or one JSON object \
        with --json. Nothing renews the lease: call `distlock renew` more \
        often than --ttl, and `distlock release` when done. Acquiring again \
        with the same --owner while it is held refreshes the lease and \
        returns the same token.",
    after_long_help = ACQUIRE_EXAMPLES
)]
pub struct AcquireArgs {
    /// Lock name: 1-200 characters from A-Z a-z 0-9 . _ - : / @ +, not starting with -
    #[arg(value_parser = config::parse_name)]
    pub name: String,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// Owner id to hold the lease as [default: a new <host>:<pid>:<random hex>]
    #[arg(long, value_name = "ID", value_parser = config::parse_owner, help_heading = HEADING_LEASE)]
    pub owner: Option<String>,

    /// Print one JSON object instead of export lines
    #[arg(long)]
    pub json: bool,
}

/// Take NAME and keep renewing it from a background process until
/// `distlock release` (for locks that span several CI steps)
#[derive(Debug, Args)]
#[command(
    long_about = "Take the lock NAME like `acquire`, print the same export lines plus \
        DISTLOCK_HOLD_PID, and leave a small background process that renews the \
        lease until `distlock release NAME` (as $DISTLOCK_OWNER), until --max \
        passes (then it releases), until it gets SIGTERM (then it releases), or \
        until renewal fails (then the lease expires). A hold whose lease was \
        lost makes the later `release` exit 1.",
    after_long_help = HOLD_EXAMPLES
)]
pub struct HoldArgs {
    #[command(flatten)]
    pub acquire: AcquireArgs,

    /// Release the lock after this long at the latest: a duration or forever
    #[arg(long, default_value = "1h", value_name = "D", value_parser = config::parse_wait, allow_hyphen_values = true, help_heading = HEADING_LEASE)]
    pub max: Wait,
}

/// Arguments of the hidden background renewer (set by `hold`).
#[derive(Debug, Args)]
pub struct HoldRenewerArgs {
    #[arg(value_parser = config::parse_name)]
    pub name: String,
    #[arg(long, default_value_t = 1)]
    pub limit: u32,
    /// From the environment only: an owner id on the command line would
    /// show in `ps`, and anyone who knows it can release the lock.
    #[arg(long, env = "DISTLOCK_OWNER", hide_env_values = true, value_parser = config::parse_owner)]
    pub owner: String,
    #[arg(long, value_parser = config::parse_expiry)]
    pub ttl: Duration,
    /// Boot-clock nanoseconds at which the acquisition was sent.
    #[arg(long)]
    pub t0_ns: u64,
    /// Boot-clock nanoseconds at which to release (none: never).
    #[arg(long)]
    pub release_at_ns: Option<u64>,
}

/// Extend the lease on NAME if OWNER still holds it
#[derive(Debug, Args)]
#[command(
    long_about = "Extend the lease on NAME to --ttl from now if OWNER still holds \
        it (compare-and-extend). A renewal never shortens a lease: a --ttl \
        shorter than the time it has left leaves it as it is. Exit 0 renewed, \
        1 not held by that owner.",
    after_long_help = RENEW_EXAMPLES
)]
pub struct RenewArgs {
    /// Lock name
    #[arg(value_parser = config::parse_name)]
    pub name: String,

    /// Semaphore: let up to N holders in at once, each with its own lease
    /// (1: a plain lock). Every user of a name must pass the same N
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10000), allow_hyphen_values = true, help_heading = HEADING_LEASE)]
    pub limit: u32,

    /// Owner id that must hold the lease
    #[arg(long, hide_env_values = true, env = "DISTLOCK_OWNER", value_name = "ID", value_parser = config::parse_owner, help_heading = HEADING_LEASE)]
    pub owner: Option<String>,

    /// New lease length, counted from now
    #[arg(
        help_heading = HEADING_LEASE,
        long,
        hide_env_values = true, env = "DISTLOCK_TTL",
        default_value = "30s",
        value_name = "D",
        value_parser = config::parse_expiry,
        allow_hyphen_values = true
    )]
    pub ttl: Duration,
}

/// Release NAME if OWNER holds it (or whoever holds it, with --force)
#[derive(Debug, Args)]
#[command(
    long_about = "Release NAME if OWNER holds it (compare-and-delete). Exit 0 \
        released, 1 not held by that owner (nothing is deleted). A lease that \
        a running `distlock run` holds is ended only by that run, when its \
        command has exited: a release by owner (from that command, say) is \
        refused with exit 1. A release that wakes a waiter returns once that \
        waiter holds the lock (about a millisecond; 0.9 s more for each stopped \
        waiter first in line; 5.4 s at most). With --force, \
        delete the lease whoever holds it and say who that was; the fencing \
        counter is left alone, so the next holder still gets a larger token. \
        On etcd --force also removes every waiter from the queue (a killed \
        waiter's key blocks a free name for its --ttl; those still waiting \
        stop with exit 75) and says how many.",
    after_long_help = RELEASE_EXAMPLES
)]
pub struct ReleaseArgs {
    /// Lock name
    #[arg(value_parser = config::parse_name)]
    pub name: String,

    /// Semaphore: let up to N holders in at once, each with its own lease
    /// (1: a plain lock). Every user of a name must pass the same N
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10000), allow_hyphen_values = true, help_heading = HEADING_LEASE)]
    pub limit: u32,

    /// Owner id that must hold the lease (ignored with --force)
    #[arg(long, hide_env_values = true, env = "DISTLOCK_OWNER", value_name = "ID", value_parser = config::parse_owner, help_heading = HEADING_LEASE)]
    pub owner: Option<String>,

    /// Release whoever holds it, and print who that was
    #[arg(long)]
    pub force: bool,

    /// Delete only the done mark of `run --once-per`, so the next run
    /// starts CMD again; needs no owner and leaves a held lease alone. Not
    /// with --force or --owner (DISTLOCK_OWNER in the environment is
    /// ignored)
    // --owner typed on the command line is refused by
    // `conflicts_from_command_line`: a script that took a lock has
    // DISTLOCK_OWNER set anyway.
    #[arg(long, conflicts_with = "force")]
    pub forget_done: bool,
}

/// Conflicts that only count for values typed on the command line, which
/// clap's `conflicts_with` cannot tell from environment fallbacks: an
/// operator's `release --forget-done NAME` in a shell where
/// `eval "$(distlock acquire …)"` set DISTLOCK_OWNER must still work.
pub fn conflicts_from_command_line(m: &clap::ArgMatches) -> Option<clap::Error> {
    use clap::parser::ValueSource;
    let (name, sub) = m.subcommand()?;
    if name == "release"
        && sub.get_flag("forget_done")
        && sub.value_source("owner") == Some(ValueSource::CommandLine)
    {
        return Some(<Cli as clap::CommandFactory>::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            "--forget-done cannot be used with --owner: it deletes the done mark whoever holds the lock",
        ));
    }
    None
}

/// Show who holds NAME, for how long, and the last fencing token
#[derive(Debug, Args)]
#[command(after_long_help = INSPECT_EXAMPLES)]
pub struct InspectArgs {
    /// Lock name
    #[arg(value_parser = config::parse_name)]
    pub name: String,

    /// Semaphore: let up to N holders in at once, each with its own lease
    /// (1: a plain lock). Every user of a name must pass the same N
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10000), allow_hyphen_values = true, help_heading = HEADING_LEASE)]
    pub limit: u32,

    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Show how the last runs of NAME ended, newest first
#[derive(Debug, Args)]
#[command(
    long_about = "Show how the last runs of NAME ended, newest first: when each \
        started (the server's clock), on which host, for how long, its outcome \
        (success, failed, signaled, lease_lost, not_started, skipped_done; \
        a run stopped at --max-hold is lease_lost by max_hold) and fencing \
        token. The first line pictures the runs shown, oldest to newest: \
        + success, x failed, signaled or not started, ! lease lost or \
        stopped at --max-hold, - skipped \
        (--once-per found the job done).",
    after_long_help = HISTORY_EXAMPLES
)]
pub struct HistoryArgs {
    /// Lock name
    #[arg(value_parser = config::parse_name)]
    pub name: String,

    /// Show the newest N records
    #[arg(short = 'n', long = "count", default_value_t = 20, value_name = "N")]
    pub count: u32,

    /// Print a JSON array of records
    #[arg(long)]
    pub json: bool,
}

/// Check the Redis or etcd that the URL points at: is it safe for leases?
#[derive(Debug, Args)]
#[command(
    long_about = "Check the Redis that the URL points at and print one line per check \
        with a verdict (ok, warn, danger) and advice: reachable and latency; a \
        version with what distlock uses; persistence (without AOF a restart \
        forgets held leases); maxmemory-policy (an eviction policy can evict a \
        held lease); role (a replica refuses writes; a master with replicas can \
        lose a lease on failover); the server clock; and the clock of each \
        replica the master lists against the master's (a warning above 1 s: \
        after a failover the promoted replica's clock is the floor of the next \
        fencing token). On etcd: each member's health, the leader, the \
        version and the smallest lease etcd grants. Exit 0 when nothing is \
        dangerous, 1 otherwise, 125 when the server cannot be reached.",
    after_long_help = DOCTOR_EXAMPLES
)]
pub struct DoctorArgs {
    /// Print a JSON array of {check, verdict, detail, advice}
    #[arg(long)]
    pub json: bool,
}

/// List every held lock under the prefix, sorted by name
#[derive(Debug, Args)]
#[command(
    long_about = "List every held lock under the prefix, sorted by name, with \
        owner, remaining lease, last fencing token and holder metadata. Uses \
        SCAN, never KEYS, so it does not block a busy server.",
    after_long_help = LIST_EXAMPLES
)]
pub struct ListArgs {
    /// Print a JSON array of `inspect --json` objects
    #[arg(long)]
    pub json: bool,
}

/// Each subcommand's arguments become its checked settings here: the
/// subcommands take `config`'s types and know nothing of clap.
impl GlobalArgs {
    /// The server to talk to: `--url` or `DISTLOCK_URL` (clap), else the
    /// older `DISTLOCK_REDIS_URL`, so crontabs that set it keep working,
    /// else the local default. The older variable is taken as clap takes
    /// the newer one: set but empty is an empty (invalid) URL, and text
    /// that is not UTF-8 is a usage error.
    pub fn url(&self) -> Result<String, config::UsageError> {
        if let Some(url) = &self.url {
            return Ok(url.clone());
        }
        match std::env::var_os("DISTLOCK_REDIS_URL") {
            None => Ok(DEFAULT_URL.to_owned()),
            Some(v) => v.into_string().map_err(|_| {
                config::UsageError("DISTLOCK_REDIS_URL is not valid UTF-8".to_owned())
            }),
        }
    }
}

impl LeaseArgs {
    fn into_config(self) -> config::LeaseConfig {
        config::LeaseConfig {
            limit: self.limit,
            ttl: self.ttl,
            wait: self.wait,
            wait_order: self.wait_order,
            conflict_exit_code: self.conflict_exit_code,
            min_hold: self.min_hold,
        }
    }
}

impl TryFrom<RunArgs> for config::RunConfig {
    type Error = config::UsageError;

    fn try_from(a: RunArgs) -> Result<Self, Self::Error> {
        config::check_once_per(a.once_per, a.lease.limit)?;
        let timings = config::Timings::new(a.lease.ttl, a.renew_every, a.kill_grace)?;
        Ok(config::RunConfig {
            name: a.name,
            lease: a.lease.into_config(),
            timings,
            kill_signal: a.kill_signal,
            max_hold: a.max_hold,
            at_risk_signal: a.at_risk_signal,
            once_per: a.once_per,
            done_exit_code: a.done_exit_code,
            last_run_keep: a.last_run_keep,
            history_keep: a.history_keep,
            metrics_file: a.metrics_file,
            command: a.command,
        })
    }
}

impl TryFrom<AcquireArgs> for config::AcquireConfig {
    type Error = config::UsageError;

    fn try_from(a: AcquireArgs) -> Result<Self, Self::Error> {
        config::check_ttl(a.lease.ttl)?;
        Ok(config::AcquireConfig {
            name: a.name,
            lease: a.lease.into_config(),
            owner: a.owner,
            json: a.json,
        })
    }
}

impl TryFrom<HoldArgs> for config::HoldConfig {
    type Error = config::UsageError;

    fn try_from(a: HoldArgs) -> Result<Self, Self::Error> {
        Ok(config::HoldConfig {
            acquire: a.acquire.try_into()?,
            max: a.max,
        })
    }
}

impl From<HoldRenewerArgs> for config::HoldRenewerConfig {
    fn from(a: HoldRenewerArgs) -> Self {
        config::HoldRenewerConfig::new(a.name, a.limit, a.owner, a.ttl, a.t0_ns, a.release_at_ns)
    }
}

impl TryFrom<RenewArgs> for config::RenewConfig {
    type Error = config::UsageError;

    fn try_from(a: RenewArgs) -> Result<Self, Self::Error> {
        let owner = config::require_owner(a.owner)?;
        Ok(config::RenewConfig {
            name: a.name,
            limit: a.limit,
            owner,
            ttl: config::check_ttl(a.ttl)?,
        })
    }
}

impl TryFrom<ReleaseArgs> for config::ReleaseConfig {
    type Error = config::UsageError;

    fn try_from(a: ReleaseArgs) -> Result<Self, Self::Error> {
        config::ReleaseConfig::new(a.name, a.limit, a.owner, a.force, a.forget_done)
    }
}

impl From<HistoryArgs> for config::HistoryConfig {
    fn from(a: HistoryArgs) -> Self {
        config::HistoryConfig {
            name: a.name,
            count: a.count,
            json: a.json,
        }
    }
}

impl From<InspectArgs> for config::InspectConfig {
    fn from(a: InspectArgs) -> Self {
        config::InspectConfig {
            name: a.name,
            limit: a.limit,
            json: a.json,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        <Cli>::command().debug_assert();
    }

    /// What a parse shows the user or the program: the parsed values, or
    /// the error's kind and its whole rendering (help text, usage, tips).
    fn outcome(r: Result<Cli, clap::Error>) -> String {
        match r {
            Ok(cli) => format!("{cli:?}"),
            Err(e) => format!("{:?}\n{}", e.kind(), e.render()),
        }
    }

    #[test]
    fn a_slim_parse_is_the_full_parse() {
        let common: &[&[&str]] = &[
            &[],
            &["--help"],
            &["-h"],
            &["--bogus"],
            &["--ttll", "5s"],
            &["job", "-v", "-q"],
            &["job", "-vv", "--redis-url", "redis://h:1", "--prefix", "p:"],
            &["job", "--json", "--owner", "o", "--ttl", "5s"],
        ];
        let specific: &[(&str, &[&[&str]])] = &[
            (
                "run",
                &[
                    &["job", "--", "true"],
                    &["job", "true"],
                    &[
                        "job",
                        "--ttl",
                        "5s",
                        "--wait",
                        "1s",
                        "--kill-signal",
                        "INT",
                        "--",
                        "echo",
                        "hi",
                    ],
                    &["job", "--ttl", "zz", "--", "true"],
                    &["job", "--once-per", "1h", "--limit", "3", "--", "true"],
                    &["job", "--limit", "0", "--", "true"],
                    &["-", "--", "true"],
                ],
            ),
            (
                "acquire",
                &[&["job", "--ttl", "5s", "--json"], &["job", "--owner", "me"]],
            ),
            ("hold", &[&["job", "--max", "1h"], &["job", "--max", "-1s"]]),
            (
                "renew",
                &[&["job", "--owner", "o", "--ttl", "5s"], &["job"]],
            ),
            (
                "release",
                &[
                    &["job", "--owner", "o"],
                    &["job", "--force"],
                    &["job", "--force", "--owner", "o"],
                    &["job", "--forget-done", "--owner", "o"],
                ],
            ),
            ("inspect", &[&["job", "--json"], &["job", "--limit", "2"]]),
            (
                "history",
                &[&["job", "-n", "3", "--json"], &["job", "-n", "x"]],
            ),
            ("list", &[&["--json"], &["extra"]]),
            ("doctor", &[&["--json"], &["extra"]]),
        ];
        let mut compared = 0;
        for (sub, own) in specific {
            for args in common.iter().chain(own.iter()) {
                let argv: Vec<OsString> = ["distlock", sub]
                    .iter()
                    .chain(args.iter())
                    .map(OsString::from)
                    .collect();
                let slim = outcome(parse(&argv));
                let full = outcome(parse_with::<Command>(&argv));
                assert_eq!(slim, full, "distlock {sub} {args:?}");
                compared += 1;
            }
        }
        let own: usize = specific.iter().map(|(_, own)| own.len()).sum();
        assert_eq!(compared, specific.len() * common.len() + own);
    }

    #[test]
    fn a_slim_command_has_only_its_subcommand() {
        let subs = |c: clap::Command| -> Vec<String> {
            c.get_subcommands()
                .map(|s| s.get_name().to_owned())
                .collect()
        };
        assert_eq!(subs(Cli::<OnlyRun>::command()), ["run"]);
        assert_eq!(subs(Cli::<OnlyAcquire>::command()), ["acquire"]);
        assert_eq!(subs(Cli::<OnlyHold>::command()), ["hold"]);
        assert_eq!(subs(Cli::<OnlyRenew>::command()), ["renew"]);
        assert_eq!(subs(Cli::<OnlyRelease>::command()), ["release"]);
        assert_eq!(subs(Cli::<OnlyInspect>::command()), ["inspect"]);
        assert_eq!(subs(Cli::<OnlyList>::command()), ["list"]);
        assert_eq!(subs(Cli::<OnlyDoctor>::command()), ["doctor"]);
        assert_eq!(subs(Cli::<OnlyHistory>::command()), ["history"]);
        assert_eq!(subs(<Cli>::command()).len(), 12);
    }
}
