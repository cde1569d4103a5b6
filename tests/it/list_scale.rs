//! `list` over many held locks (docs/queue.md, Scale): its memory grows with the
//! names, not with everything it prints, because it reads the details and
//! prints them a batch at a time.
//!
//! 20,000 locks are made as the scale bench makes its 100,000: one real
//! `distlock acquire`, then its keys copied under new names with DUMP and
//! RESTORE, pipelined.

use crate::common::*;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

const LOCKS: usize = 20_000;

/// Peak RSS allowed for `list` over 20,000 locks. The whole-list code
/// (read everything, sort, pad, then print) peaked at 103 MiB here (debug
/// build); batches of 500 need the names (a few MiB) and one batch's
/// details on top of the binary: 14.7 MiB.
const MAX_RSS_KIB: u64 = 40 * 1024;

fn populate(server: &RedisServer) {
    let out = distlock(server)
        .args(["acquire", "--ttl", "1h", "--owner", "bench:0:1", "tmpl"])
        .output_within(Duration::from_secs(30));
    assert!(out.status.success(), "{out:?}");
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("distlock:{tmpl}*")
        .query(&mut con)
        .unwrap();
    assert!(!keys.is_empty());
    let dumps: Vec<(String, Vec<u8>, i64)> = keys
        .iter()
        .map(|k| {
            let d: Vec<u8> = redis::cmd("DUMP").arg(k).query(&mut con).unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(k).query(&mut con).unwrap();
            (k.clone(), d, ttl.max(0))
        })
        .collect();
    for chunk in (0..LOCKS).collect::<Vec<_>>().chunks(2000) {
        let mut p = redis::pipe();
        for i in chunk {
            for (k, d, ttl) in &dumps {
                p.cmd("RESTORE")
                    .arg(k.replace("{tmpl}", &format!("{{list-{i:05}}}")))
                    .arg(*ttl)
                    .arg(d.as_slice())
                    .ignore();
            }
        }
        let _: () = p.query(&mut con).unwrap();
    }
}

/// Script calls (EVAL, EVALSHA) the server has run so far.
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| l.starts_with("cmdstat_eval:") || l.starts_with("cmdstat_evalsha:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Runs `distlock list ARGS`, calls `at_first_byte` once its first byte is
/// read (distlock is then stopped at a full pipe, at the latest), reads the
/// rest, and returns it with distlock's peak RSS (KiB).
///
/// The peak is VmHWM of distlock's own address space, read after each
/// chunk of output while distlock is alive (blocked on the pipe we have
/// not emptied yet). Not `ru_maxrss`: Linux carries the high-water mark of
/// the address space a child leaves at exec into it, and a child spawned
/// by this test binary starts in a copy (or, with vfork, in the very
/// space) of the binary's own, so `ru_maxrss` is at least the whole test
/// process's peak: 117 MB once the etcd tests ran beside it.
fn list(server: &RedisServer, args: &[&str], at_first_byte: impl FnOnce()) -> (String, u64) {
    let mut child = distlock(server)
        .arg("list")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let hwm = |pid: u32| -> Option<u64> {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    at_first_byte();
    let mut bytes = vec![first[0]];
    let mut peak = hwm(child.id()).unwrap_or(0);
    let mut chunk = [0u8; 16384];
    loop {
        let n = stdout.read(&mut chunk).unwrap();
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
        peak = peak.max(hwm(child.id()).unwrap_or(0));
    }
    let status = wait_with_timeout(&mut child, LIMIT);
    assert!(status.success(), "list {args:?}: {status}");
    assert!(peak > 0, "distlock's VmHWM was never read");
    (String::from_utf8(bytes).unwrap(), peak)
}

#[test]
fn list_of_twenty_thousand_locks_is_complete_sorted_and_small() {
    let server = RedisServer::start();
    populate(&server);
    let mut names: Vec<String> = (0..LOCKS).map(|i| format!("list-{i:05}")).collect();
    names.push("tmpl".into());

    let (text, rss) = list(&server, &[], || ());
    eprintln!("list: peak RSS {rss} KiB");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), LOCKS + 2, "a header and one line per lock");
    assert!(lines[0].starts_with("NAME "), "{}", lines[0]);
    let listed: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(listed, names, "every lock, sorted by name");
    assert!(
        lines[1..].iter().all(|l| l.contains(" bench:0:1")),
        "each line shows the owner"
    );
    assert!(
        rss < MAX_RSS_KIB,
        "list: peak RSS {rss} KiB, bound {MAX_RSS_KIB} KiB"
    );

    // 500 JSON objects are more than a pipe holds: until its first byte is
    // read, distlock cannot have got past printing the first batch.
    let before = script_calls(&server);
    let mut read_at_first_byte = 0;
    let (text, rss) = list(&server, &["--json"], || {
        read_at_first_byte = script_calls(&server) - before;
        eprintln!("list --json: {read_at_first_byte} script calls at its first byte");
    });
    assert!(
        read_at_first_byte <= 1000,
        "output starts before the locks are all read: {read_at_first_byte} of {} read by then",
        LOCKS + 1
    );
    eprintln!("list --json: peak RSS {rss} KiB");
    let v: serde_json::Value = serde_json::from_str(&text).expect("one JSON array");
    let listed: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, names, "every lock, sorted by name");
    assert_eq!(v[0]["owner"], "bench:0:1");
    assert!(
        rss < MAX_RSS_KIB,
        "list --json: peak RSS {rss} KiB, bound {MAX_RSS_KIB} KiB"
    );
}
