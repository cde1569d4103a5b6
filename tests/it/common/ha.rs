//! Replicated and clustered Redis for the tests: a `Node` (one
//! redis-server or sentinel on a fixed port, restartable on it), a Sentinel
//! set (master, replica, three sentinels), a three-master Cluster, and a
//! master/replica `Pair`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, heavy, key, poll, signal, wait_with_timeout, RedisServer, LIMIT};

/// The master name the sentinels watch.
pub const MASTER: &str = "mymaster";

/// One redis-server (or sentinel) process on a fixed port, restartable on
/// that port; killed and reaped on drop.
pub struct Node {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// The directory when the node made it itself.
    _tmp: Option<tempfile::TempDir>,
    args: Vec<String>,
    /// Kept between commands: polling on fresh connections would churn
    /// through ephemeral ports, one of which could be a node's port we
    /// mean to restart on.
    conn: RefCell<Option<redis::Connection>>,
}

impl Node {
    /// Starts `redis-server ARGS` in `dir` (created), where `args(port)`
    /// gives the arguments for a port. A port taken by someone else between
    /// our pick and the server's bind is retried with another one.
    pub fn start(dir: &Path, args: impl Fn(u16) -> Vec<String>) -> Node {
        std::fs::create_dir_all(dir).unwrap();
        for _ in 0..5 {
            let port = free_port();
            let mut node = Node {
                child: None,
                port,
                dir: dir.to_owned(),
                args: args(port),
                conn: RefCell::new(None),
                _tmp: None,
            };
            if node.spawn(&[]) {
                return node;
            }
        }
        panic!("could not start redis-server in {}", dir.display());
    }

    /// A data node (`data_args` and `extra`) in a directory of its own.
    pub fn data(extra: &[&str]) -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let mut node = Node::start(tmp.path(), |p| {
            let mut a = data_args(p);
            a.extend(extra.iter().map(|s| s.to_string()));
            a
        });
        node._tmp = Some(tmp);
        node
    }

    /// Spawns the process with `extra` arguments and waits until the server
    /// on our port is this very process, done loading its data (an
    /// append-only file after a restart). False if it exited instead.
    fn spawn(&mut self, extra: &[String]) -> bool {
        self.conn.take();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .unwrap();
        let child = Command::new("redis-server")
            .args(&self.args)
            .args(extra)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("redis-server must be installed");
        let pid = child.id();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(c) = &mut self.child {
                if c.try_wait().unwrap().is_some() {
                    self.child = None;
                    self.conn.take();
                    return false;
                }
            }
            if self.ready_as(pid) {
                return true;
            }
            if Instant::now() >= deadline {
                self.kill();
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the server on our port is process `pid` and not loading.
    fn ready_as(&self, pid: u32) -> bool {
        let Ok(info) = self.try_cmd::<String>(&["INFO"]) else {
            return false;
        };
        let ours = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
            == Some(pid);
        ours && !info.lines().any(|l| l.trim() == "loading:1")
    }

    /// Restarts the (killed) server on the same port and directory.
    pub fn restart(&mut self, extra: &[String]) {
        assert!(self.child.is_none(), "restart of a running node");
        assert!(
            self.spawn(extra),
            "could not restart redis-server on port {}",
            self.port
        );
    }

    /// SIGKILL, the way a machine or process crash looks; reaped at once.
    pub fn kill(&mut self) {
        self.conn.take();
        if let Some(mut c) = self.child.take() {
            signal(c.id() as i32, libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// One command, every step bounded; after an error the connection is
    /// dropped and the next command opens a new one.
    pub fn try_cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let mut slot = self.conn.borrow_mut();
        if slot.is_none() {
            let t = Duration::from_millis(1000);
            let c = redis::Client::open(self.url())?.get_connection_with_timeout(t)?;
            c.set_read_timeout(Some(t))?;
            c.set_write_timeout(Some(t))?;
            *slot = Some(c);
        }
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let out = cmd.query(slot.as_mut().unwrap());
        if out.is_err() {
            *slot = None;
        }
        out
    }

    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("{args:?} on port {}: {e}", self.port))
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.cmd(&["GET", key])
    }

    pub fn info(&self, section: &str) -> String {
        self.try_cmd(&["INFO", section]).unwrap_or_default()
    }

    pub fn info_cluster(&self) -> String {
        self.try_cmd(&["CLUSTER", "INFO"]).unwrap_or_default()
    }

    pub fn is_master(&self) -> bool {
        self.info("replication")
            .lines()
            .any(|l| l.trim() == "role:master")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Arguments of a data node: no persistence, and full syncs that start at
/// once (Redis 7 waits 5s for more replicas to join a diskless sync).
pub fn data_args(port: u16) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--repl-diskless-sync-delay",
        "0",
    ]
    .map(String::from)
    .to_vec()
}

/// How many replicas a master's INFO replication lists as online.
pub fn replicas_online(info: &str) -> usize {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}

/// A flat field/value array (SENTINEL MASTER and friends) as a map.
pub fn fields(flat: &[String]) -> BTreeMap<String, String> {
    flat.chunks(2)
        .filter_map(|kv| match kv {
            [k, v] => Some((k.clone(), v.clone())),
            _ => None,
        })
        .collect()
}

/// How long a master must not answer before a sentinel calls it down.
/// Long enough that a loaded two-core machine (the whole suite, a queue
/// of 100 waiters, dpkg) does not starve a healthy master into a second,
/// spurious failover, which would move the master under a test that
/// expects one; short enough that a failover ends well within the 10s
/// leases the tests hold through it.
pub const DOWN_AFTER_MS: u64 = 2000;

/// 1 master, 1 replica, 3 sentinels (quorum 2, down after
/// `DOWN_AFTER_MS`). Holds the suite's `heavy()` lock while it lives, so
/// no failover runs alongside the suite's load tests.
pub struct SentinelSet {
    pub sentinels: Vec<Node>,
    pub master: Node,
    pub replica: Node,
    _dir: tempfile::TempDir,
    _heavy: std::sync::MutexGuard<'static, ()>,
}

impl SentinelSet {
    pub fn start() -> SentinelSet {
        let heavy = heavy();
        let dir = tempfile::tempdir().unwrap();
        let master = Node::start(&dir.path().join("master"), data_args);
        let replica = Node::start(&dir.path().join("replica"), |p| {
            let mut a = data_args(p);
            a.extend([
                "--replicaof".into(),
                "127.0.0.1".into(),
                master.port.to_string(),
            ]);
            a
        });
        assert!(
            poll(LIMIT, Duration::from_millis(10), || replicas_online(
                &master.info("replication")
            ) == 1),
            "the replica never came online"
        );
        let sentinels: Vec<Node> = (0..3)
            .map(|i| {
                let sdir = dir.path().join(format!("sentinel{i}"));
                Node::start(&sdir, |p| {
                    // Sentinels rewrite their config file: it must be theirs.
                    let conf = sdir.join("sentinel.conf");
                    std::fs::write(
                        &conf,
                        format!(
                            "port {p}\nbind 127.0.0.1\ndaemonize no\ndir {}\n\
                             sentinel monitor {MASTER} 127.0.0.1 {} 2\n\
                             sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n\
                             sentinel failover-timeout {MASTER} 3000\n",
                            sdir.display(),
                            master.port
                        ),
                    )
                    .unwrap();
                    vec![conf.display().to_string(), "--sentinel".into()]
                })
            })
            .collect();
        let set = SentinelSet {
            sentinels,
            master,
            replica,
            _dir: dir,
            _heavy: heavy,
        };
        // Ready for a failover once every sentinel knows the two others
        // (hello messages, every 2s), the master as up and the replica as
        // a linked replica.
        let started = Instant::now();
        let ready = poll(LIMIT, Duration::from_millis(20), || {
            set.sentinels.iter().all(|s| {
                let Ok(m) = s.try_cmd::<Vec<String>>(&["SENTINEL", "MASTER", MASTER]) else {
                    return false;
                };
                let m = fields(&m);
                let Ok(r) = s.try_cmd::<Vec<Vec<String>>>(&["SENTINEL", "REPLICAS", MASTER]) else {
                    return false;
                };
                m.get("flags").map(String::as_str) == Some("master")
                    && m.get("num-other-sentinels").map(String::as_str) == Some("2")
                    && r.iter().map(|r| fields(r)).any(|r| {
                        r.get("flags").map(String::as_str) == Some("slave")
                            && r.get("master-link-status").map(String::as_str) == Some("ok")
                    })
            })
        });
        assert!(ready, "the sentinels never agreed on the topology");
        eprintln!("sentinels ready after {} ms", started.elapsed().as_millis());
        set
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// The failovers each sentinel has seen (its master's config epoch):
    /// for a failure message, where more than one says that the master
    /// moved again under the test.
    pub fn epochs(&self) -> String {
        let epochs: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| {
                s.try_cmd::<Vec<String>>(&["SENTINEL", "MASTER", MASTER])
                    .ok()
                    .and_then(|m| fields(&m).get("config-epoch").cloned())
                    .unwrap_or_else(|| "?".into())
            })
            .collect();
        format!(
            "sentinels' config epochs (failovers seen): {}",
            epochs.join(", ")
        )
    }

    /// Whether the replica is a master and every sentinel says so.
    pub fn promoted(&self) -> bool {
        self.replica.is_master()
            && self.sentinels.iter().all(|s| {
                s.try_cmd::<Option<(String, u16)>>(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER])
                    .ok()
                    .flatten()
                    .is_some_and(|(_, p)| p == self.replica.port)
            })
    }
}

/// 3 masters, no replicas, made by `redis-cli --cluster create`.
pub struct ClusterSet {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl ClusterSet {
    pub fn start() -> ClusterSet {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<Node> = (0..3)
            .map(|i| {
                Node::start(&dir.path().join(format!("node{i}")), |p| {
                    let mut a = data_args(p);
                    // An explicit bus port: the default, port + 10000, can
                    // be past 65535 for an ephemeral port.
                    a.extend(
                        [
                            "--cluster-enabled",
                            "yes",
                            "--cluster-config-file",
                            "nodes.conf",
                            "--cluster-node-timeout",
                            "5000",
                            "--cluster-port",
                            &free_port().to_string(),
                        ]
                        .map(String::from),
                    );
                    a
                })
            })
            .collect();
        let log = dir.path().join("create.log");
        let started = Instant::now();
        let mut create = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli must be installed");
        let st = wait_with_timeout(&mut create, LIMIT);
        assert!(
            st.success(),
            "redis-cli --cluster create: {st}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let ok = poll(LIMIT, Duration::from_millis(10), || {
            nodes.iter().all(|n| {
                let info = n.info_cluster();
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && info.contains("cluster_known_nodes:3")
            })
        });
        assert!(ok, "the cluster never reached cluster_state:ok everywhere");
        eprintln!("cluster ready after {} ms", started.elapsed().as_millis());
        ClusterSet { nodes, _dir: dir }
    }

    /// The URL with one seed node: the others are learnt from it.
    pub fn url(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.nodes[1].port)
    }

    /// The slot of a key, as the cluster computes it.
    pub fn slot(&self, key: &str) -> u16 {
        self.nodes[0].cmd(&["CLUSTER", "KEYSLOT", key])
    }

    /// Index in `nodes` of the master that serves `slot` now, as node 0
    /// sees it.
    pub fn owner_of(&self, slot: u16) -> usize {
        let text: String = self.nodes[0].cmd(&["CLUSTER", "NODES"]);
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let addr = f[1].split('@').next().unwrap();
            let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
            for range in f.iter().skip(8) {
                if range.starts_with('[') {
                    continue;
                }
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                let (a, b): (u16, u16) = (a.parse().unwrap(), b.parse().unwrap());
                if a <= slot && slot <= b {
                    return self.nodes.iter().position(|n| n.port == port).unwrap();
                }
            }
        }
        panic!("no node serves slot {slot}");
    }

    /// Index of the master that holds lock `name`'s keys.
    pub fn node_of(&self, name: &str) -> usize {
        self.owner_of(self.slot(&key(name)))
    }

    /// Moves `slot` (and its keys, TTLs included) from one master to
    /// another, the way `redis-cli --cluster reshard` does it.
    pub fn migrate(&self, slot: u16, from: usize, to: usize) {
        let s = slot.to_string();
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let src_id: String = src.cmd(&["CLUSTER", "MYID"]);
        let dst_id: String = dst.cmd(&["CLUSTER", "MYID"]);
        let _: () = dst.cmd(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &src_id]);
        let _: () = src.cmd(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &dst_id]);
        loop {
            let keys: Vec<String> = src.cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            if keys.is_empty() {
                break;
            }
            let port = dst.port.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let _: String = src.cmd(&args);
        }
        for n in [dst, src] {
            let _: () = n.cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if i != from && i != to {
                let _: () = n.cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
            }
        }
    }
}

/// A master and one replica, both from `RedisServer`.
pub struct Pair {
    pub replica: RedisServer,
    pub master: RedisServer,
}

pub fn pair() -> Pair {
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port.to_string();
    let replica = RedisServer::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--repl-diskless-sync-delay",
        "0",
    ]);
    let online = poll(LIMIT, Duration::from_millis(10), || {
        let info: String = master.cmd(&["INFO", "replication"]);
        replicas_online(&info) == 1
    });
    assert!(online, "the replica never came online");
    Pair { replica, master }
}
