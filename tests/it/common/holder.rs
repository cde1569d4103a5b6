//! One holder for every test that needs a lock held by someone else: a
//! `distlock … -- sh -c HOLD` whose CMD reports itself and then runs until
//! the test closes its stdin. "Held" is an event, not a guess: CMD only
//! starts once distlock owns the lock, and it writes its environment before
//! anything else.

use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, Command, ExitStatus, Stdio};

use crate::common::{distlock_at, signal, wait_for_line, wait_with_timeout, LIMIT};

/// CMD, run as `sh -c HOLD sh DIR`: its pid to `DIR/pid`, its environment
/// to `DIR/env` (by a rename, so a reader never sees half of it), then it
/// reads stdin to EOF and exits 0.
const HOLD: &str = r#"echo $$ > "$1/pid" && env > "$1/env.tmp" && mv "$1/env.tmp" "$1/env" && exec cat > /dev/null"#;

/// A distlock that holds a lock while its CMD waits on stdin; the test
/// decides when it ends, so nothing depends on timing. Dropping it ends
/// CMD, kills distlock and reaps it.
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
    /// CMD's environment, once it has started.
    env: Option<Vec<(String, String)>>,
}

impl Holder {
    /// `distlock ARGS -- sh -c HOLD` against `url`, once CMD runs (the
    /// lock is held); ARGS name the subcommand, e.g. `["run", "NAME"]`.
    pub fn start(url: &str, args: &[&str]) -> Holder {
        let mut h = Holder::spawn(url, args);
        h.wait_held();
        h
    }

    /// The same, returning at once: the lock may not be held yet.
    pub fn spawn(url: &str, args: &[&str]) -> Holder {
        Holder::spawn_cmd(distlock_at(url).args(args).stderr(Stdio::null()), &[])
    }

    /// `CMD -- sh -c HOLD sh DIR CMD_ARGS…` for a distlock command the
    /// caller set up (environment, options, stderr), returning at once.
    /// `cmd_args` only show in CMD's command line.
    pub fn spawn_cmd(cmd: &mut Command, cmd_args: &[&str]) -> Holder {
        let dir = tempfile::tempdir().unwrap();
        let mut child = cmd
            .args(["--", "sh", "-c", HOLD, "sh"])
            .arg(dir.path())
            .args(cmd_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()));
        Holder {
            stdin: child.stdin.take(),
            child,
            dir,
            env: None,
        }
    }

    /// Waits (bounded) until CMD has started; false if it never did.
    pub fn try_wait_held(&mut self) -> bool {
        if self.env.is_none() {
            let path = self.path("env");
            if wait_for_line(&path, LIMIT).is_none() {
                return false;
            }
            let text = std::fs::read_to_string(path).unwrap();
            self.env = Some(
                text.lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
            );
        }
        true
    }

    /// Waits (bounded) until CMD has started, and fails the test if it
    /// never does.
    pub fn wait_held(&mut self) {
        if !self.try_wait_held() {
            let st = self.child.try_wait().unwrap();
            panic!("holder's CMD never started (distlock: {st:?})");
        }
    }

    /// CMD's environment, as CMD saw it.
    pub fn env(&self) -> &[(String, String)] {
        self.env
            .as_deref()
            .expect("wait_held before reading CMD's env")
    }

    /// One variable of CMD's environment.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.env()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// CMD's DISTLOCK_OWNER.
    pub fn owner(&self) -> &str {
        self.var("DISTLOCK_OWNER").expect("DISTLOCK_OWNER set")
    }

    /// CMD's DISTLOCK_FENCING_TOKEN.
    pub fn token(&self) -> u64 {
        self.var("DISTLOCK_FENCING_TOKEN")
            .expect("DISTLOCK_FENCING_TOKEN set")
            .parse()
            .unwrap()
    }

    /// CMD's pid.
    pub fn cmd_pid(&self) -> i32 {
        self.env();
        std::fs::read_to_string(self.path("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// distlock's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// distlock's stderr, when the caller had it piped.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.stderr.take()
    }

    /// distlock's status if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Lets CMD end (exit 0), without waiting for distlock.
    pub fn end_cmd(&mut self) {
        drop(self.stdin.take());
    }

    /// Lets CMD end (exit 0) and waits (bounded) for distlock.
    pub fn finish(&mut self) -> ExitStatus {
        self.end_cmd();
        self.wait()
    }

    /// Waits (bounded) for distlock to end on its own, CMD left as it is.
    pub fn wait(&mut self) -> ExitStatus {
        wait_with_timeout(&mut self.child, LIMIT)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Ok(None) = self.child.try_wait() {
            // distlock's death takes CMD's group with it (its guardian).
            signal(self.child.id() as i32, libc::SIGCONT);
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
