//! The etcd side of the bench: a local etcd for distlock's etcd backend
//! and for `etcdctl lock`, the tool it is measured against.

use super::*;
use std::collections::BTreeMap;

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

/// Requests etcd received, per gRPC method: a unary call is one
/// message, and every message sent on a stream (a keep-alive, a watch
/// create) one more (`grpc_server_msg_received_total`); the streams
/// themselves count under "METHOD streams" (`grpc_server_started_total`
/// of a streaming method).
#[derive(Default, Clone)]
pub(super) struct Requests(pub(super) BTreeMap<String, f64>);

impl Requests {
    /// `self` minus `before`, divided by `runs`.
    pub(super) fn per_run(&self, before: &Requests, runs: usize) -> Requests {
        let mut out = BTreeMap::new();
        for (k, v) in &self.0 {
            let d = v - before.0.get(k).copied().unwrap_or(0.0);
            if d > 0.0 {
                out.insert(k.clone(), d / runs as f64);
            }
        }
        Requests(out)
    }

    /// The requests of `other` added to these.
    pub(super) fn add(&mut self, other: &Requests) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_default() += v;
        }
    }

    pub(super) fn scaled(&self, by: f64) -> Requests {
        Requests(self.0.iter().map(|(k, v)| (k.clone(), v * by)).collect())
    }

    /// Requests in all (the messages; streams opened are not requests).
    pub(super) fn total(&self) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| !k.ends_with(" streams"))
            .map(|(_, v)| v)
            .sum()
    }

    /// `12.0 (Txn 2.0, LeaseGrant 3.0, …)`.
    pub(super) fn line(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        format!("{:.2} ({})", self.total(), parts.join(", "))
    }
}

impl Etcd {
    /// What etcd has received so far, from its /metrics (served on the
    /// client URL).
    pub(super) fn requests(&self) -> Requests {
        let addr = self.endpoint.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("etcd metrics");
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut s, &mut body).expect("etcd metrics");
        let mut out = BTreeMap::new();
        for line in body.lines() {
            let name = if line.starts_with("grpc_server_msg_received_total{") {
                ""
            } else if line.starts_with("grpc_server_started_total{") && !line.contains("\"unary\"")
            {
                " streams"
            } else {
                continue;
            };
            let label = |l: &str| {
                let at = line.find(&format!("{l}=\""))? + l.len() + 2;
                Some(line[at..].split('"').next()?.to_owned())
            };
            let (Some(method), Some(value)) = (label("grpc_method"), line.rsplit(' ').next())
            else {
                continue;
            };
            let v: f64 = value.parse().unwrap_or(0.0);
            *out.entry(format!("{method}{name}")).or_default() += v;
        }
        Requests(out)
    }
}

/// Uncontended runs per tool for [`requests_per_run`].
const REQUEST_RUNS: usize = 20;

/// What one uncontended `run -- true` (and `etcdctl lock NAME true`)
/// asks of etcd, per gRPC method, each tool measured on its own, on a
/// name whose history is full.
pub(super) fn requests_per_run(ctx: &Ctx, etcd: &Etcd) -> HashMap<Tool, Requests> {
    let mut out = HashMap::new();
    let mut tools = vec![Tool::DistlockEtcd, Tool::Etcdctl];
    if ctx.before.is_some() {
        tools.push(Tool::BeforeEtcd);
    }
    // The name's history full first (100 records, the default keep): a
    // run then trims it, as every run of a job that ran before does.
    for _ in 0..101 {
        let st = ctx
            .locked(Tool::DistlockEtcd, "requests", &[], &["true"])
            .status();
        check(Tool::DistlockEtcd, "requests", st.expect("spawn"));
    }
    for tool in tools {
        let before = etcd.requests();
        for _ in 0..REQUEST_RUNS {
            let st = ctx.locked(tool, "requests", &[], &["true"]).status();
            check(tool, "requests", st.expect("spawn"));
        }
        out.insert(tool, etcd.requests().per_run(&before, REQUEST_RUNS));
    }
    out
}
