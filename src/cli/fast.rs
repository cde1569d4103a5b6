//! The everyday `distlock run` command line, parsed without clap.
//!
//! A crontab line (`distlock run -w 2h --ttl 2m billing -- ./bill`) is
//! parsed here in a few thousand instructions; building clap's `Command` for
//! `run` and parsing with it was 330k, 42% of a whole `run -- true`, and two
//! dozen page faults of heap and code (callgrind, `perf stat`). This is not
//! a second definition of the command line: it accepts only a plain subset
//! of it (long options as `--opt V` or `--opt=V`, the short `-r`, `-w`,
//! `-E`, `-q` and `-v` on their own, one NAME, `--`, CMD) and answers
//! `None` for anything else (help, an unknown or repeated option, a value
//! that starts with `-` or is empty, a value the option's parser refuses, a
//! conflict), which [`super::parse`] then hands to clap, so every error,
//! help and edge case still comes from clap.
//!
//! What keeps the two equal: [`OPTIONS`] is checked against clap's own
//! definition of `run` (names, short letters, environment variables,
//! defaults: `tests::the_table_is_clap_s_definition_of_run`), the values go
//! through the same value parsers, and a property test compares the two
//! parses over generated command lines in chosen environments
//! (`tests::the_fast_parse_follows_the_environment_as_clap_does`).

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::{Cli, Command, GlobalArgs, LeaseArgs, RunArgs};
use crate::config::{self, WaitOrder};

/// The options of `run` that take a value, in [`OPTIONS`] order.
#[derive(Clone, Copy)]
enum Slot {
    RedisUrl,
    Prefix,
    RedisPasswordFile,
    TlsCa,
    TlsCert,
    TlsKey,
    MinReplicas,
    Limit,
    Ttl,
    Wait,
    WaitOrder,
    ConflictExitCode,
    MinHold,
    RenewEvery,
    KillSignal,
    KillGrace,
    MaxHold,
    AtRiskSignal,
    OncePer,
    DoneExitCode,
    LastRunKeep,
}

/// One option of `run` that takes a value, as clap defines it.
pub(super) struct Opt {
    pub long: &'static str,
    pub short: Option<char>,
    pub env: Option<&'static str>,
    /// A global option's environment variable is parsed even when the
    /// option is given after `run`: clap reads it for the top level, and
    /// refuses a bad value there.
    pub global: bool,
    /// The default, as the text clap parses when nothing else is given.
    pub default: Option<&'static str>,
    slot: Slot,
}

const fn opt(
    long: &'static str,
    short: Option<char>,
    env: Option<&'static str>,
    global: bool,
    default: Option<&'static str>,
    slot: Slot,
) -> Opt {
    Opt {
        long,
        short,
        env,
        global,
        default,
        slot,
    }
}

/// Every option of `run` that takes a value, indexed by [`Slot`].
#[rustfmt::skip]
pub(super) const OPTIONS: [Opt; 21] = [
    opt("redis-url", Some('r'), Some("DISTLOCK_REDIS_URL"), true, Some("redis://127.0.0.1:6379"), Slot::RedisUrl),
    opt("prefix", None, Some("DISTLOCK_PREFIX"), true, Some("distlock"), Slot::Prefix),
    opt("redis-password-file", None, Some("DISTLOCK_REDIS_PASSWORD_FILE"), true, None, Slot::RedisPasswordFile),
    opt("tls-ca", None, Some("DISTLOCK_TLS_CA"), true, None, Slot::TlsCa),
    opt("tls-cert", None, Some("DISTLOCK_TLS_CERT"), true, None, Slot::TlsCert),
    opt("tls-key", None, Some("DISTLOCK_TLS_KEY"), true, None, Slot::TlsKey),
    opt("min-replicas", None, Some("DISTLOCK_MIN_REPLICAS"), true, Some("0"), Slot::MinReplicas),
    opt("limit", None, None, false, Some("1"), Slot::Limit),
    opt("ttl", None, Some("DISTLOCK_TTL"), false, Some("30s"), Slot::Ttl),
    opt("wait", Some('w'), None, false, Some("0"), Slot::Wait),
    opt("wait-order", None, None, false, Some("fair"), Slot::WaitOrder),
    opt("conflict-exit-code", Some('E'), None, false, Some("75"), Slot::ConflictExitCode),
    opt("min-hold", None, None, false, None, Slot::MinHold),
    opt("renew-every", None, None, false, None, Slot::RenewEvery),
    opt("kill-signal", None, None, false, Some("TERM"), Slot::KillSignal),
    opt("kill-grace", None, None, false, None, Slot::KillGrace),
    opt("max-hold", None, None, false, None, Slot::MaxHold),
    opt("at-risk-signal", None, None, false, None, Slot::AtRiskSignal),
    opt("once-per", None, None, false, None, Slot::OncePer),
    opt("done-exit-code", None, None, false, Some("0"), Slot::DoneExitCode),
    opt("last-run-keep", None, None, false, Some("7d"), Slot::LastRunKeep),
];

// `OPTIONS[slot as usize]` is the slot's option.
const _: () = {
    let mut i = 0;
    while i < OPTIONS.len() {
        assert!(OPTIONS[i].slot as usize == i);
        i += 1;
    }
};

/// The flags of `run` (no value, no environment variable): clap's id, long
/// name and short letter.
pub(super) const FLAGS: [(&str, &str, Option<char>); 3] = [
    ("tls_insecure", "tls-insecure", None),
    ("verbose", "verbose", Some('v')),
    ("quiet", "quiet", Some('q')),
];

/// `distlock run …` as clap would parse it, or `None` when the command line
/// is not in the plain subset this handles (then clap decides, errors
/// included). `env` is `std::env::var_os`, or a stand-in in tests.
pub(super) fn parse_run(argv: &[OsString], env: &dyn Fn(&str) -> Option<OsString>) -> Option<Cli> {
    if argv.get(1).map(OsString::as_os_str) != Some(OsStr::new("run")) {
        return None;
    }
    let mut given: [Option<&str>; OPTIONS.len()] = [None; OPTIONS.len()];
    let mut flags = [0u8; FLAGS.len()];
    let mut name = None;
    let mut args = argv[2..].iter();
    let command = loop {
        let arg = args.next()?.to_str()?;
        if arg == "--" {
            break args.as_slice();
        }
        let (i, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (long, inline) = match long.split_once('=') {
                Some((l, v)) => (l, Some(v)),
                None => (long, None),
            };
            if let Some(f) = FLAGS.iter().position(|f| f.1 == long) {
                if inline.is_some() {
                    return None; // --tls-insecure=true: clap's error
                }
                count(&mut flags, f)?;
                continue;
            }
            (OPTIONS.iter().position(|o| o.long == long)?, inline)
        } else if let Some(short) = arg.strip_prefix('-') {
            let mut letters = short.chars();
            let (c, None) = (letters.next()?, letters.next()) else {
                return None; // clustered (-vq) or attached (-w5m): clap's
            };
            if let Some(f) = FLAGS.iter().position(|f| f.2 == Some(c)) {
                count(&mut flags, f)?;
                continue;
            }
            (OPTIONS.iter().position(|o| o.short == Some(c))?, None)
        } else {
            if name.is_some() {
                return None; // a second positional before `--`: clap's error
            }
            name = Some(arg);
            continue;
        };
        let value = match inline {
            Some(v) => v,
            None => args.next()?.to_str()?,
        };
        if value.is_empty() || value.starts_with('-') || given[i].replace(value).is_some() {
            return None;
        }
    };
    let name = config::parse_name(name?).ok()?;
    if command.is_empty() {
        return None;
    }
    let [tls_insecure, verbose, quiet] = flags;
    if quiet > 0 && verbose > 0 {
        return None; // --quiet conflicts with --verbose: clap's error
    }
    if given[Slot::DoneExitCode as usize].is_some() && given[Slot::OncePer as usize].is_none() {
        return None; // --done-exit-code requires --once-per: clap's error
    }

    // As clap: the environment stands in for an option not given, through
    // the same checks as a typed value; a global option's variable is read
    // and checked even when the option is given after `run`, since clap
    // still parses it for the top level.
    let from_env: [Option<OsString>; OPTIONS.len()] = std::array::from_fn(|i| {
        let o = &OPTIONS[i];
        o.env
            .filter(|_| given[i].is_none() || o.global)
            .and_then(env)
    });
    let mut texts: [Option<&str>; OPTIONS.len()] = [None; OPTIONS.len()];
    for (i, text) in texts.iter_mut().enumerate() {
        let env_text = match &from_env[i] {
            Some(v) => Some(v.to_str().filter(|v| !v.is_empty())?),
            None => None,
        };
        if let (Some(_), Some(t)) = (given[i], env_text) {
            if !global_value_is_valid(i, t) {
                return None; // clap refuses it, though the option was given
            }
        }
        *text = given[i].or(env_text).or(OPTIONS[i].default);
    }
    let text = |slot: Slot| texts[slot as usize];
    let required =
        |slot: Slot| text(slot).expect("every option read with `required` has a default");
    fn optional<T>(text: Option<&str>, parse: fn(&str) -> Result<T, String>) -> Option<Option<T>> {
        match text {
            Some(t) => parse(t).ok().map(Some),
            None => Some(None),
        }
    }
    let path = |slot: Slot| text(slot).map(PathBuf::from);

    Some(Cli {
        global: GlobalArgs {
            redis_url: required(Slot::RedisUrl).to_owned(),
            prefix: config::parse_prefix(required(Slot::Prefix)).ok()?,
            redis_password_file: path(Slot::RedisPasswordFile),
            tls_ca: path(Slot::TlsCa),
            tls_cert: path(Slot::TlsCert),
            tls_key: path(Slot::TlsKey),
            tls_insecure: tls_insecure > 0,
            min_replicas: plain_number(required(Slot::MinReplicas))?,
            verbose,
            quiet: quiet > 0,
        },
        command: Command::Run(RunArgs {
            name,
            lease: LeaseArgs {
                limit: plain_number(required(Slot::Limit)).filter(|n| (1..=10000).contains(n))?,
                ttl: config::parse_expiry(required(Slot::Ttl)).ok()?,
                wait: config::parse_wait(required(Slot::Wait)).ok()?,
                wait_order: match required(Slot::WaitOrder) {
                    "fair" => WaitOrder::Fair,
                    "any" => WaitOrder::Any,
                    _ => return None,
                },
                conflict_exit_code: config::parse_exit_code(required(Slot::ConflictExitCode))
                    .ok()?,
                min_hold: optional(text(Slot::MinHold), config::parse_expiry)?,
            },
            renew_every: optional(text(Slot::RenewEvery), config::parse_duration)?,
            kill_signal: config::parse_signal(required(Slot::KillSignal)).ok()?,
            kill_grace: optional(text(Slot::KillGrace), config::parse_duration)?,
            max_hold: optional(text(Slot::MaxHold), config::parse_duration)?,
            at_risk_signal: optional(text(Slot::AtRiskSignal), config::parse_any_signal)?,
            once_per: optional(text(Slot::OncePer), config::parse_window)?,
            done_exit_code: config::parse_exit_code(required(Slot::DoneExitCode)).ok()?,
            last_run_keep: config::parse_expiry(required(Slot::LastRunKeep)).ok()?,
            command: command.to_vec(),
        }),
    })
}

/// Counts one more use of flag `f`, or `None` where clap refuses it: only
/// `--verbose` counts up, the others are an error the second time.
fn count(flags: &mut [u8; FLAGS.len()], f: usize) -> Option<()> {
    if flags[f] > 0 && FLAGS[f].0 != "verbose" {
        return None;
    }
    flags[f] = flags[f].checked_add(1)?;
    Some(())
}

/// Whether clap's parser for global option `i` takes `text`.
fn global_value_is_valid(i: usize, text: &str) -> bool {
    match OPTIONS[i].slot {
        Slot::Prefix => config::parse_prefix(text).is_ok(),
        Slot::MinReplicas => plain_number(text).is_some(),
        // Strings and paths: any non-empty text.
        _ => true,
    }
}

/// A `u32` written as plain digits; anything clap's number parser might
/// read differently (`+5`, spaces, overflow) is left to clap.
fn plain_number(s: &str) -> Option<u32> {
    if s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
