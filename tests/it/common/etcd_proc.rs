//! The process of an [`EtcdServer`](super::etcd::EtcdServer), found by its
//! client port, for tests that freeze a member (SIGSTOP) to model one that
//! stops answering.

use super::etcd::EtcdServer;

/// The pid of the `etcd` that serves `server`'s client port.
pub fn pid_of(server: &EtcdServer) -> i32 {
    let wanted = format!("--listen-client-urls=http://127.0.0.1:{}", server.port);
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == wanted.as_bytes()))
        })
        .unwrap_or_else(|| panic!("no etcd process serves port {}", server.port))
}
