//! Three etcd members, each in its own namespace, started with `ip netns
//! exec` (which execs in place, so the child's pid is etcd's). They keep
//! their data dirs across kills, so a restarted member rejoins with its WAL.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, Leader, Servers, MEMBERS};
use crate::net::Net;

pub struct Etcd {
    dir: PathBuf,
    children: Servers,
    initial: String,
}

impl Etcd {
    /// Starts the members and waits until all three are healthy.
    pub fn start(net: &Net, dir: PathBuf) -> Etcd {
        let initial = MEMBERS
            .iter()
            .map(|m| format!("{m}=http://{}:2380", net.addr(m)))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Etcd {
            dir,
            children: Servers::new(),
            initial,
        };
        for i in 0..3 {
            etcd.spawn(net, i, false);
        }
        let deadline = Instant::now() + Duration::from_secs(40);
        while etcd.leader(net).is_none() {
            assert!(
                Instant::now() < deadline,
                "etcd did not elect a leader: {}",
                etcd.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        etcd
    }

    fn endpoints(&self, net: &Net) -> String {
        MEMBERS
            .iter()
            .map(|m| format!("{}:2379", net.addr(m)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `etcdctl ARGS` against every member, from client host c1; its
    /// stdout if it succeeded.
    fn etcdctl(&self, net: &Net, args: &[&str]) -> Option<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &net.ns("c1"), "etcdctl"])
            .arg(format!("--endpoints={}", self.endpoints(net)))
            .args(["--dial-timeout=1s", "--command-timeout=3s"])
            .args(args)
            .env("ETCDCTL_API", "3")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn logs(&self) -> String {
        MEMBERS
            .iter()
            .map(|m| std::fs::read_to_string(self.dir.join(format!("{m}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Starts member `i`; `existing`: a member added to the running
    /// cluster, with an empty data dir.
    fn spawn(&mut self, net: &Net, i: usize, existing: bool) {
        let m = MEMBERS[i];
        let addr = net.addr(m);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{m}.log")))
            .unwrap();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &net.ns(m), "etcd"])
            .arg(format!("--name={m}"))
            .arg(format!("--data-dir={}", self.dir.join(m).display()))
            .arg(format!("--listen-client-urls=http://{addr}:2379"))
            .arg(format!("--advertise-client-urls=http://{addr}:2379"))
            .arg(format!("--listen-peer-urls=http://{addr}:2380"))
            .arg(format!("--initial-advertise-peer-urls=http://{addr}:2380"))
            .arg(format!("--initial-cluster={}", self.initial))
            .arg("--initial-cluster-token=distlock-lab")
            .arg(if existing {
                "--initial-cluster-state=existing"
            } else {
                "--initial-cluster-state=new"
            })
            // Slower than the etcd_cluster tests' 50/500 ms: on a loaded
            // two-core machine shorter timeouts elect without any fault.
            .arg("--heartbeat-interval=100")
            .arg("--election-timeout=1000")
            // etcd 3.5's default, off in 3.4 (the lab's, Debian's): without
            // it a member cut off from the others campaigns in higher and
            // higher terms, and when it is back the leader steps down for
            // a new election, whose leader gives every lease its whole TTL
            // again. Under a client cut with one member, that kept the
            // next holder waiting a TTL more (docs/guarantees.md, §5).
            .arg("--pre-vote=true")
            .arg("--logger=zap")
            .arg("--log-level=error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        // Members are only spawned from the test's own thread, which
        // outlives them (PDEATHSIG follows the spawning thread).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("cannot start etcd in its namespace");
        self.children.set(i, child);
    }
}

impl Cluster for Etcd {
    /// `etcd://10.77.0.11:2379,…`.
    fn url(&self, net: &Net) -> String {
        format!("etcd://{}", self.endpoints(net))
    }

    fn pid(&self, i: usize) -> Option<i32> {
        self.children.pid(i)
    }

    fn kill(&mut self, i: usize) {
        self.children.kill(i);
    }

    fn restart(&mut self, net: &Net, i: usize) {
        if !self.children.is_up(i) {
            self.spawn(net, i, false);
        }
    }

    /// Member `i`'s data dir wiped, the member removed from the cluster
    /// and added anew (`etcdctl member remove`, `member add`), started
    /// with `--initial-cluster-state=existing`: it catches up from the
    /// leader's snapshot. Retried while the two others settle an
    /// election, within a deadline.
    fn restart_empty(&mut self, net: &Net, i: usize) {
        let m = MEMBERS[i];
        let _ = std::fs::remove_dir_all(self.dir.join(m));
        let peer = format!("--peer-urls=http://{}:2380", net.addr(m));
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut removed = false;
        loop {
            if !removed {
                let id = self
                    .etcdctl(net, &["member", "list", "-w", "json"])
                    .and_then(|out| {
                        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
                        v["members"]
                            .as_array()?
                            .iter()
                            .find(|r| {
                                r["name"] == m
                                    || r["peerURLs"][0].as_str()
                                        == Some(&format!("http://{}:2380", net.addr(m)))
                            })
                            .map(|r| r["ID"].as_u64())
                    });
                match id {
                    Some(Some(id)) => {
                        removed = self
                            .etcdctl(net, &["member", "remove", &format!("{id:x}")])
                            .is_some()
                    }
                    // Not listed: removed already.
                    Some(None) => removed = true,
                    None => {}
                }
            }
            if removed && self.etcdctl(net, &["member", "add", m, &peer]).is_some() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "etcd: cannot remove and re-add {m}: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
        self.spawn(net, i, true);
    }

    /// The leader's index, as the members a client in `c1` reaches see it.
    fn leader(&self, net: &Net) -> Option<Leader> {
        let out = Command::new("ip")
            .args(["netns", "exec", &net.ns("c1"), "etcdctl"])
            .arg(format!("--endpoints={}", self.endpoints(net)))
            .args(["--dial-timeout=1s", "--command-timeout=2s"])
            .args(["endpoint", "status", "-w", "json"])
            .env("ETCDCTL_API", "3")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let rows = v.as_array()?;
        let leader = rows.first()?["Status"]["leader"].as_u64()?;
        let row = rows
            .iter()
            .find(|r| r["Status"]["header"]["member_id"].as_u64() == Some(leader))?;
        let endpoint = row["Endpoint"].as_str()?;
        let member = MEMBERS
            .iter()
            .position(|m| endpoint.starts_with(&net.addr(m)))?;
        let term = row["Status"]["raftTerm"].as_u64()?;
        Some(Leader { member, term })
    }

    fn options(&self) -> Vec<String> {
        Vec::new()
    }

    fn stalled_leader_revokes(&self) -> bool {
        let out = std::process::Command::new("etcd").arg("--version").output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        let version = text.unwrap_or_default();
        let number = version
            .lines()
            .find_map(|l| l.strip_prefix("etcd Version: "))
            .unwrap_or_default();
        let n: Vec<u32> = number.split('.').filter_map(|p| p.parse().ok()).collect();
        matches!(n[..], [3, 4, p] if p < 31) || matches!(n[..], [3, 5, p] if p < 13)
    }
}
