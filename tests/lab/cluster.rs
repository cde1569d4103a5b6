//! What the nemesis needs of a store's three members, whatever the store.

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
    /// The member that leads (etcd's leader, Redis's master), as the
    /// cluster says.
    fn leader(&self, net: &Net) -> Option<usize>;
}
