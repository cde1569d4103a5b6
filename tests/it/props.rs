//! Property tests for every parser of user input, through the real binary:
//! lock names, prefixes, owner ids, durations, Redis URLs, signal names,
//! exit codes and the semaphore limit, given as options or through their
//! environment variables.
//!
//! Whatever the input: never a panic (no exit 101, no "panicked"), and an
//! exit status of 2 (usage error, exactly one stderr line starting
//! `distlock: `) or 125. Valid input is never refused: it gets as far as
//! connecting to Redis, which nothing answers (127.0.0.1 port 1), and
//! exits 125 with one `distlock: ` line. Invalid input exits 2.
//!
//! No test here reaches a real server or any address but 127.0.0.1: URL
//! cases that would resolve a host name or reach another port are skipped.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{bare_distlock, exported, wait_with_timeout};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Nothing listens on port 1 (tcpmux): valid input ends in "connection
/// refused", 125.
const URL: &str = "redis://127.0.0.1:1";

/// What one invocation did.
#[derive(Debug)]
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs distlock with `args` and extra environment, with a clean
/// DISTLOCK_* environment and DISTLOCK_REDIS_URL set to `URL` unless
/// `env` sets it.
fn dl<A: AsRef<OsStr>>(args: &[A], env: &[(&str, &OsStr)]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut cmd = bare_distlock();
    cmd.env("DISTLOCK_REDIS_URL", URL);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let st = wait_with_timeout(&mut child, Duration::from_secs(20));
    let read = |p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    Outcome {
        code: st.code(),
        stdout: read(&out),
        stderr: read(&err),
    }
}

/// What the input should lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Accepted: distlock goes on to Redis and fails there (125).
    Valid,
    /// A usage error (2).
    Invalid,
    /// Either, but nothing else.
    Either,
}

/// The properties every outcome must have, plus what `expect` says.
fn check(out: &Outcome, expect: Expect) -> Result<(), TestCaseError> {
    prop_assert!(
        !out.stderr.contains("panicked") && !out.stderr.contains("RUST_BACKTRACE"),
        "panic: {out:?}"
    );
    let code = out
        .code
        .ok_or_else(|| TestCaseError::fail(format!("killed by a signal: {out:?}")))?;
    prop_assert_ne!(code, 101, "panic: {:?}", out);
    prop_assert!(code == 2 || code == 125, "exit {}: {:?}", code, out);
    let lines: Vec<&str> = out.stderr.lines().collect();
    prop_assert_eq!(lines.len(), 1, "one stderr line: {:?}", out);
    prop_assert!(lines[0].starts_with("distlock: "), "{:?}", out);
    prop_assert!(out.stdout.is_empty(), "{:?}", out);
    match expect {
        Expect::Valid => prop_assert_eq!(code, 125, "valid input refused: {:?}", out),
        Expect::Invalid => prop_assert_eq!(code, 2, "invalid input accepted: {:?}", out),
        Expect::Either => {}
    }
    Ok(())
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Any text an argument can hold (no NUL), mostly far from valid.
fn any_text() -> impl Strategy<Value = String> {
    "[^\x00]{0,40}"
}

/// Text built from the characters parsers care about, so that cases land
/// near the edges (units, signs, digits, separators, URL punctuation).
fn edgy_text() -> impl Strategy<Value = String> {
    "[0-9a-zA-Z .:/@+_\\-{}*?=&%#\\[\\]\t\n]{0,24}"
}

/// A lock name the contract allows: 1-200 of A-Z a-z 0-9 . _ - : / @ +.
fn valid_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._:/@+\\-]{1,200}"
}

fn name_ok(s: &str) -> bool {
    (1..=200).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-:/@+".contains(c))
}

/// Names: valid ones, valid ones with one character from outside the
/// alphabet, lengths around the limit, and arbitrary text.
fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        valid_name(),
        (valid_name(), any::<char>(), any::<prop::sample::Index>()).prop_map(|(s, c, i)| {
            let mut v: Vec<char> = s.chars().collect();
            v.insert(i.index(v.len() + 1), c);
            v.into_iter().filter(|&c| c != '\0').collect()
        }),
        (199usize..=202).prop_map(|n| "n".repeat(n)),
        any_text(),
        edgy_text(),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// `run NAME`, `inspect -- NAME` (after `--`, a name that starts with
    /// `-` reaches the name rule, which refuses it) and
    /// `--prefix`/DISTLOCK_PREFIX, which share the alphabet but may start
    /// with `-`.
    #[test]
    fn lock_names_and_prefixes(name in names(), how in 0..4u8) {
        let ok = name_ok(&name) && (how >= 2 || !name.starts_with('-'));
        let expect = if ok { Expect::Valid } else { Expect::Invalid };
        match how {
            0 => {
                // A leading `-` reads as an option here: `run` has no way
                // to take such a name, since `--` already ends its options
                // and starts CMD.
                prop_assume!(!name.starts_with('-'));
                check(&dl(&["run", &name, "--", "true"], &[]), expect)?;
            }
            1 => check(&dl(&["inspect", "--", &name], &[]), expect)?,
            // `--prefix=VALUE` keeps a leading `-` a value.
            2 => check(&dl(&[format!("--prefix={name}"), "inspect".into(), "x".into()], &[]), expect)?,
            _ => check(
                &dl(&["inspect", "x"], &[("DISTLOCK_PREFIX", OsStr::new(&name))]),
                expect,
            )?,
        }
    }

    /// `--owner` (acquire) and DISTLOCK_OWNER (renew): 1-200 printable
    /// ASCII characters without whitespace.
    #[test]
    fn owner_ids(owner in prop_oneof!["[!-~]{1,200}", any_text(), edgy_text(), Just(String::new())], env in any::<bool>()) {
        let ok = (1..=200).contains(&owner.len()) && owner.chars().all(|c| c.is_ascii_graphic());
        let expect = if ok { Expect::Valid } else { Expect::Invalid };
        // An empty value is refused like any bad id, and an empty
        // variable leaves renew without an owner: a usage error either way.
        let out = if env {
            dl(&["renew", "x"], &[("DISTLOCK_OWNER", OsStr::new(&owner))])
        } else {
            dl(&["acquire".to_owned(), format!("--owner={owner}"), "x".to_owned()], &[])
        };
        check(&out, expect)?;
    }
}

// ---------------------------------------------------------------------------
// Durations

/// Durations in humantime syntax that every option accepts (with the
/// default --ttl 30s: renew every 10s, grace 5s), and that make valid
/// timings wherever they go.
fn valid_short_duration() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u64..=4000).prop_map(|n| format!("{n}ms")),
        (1u64..=4).prop_map(|n| format!("{n}s")),
        (1u64..=3).prop_map(|n| format!("{n}s {}ms", n * 7)),
        Just("1s500ms".to_owned()),
        Just(" 2s ".to_owned()),
    ]
}

/// Valid lease lengths: long enough for the default timings (more than
/// about 13ms), at most 100000 years.
fn valid_ttl() -> impl Strategy<Value = String> {
    prop_oneof![
        (20u64..=100_000).prop_map(|n| format!("{n}ms")),
        (1u64..=100_000).prop_map(|n| format!("{n}s")),
        (1u64..=1000).prop_map(|n| format!("{n}m")),
        (1u64..=100).prop_map(|n| format!("{n}h")),
        (1u64..=100).prop_map(|n| format!("{n}h {n}m")),
        (1u64..=100).prop_map(|n| format!("{n}days")),
        (1u64..=100_000).prop_map(|n| format!("{n}y")),
    ]
}

/// Durations that are wrong whatever the option: no unit, a sign, an
/// unknown unit, garbage, nothing, too many digits.
fn invalid_duration() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..u64::MAX).prop_map(|n| n.to_string()),
        (1u64..1000).prop_map(|n| format!("-{n}s")),
        (1u64..1000).prop_map(|n| format!("{n}parsecs")),
        (1u64..1000).prop_map(|n| format!("{n}.5.5s")),
        "[a-z]{1,8}".prop_filter("a humantime word", |s| {
            humantime::parse_duration(s).is_err()
                && !["forever", "inf", "infinity"].contains(&s.as_str())
        }),
        Just(String::new()),
        Just("s".to_owned()),
        Just("99999999999999999999999s".to_owned()),
    ]
}

/// Huge but well-formed durations: never a panic.
fn huge_duration() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("18446744073709551615s".to_owned()),
        Just("18446744073709551615s 999999999ns".to_owned()),
        Just("584542046090y".to_owned()),
        Just("584542047y".to_owned()),
        (100_001u64..584_542_046_090).prop_map(|n| format!("{n}y")),
        (u64::MAX / 2..u64::MAX).prop_map(|n| format!("{n}s")),
        (u64::MAX / 2..u64::MAX).prop_map(|n| format!("{n}ms")),
    ]
}

/// The `run` options that take a duration, as `--opt=VALUE` so a leading
/// `-` stays a value.
const RUN_DURATIONS: &[&str] = &[
    "--ttl",
    "--wait",
    "--renew-every",
    "--kill-grace",
    "--min-hold",
    "--max-hold",
    "--last-run-keep",
];

fn run_with(opt: &str, value: &str) -> Outcome {
    dl(
        &[
            "run".to_owned(),
            format!("{opt}={value}"),
            "x".into(),
            "--".into(),
            "true".into(),
        ],
        &[],
    )
}

proptest! {
    #![proptest_config(config())]

    /// Anything at all, in any duration option of `run`, of `acquire`,
    /// `renew` and `hold`, or in DISTLOCK_TTL: 2 or 125, never a panic.
    #[test]
    fn any_text_in_a_duration(
        value in prop_oneof![any_text(), edgy_text(), huge_duration(), invalid_duration(), valid_ttl()],
        which in 0..(RUN_DURATIONS.len() + 5),
    ) {
        let out = match which {
            i if i < RUN_DURATIONS.len() => run_with(RUN_DURATIONS[i], &value),
            i if i == RUN_DURATIONS.len() => dl(&["acquire".to_owned(), format!("--ttl={value}"), "x".into()], &[]),
            i if i == RUN_DURATIONS.len() + 1 => dl(&["acquire".to_owned(), format!("--wait={value}"), "x".into()], &[]),
            i if i == RUN_DURATIONS.len() + 2 => dl(&["renew".to_owned(), format!("--ttl={value}"), "--owner=o".into(), "x".into()], &[]),
            i if i == RUN_DURATIONS.len() + 3 => dl(&["hold".to_owned(), format!("--max={value}"), "x".into()], &[]),
            _ => dl(&["run", "x", "--", "true"], &[("DISTLOCK_TTL", OsStr::new(&value))]),
        };
        check(&out, Expect::Either)?;
    }

    /// Well-formed durations are accepted by every option they fit.
    #[test]
    fn valid_durations_are_accepted(short in valid_short_duration(), ttl in valid_ttl(), which in 0..6u8) {
        let out = match which {
            0 => run_with("--ttl", &ttl),
            1 => dl(&["run", "x", "--", "true"], &[("DISTLOCK_TTL", OsStr::new(&ttl))]),
            2 => run_with("--wait", &ttl),
            3 => run_with("--min-hold", &ttl),
            4 => run_with("--max-hold", &short),
            _ => run_with("--kill-grace", &short),
        };
        check(&out, Expect::Valid)?;
        check(&run_with("--renew-every", &short), Expect::Valid)?;
        check(&run_with("--last-run-keep", &ttl), Expect::Valid)?;
    }

    /// Malformed durations are usage errors in every option, and so are
    /// expiries longer than Redis can be given.
    #[test]
    fn invalid_durations_are_usage_errors(value in invalid_duration(), which in 0..RUN_DURATIONS.len(), too_long in (100_001u64..1_000_000_000).prop_map(|n| format!("{n}y"))) {
        // `--wait 0` means "do not wait" (no unit needed, as flock -w 0).
        prop_assume!(!(RUN_DURATIONS[which] == "--wait" && value.trim() == "0"));
        check(&run_with(RUN_DURATIONS[which], &value), Expect::Invalid)?;
        for opt in ["--ttl", "--min-hold", "--last-run-keep"] {
            check(&run_with(opt, &too_long), Expect::Invalid)?;
        }
    }
}

// ---------------------------------------------------------------------------
// Redis URLs

/// Whether a URL is safe to hand to distlock here: unparsable (a usage
/// error), a unix socket, or TCP to 127.0.0.1 port 1. Anything else could
/// resolve a name or reach a real server, and is skipped.
fn url_is_safe(url: &str) -> bool {
    use redis::{ConnectionAddr, IntoConnectionInfo};
    match url.into_connection_info() {
        Err(_) => true,
        Ok(info) => match info.addr() {
            ConnectionAddr::Unix(_) => true,
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                ["127.0.0.1", "localhost", "::1", "[::1]"].contains(&host.as_str()) && *port == 1
            }
            _ => false,
        },
    }
}

/// URLs distlock must accept: every scheme, with user, password and
/// database, pointing where nothing answers.
fn valid_url() -> impl Strategy<Value = (String, Option<String>)> {
    let pw = "pw[A-Za-z0-9]{8,12}";
    prop_oneof![
        (pw, "[a-z]{1,8}", 0u8..16)
            .prop_map(|(p, u, db)| (format!("redis://{u}:{p}@127.0.0.1:1/{db}"), Some(p))),
        pw.prop_map(|p| (format!("redis://:{p}@127.0.0.1:1"), Some(p))),
        (0u8..16).prop_map(|db| (format!("redis://127.0.0.1:1/{db}"), None)),
        Just(("redis://localhost:1".to_owned(), None)),
        Just(("redis://[::1]:1".to_owned(), None)),
        "[a-z0-9]{1,12}"
            .prop_map(|p| (format!("unix:///nonexistent/distlock-props/{p}.sock"), None)),
        ("[a-z0-9]{1,12}", 0u8..16)
            .prop_map(|(p, db)| (format!("redis+unix:///nonexistent/{p}.sock?db={db}"), None)),
        (pw, "[a-z0-9]{1,12}")
            .prop_map(|(pw, p)| (format!("unix:///nonexistent/{p}.sock?pass={pw}"), Some(pw))),
    ]
}

/// URLs distlock must refuse: no scheme (which may hide a password),
/// another scheme, a port or database that is not a number.
fn invalid_url() -> impl Strategy<Value = (String, Option<String>)> {
    let pw = "pw[A-Za-z0-9]{8,12}";
    prop_oneof![
        (pw.prop_map(|p| (format!("127.0.0.1:{p}"), Some(p)))),
        (pw.prop_map(|p| (format!("u:{p}@127.0.0.1:1"), Some(p)))),
        ("(http|https|tcp|redi|rediss?x|ftp)", pw)
            .prop_map(|(s, p)| (format!("{s}://u:{p}@127.0.0.1:1"), Some(p))),
        (pw.prop_map(|p| (format!("redis://u:{p}@127.0.0.1:notaport"), Some(p)))),
        (pw.prop_map(|p| (format!("redis://u:{p}@127.0.0.1:1/notadb"), Some(p)))),
        Just(("".to_owned(), None)),
        Just(("redis://".to_owned(), None)),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// `--redis-url` or DISTLOCK_REDIS_URL: valid ones get as far as
    /// connecting, invalid ones are usage errors; a password in either
    /// never shows.
    #[test]
    fn redis_urls(case in prop_oneof![
            valid_url().prop_map(|(u, p)| (u, p, Expect::Valid)),
            invalid_url().prop_map(|(u, p)| (u, p, Expect::Invalid)),
            prop_oneof![any_text(), edgy_text(), "(redis|rediss|unix|redis\\+unix)://[^\x00]{0,30}"]
                .prop_map(|u| (u, None, Expect::Either)),
        ],
        env in any::<bool>(),
        sub in prop::sample::select(vec!["run", "inspect", "doctor"]),
    ) {
        let (url, password, expect) = case;
        prop_assume!(url_is_safe(&url));
        let mut args: Vec<String> = Vec::new();
        if !env {
            args.push(format!("--redis-url={url}"));
        }
        args.push(sub.to_owned());
        match sub {
            "run" => args.extend(["x", "--", "true"].map(String::from)),
            "inspect" => args.push("x".into()),
            _ => {}
        }
        let env_url = [("DISTLOCK_REDIS_URL", OsStr::new(&url))];
        let out = dl(&args, if env { &env_url } else { &[] });
        if sub == "doctor" && out.code == Some(125) {
            // doctor reports an unreachable server as its "reachable"
            // check on stdout: look at that instead of stderr.
            prop_assert!(out.stdout.contains("reachable"), "{:?}", out);
            prop_assert!(expect != Expect::Invalid, "{:?}", out);
            if let Some(p) = &password {
                prop_assert!(!out.stdout.contains(p.as_str()), "password shown: {:?}", out);
            }
        } else {
            check(&out, expect)?;
        }
        if let Some(p) = password {
            prop_assert!(!out.stderr.contains(&p), "password shown: {:?}", out);
        }
    }
}

// ---------------------------------------------------------------------------
// Signals, exit codes, limits

/// Signals by name or number, with or without SIG, in any case.
fn signal_spelling(name: &'static str, number: i32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just(name.to_owned()),
        Just(format!("SIG{name}")),
        Just(name.to_ascii_lowercase()),
        Just(format!("sig{}", name.to_ascii_lowercase())),
        Just(number.to_string()),
        Just(format!(" {name} ")),
    ]
}

/// Signals that end a process (valid for --kill-signal).
const ENDING: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("XCPU", libc::SIGXCPU),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
];

/// Signals that do not end a process: refused for --kill-signal.
const NOT_ENDING: &[(&str, i32)] = &[
    ("STOP", libc::SIGSTOP),
    ("CONT", libc::SIGCONT),
    ("CHLD", libc::SIGCHLD),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("WINCH", libc::SIGWINCH),
];

/// A signal from `table` and one way to spell it.
fn from(table: &'static [(&'static str, i32)]) -> impl Strategy<Value = (&'static str, String)> {
    prop::sample::select(table).prop_flat_map(|(n, v)| (Just(n), signal_spelling(n, v)))
}

proptest! {
    #![proptest_config(config())]

    /// `--kill-signal` and `--at-risk-signal`.
    #[test]
    fn signal_names(
        ending in from(ENDING),
        not_ending in from(NOT_ENDING),
        junk in prop_oneof![
            any_text(),
            edgy_text(),
            (-1000i64..0).prop_map(|n| n.to_string()),
            (65i64..100_000).prop_map(|n| n.to_string()),
            Just("0".to_owned()),
            Just("SIG".to_owned()),
            Just("SIGSIGTERM".to_owned()),
        ],
    ) {
        // The kill signal must end a process; the at-risk warning may be
        // any signal CMD can catch (so neither KILL nor STOP).
        let at_risk = |name: &str| if name == "KILL" || name == "STOP" { Expect::Invalid } else { Expect::Valid };
        check(&run_with("--kill-signal", &ending.1), Expect::Valid)?;
        check(&run_with("--kill-signal", &not_ending.1), Expect::Invalid)?;
        check(&run_with("--at-risk-signal", &ending.1), at_risk(ending.0))?;
        check(&run_with("--at-risk-signal", &not_ending.1), at_risk(not_ending.0))?;
        check(&run_with("--kill-signal", &junk), Expect::Either)?;
        check(&run_with("--at-risk-signal", &junk), Expect::Either)?;
    }

    /// `-E`: 0 to 255; `--limit`: 1 to 10000.
    #[test]
    fn exit_codes_and_limits(
        code in 0u32..=255,
        bad in prop_oneof![
            (256u64..u64::MAX).prop_map(|n| n.to_string()),
            (1i64..1000).prop_map(|n| format!("-{n}")),
            (0u32..255).prop_map(|n| format!("{n}.0")),
            (0u32..255).prop_map(|n| format!("0x{n:x}")),
            "[a-z]{1,6}",
            Just(String::new()),
        ],
        junk in prop_oneof![any_text(), edgy_text()],
        limit in 1u32..=10_000,
        bad_limit in prop_oneof![
            Just("0".to_owned()),
            (10_001u64..u64::MAX).prop_map(|n| n.to_string()),
            (1i64..1000).prop_map(|n| format!("-{n}")),
            "[a-z]{1,6}",
            Just(String::new()),
        ],
    ) {
        check(&dl(&["run".to_owned(), "-E".into(), code.to_string(), "x".into(), "--".into(), "true".into()], &[]), Expect::Valid)?;
        check(&dl(&["run".to_owned(), format!("--conflict-exit-code={code}"), "x".into(), "--".into(), "true".into()], &[]), Expect::Valid)?;
        check(&dl(&["run".to_owned(), format!("--conflict-exit-code={bad}"), "x".into(), "--".into(), "true".into()], &[]), Expect::Invalid)?;
        check(&dl(&["run".to_owned(), format!("--conflict-exit-code={junk}"), "x".into(), "--".into(), "true".into()], &[]), Expect::Either)?;
        check(&dl(&["run".to_owned(), format!("--limit={limit}"), "x".into(), "--".into(), "true".into()], &[]), Expect::Valid)?;
        check(&dl(&["acquire".to_owned(), format!("--limit={bad_limit}"), "x".into()], &[]), Expect::Invalid)?;
        check(&dl(&["acquire".to_owned(), format!("--limit={junk}"), "x".into()], &[]), Expect::Either)?;
    }

    /// Bytes that are not UTF-8, in any option that takes text or in the
    /// name: a usage error, never a panic. (CMD's own arguments may be
    /// any bytes; they are not parsed.)
    #[test]
    fn non_utf8_values(bytes in prop::collection::vec(any::<u8>().prop_filter("no NUL", |b| *b != 0), 1..24), which in 0..8u8) {
        prop_assume!(std::str::from_utf8(&bytes).is_err());
        let v = OsStr::from_bytes(&bytes);
        let opt = |o: &str| {
            let mut s = OsString::from(o);
            s.push("=");
            s.push(v);
            s
        };
        let out = match which {
            0 => dl(&[OsStr::new("run"), v, OsStr::new("--"), OsStr::new("true")], &[]),
            1 => dl(&["run".into(), opt("--ttl"), "x".into(), "--".into(), "true".into()], &[]),
            2 => dl(&["run".into(), opt("--kill-signal"), "x".into(), "--".into(), "true".into()], &[]),
            3 => dl(&[opt("--redis-url"), "inspect".into(), "x".into()], &[]),
            4 => dl(&["run".into(), opt("--conflict-exit-code"), "x".into(), "--".into(), "true".into()], &[]),
            5 => dl(&[opt("--prefix"), "inspect".into(), "x".into()], &[]),
            6 => dl(&["inspect", "x"], &[("DISTLOCK_REDIS_URL", v)]),
            _ => dl(&["run", "x", "--", "true"], &[("DISTLOCK_TTL", v)]),
        };
        check(&out, Expect::Invalid)?;
    }
}

/// CMD's arguments are not parsed: any bytes pass through to CMD.
#[test]
fn cmd_arguments_are_not_parsed() {
    let out = dl(
        &[
            OsStr::new("run"),
            OsStr::new("x"),
            OsStr::new("--"),
            OsStr::new("true"),
            OsStr::from_bytes(b"\xff\xfe"),
            OsStr::new("--ttl=-1"),
        ],
        &[],
    );
    assert_eq!(out.code, Some(125), "{out:?}");
}

// ---------------------------------------------------------------------------
// Durations of every size, all the way through

/// Every duration option of every subcommand, as argument prefixes.
fn duration_options() -> Vec<(Vec<&'static str>, &'static str, Vec<&'static str>)> {
    let mut v: Vec<(Vec<&str>, &str, Vec<&str>)> = RUN_DURATIONS
        .iter()
        .map(|o| (vec!["run"], *o, vec!["x", "--", "true"]))
        .collect();
    v.push((vec!["acquire"], "--ttl", vec!["x"]));
    v.push((vec!["acquire"], "--wait", vec!["x"]));
    v.push((vec!["acquire"], "--min-hold", vec!["x"]));
    v.push((vec!["renew", "--owner=o"], "--ttl", vec!["x"]));
    v.push((vec!["hold"], "--max", vec!["x"]));
    v
}

fn args_for(prefix: &[&str], opt: &str, value: &str, rest: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
    a.push(format!("{opt}={value}"));
    a.extend(rest.iter().map(|s| s.to_string()));
    a
}

/// The largest durations humantime can express, in every option: no
/// overflow anywhere before Redis is reached.
#[test]
fn the_largest_durations_in_every_option_never_panic() {
    let values = [
        "18446744073709551615s",
        "18446744073709551615s 999999999ns",
        "584542046090y",
        "584542047y",
        "100001y",
        "100000y",
        "9223372036854775807ms",
    ];
    for (prefix, opt, rest) in duration_options() {
        for v in values {
            let out = dl(&args_for(&prefix, opt, v, &rest), &[]);
            check(&out, Expect::Either).unwrap_or_else(|e| panic!("{opt}={v}: {e}"));
        }
    }
}

/// The same, against a real server, so that everything after the
/// acquisition runs too (a --max-hold deadline, hold's renewer, the
/// lease handed to Redis): never a panic; valid input runs CMD (or takes
/// the lease) and exits as it should; invalid input exits 2 with one
/// line. Each case uses a lock name of its own.
#[test]
fn durations_of_every_size_against_a_real_server() {
    use proptest::test_runner::TestRunner;
    let server = crate::common::RedisServer::start();
    let url = server.url();
    let options = duration_options();
    let counter = std::sync::atomic::AtomicU64::new(0);
    let value = prop_oneof![
        valid_short_duration(),
        valid_ttl(),
        huge_duration(),
        invalid_duration(),
        edgy_text(),
    ];
    let mut runner = TestRunner::new(config());
    runner
        .run(&(value, 0..options.len()), |(value, which)| {
            let (prefix, opt, rest) = &options[which];
            let name = format!(
                "p{}",
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            let rest: Vec<&str> = rest
                .iter()
                .map(|r| if *r == "x" { name.as_str() } else { r })
                .collect();
            let args = args_for(prefix, opt, &value, &rest);
            let hold = prefix[0] == "hold";
            let mut all = args.clone();
            if hold {
                // A short lease, so the background renewer notices the
                // release below at once.
                all.insert(1, "--ttl=1s".into());
            }
            let out = dl(&all, &[("DISTLOCK_REDIS_URL", OsStr::new(&url))]);
            prop_assert!(!out.stderr.contains("panicked"), "{:?}: {:?}", all, out);
            let code = out.code.unwrap_or(-1);
            let ok = match prefix[0] {
                "renew" => 1, // nobody holds it
                _ => 0,
            };
            prop_assert!(
                code == ok || code == 2,
                "{:?}: exit {}: {:?}",
                all,
                code,
                out
            );
            if code == 2 {
                prop_assert_eq!(out.stderr.lines().count(), 1, "{:?}", out);
                prop_assert!(out.stderr.starts_with("distlock: "), "{:?}", out);
            }
            if hold && code == 0 {
                let owner = exported(&out.stdout, "DISTLOCK_OWNER");
                let rel = dl(
                    &["release", name.as_str()],
                    &[
                        ("DISTLOCK_REDIS_URL", OsStr::new(&url)),
                        ("DISTLOCK_OWNER", OsStr::new(&owner)),
                    ],
                );
                prop_assert_eq!(rel.code, Some(0), "{:?}", rel);
            }
            Ok(())
        })
        .unwrap();
}

/// `hold --max` longer than the renewer's clock argument can carry (about
/// 584 years) once made the renewer refuse its own arguments: `hold` said
/// it held the lock, and the lease expired after one ttl.
#[test]
fn hold_with_a_max_of_a_thousand_years_keeps_renewing() {
    let server = crate::common::RedisServer::start();
    let url = server.url();
    let env = [("DISTLOCK_REDIS_URL", OsStr::new(&url))];
    let out = dl(&["hold", "--ttl=300ms", "--max=1000y", "long"], &env);
    assert_eq!(out.code, Some(0), "{out:?}");
    let owner = exported(&out.stdout, "DISTLOCK_OWNER");
    // Three ttls later, still held by us.
    std::thread::sleep(Duration::from_millis(900));
    assert_eq!(
        server.get("distlock:{long}").as_deref(),
        Some(owner.as_str())
    );
    let mut env = env.to_vec();
    env.push(("DISTLOCK_OWNER", OsStr::new(&owner)));
    let rel = dl(&["release", "long"], &env);
    assert_eq!(rel.code, Some(0), "{rel:?}");
}
