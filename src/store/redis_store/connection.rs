//! Where Redis is and how to reach it: URLs (plain, TLS, Unix socket,
//! Sentinel, Cluster), passwords and TLS files, connecting with timeouts.
//! What a failed connection means is told by `error.rs`.

use std::time::Duration;

use anyhow::{bail, Result};
use redis::{Connection, IntoConnectionInfo, Value};

use super::replies::{int, string};
use crate::config::{Security, UsageError};
use crate::store::url::redact;

/// Where Redis is, parsed once; the password never leaves this struct.
#[derive(Clone)]
pub struct Target {
    pub(super) client: redis::Client,
    /// With `redis+sentinel://`: where to ask for the current master.
    pub(super) sentinel: Option<Sentinel>,
    /// With `redis+cluster://`: seed nodes to learn the slot map from.
    pub(super) cluster: Option<Cluster>,
    /// The same target without the password from DISTLOCK_REDIS_PASSWORD,
    /// for a server that has none configured (see `Store::conn`).
    pub(super) without_env_password: Option<redis::Client>,
    /// The URL with any password replaced by `***`, for messages.
    pub display: String,
    /// Host name the TLS certificate must match (for messages).
    pub(super) tls_host: Option<String>,
    /// Where trust comes from (for messages): a CA file or the system's.
    pub(super) tls_trust: String,
}

impl Target {
    /// Whether the URL names Sentinels (`redis+sentinel://`), which name
    /// another master when one fails.
    pub fn asks_sentinels(&self) -> bool {
        self.sentinel.is_some()
    }

    /// Parses a Redis URL and applies `sec`. Errors are usage errors and
    /// never echo a password.
    pub fn parse(url: &str, sec: &Security) -> Result<Target> {
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            return Target::multi_host(url, rest, sec, true);
        }
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            return Target::multi_host(url, rest, sec, false);
        }
        let Some((scheme, _)) = url.split_once("://") else {
            // Without a scheme we cannot tell which part might be a
            // password, so the value is not echoed.
            bail!(UsageError(
                "invalid redis URL: it must start with redis://, rediss://, redis+unix:// or unix://"
                    .into()
            ));
        };
        let display = redact(url);
        let tls = match scheme {
            "redis" | "redis+unix" | "unix" => false,
            "rediss" => true,
            _ => bail!(UsageError(format!(
                "invalid redis URL {display}: use redis://host:port, rediss://host:port, redis+unix:///path or unix:///path"
            ))),
        };
        if !tls && sec.uses_tls() {
            bail!(UsageError(format!(
                "--tls-ca, --tls-cert, --tls-key and --tls-insecure need a rediss:// URL, not {display}"
            )));
        }
        let mut info = url.into_connection_info().map_err(|_| {
            UsageError(format!(
                "invalid redis URL {display}: expected redis://[user[:password]@]host[:port][/db]"
            ))
        })?;
        let mut tls_host = None;
        if let redis::ConnectionAddr::TcpTls { host, port, .. } = info.addr().clone() {
            tls_host = Some(host.clone());
            if sec.tls_insecure {
                info = info.set_addr(redis::ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: true,
                    tls_params: None,
                });
            }
        }
        // The handshake then is AUTH/SELECT at most: no CLIENT SETINFO round
        // trip on every start.
        let redis = info.redis_settings().clone().set_skip_set_lib_name();
        info = info.set_redis_settings(as_the_user(redis.clone()));
        let mut plain_info = None;
        if let Some(p) = &sec.password {
            if sec.password_from_env && redis.password().is_none() {
                plain_info = Some(info.clone());
            }
            info = info.set_redis_settings(redis.set_password(p));
        }
        let build = |info: redis::ConnectionInfo| -> Result<redis::Client> {
            if !tls {
                return redis::Client::open(info)
                    .map_err(|_| UsageError(format!("invalid redis URL {display}")).into());
            }
            // rustls needs a process-wide crypto provider; distlock builds
            // with ring only. Installing twice is harmless (the second call
            // reports an error we ignore).
            let _ = rustls::crypto::ring::default_provider().install_default();
            let (root_cert, client) = crate::store::tls_files(sec, "the server's certificate")?;
            let client_tls = match client {
                Some((client_cert, client_key)) => {
                    check_client_cert(&client_cert, &client_key, sec)?;
                    Some(redis::ClientTlsConfig {
                        client_cert,
                        client_key,
                    })
                }
                _ => None,
            };
            if root_cert.is_none() && client_tls.is_none() {
                redis::Client::open(info)
            } else {
                redis::Client::build_with_tls(
                    info,
                    redis::TlsCertificates {
                        client_tls,
                        root_cert,
                    },
                )
            }
            .map_err(|e| {
                let why = e.to_string().replace('\n', " ");
                UsageError(format!("invalid TLS files for {display}: {why}")).into()
            })
        };
        let client = build(info)?;
        let without_env_password = plain_info.map(build).transpose()?;
        Ok(Target {
            client,
            sentinel: None,
            cluster: None,
            without_env_password,
            display,
            tls_host,
            tls_trust: match &sec.tls_ca {
                Some(p) => format!("the CA in {}", p.display()),
                None => "the system's trusted CAs".into(),
            },
        })
    }
}

/// Settings that authenticate as the URL's user even without a password.
/// redis-rs sends AUTH only with a password, so `redis://alice@host` would
/// run as `default` (or fail where `default` is off); an ACL `nopass` user
/// takes any password, and a user that needs one refuses an empty one, as
/// it should.
fn as_the_user(redis: redis::RedisConnectionInfo) -> redis::RedisConnectionInfo {
    if redis.username().is_some() && redis.password().is_none() {
        redis.set_password("")
    } else {
        redis
    }
}

/// Parses `host[:port],host[:port]…`; a missing port is `default_port`, or
/// an error when there is none.
fn parse_hosts(hosts: &str, default_port: Option<u16>) -> Result<Vec<(String, u16)>, &'static str> {
    let mut out = Vec::new();
    for h in hosts.split(',').filter(|h| !h.is_empty()) {
        let (host, port) = match (h.rsplit_once(':'), default_port) {
            (Some((host, port)), _) => (host, port.parse().map_err(|_| "bad port")?),
            (None, Some(port)) => (h, port),
            (None, None) => return Err("a node without a port"),
        };
        out.push((host.trim_matches(['[', ']']).to_owned(), port));
    }
    Ok(out)
}

/// The data nodes' credentials: user and password from the URL, the
/// password overridden by --redis-password-file or DISTLOCK_REDIS_PASSWORD.
fn credentials(auth: Option<&str>, sec: &Security) -> redis::RedisConnectionInfo {
    let mut redis = redis::RedisConnectionInfo::default().set_skip_set_lib_name();
    if let Some(auth) = auth {
        let (user, pass) = auth.split_once(':').unwrap_or((auth, ""));
        if !user.is_empty() {
            redis = redis.set_username(user);
        }
        if !pass.is_empty() {
            redis = redis.set_password(pass);
        }
    }
    if let Some(p) = &sec.password {
        redis = redis.set_password(p);
    }
    as_the_user(redis)
}

/// A Redis Sentinel set and the master it watches.
#[derive(Clone, Debug)]
pub(super) struct Sentinel {
    /// Sentinel addresses, asked in order until one answers.
    nodes: Vec<(String, u16)>,
    /// The master's name as the sentinels know it.
    master: String,
    /// How to talk to the master once found (user, password, db).
    redis: redis::RedisConnectionInfo,
}

/// A node of a Sentinel or Cluster deployment, with these credentials.
fn tcp_info(host: &str, port: u16, redis: &redis::RedisConnectionInfo) -> redis::ConnectionInfo {
    redis::ConnectionAddr::Tcp(host.to_owned(), port)
        .into_connection_info()
        .expect("a TCP address is always a valid connection info")
        .set_redis_settings(redis.clone())
}

/// A connection whose connect, and every read and write after it, gives
/// up after `timeout`.
fn open(info: redis::ConnectionInfo, timeout: Duration) -> redis::RedisResult<Connection> {
    let c = redis::Client::open(info)?.get_connection_with_timeout(timeout)?;
    c.set_read_timeout(Some(timeout))?;
    c.set_write_timeout(Some(timeout))?;
    Ok(c)
}

fn io_error(why: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, why))
}

/// `ask` of each node in turn: the first answer, else the last error
/// (`none` when there is no node).
fn first_answer<T>(
    nodes: &[(String, u16)],
    none: &'static str,
    mut ask: impl FnMut(&str, u16) -> redis::RedisResult<T>,
) -> redis::RedisResult<T> {
    let mut last = io_error(none);
    for (host, port) in nodes {
        match ask(host, *port) {
            Ok(answer) => return Ok(answer),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl Sentinel {
    /// Asks the sentinels, in order, where the master is, then connects to
    /// it and checks that it is a master (a sentinel can be behind a
    /// failover). Every step is bounded by `timeout`: redis-rs's own
    /// sentinel code connects without timeouts.
    fn connect(&self, timeout: Duration) -> redis::RedisResult<Connection> {
        let asking = redis::RedisConnectionInfo::default().set_skip_set_lib_name();
        let ask = |host: &str, port: u16| -> redis::RedisResult<Connection> {
            let (mhost, mport) = open(tcp_info(host, port, &asking), timeout)
                .and_then(|mut c| {
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(&self.master)
                        .query::<Option<(String, u16)>>(&mut c)
                })?
                .ok_or_else(|| io_error("sentinel knows no master by that name"))?;
            // A master that cannot be reached or is no longer one means
            // this sentinel is behind: ask the next.
            let mut conn = open(tcp_info(&mhost, mport, &self.redis), timeout)?;
            let role: Vec<Value> = redis::cmd("ROLE").query(&mut conn)?;
            match role.first() {
                Some(Value::BulkString(b)) if b == b"master" => Ok(conn),
                _ => Err(io_error(
                    "the sentinels' master is not a master (failover in progress)",
                )),
            }
        };
        first_answer(&self.nodes, "no sentinel answered", ask)
    }
}

/// A Redis Cluster, reached through seed nodes. distlock routes each lock
/// to the master that owns the slot of its `{NAME}` hash tag, with a plain
/// connection and its own timeouts (redis-rs's sync cluster client has no
/// response timeout by default), and relearns the slot map after any error
/// (MOVED after a resharding or failover included).
#[derive(Clone, Debug)]
pub(super) struct Cluster {
    /// Seed nodes, asked in order for the slot map.
    seeds: Vec<(String, u16)>,
    /// User, password (and no db: Cluster has only db 0).
    redis: redis::RedisConnectionInfo,
}

/// One range of the slot map: slots `start..=end` live on `host:port`.
pub(super) type SlotRange = (u16, u16, String, u16);

impl Cluster {
    /// The slot map (masters only), from the first seed that answers.
    pub(super) fn slot_map(&self, timeout: Duration) -> redis::RedisResult<Vec<SlotRange>> {
        first_answer(&self.seeds, "no seed node answered", |seed, port| {
            let mut c = open(tcp_info(seed, port, &self.redis), timeout)?;
            let ranges: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c)?;
            Ok(ranges.iter().filter_map(|r| slot_range(r, seed)).collect())
        })
    }
}

/// One range of a CLUSTER SLOTS reply, on the node `seed` when its host
/// is empty ("the node you asked"); None for one that cannot be read.
fn slot_range(r: &Value, seed: &str) -> Option<SlotRange> {
    let Value::Array(r) = r else { return None };
    let [start, end, Value::Array(master), ..] = r.as_slice() else {
        return None;
    };
    let host = master.first().and_then(|h| string(h).ok().flatten());
    let port = master.get(1).and_then(|p| int(p).ok()).unwrap_or(0);
    let host = host
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| seed.to_owned());
    let (start, end) = (int(start).ok()? as u16, int(end).ok()? as u16);
    Some((start, end, host, port as u16))
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, the
/// part between the first `{` and the next `}` when not empty, mod 16384.
pub(super) fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}').map(|len| (open + 1, len)))
        .filter(|&(_, len)| len > 0)
        .map_or(bytes, |(start, len)| &bytes[start..start + len]);
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = (crc << 1) ^ if crc & 0x8000 != 0 { 0x1021 } else { 0 };
        }
    }
    crc % 16384
}

impl Target {
    /// `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db]`,
    /// as other Redis clients spell it (sentinel ports default to 26379;
    /// the credentials and db are the master's), or, without `sentinels`,
    /// `redis+cluster://[[user]:password@]host:port[,host:port…]`.
    fn multi_host(url: &str, rest: &str, sec: &Security, sentinels: bool) -> Result<Target> {
        let display = redact(url);
        let (kind, form, tls) = if sentinels {
            let form = "redis+sentinel://host:26379,host:26379/mastername[/db]";
            ("sentinel", form, "sentinels")
        } else {
            (
                "cluster",
                "redis+cluster://host:port,host:port",
                "Redis Cluster",
            )
        };
        let bad = |why: &str| -> anyhow::Error {
            UsageError(format!(
                "invalid {kind} URL {display}: {why} (expected {form})"
            ))
            .into()
        };
        if sec.uses_tls() {
            return Err(bad(&format!("TLS with {tls} is not supported")));
        }
        // `[[user]:password@]` ends at the last `@`: a password may hold one.
        let (auth, rest) = rest
            .rsplit_once('@')
            .map_or((None, rest), |(a, r)| (Some(a), r));
        let redis = credentials(auth, sec);
        let (mut sentinel, mut cluster) = (None, None);
        let first = if sentinels {
            let (hosts, path) = rest.split_once('/').ok_or_else(|| bad("no master name"))?;
            let mut parts = path.split('/');
            let master = parts
                .next()
                .filter(|m| !m.is_empty())
                .ok_or_else(|| bad("no master name"))?;
            let db: i64 = match parts.next().filter(|d| !d.is_empty()) {
                Some(d) => d.parse().map_err(|_| bad("the db is not a number"))?,
                None => 0,
            };
            let nodes = parse_hosts(hosts, Some(26379)).map_err(&bad)?;
            if nodes.is_empty() {
                return Err(bad("no sentinel address"));
            }
            let redis = redis.set_db(db);
            // A placeholder: every connection asks the sentinels first.
            let first = tcp_info("127.0.0.1", 6379, &redis);
            let master = master.to_owned();
            sentinel = Some(Sentinel {
                nodes,
                master,
                redis,
            });
            first
        } else {
            let seeds = parse_hosts(rest.trim_end_matches('/'), None).map_err(&bad)?;
            let Some((h, p)) = seeds.first() else {
                return Err(bad("no seed node"));
            };
            let first = tcp_info(h, *p, &redis);
            cluster = Some(Cluster { seeds, redis });
            first
        };
        let client = redis::Client::open(first).map_err(|_| bad("unusable"))?;
        Ok(Target {
            client,
            sentinel,
            cluster,
            without_env_password: None,
            display,
            tls_host: None,
            tls_trust: String::new(),
        })
    }

    /// A connection to another node of the same deployment (a replica its
    /// master lists), with the URL's credentials and, for `rediss://`, its
    /// TLS settings.
    pub(super) fn connect_peer(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> redis::RedisResult<Connection> {
        // Sentinel and Cluster clients are made by `tcp_info` with the
        // data nodes' credentials: the same as theirs, at another address.
        let base = self.client.get_connection_info().clone();
        let addr = match base.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host.to_owned(), port),
        };
        open(base.set_addr(addr), timeout)
    }

    /// A new connection: through the sentinels when there are some, else
    /// directly (with the DISTLOCK_REDIS_PASSWORD fallback of `Store::conn`).
    pub(super) fn connect(
        &mut self,
        timeout: Duration,
        node: Option<&(String, u16)>,
    ) -> redis::RedisResult<Connection> {
        if let Some(s) = &self.sentinel {
            return s.connect(timeout);
        }
        if let Some(c) = &self.cluster {
            let (host, port) = node.unwrap_or(&c.seeds[0]);
            return open(tcp_info(host, *port, &c.redis), timeout);
        }
        match self.client.get_connection_with_timeout(timeout) {
            // DISTLOCK_REDIS_PASSWORD is an ambient setting, and a
            // server with no password at all refuses AUTH rather than
            // ignoring it (redis-rs reports both refusals alike). Try
            // once without it: a server that does want a password then
            // answers the first command with NOAUTH, exit 125 still.
            Err(e) if e.kind() == redis::ErrorKind::AuthenticationFailed => {
                let Some(plain) = self.without_env_password.take() else {
                    return Err(e);
                };
                self.client = plain;
                self.client.get_connection_with_timeout(timeout)
            }
            other => other,
        }
    }
}

/// Checks the client certificate and key the way rustls will use them, so
/// that a problem is told as what it is, before any connection: redis-rs
/// builds the rustls configuration only when it connects, and then turns
/// rustls's error into text ("invalid peer certificate: ..."), which reads
/// as if the *server's* certificate were at fault. Files that do not even
/// parse as PEM are left to redis-rs ("invalid TLS files").
fn check_client_cert(cert: &[u8], key: &[u8], sec: &Security) -> Result<()> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let cert_path = sec
        .tls_cert
        .as_deref()
        .map_or(String::new(), |p| format!(" {}", p.display()));
    let (Ok(chain), Ok(key)) = (
        CertificateDer::pem_slice_iter(cert).collect::<Result<Vec<_>, _>>(),
        PrivateKeyDer::from_pem_slice(key),
    ) else {
        return Ok(());
    };
    let Some(leaf) = chain.first().cloned() else {
        bail!(UsageError(format!(
            "--tls-cert{cert_path} holds no certificate"
        )));
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let built = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(rustls::RootCertStore::empty())
                .with_client_auth_cert(chain, key)
        });
    let Ok(Err(e)) = built else { return Ok(()) };
    let why = match e {
        rustls::Error::InconsistentKeys(_) => {
            "--tls-key is not the private key of the certificate in --tls-cert".to_owned()
        }
        // webpki reads only X.509 v3, and says so as an "other" error.
        rustls::Error::InvalidCertificate(_) if x509_version(&leaf) == Some(1) => format!(
            "the client certificate in --tls-cert{cert_path} is X.509 v1, which distlock's TLS library (rustls) cannot use, even where the server would accept it; make a v3 one, e.g. openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -days 365 -out client.pem -extfile <(printf 'basicConstraints=CA:FALSE\\nkeyUsage=digitalSignature\\nextendedKeyUsage=clientAuth')"
        ),
        e => format!("the client certificate in --tls-cert{cert_path} cannot be used: {e}"),
    };
    bail!(UsageError(why))
}

/// The version (1, 2 or 3) of a DER X.509 certificate, or None when it
/// cannot be read. `Certificate ::= SEQUENCE { tbsCertificate SEQUENCE {
/// [0] EXPLICIT version DEFAULT v1, serialNumber INTEGER, ... } ... }`:
/// a certificate without the `[0]` field is v1.
fn x509_version(der: &[u8]) -> Option<u8> {
    /// One DER tag-length-value: (tag, contents).
    fn tlv(b: &[u8]) -> Option<(u8, &[u8])> {
        let tag = *b.first()?;
        let first = usize::from(*b.get(1)?);
        let (len, start) = if first < 0x80 {
            (first, 2)
        } else {
            // Long form: the length in the next 1 to 4 bytes, big-endian.
            let n = first & 0x7f;
            let bytes = b.get(2..2 + n).filter(|_| (1..=4).contains(&n))?;
            let len = bytes.iter().fold(0, |len, &x| (len << 8) | usize::from(x));
            (len, 2 + n)
        };
        Some((tag, b.get(start..start.checked_add(len)?)?))
    }
    let (0x30, cert) = tlv(der)? else { return None };
    let (0x30, tbs) = tlv(cert)? else { return None };
    if *tbs.first()? != 0xa0 {
        return Some(1);
    }
    let (_, explicit) = tlv(tbs)?;
    let (0x02, version) = tlv(explicit)? else {
        return None;
    };
    version.last()?.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_slots_follow_the_hash_tag() {
        // Values from the Redis Cluster specification.
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(
            key_slot("distlock:{deploy}:fence"),
            key_slot("distlock:{deploy}")
        );
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_ne!(key_slot("foo{}{bar}"), key_slot("bar"));
    }

    #[test]
    fn x509_versions_are_read_from_the_der() {
        // SEQUENCE { SEQUENCE { INTEGER 1 (the serial) } }: no [0], so v1.
        assert_eq!(
            x509_version(&[0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x01]),
            Some(1)
        );
        // SEQUENCE { SEQUENCE { [0] { INTEGER 2 } } }: v3.
        assert_eq!(
            x509_version(&[0x30, 0x07, 0x30, 0x05, 0xa0, 0x03, 0x02, 0x01, 0x02]),
            Some(3)
        );
        // Long-form lengths.
        assert_eq!(
            x509_version(&[0x30, 0x81, 0x07, 0x30, 0x05, 0xa0, 0x03, 0x02, 0x01, 0x02]),
            Some(3)
        );
        assert_eq!(x509_version(&[0x30, 0x09, 0x30]), None);
        assert_eq!(x509_version(b"not der"), None);
    }

    #[test]
    fn a_url_user_without_a_password_still_authenticates_as_that_user() {
        let auth = |r: &redis::RedisConnectionInfo| {
            (
                r.username().map(str::to_owned),
                r.password().map(str::to_owned),
            )
        };
        let user = |p: Option<&str>| (Some("alice".to_owned()), p.map(str::to_owned));
        let plain = Security::default();
        let env = Security {
            password: Some("envpw".into()),
            password_from_env: true,
            ..Security::default()
        };
        for (url, sec, want) in [
            ("redis://alice@h:1", &plain, user(Some(""))),
            ("unix:///s.sock?user=alice", &plain, user(Some(""))),
            ("redis://alice:pw@h:1", &plain, user(Some("pw"))),
            ("redis://alice@h:1", &env, user(Some("envpw"))),
            ("redis://h:1", &plain, (None, None)),
        ] {
            let t = Target::parse(url, sec).unwrap();
            let got = auth(t.client.get_connection_info().redis_settings());
            assert_eq!(got, want, "{url}");
        }
        // The fallback without DISTLOCK_REDIS_PASSWORD keeps the user.
        let t = Target::parse("redis://alice@h:1", &env).unwrap();
        let fallback = t.without_env_password.expect("a fallback");
        assert_eq!(
            auth(fallback.get_connection_info().redis_settings()),
            user(Some(""))
        );
        // Sentinel and Cluster URLs split the user off themselves.
        for (url, want) in [
            ("redis+sentinel://alice@h:26379/m", user(Some(""))),
            ("redis+sentinel://alice:pw@h:26379/m", user(Some("pw"))),
            ("redis+sentinel://:pw@h:26379/m", (None, Some("pw".into()))),
            ("redis+sentinel://h:26379/m", (None, None)),
        ] {
            let t = Target::parse(url, &plain).unwrap();
            assert_eq!(auth(&t.sentinel.unwrap().redis), want, "{url}");
        }
        for (url, want) in [
            ("redis+cluster://alice@h:1,h:2", user(Some(""))),
            ("redis+cluster://alice:pw@h:1", user(Some("pw"))),
            ("redis+cluster://h:1", (None, None)),
        ] {
            let t = Target::parse(url, &plain).unwrap();
            assert_eq!(auth(&t.cluster.unwrap().redis), want, "{url}");
        }
    }

    #[test]
    fn bad_urls_are_usage_errors_without_the_password() {
        for bad in [
            "http://u:hunter2@h",
            "redis//x",
            "hunter2",
            "redis://u:hunter2@[::",
        ] {
            let e = Target::parse(bad, &Security::default()).err().unwrap();
            assert!(e.is::<UsageError>(), "{bad}: {e:#}");
            assert!(!format!("{e:#}").contains("hunter2"), "{e:#}");
        }
        assert!(Target::parse("redis://127.0.0.1:6379/2", &Security::default()).is_ok());
        assert!(Target::parse("unix:///tmp/r.sock", &Security::default()).is_ok());
        assert!(Target::parse("redis+unix:///tmp/r.sock?db=3", &Security::default()).is_ok());
    }
}
