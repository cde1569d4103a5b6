//! A three-member etcd cluster on loopback, for the tests of what a
//! cluster does to a lease: members killed (SIGKILL) and restarted on the
//! same ports and data dirs, a leader to find. Fast election settings
//! (50 ms heartbeats, 500 ms election timeout) keep a leader change under
//! a second, so the tests stay short.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{free_port, poll, Bounded};

/// One member: its ports and data dir stay fixed across restarts.
struct Member {
    name: String,
    client: u16,
    peer: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Three members, killed and reaped on drop; their dirs go with `_root`.
pub struct EtcdCluster {
    members: Vec<Member>,
    initial: String,
    _root: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts three members and waits until each is healthy and one leads.
    pub fn start() -> EtcdCluster {
        let root = tempfile::tempdir().unwrap();
        let members: Vec<Member> = (1..=3)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                dir: root.path().join(format!("m{i}")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            initial,
            _root: root,
        };
        for i in 0..3 {
            cluster.spawn(i);
        }
        for i in 0..3 {
            cluster.wait_healthy(i);
        }
        cluster.leader_within(Duration::from_secs(20));
        cluster
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// Member `i`'s client port.
    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client
    }

    /// Member `i`'s name (`m1`…) and client URL, as etcd lists them.
    pub fn member(&self, i: usize) -> (String, String) {
        let m = &self.members[i];
        (m.name.clone(), format!("http://127.0.0.1:{}", m.client))
    }

    /// SIGKILLs member `i` and reaps it: its ports are closed on return.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its ports and data dir (it rejoins with
    /// what its WAL holds).
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        self.spawn(i);
    }

    /// Waits until member `i` answers `endpoint health` (which needs a
    /// leader and a committed read).
    pub fn wait_healthy(&self, i: usize) {
        assert!(
            poll(Duration::from_secs(30), Duration::from_millis(50), || {
                self.try_ctl(&[i], &["endpoint", "health"]).is_some()
            }),
            "etcd member {} did not become healthy: {}",
            self.members[i].name,
            std::fs::read_to_string(self.members[i].dir.join("etcd.log")).unwrap_or_default()
        );
    }

    /// The index of the leader as the running members see it, if they
    /// agree on one that is running.
    pub fn leader(&self) -> Option<usize> {
        let live: Vec<usize> = (0..3)
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        let out = self.try_ctl(&live, &["endpoint", "status", "-w", "json"])?;
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        let rows = v.as_array()?;
        let leader = rows.first()?["Status"]["leader"].as_u64()?;
        if leader == 0
            || rows
                .iter()
                .any(|r| r["Status"]["leader"].as_u64() != Some(leader))
        {
            return None;
        }
        let row = rows
            .iter()
            .find(|r| r["Status"]["header"]["member_id"].as_u64() == Some(leader))?;
        let endpoint = row["Endpoint"].as_str()?;
        live.into_iter()
            .find(|&i| endpoint.ends_with(&format!(":{}", self.members[i].client)))
    }

    /// Waits for a leader; panics after `limit`.
    pub fn leader_within(&self, limit: Duration) -> usize {
        let mut found = None;
        assert!(
            poll(limit, Duration::from_millis(20), || {
                found = self.leader();
                found.is_some()
            }),
            "no etcd leader within {limit:?}"
        );
        found.unwrap()
    }

    /// `etcdctl ARGS` against members `on`: its stdout, or None on failure.
    pub fn try_ctl(&self, on: &[usize], args: &[&str]) -> Option<String> {
        let endpoints: Vec<String> = on
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.members[i].client))
            .collect();
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", endpoints.join(",")))
            .arg("--dial-timeout=2s")
            .arg("--command-timeout=3s")
            .args(args)
            .output_within(Duration::from_secs(10));
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn spawn(&mut self, i: usize) {
        use std::os::unix::process::CommandExt;
        let m = &self.members[i];
        std::fs::create_dir_all(&m.dir).unwrap();
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(m.dir.join("etcd.log"))
            .unwrap();
        let mut cmd = Command::new("etcd");
        cmd.arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", m.dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", self.initial))
            .arg("--initial-cluster-token=distlock-test")
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500")
            .arg("--logger=zap")
            .arg("--log-level=error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        // The test thread that starts a cluster outlives it.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .expect("cannot start etcd (apt-get install etcd-server etcd-client)");
        self.members[i].child = Some(child);
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
    }
}
