//! The status line of a waiting `run` (contract, "Run history and
//! metrics"): on a pseudo-terminal it names the holder's host, pid and
//! command, how long it has held, our place in the queue and how long we
//! have waited, is redrawn about once a second and erased when the lock is
//! taken; in a pipe, with `-q` and with `TERM=dumb` there is none; and
//! watching sends the server no command of its own.
//!
//! The waiter's stderr is the slave side of a pty of our own (it needs no
//! controlling terminal: `isatty(2)` is what counts); a thread reads the
//! master side until every copy of the slave is closed.

use crate::common::holder;
use crate::common::*;
use holder::Holder;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

const ERASE: &str = "\r\x1b[K";

/// Everything written to a pty's slave side, as the master reads it.
struct Screen {
    text: Arc<Mutex<Vec<u8>>>,
    reader: JoinHandle<()>,
}

impl Screen {
    /// Starts reading `master`; returns the screen and the slave side for
    /// the child's stderr (the caller's copy must be dropped once it is
    /// spawned, so the reader sees the end).
    fn open() -> (Screen, OwnedFd) {
        let (master, slave) = open_pty(200);
        let text = Arc::new(Mutex::new(Vec::new()));
        let t = text.clone();
        let reader = std::thread::spawn(move || {
            let mut f = std::fs::File::from(master);
            let mut buf = [0u8; 4096];
            // EIO once no one holds the slave side any more.
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                t.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        (Screen { text, reader }, slave)
    }

    fn now(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }

    /// Everything, once the child (the last holder of the slave) is gone.
    fn finish(self) -> String {
        self.reader.join().unwrap();
        let text = self.text.lock().unwrap();
        String::from_utf8_lossy(&text).into_owned()
    }
}

/// `distlock run --wait WAIT NAME -- true` with stderr on a new pty,
/// stdin and stdout closed; waits for it and returns its exit code and
/// what reached the terminal.
fn on_pty(mut cmd: Command, during: impl FnOnce(&Screen)) -> (i32, String) {
    let (screen, slave) = Screen::open();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    drop(cmd);
    during(&screen);
    let code = wait_with_timeout(&mut child, LIMIT).code().unwrap_or(-1);
    (code, screen.finish())
}

/// The last line drawn names us first in line for `name`, and the holder
/// by this host, its pid and its command (a `sh -c` from `Holder`).
fn assert_last_line_names_the_holder(screen: &str, name: &str, pid: u32) {
    let last = screen
        .rsplit(ERASE)
        .find(|l| !l.is_empty())
        .unwrap_or_else(|| panic!("nothing drawn: {screen:?}"));
    assert!(
        last.starts_with(&format!(
            "distlock: waiting for {name} (1st in line, waited "
        )) && last.contains(&format!("): held by {} pid {pid} for ", hostname()))
            && last.contains("sh -c "),
        "{last:?} in {screen:?}"
    );
}

fn waiter(server: &RedisServer, wait: &str, extra: &[&str]) -> Command {
    let mut c = distlock(server);
    c.env("TERM", "xterm")
        .args(extra)
        .args(["run", "--wait", wait, "t", "--", "true"]);
    c
}

/// Holds `t` for a minute with `acquire`: no process, no renewals, so
/// the server sees only the waiter's commands.
fn hold_quietly(server: &RedisServer) {
    let out = exec(
        distlock(server).args(["acquire", "t", "--ttl", "60s"]),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn the_line_names_holder_and_place_and_is_erased_when_the_lock_is_taken() {
    let server = RedisServer::start();
    let mut holder = Holder::spawn_cmd(
        distlock(&server).args(["run", "t"]).stderr(Stdio::null()),
        &[],
    );
    holder.wait_held();
    let (code, screen) = on_pty(waiter(&server, "30s", &[]), |s| {
        // Redrawn while nothing else happens: a second line of waiting.
        assert!(
            wait_until(LIMIT, || s.now().contains("waited 2s")),
            "no status line redrawn: {:?}",
            s.now()
        );
        holder.finish();
    });
    assert_eq!(code, 0, "{screen:?}");
    assert_last_line_names_the_holder(&screen, "t", holder.pid());
    assert!(
        screen.matches(ERASE).count() >= 4,
        "redrawn in place: {screen:?}"
    );
    // Erased when the lock is taken: the screen ends with the erase.
    assert!(screen.ends_with(ERASE), "{screen:?}");
    assert!(!screen.contains('\n'), "one line only: {screen:?}");
}

#[test]
fn no_line_in_a_pipe_with_q_or_with_term_dumb() {
    let server = RedisServer::start();
    hold_quietly(&server);
    // A pipe (a file here): the conflict line only.
    let out = exec(&mut waiter(&server, "1500ms", &[]), LIMIT);
    assert_eq!(out.code, 75, "{out:?}");
    assert!(
        !out.stderr.contains('\x1b') && !out.stderr.contains("waiting for"),
        "{out:?}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    // -q at a terminal: nothing at all.
    let (code, screen) = on_pty(waiter(&server, "1500ms", &["-q"]), |_| {});
    assert_eq!((code, screen.as_str()), (75, ""));
    // TERM=dumb at a terminal: the conflict line, no status line.
    let mut dumb = waiter(&server, "1500ms", &[]);
    dumb.env("TERM", "dumb");
    let (code, screen) = on_pty(dumb, |_| {});
    assert_eq!(code, 75, "{screen:?}");
    assert!(
        !screen.contains('\x1b') && !screen.contains("waiting for"),
        "{screen:?}"
    );
    assert!(screen.contains("t is held by"), "{screen:?}");
}

/// Calls per command since the last `CONFIG RESETSTAT`, without the
/// test's own INFO and CONFIG.
fn calls(server: &RedisServer) -> BTreeMap<String, u64> {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), n))
        })
        .filter(|(name, _)| name != "info" && !name.starts_with("config"))
        .collect()
}

#[test]
fn watching_costs_the_server_no_command() {
    let server = RedisServer::start();
    hold_quietly(&server);
    // A first wait loads every script the others use.
    assert_eq!(exec(&mut waiter(&server, "100ms", &[]), LIMIT).code, 75);
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    let out = exec(&mut waiter(&server, "3s", &[]), LIMIT);
    assert_eq!(out.code, 75, "{out:?}");
    let unwatched = calls(&server);
    let _: String = server.cmd(&["CONFIG", "RESETSTAT"]);
    let (code, screen) = on_pty(waiter(&server, "3s", &[]), |_| {});
    assert_eq!(code, 75, "{screen:?}");
    assert!(screen.contains("waited 2s"), "watched: {screen:?}");
    assert_eq!(
        calls(&server),
        unwatched,
        "three seconds of waiting, at a terminal and not"
    );
}

/// The same line on etcd: the holder's host, pid and command come from
/// its metadata key, read in the waiter's own attempt.
#[test]
fn on_etcd_the_line_names_holder_and_place_too() {
    let url = crate::common::etcd::shared().url();
    let on_etcd = || {
        let mut c = bare_distlock();
        c.env("DISTLOCK_URL", &url);
        c
    };
    let mut holder = Holder::spawn_cmd(
        on_etcd().args(["run", "status-etcd"]).stderr(Stdio::null()),
        &[],
    );
    holder.wait_held();
    let mut waiter = on_etcd();
    waiter
        .env("TERM", "xterm")
        .args(["run", "--wait", "30s", "status-etcd", "--", "true"]);
    let (code, screen) = on_pty(waiter, |s| {
        assert!(
            wait_until(LIMIT, || s.now().contains("waited 2s")),
            "no status line redrawn: {:?}",
            s.now()
        );
        holder.finish();
    });
    assert_eq!(code, 0, "{screen:?}");
    assert_last_line_names_the_holder(&screen, "status-etcd", holder.pid());
    assert!(screen.ends_with(ERASE), "{screen:?}");
}
