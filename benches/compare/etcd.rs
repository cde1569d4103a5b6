//! The etcd side of the bench: a local etcd for distlock's etcd backend
//! and for `etcdctl lock`, the tool it is measured against.

use super::*;

/// A single-member etcd on free loopback ports, data on tmpfs (redis-server
/// here runs without persistence too: the bench compares protocols, not
/// disks). Killed on drop.
pub(super) struct Etcd {
    child: Child,
    pub(super) endpoint: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    pub(super) fn start() -> Result<Etcd, String> {
        for (tool, version) in [("etcd", "--version"), ("etcdctl", "version")] {
            let found = Command::new(tool)
                .arg(version)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return Err(format!(
                    "{tool} not on PATH (apt-get install etcd-server etcd-client)"
                ));
            }
        }
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .map_err(|e| e.to_string())?;
        let port = || {
            TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port()
        };
        let (client, peer) = (port(), port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = fs::File::create(dir.path().join("etcd.log")).map_err(|e| e.to_string())?;
        let child = Command::new("etcd")
            .args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("bench={peer_url}")])
            .args(["--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut etcd = Etcd {
            child,
            endpoint,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if etcd.child.try_wait().unwrap().is_some() {
                return Err("etcd exited at start (see its log)".into());
            }
            if etcd.ctl(&["endpoint", "health"]).is_some() {
                return Ok(etcd);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("etcd did not become healthy within 20s".into())
    }

    pub(super) fn ctl(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .env("ETCDCTL_ENDPOINTS", &self.endpoint)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Keys under `prefix`: the holder's and each waiter's.
    pub(super) fn count(&self, prefix: &str) -> usize {
        self.ctl(&["get", "--prefix", "--keys-only", prefix])
            .map_or(0, |s| s.lines().filter(|l| !l.trim().is_empty()).count())
    }

    pub(super) fn version(&self) -> String {
        self.ctl(&["version"])
            .and_then(|s| s.lines().next().map(str::to_owned))
            .unwrap_or_default()
    }

    pub(super) fn cpu(&self) -> Duration {
        scale::process_cpu(self.child.id())
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
