//! How a failed Redis call becomes a [`StoreError`] (`store/error.rs`):
//! the kind, and one plain sentence. Nothing outside the store looks at
//! redis-rs errors or at the wording of these sentences.

use super::connection::Target;
use super::scripts::script_commands;
use super::{Failure, StoreError};
use crate::store::error::{chain, tls_failure};

/// Turns a redis-rs error into a [`StoreError`] of the right kind, with one
/// plain sentence that names the server (password redacted) but never the
/// password itself. TLS and ACL failures are recognised by what they are
/// (the rustls error inside, the server's NOPERM code), not by their
/// wording, so the same sentence comes out whichever server (Redis,
/// Valkey) or library version answers. This is the one place where redis-rs
/// errors are looked at; everything outside the store sees only the kind.
pub(super) fn describe(e: redis::RedisError, target: &Target) -> StoreError {
    let at = |detail: String| Failure::new(None, &target.display, detail);
    // The rustls error behind it, if any (see `chain`).
    let errs = chain(&e);
    if let Some(r) = errs.iter().find_map(|x| x.downcast_ref::<rustls::Error>()) {
        let why = tls_failure(r, target.tls_host.as_deref(), &target.tls_trust);
        return StoreError::Tls(at(format!("TLS: {why}")));
    }
    if let Some((why, command)) = acl_refusal(&e) {
        return StoreError::Denied {
            failure: at(why),
            command,
        };
    }
    if e.is_timeout() {
        return StoreError::Timeout(at(timed_out("timed out", target)));
    }
    if e.is_connection_refusal() {
        return StoreError::Unreachable(at("connection refused".to_owned()));
    }
    // NOAUTH is the code; "unauthenticated" is how some servers word the
    // same refusal of HELLO/AUTH-less commands in the error text.
    if e.code() == Some("NOAUTH") || e.to_string().contains("unauthenticated") {
        return StoreError::Auth(at(
            "authentication required: the server refused the password, or got none".to_owned(),
        ));
    }
    if matches!(e.kind(), redis::ErrorKind::AuthenticationFailed) {
        return StoreError::Auth(at(format!(
            "authentication failed ({})",
            e.detail().unwrap_or("refused")
        )));
    }
    if matches!(e.kind(), redis::ErrorKind::InvalidClientConfig) && target.tls_host.is_some() {
        // rustls refused the TLS settings themselves (`Target::parse` checks
        // the client certificate first, so this is a last resort).
        return StoreError::Tls(at(format!(
            "TLS: the TLS files cannot be used ({})",
            e.detail().unwrap_or("refused")
        )));
    }
    if let Some(errors) = e.clone().into_server_errors() {
        if let Some((_, first)) = errors.first() {
            let said = server_said(first.code(), first.details().unwrap_or(""));
            return StoreError::Server(at(said));
        }
    }
    if matches!(e.kind(), redis::ErrorKind::Parse) {
        // The reply parser met bytes that no Redis sends (an HTTP or SSH
        // server's first line): the conversions of well-formed replies
        // are checked elsewhere (`Store::parse`).
        return StoreError::Protocol(at(
            "not a Redis server: what answers at this address does not speak the Redis protocol (check the host and port)".to_owned(),
        ));
    }
    let text = plain_words(&e);
    match e.kind() {
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension => StoreError::Server(at(text)),
        redis::ErrorKind::UnexpectedReturnType => StoreError::Protocol(at(text)),
        // I/O (reset, closed, DNS) and the client's own sentinel and
        // cluster errors: the server could not be reached.
        _ => StoreError::Unreachable(at(text)),
    }
}

/// A redis-rs error of its own (not a server's reply) in words: redis-rs
/// writes its kind after the words (`no sentinel answered - Io`, `refused
/// to switch database - Server(ResponseError): DB index is out of range`),
/// which says nothing to a user. It never holds the password; the server's
/// words in it are kept, on one line.
fn plain_words(e: &redis::RedisError) -> String {
    let text = e.to_string().replace(['\n', '\r'], " ");
    let kind = format!(" - {:?}", e.kind());
    let text = text.replacen(&kind, "", 1);
    // "Redis server refused …" reads better after "redis at URL: ".
    match text.strip_prefix("Redis server ") {
        Some(rest) => format!("the server {rest}"),
        None => text,
    }
}

/// A server's error reply (`code`, the words after it) in a plain
/// sentence. Known codes get words of distlock's, with what to do; any
/// other reply keeps the server's words, without the hash and line of the
/// script that got it, which only name distlock's internals.
fn server_said(code: &str, detail: &str) -> String {
    let (code, detail) = inner_reply(code, detail);
    let words = detail
        .rsplit_once(" script: ")
        .map_or(detail, |(w, _)| w)
        .trim()
        .trim_end_matches('.');
    match code {
        "READONLY" => "the server is a read-only replica: point the URL at the master, or use redis+sentinel:// to follow failovers".to_owned(),
        "OOM" => "the server is out of memory (used memory is above maxmemory): free memory or raise maxmemory; keep maxmemory-policy noeviction, since an evicting policy can drop leases".to_owned(),
        "LOADING" => "the server is still loading its data into memory: try again when it is done".to_owned(),
        "MASTERDOWN" => "the replica has lost its master and serves no data: point the URL at the master".to_owned(),
        "MISCONF" => "the server refuses writes because it cannot save to disk (see the server's log)".to_owned(),
        "NOREPLICAS" => "the server refuses writes: fewer replicas are in sync than its min-replicas-to-write".to_owned(),
        "BUSY" => "the server is busy running a long script or function".to_owned(),
        "CLUSTERDOWN" => "the cluster is down: not every slot is served".to_owned(),
        "TRYAGAIN" | "MOVED" | "ASK" => "the cluster is moving this lock's slot to another node: try again".to_owned(),
        _ if words.is_empty() => "the server refused the request".to_owned(),
        _ => format!("the server refused the request: {words}"),
    }
}

/// The reply a script got, where a server wraps it (Redis 6: `ERR Error
/// running script (call to f_SHA): @user_script:LINE: -READONLY You
/// can't write …`): its code and words, else the reply as it came.
fn inner_reply<'a>(code: &'a str, detail: &'a str) -> (&'a str, &'a str) {
    if code == "ERR" {
        if let Some((_, inner)) = detail.split_once(": -") {
            let (inner_code, words) = inner.split_once(' ').unwrap_or((inner, ""));
            if !inner_code.is_empty() && inner_code.chars().all(|c| c.is_ascii_uppercase()) {
                return (inner_code, words);
            }
        }
    }
    (code, detail)
}

/// `why` a call failed for lack of a (complete) reply; over TLS with what
/// that may mean: Redis waits for the end of a line that a TLS ClientHello
/// may never contain, so rediss:// to a plain port is silence, like a slow
/// server.
pub(super) fn timed_out(why: &str, target: &Target) -> String {
    if target.tls_host.is_some() {
        format!("{why} (no reply over TLS: if this port is a plain Redis port without TLS, use redis:// instead of rediss://)")
    } else {
        why.to_owned()
    }
}

/// A refusal by the server's ACL, naming what was refused, from the
/// server errors in `e` (a pipeline carries one per failed command).
fn acl_refusal(e: &redis::RedisError) -> Option<(String, Option<String>)> {
    let errors = e.clone().into_server_errors()?;
    errors
        .iter()
        .find_map(|(_, se)| acl_refusal_of(se.code(), se.details().unwrap_or("")))
}

/// An ACL refusal from a server error's code and detail text: the
/// sentence, and the command refused when it is known. A command
/// distlock sends itself is refused with the code NOPERM. Inside a script
/// the code is ERR, the text says "ACL failure in script" (Redis 7.2+,
/// Valkey) or "The user executing the script" (Redis 7.0), and the server
/// names only the script's SHA1 and line: the command is looked up on that
/// line of distlock's own scripts, so every server gets the same sentence.
fn acl_refusal_of(code: &str, detail: &str) -> Option<(String, Option<String>)> {
    const HINT: &str = "grant it (see docs/security.md's ACL SETUSER line)";
    let between = |s: &str, from: &str, to: &str| -> Option<String> {
        let rest = s.split(from).nth(1)?;
        Some(rest.split(to).next()?.to_owned())
    };
    let in_script = detail.starts_with("ACL failure in script")
        || detail.starts_with("The user executing the script");
    if code != "NOPERM" && !in_script {
        return None;
    }
    // `run the 'x' command` in every server's words for a refused command.
    let named = between(detail, "run the '", "'").map(|c| c.to_uppercase());
    // The server's own words, then (last) where in which script:
    // `... script: SHA1, on @user_script:LINE.`
    let (words, location) = detail.rsplit_once(" script: ").unwrap_or((detail, ""));
    let denied_keys = named.is_none() && words.contains("key");
    let denied_channel = named.is_none() && !denied_keys && words.contains("channel");
    let mut commands = match (
        location.split(',').next().filter(|sha| !sha.is_empty()),
        between(location, "@user_script:", ".").and_then(|l| l.trim().parse().ok()),
    ) {
        (Some(sha), Some(line)) => script_commands(sha.trim(), line),
        _ => Vec::new(),
    };
    commands.dedup();
    let which = match (commands.as_slice(), &named) {
        ([], None) => None,
        ([], Some(n)) => Some(n.clone()),
        ([one], _) => Some(one.clone()),
        (many, Some(n)) if many.contains(n) => Some(n.clone()),
        (many, _) => Some(format!("one of {}", many.join(", "))),
    };
    let in_script = if in_script {
        " in one of distlock's scripts"
    } else {
        ""
    };
    let with = which
        .as_ref()
        .map(|w| format!(" with {w}"))
        .unwrap_or_default();
    let sentence = if denied_keys {
        format!("permission denied: this Redis user may not access distlock's keys{with}{in_script}; grant the key pattern ~PREFIX:* (see docs/security.md's ACL SETUSER line)")
    } else if denied_channel {
        format!("permission denied: this Redis user may not use distlock's channels{with}{in_script}; grant the channel pattern &PREFIX:* (see docs/security.md's ACL SETUSER line)")
    } else {
        format!(
            "permission denied: this Redis user may not run {}{in_script}; {HINT}",
            which.as_deref().unwrap_or("a command")
        )
    };
    Some((sentence, which))
}

#[cfg(test)]
mod tests {
    use super::super::scripts::RENEW;
    use super::super::ForeignKey;
    use super::*;
    use crate::config::Security;

    /// A redis-rs error as the client gets it from a server's reply line.
    fn server_error(line: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    /// The sentence for a server's reply line.
    fn said(line: &str) -> String {
        let target = Target::parse("redis://127.0.0.1:1", &Security::default()).unwrap();
        format!("{:#}", describe(server_error(line), &target))
    }

    /// The line of the renew script that calls `call`, with its SHA1.
    fn renew_line(call: &str) -> (String, usize) {
        let sha = RENEW.get_hash().to_owned();
        let line = RENEW.code().lines().position(|l| l.contains(call)).unwrap() + 1;
        (sha, line)
    }

    #[test]
    fn acl_refusals_read_the_same_from_redis_and_valkey() {
        // (Redis 7.0's words, Redis 7.2 / Valkey 8's words, what must be said.)
        let (sha, pexpire) = renew_line("redis.call('PEXPIRE', KEYS[1]");
        let (_, get) = renew_line("redis.call('GET', KEYS[1])");
        let at = |line: usize| format!("script: {sha}, on @user_script:{line}.");
        let cases = [
            (
                "NOPERM this user has no permissions to run the 'evalsha' command".to_owned(),
                "NOPERM User distlock has no permissions to run the 'evalsha' command".to_owned(),
                "may not run EVALSHA;",
            ),
            (
                "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
                "NOPERM No permissions to access a key".into(),
                "may not access distlock's keys;",
            ),
            (
                "NOPERM this user has no permissions to access one of the channels used as arguments".into(),
                "NOPERM No permissions to access a channel".into(),
                "may not use distlock's channels;",
            ),
            (
                format!("ERR The user executing the script can't run this command or subcommand {}", at(pexpire)),
                format!("ERR ACL failure in script: User distlock has no permissions to run the 'pexpire' command {}", at(pexpire)),
                "may not run PEXPIRE in one of distlock's scripts;",
            ),
            (
                format!("ERR The user executing the script can't access at least one of the keys mentioned in the command {}", at(get)),
                format!("ERR ACL failure in script: No permissions to access a key {}", at(get)),
                "may not access distlock's keys with GET in one of distlock's scripts;",
            ),
            (
                format!("ERR The user executing the script can't publish to the channel mentioned in the command {}", at(get)),
                format!("ERR ACL failure in script: No permissions to access a channel {}", at(get)),
                "may not use distlock's channels with GET in one of distlock's scripts;",
            ),
        ];
        for (redis, valkey, want) in cases {
            let (a, b) = (said(&redis), said(&valkey));
            assert!(a.contains(want), "{redis}: {a}");
            assert_eq!(a, b, "{redis} / {valkey}");
            assert!(!a.contains(&sha), "{a}");
        }
        // Not a refusal: the server's words, on one line.
        let other = said("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(!other.contains("permission"), "{other}");
        assert!(acl_refusal(&server_error("ERR no such key")).is_none());
    }

    /// The sentence for a TLS stream that failed with `err`, as redis-rs
    /// hands it on (an `io::Error` around rustls's error).
    fn tls_said(err: rustls::Error) -> String {
        let sec = Security {
            tls_ca: Some("ca.pem".into()),
            ..Security::default()
        };
        let target = Target::parse("rediss://localhost:6380", &sec).unwrap_or_else(|_| {
            // The CA file need not exist for the message: parse without it.
            let mut t = Target::parse("rediss://localhost:6380", &Security::default()).unwrap();
            t.tls_trust = "the CA in ca.pem".into();
            t
        });
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, err);
        format!("{:#}", describe(redis::RedisError::from(io), &target))
    }

    #[test]
    fn tls_failures_are_told_by_rustls_error_not_by_its_wording() {
        use rustls::{AlertDescription, CertificateError};
        let s = tls_said(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ));
        assert!(
            s.contains("the certificate of localhost does not verify: it is not signed by the CA in ca.pem"),
            "{s}"
        );
        let s = tls_said(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForNameContext {
                expected: rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                presented: vec!["DnsName(\"otherhost\")".into()],
            },
        ));
        assert!(
            s.contains("issued for otherhost, not for the host name \"localhost\""),
            "{s}"
        );
        let s = tls_said(rustls::Error::InvalidCertificate(CertificateError::Expired));
        assert!(s.contains("it has expired"), "{s}");
        let s = tls_said(rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired,
        ));
        assert!(s.contains("requires a client certificate"), "{s}");
        assert!(s.contains("--tls-cert"), "{s}");
        let s = tls_said(rustls::Error::AlertReceived(AlertDescription::UnknownCA));
        assert!(s.contains("did not accept the one in --tls-cert"), "{s}");
        // A plain I/O error is no TLS failure.
        let target = Target::parse("rediss://localhost:6380", &Security::default()).unwrap();
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, "certificate");
        let s = format!("{:#}", describe(redis::RedisError::from(io), &target));
        assert!(!s.contains("TLS:"), "{s}");
    }

    /// The kind of error for a redis-rs error, against a plain target.
    fn kind_of(e: redis::RedisError) -> StoreError {
        let target = Target::parse("redis://u:hunter2@127.0.0.1:1", &Security::default()).unwrap();
        describe(e, &target)
    }

    #[test]
    fn redis_errors_become_kinds() {
        use std::io::{Error, ErrorKind};
        let e = kind_of(Error::from(ErrorKind::WouldBlock).into());
        assert!(matches!(e, StoreError::Timeout(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "redis at redis://u:***@127.0.0.1:1: timed out"
        );
        let e = kind_of(Error::from(ErrorKind::ConnectionRefused).into());
        assert!(matches!(e, StoreError::Unreachable(_)), "{e:?}");
        assert!(e.to_string().ends_with(": connection refused"), "{e}");
        let e = kind_of(Error::from(ErrorKind::ConnectionReset).into());
        assert!(matches!(e, StoreError::Unreachable(_)), "{e:?}");
        let e = kind_of(server_error("NOAUTH Authentication required."));
        assert!(matches!(e, StoreError::Auth(_)), "{e:?}");
        assert!(e.to_string().contains("authentication required"), "{e}");
        let e = kind_of(server_error(
            "NOPERM User distlock has no permissions to run the 'evalsha' command",
        ));
        match &e {
            StoreError::Denied { command, .. } => {
                assert_eq!(command.as_deref(), Some("EVALSHA"))
            }
            other => panic!("{other:?}"),
        }
        let e = kind_of(server_error(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ));
        assert!(matches!(e, StoreError::Server(_)), "{e:?}");
        let e = kind_of(server_error(
            "READONLY You can't write against a read only replica.",
        ));
        assert!(matches!(e, StoreError::Server(_)), "{e:?}");
        let e = kind_of(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "bad",
        )));
        assert!(matches!(e, StoreError::Protocol(_)), "{e:?}");
        let io = Error::new(
            ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::Expired),
        );
        let e = kind_of(io.into());
        assert!(matches!(e, StoreError::Tls(_)), "{e:?}");
        // No kind's sentence holds the password.
        for e in [
            kind_of(Error::from(ErrorKind::WouldBlock).into()),
            kind_of(server_error("NOAUTH Authentication required.")),
        ] {
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn server_replies_become_plain_sentences_without_internals() {
        let (sha, line) = renew_line("redis.call('PEXPIRE', KEYS[1]");
        let at = format!("script: {sha}, on @user_script:{line}.");
        for (reply, want) in [
            (
                format!("READONLY You can't write against a read only replica. {at}"),
                "the server is a read-only replica",
            ),
            // Redis 6 wraps what a script got in an ERR of its own.
            (
                format!("ERR Error running script (call to f_{sha}): @user_script:{line}: -READONLY You can't write against a read only replica."),
                "the server is a read-only replica",
            ),
            (
                format!("OOM command not allowed when used memory > 'maxmemory'. {at}"),
                "the server is out of memory",
            ),
            ("LOADING Redis is loading the dataset in memory".into(), "still loading"),
            (
                format!("ERR user_script:1: Script attempted to access nonexistent global variable 'x' {at}"),
                "the server refused the request: user_script:1: Script attempted to access nonexistent global variable 'x'",
            ),
            ("WEIRD".into(), "the server refused the request"),
        ] {
            let s = said(&reply);
            assert!(s.contains(want), "{reply}: {s}");
            for internal in [sha.as_str(), "@user_script:", "ReadOnly", "\"OOM\"", "Server("] {
                assert!(!s.contains(internal), "{reply}: {s}");
            }
        }
        let target = Target::parse("redis://127.0.0.1:1", &Security::default()).unwrap();
        // The client's own errors lose the kind it writes after them.
        let own = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "Redis server refused to switch database",
            "DB index is out of range".to_owned(),
        ));
        assert_eq!(
            describe(own, &target).to_string(),
            "redis at redis://127.0.0.1:1: the server refused to switch database: DB index is out of range"
        );
        let own = redis::RedisError::from((redis::ErrorKind::Io, "no sentinel answered"));
        assert_eq!(
            describe(own, &target).to_string(),
            "redis at redis://127.0.0.1:1: no sentinel answered"
        );
        // Bytes no Redis sends: not a Redis server.
        let garbage = redis::parse_redis_value(b"HTTP/1.1 400 Bad Request\r\n").unwrap_err();
        let e = describe(garbage, &target);
        assert!(matches!(e, StoreError::Protocol(_)), "{e:?}");
        assert!(e.to_string().contains(": not a Redis server:"), "{e}");
    }

    #[test]
    fn tls_to_a_port_without_tls_is_named() {
        let plain_reply = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        let s = tls_said(plain_reply);
        assert!(s.contains("TLS: no TLS answered"), "{s}");
        assert!(s.contains("use redis:// instead of rediss://"), "{s}");
        // Silence over TLS may be the same mistake; over plain TCP it is
        // only a timeout.
        let tls = Target::parse("rediss://localhost:6380", &Security::default()).unwrap();
        let plain = Target::parse("redis://localhost:6380", &Security::default()).unwrap();
        let timeout = || std::io::Error::from(std::io::ErrorKind::WouldBlock).into();
        let s = describe(timeout(), &tls).to_string();
        assert!(s.contains("timed out (no reply over TLS"), "{s}");
        assert!(s.contains("use redis://"), "{s}");
        let s = describe(timeout(), &plain).to_string();
        assert!(s.ends_with(": timed out"), "{s}");
    }

    #[test]
    fn sentences_name_the_request_once() {
        let e = kind_of(std::io::Error::from(std::io::ErrorKind::WouldBlock).into());
        let e = e.during("renewal").during("acquire");
        assert_eq!(
            e.to_string(),
            "renewal failed: redis at redis://u:***@127.0.0.1:1: timed out"
        );
        // Kinds that are not about the connection carry no request name.
        let fk = StoreError::from(ForeignKey {
            key: "distlock:{x}:fence".into(),
            kind: "hash".into(),
            store: "a Redis",
        })
        .during("acquire");
        assert!(matches!(fk, StoreError::WrongType(_)));
        assert!(fk
            .to_string()
            .starts_with("the key distlock:{x}:fence is a Redis hash"));
    }
}
