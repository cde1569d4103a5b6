//! The command line without Redis: help, version, completions.

use crate::common::*;

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Output, Stdio};
use std::time::Duration;

/// Runs distlock with `args` (no Redis involved), bounded in time.
fn run(args: &[&str]) -> Output {
    // Through files, not pipes: PowerShell's completions are past 64 KiB,
    // more than a pipe holds, so waiting before reading would hang.
    bare_distlock()
        .env_remove("RUST_BACKTRACE")
        .args(args)
        .output_within(Duration::from_secs(10))
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("output is UTF-8")
}

/// The options of the contract's `run` table.
const RUN_OPTIONS: &[&str] = &[
    "--ttl",
    "--wait",
    "-w",
    "--conflict-exit-code",
    "-E",
    "--renew-every",
    "--kill-signal",
    "--kill-grace",
];

/// The contract's global options.
const GLOBAL_OPTIONS: &[&str] = &[
    "--url",
    "-r",
    "--prefix",
    "--verbose",
    "--quiet",
    "DISTLOCK_REDIS_URL",
    "DISTLOCK_PREFIX",
];

#[test]
fn top_level_help_exits_0_and_lists_run_and_the_global_options() {
    for flag in ["--help", "-h"] {
        let out = run(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {out:?}");
        let help = text(&out.stdout);
        assert!(help.contains("Usage: distlock"), "{flag}: {help}");
        assert!(help.contains("run"), "{flag}: {help}");
        assert!(help.contains("completions"), "{flag}: {help}");
        for opt in GLOBAL_OPTIONS {
            assert!(help.contains(opt), "{flag} must mention {opt}: {help}");
        }
        assert_eq!(text(&out.stderr), "", "{flag}");
    }
}

#[test]
fn run_help_exits_0_and_mentions_every_run_option_and_distlock_ttl() {
    for args in [
        &["run", "--help"][..],
        &["run", "-h"][..],
        &["help", "run"][..],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let help = text(&out.stdout);
        assert!(help.contains("Usage: distlock run"), "{args:?}: {help}");
        for opt in RUN_OPTIONS.iter().chain(GLOBAL_OPTIONS) {
            assert!(help.contains(opt), "{args:?} must mention {opt}: {help}");
        }
        assert!(help.contains("DISTLOCK_TTL"), "{args:?}: {help}");
        assert!(help.contains("forever"), "{args:?}: --wait forever: {help}");
        assert_eq!(text(&out.stderr), "", "{args:?}");
    }
}

/// The option headings of `cli.rs`, in the order `run --help` shows them.
const HEADINGS: &[&str] = &[
    "Lease",
    "Waiting",
    "Stopping CMD",
    "Cron and CI",
    "Connection and security",
];

/// Splits clap's help text into its sections: each line like `Lease:` at
/// the left margin starts one, and the options listed under it are the
/// `-x`/`--xyz` words that start its (shallowly indented) option lines.
/// Descriptions are indented deeper and never count, so an option that
/// only *mentions* another (`needs --tls-key`) does not move it.
fn help_sections(help: &str) -> Vec<(String, Vec<String>)> {
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        if indent == 0 && line.ends_with(':') {
            sections.push((line.trim_end_matches(':').to_string(), Vec::new()));
            continue;
        }
        let trimmed = line.trim_start();
        let is_option = (1..=6).contains(&indent)
            && trimmed.starts_with('-')
            && trimmed[1..].starts_with(|c: char| c == '-' || c.is_ascii_alphanumeric());
        if let (true, Some((_, opts))) = (is_option, sections.last_mut()) {
            opts.extend(
                trimmed
                    .split_whitespace()
                    .map(|w| w.trim_end_matches(',').trim_end_matches("..."))
                    .take_while(|w| w.starts_with('-'))
                    .map(str::to_string),
            );
        }
    }
    sections
}

/// The heading an option is listed under; fails if it is under none or
/// under several.
fn heading_of<'a>(sections: &'a [(String, Vec<String>)], opt: &str, help: &str) -> &'a str {
    let found: Vec<&str> = sections
        .iter()
        .filter(|(_, opts)| opts.iter().any(|o| o == opt))
        .map(|(h, _)| h.as_str())
        .collect();
    assert_eq!(
        found.len(),
        1,
        "{opt} must be under exactly one heading, is under {found:?}: {help}"
    );
    found[0]
}

/// `run --help` groups its options under headings, so
/// the run options and the global connection options are no longer
/// shuffled together; short and long help alike.
#[test]
fn run_help_groups_the_options_under_headings() {
    let expected: &[(&str, &[&str])] = &[
        (
            "Lease",
            &["--ttl", "--limit", "--renew-every", "--min-hold"],
        ),
        (
            "Waiting",
            &["-w", "--wait", "--wait-order", "-E", "--conflict-exit-code"],
        ),
        (
            "Stopping CMD",
            &[
                "--kill-signal",
                "--kill-grace",
                "--max-hold",
                "--at-risk-signal",
            ],
        ),
        ("Cron and CI", &["--last-run-keep"]),
        (
            "Connection and security",
            &[
                "-r",
                "--url",
                "--prefix",
                "--redis-password-file",
                "--tls-ca",
                "--tls-cert",
                "--tls-key",
                "--tls-insecure",
                "--min-replicas",
            ],
        ),
        (
            "Options",
            &["-v", "--verbose", "-q", "--quiet", "-h", "--help"],
        ),
    ];
    for flag in ["--help", "-h"] {
        let out = run(&["run", flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}: {out:?}");
        let help = text(&out.stdout);
        let sections = help_sections(&help);
        let names: Vec<&str> = sections.iter().map(|(h, _)| h.as_str()).collect();
        let shown: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| HEADINGS.contains(n))
            .collect();
        assert_eq!(
            shown, HEADINGS,
            "run {flag}: headings and their order: {help}"
        );
        for (heading, opts) in expected {
            for opt in *opts {
                assert_eq!(
                    heading_of(&sections, opt, &help),
                    *heading,
                    "run {flag}: {opt}: {help}"
                );
            }
        }
    }
}

/// An option and the heading it must be listed under.
type OptionUnder = (&'static str, &'static str);

/// Every other subcommand uses the same headings for the options it
/// shares with `run`, and the top-level help puts the connection options
/// under their heading too.
#[test]
fn every_subcommand_help_uses_the_same_headings() {
    let cases: &[(&[&str], &[OptionUnder])] = &[
        (
            &["--help"],
            &[("--url", "Connection and security"), ("--quiet", "Options")],
        ),
        (
            &["acquire", "--help"],
            &[
                ("--ttl", "Lease"),
                ("--owner", "Lease"),
                ("--wait", "Waiting"),
                ("--tls-ca", "Connection and security"),
                ("--json", "Options"),
            ],
        ),
        (
            &["hold", "--help"],
            &[
                ("--max", "Lease"),
                ("--wait", "Waiting"),
                ("--prefix", "Connection and security"),
            ],
        ),
        (
            &["renew", "--help"],
            &[
                ("--ttl", "Lease"),
                ("--owner", "Lease"),
                ("--tls-key", "Connection and security"),
            ],
        ),
        (
            &["release", "--help"],
            &[
                ("--owner", "Lease"),
                ("--force", "Options"),
                ("-r", "Connection and security"),
            ],
        ),
        (
            &["inspect", "--help"],
            &[
                ("--limit", "Lease"),
                ("--tls-cert", "Connection and security"),
            ],
        ),
        (
            &["list", "--help"],
            &[("--min-replicas", "Connection and security")],
        ),
        (
            &["doctor", "--help"],
            &[("--tls-insecure", "Connection and security")],
        ),
    ];
    for (args, expected) in cases {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let help = text(&out.stdout);
        let sections = help_sections(&help);
        for (opt, heading) in *expected {
            assert_eq!(
                heading_of(&sections, opt, &help),
                *heading,
                "{args:?}: {opt}"
            );
        }
    }
}

/// `--version` is `distlock X.Y.Z`, plus ` (abc1234)` when built from a git
/// checkout (build.rs): then it must be the commit the tests build from.
#[test]
fn version_exits_0_and_prints_the_package_version() {
    let root = env!("CARGO_MANIFEST_DIR");
    let head = std::path::Path::new(root)
        .join(".git")
        .exists()
        .then(|| {
            std::process::Command::new("git")
                .args(["-C", root, "rev-parse", "HEAD"])
                .try_output_within(Duration::from_secs(10))
                .ok()
                .filter(|o| o.status.success())
                .map(|o| text(&o.stdout).trim().to_string())
        })
        .flatten();
    for args in [&["--version"][..], &["-V"][..], &["run", "--version"][..]] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        let version = text(&out.stdout);
        let line = version.trim_end();
        assert_eq!(version.lines().count(), 1, "{args:?}: {version}");
        let (name, rest) = line.split_once(' ').expect("NAME VERSION");
        assert!(name.starts_with("distlock"), "{args:?}: {version}");
        let (number, commit) = match rest.split_once(' ') {
            Some((n, c)) => (n, Some(c)),
            None => (rest, None),
        };
        assert_eq!(number, env!("CARGO_PKG_VERSION"), "{args:?}: {version}");
        match (&head, commit) {
            (Some(head), Some(commit)) => {
                let hash = commit
                    .strip_prefix('(')
                    .and_then(|c| c.strip_suffix(')'))
                    .unwrap_or_else(|| panic!("{args:?}: commit in parentheses: {version}"));
                assert!(
                    hash.len() >= 7 && head.starts_with(hash),
                    "{args:?}: {hash} is not HEAD {head}: {version}"
                );
            }
            (None, None) => {}
            (head, commit) => panic!("{args:?}: HEAD {head:?} but --version says {commit:?}"),
        }
    }
}

#[test]
fn completions_for_every_shell_are_non_empty_and_mention_distlock() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {out:?}");
        let script = text(&out.stdout);
        assert!(!script.trim().is_empty(), "{shell}: empty completions");
        assert!(script.contains("distlock"), "{shell}: {script}");
        assert!(script.contains("ttl"), "{shell}: run's options: {script}");
        assert_eq!(text(&out.stderr), "", "{shell}");
    }
}

#[test]
fn completions_for_an_unknown_shell_are_a_usage_error() {
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.starts_with("distlock: "), "{err:?}");
    assert!(!err.contains("panicked"), "{err:?}");
}

/// `distlock completions bash | head -1` closes the pipe early: distlock
/// must not panic (no Rust debug output, per the contract).
#[test]
fn completions_into_a_closed_pipe_do_not_panic() {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two fds that we then own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both fds were just created and are owned by nobody else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // Close the reading side before distlock writes: every write fails with
    // EPIPE, deterministically.
    drop(read_end);
    let mut child = bare_distlock()
        .env_remove("RUST_BACKTRACE")
        .args(["completions", "bash"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_with_timeout(&mut child, Duration::from_secs(10));
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("RUST_BACKTRACE"), "{err}");
    assert!(err.lines().count() <= 1, "{err}");
    assert_ne!(out.status.code(), Some(101), "101 is Rust's panic status");
}

/// A Redis URL where nothing listens: a command line that gets past the
/// parse fails to connect (125), so a usage error (2) is the parse's.
const NOWHERE: &str = "redis://127.0.0.1:1";

/// The one `distlock: ` line of a usage error (exit 2).
fn usage_line(args: &[&str]) -> String {
    let out = run(&[&["-r", NOWHERE], args].concat());
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
    assert!(err.starts_with("distlock: "), "{args:?}: {err:?}");
    err
}

/// The contract's lock name: not starting with `-`, since such a name
/// could be given to `acquire` (after `--`) and then never to `run`.
#[test]
fn a_name_starting_with_a_dash_is_a_usage_error_that_states_the_rule() {
    for args in [
        &["acquire", "--", "-foo"][..],
        &["hold", "--", "-foo"],
        &["renew", "--owner", "o", "--", "-foo"],
        &["release", "--owner", "o", "--", "-foo"],
        &["release", "--force", "--", "-"],
        &["inspect", "--", "--x"],
    ] {
        let err = usage_line(args);
        assert!(err.contains("A-Z a-z 0-9"), "{args:?}: {err}");
        assert!(err.contains("not starting with -"), "{args:?}: {err}");
    }
    // A dash elsewhere is fine: these get as far as connecting.
    for name in ["a-", "a-b", "a--b"] {
        let out = run(&["-r", NOWHERE, "acquire", name]);
        assert_eq!(out.status.code(), Some(125), "{name}: {out:?}");
    }
}

/// `run -- -foo -- true`: after `--` `run` reads CMD, so NAME is missing.
/// The line says what a name is and where it goes; before the fix it
/// said only that <NAME> was not provided.
#[test]
fn a_name_missing_from_run_states_the_rule_and_its_place() {
    for args in [
        &["run", "--", "-foo", "--", "true"][..],
        &["run", "--", "foo", "--", "true"],
        &["acquire"],
    ] {
        let err = usage_line(args);
        assert!(err.contains("<NAME>"), "{args:?}: {err}");
        assert!(err.contains("A-Z a-z 0-9"), "{args:?}: {err}");
        assert!(err.contains("not starting with -"), "{args:?}: {err}");
        if args[0] == "run" {
            assert!(err.contains("before --"), "{args:?}: {err}");
        }
    }
}

/// A negative duration or exit code is an invalid value: the one line says
/// so, and does not advise `-- -5`, which would make `-5s` the NAME or CMD.
#[test]
fn a_negative_value_is_an_invalid_value_not_a_tip_to_use_double_dash() {
    for (args, option) in [
        (&["run", "--ttl", "-5s", "x", "--", "true"][..], "--ttl"),
        (
            &["run", "-E", "-1", "x", "--", "true"],
            "--conflict-exit-code",
        ),
        (&["run", "x", "-w", "-1s", "--", "true"], "--wait"),
        (
            &["run", "--renew-every", "-1s", "x", "--", "true"],
            "--renew-every",
        ),
        (
            &["run", "--kill-grace", "-1s", "x", "--", "true"],
            "--kill-grace",
        ),
        (&["run", "--limit", "-2", "x", "--", "true"], "--limit"),
        (
            &["run", "--once-per", "-5m", "x", "--", "true"],
            "--once-per",
        ),
        (&["acquire", "--ttl", "-5s", "x"], "--ttl"),
        (&["acquire", "-E", "-1", "x"], "--conflict-exit-code"),
        (&["renew", "--owner", "o", "--ttl", "-5s", "x"], "--ttl"),
    ] {
        let err = usage_line(args);
        assert!(err.contains("invalid value"), "{args:?}: {err}");
        assert!(err.contains(option), "{args:?}: {err}");
        assert!(!err.contains("tip"), "{args:?}: {err}");
        assert!(!err.contains("'-- "), "{args:?}: {err}");
    }
    let err = usage_line(&["run", "--ttl", "-5s", "x", "--", "true"]);
    assert!(err.contains("cannot be negative"), "{err}");
}
