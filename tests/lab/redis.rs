//! Redis with Sentinel: in each member's namespace a redis-server (m1 the
//! first master, m2 and m3 its replicas, append-only, started from a
//! config file that Sentinel rewrites on failover, so a restarted member
//! comes back in its last role) and a sentinel (quorum 2, a member down
//! after 1 s). Clients use `redis+sentinel://` with `--min-replicas 1`, as
//! the guide recommends for two replicas.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, Leader, Servers, MEMBERS};
use crate::net::Net;

const MASTER: &str = "mymaster";

pub struct Sentinels {
    dir: PathBuf,
    data: Servers,
    sentinels: Vec<Child>,
}

/// Starts `redis-server conf` (a sentinel with `sentinel`) inside node's
/// namespace, killed if this thread dies.
fn spawn(net: &Net, node: &str, sentinel: bool, conf: &PathBuf, log: &PathBuf) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &net.ns(node), "redis-server"])
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    if sentinel {
        cmd.arg("--sentinel");
    }
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    // Only the test's own thread spawns servers, and it outlives them.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .expect("cannot start redis-server in its namespace")
}

impl Sentinels {
    /// Starts the three data nodes and three sentinels and waits until the
    /// master has both replicas and the sentinels reach their quorum.
    pub fn start(net: &Net, dir: PathBuf) -> Sentinels {
        let master = net.addr(MEMBERS[0]);
        let mut set = Sentinels {
            dir: dir.clone(),
            data: Servers::new(),
            sentinels: Vec::new(),
        };
        for (i, m) in MEMBERS.iter().enumerate() {
            let d = dir.join(m);
            std::fs::create_dir_all(&d).unwrap();
            let addr = net.addr(m);
            let replica = if i == 0 {
                String::new()
            } else {
                format!("replicaof {master} 6379\n")
            };
            std::fs::write(
                d.join("redis.conf"),
                format!(
                    "port 6379\nbind {addr}\nprotected-mode no\ndaemonize no\ndir {}\n\
                     save \"\"\nappendonly yes\nrepl-diskless-sync-delay 0\n{replica}",
                    d.display()
                ),
            )
            .unwrap();
            std::fs::write(
                d.join("sentinel.conf"),
                format!(
                    "port 26379\nbind {addr}\nprotected-mode no\ndaemonize no\ndir {}\n\
                     sentinel monitor {MASTER} {master} 6379 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 3000\n",
                    d.display()
                ),
            )
            .unwrap();
        }
        for i in 0..3 {
            set.restart(net, i);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !set
            .cli(net, 0, 6379, &["INFO", "replication"])
            .contains("connected_slaves:2")
        {
            assert!(
                Instant::now() < deadline,
                "the replicas did not connect: {}",
                set.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        for m in MEMBERS {
            let d = dir.join(m);
            set.sentinels.push(spawn(
                net,
                m,
                true,
                &d.join("sentinel.conf"),
                &d.join("sentinel.log"),
            ));
        }
        while !(0..3).all(|i| {
            set.cli(net, i, 26379, &["SENTINEL", "CKQUORUM", MASTER])
                .starts_with("OK 3")
        }) {
            assert!(
                Instant::now() < deadline,
                "the sentinels did not find each other"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        set
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for m in MEMBERS {
            for f in ["redis.log", "sentinel.log"] {
                let text = std::fs::read_to_string(self.dir.join(m).join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                all += &format!("\n{m}/{f}: {}", tail.join(" | "));
            }
        }
        all
    }

    /// `redis-cli` against member `i`'s `port`, from client host c1.
    fn cli(&self, net: &Net, i: usize, port: u16, args: &[&str]) -> String {
        Command::new("ip")
            .args(["netns", "exec", &net.ns("c1"), "timeout", "2", "redis-cli"])
            .args(["-h", &net.addr(MEMBERS[i]), "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Cluster for Sentinels {
    fn url(&self, net: &Net) -> String {
        let hosts: Vec<String> = MEMBERS
            .iter()
            .map(|m| format!("{}:26379", net.addr(m)))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    fn options(&self) -> Vec<String> {
        vec!["--min-replicas".into(), "1".into()]
    }

    fn pid(&self, i: usize) -> Option<i32> {
        self.data.pid(i)
    }

    fn kill(&mut self, i: usize) {
        self.data.kill(i);
    }

    fn restart(&mut self, net: &Net, i: usize) {
        if !self.data.is_up(i) {
            let d = self.dir.join(MEMBERS[i]);
            let conf = d.join("redis.conf");
            let child = spawn(net, MEMBERS[i], false, &conf, &d.join("redis.log"));
            self.data.set(i, child);
        }
    }

    /// Its append-only files and snapshot gone (its config kept, so it
    /// comes back in its last role): a replica resyncs in full.
    fn restart_empty(&mut self, net: &Net, i: usize) {
        let d = self.dir.join(MEMBERS[i]);
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("appendonly") || name.ends_with(".rdb") {
                let p = e.path();
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
        self.restart(net, i);
    }

    /// A replica: a master that lost its data would be a lost write, not a
    /// fault a lock could survive.
    fn wipe_candidate(&self, drawn: usize, leader: Option<usize>) -> usize {
        if leader == Some(drawn) {
            (drawn + 1) % MEMBERS.len()
        } else {
            drawn
        }
    }

    fn leader(&self, net: &Net) -> Option<Leader> {
        (0..3).find_map(|s| {
            let out = self.cli(
                net,
                s,
                26379,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER],
            );
            let ip = out.lines().next()?.trim().to_string();
            let member = MEMBERS.iter().position(|m| net.addr(m) == ip)?;
            Some(Leader { member, term: 0 })
        })
    }
}

impl Drop for Sentinels {
    /// The sentinels killed; the data nodes go with `Servers`' drop.
    fn drop(&mut self) {
        for mut s in self.sentinels.drain(..) {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}
