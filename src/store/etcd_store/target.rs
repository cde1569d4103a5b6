//! Where etcd is: `etcd://[user[:password]@]host[:port][,host[:port]…]`
//! and `etcds://…` (TLS), default port 2379; connecting with a timeout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use etcd_client::{Certificate, Client, ConnectOptions, Error, Identity, TlsOptions};

use crate::config::{Security, UsageError};

/// etcd's client port when the URL names none.
const DEFAULT_PORT: u16 = 2379;

/// How much longer than the first member the others have to say which
/// cluster they are in (see `Target::connect_member`).
const SPLIT_GRACE: Duration = Duration::from_millis(50);

/// Where etcd is, parsed once; the password never leaves this struct.
#[derive(Clone)]
pub struct Target {
    /// The URL with any password replaced by `***`, for messages.
    pub display: String,
    /// `host:port`, one per member named.
    pub(super) addrs: Vec<String>,
    /// User and password for etcd's authentication.
    user: Option<(String, String)>,
    /// etcds://: the CA to trust (None: the system's roots are not loaded
    /// by tonic, so a CA file is required) and a client identity; and "the
    /// CA in FILE", for error sentences.
    tls: Option<(TlsOptions, String)>,
    /// Connecting refuses members of different clusters (see `connect_member`);
    /// `doctor` turns it off to report them instead.
    pub(super) one_cluster: bool,
    /// The first member that answered and its cluster id, shared by every
    /// clone (the store's and the subscription's connections): a later
    /// connection to another cluster is refused, even when the first
    /// connect's grace was too short to hear from that member.
    first_seen: Arc<Mutex<Option<(usize, u64)>>>,
    /// The member whose client failed last, shared as `first_seen` is.
    distrusted: Arc<Mutex<Option<usize>>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl Target {
    /// Parses an etcd URL and applies `sec`. Errors are usage errors and
    /// never echo a password.
    pub fn parse(url: &str, sec: &Security) -> Result<Target> {
        let display = crate::store::url::redact(url);
        let (scheme, rest) = url.split_once("://").expect("checked by the caller");
        let tls = scheme.eq_ignore_ascii_case("etcds");
        if !tls && sec.uses_tls() {
            bail!(UsageError(format!(
                "--tls-ca, --tls-cert, --tls-key and --tls-insecure need an etcds:// URL, not {display}"
            )));
        }
        if sec.tls_insecure {
            bail!(UsageError(
                "--tls-insecure is not supported with etcd: give the server's CA with --tls-ca"
                    .into()
            ));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if rest.len() > authority.len() && !matches!(&rest[authority.len()..], "/" | "") {
            bail!(UsageError(format!(
                "invalid etcd URL {display}: no path or query is allowed (etcd://host[:port][,host[:port]...])"
            )));
        }
        let (userinfo, hosts) = authority
            .rsplit_once('@')
            .map_or((None, authority), |(u, h)| (Some(u), h));
        let mut user = userinfo.map(|u| match u.split_once(':') {
            Some((name, pass)) => (decode(name), Some(decode(pass))),
            None => (decode(u), None),
        });
        if let Some(p) = &sec.password {
            match &mut user {
                Some((_, pass)) => *pass = Some(p.clone()),
                // A password from the environment may be meant for Redis
                // servers; without a user etcd has no use for it.
                None if sec.password_from_env => {}
                None => bail!(UsageError(format!(
                    "etcd authenticates a user: put the user name in the URL (etcds://USER@host), not only a password ({display})"
                ))),
            }
        }
        let user = match user {
            Some((name, _)) if name.is_empty() => bail!(UsageError(format!(
                "etcd authenticates a user: the URL {display} has a password but no user name"
            ))),
            Some((name, Some(pass))) => Some((name, pass)),
            Some((name, None)) => bail!(UsageError(format!(
                "etcd user {name} needs a password (in the URL, --redis-password-file or DISTLOCK_REDIS_PASSWORD)"
            ))),
            None => None,
        };
        let mut addrs = Vec::new();
        for h in hosts.split(',') {
            let Some((host, port)) = split_host_port(h) else {
                bail!(UsageError(format!(
                    "invalid etcd URL {display}: expected host[:port][,host[:port]...]"
                )));
            };
            addrs.push(format!("{host}:{port}"));
        }
        let tls = if tls {
            let Some(ca) = &sec.tls_ca else {
                bail!(UsageError(format!(
                    "etcds:// needs --tls-ca FILE: the CA that signed the etcd servers' certificates ({display})"
                )));
            };
            let (pem, client) = crate::store::tls_files(sec, "the etcd servers' certificates")?;
            let identity = client.map(|(cert, key)| Identity::from_pem(cert, key));
            let t =
                TlsOptions::new().ca_certificate(Certificate::from_pem(pem.unwrap_or_default()));
            let t = identity.into_iter().fold(t, TlsOptions::identity);
            Some((t, format!("the CA in {}", ca.display())))
        } else {
            None
        };
        Ok(Target {
            display,
            addrs,
            user,
            tls,
            one_cluster: true,
            first_seen: Arc::default(),
            distrusted: Arc::default(),
        })
    }

    /// What error sentences need to know of this target; `probe`: see
    /// [`super::errors::Seen`].
    pub(super) fn seen(&self, probe: bool) -> super::errors::Seen<'_> {
        // The first member's host, which certificates are checked against.
        let host = self.addrs.first().and_then(|a| a.rsplit_once(':'));
        super::errors::Seen {
            probe,
            tls: self.tls.is_some(),
            host: host.map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']')),
            trust: self.tls.as_ref().map_or("", |t| t.1.as_str()),
            addrs: &self.addrs,
        }
    }

    /// A client of the first member to answer a status request (with a
    /// user: authenticated). Not etcd-client's balanced channel over every
    /// member: that one keeps sending a share of the requests to a member
    /// that is down, each failing with "tcp connect error", so a renewal
    /// could fail with two members of three up. One member per client
    /// instead; when it fails, the store drops the client and the next
    /// call races the members again. This costs one status round trip
    /// per connection, and picks the member that answers fastest.
    ///
    /// Answering is not serving: a member cut off from the others (or
    /// with them in a minority) still answers `status` at once, from its
    /// own memory, and then times out every request that needs the
    /// leader. So the first member whose status names a leader wins; one
    /// naming none, or the member whose client failed last (see
    /// [`Target::distrust`]), is taken only if no other is heard of
    /// within half of `timeout`, leaving the call the other half.
    ///
    /// The status replies also say which cluster each member is in: a URL
    /// naming members of two clusters would split the runs between them
    /// (two holders at once), so the others' replies are awaited for as
    /// long again as the first took plus [`SPLIT_GRACE`], and a member of
    /// another cluster among them is an error. Members that are up answer
    /// within that; one that is down costs at most that, once per
    /// connection.
    ///
    /// Returns which member (its index in the URL) the client talks to.
    pub(super) async fn connect_member(&self, timeout: Duration) -> Result<(Client, usize), Error> {
        let endpoints = Vec::from_iter(self.endpoints());
        if endpoints.len() == 1 {
            return Ok((self.connect_to(&endpoints, timeout).await?, 0));
        }
        let started = tokio::time::Instant::now();
        let distrusted = *self.distrusted.lock().unwrap_or_else(|e| e.into_inner());
        let mut race = tokio::task::JoinSet::new();
        for (i, endpoint) in endpoints.into_iter().enumerate() {
            let target = self.clone();
            race.spawn(async move {
                let mut c = target.connect_to(&[endpoint], timeout).await?;
                let status = c.status().await?;
                let cluster = status.header().map(|h| h.cluster_id());
                let serves = status.leader() != 0 && status.errors().is_empty();
                Ok::<_, Error>((i, c, cluster, serves && Some(i) != distrusted))
            });
        }
        let (mut first_error, mut fallback) = (None, None);
        let settle = started + timeout / 2;
        let chosen = loop {
            let next = match fallback {
                Some(_) => tokio::time::timeout_at(settle, race.join_next()).await,
                None => Ok(race.join_next().await),
            };
            match next {
                Ok(Some(Ok(Ok((i, c, cluster, serves))))) => {
                    self.one_cluster_with(i, cluster)?;
                    if serves {
                        break (c, i);
                    }
                    fallback.get_or_insert((c, i));
                }
                Ok(Some(Ok(Err(e)))) => first_error = first_error.or(Some(e)),
                Ok(Some(Err(e))) => first_error = first_error.or(Some(internal(e))),
                Ok(None) | Err(_) => match fallback {
                    Some(answer) => break answer,
                    None => return Err(first_error.unwrap_or_else(|| internal("no endpoints"))),
                },
            }
        };
        let until = tokio::time::Instant::now() + started.elapsed() + SPLIT_GRACE;
        while let Ok(Some(answer)) = tokio::time::timeout_at(until, race.join_next()).await {
            if let Ok(Ok((i, _, cluster, _))) = answer {
                self.one_cluster_with(i, cluster)?;
            }
        }
        Ok(chosen)
    }

    /// An error if `member`'s `cluster` is not the one the first member
    /// to answer was in (see `first_seen`).
    fn one_cluster_with(&self, member: usize, cluster: Option<u64>) -> Result<(), Error> {
        let Some(cluster) = cluster.filter(|_| self.one_cluster) else {
            return Ok(());
        };
        let mut seen = self.first_seen.lock().unwrap_or_else(|e| e.into_inner());
        let first = remember(&mut seen, member, cluster);
        first.map_or(Ok(()), |(i, other)| {
            Err(self.split(i, other, member, cluster))
        })
    }

    /// How many members the URL names.
    pub fn members(&self) -> usize {
        self.addrs.len()
    }

    /// Marks `member` as the one whose client just failed (no answer in
    /// time, or a broken connection): the next connection prefers the
    /// others, even when it still answers `status` first (a lossy or
    /// overloaded member, one that was just stopped and continued).
    pub(super) fn distrust(&self, member: usize) {
        *self.distrusted.lock().unwrap_or_else(|e| e.into_inner()) = Some(member);
    }

    /// Whether `member` is the one whose client failed last.
    pub(super) fn distrusts(&self, member: usize) -> bool {
        *self.distrusted.lock().unwrap_or_else(|e| e.into_inner()) == Some(member)
    }

    /// The URL's endpoints, as `http(s)://host:port`.
    pub(super) fn endpoints(&self) -> impl Iterator<Item = String> + '_ {
        let http = if self.tls.is_some() { "https" } else { "http" };
        self.addrs.iter().map(move |a| format!("{http}://{a}"))
    }

    /// The error that refuses a URL whose members `a` and `b` are in
    /// different clusters.
    fn split(&self, a: usize, a_id: u64, b: usize, b_id: u64) -> Error {
        let addr = |i: usize| self.addrs.get(i).map_or("", String::as_str);
        let (a, b) = (addr(a), addr(b));
        Error::GRpcStatus(tonic::Status::failed_precondition(format!(
            "{a} is a member of etcd cluster {a_id:x} but {b} of cluster {b_id:x}: the URL must name members of one cluster, or runs split between them (two holders at once)"
        )))
    }

    /// A client of `endpoints` only (one member, for `doctor`), with this
    /// target's user and TLS settings.
    pub(super) async fn connect_to<E: AsRef<str>>(
        &self,
        endpoints: &[E],
        timeout: Duration,
    ) -> Result<Client, Error> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        if let Some((name, pass)) = &self.user {
            opts = opts.with_user(name.clone(), pass.clone());
        }
        if let Some((tls, _)) = &self.tls {
            opts = opts.with_tls(tls.clone());
        }
        Client::connect(endpoints, Some(opts)).await
    }
}

/// An error of etcd-client's own kind, from a text.
fn internal(e: impl ToString) -> Error {
    Error::Internal(e.to_string())
}

/// Remembers the first (member, cluster id) answered; a later answer from
/// another cluster gets that first one back.
fn remember(seen: &mut Option<(usize, u64)>, member: usize, cluster: u64) -> Option<(usize, u64)> {
    match *seen.get_or_insert((member, cluster)) {
        (_, id) if id == cluster => None,
        first => Some(first),
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; None if malformed.
fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{h}]"), port)
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (s.to_owned(), None),
        }
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || ".-_[]:".contains(c);
    if host.is_empty() || host == "[]" || !host.chars().all(valid) {
        return None;
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse().ok().filter(|&p| p > 0)?,
    };
    Some((host, port))
}

/// `%XX` escapes undone (user names and passwords in URLs); the text as
/// it is when there are none or the result is not UTF-8.
fn decode(s: &str) -> String {
    crate::store::url::percent_decoded(s).unwrap_or_else(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec() -> Security {
        Security::new(Default::default(), None).unwrap()
    }

    #[test]
    fn hosts_ports_and_users() {
        let t = Target::parse("etcd://a,b:2380,[::1]:1", &sec()).unwrap();
        assert_eq!(
            t.endpoints().collect::<Vec<_>>(),
            ["http://a:2379", "http://b:2380", "http://[::1]:1"]
        );
        let t = Target::parse("etcd://me:s%40cret@h", &sec()).unwrap();
        assert_eq!(t.user, Some(("me".into(), "s@cret".into())));
        assert!(!t.display.contains("cret"));
        assert!(!format!("{t:?}").contains("cret"));
    }

    #[test]
    fn a_later_connection_to_another_cluster_than_the_first_is_refused() {
        let mut seen = None;
        assert_eq!(remember(&mut seen, 0, 0xa), None);
        assert_eq!(remember(&mut seen, 1, 0xa), None);
        assert_eq!(remember(&mut seen, 2, 0xb), Some((0, 0xa)));
        assert_eq!(remember(&mut seen, 0, 0xa), None);
    }

    #[test]
    fn malformed_urls_are_usage_errors() {
        for url in [
            "etcd://",
            "etcd://h:0",
            "etcd://h:x",
            "etcd://h/db",
            "etcd://a,,b",
            "etcd://:pw@h",
        ] {
            let e = Target::parse(url, &sec()).unwrap_err();
            assert!(e.is::<UsageError>(), "{url}: {e:#}");
        }
    }
}
