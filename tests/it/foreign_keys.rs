//! Keys that are not distlock's: a hash, list or set written by something
//! else at a lock's key or its fence key. Every subcommand that touches
//! the name exits 125 with one line that names the key, changes nothing
//! (the foreign key is byte for byte the same, no counter moves, no lease
//! appears) and never starts CMD; `list` skips such a lock with one
//! warning and lists the others.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// Runs `cmd` to completion (stdin closed, at most 30 s).
fn run(cmd: &mut Command) -> Out {
    exec(cmd, Duration::from_secs(30))
}

/// Writes a value of `kind` at `key`, the way another program would.
fn plant(server: &RedisServer, key: &str, kind: &str) {
    let args: &[&str] = match kind {
        "hash" => &["HSET", key, "field", "theirs"],
        "list" => &["RPUSH", key, "theirs", "also theirs"],
        "set" => &["SADD", key, "theirs"],
        other => panic!("no such kind {other}"),
    };
    let _: i64 = server.cmd(args);
}

/// Everything about the name's keys that a subcommand could change: each
/// key's DUMP (type and content) and whether it expires, for every key of
/// the name (found by pattern, so a key distlock should not have made
/// shows up too).
fn snapshot(server: &RedisServer, name: &str) -> Vec<(String, Vec<u8>, i64)> {
    let pattern = format!("distlock:{{{name}}}*");
    let mut con = server.conn();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut con).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut con).unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut con).unwrap();
            // Only whether it expires: the exact PTTL moves on its own.
            (k, dump, ttl.signum())
        })
        .collect()
}

/// Exit 125, one line on stderr naming the key and saying it does not hold
/// a distlock lease, with none of Redis's script details.
fn assert_refused(out: &Out, key: &str, what: &str) {
    assert_eq!(out.code, 125, "{what}: {out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: one line on stderr: {out:?}");
    let line = lines[0];
    assert!(line.starts_with("distlock: "), "{what}: {line}");
    assert!(line.contains(key), "{what}: names {key}: {line}");
    assert!(
        line.contains("does not hold a distlock lease"),
        "{what}: {line}"
    );
    let lower = line.to_lowercase();
    for word in ["sha", "f_", "script", "line", "wrongtype", "lua"] {
        assert!(!lower.contains(word), "{what}: {word:?} in {line}");
    }
    assert_eq!(out.stdout, "", "{what}: {out:?}");
}

/// Each subcommand that touches NAME, as (label, arguments). `{n}` is the
/// name; `--owner` is given where one is needed.
fn subcommands(marker: &str) -> Vec<(&'static str, Vec<String>)> {
    let touch = format!("touch {marker}");
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        ("run", v(&["run", "{n}", "--", "sh", "-c", &touch])),
        (
            "run --wait",
            v(&["run", "-w", "5s", "{n}", "--", "sh", "-c", &touch]),
        ),
        ("acquire", v(&["acquire", "{n}"])),
        ("hold", v(&["hold", "{n}"])),
        ("inspect", v(&["inspect", "{n}"])),
        ("inspect --json", v(&["inspect", "--json", "{n}"])),
        ("renew", v(&["renew", "--owner", "o", "{n}"])),
        ("release", v(&["release", "--owner", "o", "{n}"])),
        ("release --force", v(&["release", "--force", "{n}"])),
        (
            "run --limit 2",
            v(&["run", "--limit", "2", "{n}", "--", "sh", "-c", &touch]),
        ),
        ("acquire --limit 2", v(&["acquire", "--limit", "2", "{n}"])),
        ("inspect --limit 2", v(&["inspect", "--limit", "2", "{n}"])),
        (
            "renew --limit 2",
            v(&["renew", "--limit", "2", "--owner", "o", "{n}"]),
        ),
        (
            "release --limit 2",
            v(&["release", "--limit", "2", "--owner", "o", "{n}"]),
        ),
        (
            "release --force --limit 2",
            v(&["release", "--force", "--limit", "2", "{n}"]),
        ),
    ]
}

#[test]
fn every_subcommand_refuses_a_foreign_key_by_name_and_changes_nothing() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut case = 0;
    for at in ["lock", "fence"] {
        for kind in ["hash", "list", "set"] {
            for (what, args) in subcommands(&marker.display().to_string()) {
                case += 1;
                let name = format!("f{case}");
                // A name that was used before: its counter stands at 1.
                let _: () = server.cmd(&["SET", &format!("distlock:{{{name}}}:fence"), "1"]);
                let key = match at {
                    "lock" => format!("distlock:{{{name}}}"),
                    _ => {
                        let k = format!("distlock:{{{name}}}:fence");
                        let _: i64 = server.cmd(&["DEL", &k]);
                        k
                    }
                };
                plant(&server, &key, kind);
                let before = snapshot(&server, &name);
                let args: Vec<String> = args.iter().map(|a| a.replace("{n}", &name)).collect();
                let label = format!("{what} with a {kind} at the {at} key");
                let out = run(distlock(&server).args(&args));
                assert_refused(&out, &key, &label);
                assert_eq!(snapshot(&server, &name), before, "{label}: keys changed");
                assert!(!marker.exists(), "{label}: CMD ran");
                if at == "lock" {
                    // The fencing counter did not move.
                    assert_eq!(
                        server.get(&format!("distlock:{{{name}}}:fence")).as_deref(),
                        Some("1"),
                        "{label}"
                    );
                }
            }
        }
    }
}

/// guarantees.md §8: a fencing counter distlock cannot read (not
/// a decimal integer, or one whose next token would not be below 2^53,
/// which a Lua number cannot count exactly) is refused like a key of
/// another type, by every subcommand, before anything is written. An
/// acquisition used to set the lease and then fail on INCR, holding the
/// lock for its TTL with no token and no CMD.
#[test]
fn every_subcommand_refuses_a_fencing_counter_it_cannot_read_and_changes_nothing() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut case = 0;
    for value in [
        "abc",
        "",
        "1.5",
        "-3",
        "12 ",
        "0x10",
        "1e3",
        "1796417000000000000",
        "9007199254740992",
        "99999999999999999999999",
    ] {
        for (what, args) in subcommands(&marker.display().to_string()) {
            case += 1;
            let name = format!("c{case}");
            let key = format!("distlock:{{{name}}}:fence");
            let _: () = server.cmd(&["SET", &key, value]);
            let before = snapshot(&server, &name);
            let args: Vec<String> = args.iter().map(|a| a.replace("{n}", &name)).collect();
            let label = format!("{what} with the counter at {value:?}");
            let out = run(distlock(&server).args(&args));
            assert_refused(&out, &key, &label);
            assert!(
                out.stderr.contains("2^53"),
                "{label}: says what a counter must be: {out:?}"
            );
            assert_eq!(snapshot(&server, &name), before, "{label}: keys changed");
            assert!(!marker.exists(), "{label}: CMD ran");
        }
    }
    // Counters with room for one more exact token are counted on; at
    // 2^53 - 1 (the last exact token) the counter is still read, but no
    // acquisition takes a lease it could not give an exact token.
    for (value, next) in [("0", "1"), ("9007199254740990", "9007199254740991")] {
        let _: () = server.cmd(&["SET", "distlock:{edge}:fence", value]);
        let out = run(distlock(&server).args(["acquire", "--json", "edge"]));
        assert_eq!(out.code, 0, "{value}: {out:?}");
        assert!(
            out.stdout.contains(&format!(r#""fencing_token":{next}"#)),
            "{out:?}"
        );
        let out = run(distlock(&server).args(["inspect", "--json", "edge"]));
        assert!(
            out.stdout.contains(&format!(r#""fencing_token":{next}"#)),
            "{out:?}"
        );
        let out = run(distlock(&server).args(["release", "--force", "edge"]));
        assert_eq!(out.code, 0, "{out:?}");
    }
    for args in [
        &["acquire", "edge"][..],
        &["acquire", "--limit", "2", "edge"],
        &["run", "edge", "--", "true"],
    ] {
        let before = snapshot(&server, "edge");
        let out = run(distlock(&server).args(args));
        assert_refused(&out, "distlock:{edge}:fence", &format!("{args:?}"));
        assert_eq!(snapshot(&server, "edge"), before, "{args:?}");
    }
    // `list` skips a held lock whose counter it cannot read, with a warning.
    let out = run(distlock(&server).args(["acquire", "listed"]));
    assert_eq!(out.code, 0, "{out:?}");
    let _: () = server.cmd(&["SET", "distlock:{listed}:fence", "1796417000000000000"]);
    for json in [false, true] {
        let mut cmd = distlock(&server);
        cmd.arg("list");
        if json {
            cmd.arg("--json");
        }
        let out = run(&mut cmd);
        assert_eq!(out.code, 0, "{out:?}");
        assert!(!out.stdout.contains("listed"), "{out:?}");
        let warnings: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.contains("warning"))
            .collect();
        assert_eq!(warnings.len(), 1, "{out:?}");
        assert!(warnings[0].contains("distlock:{listed}:fence"), "{out:?}");
    }
}

#[test]
fn list_skips_a_foreign_key_with_one_warning_and_lists_the_rest() {
    let server = RedisServer::start();
    for name in ["alpha", "omega"] {
        let out = run(distlock(&server).args(["acquire", name]));
        assert_eq!(out.code, 0, "{out:?}");
    }
    // Sorts between the two, so a skip cannot hide behind the order.
    plant(&server, "distlock:{middle}", "hash");
    let before = snapshot(&server, "middle");

    let out = run(distlock(&server).arg("list"));
    assert_eq!(out.code, 0, "{out:?}");
    let names: Vec<&str> = out
        .stdout
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["alpha", "omega"], "{out:?}");
    let warnings: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "one warning: {out:?}");
    assert!(warnings[0].starts_with("distlock: warning: "), "{out:?}");
    assert!(warnings[0].contains("distlock:{middle}"), "{out:?}");
    assert!(
        warnings[0].contains("does not hold a distlock lease"),
        "{out:?}"
    );

    let out = run(distlock(&server).args(["list", "--json"]));
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "omega"], "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("distlock:{middle}"), "{out:?}");

    // A foreign semaphore key is skipped the same way.
    plant(&server, "distlock:{sem}:slots", "set");
    for quiet in [false, true] {
        let mut cmd = distlock(&server);
        if quiet {
            cmd.arg("-q");
        }
        let out = run(cmd.arg("list"));
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(out.stdout.lines().count(), 3, "header and two: {out:?}");
        if quiet {
            assert_eq!(out.stderr, "", "-q: no warnings: {out:?}");
        } else {
            assert_eq!(out.stderr.lines().count(), 2, "{out:?}");
            assert!(out.stderr.contains("distlock:{sem}:slots"), "{out:?}");
        }
    }
    assert_eq!(snapshot(&server, "middle"), before, "list changed a key");
}

/// The done mark of `run --once-per` and the fair queue's turns and
/// settled list are keys of the name too: a foreign value there is refused
/// by name like the lock's own, and `release --forget-done` never deletes
/// it.
#[test]
fn a_foreign_done_mark_turns_or_settled_key_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let cases: &[(&str, &[&str])] = &[
        (
            "done",
            &[
                "run",
                "--once-per",
                "1h",
                "{n}",
                "--",
                "sh",
                "-c",
                "{touch}",
            ],
        ),
        ("done", &["inspect", "{n}"]),
        ("done", &["inspect", "--json", "{n}"]),
        ("done", &["release", "--forget-done", "{n}"]),
        ("turns", &["run", "{n}", "--", "sh", "-c", "{touch}"]),
        ("turns", &["acquire", "{n}"]),
        ("turns", &["release", "--force", "{n}"]),
        ("settled", &["run", "{n}", "--", "sh", "-c", "{touch}"]),
        ("settled", &["acquire", "{n}"]),
    ];
    for (case, (suffix, args)) in cases.iter().enumerate() {
        for kind in ["list", "set"] {
            let name = format!("d{case}{kind}");
            let key = format!("distlock:{{{name}}}:{suffix}");
            plant(&server, &key, kind);
            let before = snapshot(&server, &name);
            let args: Vec<String> = args
                .iter()
                .map(|a| a.replace("{n}", &name).replace("{touch}", &touch))
                .collect();
            let label = format!("{args:?} with a {kind} at {key}");
            let out = run(distlock(&server).args(&args));
            assert_refused(&out, &key, &label);
            assert_eq!(snapshot(&server, &name), before, "{label}: keys changed");
            assert!(!marker.exists(), "{label}: CMD ran");
        }
    }
}
