//! distlock: run a command while holding a lease in Redis or etcd, so that one
//! worker at a time acts across many machines.
//!
//! # Layout
//!
//! Data flows one way: args → config → acquire → spawn → renew while the
//! `Supervisor` decides → release → exit code. Three words, three jobs:
//! `process` acts, `lease::Supervisor` decides, `commands::run` drives.
//!
//! - `cli`: the clap definition; no I/O; uses only `config` and `exit`.
//! - `config`: checked values (names, durations, signals, timings, owner
//!   ids, the password and TLS settings: the password file is read here).
//! - `clock`: the boot-time clock every deadline is on; a leaf.
//! - `store`: the only Redis and etcd code: `Store`, an enum of the two
//!   backends, and the types they answer in; what both share in files of
//!   its own (`error`: `StoreError`; `keys`: `LockKeys`; `record`: run
//!   records; `url`: redaction); `store/redis_store` split by job
//!   (`connection`, `scripts`, `replies`, `lock`, `semaphore`, `pubsub`,
//!   `server`, `deadline`, `error`); `store/etcd_store` (feature `etcd`, on
//!   by default). Neither backend names the other.
//! - `lease`: split by job: `acquire` (taking the lease, and waiting),
//!   `turn` (what a waiter makes of its wake-up channel), the `subscriber`
//!   and `renewer` threads, and `supervisor`: the `Supervisor`, the pure
//!   decision machine of a run.
//! - `process`: signals, spawning CMD, the terminal, the guardian,
//!   reaping; knows no store.
//! - `commands`: the subcommands: `run` (the loop that drives), `acquire`
//!   (acquire, hold), `release` (renew, release), `inspect` (inspect,
//!   list), `history` (with `metrics`), `doctor`, `man`, and what they
//!   share: `output` (stdout, escaping) and `status_line` (a waiter's line);
//!   they take `config`'s checked settings.
//! - `exit`: the exit status table.
//!
//! `tests/it/architecture.rs` checks these arrows and that there is no cycle.
//!
//! Errors are printed once, here, as `distlock: …`, and mapped to 2 (usage)
//! or 125 (distlock failed); every other status is an outcome returned by
//! the subcommand.

// The entry point is C's `main` below, not std's (see there); the test
// harness brings its own.
#![cfg_attr(not(test), no_main)]

mod cli;
mod clock;
mod commands;
mod config;
mod exit;
mod lease;
mod process;
mod store;

use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::config::UsageError;
use crate::store::StoreError;

/// The process entry point, called by libc's start-up in place of std's
/// `main`, whose runtime start reads `/proc/self/maps` (to place a guard
/// for the main thread's stack-overflow message) on every run: 101k of a
/// `run -- true`'s 877k instructions. What std's start did that distlock
/// relies on is done here first, in the same order: closed standard
/// descriptors reopened on /dev/null, so that no descriptor of ours (the
/// Redis socket, say) becomes CMD's stdout
/// (`run_basics::closed_stdin_and_stdout_reach_cmd_as_dev_null_not_as_distlock_descriptors`),
/// and SIGPIPE ignored, so a closed pipe is an EPIPE to report, not a
/// death (the caller's own disposition, which CMD gets, is recorded just
/// before). What is lost is std's "has overflowed
/// its stack" line: a stack overflow, a bug, is then a plain SIGSEGV. The
/// arguments are std's as before (glibc hands them to std's initialiser).
/// `process::exit` flushes stdout, as returning from std's `main` would.
#[cfg(not(test))]
#[no_mangle]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    process::record_caller_sigpipe();
    start_as_std_would();
    std::process::exit(i32::from(distlock_main()))
}

/// Unit tests run under the test harness's own `main`, which replaces this
/// one; it keeps the real path compiled and linted there too.
#[cfg(test)]
fn main() {
    std::process::exit(i32::from(distlock_main()))
}

/// std's unix start-up, the parts that matter here (its `sys::init`).
#[cfg(not(test))]
fn start_as_std_would() {
    // SAFETY: raw calls on the three standard descriptor numbers, before
    // anything else runs: poll only reads `fds`; open(2) takes a C string
    // literal and returns the lowest free descriptor, which is the closed
    // one, since they are handled in order; signal(2) sets a disposition.
    unsafe {
        let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        });
        let polled = loop {
            if libc::poll(fds.as_mut_ptr(), 3, 0) != -1 {
                break true;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break false;
            }
        };
        for p in &fds {
            let closed = if polled {
                p.revents & libc::POLLNVAL != 0
            } else {
                libc::fcntl(p.fd, libc::F_GETFD) == -1
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
            };
            if closed && libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) != p.fd {
                // As std does: without a stdin, stdout and stderr that are
                // ours, running CMD is not safe.
                libc::abort();
            }
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// distlock's exit status for this command line.
fn distlock_main() -> u8 {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    // The parser's heap, freed, back to the kernel: it is most of what a
    // distlock that holds or waits for hours would keep resident. Given
    // back now, before anything is connected or forked: what the wait
    // needs is faulted in again before it blocks, and a woken waiter
    // faults no more pages with the trim than without (docs/benchmarks.md).
    // SAFETY: malloc_trim only releases free memory of glibc's own heap.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0)
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            commands::stderr_line(format_args!("{}", one_line(&format!("{e:#}"))));
            // A name used with two different --limit values is the user's
            // mistake, told by the store as a kind of its own.
            let usage = e.is::<UsageError>()
                || e.downcast_ref::<StoreError>()
                    .is_some_and(StoreError::is_usage);
            if usage {
                exit::USAGE
            } else {
                exit::FAILURE
            }
        }
    }
}

/// The command line, parsed (`cli::parse`: only the subcommand asked for
/// is built when it can be).
fn parse() -> Result<Cli, clap::Error> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    cli::parse(&argv)
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let global = |g: cli::GlobalArgs| -> anyhow::Result<commands::Global> {
        let security = config::Security::new(
            config::SecurityOptions {
                password_file: g.redis_password_file.clone(),
                tls_ca: g.tls_ca.clone(),
                tls_cert: g.tls_cert.clone(),
                tls_key: g.tls_key.clone(),
                tls_insecure: g.tls_insecure,
            },
            std::env::var("DISTLOCK_REDIS_PASSWORD").ok(),
        )?;
        // Parse first: --tls-insecure with a redis:// URL is a usage error,
        // and its one error line should not come after a warning.
        let url = g.url()?;
        let target = store::Target::parse(&url, &security)?;
        if target.is_etcd() && g.min_replicas > 0 {
            return Err(config::UsageError(
                "--min-replicas has no meaning on etcd: every commit already reaches a majority of its members".into(),
            )
            .into());
        }
        if g.tls_insecure && !g.quiet {
            commands::stderr_line(format_args!(
                "warning: --tls-insecure: the server's certificate is not verified; anyone on the path can impersonate it"
            ));
        }
        Ok(commands::Global {
            target,
            security,
            url,
            prefix: g.prefix,
            min_replicas: g.min_replicas,
            verbose: g.verbose,
            quiet: g.quiet,
        })
    };
    let g = cli.global;
    match cli.command {
        Command::Run(args) => apart(|| commands::run(&global(g)?, args.try_into()?)),
        Command::Acquire(args) => apart(|| commands::acquire(&global(g)?, args.try_into()?)),
        Command::Hold(args) => apart(|| commands::hold(&global(g)?, args.try_into()?)),
        Command::HoldRenewer(args) => apart(|| commands::hold_renewer(&global(g)?, args.into())),
        Command::Renew(args) => apart(|| commands::renew(&global(g)?, args.try_into()?)),
        Command::Release(args) => apart(|| commands::release(&global(g)?, args.try_into()?)),
        Command::Inspect(args) => apart(|| commands::inspect(&global(g)?, args.into())),
        Command::History(args) => apart(|| commands::history(&global(g)?, args.into())),
        Command::Doctor(args) => apart(|| commands::doctor(&global(g)?, args.json)),
        Command::List(args) => apart(|| commands::list(&global(g)?, args.json)),
        Command::Completions { shell } => {
            // clap_complete panics when its writer fails, so render into
            // memory and write here, where a failure can be handled.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut <Cli>::command(), "distlock", &mut script);
            commands::print(&String::from_utf8_lossy(&script))?;
            Ok(exit::SUCCESS)
        }
        // Without --dir, clap requires --exit-table (and forbids both).
        Command::Man { dir: None, .. } => {
            commands::print(&exit::markdown())?;
            Ok(exit::SUCCESS)
        }
        Command::Man { dir: Some(dir), .. } => {
            commands::man(&dir, <Cli>::command(), &cli::HEADINGS)?;
            Ok(exit::SUCCESS)
        }
    }
}

/// Runs one subcommand in a stack frame of its own. Inlined into `run`,
/// the subcommands' locals made its frame 26 KiB, every page of which a
/// holding or waiting `run` touched (stack probes) for locals of `inspect`
/// or `hold` it never uses: 24 KiB of its resident memory.
#[inline(never)]
fn apart<T>(subcommand: impl FnOnce() -> T) -> T {
    subcommand()
}

/// Prints a clap error the distlock way: help and version as clap renders
/// them (exit 0); anything else as one `distlock: …` line, exit 2.
fn clap_error(e: clap::Error) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                exit::USAGE
            } else {
                0
            }
        }
        _ => {
            // clap renders "error: …", maybe indented detail lines, then
            // "Usage: …" and a tip: keep the message, on one line. Not the
            // tip "to pass '-5' as a value, use '-- -5'": after `--` comes
            // NAME or CMD, never an option's value.
            let rendered = e.render().to_string();
            let msg = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .filter(|l| !(l.starts_with("tip: to pass") && l.contains("'-- ")))
                .collect::<Vec<_>>()
                .join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            // A missing NAME is often a name put after `--` (`run -- -x --
            // true`), where `run` reads CMD: say what a name is, and where.
            let rule = if e.kind() == ErrorKind::MissingRequiredArgument && msg.contains("<NAME>") {
                let place = if rendered.contains("<NAME> -- <CMD>") {
                    ", and comes before -- (what follows -- is CMD)"
                } else {
                    ""
                };
                format!("; NAME, the lock name, is {}{place}", config::NAME_RULE)
            } else {
                String::new()
            };
            commands::stderr_line(format_args!("{msg}{rule} (see 'distlock --help')"));
            exit::USAGE
        }
    }
}

/// Error chains are joined with ": " by `{:#}`; make sure no server text
/// sneaks a newline in.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}
