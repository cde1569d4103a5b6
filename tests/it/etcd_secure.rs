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
