//! etcd's security through the real binary: `etcds://` with the private CA
//! given by `--tls-ca` (and refused without it, or with another CA), and
//! etcd's users: the name and password in the URL authenticate, a wrong
//! password is exit 125 with one line that never shows it. The contract's
//! "Backends": unreachable, auth refused or TLS failure is 125 as on Redis.

use crate::common::etcd::at;
use crate::common::etcd::{EtcdServer, ServerTls};
use crate::common::tls::Pki;
use crate::common::*;

const TOKEN: &[&str] = &["--", "sh", "-c", "echo $DISTLOCK_FENCING_TOKEN"];

#[test]
fn etcds_works_with_the_private_ca_and_is_refused_without_it_or_with_another() {
    let pki = Pki::get();
    let e = EtcdServer::start_tls(ServerTls {
        cert: pki.path("server.pem"),
        key: pki.path("server.key"),
        ca: pki.path("ca.pem"),
    });
    let ca = pki.path("ca.pem");
    let out = exec(
        at(&e.url())
            .arg("--tls-ca")
            .arg(&ca)
            .args(["run", "sec-tls"])
            .args(TOKEN),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    let token: u64 = out.stdout.trim().parse().unwrap();
    assert!(token > 0, "{out:?}");

    // etcds:// without a CA to trust: a usage error that names the option.
    let out = exec(at(&e.url()).args(["run", "sec-tls"]).args(TOKEN), LIMIT);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--tls-ca"), "{out:?}");

    // A CA that did not sign the server's certificate: 125, one line.
    let out = exec(
        at(&e.url())
            .arg("--tls-ca")
            .arg(pki.path("other-ca.pem"))
            .args(["run", "sec-tls"])
            .args(TOKEN),
        LIMIT,
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stdout.is_empty(), "CMD never ran: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.starts_with("distlock: "), "{out:?}");

    // Plain etcd:// to a TLS-only member: 125 as well, never a hang.
    let plain = e.url().replacen("etcds://", "etcd://", 1);
    let out = exec(at(&plain).args(["run", "sec-tls"]).args(TOKEN), LIMIT);
    assert_eq!(out.code, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
}

#[test]
fn an_etcd_user_authenticates_from_the_url_and_a_wrong_password_is_125_unseen() {
    let e = EtcdServer::start();
    e.ctl(&["user", "add", "root:right-pw-4021"]);
    // Granted automatically on some versions; required on others.
    let _ = e.try_ctl(&["user", "grant-role", "root", "root"]);
    e.ctl(&["auth", "enable"]);
    let hostport = format!("127.0.0.1:{}", e.port);

    let out = exec(
        at(&format!("etcd://root:right-pw-4021@{hostport}"))
            .args(["run", "sec-auth"])
            .args(TOKEN),
        LIMIT,
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.trim().parse::<u64>().is_ok(), "{out:?}");
    assert!(!out.all().contains("right-pw-4021"), "{out:?}");

    let out = exec(
        at(&format!("etcd://root:wrong-pw-7730@{hostport}"))
            .args(["run", "sec-auth"])
            .args(TOKEN),
        LIMIT,
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stdout.is_empty(), "CMD never ran: {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(!out.all().contains("wrong-pw-7730"), "{out:?}");

    // No user at all, on a member that requires one: 125, one line.
    let out = exec(
        at(&format!("etcd://{hostport}"))
            .args(["run", "sec-auth"])
            .args(TOKEN),
        LIMIT,
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
}

/// A call refused by etcd's permissions (a user with no role on
/// distlock's prefix) fails with 125 and leaves no lease behind: the
/// leases it was granted before the refusal are revoked before it exits.
/// Each used to live on for the call's `--ttl` (or `--min-hold`).
#[test]
fn a_run_refused_for_lack_of_permission_leaves_no_lease_behind() {
    let e = EtcdServer::start();
    let (_, url) = with_root_and_a_limited_user(&e, &["elsewhere/", "--prefix=true"]);
    let leases = || e.ctl(&["--user", "root:root-pw", "lease", "list"]);
    for args in [
        &["run", "denied", "--ttl", "60s", "--", "true"][..],
        &["run", "denied", "--min-hold", "30s", "--", "true"],
        &["run", "denied", "--wait", "2s", "--", "true"],
        &["acquire", "denied", "--ttl", "60s"],
        &["run", "denied", "--limit", "2", "--", "true"],
    ] {
        let out = exec(at(&url).args(args), LIMIT);
        assert_eq!(out.code, 125, "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: CMD never ran: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out:?}");
        let left = leases();
        assert!(
            left.starts_with("found 0 leases"),
            "{args:?} left a lease behind: {left}"
        );
    }
}

/// What distlock says when etcd:// or etcds:// cannot reach an etcd: one
/// line in the words the Redis errors use (refused, TLS on one side only,
/// a CA that did not sign the certificate, not an etcd server), never the
/// client library's ("transport error", "h2 protocol error",
/// "UnknownIssuer", "tcp connect error"). A --tls-ca file without a
/// certificate is refused before any connection, as a missing one is.
#[test]
fn etcd_connection_failures_are_one_plain_line_without_library_words() {
    use crate::common::not_redis::{NotRedis, Speaks};
    let pki = Pki::get();
    let tls = EtcdServer::start_tls(ServerTls {
        cert: pki.path("server.pem"),
        key: pki.path("server.key"),
        ca: pki.path("ca.pem"),
    });
    let plain = crate::common::etcd::shared();
    let redis = RedisServer::start();
    let http = NotRedis::start(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        Speaks::WhenSpokenTo,
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-ca.pem");
    std::fs::write(&empty, "").unwrap();
    let ca = pki.path("ca.pem").display().to_string();
    let other = pki.path("other-ca.pem").display().to_string();
    let empty = empty.display().to_string();
    let tls_url = tls.url();
    let plain_to_tls = tls.url().replacen("etcds://", "etcd://", 1);
    let tls_to_plain = plain.url().replacen("etcd://", "etcds://", 1);
    let not_etcd = format!("etcd://127.0.0.1:{}", redis.port);
    let http_url = format!("etcd://127.0.0.1:{}", http.port);
    let cases: Vec<(&str, Vec<&str>, i32, Vec<&str>)> = vec![
        (
            &plain_to_tls,
            vec![],
            125,
            vec!["this port speaks TLS", "etcds://"],
        ),
        (
            &tls_url,
            vec!["--tls-ca", &other],
            125,
            vec!["does not verify", "not signed by the CA in", &other],
        ),
        (
            &tls_url,
            vec!["--tls-ca", &empty],
            2,
            vec![&empty, "no PEM certificate"],
        ),
        (
            &tls_to_plain,
            vec!["--tls-ca", &ca],
            125,
            vec!["no TLS answered", "etcd://"],
        ),
        (&not_etcd, vec![], 125, vec!["not an etcd server"]),
        (&http_url, vec![], 125, vec!["not an etcd server"]),
        (
            "etcd://127.0.0.1:1",
            vec![],
            125,
            vec!["connection refused"],
        ),
    ];
    for (url, opts, code, says) in cases {
        let out = exec(
            at(url).args(&opts).args(["run", "sec-words", "--", "true"]),
            LIMIT,
        );
        assert_eq!(out.code, code, "{url} {opts:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{url} {opts:?}: {out:?}");
        assert_eq!(out.stderr.lines().count(), 1, "{url} {opts:?}: {out:?}");
        assert!(
            out.stderr.starts_with("distlock: "),
            "{url} {opts:?}: {out:?}"
        );
        for s in says {
            assert!(
                out.stderr.contains(s),
                "{url} {opts:?}: no {s:?} in {out:?}"
            );
        }
        for jargon in [
            "transport error",
            "h2 ",
            "http2",
            "UnknownIssuer",
            "tcp connect",
            "tonic",
            "hyper",
        ] {
            assert!(!out.stderr.contains(jargon), "{url} {opts:?}: {out:?}");
        }
    }
}

/// `release --force` by a user who may change the lock key but not the
/// name's queue: clearing the queue is refused, and that used to fail the
/// whole command, leaving the lock held. The lock is still forced free,
/// with one warning for the queue.
#[test]
fn release_force_frees_the_lock_when_the_queue_may_not_be_cleared() {
    let e = EtcdServer::start();
    let (root, ops) = with_root_and_a_limited_user(&e, &["distlock:{forced}"]);
    let held = exec(at(&root).args(["acquire", "forced", "--ttl", "60s"]), LIMIT);
    assert_eq!(held.code, 0, "{held:?}");

    let out = exec(at(&ops).args(["release", "--force", "forced"]), LIMIT);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("released forced"), "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{out:?}");
    assert!(out.stderr.contains("warning"), "{out:?}");
    let after = exec(at(&root).args(["inspect", "forced"]), LIMIT);
    assert!(after.stdout.contains("free"), "{after:?}");
}

/// Turns on auth in `e` with a root user and a user `limited` whose one
/// role may read and write only `grant` (etcdctl's key and flags); the
/// URLs of the two, root's first.
fn with_root_and_a_limited_user(e: &EtcdServer, grant: &[&str]) -> (String, String) {
    e.ctl(&["user", "add", "root:root-pw"]);
    // Granted automatically on some versions; required on others.
    let _ = e.try_ctl(&["user", "grant-role", "root", "root"]);
    e.ctl(&["user", "add", "limited:lim-pw"]);
    e.ctl(&["role", "add", "limited-role"]);
    let mut perm = vec!["role", "grant-permission", "limited-role", "readwrite"];
    perm.extend(grant);
    e.ctl(&perm);
    e.ctl(&["user", "grant-role", "limited", "limited-role"]);
    e.ctl(&["auth", "enable"]);
    let at = |user: &str| format!("etcd://{user}@127.0.0.1:{}", e.port);
    (at("root:root-pw"), at("limited:lim-pw"))
}
