//! A server that is not Redis: a TCP listener on 127.0.0.1 that answers
//! every connection with fixed bytes (an HTTP error page, an SSH banner)
//! and closes it, for tests of what distlock says when the URL points at
//! the wrong port. Every connection is handled, and the listener's thread
//! ends when the value is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// When the fake speaks.
#[derive(Clone, Copy)]
pub enum Speaks {
    /// After the client's first bytes, as an HTTP server does.
    WhenSpokenTo,
    /// As soon as the client connects, as an SSH or SMTP server does.
    First,
}

/// The listener; the port is where to point distlock.
pub struct NotRedis {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NotRedis {
    /// Listens on a free loopback port and answers `reply` on every
    /// connection, as `when` says, then closes it.
    pub fn start(reply: &'static [u8], when: Speaks) -> NotRedis {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                if let Speaks::WhenSpokenTo = when {
                    let _ = conn.read(&mut [0u8; 4096]);
                }
                let _ = conn.write_all(reply);
                let _ = conn.shutdown(Shutdown::Write);
                // Read what is left until the client closes, so it gets
                // our bytes and a clean end rather than a reset.
                let mut sink = [0u8; 4096];
                while matches!(conn.read(&mut sink), Ok(n) if n > 0) {}
            }
        });
        NotRedis {
            port,
            stop,
            thread: Some(thread),
        }
    }

    /// `scheme://127.0.0.1:PORT`.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.port)
    }
}

impl Drop for NotRedis {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
