//! The README's fencing example, for real: a holder freezes, its lease
//! expires, a newer holder writes, and when the old holder's command wakes
//! up first its write is turned away by the storage (SQLite), because it
//! carries an older fencing token. Uses examples/fenced-write.sh.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::*;

/// On drop (also when a test panics), continues and SIGKILLs everything
/// the test started and may have left stopped or running.
#[derive(Default)]
struct Leftovers {
    children: Vec<Child>,
    groups: Vec<i32>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for &g in &self.groups {
            // SAFETY: plain kill(2) on a process group we created.
            unsafe {
                libc::kill(-g, libc::SIGCONT);
                libc::kill(-g, libc::SIGKILL);
            }
        }
        for c in &mut self.children {
            signal(c.id() as i32, libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fenced-write.sh")
}

#[test]
fn a_frozen_holder_that_wakes_after_its_lease_expired_is_fenced_off_by_the_ledger() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let go = dir.path().join("go");
    let a_pid_file = dir.path().join("a.pid");
    let a_err = dir.path().join("a.err");
    let a_out = dir.path().join("a.out");
    let mut left = Leftovers::default();

    // The set-up from the script's header.
    sqlite(
        &db,
        "CREATE TABLE ledger (id INTEGER PRIMARY KEY,
                              value TEXT, fence INTEGER NOT NULL);
         INSERT INTO ledger VALUES (1, NULL, 0);",
    );

    // Holder A: takes the lease (token a), then waits for `go` before it
    // writes.
    let cmd_a = format!(
        "echo $$ > a.pid; while [ ! -e go ]; do sleep 0.01; done; exec '{}' '{}' from-A",
        script().display(),
        db.display()
    );
    let a = distlock(&server)
        .args(["run", "--ttl", "600ms", "fence-demo", "--", "sh", "-c"])
        .arg(&cmd_a)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&a_out).unwrap())
        .stderr(std::fs::File::create(&a_err).unwrap())
        .spawn()
        .unwrap();
    let dl_a = a.id() as i32;
    left.children.push(a);
    // Wait for CMD A, but give up at once if distlock A ended instead.
    let mut a_ended = None;
    wait_until(LIMIT, || {
        a_ended = left.children[0].try_wait().unwrap();
        a_ended.is_some() || std::fs::read_to_string(&a_pid_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let a_stderr = || std::fs::read_to_string(&a_err).unwrap_or_default();
    assert!(
        a_ended.is_none(),
        "distlock A ended ({a_ended:?}) before CMD A started: {}",
        a_stderr()
    );
    let cmd_a_pid: i32 = wait_for_line(&a_pid_file, Duration::ZERO)
        .unwrap_or_else(|| panic!("CMD A never started: {}", a_stderr()))
        .trim()
        .parse()
        .unwrap();
    // CMD leads its own process group.
    left.groups.push(cmd_a_pid);
    let token_a: u64 = server
        .get("distlock:{fence-demo}:fence")
        .expect("A took a token")
        .parse()
        .unwrap();

    // Freeze the whole "host": distlock first, so it cannot react to CMD
    // stopping, then its guardian (which would otherwise kill CMD at the
    // deadline, as it should when only distlock is stopped), then CMD.
    let guardian = guardian_of(dl_a);
    signal(dl_a, libc::SIGSTOP);
    signal(guardian, libc::SIGSTOP);
    signal(cmd_a_pid, libc::SIGSTOP);
    assert!(
        alive(cmd_a_pid),
        "CMD A was already gone before the freeze: distlock A lost its 600ms \
         lease early (machine too loaded?): {}",
        std::fs::read_to_string(&a_err).unwrap_or_default()
    );

    // The lease runs out server-side; nobody renews it.
    assert!(
        wait_until(LIMIT, || {
            server.cmd::<i64>(&["EXISTS", "distlock:{fence-demo}"]) == 0
        }),
        "the lease of the frozen holder never expired"
    );

    // Holder B takes over and writes with a larger token.
    let mut b_cmd = distlock(&server);
    b_cmd
        .args(["run", "fence-demo", "--"])
        .arg(script())
        .arg(&db)
        .arg("from-B")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut b = b_cmd.spawn().unwrap();
    let st = wait_with_timeout(&mut b, LIMIT);
    let b_out = b.wait_with_output().unwrap();
    assert_eq!(st.code(), Some(0), "holder B: {b_out:?}");
    let b_stdout = String::from_utf8_lossy(&b_out.stdout);
    let token_b: u64 = server
        .get("distlock:{fence-demo}:fence")
        .unwrap()
        .parse()
        .unwrap();
    assert!(token_b > token_a, "{token_b} after {token_a}");
    assert!(
        b_stdout.contains(&format!("with token {token_b}")),
        "holder B writes with its token: {b_out:?}"
    );
    assert_eq!(
        sqlite(&db, "SELECT value, fence FROM ledger"),
        format!("from-B|{token_b}\n")
    );

    // CMD A wakes up first (its distlock is still frozen) and tries to
    // write with its older token.
    std::fs::write(&go, "").unwrap();
    signal(cmd_a_pid, libc::SIGCONT);
    assert!(
        wait_until(LIMIT, || !alive(cmd_a_pid)),
        "CMD A never finished its write attempt"
    );
    signal(guardian, libc::SIGCONT);
    let err = std::fs::read_to_string(&a_err).unwrap();
    assert!(
        err.contains("stale"),
        "CMD A's write must be refused: {err:?}"
    );
    assert!(
        err.contains(&format!("token {token_a} ")),
        "CMD A carried its token {token_a}: {err:?}"
    );
    // CMD A is a zombie of the frozen distlock: its exit status (1) is
    // collected below through distlock's own.

    // distlock A wakes: its lease is long gone, so it reports 124.
    signal(dl_a, libc::SIGCONT);
    let mut a = left.children.pop().unwrap();
    let st = wait_with_timeout(&mut a, LIMIT);
    let err = std::fs::read_to_string(&a_err).unwrap();
    assert_eq!(st.code(), Some(124), "distlock A: {err}");

    // The ledger still holds B's write; the lock is free, counter at B's.
    assert_eq!(
        sqlite(&db, "SELECT value, fence FROM ledger"),
        format!("from-B|{token_b}\n")
    );
    assert_eq!(server.get("distlock:{fence-demo}"), None);
    assert_eq!(
        server.get("distlock:{fence-demo}:fence"),
        Some(token_b.to_string())
    );
    let a_stdout = std::fs::read_to_string(&a_out).unwrap();
    assert!(
        !a_stdout.contains("wrote"),
        "A must not have written: {a_stdout:?}"
    );
}
