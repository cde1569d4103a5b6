//! The `delay` fault without `sch_netem`, which kernels built without
//! modules (this one among them) lack: an `iptables … -j NFQUEUE` rule
//! hands each packet a node sends to a netlink queue in its namespace,
//! and a thread of the lab holds it there until its time has come, then
//! gives the kernel its verdict (accept). The packet itself never leaves
//! the kernel; only its release is late, as with `tc netem delay D J`:
//! each packet is held D ± D/4 at random, so packets may overtake each
//! other, as they do under netem's jitter.
//!
//! The rule carries `--queue-bypass`: a packet that finds no listener
//! passes, so a thread that died lets traffic flow rather than cut the
//! node off; the queue is also opened fail-open (a full queue passes).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::nemesis::Rng;
use crate::net::sh;

// linux/netfilter/nfnetlink_queue.h and nfnetlink.h.
const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_META: u8 = 1;
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;
const NF_ACCEPT: u32 = 1;
const NLMSG_ERROR: u16 = 2;

/// The queue's number inside the node's namespace (each has its own).
pub const QUEUE: u16 = 0;

/// A running delay, until dropped: the rule, and the thread holding the
/// node's packets.
pub struct Delay {
    ns: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The rule, after `-A` or `-D`: what the node sends out of its link.
fn rule(ns: &str, op: &str) -> Result<String, String> {
    let q = QUEUE.to_string();
    sh(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "iptables",
            "-w",
            op,
            "OUTPUT",
            "-o",
            "eth0",
            "-j",
            "NFQUEUE",
            "--queue-num",
            &q,
            "--queue-bypass",
        ],
    )
}

impl Delay {
    /// Binds queue [`QUEUE`] in namespace `ns`, starts holding what
    /// arrives there `ms` ± a quarter, then sends the node's outgoing
    /// packets to it. Fails if the kernel has no netlink queue or there
    /// is no iptables.
    pub fn start(ns: &str, ms: u32, seed: u64) -> Result<Delay, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (name, flag) = (ns.to_string(), stop.clone());
        let thread = std::thread::spawn(move || match open(&name) {
            Ok(sock) => {
                tx.send(Ok(())).unwrap();
                hold(&sock, ms, Rng::new(seed), &flag);
            }
            Err(e) => tx.send(Err(e)).unwrap(),
        });
        let delay = Delay {
            ns: ns.to_string(),
            stop,
            thread: Some(thread),
        };
        rx.recv().unwrap()?;
        rule(ns, "-A")?;
        Ok(delay)
    }
}

impl Drop for Delay {
    /// Sends no more packets to the queue, releases every packet still
    /// held, then unbinds (closing the socket; the kernel would drop what
    /// was still queued).
    fn drop(&mut self) {
        let _ = rule(&self.ns, "-D");
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Moves the calling thread into network namespace `ns` (setns of a
/// network namespace is per thread); sockets it then opens live there.
pub fn enter(ns: &str) -> Result<(), String> {
    let path = format!("/run/netns/{ns}");
    let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: a plain syscall on a descriptor we own.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {path}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Enters namespace `ns` and opens its queue, bound and configured.
fn open(ns: &str) -> Result<OwnedFd, String> {
    enter(ns)?;
    // SAFETY: plain syscalls on descriptors we own; no memory is shared.
    unsafe {
        // CLOEXEC: a process the lab starts meanwhile (a server restarted,
        // a client's run) must not keep the queue bound after we close it.
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_NETFILTER,
        );
        if fd < 0 {
            return Err(format!("netlink: {}", std::io::Error::last_os_error()));
        }
        let sock = OwnedFd::from_raw_fd(fd);
        // Room for bursts: a message the socket cannot take is a packet lost.
        let size: libc::c_int = 8 << 20;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let cmd = [NFQNL_CFG_CMD_BIND, 0, 0, libc::AF_INET as u8];
        let mut params = 0u32.to_be_bytes().to_vec();
        params.push(NFQNL_COPY_META);
        for attrs in [
            vec![(NFQA_CFG_CMD, cmd.to_vec())],
            vec![
                (NFQA_CFG_PARAMS, params),
                (NFQA_CFG_QUEUE_MAXLEN, 65_536u32.to_be_bytes().to_vec()),
                (NFQA_CFG_MASK, NFQA_CFG_F_FAIL_OPEN.to_be_bytes().to_vec()),
                (NFQA_CFG_FLAGS, NFQA_CFG_F_FAIL_OPEN.to_be_bytes().to_vec()),
            ],
        ] {
            let msg = message(NFQNL_MSG_CONFIG, libc::NLM_F_ACK as u16, &attrs);
            send(&sock, &msg)?;
            acked(&sock)?;
        }
        Ok(sock)
    }
}

/// One nfnetlink message to the queue subsystem: nlmsghdr, nfgenmsg
/// (family, version 0, the queue number big-endian), attributes.
fn message(kind: u16, flags: u16, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | kind).to_ne_bytes());
    m.extend_from_slice(&(libc::NLM_F_REQUEST as u16 | flags).to_ne_bytes());
    m.extend_from_slice(&[0; 8]); // seq, port id
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
    m.extend_from_slice(&QUEUE.to_be_bytes());
    for (kind, payload) in attrs {
        m.extend_from_slice(&(4 + payload.len() as u16).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(m.len().next_multiple_of(4), 0);
    }
    let len = m.len() as u32;
    m[..4].copy_from_slice(&len.to_ne_bytes());
    m
}

fn send(sock: &OwnedFd, msg: &[u8]) -> Result<(), String> {
    // SAFETY: msg is a live buffer of msg.len() bytes.
    let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    if n < 0 {
        return Err(format!("netlink send: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Waits for the kernel's answer to a request sent with NLM_F_ACK.
fn acked(sock: &OwnedFd) -> Result<(), String> {
    let mut buf = [0u8; 4096];
    // SAFETY: buf is a live buffer of buf.len() bytes.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 20 {
        return Err(format!("netlink ack: {}", std::io::Error::last_os_error()));
    }
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    let errno = i32::from_ne_bytes(buf[16..20].try_into().unwrap());
    if kind != NLMSG_ERROR || errno != 0 {
        return Err(format!(
            "nfnetlink_queue refused its configuration: {}",
            std::io::Error::from_raw_os_error(-errno)
        ));
    }
    Ok(())
}

/// The packet ids in one read of the socket (it may carry several
/// messages).
fn packet_ids(buf: &[u8], ids: &mut Vec<u32>) {
    let mut at = 0;
    while at + 20 <= buf.len() {
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        if len < 20 || at + len > buf.len() {
            break;
        }
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
            let mut a = at + 20;
            while a + 4 <= at + len {
                let alen = u16::from_ne_bytes([buf[a], buf[a + 1]]) as usize;
                let akind = u16::from_ne_bytes([buf[a + 2], buf[a + 3]]) & 0x3fff;
                if alen < 4 {
                    break;
                }
                if akind == NFQA_PACKET_HDR && alen >= 8 {
                    ids.push(u32::from_be_bytes(buf[a + 4..a + 8].try_into().unwrap()));
                }
                a += alen.next_multiple_of(4);
            }
        }
        at += len.next_multiple_of(4);
    }
}

fn accept(sock: &OwnedFd, id: u32) {
    let mut hdr = NF_ACCEPT.to_be_bytes().to_vec();
    hdr.extend_from_slice(&id.to_be_bytes());
    let _ = send(
        sock,
        &message(NFQNL_MSG_VERDICT, 0, &[(NFQA_VERDICT_HDR, hdr)]),
    );
}

/// The thread's loop: read what the kernel queued, give each packet its
/// release time, accept those whose time has come; on stop, accept all.
fn hold(sock: &OwnedFd, ms: u32, mut rng: Rng, stop: &AtomicBool) {
    let mut held: BinaryHeap<Reverse<(Instant, u32)>> = BinaryHeap::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut ids = Vec::new();
    let jitter = u64::from(ms / 4);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        while let Some(Reverse((due, id))) = held.peek().copied() {
            if due > now {
                break;
            }
            held.pop();
            accept(sock, id);
        }
        // At most 10 ms, so that a stop is seen soon.
        let wait = held.peek().map_or(10, |Reverse((due, _))| {
            due.saturating_duration_since(now).as_millis().clamp(1, 10)
        });
        let mut pfd = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, live for the call.
        unsafe { libc::poll(&mut pfd, 1, wait as libc::c_int) };
        read_queued(sock, &mut buf, &mut ids);
        let now = Instant::now();
        for id in ids.drain(..) {
            let d = u64::from(ms) - jitter + rng.below(2 * jitter + 1);
            held.push(Reverse((now + Duration::from_millis(d), id)));
        }
    }
    // What came in after the last read (the rule's removal may race a
    // packet already in its hook): closing the socket would drop it.
    read_queued(sock, &mut buf, &mut ids);
    for id in held.into_iter().map(|Reverse((_, id))| id).chain(ids) {
        accept(sock, id);
    }
}

/// Adds to `ids` every packet the kernel has queued for us so far,
/// without waiting.
fn read_queued(sock: &OwnedFd, buf: &mut [u8], ids: &mut Vec<u32>) {
    loop {
        // SAFETY: buf is a live buffer of buf.len() bytes.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            // EAGAIN; or ENOBUFS: the queue is fail-open, so what did
            // not fit went out undelayed.
            return;
        }
        packet_ids(&buf[..n as usize], ids);
    }
}
