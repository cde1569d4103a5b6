//! Help for unit tests that must not share the harness's process.

use std::process::Command;

/// Runs the ignored test `path` alone in a child test process and returns
/// what it printed, failing the caller unless it ran and passed. A test goes
/// there when it needs what one multi-threaded harness cannot give it: an
/// environment of its own (clap reads the real one), or sole use of
/// `waitpid(-1)`, which would take other tests' children.
/// `configure` sets the child's environment.
pub fn run_alone(path: &str, configure: impl FnOnce(&mut Command)) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args([
        "--exact",
        path,
        "--ignored",
        "--test-threads=1",
        "--nocapture",
    ]);
    configure(&mut child);
    let out = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{path}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
