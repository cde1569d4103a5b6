//! What the nemesis needs of a store's three members, whatever the store.

use std::process::Child;

use crate::net::Net;

/// The three server members' node names (their namespaces and addresses).
pub const MEMBERS: [&str; 3] = ["m1", "m2", "m3"];

pub trait Cluster {
    /// The URL the clients use.
    fn url(&self, net: &Net) -> String;
    /// distlock's options for this store, before the subcommand.
    fn options(&self) -> Vec<String>;
    /// Member `i`'s server process (the one a pause stops).
    fn pid(&self, i: usize) -> Option<i32>;
    /// SIGKILLs member `i`'s server and reaps it.
    fn kill(&mut self, i: usize);
    /// Starts member `i`'s server again on its data.
    fn restart(&mut self, net: &Net, i: usize);
    /// Starts killed member `i` again without its data: an empty data
    /// dir, and whatever the store needs to take it back so.
    fn restart_empty(&mut self, net: &Net, i: usize);
    /// The member whose data the nemesis may wipe, given a drawn one.
    fn wipe_candidate(&self, drawn: usize, _leader: Option<usize>) -> usize {
        drawn
    }
    /// The member that leads (etcd's leader, Redis's master), as the
    /// cluster says.
    fn leader(&self, net: &Net) -> Option<Leader>;
    /// Whether this server's leader, stalled past an election and awake
    /// again, revokes leases the new leader kept alive (etcd before
    /// 3.4.31 and 3.5.13: etcd-io/etcd#15247); see
    /// [`crate::checker::Verdict::overlaps_stalled_leader`].
    fn stalled_leader_revokes(&self) -> bool {
        false
    }
}

/// Who leads, and since which election.
#[derive(Clone, Copy, PartialEq)]
pub struct Leader {
    pub member: usize,
    /// etcd's raft term: it moves at every election, also one that
    /// chooses the same member again. 0 where the store has none to read
    /// (Sentinel).
    pub term: u64,
}

/// The three members' server processes (None while one is killed), kept
/// the same way by both stores.
pub struct Servers(Vec<Option<Child>>);

impl Servers {
    pub fn new() -> Servers {
        Servers((0..MEMBERS.len()).map(|_| None).collect())
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.0[i].is_some()
    }

    pub fn set(&mut self, i: usize, child: Child) {
        self.0[i] = Some(child);
    }

    pub fn pid(&self, i: usize) -> Option<i32> {
        self.0[i].as_ref().map(|c| c.id() as i32)
    }

    /// SIGKILLs member `i`'s server and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.0[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Servers {
    /// Every server continued (a paused one) and killed.
    fn drop(&mut self) {
        for i in 0..self.0.len() {
            if let Some(pid) = self.pid(i) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::SIGCONT,
                );
            }
            self.kill(i);
        }
    }
}
