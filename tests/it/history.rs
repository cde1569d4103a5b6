//! Run history (`P:{N}:history`, `distlock history NAME`) against a real
//! redis-server and the real binary:
//!
//! - a run of each outcome (success, failed, signaled, not_started,
//!   lease_lost, skipped_done) leaves one record with the right outcome,
//!   exit code, host, pid, owner and token, newest first;
//! - `--history-keep N` (and `DISTLOCK_HISTORY_KEEP`) caps the list, 0
//!   keeps none; `-n N` shows the newest N;
//! - a busy run leaves nothing; no records is `[]` / no output, exit 0;
//! - plain output in a pipe is ASCII: a summary line oldest to newest,
//!   then one line per run;
//! - a foreign key at the history key: `history` exits 125 naming it,
//!   `list` lists the other locks.

use crate::common::*;

use serde_json::Value;

fn history_key(name: &str) -> String {
    format!("distlock:{{{name}}}:history")
}

fn run(cmd: &mut std::process::Command) -> Out {
    exec(cmd, LIMIT)
}

/// `distlock history NAME --json`, parsed.
fn records(server: &RedisServer, name: &str) -> Vec<Value> {
    let out = run(distlock(server).args(["history", name, "--json"]));
    assert_eq!(out.code, 0, "{out:?}");
    match serde_json::from_str(&out.stdout).unwrap() {
        Value::Array(a) => a,
        other => panic!("not an array: {other}"),
    }
}

fn outcomes(recs: &[Value]) -> Vec<String> {
    recs.iter()
        .map(|r| r["outcome"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn each_outcome_leaves_its_record_newest_first() {
    let server = RedisServer::start();
    let name = "nightly";
    let dl = |args: &[&str]| {
        let mut c = distlock(&server);
        c.arg("run").arg(name).args(args);
        c
    };
    assert_eq!(run(&mut dl(&["--", "true"])).code, 0);
    assert_eq!(run(&mut dl(&["--", "sh", "-c", "exit 3"])).code, 3);
    assert_eq!(run(&mut dl(&["--", "sh", "-c", "kill -TERM $$"])).code, 143);
    assert_eq!(
        run(&mut dl(&["--", "/nonexistent/distlock-test-cmd"])).code,
        127
    );
    // Lease lost: the key deleted under a running CMD.
    let mut lost = dl(&["--ttl", "3s", "--", "sleep", "30"]);
    let mut child = lost
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(LIMIT, || server.get(&key(name)).is_some()));
    let _: i64 = server.cmd(&["DEL", &key(name)]);
    assert_eq!(wait_with_timeout(&mut child, LIMIT).code(), Some(124));
    // Once per window: a success, then a skip.
    let once = ["--once-per", "1h", "--done-exit-code", "9", "--", "true"];
    assert_eq!(run(&mut dl(&once)).code, 0);
    assert_eq!(run(&mut dl(&once)).code, 9);

    let recs = records(&server, name);
    assert_eq!(
        outcomes(&recs),
        [
            "skipped_done",
            "success",
            "lease_lost",
            "not_started",
            "signaled",
            "failed",
            "success"
        ]
    );
    let codes: Vec<i64> = recs
        .iter()
        .map(|r| r["exit_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [9, 0, 124, 127, 143, 3, 0]);
    // Only a --max-hold stop says what stopped it.
    assert!(
        recs.iter().all(|r| r.get("stopped_by").is_none()),
        "{recs:?}"
    );
    let host = hostname();
    let mut last_token = u64::MAX;
    let mut last_start = u64::MAX;
    for r in &recs {
        assert_eq!(r["host"], host.as_str(), "{r}");
        let pid = r["pid"].as_u64().unwrap();
        assert!(pid > 0, "{r}");
        let owner = r["owner"].as_str().unwrap();
        assert!(
            owner.starts_with(&format!("{host}:{pid}:")),
            "owner {owner} is this run's: {r}"
        );
        let started = r["started_at"].as_str().unwrap();
        assert!(started.ends_with('Z') && started.contains('T'), "{r}");
        let t = chrono_ms(started);
        assert!(t <= last_start, "newest first: {r}");
        last_start = t;
        assert!(r["duration_ms"].as_u64().is_some(), "{r}");
        if r["outcome"] == "skipped_done" {
            assert!(r["fencing_token"].is_null(), "{r}");
        } else {
            let token = r["fencing_token"].as_u64().unwrap();
            assert!(token < last_token, "tokens newest first: {r}");
            last_token = token;
        }
    }
    // The lease-lost run held the lock about until the key went.
    assert!(recs[2]["duration_ms"].as_u64().unwrap() < 15_000);

    // Plain output in a pipe: ASCII summary, oldest to newest, then a line
    // per run, newest first.
    let out = run(distlock(&server).args(["history", name]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.is_ascii(), "{}", out.stdout);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1 + recs.len(), "{}", out.stdout);
    assert_eq!(lines[0], "+xxx!+-", "{}", out.stdout);
    for (line, outcome) in lines[1..].iter().zip(outcomes(&recs)) {
        assert!(line.contains(&outcome), "{line} has {outcome}");
        assert!(line.contains(&host), "{line}");
    }
    assert!(lines[1].contains("skipped_done"), "{}", out.stdout);

    // -n: the newest N.
    let out = run(distlock(&server).args(["history", name, "--json", "-n", "2"]));
    let two: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(outcomes(&two), ["skipped_done", "success"]);
}

/// Seconds since the epoch of an RFC 3339 UTC time `YYYY-MM-DDTHH:MM:SS(.fff)Z`,
/// in ms; only its order matters here.
fn chrono_ms(s: &str) -> u64 {
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    let mut padded = digits;
    while padded.len() < 17 {
        padded.push('0');
    }
    padded[..17].parse().unwrap()
}

#[test]
fn the_cap_holds_and_zero_keeps_none() {
    let server = RedisServer::start();
    let name = "capped";
    for i in 0..5 {
        let code = format!("exit {i}");
        let out = run(distlock(&server).args([
            "run",
            name,
            "--history-keep",
            "3",
            "--",
            "sh",
            "-c",
            &code,
        ]));
        assert_eq!(out.code, i, "{out:?}");
    }
    let recs = records(&server, name);
    let codes: Vec<i64> = recs
        .iter()
        .map(|r| r["exit_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [4, 3, 2], "the newest 3");
    let len: i64 = server.cmd(&["LLEN", &history_key(name)]);
    assert_eq!(len, 3);

    // The environment sets the cap too; 0 keeps none.
    let out = run(distlock(&server)
        .env("DISTLOCK_HISTORY_KEEP", "0")
        .args(["run", name, "--", "true"]));
    assert_eq!(out.code, 0, "{out:?}");
    let len: i64 = server.cmd(&["EXISTS", &history_key(name)]);
    assert_eq!(len, 0, "0 keeps none");
    let out = run(distlock(&server).args(["history", name, "--json"]));
    assert_eq!((out.code, out.stdout.trim()), (0, "[]"), "{out:?}");
}

#[test]
fn a_busy_run_leaves_nothing() {
    let server = RedisServer::start();
    let name = "busy";
    let out = run(distlock(&server).args(["acquire", name, "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(distlock(&server).args(["run", name, "--", "true"]));
    assert_eq!(out.code, 75, "{out:?}");
    let out = run(distlock(&server).args(["run", name, "-w", "300ms", "--", "true"]));
    assert_eq!(out.code, 75, "{out:?}");
    let n: i64 = server.cmd(&["EXISTS", &history_key(name)]);
    assert_eq!(n, 0);
    let out = run(distlock(&server).args(["history", name]));
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out:?}");
    let out = run(distlock(&server).args(["history", name, "--json"]));
    assert_eq!((out.code, out.stdout.trim()), (0, "[]"), "{out:?}");
}

#[test]
fn a_foreign_history_key_is_refused_and_list_survives_it() {
    let server = RedisServer::start();
    let _: i64 = server.cmd(&["HSET", &history_key("odd"), "field", "theirs"]);
    let out = run(distlock(&server).args(["acquire", "other", "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out:?}");

    for args in [vec!["history", "odd"], vec!["history", "odd", "--json"]] {
        let out = run(distlock(&server).args(&args));
        assert_eq!(out.code, 125, "{args:?}: {out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{out:?}");
        assert!(lines[0].starts_with("distlock: "), "{out:?}");
        assert!(lines[0].contains(&history_key("odd")), "{out:?}");
        assert!(
            lines[0].contains("does not hold a distlock lease"),
            "{out:?}"
        );
        assert_eq!(out.stdout, "");
    }

    let out = run(distlock(&server).args(["list"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("other"), "{out:?}");
    // The foreign key is left as it was.
    let t: String = server.cmd(&["TYPE", &history_key("odd")]);
    assert_eq!(t, "hash");
}

/// An entry another client pushed onto a distlock history list is not a
/// key of another type: `run` records in front of it as usual, and
/// `history` skips it with one warning line (none with `-q`) and shows
/// the rest, exit 0. Before the fix `run` wrote over it silently and
/// `history` then failed with 125, hiding every record.
#[test]
fn a_foreign_entry_in_the_history_is_skipped_with_one_warning() {
    let server = RedisServer::start();
    let name = "garbled";
    let _: i64 = server.cmd(&["LPUSH", &history_key(name), "\x1b[2Jnot json", "{}"]);
    assert_eq!(
        run(distlock(&server).args(["run", name, "--", "true"])).code,
        0
    );
    for args in [vec!["history", name], vec!["history", name, "--json"]] {
        let out = run(distlock(&server).args(&args));
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one warning: {out:?}");
        assert!(
            lines[0].starts_with("distlock: warning: skipped 2 "),
            "{out:?}"
        );
        assert!(lines[0].contains(&history_key(name)), "{out:?}");
        assert!(out.stdout.contains("success"), "{out:?}");
        assert!(!out.all().contains('\x1b'), "{out:?}");
    }
    let recs = records(&server, name);
    assert_eq!(outcomes(&recs), ["success"]);
    let out = run(distlock(&server).args(["-q", "history", name]));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let kept: i64 = server.cmd(&["LLEN", &history_key(name)]);
    assert_eq!(kept, 3, "the foreign entries are left where they were");
}

/// A run stopped by `--max-hold` says so in its record: its lease was
/// never in danger, and an operator reading a bare `lease_lost` would look
/// for a Redis problem. The contract's outcomes are a closed set with
/// `lease_lost` for exit 124, so the record keeps that word and adds
/// `"stopped_by": "max_hold"`; before the fix nothing told the two apart.
#[test]
fn a_max_hold_stop_is_recorded_as_stopped_by_max_hold() {
    let server = RedisServer::start();
    let name = "toolong";
    let out =
        run(distlock(&server).args(["run", "--max-hold", "300ms", name, "--", "sleep", "30"]));
    assert_eq!(out.code, 124, "{out:?}");
    let recs = records(&server, name);
    assert_eq!(outcomes(&recs), ["lease_lost"]);
    assert_eq!(recs[0]["stopped_by"], "max_hold", "{recs:?}");
    assert_eq!(recs[0]["exit_code"], 124);
    let out = run(distlock(&server).args(["history", name]));
    assert_eq!(out.stdout.lines().next(), Some("!"), "{out:?}");
    assert!(
        out.stdout.contains("lease_lost by max_hold (exit 124)"),
        "{out:?}"
    );
}

/// Script calls (EVALSHA and EVAL) Redis has run since its last `CONFIG
/// RESETSTAT`; an EVALSHA refused with NOSCRIPT (a script's first use on
/// this server) is a failed call and not counted.
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let field = |l: &str, f: &str| -> u64 {
        l.split(&format!("{f}="))
            .nth(1)
            .and_then(|s| s.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .map(|l| field(l, "calls") - field(l, "failed_calls"))
        .sum()
}

#[test]
fn a_skipped_run_is_recorded_by_the_acquire_that_found_the_mark() {
    let server = RedisServer::start();
    let name = "nightly-once";
    let once = [
        "run",
        name,
        "--once-per",
        "1h",
        "--done-exit-code",
        "9",
        "--history-keep",
        "2",
        "--",
        "true",
    ];
    assert_eq!(run(distlock(&server).args(once)).code, 0);
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    let out = run(distlock(&server).args(once));
    assert_eq!(out.code, 9, "{out:?}");
    assert_eq!(
        script_calls(&server),
        1,
        "the skip is decided and recorded in one round trip"
    );
    let recs = records(&server, name);
    assert_eq!(outcomes(&recs), ["skipped_done", "success"]);
    let skipped = &recs[0];
    assert_eq!(skipped["exit_code"], 9, "{skipped}");
    assert_eq!(skipped["host"], hostname().as_str(), "{skipped}");
    assert!(skipped["fencing_token"].is_null(), "{skipped}");
    assert_eq!(skipped["duration_ms"], 0, "{skipped}");
    let pid = skipped["pid"].as_u64().unwrap();
    assert!(
        skipped["owner"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{}:{pid}:", hostname())),
        "{skipped}"
    );
    // The cap applies to the skip's record too.
    assert_eq!(run(distlock(&server).args(once)).code, 9);
    let len: i64 = server.cmd(&["LLEN", &history_key(name)]);
    assert_eq!(len, 2);
}
