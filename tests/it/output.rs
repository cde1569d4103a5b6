//! What distlock prints, whatever is at the other end and whatever another
//! client wrote: a stdout that is a closed pipe or a full disk, `acquire`
//! and `hold` whose owner id cannot be printed, values of any length,
//! timestamps of any size, and control characters in foreign text.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;

/// Runs `cmd` to completion with stdin closed, stdout as given and stderr
/// captured (at most 30 s); stdout is then not captured (empty).
fn run_to(stdout: Stdio, cmd: &mut Command) -> Out {
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr");
    cmd.stdin(Stdio::null())
        .stdout(stdout)
        .stderr(File::create(&err).unwrap());
    let started = std::time::Instant::now();
    let mut child = cmd.spawn().unwrap();
    let status = wait_with_timeout(&mut child, Duration::from_secs(30));
    Out {
        code: status.code().unwrap_or(-1),
        status,
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err).unwrap()).into_owned(),
        took: started.elapsed(),
    }
}

/// The write end of a pipe whose read end is already closed, as after
/// `| head -1` has read its line.
fn closed_pipe() -> Stdio {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    Stdio::from(write)
}

/// `> /dev/full`: every write fails with ENOSPC.
fn dev_full() -> Stdio {
    Stdio::from(File::options().write(true).open("/dev/full").unwrap())
}

/// A stdout for the command under test, by name.
type NamedStdout = (&'static str, fn() -> Stdio);

/// The two stdouts that cannot take the output, by name.
fn unwritable() -> [NamedStdout; 2] {
    [("a closed pipe", closed_pipe), ("/dev/full", dev_full)]
}

/// Runs to completion with stdout captured.
fn run(cmd: &mut Command) -> Out {
    exec(cmd, Duration::from_secs(30))
}

/// Exit 125 and one `distlock: ` line on stderr, no panic.
fn assert_failed_with_one_line(out: &Out, what: &str) {
    assert_eq!(out.code, 125, "{what}: {out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: one line on stderr: {out:?}");
    assert!(lines[0].starts_with("distlock: "), "{what}: {out:?}");
    assert!(!out.stderr.contains("panicked"), "{what}: {out:?}");
}

/// The pids of `hold` renewers (`distlock __hold-renewer NAME …`) of `name`.
fn renewers_of(name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if args.contains(&&b"__hold-renewer"[..]) && args.contains(&name.as_bytes()) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Server milliseconds now (the test's server runs on this host).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The first millisecond of the year 10000, which RFC 3339 cannot write.
const YEAR_10000_MS: &str = "253402300800000";

// ---------------------------------------------------------------------------
// acquire and hold: the output is the only record of the owner id
// ---------------------------------------------------------------------------

#[test]
fn acquire_and_hold_that_cannot_print_give_the_lease_back_and_exit_125() {
    let server = RedisServer::start();
    let mut case = 0;
    for (to, stdout) in unwritable() {
        for args in [
            &["acquire"][..],
            &["acquire", "--json"],
            &["hold"],
            &["hold", "--json"],
            &["hold", "--max", "1h"],
        ] {
            case += 1;
            let name = format!("unprinted{case}");
            let what = format!("{args:?} into {to}");
            let out = run_to(stdout(), distlock(&server).args(args).arg(&name));
            // A renewer left behind is cleaned up before anything fails.
            let left = renewers_of(&name);
            for &pid in &left {
                signal(pid, libc::SIGKILL);
            }
            assert_failed_with_one_line(&out, &what);
            assert!(
                out.stderr.contains(&name),
                "{what}: the line names the lock: {out:?}"
            );
            assert_eq!(
                server.get(&key(&name)),
                None,
                "{what}: the lease nobody can name is released"
            );
            assert_eq!(left, Vec::<i32>::new(), "{what}: no renewer keeps it");
        }
    }
}

// ---------------------------------------------------------------------------
// Any other stdout: a closed pipe ends output quietly, a full disk is an error
// ---------------------------------------------------------------------------

/// Read-only subcommands that print on stdout, each as its arguments.
fn printers(held: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["inspect", held]),
        v(&["inspect", "--json", held]),
        v(&["inspect", "--limit", "2", "sem"]),
        v(&["inspect", "--limit", "2", "--json", "sem"]),
        v(&["list"]),
        v(&["list", "--json"]),
        v(&["doctor"]),
        v(&["doctor", "--json"]),
        v(&["completions", "bash"]),
        v(&["man", "--exit-table"]),
    ]
}

/// A lock `held`, a semaphore `sem` and many others, so `list` has lines
/// to print after the first.
fn locks_to_show(server: &RedisServer) {
    for i in 0..50 {
        let out = run(distlock(server).args(["acquire", "--ttl", "1h", &format!("l{i}")]));
        assert_eq!(out.code, 0, "{out:?}");
    }
    let out = run(distlock(server).args(["acquire", "--ttl", "1h", "held"]));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(distlock(server).args(["acquire", "--ttl", "1h", "--limit", "2", "sem"]));
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn a_closed_pipe_ends_the_output_quietly_as_if_it_had_finished() {
    let server = RedisServer::start();
    locks_to_show(&server);
    for args in printers("held") {
        let finished = run(distlock(&server).args(&args));
        let cut = run_to(closed_pipe(), distlock(&server).args(&args));
        assert!(!cut.stderr.contains("panicked"), "{args:?}: {cut:?}");
        assert_eq!(
            (cut.code, cut.stderr.as_str()),
            (finished.code, finished.stderr.as_str()),
            "{args:?}: as if it had finished printing: {finished:?}"
        );
    }
    // The ones that change something do it, and exit as they would have.
    let out = run_to(
        closed_pipe(),
        distlock(&server).args(["release", "--force", "held"]),
    );
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    assert_eq!(server.get(&key("held")), None);
    let done = "distlock:{marked}:done";
    let _: i64 = server.cmd(&["HSET", done, "at_ms", &now_ms().to_string(), "host", "h"]);
    let out = run_to(
        closed_pipe(),
        distlock(&server).args(["release", "--forget-done", "marked"]),
    );
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    assert_eq!(server.cmd::<i64>(&["EXISTS", done]), 0);
}

#[test]
fn list_into_head_prints_its_first_line_and_exits_0() {
    let server = RedisServer::start();
    // Far more than a pipe holds, so distlock is still writing when head
    // has its line and goes.
    let mut p = redis::pipe();
    for i in 0..3000 {
        let owner = format!("host-{i}:{i}:{}", "0123456789abcdef".repeat(2));
        p.cmd("SET")
            .arg(key(&format!("many{i:04}")))
            .arg(owner)
            .arg("PX")
            .arg(600_000)
            .ignore();
    }
    let _: () = p.query(&mut server.conn()).unwrap();
    let script = format!(
        "'{}' list | head -1; echo \"${{PIPESTATUS[0]}}\"",
        bin().display()
    );
    let out = run(Command::new("bash")
        .args(["-c", &script])
        .env("DISTLOCK_REDIS_URL", server.url()));
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out:?}");
    assert!(lines[0].starts_with("NAME"), "{out:?}");
    assert_eq!(lines[1], "0", "distlock's status: {out:?}");
    assert_eq!(out.stderr, "", "{out:?}");
}

#[test]
fn a_stdout_that_fails_otherwise_is_one_line_and_exit_125() {
    let server = RedisServer::start();
    locks_to_show(&server);
    for args in printers("held") {
        let out = run_to(dev_full(), distlock(&server).args(&args));
        let what = format!("{args:?} > /dev/full");
        assert_failed_with_one_line(&out, &what);
        assert!(
            out.stderr.contains("No space left on device"),
            "{what}: says why: {out:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Values of any length, timestamps of any size
// ---------------------------------------------------------------------------

/// Values of any length are shown: whole by `inspect` and `list --json`;
/// cut with `...` in `list`'s table, so one 70,000-character foreign
/// owner does not pad every other line to 70,000 characters (as it did
/// before the fix).
#[test]
fn values_of_any_length_are_listed_and_inspected() {
    let server = RedisServer::start();
    let owner = "o".repeat(70_000);
    let _: () = server.cmd(&["SET", &key("big"), &owner, "PX", "600000"]);
    let _: i64 = server.cmd(&[
        "HSET",
        "distlock:{big}:meta",
        "command",
        &"c".repeat(70_000),
    ]);
    let out = run(distlock(&server).args(["acquire", "small", "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(distlock(&server).args(["inspect", "big"]));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    assert!(out.stdout.contains(&owner), "inspect shows the owner whole");
    let out = run(distlock(&server).args(["list"]));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines {
        assert!(line.len() < 400, "a line {} wide", line.len());
    }
    assert!(
        lines[1].starts_with("big ") && lines[1].contains("ooo..."),
        "{lines:?}"
    );
    assert!(lines[1].contains("ccc..."), "{lines:?}");
    assert!(lines[2].starts_with("small "), "{lines:?}");
    let out = run(distlock(&server).args(["list", "--json"]));
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v[0]["owner"], owner.as_str());
    assert_eq!(v[0]["command"], "c".repeat(70_000).as_str());
}

#[test]
fn a_done_mark_dated_after_the_year_9999_is_refused_by_name() {
    let server = RedisServer::start();
    let out = run(distlock(&server).args(["acquire", "--ttl", "1h", "fine"]));
    assert_eq!(out.code, 0, "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    // Lua reads all of these as numbers, so the acquire script takes each
    // for a run that succeeded in the future.
    for (i, at) in [
        YEAR_10000_MS,
        "18446744073709551615",
        "99999999999999999999",
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("late{i}");
        let done = format!("distlock:{{{name}}}:done");
        let _: i64 = server.cmd(&[
            "HSET",
            &done,
            "at_ms",
            at,
            "host",
            "h",
            "fencing_token",
            "7",
        ]);
        let marker = dir.path().join(&name);
        let touch = format!("touch '{}'", marker.display());
        for args in [
            vec!["run", "--once-per", "1h", &name, "--", "sh", "-c", &touch],
            vec!["inspect", &name],
            vec!["inspect", "--json", &name],
        ] {
            let what = format!("{args:?} with at_ms {at}");
            let out = run(distlock(&server).args(&args));
            assert_failed_with_one_line(&out, &what);
            assert!(out.stderr.contains(&done), "{what}: names the key: {out:?}");
            assert_eq!(out.stdout, "", "{what}");
            assert!(!marker.exists(), "{what}: CMD never started");
            assert_eq!(server.get(&key(&name)), None, "{what}: no lease left");
        }
        // list skips it, held, with one warning and lists the rest.
        let out = run(distlock(&server).args(["acquire", &name]));
        assert_eq!(out.code, 0, "{out:?}");
        let out = run(distlock(&server).arg("list"));
        assert_eq!(out.code, 0, "{out:?}");
        assert!(out.stdout.contains("fine"), "{out:?}");
        let warnings: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(warnings.len(), 1, "{out:?}");
        assert!(warnings[0].contains(&done), "{out:?}");
        let out = run(distlock(&server).args(["list", "--json"]));
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 1, "{out:?}");
        // --forget-done is how an operator clears it.
        let out = run(distlock(&server).args(["release", "--forget-done", &name]));
        assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
        assert!(out.stdout.starts_with("forgot the done mark"), "{out:?}");
        assert_eq!(server.cmd::<i64>(&["EXISTS", &done]), 0);
        let out = run(distlock(&server).args(["release", "--force", &name]));
        assert_eq!(out.code, 0, "{out:?}");
    }
}

#[test]
fn records_with_timestamps_and_numbers_of_any_size_are_shown() {
    let server = RedisServer::start();
    let out = run(distlock(&server).args(["acquire", "--ttl", "1h", "odd"]));
    assert_eq!(out.code, 0, "{out:?}");
    let meta = "distlock:{odd}:meta";
    let last = "distlock:{odd}:last";
    let done = "distlock:{odd}:done";
    let _: i64 = server.cmd(&["HSET", meta, "acquired_ms", YEAR_10000_MS, "pid", "-1"]);
    let _: i64 = server.cmd(&[
        "HSET",
        last,
        "owner",
        "someone",
        "host",
        "h",
        "started_ms",
        "99999999999999999",
        "duration_ms",
        "18446744073709551615",
        "exit",
        "-3",
        "token",
        "x",
    ]);
    let _: i64 = server.cmd(&[
        "HSET",
        done,
        "at_ms",
        &now_ms().to_string(),
        "host",
        "h",
        "fencing_token",
        "-5",
    ]);
    for args in [
        &["inspect", "odd"][..],
        &["inspect", "--json", "odd"],
        &["list"],
        &["list", "--json"],
    ] {
        let out = run(distlock(&server).args(args));
        assert_eq!(
            (out.code, out.stderr.as_str()),
            (0, ""),
            "{args:?}: {out:?}"
        );
        assert!(out.stdout.contains("odd"), "{args:?}: {out:?}");
    }
    let out = run(distlock(&server).args(["inspect", "--json", "odd"]));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["acquired_at"], serde_json::Value::Null, "{v}");
    assert_eq!(v["last_run"]["started_at"], serde_json::Value::Null, "{v}");
}

#[test]
fn values_that_are_not_utf8_are_shown_without_failing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET")
        .arg(key("bytes"))
        .arg(&b"own\xff\xfeer"[..])
        .arg("PX")
        .arg(600_000)
        .query(&mut con)
        .unwrap();
    for args in [&["inspect", "bytes"][..], &["list"], &["list", "--json"]] {
        let out = run(distlock(&server).args(args));
        assert_eq!(
            (out.code, out.stderr.as_str()),
            (0, ""),
            "{args:?}: {out:?}"
        );
        assert!(out.stdout.contains("own"), "{args:?}: {out:?}");
    }
}

// ---------------------------------------------------------------------------
// Control characters in foreign text
// ---------------------------------------------------------------------------

/// What a hostile job could put in its argv or owner id: a title change,
/// a bell, colours, a fake line, a carriage return, a C1 CSI and DEL.
const EVIL: &str = "x\x1b]0;owned\x07\x1b[31m\nFAKE LINE\r\u{9b}2J\x7fend";

/// No control character but the newlines that end lines.
fn assert_no_controls(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: control characters {bad:?} reach the terminal: {text:?}"
    );
}

#[test]
fn foreign_text_reaches_no_terminal_as_a_control_sequence() {
    let server = RedisServer::start();
    let now = now_ms().to_string();
    let name = "evil";
    let _: () = server.cmd(&["SET", &key(name), EVIL, "PX", "600000"]);
    let fields = [
        "acquired_ms",
        &now,
        "host",
        EVIL,
        "pid",
        "1",
        "command",
        EVIL,
    ];
    let _: i64 = server.cmd(&[&["HSET", "distlock:{evil}:meta"][..], &fields].concat());
    let fields = [
        "owner",
        EVIL,
        "host",
        EVIL,
        "started_ms",
        &now,
        "duration_ms",
        "5",
        "exit",
        "0",
        "token",
        "1",
    ];
    let _: i64 = server.cmd(&[&["HSET", "distlock:{evil}:last"][..], &fields].concat());
    let fields = [
        "at_ms",
        &now,
        "host",
        EVIL,
        "fencing_token",
        "1",
        "owner",
        EVIL,
    ];
    let _: i64 = server.cmd(&[&["HSET", "distlock:{evil}:done"][..], &fields].concat());
    // A name only SCAN can find.
    let odd_key = "distlock:{na\x1b[2Jme}";
    let _: () = server.cmd(&["SET", odd_key, "someone", "PX", "600000"]);

    let mut seen = Vec::new();
    let mut check = |args: &[&str]| {
        let out = run(distlock(&server).args(args));
        assert_no_controls(&format!("{args:?} stdout"), &out.stdout);
        assert_no_controls(&format!("{args:?} stderr"), &out.stderr);
        seen.push(out.all());
        out
    };
    let out = check(&["inspect", name]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains(r"x\x1b]0;owned\x07\x1b[31m\nFAKE LINE\r"),
        "{out:?}"
    );
    let out = check(&["list"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains(r"na\x1b[2Jme"), "{out:?}");
    for args in [&["inspect", "--json", name][..], &["list", "--json"]] {
        let out = check(args);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let first = if v.is_array() { &v[0] } else { &v };
        assert_eq!(first["owner"], EVIL, "{args:?}: JSON keeps the value");
    }
    // The busy line, the refused release, the forced one, the done line,
    // and --forget-done.
    assert_eq!(check(&["run", name, "--", "true"]).code, 75);
    assert_eq!(check(&["release", "--owner", "me", name]).code, 1);
    assert_eq!(check(&["renew", "--owner", EVIL, name]).code, 2);
    assert_eq!(check(&["release", "--force", name]).code, 0);
    assert_eq!(
        check(&["run", "--once-per", "1h", name, "--", "true"]).code,
        0
    );
    assert_eq!(check(&["release", "--forget-done", name]).code, 0);
    for text in &seen {
        assert!(!text.contains("panicked"), "{text}");
    }
    for i in [4, 5, 7, 8, 9] {
        assert!(seen[i].contains(r"\x1b"), "shows the escapes: {}", seen[i]);
    }
}
