//! `run --metrics-file PATH` against a real redis-server and the real
//! binary: the file passes `promtool check metrics` (CI installs promtool:
//! without it these tests fail, they do not skip), carries the four
//! gauges labelled with the name, keeps the last success across a failed
//! run, is replaced by rename (never rewritten in place, no temporary file
//! left), and a path that cannot be written is a warning that leaves the
//! exit status alone.

use crate::common::*;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// `promtool check metrics` on the file: exit 0 and no lint complaints.
fn promtool_accepts(path: &Path) {
    let text = std::fs::read(path).unwrap();
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is needed (Debian: apt-get install prometheus)");
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&text)
    );
}

/// The value of `metric{name="NAME"}` in the file.
fn value(path: &Path, metric: &str, name: &str) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let prefix = format!("{metric}{{name=\"{name}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {text}"))
        .parse()
        .unwrap()
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn the_file_parses_and_keeps_the_last_success_across_a_failure() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nightly.prom");
    let before = now_s();
    let out = exec(
        distlock(&server).args([
            "run",
            "nightly",
            "--metrics-file",
            file.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "sleep 0.2",
        ]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    promtool_accepts(&file);
    let started = value(&file, "distlock_last_run_timestamp_seconds", "nightly");
    assert!(started >= before - 1.0 && started <= now_s(), "{started}");
    let took = value(&file, "distlock_last_run_duration_seconds", "nightly");
    assert!((0.2..10.0).contains(&took), "{took}");
    assert_eq!(value(&file, "distlock_last_exit_code", "nightly"), 0.0);
    let success = value(&file, "distlock_last_success_timestamp_seconds", "nightly");
    assert_eq!(success, started);
    let first = std::fs::read_to_string(&file).unwrap();

    // A failed run, the path from the environment: the file is replaced
    // by a new one (the old inode, reachable by a hard link, is untouched)
    // and the last success is carried over.
    let old = dir.path().join("old-link");
    std::fs::hard_link(&file, &old).unwrap();
    let out = exec(
        distlock(&server)
            .env("DISTLOCK_METRICS_FILE", &file)
            .args(["run", "nightly", "--", "sh", "-c", "exit 3"]),
        LIMIT,
    );
    assert_eq!(out.code, 3, "{out:?}");
    promtool_accepts(&file);
    assert_eq!(value(&file, "distlock_last_exit_code", "nightly"), 3.0);
    assert_eq!(
        value(&file, "distlock_last_success_timestamp_seconds", "nightly"),
        success,
        "kept from the previous file"
    );
    assert!(value(&file, "distlock_last_run_timestamp_seconds", "nightly") >= started);
    assert_eq!(
        std::fs::read_to_string(&old).unwrap(),
        first,
        "written by rename, never in place"
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["nightly.prom", "old-link"],
        "no temporary file left"
    );
}

#[test]
fn a_file_that_cannot_be_written_is_a_warning_not_a_new_exit_status() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("no-such-dir").join("x.prom");
    for (cmd, code) in [("exit 0", 0), ("exit 3", 3)] {
        let out = exec(
            distlock(&server).args([
                "run",
                "job",
                "--metrics-file",
                bad.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                cmd,
            ]),
            LIMIT,
        );
        assert_eq!(out.code, code, "{out:?}");
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{out:?}");
        assert!(lines[0].starts_with("distlock: warning: "), "{out:?}");
        assert!(lines[0].contains("x.prom"), "{out:?}");
    }
    assert!(!bad.exists());
}

/// A `--metrics-file` that is a FIFO (or any existing path that is no
/// regular file) is a usage error before the lock is taken: exit 2 at
/// once, one line, no token issued. Before the fix the run took the lock,
/// ran CMD, released, then blocked for ever reading the FIFO for the last
/// success.
#[test]
fn a_metrics_file_that_is_a_fifo_is_refused_before_the_lock_is_taken() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("m.prom");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for path in [fifo.as_path(), dir.path()] {
        let out = exec(
            distlock(&server)
                .args(["run", "--metrics-file"])
                .arg(path)
                .args(["fifo", "--", "true"]),
            LIMIT,
        );
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.took < std::time::Duration::from_secs(5), "{out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
        assert!(out.stderr.contains("not a regular file"), "{out:?}");
        assert_eq!(server.get(&fence("fifo")), None, "the lock was taken");
    }
}
