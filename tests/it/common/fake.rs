//! Bad Redis servers for the tests, on 127.0.0.1: each accepts every
//! connection and reads (and counts) what the client sends, but answers
//! badly:
//!
//! - `FakeServer::silent()` never answers (a hung server, or a partition
//!   after the connect);
//! - `FakeServer::trickling()` answers each request with the start of a
//!   valid reply, a bulk string too long to ever finish, one byte every
//!   200 ms forever: a per-read timeout never fires on it;
//! - `FakeServer::trickling_tls()` does the same over TLS (a certificate
//!   of the tests' CA for 127.0.0.1), one byte per TLS record, once the
//!   handshake is done and the first request has arrived.
//!
//! Every thread ends, and every socket is closed, when the value is
//! dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::tls::Pki;

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
    tls: Option<Arc<rustls::ServerConfig>>,
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

    /// `trickling()` over TLS; see the module documentation.
    pub fn trickling_tls() -> FakeServer {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let pki = Pki::get();
        let chain = CertificateDer::pem_file_iter(pki.path("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(pki.path("server.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        Self::start_with(true, Some(Arc::new(config)))
    }

    fn start(trickle: bool) -> FakeServer {
        Self::start_with(trickle, None)
    }

    fn start_with(trickle: bool, tls: Option<Arc<rustls::ServerConfig>>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            trickle,
            tls,
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

    /// `redis://127.0.0.1:PORT` (`rediss://` over TLS: give distlock
    /// `--tls-ca` with the tests' CA).
    pub fn url(&self) -> String {
        let scheme = if self.shared.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
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
    if let Some(config) = &s.tls {
        return serve_tls(conn, config.clone(), s);
    }
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

/// One TLS connection: the handshake and the first request read, then the
/// endless reply, each byte a TLS record of its own.
fn serve_tls(conn: TcpStream, config: Arc<rustls::ServerConfig>, s: &Arc<Shared>) {
    let Ok(tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut stream = rustls::StreamOwned::new(tls, conn);
    let mut buf = [0u8; 4096];
    match stream.read(&mut buf) {
        Ok(n) if n > 0 => s.received.fetch_add(n as u64, Ordering::SeqCst),
        _ => return,
    };
    let reply = b"$999999999\r\n"
        .iter()
        .copied()
        .chain(std::iter::repeat(b'x'));
    for byte in reply {
        if s.stop.load(Ordering::SeqCst)
            || stream
                .write_all(&[byte])
                .and_then(|()| stream.flush())
                .is_err()
        {
            break;
        }
        std::thread::sleep(TRICKLE_EVERY);
    }
}
