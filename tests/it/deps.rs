//! The README's two commands pass on a fresh machine only if
//! `scripts/install-deps.sh` installs every program the tests start: it
//! did not (etcd, etcdctl and promtool came from `.ci/run` alone, so a new
//! user's `cargo test` failed). These tests read the programs the test and
//! bench sources start by name and check that the script's table has each,
//! and that both entry points run the one script.

use crate::common::rust_files;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every program named by a string literal where a process is started:
/// `Command::new("X")` and package.rs's `works("X", …)`. A path (the
/// binary under test, `/usr/bin/distlock`) and cargo itself are not
/// programs to install.
fn programs_started(dirs: &[&str]) -> BTreeSet<String> {
    let mut files = Vec::new();
    for d in dirs {
        rust_files(&root().join(d), &mut files);
    }
    let mut found = BTreeSet::new();
    for file in files {
        if file.ends_with("tests/it/deps.rs") {
            continue; // this file's own examples
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for opener in ["Command::new(\"", "works(\""] {
            for rest in text.split(opener).skip(1) {
                let name = rest.split('"').next().unwrap();
                if !name.contains('/') && name != "cargo" && !name.is_empty() {
                    found.insert(name.to_string());
                }
            }
        }
    }
    found
}

/// The script's table, `program package why`, as (program, package).
fn table() -> Vec<(String, String)> {
    let out = Command::new("bash")
        .arg(root().join("scripts/install-deps.sh"))
        .arg("--list")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let program = w.next().unwrap().to_string();
            let package = w.next().unwrap_or_else(|| panic!("no package: {l}"));
            (program, package.to_string())
        })
        .collect()
}

#[test]
fn install_deps_installs_every_program_the_tests_and_benches_start() {
    let listed: BTreeSet<String> = table().into_iter().map(|(p, _)| p).collect();
    let started = programs_started(&["tests", "benches"]);
    // The scan itself must see the servers, or it proves nothing.
    for known in ["redis-server", "etcd", "etcdctl", "promtool", "openssl"] {
        assert!(started.contains(known), "scan missed {known}: {started:?}");
    }
    let missing: Vec<_> = started.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "started by tests but not in scripts/install-deps.sh: {missing:?}"
    );
}

#[test]
fn demo_and_ci_both_run_install_deps() {
    for entry in ["scripts/demo.sh", ".ci/run"] {
        let text = std::fs::read_to_string(root().join(entry)).unwrap();
        let runs = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .any(|l| l.contains("scripts/install-deps.sh"));
        assert!(runs, "{entry} does not run scripts/install-deps.sh");
        // Nothing else installs packages: one list, one place.
        assert!(
            !text.contains("apt-get install"),
            "{entry} installs packages itself"
        );
    }
}

/// After the README's first command, every program is there: one line
/// naming what is missing beats a panic per test deep in a helper.
#[test]
fn every_program_in_install_deps_is_on_path() {
    let missing: Vec<_> = table()
        .into_iter()
        .filter(|(program, _)| {
            !Command::new("sh")
                .args(["-c", "command -v \"$0\" >/dev/null", program])
                .status()
                .unwrap()
                .success()
        })
        .collect();
    assert!(
        missing.is_empty(),
        "missing (run `bash scripts/install-deps.sh` as root): {missing:?}"
    );
}
