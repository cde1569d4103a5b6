//! A small fault-injecting TCP proxy for the tests: it sits between
//! distlock and a redis-server, both on 127.0.0.1, and on command adds
//! latency to every reply, blackholes traffic, resets connections, and
//! heals.
//!
//! Every connection is carried by four threads, a reader and a writer for
//! each direction, joined by a bounded queue of chunks. Readers always
//! read (so a peer's bytes are accepted, as a live TCP stack would), and
//! writers decide what goes out and when:
//!
//! - `set_latency(d)`: a chunk read from the server is handed to the client
//!   `d` after it was read (each chunk separately: latency, not a
//!   bandwidth limit). Requests are not delayed, so the server acts on a
//!   request when it is sent; only the client learns late.
//! - `blackhole()`: nothing more goes out, either way, on any connection,
//!   old or new. Bytes are still read and accepted, connections still
//!   open, and nothing is closed or reset: no FIN, no RST, no error. The
//!   peers simply hear nothing, which is the nastiest partition: only a
//!   timeout can tell it from a slow server. What was held is delivered
//!   at `heal()`, in order (TCP would retransmit it once the path is
//!   back), including a close the peer made meanwhile.
//! - `reset_all()`: every current connection is reset (RST to both
//!   peers). New connections work as usual.
//! - `heal()`: undoes `blackhole()` and `set_latency()` (for what is read
//!   from then on).
//!
//! Deterministic: nothing is random, every fault starts and ends exactly
//! when the test says; `blackhole()` returns only once no write is in
//! flight, so `stats().last_forward` is then final. Bounded: each queue
//! holds at most `QUEUE_CAP` bytes (a reader waits beyond that, as TCP's
//! window would make the sender wait), and every thread ends when the
//! proxy is dropped. Loopback only: it listens on 127.0.0.1 and connects
//! only to 127.0.0.1.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most bytes one direction of one connection holds before its reader
/// waits.
const QUEUE_CAP: usize = 1 << 20;

/// What the proxy has seen, for tests that reason about timing.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Client chunks written to the server.
    pub requests: u64,
    /// Server chunks written to the client.
    pub replies: u64,
    /// When the proxy finished reading the latest client chunk: distlock
    /// sent it before then.
    pub last_request_read: Option<Instant>,
    /// When the proxy began writing the latest client chunk to the server:
    /// the server received it after then.
    pub last_forward: Option<Instant>,
    /// When the proxy began writing the latest server chunk to the client.
    pub last_reply: Option<Instant>,
    /// Replies held back by `delay_reply_to`.
    pub delayed: u64,
}

/// The proxy and its control handle. Dropping it ends every thread and
/// closes every socket.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
    /// Signalled on every change of state: new chunks, writes done,
    /// faults set or lifted, shutdown.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    latency: Duration,
    blackholed: bool,
    stopping: bool,
    next_id: u64,
    /// Live connections by id, with their threads.
    conns: HashMap<u64, Live>,
    /// Chunks waiting to be written, per connection and direction.
    queues: HashMap<(u64, Dir), Queue>,
    /// Connections being reset: their threads stop at once.
    dead: HashSet<u64>,
    /// Writes in progress (popped from a queue, not yet written).
    writing: usize,
    stats: Stats,
    /// `delay_reply_to`'s needle, the matches still to let pass, and the
    /// delay.
    delay_reply: Option<(Vec<u8>, u32, Duration)>,
    /// Connections whose next server chunk is held back this much longer.
    delay_next: HashMap<u64, Duration>,
}

struct Live {
    conn: Arc<Conn>,
    threads: Vec<JoinHandle<()>>,
    /// Threads of this connection that have finished.
    done: usize,
}

struct Conn {
    id: u64,
    client: TcpStream,
    server: TcpStream,
}

/// Which way a chunk travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Dir {
    /// Client to server: requests.
    Up,
    /// Server to client: replies.
    Down,
}

/// One direction of one connection: chunks waiting to be written.
#[derive(Default)]
struct Queue {
    chunks: VecDeque<Chunk>,
    bytes: usize,
}

struct Chunk {
    /// Not to be written before then (latency).
    ready_at: Instant,
    /// None: the reader saw end of file; pass the close on.
    data: Option<Vec<u8>>,
}

impl Proxy {
    /// Starts a proxy on a free port of 127.0.0.1 that forwards to
    /// 127.0.0.1:`upstream_port`.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream: SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port)),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept_loop(&s, listener))
            .unwrap();
        Proxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The port distlock should connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Delays every server chunk read from now on by `d`.
    pub fn set_latency(&self, d: Duration) {
        self.shared.lock().latency = d;
        self.shared.changed.notify_all();
    }

    /// Holds back by `d` the answer to the `nth` request (client chunk,
    /// from 1) from now on that contains `needle`, on whichever connection:
    /// one call's answer is lost. What follows it on that connection waits
    /// behind it; other connections flow.
    pub fn delay_reply_to(&self, needle: &str, nth: u32, d: Duration) {
        self.shared.lock().delay_reply = Some((needle.as_bytes().to_vec(), nth, d));
    }

    /// Stops all forwarding, both ways, on every connection, without
    /// closing anything. Returns once no write is in flight, so nothing
    /// reaches either peer after this returns.
    pub fn blackhole(&self) {
        let mut st = self.shared.lock();
        st.blackholed = true;
        self.shared.changed.notify_all();
        let limit = Instant::now() + Duration::from_secs(5);
        while st.writing > 0 {
            let left = limit.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "proxy: a write stayed in flight for 5s");
            st = self.shared.changed.wait_timeout(st, left).unwrap().0;
        }
    }

    /// Lifts the blackhole and the latency; what was held is delivered in
    /// order. A chunk is delayed by the latency in force when it was read,
    /// so replies already on their way keep their delay.
    pub fn heal(&self) {
        let mut st = self.shared.lock();
        st.blackholed = false;
        st.latency = Duration::ZERO;
        self.shared.changed.notify_all();
    }

    /// Resets every current connection: both peers get an RST. Returns
    /// once they are closed.
    pub fn reset_all(&self) {
        let victims: Vec<Live> = {
            let mut st = self.shared.lock();
            let ids: Vec<u64> = st.conns.keys().copied().collect();
            let mut out = Vec::new();
            for id in ids {
                let live = st.conns.remove(&id).unwrap();
                let c = &live.conn;
                for s in [&c.client, &c.server] {
                    // Linger 0: closing sends RST instead of FIN. Shutting
                    // down the read side sends nothing but wakes the
                    // reader, so every thread lets go of the sockets.
                    abort_on_close(s);
                    // SAFETY: plain shutdown(2) on a socket we own.
                    unsafe { libc::shutdown(s.as_raw_fd(), libc::SHUT_RD) };
                }
                st.dead.insert(id);
                out.push(live);
            }
            self.shared.changed.notify_all();
            out
        };
        for live in victims {
            let id = live.conn.id;
            drop(live.conn);
            for t in live.threads {
                let _ = t.join();
            }
            let mut st = self.shared.lock();
            st.dead.remove(&id);
            st.queues.remove(&(id, Dir::Up));
            st.queues.remove(&(id, Dir::Down));
        }
    }

    /// A snapshot of the counters.
    /// Connections open now (closed ones are forgotten once both sides
    /// are done).
    pub fn live(&self) -> usize {
        self.shared.lock().conns.len()
    }

    pub fn stats(&self) -> Stats {
        self.shared.lock().stats.clone()
    }

    /// Waits until more than `n` replies have been delivered; returns the
    /// stats then, or None after `limit`.
    pub fn wait_for_replies(&self, n: u64, limit: Duration) -> Option<Stats> {
        let deadline = Instant::now() + limit;
        let mut st = self.shared.lock();
        loop {
            if st.stats.replies > n {
                return Some(st.stats.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            st = self.shared.changed.wait_timeout(st, left).unwrap().0;
        }
    }

    /// Waits for the next reply after now; returns the stats right after
    /// it was delivered.
    pub fn next_reply(&self, limit: Duration) -> Option<Stats> {
        let n = self.stats().replies;
        self.wait_for_replies(n, limit)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let all: Vec<Live> = {
            let mut st = self.shared.lock();
            st.stopping = true;
            for live in st.conns.values() {
                for s in [&live.conn.client, &live.conn.server] {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            self.shared.changed.notify_all();
            st.conns.drain().map(|(_, l)| l).collect()
        };
        // Wake the acceptor out of accept(2).
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for live in all {
            for t in live.threads {
                let _ = t.join();
            }
        }
        // Connections accepted while stopping were closed by the acceptor.
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Sets SO_LINGER to {on, 0s}, so that the last close sends an RST.
fn abort_on_close(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    for client in listener.incoming() {
        if shared.lock().stopping {
            return;
        }
        let Ok(client) = client else { continue };
        let server = match TcpStream::connect_timeout(&shared.upstream, Duration::from_secs(1)) {
            Ok(s) => s,
            Err(_) => {
                // The server is down: the client gets a reset, as it
                // would get "connection refused" without the proxy.
                abort_on_close(&client);
                continue;
            }
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let mut st = shared.lock();
        if st.stopping {
            return;
        }
        st.stats.accepted += 1;
        let id = st.next_id;
        st.next_id += 1;
        let conn = Arc::new(Conn { id, client, server });
        let mut threads = Vec::new();
        for dir in [Dir::Up, Dir::Down] {
            st.queues.insert((id, dir), Queue::default());
            let (s, c) = (shared.clone(), conn.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("proxy-{id}-read-{dir:?}"))
                    .spawn(move || reader(&s, &c, dir))
                    .unwrap(),
            );
            let (s, c) = (shared.clone(), conn.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("proxy-{id}-write-{dir:?}"))
                    .spawn(move || writer(&s, &c, dir))
                    .unwrap(),
            );
        }
        st.conns.insert(
            id,
            Live {
                conn,
                threads,
                done: 0,
            },
        );
    }
}

/// Reads chunks from one peer into the queue towards the other, whatever
/// the faults: a blackhole accepts bytes, it only does not pass them on.
fn reader(shared: &Shared, conn: &Conn, dir: Dir) {
    let mut src = match dir {
        Dir::Up => &conn.client,
        Dir::Down => &conn.server,
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = src.read(&mut buf);
        let read_at = Instant::now();
        let data = match n {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(buf[..n].to_vec()),
        };
        let mut st = shared.lock();
        // Bounded: wait for room, as a full TCP window would.
        while data.is_some()
            && !st.stopping
            && !st.dead.contains(&conn.id)
            && st
                .queues
                .get(&(conn.id, dir))
                .is_some_and(|q| q.bytes > QUEUE_CAP)
        {
            st = shared.changed.wait(st).unwrap();
        }
        if st.stopping || st.dead.contains(&conn.id) {
            break;
        }
        let eof = data.is_none();
        if dir == Dir::Up && !eof {
            st.stats.last_request_read = Some(read_at);
        }
        let d = data.as_deref().unwrap_or_default();
        if let Some((needle, nth, by)) = st.delay_reply.as_mut() {
            if dir == Dir::Up && d.windows(needle.len()).any(|w| w == needle.as_slice()) {
                *nth -= 1;
                if *nth == 0 {
                    let by = *by;
                    st.delay_reply = None;
                    st.delay_next.insert(conn.id, by);
                }
            }
        }
        let ready_at = match dir {
            Dir::Up => read_at,
            Dir::Down => {
                let by = st.delay_next.remove(&conn.id).filter(|_| !eof);
                st.stats.delayed += u64::from(by.is_some());
                read_at + st.latency + by.unwrap_or_default()
            }
        };
        if let Some(q) = st.queues.get_mut(&(conn.id, dir)) {
            q.bytes += data.as_ref().map_or(0, Vec::len);
            q.chunks.push_back(Chunk { ready_at, data });
        }
        shared.changed.notify_all();
        if eof {
            break;
        }
    }
    finished(shared, conn.id);
}

/// Writes queued chunks to one peer when they are due and no blackhole
/// holds them.
fn writer(shared: &Shared, conn: &Conn, dir: Dir) {
    let mut dst = match dir {
        Dir::Up => &conn.server,
        Dir::Down => &conn.client,
    };
    loop {
        let mut st = shared.lock();
        let chunk = loop {
            if st.stopping || st.dead.contains(&conn.id) {
                drop(st);
                finished(shared, conn.id);
                return;
            }
            let now = Instant::now();
            let due = st
                .queues
                .get(&(conn.id, dir))
                .and_then(|q| q.chunks.front())
                .map(|c| c.ready_at);
            match due {
                Some(at) if !st.blackholed && at <= now => {
                    let q = st.queues.get_mut(&(conn.id, dir)).unwrap();
                    let c = q.chunks.pop_front().unwrap();
                    q.bytes -= c.data.as_ref().map_or(0, Vec::len);
                    st.writing += 1;
                    break c;
                }
                Some(at) if !st.blackholed => {
                    st = shared.changed.wait_timeout(st, at - now).unwrap().0;
                }
                _ => st = shared.changed.wait(st).unwrap(),
            }
        };
        // Taken before the write: the peer gets the bytes after this.
        let at = Instant::now();
        if chunk.data.is_some() {
            match dir {
                Dir::Up => {
                    st.stats.requests += 1;
                    st.stats.last_forward = Some(at);
                }
                Dir::Down => {
                    st.stats.replies += 1;
                    st.stats.last_reply = Some(at);
                }
            }
        }
        drop(st);
        let more = match &chunk.data {
            Some(d) => dst.write_all(d).is_ok(),
            None => {
                // Pass the peer's close on, and stop.
                let _ = dst.shutdown(Shutdown::Write);
                false
            }
        };
        if chunk.data.is_some() && !more {
            // The peer is gone: unwind the whole connection.
            let _ = conn.client.shutdown(Shutdown::Both);
            let _ = conn.server.shutdown(Shutdown::Both);
        }
        let mut st = shared.lock();
        st.writing -= 1;
        shared.changed.notify_all();
        drop(st);
        if !more {
            break;
        }
    }
    finished(shared, conn.id);
}

/// Bookkeeping when one of a connection's four threads ends; the last one
/// forgets the connection (its sockets close with the last reference).
fn finished(shared: &Shared, id: u64) {
    let mut st = shared.lock();
    let last = match st.conns.get_mut(&id) {
        Some(live) => {
            live.done += 1;
            live.done == 4
        }
        None => false,
    };
    if last {
        // Dropping the handles detaches threads that are ending anyway.
        st.conns.remove(&id);
        st.queues.remove(&(id, Dir::Up));
        st.queues.remove(&(id, Dir::Down));
    }
    shared.changed.notify_all();
}
