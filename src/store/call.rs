//! One call to a server, as the store bounds it: a deadline for the whole
//! call and an end at once on a pending ending signal, on both backends,
//! by one watchdog thread that cuts a blocking call's socket and wakes an
//! async one. How and why: docs/design.md, "I/O model".

// Async calls are etcd's only.
#![cfg_attr(not(feature = "etcd"), allow(dead_code))]

use std::future::{poll_fn, Future};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};

/// How often a call past its deadline (or interrupted) is cut again, while
/// it has not returned: a thread between two reads is blocked on nothing.
const CUT_EVERY: Duration = Duration::from_millis(2);

/// How often the watchdog looks for a pending ending signal while an
/// interruptible call is in progress.
const SIGNAL_POLL: Duration = Duration::from_millis(10);

/// The system calls a Redis connection blocks in, whose first argument is
/// the socket.
const SOCKET_IO: [libc::c_long; 9] = [
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_connect,
];

/// An async call's end: whether the watchdog ended it, and the waker it
/// wakes when it does.
type Woken = Arc<Mutex<(bool, Option<Waker>)>>;

/// One call in progress, as the watchdog sees it: a blocking one is cut
/// in thread `tid`, an async one `woken` (see [`Call::within`]).
#[derive(Clone)]
struct Watched {
    id: u64,
    tid: i32,
    woken: Option<Woken>,
    deadline: Instant,
    enders: &'static [i32],
}

/// The calls in progress, and the watchdog's wake-up when they change.
static CALLS: Mutex<Vec<Watched>> = Mutex::new(Vec::new());
static CHANGED: Condvar = Condvar::new();

/// A poisoned lock only means a thread panicked while holding it; the list
/// itself is always whole.
fn calls() -> MutexGuard<'static, Vec<Watched>> {
    CALLS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watchdog: cuts every call that is past its deadline or has a
/// pending ender, and sleeps until the next one is due. It holds the lock
/// while it cuts, so the call it cuts cannot have returned (a returning
/// call deregisters first): the socket is still the call's own.
fn watch() {
    // Never take a signal meant for another thread.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None);
    let mut calls = calls();
    loop {
        let now = Instant::now();
        let pending = calls
            .iter()
            .any(|c| !c.enders.is_empty())
            .then(pending_signals);
        // `Duration::MAX` waits with no limit (the deadline overflows).
        let mut wait = Duration::MAX;
        for c in calls.iter() {
            let signalled = pending.is_some_and(|p| any_of(p, c.enders));
            let due = if now >= c.deadline || signalled {
                if let Some(w) = &c.woken {
                    let mut w = w.lock().unwrap_or_else(PoisonError::into_inner);
                    w.0 = true;
                    if let Some(waker) = w.1.take() {
                        waker.wake();
                    }
                    // Ended for good: not due again.
                    continue;
                }
                cut(c.tid);
                now + CUT_EVERY
            } else if c.enders.is_empty() {
                c.deadline
            } else {
                c.deadline.min(now + SIGNAL_POLL)
            };
            wait = wait.min(due.saturating_duration_since(now));
        }
        calls = CHANGED
            .wait_timeout(calls, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// Shuts down the socket that thread `tid` is blocked reading or writing,
/// if it is.
fn cut(tid: i32) -> Option<()> {
    let now = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    let mut fields = now.split_ascii_whitespace();
    let nr: libc::c_long = fields.next()?.parse().ok()?;
    let fd = i32::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok()?;
    if SOCKET_IO.contains(&nr) {
        // SAFETY: shutdown(2) touches no memory; on a descriptor that is
        // not a socket it fails with ENOTSOCK.
        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
    }
    Some(())
}

/// The signals pending for the process (blocked in every thread, so not
/// yet delivered) and for the calling thread, as bits.
fn pending_signals() -> u64 {
    // SAFETY: sigpending fills a sigset_t we own, emptied first;
    // sigismember only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigpending(&mut set);
        (1..64)
            .filter(|&s| libc::sigismember(&set, s) == 1)
            .fold(0, |bits, s| bits | 1 << s)
    }
}

/// Whether one of `sigs` is among the `pending` bits.
fn any_of(pending: u64, sigs: &[i32]) -> bool {
    sigs.iter()
        .any(|&s| (1..64).contains(&s) && pending & (1 << s) != 0)
}

/// One call in progress; no longer watched once dropped.
pub(super) struct Call(Watched);

impl Call {
    /// Starts a blocking call on this thread that must be over `timeout`
    /// from now; with `enders` (signal numbers, blocked by the caller), one
    /// that any of them ends at once.
    pub(super) fn start(timeout: Duration, enders: &'static [i32]) -> Call {
        Call::watched(timeout, enders, None)
    }

    /// [`Call::start`] for an async call, run through [`Call::within`].
    pub(super) fn start_async(timeout: Duration, enders: &'static [i32]) -> Call {
        Call::watched(timeout, enders, Some(Woken::default()))
    }

    fn watched(timeout: Duration, enders: &'static [i32], woken: Option<Woken>) -> Call {
        static WATCHDOG: Once = Once::new();
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        // Without a thread (a process out of threads) calls are bounded
        // per read only.
        WATCHDOG.call_once(|| {
            let _ = std::thread::Builder::new()
                .name("deadline".into())
                .stack_size(64 * 1024)
                .spawn(watch);
        });
        let call = Watched {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            tid: nix::unistd::gettid().as_raw(),
            woken,
            deadline: Instant::now() + timeout,
            enders,
        };
        calls().push(call.clone());
        CHANGED.notify_one();
        Call(call)
    }

    /// Runs `fut`, an async call's work: None once the watchdog ended the
    /// call (its deadline passed, or an ender is pending; ask
    /// [`Call::interrupted`] which), and `fut` is dropped unfinished.
    pub(super) async fn within<T>(&self, fut: impl Future<Output = T>) -> Option<T> {
        let mut fut = std::pin::pin!(fut);
        let woken = self.0.woken.as_ref().expect("an async call");
        poll_fn(|cx| {
            if let Poll::Ready(out) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(out));
            }
            let mut w = woken.lock().unwrap_or_else(PoisonError::into_inner);
            if w.0 {
                return Poll::Ready(None);
            }
            w.1 = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Whether the deadline has passed.
    pub(super) fn expired(&self) -> bool {
        Instant::now() >= self.0.deadline
    }

    /// The time left before the deadline (at least 1 ms: redis-rs refuses
    /// a zero timeout).
    pub(super) fn left(&self) -> Duration {
        self.0
            .deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// Whether the call that failed with `e` ran out of time: past its
    /// deadline and not ended by a signal. A timeout the error already
    /// names (with a TLS hint, say) keeps its own words, so it is not
    /// counted here.
    pub(super) fn ran_out(&self, e: &super::StoreError) -> bool {
        self.expired() && !self.interrupted() && !matches!(e, super::StoreError::Timeout(_))
    }

    /// Whether a signal that ends the call is pending (it stays so, for the
    /// caller to read).
    pub(super) fn interrupted(&self) -> bool {
        !self.0.enders.is_empty() && any_of(pending_signals(), self.0.enders)
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        calls().retain(|c| c.id != self.0.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// A server that accepts and never answers, and a connection to it.
    fn silent() -> (TcpListener, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conn = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (listener, conn)
    }

    #[test]
    fn a_read_without_a_timeout_ends_at_the_call_deadline() {
        let (_server, mut conn) = silent();
        let started = Instant::now();
        let call = Call::start(Duration::from_millis(300), &[]);
        let read = conn.read(&mut [0; 16]);
        assert!(call.expired());
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    /// rustls retries a read that a signal interrupted, which is why a
    /// signal could not end a TLS call; the end of file it is given here
    /// ends its handshake.
    #[test]
    fn a_tls_handshake_without_a_timeout_ends_at_the_call_deadline() {
        let (_server, conn) = silent();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let tls = rustls::ClientConnection::new(
            std::sync::Arc::new(config),
            "localhost".try_into().unwrap(),
        )
        .unwrap();
        let mut stream = rustls::StreamOwned::new(tls, conn);
        let started = Instant::now();
        let call = Call::start(Duration::from_millis(300), &[]);
        let sent = stream.write_all(b"PING\r\n").and_then(|()| stream.flush());
        assert!(call.expired());
        assert!(sent.is_err());
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn an_async_call_that_never_finishes_ends_at_its_deadline() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let started = Instant::now();
        let call = Call::start_async(Duration::from_millis(300), &[]);
        assert_eq!(rt.block_on(call.within(std::future::pending::<()>())), None);
        assert!(call.expired());
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
