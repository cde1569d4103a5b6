//! Bad Redis servers for the tests, on 127.0.0.1: each accepts every
//! connection and reads (and counts) what the client sends, but answers
//! badly:
//!
//! - `FakeServer::silent()` never answers (a hung server, or a partition
//!   after the connect);
//! - `FakeServer::trickling()` answers each request with the start of a
//!   valid reply, a bulk string too long to ever finish, one byte every
//!   200 ms forever: a per-read timeout never fires on it.
//!
//! Every thread ends, and every socket is closed, when the value is
//! dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the trickling server sends its next byte.
pub const TRICKLE_EVERY: Duration = Duration::from_millis(200);

/// A listening fake server; see the module documentation.
pub struct FakeServer {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    stop: AtomicBool,
    trickle: bool,
    /// Bytes received from clients, over all connections.
    received: AtomicU64,
    /// Every accepted socket, to shut down on drop.
    socks: Mutex<Vec<TcpStream>>,
}

impl FakeServer {
    /// A server that accepts and reads but never answers.
    pub fn silent() -> FakeServer {
        Self::start(false)
    }

    /// A server that answers one byte every `TRICKLE_EVERY`, forever.
    pub fn trickling() -> FakeServer {
        Self::start(true)
    }

    fn start(trickle: bool) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            trickle,
            received: AtomicU64::new(0),
            socks: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                if let Ok(c) = conn.try_clone() {
                    s.socks.lock().unwrap().push(c);
                }
                let s = s.clone();
                std::thread::spawn(move || serve(conn, &s));
            }
        });
        FakeServer { port, shared }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Bytes received from clients so far.
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::SeqCst)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for s in self.shared.socks.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Wake the acceptor so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One connection: counts what comes in; the trickling server starts its
/// endless reply once the first request has arrived.
fn serve(mut conn: TcpStream, s: &Arc<Shared>) {
    let reader = conn.try_clone();
    let s2 = s.clone();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let Ok(mut r) = reader else { return };
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 || s2.stop.load(Ordering::SeqCst) {
                break;
            }
            s2.received.fetch_add(n as u64, Ordering::SeqCst);
            let _ = tx.send(());
        }
    });
    if !s.trickle {
        return;
    }
    if rx.recv().is_err() {
        return;
    }
    let reply = b"$999999999\r\n"
        .iter()
        .copied()
        .chain(std::iter::repeat(b'x'));
    for byte in reply {
        if s.stop.load(Ordering::SeqCst) || conn.write_all(&[byte]).is_err() {
            break;
        }
        std::thread::sleep(TRICKLE_EVERY);
    }
}
