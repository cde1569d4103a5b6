//! The fast `run` parse against clap's: the same definition, and the same
//! result for every command line it accepts.

use std::cell::Cell;
use std::ffi::OsString;

use clap::CommandFactory;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::{parse_run, FLAGS, OPTIONS};
use crate::cli::{parse_with, Cli, OnlyRun};

fn argv(words: &[&str]) -> Vec<OsString> {
    ["distlock", "run"]
        .iter()
        .chain(words)
        .map(OsString::from)
        .collect()
}

fn real_env(var: &str) -> Option<OsString> {
    std::env::var_os(var)
}

#[test]
fn the_table_is_clap_s_definition_of_run() {
    let mut cmd = Cli::<OnlyRun>::command();
    cmd.build();
    let run = cmd.find_subcommand("run").expect("run");
    let (mut options, mut flags, mut positionals) = (0, 0, vec![]);
    for arg in run.get_arguments() {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        if arg.is_positional() {
            positionals.push(id);
        } else if arg.get_action().takes_values() {
            let o = OPTIONS
                .iter()
                .find(|o| Some(o.long) == arg.get_long())
                .unwrap_or_else(|| panic!("{id} is not in fast::OPTIONS"));
            assert_eq!(arg.get_short(), o.short, "{id}");
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), o.env, "{id}");
            assert_eq!(arg.is_global_set(), o.global, "{id}");
            let defaults: Vec<_> = arg
                .get_default_values()
                .iter()
                .map(|d| d.to_str())
                .collect();
            assert_eq!(
                defaults,
                o.default.map(Some).into_iter().collect::<Vec<_>>(),
                "{id}"
            );
            // What the fast path assumes of every option: one value, as
            // `--opt V` or `--opt=V`, never required.
            assert!(!arg.is_require_equals_set(), "{id}");
            assert!(!arg.is_required_set(), "{id}");
            assert_eq!(arg.get_num_args(), Some(1.into()), "{id}");
            assert_eq!(arg.get_value_delimiter(), None, "{id}");
            options += 1;
        } else {
            let f = FLAGS
                .iter()
                .find(|f| f.0 == id)
                .unwrap_or_else(|| panic!("--{id} is not in fast::FLAGS"));
            assert_eq!((arg.get_long(), arg.get_short()), (Some(f.1), f.2), "{id}");
            assert!(arg.get_env().is_none(), "{id}");
            flags += 1;
        }
    }
    assert_eq!((options, flags), (OPTIONS.len(), FLAGS.len()));
    assert_eq!(positionals, ["name", "command"]);
    // The one conflict the fast path knows of; `requires` has no getter, so
    // `every_option_alone_is_taken_as_clap_takes_it` checks that one.
    let mut conflicts: Vec<_> = run
        .get_arguments()
        .flat_map(|a| {
            run.get_arg_conflicts_with(a)
                .into_iter()
                .map(move |b| (a.get_id().as_str(), b.get_id().as_str()))
        })
        .collect();
    conflicts.sort_unstable();
    assert_eq!(conflicts, [("quiet", "verbose")]);
}

/// Each option on its own, with a value it takes: the fast path answers
/// exactly where clap accepts the line, and clap refuses only
/// `--done-exit-code` (it requires `--once-per`), so an option that gains
/// a `requires` fails here until the fast path learns it. Needs a clean
/// environment, as the common lines do.
fn every_option_alone_is_taken_as_clap_takes_it() {
    for o in &OPTIONS {
        let argv = argv(&[
            &format!("--{}", o.long),
            plausible(o.long)[0],
            "x",
            "--",
            "t",
        ]);
        let clap = parse_with::<OnlyRun>(&argv);
        assert_eq!(clap.is_ok(), o.long != "done-exit-code", "--{}", o.long);
        assert_eq!(
            parse_run(&argv, &real_env).is_some(),
            clap.is_ok(),
            "--{}",
            o.long
        );
    }
}

/// The README's everyday lines all take the fast path, to clap's values.
/// Called by [`compare_in_a_chosen_environment`] where no `DISTLOCK_*`
/// variable is set: a developer's own (say an empty `DISTLOCK_PREFIX`)
/// would rightly send every line to clap.
fn the_common_lines_take_the_fast_path_and_agree_with_clap() {
    let lines: &[&[&str]] = &[
        &["billing", "--", "/usr/local/bin/bill-customers"],
        &["-w", "2m", "deploy/prod", "--", "./deploy.sh"],
        &[
            "--ttl",
            "2m",
            "--renew-every",
            "20s",
            "reindex",
            "--",
            "./reindex",
            "--full",
        ],
        &["-E", "0", "report", "--", "./make-report"],
        &[
            "--wait",
            "2h",
            "--once-per",
            "20h",
            "nightly",
            "--",
            "./bill",
        ],
        &[
            "--wait=forever",
            "--wait-order=any",
            "-q",
            "x",
            "--",
            "true",
        ],
        &[
            "x",
            "-r",
            "redis://10.0.0.1:6380/2",
            "--prefix",
            "ci",
            "-v",
            "-v",
            "--",
            "true",
        ],
        &[
            "--tls-insecure",
            "--tls-ca",
            "/ca.pem",
            "--min-replicas",
            "1",
            "x",
            "--",
            "t",
        ],
        &[
            "--kill-signal",
            "INT",
            "--kill-grace",
            "2s",
            "--max-hold",
            "1h",
            "x",
            "--",
            "t",
        ],
        &[
            "--at-risk-signal",
            "USR1",
            "--limit",
            "3",
            "--min-hold",
            "5s",
            "x",
            "--",
            "t",
        ],
        &[
            "--once-per",
            "1d",
            "--done-exit-code",
            "3",
            "--last-run-keep",
            "30d",
            "x",
            "--",
            "t",
        ],
    ];
    for words in lines {
        let argv = argv(words);
        let fast = parse_run(&argv, &real_env).unwrap_or_else(|| panic!("declined {words:?}"));
        let clap = parse_with::<OnlyRun>(&argv).expect("clap accepts it");
        assert_eq!(format!("{fast:?}"), format!("{clap:?}"), "{words:?}");
    }
}

#[test]
fn anything_unusual_is_left_to_clap() {
    let lines: &[&[&str]] = &[
        &["--help"],
        &["-h", "x", "--", "t"],
        &["-V"],
        &["x"],                                          // no CMD
        &["x", "--"],                                    // no CMD
        &["--", "t"],                                    // no NAME
        &["x", "y", "--", "t"],                          // two NAMEs
        &["bad name", "--", "t"],                        // the name parser refuses it
        &["--ttl", "5s", "--ttl", "6s", "x", "--", "t"], // repeated
        &["-q", "-q", "x", "--", "t"],
        &["-vq", "x", "--", "t"],                   // clustered
        &["-w5m", "x", "--", "t"],                  // attached value
        &["-q", "-v", "x", "--", "t"],              // conflict
        &["--done-exit-code", "3", "x", "--", "t"], // requires --once-per
        &["--once-per", "-5m", "x", "--", "t"],     // a hyphen value
        &["--ttl=", "x", "--", "t"],                // empty
        &["--ttl", "soon", "x", "--", "t"],         // refused value
        &["--limit", "0", "x", "--", "t"],
        &["--limit", "+5", "x", "--", "t"], // clap's number syntax
        &["--wait-order", "FAIR", "x", "--", "t"],
        &["--tls-insecure=true", "x", "--", "t"],
        &["--bogus", "x", "--", "t"],
        &["--verb", "x", "--", "t"], // no abbreviations
        // A value that looks like an option: clap takes it for one.
        &["-r", "--prefix=ci", "x", "--", "t"],
        &["--tls-ca", "-x", "x", "--", "t"],
        &["x", "-r", "--redis-url=5s", "--", "t"],
    ];
    for words in lines {
        assert!(
            parse_run(&argv(words), &|_| None).is_none(),
            "accepted {words:?}"
        );
    }
    let env = |var: &str| (var == "DISTLOCK_TTL").then(|| OsString::from(""));
    assert!(
        parse_run(&argv(&["x", "--", "t"]), &env).is_none(),
        "an empty DISTLOCK_TTL"
    );
    let env = |var: &str| (var == "DISTLOCK_TTL").then(|| OsString::from("5s"));
    let cli = parse_run(&argv(&["x", "--", "t"]), &env).expect("DISTLOCK_TTL=5s");
    let crate::cli::Command::Run(run) = cli.command else {
        unreachable!()
    };
    assert_eq!(run.lease.ttl, std::time::Duration::from_secs(5));
    let cli = parse_run(&argv(&["--ttl", "7s", "x", "--", "t"]), &env).expect("--ttl over the env");
    let crate::cli::Command::Run(run) = cli.command else {
        unreachable!()
    };
    assert_eq!(run.lease.ttl, std::time::Duration::from_secs(7));
}

/// A negative number or duration is an invalid value of its option, told
/// by the option's own parser, never an unknown argument (whose tip, to
/// pass it after `--`, would make it NAME or CMD); the fast path leaves
/// such lines to clap.
#[test]
fn negative_values_are_invalid_values_of_their_option() {
    let textual = [
        "redis-url",
        "prefix",
        "redis-password-file",
        "tls-ca",
        "tls-cert",
        "tls-key",
        "wait-order",
    ];
    for o in OPTIONS.iter().filter(|o| !textual.contains(&o.long)) {
        // (`-0` is 0 to clap's number parsers, not a negative number.)
        let first = plausible(o.long).iter().find(|v| **v != "0").unwrap();
        for value in [format!("-{first}"), "-1".into(), "-5s".into()] {
            let mut words = vec![format!("--{}", o.long), value.clone()];
            if o.long == "done-exit-code" {
                words.extend(["--once-per".into(), "1d".into()]);
            }
            words.extend(["x".into(), "--".into(), "t".into()]);
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let argv = argv(&words);
            assert!(parse_run(&argv, &|_| None).is_none(), "{words:?}");
            let e = parse_with::<OnlyRun>(&argv).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{words:?}: {e}"
            );
            assert!(e.to_string().contains(&value), "{words:?}: {e}");
        }
    }
}

/// Values the option `long` takes.
fn plausible(long: &str) -> &'static [&'static str] {
    match long {
        "redis-url" => &["redis://h:1", "unix:///s"],
        "prefix" => &["ci", "a.b"],
        "redis-password-file" | "tls-ca" | "tls-cert" | "tls-key" => &["/tmp/f"],
        "min-replicas" => &["0", "2"],
        "limit" => &["1", "3"],
        "ttl" | "min-hold" | "renew-every" | "kill-grace" | "max-hold" => &["5s", "2m", "1ms"],
        "wait" => &["0", "forever", "5s"],
        "wait-order" => &["fair", "any"],
        "conflict-exit-code" | "done-exit-code" => &["0", "75"],
        "kill-signal" => &["INT", "kill", "9"],
        "at-risk-signal" => &["USR1", "hup"],
        "once-per" | "last-run-keep" => &["1d", "20h"],
        _ => panic!("no plausible values for --{long}"),
    }
}

/// One option, flag or stray word of a generated command line.
fn word() -> impl Strategy<Value = Vec<String>> {
    let values = prop::sample::select(vec![
        "5s",
        "30s",
        "2m",
        "0",
        "1",
        "3",
        "75",
        "255",
        "256",
        "10000",
        "10001",
        "forever",
        "fair",
        "any",
        "TERM",
        "kill",
        "SIGUSR1",
        "STOP",
        "9",
        "7d",
        "100000y",
        "200000y",
        "1ms",
        "0s",
        "redis://h:1",
        "unix:///s",
        "/tmp/f",
        "ci",
        "a b",
        "",
        "-5m",
        "-",
        "+5",
        "007",
        "x",
    ]);
    let option = (
        0..OPTIONS.len(),
        values.clone(),
        any::<prop::sample::Index>(),
        0..6u8,
    );
    let option = option.prop_map(|(i, v, good, form)| {
        let o = &OPTIONS[i];
        // Mostly a value this option takes, so that many lines are valid.
        let v = match form {
            0 | 1 => v,
            _ => *good.get(plausible(o.long)),
        };
        match (form % 3, o.short) {
            (0, _) => vec![format!("--{}={v}", o.long)],
            (1, Some(c)) => vec![format!("-{c}"), v.to_owned()],
            _ => vec![format!("--{}", o.long), v.to_owned()],
        }
    });
    let flag = (0..FLAGS.len(), any::<bool>()).prop_map(|(i, short)| match (short, FLAGS[i].2) {
        (true, Some(c)) => vec![format!("-{c}")],
        _ => vec![format!("--{}", FLAGS[i].1)],
    });
    let stray = prop::sample::select(vec![
        "--help",
        "-h",
        "-V",
        "--version",
        "-vv",
        "-vq",
        "-w5m",
        "--ttl",
        "--bogus",
        "-",
        "job",
        "a/b",
        "--tls-insecure=1",
        "-x",
    ])
    .prop_map(|s| vec![s.to_owned()]);
    prop_oneof![10 => option, 3 => flag, 1 => stray, 1 => values.prop_map(|v| vec![v.to_owned()])]
}

/// A `run` command line: options and flags around one NAME (usually), then
/// `--` and CMD (usually).
fn command_line() -> impl Strategy<Value = Vec<OsString>> {
    let cmd = prop::collection::vec(
        prop::sample::select(vec!["true", "--ttl", "-x", "a b"]),
        0..3,
    );
    (
        prop::collection::vec(word(), 0..5),
        prop::option::weighted(
            0.9,
            prop::sample::select(vec!["job", "deploy/prod", "bad name"]),
        ),
        any::<prop::sample::Index>(),
        prop::option::weighted(0.9, cmd),
    )
        .prop_map(|(words, name, at, cmd)| {
            let mut words: Vec<String> = words.into_iter().flatten().collect();
            if let Some(name) = name {
                let at = at.index(words.len() + 1);
                words.insert(at, name.to_owned());
            }
            if let Some(cmd) = cmd {
                words.push("--".to_owned());
                words.extend(cmd.into_iter().map(str::to_owned));
            }
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            argv(&words)
        })
}

/// For generated command lines in this process's environment: whenever the
/// fast path answers, clap parses the line to the same `Cli`. Returns how
/// many of `cases` the fast path answered, so callers can check it is taken.
fn compare_in_this_environment(cases: u32) -> u32 {
    let taken = Cell::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&command_line(), |argv| {
            if let Some(fast) = parse_run(&argv, &real_env) {
                taken.set(taken.get() + 1);
                let clap = parse_with::<OnlyRun>(&argv);
                prop_assert!(
                    clap.is_ok(),
                    "{argv:?}: the fast path accepted what clap refuses"
                );
                prop_assert_eq!(
                    format!("{fast:?}"),
                    format!("{:?}", clap.unwrap()),
                    "{:?}",
                    argv
                );
            }
            Ok(())
        })
        .unwrap();
    taken.get()
}

/// The environment variables `run` reads, with values to set them to, and
/// whether every value is one clap takes (then a good share of generated
/// lines must take the fast path: a fast path that declined everything
/// would pass the comparison alone).
const ENVIRONMENTS: &[(&[(&str, &str)], bool)] = &[
    (&[], true),
    (
        &[
            ("DISTLOCK_REDIS_URL", "redis://10.1.1.1:7000"),
            ("DISTLOCK_TTL", "2m"),
        ],
        true,
    ),
    (&[("DISTLOCK_TTL", "soon")], false),
    (&[("DISTLOCK_TTL", "")], false),
    (
        &[
            ("DISTLOCK_PREFIX", "bad prefix"),
            ("DISTLOCK_MIN_REPLICAS", "2"),
        ],
        false,
    ),
    (
        &[
            ("DISTLOCK_MIN_REPLICAS", "x"),
            ("DISTLOCK_REDIS_PASSWORD_FILE", "/run/pw"),
        ],
        false,
    ),
    (
        &[
            ("DISTLOCK_TLS_CA", "/ca"),
            ("DISTLOCK_TLS_CERT", "/c"),
            ("DISTLOCK_TLS_KEY", "/k"),
        ],
        true,
    ),
    (
        &[("DISTLOCK_TLS_KEY", ""), ("DISTLOCK_PREFIX", "ci")],
        false,
    ),
];

/// How many generated lines a child compares.
const CASES: u32 = 1000;

/// Set by the parent in the one child with no `DISTLOCK_*` variable.
const COMMON_LINES_VAR: &str = "FAST_PARSE_TEST_COMMON_LINES";

/// Run by [`the_fast_parse_follows_the_environment_as_clap_does`] in a
/// child test process, whose environment it chose; clap reads the real
/// environment, so it cannot be varied within one multi-threaded process.
/// Run by hand (`-- --ignored`) it compares in the caller's environment.
#[test]
#[ignore = "a helper: run in a child process with a chosen environment"]
fn compare_in_a_chosen_environment() {
    if std::env::var_os(COMMON_LINES_VAR).is_some() {
        the_common_lines_take_the_fast_path_and_agree_with_clap();
        every_option_alone_is_taken_as_clap_takes_it();
    }
    let taken = compare_in_this_environment(CASES);
    println!("fast path taken: {taken} lines");
}

#[test]
fn the_fast_parse_follows_the_environment_as_clap_does() {
    for &(vars, all_valid) in ENVIRONMENTS {
        let stdout = crate::test_support::run_alone(
            "cli::fast::tests::compare_in_a_chosen_environment",
            |child| {
                for o in &OPTIONS {
                    if let Some(var) = o.env {
                        child.env_remove(var);
                    }
                }
                child.env_remove(COMMON_LINES_VAR);
                if vars.is_empty() {
                    child.env(COMMON_LINES_VAR, "1");
                }
                child.envs(vars.iter().copied());
            },
        );
        let taken: u32 = stdout
            .split("fast path taken: ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{vars:?}: no count in\n{stdout}"));
        // About 18% are taken where every value is valid.
        if all_valid {
            assert!(
                taken >= CASES / 10,
                "{vars:?}: only {taken} of {CASES} generated lines took the fast path"
            );
        }
    }
}
