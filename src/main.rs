//! distlock: run a command while holding a lease in Redis, so that one
//! worker at a time acts across many machines.
//!
//! # Layout
//!
//! Data flows one way: args → config → acquire → spawn → supervise/renew →
//! release → exit code.
//!
//! - `cli`: the clap definition; no I/O.
//! - `config`: checked values (names, durations, signals, timings, owner ids).
//! - `store`: the only Redis code: `Store` (the lock operations), `scripts`
//!   (every Lua script, one round trip each), `target` (URLs, TLS, Sentinel,
//!   Cluster, connecting with timeouts, error sentences without secrets).
//! - `lease`: taking the lease (and waiting), the renewer thread, the clock.
//! - `supervise`: signals, spawning CMD, the terminal, the guardian, reaping.
//! - `commands`: the subcommands: `run` (with its supervisor), `manual`
//!   (acquire, hold, renew, release, inspect, list), `doctor`, `man`.
//! - `exit`: the exit status table.
//!
//! Errors are printed once, here, as `distlock: …`, and mapped to 2 (usage)
//! or 125 (distlock failed); every other status is an outcome returned by
//! the subcommand.

mod cli;
mod commands;
mod config;
mod exit;
mod lease;
mod spawn;
mod store;
mod supervise;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};
use crate::config::UsageError;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(clap_error(e)),
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            commands::stderr_line(format_args!("{}", one_line(&format!("{e:#}"))));
            ExitCode::from(if e.is::<UsageError>() {
                exit::USAGE
            } else {
                exit::FAILURE
            })
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<u8> {
    let global = |g: cli::GlobalArgs| -> anyhow::Result<commands::Global> {
        let (password, password_from_env) = password(&g)?;
        let security = store::Security {
            password,
            password_from_env,
            tls_ca: g.tls_ca.clone(),
            tls_cert: g.tls_cert.clone(),
            tls_key: g.tls_key.clone(),
            tls_insecure: g.tls_insecure,
        };
        // Parse first: --tls-insecure with a redis:// URL is a usage error,
        // and its one error line should not come after a warning.
        let target = store::Target::parse(&g.redis_url, &security)?;
        if g.tls_insecure && !g.quiet {
            commands::stderr_line(format_args!(
                "warning: --tls-insecure: the server's certificate is not verified; anyone on the path can impersonate it"
            ));
        }
        Ok(commands::Global {
            target,
            security,
            url: g.redis_url,
            prefix: g.prefix,
            min_replicas: g.min_replicas,
            verbose: g.verbose,
            quiet: g.quiet,
        })
    };
    match cli.command {
        Command::Run(args) => commands::run(&global(cli.global)?, args),
        Command::Acquire(args) => commands::acquire(&global(cli.global)?, args),
        Command::Hold(args) => commands::hold(&global(cli.global)?, args),
        Command::HoldRenewer(args) => commands::hold_renewer(&global(cli.global)?, args),
        Command::Renew(args) => commands::renew(&global(cli.global)?, args),
        Command::Release(args) => commands::release(&global(cli.global)?, args),
        Command::Inspect(args) => commands::inspect(&global(cli.global)?, args),
        Command::Doctor(args) => commands::doctor(&global(cli.global)?, args),
        Command::List(args) => commands::list(&global(cli.global)?, args),
        Command::Completions { shell } => {
            // clap_complete panics when its writer fails, so render into
            // memory and write here, where a failure can be handled.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "distlock", &mut script);
            let mut out = std::io::stdout().lock();
            match out.write_all(&script).and_then(|()| out.flush()) {
                Ok(()) => Ok(0),
                // The reader went away (`| head`): end quietly, with the
                // status a SIGPIPE death would give, as C tools do.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    Ok(exit::signal_code(libc::SIGPIPE))
                }
                Err(e) => Err(anyhow::Error::new(e).context("cannot write the completions")),
            }
        }
        Command::Man { dir } => {
            commands::man(&dir)?;
            Ok(0)
        }
    }
}

/// The Redis password from outside the URL, so it need not show in `ps`:
/// `--redis-password-file` (first line, trailing newline stripped) wins over
/// `DISTLOCK_REDIS_PASSWORD`, which wins over a password in the URL.
fn password(g: &cli::GlobalArgs) -> anyhow::Result<(Option<String>, bool)> {
    if let Some(path) = &g.redis_password_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            UsageError(format!(
                "cannot read --redis-password-file {}: {e}",
                path.display()
            ))
        })?;
        let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
        if line.is_empty() {
            anyhow::bail!(UsageError(format!(
                "--redis-password-file {} is empty",
                path.display()
            )));
        }
        return Ok((Some(line.to_owned()), false));
    }
    let env = std::env::var("DISTLOCK_REDIS_PASSWORD")
        .ok()
        .filter(|p| !p.is_empty());
    let from_env = env.is_some();
    Ok((env, from_env))
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
            // "Usage: …" and a tip: keep the message, on one line.
            let rendered = e.render().to_string();
            let msg = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            commands::stderr_line(format_args!("{msg} (see 'distlock --help')"));
            exit::USAGE
        }
    }
}

/// Error chains are joined with ": " by `{:#}`; make sure no server text
/// sneaks a newline in.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}
