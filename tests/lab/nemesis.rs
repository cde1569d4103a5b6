//! The nemesis: faults drawn from a seed, one at a time, each held for a
//! while and then healed, each logged with its times (`F` lines in the
//! history, with whether the leader changed across it). Every round goes
//! through every kind once, in an order drawn from the seed.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::checker::now_us;
use crate::clients::Clients;
use crate::cluster::{Cluster, MEMBERS};
use crate::net::Net;

/// xorshift64*: enough for a replayable schedule, no crate needed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

/// Every fault kind, in the order of the per-kind table. `delay` needs
/// a netlink queue and iptables ([`crate::delay`]); without them, it is
/// left out.
pub const KINDS: [&str; 11] = [
    "client-minority",
    "isolate-holder",
    "isolate-member",
    "isolate-leader",
    "kill-member",
    "wipe-member",
    "pause-member",
    "pause-distlock",
    "pause-client",
    "loss",
    "delay",
];

/// CMD's hold between its two writes, in seconds, as CMD reads it.
pub const SHORT_HOLD: &str = "0.05";
/// Longer than the TTL (2 s): a CMD that holds this long while its
/// distlock is stopped outlives its lease.
const LONG_HOLD: &str = "3";
/// Long enough to be found holding; a paused host's CMD then writes soon
/// after it resumes.
const MID_HOLD: &str = "0.5";

/// What the nemesis saw: leader (master) changes across its faults.
#[derive(Default)]
pub struct Report {
    pub failovers: usize,
}

pub struct Nemesis<'a> {
    /// The kinds this run draws from, each once a round.
    pub kinds: Vec<&'static str>,
    pub net: &'a Net,
    pub cluster: &'a mut dyn Cluster,
    pub clients: &'a Clients,
    pub clients_n: usize,
    pub history: &'a Path,
    pub hold: &'a Path,
    /// When the last fault that waits for a holder found one (None to
    /// begin with): its true start, for the per-kind table.
    pub found_at: Option<u64>,
}

fn signal(pids: &[i32], sig: Signal) {
    for p in pids {
        let _ = kill(Pid::from_raw(*p), sig);
    }
}

impl Nemesis<'_> {
    /// Injects faults until `until`, then heals everything.
    pub fn run(&mut self, seed: u64, until: Instant) -> Report {
        let mut rng = Rng::new(seed);
        let t0 = now_us();
        let mut report = Report::default();
        let mut leader = self.cluster.leader(self.net);
        let mut order: Vec<&str> = Vec::new();
        // Let the clients settle into their loop before the first fault.
        std::thread::sleep(rng.millis(500, 1000));
        while Instant::now() + Duration::from_secs(3) < until {
            if order.is_empty() {
                order = self.kinds.clone();
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.below(i as u64 + 1) as usize);
                }
            }
            let kind = order.pop().unwrap();
            // Pauses outlast the TTL (2 s), so the lease can expire under them.
            let hold = rng.millis(2200, 3000);
            let start = now_us();
            let target = self.inject(kind, hold, &mut rng, leader.map(|l| l.member));
            // A fault that waits for a holder begins when it found one.
            let start = self.found_at.take().unwrap_or(start);
            self.net.heal();
            let end = now_us();
            if target == "none" {
                eprintln!("lab: {kind}: no client held within 5 s; not counted");
                continue;
            }
            std::thread::sleep(rng.millis(300, 1000));
            // A failover is the fault's when the leader after it (healed,
            // settled a moment) is not the one before it; an election, when
            // its term is not. No leader to be read for a while is most
            // likely an election under way: counted as one.
            let mut now = self.cluster.leader(self.net);
            for _ in 0..5 {
                if now.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
                now = self.cluster.leader(self.net);
            }
            // A client cut off with the leader (master) leaves the others
            // no store until an election (etcd) or the heal (a Sentinel
            // failover takes longer than a cut): the wait is not the cut's.
            let before = leader.map(|l| MEMBERS[l.member]);
            let with_leader = before.is_some_and(|m| target.split('+').any(|t| t == m));
            let (failover, election) = match (leader, now) {
                (Some(a), Some(b)) => (a.member != b.member, a != b),
                (Some(_), None) => (false, true),
                _ => (false, false),
            };
            report.failovers += usize::from(failover);
            leader = now.or(leader);
            let line = format!(
                "F {start} {end} {kind} {target} {} {} {}\n",
                u8::from(failover),
                u8::from(election),
                u8::from(with_leader)
            );
            std::fs::OpenOptions::new()
                .append(true)
                .open(self.history)
                .unwrap()
                .write_all(line.as_bytes())
                .unwrap();
            eprintln!(
                "lab: +{:.1}s {kind} {target} for {:.1}s{}",
                (start - t0) as f64 / 1e6,
                (end - start) as f64 / 1e6,
                match (failover, election) {
                    (true, _) => ", failover",
                    (false, true) => ", election",
                    _ => "",
                }
            );
        }
        self.net.heal();
        report
    }

    /// Makes the next CMD hold long and returns its client once it is
    /// holding (in its sleep between the two writes); later CMDs hold
    /// short again.
    fn holder(&mut self, long: &str) -> Option<usize> {
        std::fs::write(self.hold, long).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let found = loop {
            let sleeping = (0..self.clients_n).find(|c| {
                self.net.pids(&format!("c{}", c + 1)).iter().any(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|c| c == format!("sleep\0{long}\0"))
                })
            });
            if sleeping.is_some() || Instant::now() > deadline {
                self.found_at = Some(now_us());
                break sleeping;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::fs::write(self.hold, SHORT_HOLD).unwrap();
        found
    }

    /// Injects one fault, holds it for `hold` and undoes all but the nft
    /// rules (the caller heals those); returns its target.
    fn inject(
        &mut self,
        kind: &str,
        hold: Duration,
        rng: &mut Rng,
        leader: Option<usize>,
    ) -> String {
        let net = self.net;
        // A member fault hits the leader (master) half the time: a fault
        // a store masks on a follower must still meet the member that
        // matters often enough to show what it does there.
        let drawn = rng.below(3) as usize;
        let member = match leader {
            Some(l) if rng.below(2) == 0 => l,
            _ => drawn,
        };
        let client = rng.below(self.clients_n as u64) as usize;
        let cname = format!("c{}", client + 1);
        let everyone = |me: &str| -> Vec<String> {
            MEMBERS
                .iter()
                .map(|m| m.to_string())
                .chain((1..=self.clients_n).map(|c| format!("c{c}")))
                .filter(|n| n != me)
                .map(|n| net.addr(&n))
                .collect()
        };
        match kind {
            // The holder keeps one member, which is cut from the other two:
            // it reaches only a minority that cannot renew its lease, while
            // its CMD holds past the TTL.
            "client-minority" => {
                let Some(c) = self.holder(LONG_HOLD) else {
                    return "none".into();
                };
                let cname = format!("c{}", c + 1);
                let kept = MEMBERS[drawn];
                let others: Vec<String> = MEMBERS
                    .iter()
                    .filter(|m| **m != kept)
                    .map(|m| net.addr(m))
                    .collect();
                net.cut(&cname, &others);
                net.cut(kept, &others);
                std::thread::sleep(hold);
                format!("{cname}+{kept}")
            }
            // The holder's host cut from every member while its CMD holds
            // past the TTL: its distlock cannot renew and must stop CMD.
            "isolate-holder" => {
                let Some(c) = self.holder(LONG_HOLD) else {
                    return "none".into();
                };
                let host = format!("c{}", c + 1);
                let members: Vec<String> = MEMBERS.iter().map(|m| net.addr(m)).collect();
                net.cut(&host, &members);
                std::thread::sleep(hold);
                host
            }
            "isolate-member" | "isolate-leader" => {
                let m = if kind == "isolate-leader" {
                    leader.unwrap_or(member)
                } else {
                    member
                };
                net.cut(MEMBERS[m], &everyone(MEMBERS[m]));
                std::thread::sleep(hold);
                MEMBERS[m].to_string()
            }
            "kill-member" => {
                self.cluster.kill(member);
                std::thread::sleep(hold);
                self.cluster.restart(net, member);
                MEMBERS[member].to_string()
            }
            // Killed, its data lost while it is down, back empty: etcd's
            // member removed and added anew; Redis's replica resyncs in full.
            "wipe-member" => {
                let m = self.cluster.wipe_candidate(member, leader);
                self.cluster.kill(m);
                std::thread::sleep(hold);
                self.cluster.restart_empty(net, m);
                MEMBERS[m].to_string()
            }
            "pause-member" => {
                let pid: Vec<i32> = self.cluster.pid(member).into_iter().collect();
                signal(&pid, Signal::SIGSTOP);
                std::thread::sleep(hold);
                signal(&pid, Signal::SIGCONT);
                MEMBERS[member].to_string()
            }
            // The holder's distlock stops while its CMD runs on past the
            // lease (longer than the TTL): fencing's case.
            "pause-distlock" => {
                let Some(c) = self.holder(LONG_HOLD) else {
                    return "none".into();
                };
                let pid: Vec<i32> = self.clients.pid(c).into_iter().collect();
                signal(&pid, Signal::SIGSTOP);
                std::thread::sleep(hold);
                signal(&pid, Signal::SIGCONT);
                format!("c{}", c + 1)
            }
            // The holder's whole host stops (distlock, its guardian, CMD)
            // past its lease; on resume CMD runs a second before distlock
            // and its guardian (`dl-guard`) do, as a host's processes resume in any order: CMD's next
            // write carries a stale token, and only fencing refuses it.
            "pause-client" => {
                let Some(c) = self.holder(MID_HOLD) else {
                    return "none".into();
                };
                let pids = net.pids(&format!("c{}", c + 1));
                signal(&pids, Signal::SIGSTOP);
                std::thread::sleep(hold);
                let (ours, cmd): (Vec<i32>, Vec<i32>) = pids.iter().partition(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| ["distlock", "dl-guard"].contains(&c.trim()))
                });
                signal(&cmd, Signal::SIGCONT);
                std::thread::sleep(Duration::from_secs(1));
                signal(&ours, Signal::SIGCONT);
                format!("c{}", c + 1)
            }
            "loss" => {
                let nodes: Vec<String> = MEMBERS
                    .iter()
                    .map(|m| m.to_string())
                    .chain((1..=self.clients_n).map(|c| format!("c{c}")))
                    .collect();
                let node = match rng.below(2) {
                    0 => &nodes[member],
                    _ => &nodes[rng.below(nodes.len() as u64) as usize],
                };
                let percent = 20 + rng.below(30) as u32;
                net.lose(node, percent);
                std::thread::sleep(hold);
                format!("{node}:{percent}%")
            }
            "delay" => {
                let node = if rng.below(2) == 0 {
                    MEMBERS[member].to_string()
                } else {
                    cname
                };
                // Up to most of a TTL (2 s) one way: enough to make a
                // renewal late or a leader miss its election timeout.
                let ms = 200 + rng.below(1300) as u32;
                let delayed = net.delay(&node, ms, rng.next()).unwrap();
                std::thread::sleep(hold);
                drop(delayed);
                format!("{node}:{ms}ms")
            }
            _ => unreachable!("{kind}"),
        }
    }
}
