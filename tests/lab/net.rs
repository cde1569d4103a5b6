//! The lab's network: one namespace per node, each with a veth pair whose
//! other end sits on a bridge in a "switch" namespace, all on 10.77.0.0/24.
//! Faults are nftables rules inside a node's namespace (partitions, loss),
//! and a netlink queue for delay ([`crate::delay`]: this kernel has no
//! `sch_netem` for `tc netem`). Everything is named with a
//! per-run prefix and removed on drop: the processes in each namespace
//! (by pid), then the namespaces, which takes their links with them; and,
//! should the test binary die without dropping, by [`Net::guard`].

use std::io::Write;
use std::process::{Command, Stdio};

use crate::delay::Delay;

/// The subnet's first three octets; only addresses inside the namespaces.
pub const SUBNET: &str = "10.77.0";

pub struct Net {
    prefix: String,
    /// Node names (`m1`, `c1`…) with their last octet, in creation order.
    nodes: Vec<(String, u8)>,
    made: Vec<String>,
}

/// Runs `ip ARGS` (or any program) and fails with its stderr.
pub fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Net {
    /// Why the lab cannot run here, if it cannot: one line for the skip.
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid cannot fail and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
        }
        for p in [
            "ip",
            "nft",
            "etcd",
            "etcdctl",
            "redis-server",
            "redis-cli",
            "sqlite3",
            "bash",
        ] {
            let found = Command::new("sh")
                .args(["-c", "command -v \"$0\" >/dev/null", p])
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return Some(format!("{p} is not installed (scripts/install-deps.sh)"));
            }
        }
        None
    }

    /// The prefix of this run's namespaces for `store`.
    fn prefix(store: &str) -> String {
        format!("dlab{}{store}-", std::process::id())
    }

    /// Drop removes everything, but a test binary ended by a signal (a
    /// Ctrl-C of `scripts/lab.sh`, a CI timeout) runs no destructors. A
    /// shell started first reads a pipe whose write end only this process
    /// holds (the returned handle); when it closes, however the run ended,
    /// the shell kills what runs in this run's namespaces (the servers and
    /// CMDs writing into `dir`), deletes them, and then removes `dir`
    /// unless a file `.keep` in it says the run kept it.
    /// After a normal end it finds nothing left to do.
    pub fn guard(store: &str, dir: &std::path::Path) -> std::process::ChildStdin {
        const SCRIPT: &str = r#"trap '' HUP INT QUIT TERM
read _
for ns in $(ip netns list | awk '{print $1}'); do
    case $ns in "$1"*)
        for p in $(ip netns pids "$ns"); do kill -CONT "$p"; kill -KILL "$p"; done
        ip netns del "$ns" ;;
    esac
done
[ -e "$2/.keep" ] || rm -rf "$2""#;
        Command::new("sh")
            .args(["-c", SCRIPT, "sh", &Self::prefix(store)])
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh")
            .stdin
            .take()
            .unwrap()
    }

    /// The switch namespace and one namespace per `(name, octet)`, joined
    /// to the bridge, each with an empty `inet lab` nftables table.
    pub fn build(store: &str, nodes: &[(&str, u8)]) -> Result<Net, String> {
        let prefix = Self::prefix(store);
        let mut net = Net {
            prefix,
            nodes: nodes.iter().map(|(n, o)| (n.to_string(), *o)).collect(),
            made: Vec::new(),
        };
        let sw = net.ns("sw");
        net.add_ns(&sw)?;
        sh("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        sh("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
        for (name, octet) in nodes {
            let ns = net.ns(name);
            net.add_ns(&ns)?;
            let port = format!("v{name}");
            sh(
                "ip",
                &[
                    "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &ns,
                ],
            )?;
            sh(
                "ip",
                &["-n", &sw, "link", "set", &port, "master", "br0", "up"],
            )?;
            let addr = format!("{SUBNET}.{octet}/24");
            sh("ip", &["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            sh("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
            sh("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            net.nft(
                name,
                "table inet lab {\n chain input { type filter hook input priority 0; }\n \
                 chain output { type filter hook output priority 0; }\n}\n",
            )?;
        }
        Ok(net)
    }

    fn add_ns(&mut self, ns: &str) -> Result<(), String> {
        sh("ip", &["netns", "add", ns])?;
        self.made.push(ns.to_string());
        Ok(())
    }

    /// The namespace of node `name`.
    pub fn ns(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Node `name`'s address.
    pub fn addr(&self, name: &str) -> String {
        let octet = self.nodes.iter().find(|(n, _)| n == name).unwrap().1;
        format!("{SUBNET}.{octet}")
    }

    /// Loads an nftables script into node `name`'s namespace.
    pub fn nft(&self, name: &str, script: &str) -> Result<(), String> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns(name), "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "nft in {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Node `name` drops every packet to and from `peers`.
    pub fn cut(&self, name: &str, peers: &[String]) {
        let set = peers.join(", ");
        let script = format!(
            "add rule inet lab input ip saddr {{ {set} }} drop\n\
             add rule inet lab output ip daddr {{ {set} }} drop\n"
        );
        self.nft(name, &script).unwrap();
    }

    /// Node `name` drops `percent` % of its packets, both ways, at random.
    pub fn lose(&self, name: &str, percent: u32) {
        let script = format!(
            "add rule inet lab input numgen random mod 100 < {percent} drop\n\
             add rule inet lab output numgen random mod 100 < {percent} drop\n"
        );
        self.nft(name, &script).unwrap();
    }

    /// Node `name` sends every packet `ms` late (± a quarter) until the
    /// returned [`Delay`] is dropped.
    pub fn delay(&self, name: &str, ms: u32, seed: u64) -> Result<Delay, String> {
        Delay::start(&self.ns(name), ms, seed)
    }

    /// Removes every fault rule of every node.
    pub fn heal(&self) {
        for (name, _) in &self.nodes {
            let script = "flush chain inet lab input\nflush chain inet lab output\n";
            self.nft(name, script).unwrap();
        }
    }

    /// The pids of every process inside node `name`'s namespace.
    pub fn pids(&self, name: &str) -> Vec<i32> {
        pids_in(&self.ns(name))
    }

    /// This run's namespaces, for the check that none outlive it.
    pub fn names(&self) -> Vec<String> {
        self.made.clone()
    }
}

fn pids_in(ns: &str) -> Vec<i32> {
    sh("ip", &["netns", "pids", ns])
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.made.iter().rev() {
            // SIGCONT too: a stopped process dies of SIGKILL anyway, but
            // its parent's wait only returns once the kernel reaps it.
            for pid in pids_in(ns) {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGCONT);
            }
            let _ = sh("ip", &["netns", "del", ns]);
        }
    }
}
