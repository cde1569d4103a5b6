//! The client hosts: each loops `distlock run --wait 30s --ttl 2s lab --
//! bash -c CMD` inside its namespace. CMD appends its start, its fenced
//! writes and its end to the shared history; the loop appends how each
//! run ended. One machine, one clock: the times compare exactly.

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::checker::now_us;

/// CMD. `$EPOCHREALTIME` is bash's CLOCK_REALTIME in µs, read without a
/// fork. The fenced write is one SQLite transaction: raise the fence if
/// this token is at least as new, and log the write only if it did; the
/// log's row order is the order the store accepted writes in. A holder
/// stopped by distlock records when it got the signal (`K`). How long it
/// holds between its two writes is read from a file the nemesis sets.
pub const CMD: &str = r#"
tok=$DISTLOCK_FENCING_TOKEN
rec() { local t=$EPOCHREALTIME; echo "$1 ${t/./} $LAB_RUN $tok${2:+ $2}" >> "$LAB_HISTORY"; }
trap 'rec K; exit 143' TERM
rec S
w() {
  a=$(sqlite3 -cmd '.timeout 5000' "$LAB_DB" "BEGIN IMMEDIATE;
    UPDATE fence SET token = $tok WHERE id = 1 AND token <= $tok;
    INSERT INTO writes (token, run) SELECT $tok, '$LAB_RUN' WHERE changes() = 1;
    SELECT changes(); COMMIT;")
  rec W "${a:-x}"
}
w
read -r hold < "$LAB_HOLD"
sleep "${hold:-0.05}"
w
rec E
"#;

/// The SQLite schema of the fenced resource.
pub const SCHEMA: &str = "CREATE TABLE fence (id INTEGER PRIMARY KEY, token INTEGER NOT NULL);
INSERT INTO fence VALUES (1, 0);
CREATE TABLE writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL, run TEXT NOT NULL);";

pub struct Clients {
    stop: Arc<AtomicBool>,
    /// The pid of each client's current distlock (0: none).
    pids: Arc<Mutex<Vec<i32>>>,
    threads: Vec<JoinHandle<()>>,
}

pub struct Setup {
    pub distlock: PathBuf,
    pub url: String,
    /// The store's own options (`--min-replicas 1` for Sentinel).
    pub options: Vec<String>,
    /// Extra environment for distlock (the lab's broken-distlock switch).
    pub env: Vec<(&'static str, &'static str)>,
    pub history: PathBuf,
    pub db: PathBuf,
    /// The file CMD reads its hold time from (seconds).
    pub hold: PathBuf,
    pub logs: PathBuf,
}

impl Clients {
    /// Starts one loop per `(name, namespace)`.
    pub fn start(hosts: &[(String, String)], setup: Arc<Setup>) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let pids = Arc::new(Mutex::new(vec![0; hosts.len()]));
        let threads = hosts
            .iter()
            .enumerate()
            .map(|(i, (host, ns))| {
                let (stop, pids, setup) = (stop.clone(), pids.clone(), setup.clone());
                let (host, ns) = (host.clone(), ns.clone());
                std::thread::spawn(move || client(i, &host, &ns, &setup, &stop, &pids))
            })
            .collect();
        Clients {
            stop,
            pids,
            threads,
        }
    }

    /// Client `i`'s running distlock, if one runs.
    pub fn pid(&self, i: usize) -> Option<i32> {
        let pid = self.pids.lock().unwrap()[i];
        (pid != 0).then_some(pid)
    }

    /// Ends the loops: no new run starts; the runs in flight get SIGTERM
    /// (distlock passes it to CMD and releases) and are waited for.
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for pid in self.pids.lock().unwrap().iter().filter(|&&p| p != 0) {
            let pid = nix::unistd::Pid::from_raw(*pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGCONT);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGTERM);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.end();
    }
}

fn client(i: usize, host: &str, ns: &str, s: &Setup, stop: &AtomicBool, pids: &Mutex<Vec<i32>>) {
    let log = |name: &Path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(name)
            .unwrap()
    };
    let mut seq = 0;
    while !stop.load(Ordering::SeqCst) {
        seq += 1;
        let run = format!("{host}.{seq}");
        let start = now_us();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(&s.distlock)
            .args(["--url", &s.url])
            .args(&s.options)
            .args(["-q", "run", "--wait", "30s", "--ttl", "2s", "lab"])
            .args(["--", "bash", "-c", CMD])
            .env("LAB_RUN", &run)
            .env("LAB_HISTORY", &s.history)
            .env("LAB_DB", &s.db)
            .env("LAB_HOLD", &s.hold)
            .env("LC_ALL", "C")
            .envs(s.env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log(&s.logs.join(format!("{host}.log"))));
        // SAFETY: prctl is async-signal-safe; this thread waits for the
        // child, so PDEATHSIG (which follows the spawning thread) only
        // fires if the whole test process dies.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("cannot start distlock in {ns}: {e}"),
        };
        pids.lock().unwrap()[i] = child.id() as i32;
        let status = child.wait().unwrap();
        pids.lock().unwrap()[i] = 0;
        let rc = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        let line = format!("R {start} {} {run} {rc}\n", now_us());
        log(&s.history).write_all(line.as_bytes()).unwrap();
        // A store that fails at once (a master Sentinel names but that is
        // a replica for a moment) would turn the loop into a busy one, as
        // it would a cron job's retry loop: pause as such a loop does.
        if rc == 125 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}
