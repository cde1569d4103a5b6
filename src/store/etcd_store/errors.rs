//! etcd's failures below gRPC in plain words, as the Redis ones are
//! worded. tonic and hyper name their own layers ("transport error", "h2
//! protocol error: http2 error", "invalid peer certificate:
//! UnknownIssuer", "tcp connect error"), which tell a user nothing about
//! what to fix: here the chain of sources is read for what happened
//! (refused, a certificate that does not verify, TLS on one side only,
//! something that is not etcd), by the types in it where there are some
//! (rustls's error, `io::ErrorKind`) and by hyper's fixed words where
//! there are none.

use std::error::Error;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{Failure, StoreError};
use crate::store::error::{chain, tls_failure};

/// A kind of failure.
pub(super) type Kind = fn(Failure) -> StoreError;

/// What distlock says for a failure, and its kind.
pub(super) type Said = (Kind, String);

/// What a target is, for the words.
pub(super) struct Seen<'a> {
    /// The failed call connected first: only then may the members be
    /// probed (a second, at most). A call on a connection that broke (an
    /// etcd restarting under a renewal) is told as it is, at once.
    pub probe: bool,
    /// etcds://.
    pub tls: bool,
    /// The host name certificates are checked against.
    pub host: Option<&'a str>,
    /// "the CA in FILE".
    pub trust: &'a str,
    /// `host:port` of each member, for [`speaks_tls`].
    pub addrs: &'a [String],
}

const NO_TLS: &str = "no TLS answered: this looks like a port without TLS (for a plain etcd port, use etcd:// instead of etcds://)";

const NOT_ETCD: &str = "not an etcd server: what answers at this address does not speak etcd's gRPC (check the host and port)";

const USE_ETCDS: &str = "this port speaks TLS: use etcds:// (with --tls-ca, the CA that signed the server's certificate) instead of etcd://";

const CLOSED: &str = "the connection was closed before etcd answered (if this is not etcd's client port, check the host and port)";

/// The failure `e` (a gRPC status made by the transport, or a transport
/// error) in words, or None when its chain holds nothing below gRPC (the
/// server's own status, whose message is already etcd's words).
pub(super) fn below_grpc(e: &(dyn Error + 'static), at: &Seen<'_>) -> Option<Said> {
    let errs = chain(e);
    if errs.len() < 2 {
        return None;
    }
    let said = |kind: Kind, why: &str| Some((kind, why.to_owned()));
    if let Some(r) = errs.iter().find_map(|x| x.downcast_ref::<rustls::Error>()) {
        if let rustls::Error::InvalidMessage(_) = r {
            return said(StoreError::Tls, NO_TLS);
        }
        let why = tls_failure(r, at.host, at.trust);
        return said(StoreError::Tls, &format!("TLS: {why}"));
    }
    let io = errs.iter().find_map(|x| x.downcast_ref::<io::Error>());
    let words: Vec<String> = errs.iter().map(|x| x.to_string()).collect();
    let says = |w: &str| words.iter().any(|x| x.contains(w));
    let io_text = io.map_or_else(String::new, |i| format!(": {i}"));
    if io.is_some_and(|i| i.kind() == io::ErrorKind::ConnectionRefused) {
        return said(StoreError::Unreachable, "connection refused");
    }
    if at.tls && says("tls handshake eof") {
        return said(StoreError::Tls, NO_TLS);
    }
    if says("dns error") {
        let why = format!("cannot resolve the host name{io_text}");
        return said(StoreError::Unreachable, &why);
    }
    if says("tcp connect error") {
        return said(StoreError::Unreachable, &format!("cannot connect{io_text}"));
    }
    // Connected, but the answer was no HTTP/2 (h2 read a frame of some
    // other protocol), or the peer hung up on our first bytes: a port of
    // something else, or (plain etcd://) a member that speaks only TLS.
    let garbled = says("h2 protocol error") || says("http2 error");
    let hung_up = io.is_some_and(|i| {
        use io::ErrorKind::*;
        matches!(i.kind(), BrokenPipe | ConnectionReset | UnexpectedEof)
    });
    if !garbled && !hung_up {
        return None;
    }
    if garbled && at.probe {
        return said(StoreError::Protocol, NOT_ETCD);
    }
    if at.probe && at.tls && speaks_tls(at.addrs) == Some(false) {
        // etcds:// to a port without TLS.
        return said(StoreError::Tls, NO_TLS);
    }
    if at.probe && !at.tls {
        match http_answer(at.addrs) {
            Some(false) => return said(StoreError::Protocol, NOT_ETCD),
            None if speaks_tls(at.addrs) == Some(true) => return said(StoreError::Tls, USE_ETCDS),
            _ => {}
        }
    }
    // An etcd that went away in the middle of a call reads the same:
    // still a connectivity failure, that a waiter rides out.
    said(StoreError::Unreachable, CLOSED)
}

/// All the probes of [`speaks_tls`] together.
const PROBE_WITHIN: Duration = Duration::from_secs(1);

/// Whether `addrs` answer a TLS ClientHello as a TLS server does (a
/// handshake or an alert record): Some(true) if one does, Some(false) if
/// one was reached and none did (a plain etcd, Redis or HTTP server says
/// nothing to it, or closes), None if none could be reached (an etcd
/// restarting). Only asked after a failure, within [`PROBE_WITHIN`] in
/// all, and nothing is sent after the hello.
fn speaks_tls(addrs: &[String]) -> Option<bool> {
    let until = Instant::now() + PROBE_WITHIN;
    let mut reached = false;
    for a in addrs {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let Ok(s) = connect(a, left) else { continue };
        let got = ask(s, Instant::now() + left, &CLIENT_HELLO, 1);
        if got.is_ok_and(|g| matches!(g.first(), Some(0x15 | 0x16))) {
            return Some(true);
        }
        reached = true;
    }
    reached.then_some(false)
}

/// How the first of `addrs` answers an HTTP/1 `GET /version`, which
/// every etcd serves on its client port: Some(true) as etcd, Some(false)
/// with something else, None with nothing (refused, closed: a TLS port,
/// an etcd restarting). Within [`PROBE_WITHIN`].
fn http_answer(addrs: &[String]) -> Option<bool> {
    let until = Instant::now() + PROBE_WITHIN;
    let get = b"GET /version HTTP/1.0\r\n\r\n";
    let got = connect(addrs.first()?, PROBE_WITHIN).and_then(|s| ask(s, until, get, 4096));
    let got = got.ok().filter(|g| !g.is_empty())?;
    Some(String::from_utf8_lossy(&got).contains("etcdserver"))
}

/// What the peer answers to `bytes`: up to `max` bytes, until it closes
/// or `until`, so that a server that trickles bytes cannot hold a probe.
fn ask(mut s: TcpStream, until: Instant, bytes: &[u8], max: usize) -> io::Result<Vec<u8>> {
    s.write_all(bytes)?;
    let (mut got, mut buf) = (Vec::new(), [0u8; 512]);
    while got.len() < max {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    Ok(got)
}

fn connect(addr: &str, within: Duration) -> io::Result<TcpStream> {
    let to = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    let s = TcpStream::connect_timeout(&to, within)?;
    s.set_write_timeout(Some(within))?;
    s.set_read_timeout(Some(within))?;
    Ok(s)
}

/// The smallest TLS 1.2 ClientHello: one cipher suite, no extensions. A
/// TLS server answers it with a record (a ServerHello, or an alert when
/// it wants more): either says TLS. The record and handshake headers,
/// TLS 1.2, 32 bytes of random (zeros), then: no session id, one cipher
/// suite (ECDHE-RSA-AES128-GCM-SHA256), one compression method (none).
#[rustfmt::skip]
const CLIENT_HELLO: [u8; 50] = [
    0x16, 3, 1, 0, 45, 1, 0, 0, 41, 3, 3,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 2, 0xc0, 0x2f, 1, 0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_hello_is_one_well_formed_record() {
        let record_len = usize::from(u16::from_be_bytes([CLIENT_HELLO[3], CLIENT_HELLO[4]]));
        assert_eq!(record_len + 5, CLIENT_HELLO.len());
        let body_len = usize::from(CLIENT_HELLO[8]);
        assert_eq!(body_len + 4, record_len);
        assert_eq!(
            &CLIENT_HELLO[CLIENT_HELLO.len() - 7..],
            &[0, 0, 2, 0xc0, 0x2f, 1, 0]
        );
    }

    #[test]
    fn a_certificate_that_does_not_verify_is_told_with_the_ca_and_host() {
        let e = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let wrapped = io::Error::other(e);
        let seen = Seen {
            probe: false,
            tls: true,
            host: Some("127.0.0.1"),
            trust: "the CA in ca.pem",
            addrs: &[],
        };
        let (kind, said) = below_grpc(&wrapped, &seen).unwrap();
        assert!(matches!(
            kind(Failure {
                op: None,
                server: String::new(),
                detail: String::new()
            }),
            StoreError::Tls(_)
        ));
        assert!(
            said.contains("does not verify: it is not signed by the CA in ca.pem"),
            "{said}"
        );
        assert!(!said.contains("UnknownIssuer"), "{said}");
    }
}
