//! distlock's etcd names beside etcd's own lock recipe (`etcdctl lock`,
//! Go's `concurrency.Mutex`): they do not exclude each other, because
//! distlock's keys (`PREFIX:{NAME}`) are not the recipe's (`NAME/<lease>`).
//! docs/guide.md says so; this test keeps it true.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::etcd::{at, shared};
use crate::common::*;

#[test]
fn etcdctl_lock_and_distlock_run_of_the_same_name_hold_at_once() {
    let e = shared();
    let name = "ei-shared";
    let dir = tempfile::tempdir().unwrap();
    let said = dir.path().join("said");
    // etcdctl holds the lock while its command runs: the shell says its
    // pid once it runs, and sleeps until killed.
    let mut ctl = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=127.0.0.1:{}", e.port))
        .args(["lock", name, "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 60", said.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sh: i32 = wait_for_line(&said, LIMIT)
        .expect("etcdctl lock ran its command")
        .trim()
        .parse()
        .unwrap();
    let _sleeper = KillOnDrop(sh);

    let out = exec(
        at(&e.url()).args(["run", name, "--", "sh", "-c", "echo ran"]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "distlock ran beside etcdctl lock: {out:?}");
    assert_eq!(out.stdout.trim(), "ran", "{out:?}");

    // Its command ended: etcdctl unlocks and exits.
    signal(sh, libc::SIGKILL);
    wait_with_timeout(&mut ctl, LIMIT);

    // And the other way round: while distlock holds the name, etcdctl
    // takes its own lock of the same name at once.
    let out = exec(
        at(&e.url()).args(["acquire", name, "--ttl", "30s", "--json"]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    let owner = json(&out.stdout)["owner"].as_str().unwrap().to_owned();
    let took = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=127.0.0.1:{}", e.port))
        .args(["lock", name, "echo", "got it"])
        .output_within(Duration::from_secs(10));
    assert!(took.status.success(), "{took:?}");
    assert_eq!(String::from_utf8_lossy(&took.stdout).trim(), "got it");
    let out = exec(
        at(&e.url()).args(["release", name, "--owner", &owner]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
}
