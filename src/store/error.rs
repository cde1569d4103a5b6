//! The kinds of failure of a store call, which each backend turns its
//! client's errors into, and the one sentence each becomes (the
//! `distlock: ` line): it names the server, password redacted.

use std::error::Error;
use std::sync::Arc;
use std::{fmt, io};

/// What went wrong with a call to the store. Each variant is a kind callers can
/// act on; the text (`Display`) is for people only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No answer in time. The request may or may not have been carried
    /// out: for a renewal this is "unconfirmed", never "confirmed".
    Timeout(Failure),
    /// The server could not be reached or the connection broke: refused,
    /// reset, closed, no sentinel or seed node answered, no node serves
    /// the slot.
    Unreachable(Failure),
    /// The server's ACL refused; `command` names the command refused when
    /// it is known (e.g. `EVALSHA`, or `PEXPIRE` inside a script).
    Denied {
        failure: Failure,
        command: Option<String>,
    },
    /// Authentication required or refused.
    Auth(Failure),
    /// The TLS handshake failed: certificate, trust, client certificate.
    Tls(Failure),
    /// Any other error reply of the server (READONLY, OOM, LOADING, ...).
    Server(Failure),
    /// A reply distlock cannot read: not what its scripts answer.
    Protocol(Failure),
    /// A key of the lock holds a value of another type: something else
    /// wrote it, and distlock left it alone.
    WrongType(ForeignKey),
    /// The users of a name disagree on its `--limit`: `ours` is this
    /// call's, `in_use` the one in the store (≤ 1: a plain lock).
    LimitMismatch {
        name: String,
        ours: u32,
        in_use: i64,
    },
    /// Fewer replicas than `--min-replicas` acknowledged a renewal in
    /// time: it does not count as confirmed.
    Unacknowledged { acks: i64, wanted: u32 },
    /// What this store cannot do (an option etcd has no meaning for, or
    /// one not built for etcd yet): the user's to change, exit 2.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    Unsupported(String),
}

/// Where and during which request a call failed, and why, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The request ("renewal", "acquire", "INFO"); None while connecting.
    pub op: Option<String>,
    /// The URL, password redacted.
    pub server: String,
    /// Why, in one line without secrets.
    pub detail: String,
}

impl Failure {
    pub(super) fn new(op: Option<&str>, server: &str, detail: impl Into<String>) -> Failure {
        let (op, server, detail) = (op.map(str::to_owned), server.to_owned(), detail.into());
        Failure { op, server, detail }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(op) = &self.op {
            write!(f, "{op} failed: ")?;
        }
        let store = if self.server.starts_with("etcd") {
            "etcd"
        } else {
            "redis"
        };
        write!(f, "{store} at {}: {}", self.server, self.detail)
    }
}

impl StoreError {
    /// A reply that does not have the shape distlock's scripts give it.
    pub(super) fn protocol(server: &str, detail: impl Into<String>) -> StoreError {
        StoreError::Protocol(Failure::new(None, server, detail))
    }

    /// The error for a call whose `--limit` disagrees with the one in use
    /// (`in_use` ≤ 1: a plain lock).
    pub(super) fn limit_mismatch(keys: &super::LockKeys, in_use: impl Into<i64>) -> StoreError {
        StoreError::LimitMismatch {
            name: keys.name.clone(),
            ours: keys.limit.unwrap_or(1),
            in_use: in_use.into(),
        }
    }

    /// Names the request that failed, unless a name is already there
    /// (errors while connecting get the name of the request they were for
    /// only where the sentence said so before: see `Store::call_raw`).
    pub(super) fn during(mut self, op: &str) -> StoreError {
        if let StoreError::Timeout(f)
        | StoreError::Unreachable(f)
        | StoreError::Denied { failure: f, .. }
        | StoreError::Auth(f)
        | StoreError::Tls(f)
        | StoreError::Server(f)
        | StoreError::Protocol(f) = &mut self
        {
            f.op.get_or_insert_with(|| op.to_owned());
        }
        self
    }

    /// Whether this is the user's mistake rather than the store failing: the
    /// same name used with different `--limit`s. `main` exits 2 for it.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            StoreError::LimitMismatch { .. } | StoreError::Unsupported(_)
        )
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout(x)
            | StoreError::Unreachable(x)
            | StoreError::Denied { failure: x, .. }
            | StoreError::Auth(x)
            | StoreError::Tls(x)
            | StoreError::Server(x)
            | StoreError::Protocol(x) => x.fmt(f),
            StoreError::WrongType(fk) => fk.fmt(f),
            StoreError::LimitMismatch { name, ours, in_use } => {
                let theirs = if *in_use <= 1 {
                    "as a plain lock (--limit 1)".to_owned()
                } else {
                    format!("as a semaphore with --limit {in_use}")
                };
                write!(
                    f,
                    "{name} is in use {theirs}, but this call says --limit {ours}: every user of a name must agree on its limit"
                )
            }
            StoreError::Unacknowledged { acks, wanted } => write!(
                f,
                "renewal acknowledged by {acks} of --min-replicas {wanted} replicas in time: not confirmed"
            ),
            StoreError::Unsupported(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<ForeignKey> for StoreError {
    fn from(fk: ForeignKey) -> StoreError {
        StoreError::WrongType(fk)
    }
}

/// A key of a lock that holds what distlock does not write there
/// (something else wrote it). Each backend checks the keys it touches
/// before it writes anything (on Redis every script answers
/// `{-2, key, type}` instead), so such a key is never changed and the user
/// learns which key it is, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    /// The full key, e.g. `distlock:{billing}:fence`.
    pub key: String,
    /// Its type, as Redis's TYPE names it (`hash`, `list`, ...), or what
    /// else is wrong with it, in words.
    pub kind: String,
    /// The store, with its article, for the sentence: `a Redis`, `an etcd`.
    pub store: &'static str,
}

impl fmt::Display for ForeignKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the key {} is {} {} written by something else: it does not hold a distlock lease (distlock left it alone; delete it, or use another name or --prefix)",
            self.key, self.store, self.kind
        )
    }
}

/// `e` and its sources, with what an `io::Error` wraps (rustls puts its
/// error in one, and an `io::Error`'s `source()` is its inner error's
/// source, not the inner error) and what an `Arc` holds (redis-rs keeps
/// the `io::Error` of a TLS stream in one).
pub(super) fn chain<'a>(e: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
    let mut out = Vec::new();
    let mut todo = vec![e];
    while let Some(err) = todo.pop().filter(|_| out.len() < 32) {
        let err = match err.downcast_ref::<Arc<dyn Error + Send + Sync>>() {
            Some(inner) => inner.as_ref(),
            None => err,
        };
        out.push(err);
        if let Some(src) = err.source() {
            todo.push(src);
        }
        if let Some(inner) = err.downcast_ref::<io::Error>().and_then(io::Error::get_ref) {
            todo.push(inner);
        }
    }
    out
}

/// A TLS failure in plain words that name the host name and the CA
/// involved (`trust`: "the CA in FILE"), or the option to fix. etcds://
/// failures are worded here too.
pub(super) fn tls_failure(err: &rustls::Error, host: Option<&str>, trust: &str) -> String {
    use rustls::{AlertDescription, CertificateError};
    let host = host.unwrap_or("the server");
    let cert = match err {
        rustls::Error::InconsistentKeys(_) => {
            return "--tls-key is not the private key of the certificate in --tls-cert".into()
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure),
        ) => {
            return format!(
                "{host} requires a client certificate (mutual TLS): pass --tls-cert and --tls-key (the server's alert: {alert:?})"
            )
        }
        rustls::Error::AlertReceived(alert) => {
            return format!(
                "{host} ended the handshake with the alert {alert:?}: if it checks client certificates, it did not accept the one in --tls-cert"
            )
        }
        rustls::Error::InvalidCertificate(cert) => cert,
        // Bytes that are no TLS record: the port answered without TLS.
        rustls::Error::InvalidMessage(_) => {
            return "no TLS answered: this looks like a port without TLS (for a plain Redis port, use redis:// instead of rediss://)".to_owned()
        }
        other => return format!("{other} (trusting {trust})"),
    };
    let why = match cert {
        CertificateError::NotValidForNameContext { presented, .. } if !presented.is_empty() => {
            // webpki shows each name as `DnsName("x")` or `IpAddress(..)`.
            let names: Vec<String> = presented
                .iter()
                .map(|n| {
                    n.replace("DnsName(", "")
                        .replace("IpAddress(", "")
                        .replace(['"', ')'], "")
                })
                .collect();
            format!(
                "it is issued for {}, not for the host name {host:?} in the URL; connect by a name it lists",
                names.join(", ")
            )
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!("it is not valid for the host name {host:?} in the URL")
        }
        CertificateError::UnknownIssuer => format!("it is not signed by {trust}"),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "it is not valid yet (check the clocks)".to_owned()
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "it has expired".to_owned()
        }
        other => format!("{other:?} (trusting {trust})"),
    };
    format!("the certificate of {host} does not verify: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_mismatches_are_usage_errors_in_words() {
        let e = StoreError::LimitMismatch {
            name: "jobs".into(),
            ours: 3,
            in_use: 0,
        };
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "jobs is in use as a plain lock (--limit 1), but this call says --limit 3: every user of a name must agree on its limit"
        );
        let e = StoreError::LimitMismatch {
            name: "jobs".into(),
            ours: 1,
            in_use: 4,
        };
        assert!(
            e.to_string().contains("as a semaphore with --limit 4"),
            "{e}"
        );
        assert!(!StoreError::Unacknowledged { acks: 0, wanted: 1 }.is_usage());
    }
}
