//! Security: TLS against a real `redis-server --tls-port` (verified CA,
//! another CA, another host name, mutual TLS, `--tls-insecure`), passwords
//! off the command line and their precedence, docs/security.md's least-privilege
//! ACL user running every subcommand, refusals that name the missing
//! command, a scan of every output for the secret, unguessable owner ids,
//! and names that cannot address another key.
//!
//! Certificates are made at test start with `openssl` (EC P-256, quick).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::holder;
use crate::common::tls;
use crate::common::*;
use holder::Holder;
use tls::{Pki, TlsServer};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Runs `cmd` to completion (stdin closed, at most 30 s).
fn run(cmd: &mut Command) -> Out {
    exec(cmd, Duration::from_secs(30))
}

/// A distinctive secret per test, so tests running side by side never see
/// each other's.
fn secret(tag: &str) -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).unwrap();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("Sx-{tag}-{hex}")
}

/// A distinctive ASCII marker must not appear anywhere in `text`.
fn assert_no_secret(secret: &str, what: &str, text: &str) {
    assert!(
        !text.contains(secret),
        "the secret leaked into {what}:\n{text}"
    );
}

/// One line on stderr, starting `distlock: `.
fn assert_one_error_line(out: &Out) {
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr: {out:?}");
    assert!(lines[0].starts_with("distlock: "), "{out:?}");
}

// ---------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------

/// Makes a distlock command set up a certain way.
type Maker<'a> = Box<dyn Fn() -> Command + 'a>;

/// `run NAME -- sh -c 'echo token $DISTLOCK_FENCING_TOKEN'`.
fn token_run(cmd: &mut Command, name: &str) -> Out {
    run(cmd.args([
        "run",
        name,
        "--",
        "sh",
        "-c",
        "echo token $DISTLOCK_FENCING_TOKEN",
    ]))
}

/// The token in `token N`, the one line `token_run`'s CMD prints.
fn token(out: &Out) -> u64 {
    out.stdout
        .strip_prefix("token ")
        .and_then(|t| t.strip_suffix('\n'))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token line: {out:?}"))
}

// ---------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------

#[test]
fn tls_with_the_private_ca_works_by_option_and_by_env() {
    let pki = Pki::get();
    let server = TlsServer::start("server", "no");
    let ca = pki.path("ca.pem");

    let out = token_run(
        distlock_at(&server.url("localhost"))
            .arg("--tls-ca")
            .arg(&ca),
        "t",
    );
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);
    assert_eq!(out.stderr, "");

    // DISTLOCK_TLS_CA instead of the option.
    let out = token_run(
        distlock_at(&server.url("localhost")).env("DISTLOCK_TLS_CA", &ca),
        "t",
    );
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);

    // The certificate also names 127.0.0.1, so the address works too.
    let out = token_run(
        distlock_at(&server.url("127.0.0.1"))
            .arg("--tls-ca")
            .arg(&ca),
        "t",
    );
    assert_eq!(out.code, 0, "{out:?}");
    let last = token(&out);

    let out = run(distlock_at(&server.url("localhost"))
        .arg("--tls-ca")
        .arg(&ca)
        .args(["inspect", "--json", "t"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains(&format!("\"fencing_token\":{last}")),
        "{out:?}"
    );
}

#[test]
fn a_certificate_from_another_ca_is_refused_naming_the_host_and_the_ca() {
    let pki = Pki::get();
    let server = TlsServer::start("server", "no");
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let touch = format!("touch {}", ran.display());

    let out = run(distlock_at(&server.url("localhost"))
        .arg("--tls-ca")
        .arg(pki.path("other-ca.pem"))
        .args(["run", "t", "--", "sh", "-c", &touch]));
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert!(out.stderr.contains("localhost"), "{out:?}");
    assert!(out.stderr.contains("other-ca.pem"), "{out:?}");
    assert!(out.stderr.contains("not signed by"), "{out:?}");
    assert!(!ran.exists(), "CMD ran without a verified server");

    // No --tls-ca: the system's CAs do not know ours either.
    let out = run(distlock_at(&server.url("localhost")).args(["acquire", "t"]));
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert!(out.stderr.contains("localhost"), "{out:?}");
    assert!(out.stderr.contains("system's trusted CAs"), "{out:?}");
    assert_eq!(out.stdout, "");
}

/// A `--tls-ca` file without a certificate (empty, or a key given by
/// mistake) trusts nobody; it used to be taken, and the server's good
/// certificate was then blamed. It is a usage error naming the file, as on
/// etcd, before anything is sent.
#[test]
fn a_tls_ca_file_without_a_certificate_is_a_usage_error_naming_it() {
    let pki = Pki::get();
    let server = TlsServer::start("server", "no");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-ca.pem");
    std::fs::write(&empty, "").unwrap();
    for ca in [empty.clone(), pki.path("server.key")] {
        let out = run(distlock_at(&server.url("localhost"))
            .arg("--tls-ca")
            .arg(&ca)
            .args(["acquire", "t"]));
        assert_eq!(out.code, 2, "{ca:?}: {out:?}");
        assert_one_error_line(&out);
        assert!(out.stderr.contains("no PEM certificate"), "{out:?}");
        assert!(out.stderr.contains(&ca.display().to_string()), "{out:?}");
        assert_eq!(out.stdout, "");
    }
}

#[test]
fn a_certificate_for_another_name_is_refused_naming_the_name() {
    let pki = Pki::get();
    let server = TlsServer::start("otherhost", "no");
    let out = token_run(
        distlock_at(&server.url("localhost"))
            .arg("--tls-ca")
            .arg(pki.path("ca.pem")),
        "t",
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert_eq!(out.stdout, "");
    assert!(out.stderr.contains("\"localhost\""), "{out:?}");
    assert!(out.stderr.contains("otherhost"), "{out:?}");
    assert!(out.stderr.contains("host name"), "{out:?}");
    // Plain words, not rustls's debug rendering.
    assert!(!out.stderr.contains("DnsName("), "{out:?}");
}

#[test]
fn mutual_tls_with_and_without_a_client_certificate() {
    let pki = Pki::get();
    let server = TlsServer::start("server", "yes");
    let url = server.url("localhost");
    let ca = pki.path("ca.pem");

    let out = token_run(
        distlock_at(&url)
            .arg("--tls-ca")
            .arg(&ca)
            .arg("--tls-cert")
            .arg(pki.path("client.pem"))
            .arg("--tls-key")
            .arg(pki.path("client.key")),
        "m",
    );
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);

    // The same from the environment.
    let out = token_run(
        distlock_at(&url)
            .env("DISTLOCK_TLS_CA", &ca)
            .env("DISTLOCK_TLS_CERT", pki.path("client.pem"))
            .env("DISTLOCK_TLS_KEY", pki.path("client.key")),
        "m",
    );
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);

    // No client certificate: a clear refusal.
    let out = token_run(distlock_at(&url).arg("--tls-ca").arg(&ca), "m");
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert!(out.stderr.contains("client certificate"), "{out:?}");
    assert!(out.stderr.contains("--tls-cert"), "{out:?}");
    assert_eq!(out.stdout, "");

    // A client certificate from a CA the server does not trust.
    let out = token_run(
        distlock_at(&url)
            .arg("--tls-ca")
            .arg(&ca)
            .arg("--tls-cert")
            .arg(pki.path("rogue-client.pem"))
            .arg("--tls-key")
            .arg(pki.path("rogue-client.key")),
        "m",
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert!(out.stderr.contains("--tls-cert"), "{out:?}");

    // A key that is not the certificate's.
    let out = token_run(
        distlock_at(&url)
            .arg("--tls-ca")
            .arg(&ca)
            .arg("--tls-cert")
            .arg(pki.path("client.pem"))
            .arg("--tls-key")
            .arg(pki.path("rogue-client.key")),
        "m",
    );
    assert_ne!(out.code, 0, "{out:?}");
    assert_one_error_line(&out);
    assert!(out.stderr.contains("--tls-key"), "{out:?}");

    // `hold` hands the TLS files to its background renewer: the lease
    // outlives several TTLs, then `release` ends it.
    let tls = |c: &mut Command| {
        c.arg("--tls-ca")
            .arg(&ca)
            .arg("--tls-cert")
            .arg(pki.path("client.pem"))
            .arg("--tls-key")
            .arg(pki.path("client.key"));
    };
    let mut hold = distlock_at(&url);
    tls(&mut hold);
    let out = run(hold.args(["hold", "--ttl", "1500ms", "--json", "h"]));
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let owner = v["owner"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(2500));
    let mut inspect = distlock_at(&url);
    tls(&mut inspect);
    let out = run(inspect.args(["inspect", "--json", "h"]));
    assert!(out.stdout.contains("\"held\":true"), "{out:?}");
    let mut release = distlock_at(&url);
    tls(&mut release);
    let out = run(release.args(["release", "--owner", &owner, "h"]));
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn an_x509_v1_client_certificate_is_named_as_such_with_the_way_to_a_v3_one() {
    let pki = Pki::get();
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(pki.path("client-v1.pem"))
        .output_within(Duration::from_secs(30));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)"),
        "the test certificate must be v1"
    );
    let server = TlsServer::start("server", "yes");
    let url = server.url("localhost");
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let touch = format!("touch {}", ran.display());
    let with = |cert: &Path, key: &Path| {
        let mut c = distlock_at(&url);
        c.arg("--tls-ca")
            .arg(pki.path("ca.pem"))
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key);
        c
    };

    // rustls cannot use it (redis-server's OpenSSL would): said before any
    // connection, about the client certificate, not the server's.
    let v1 = pki.path("client-v1.pem");
    let out =
        run(with(&v1, &pki.path("client-v1.key")).args(["run", "v", "--", "sh", "-c", &touch]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_error_line(&out);
    assert!(!ran.exists(), "CMD ran");
    let line = out.stderr.trim_end();
    assert!(line.contains("client certificate in --tls-cert"), "{line}");
    assert!(line.contains(&v1.display().to_string()), "{line}");
    assert!(line.contains("X.509 v1"), "{line}");
    assert!(!line.contains("certificate of localhost"), "{line}");
    assert!(!line.contains("UnsupportedCertVersion"), "{line}");

    // The openssl line it suggests makes a certificate that works.
    let how = line.split("e.g. ").nth(1).expect("an openssl line");
    assert!(how.starts_with("openssl x509 -req "), "{how}");
    let work = tempfile::tempdir().unwrap();
    for (from, to) in [
        ("ca.pem", "ca.pem"),
        ("ca.key", "ca.key"),
        ("client-v1.csr", "client.csr"),
    ] {
        std::fs::copy(pki.path(from), work.path().join(to)).unwrap();
    }
    let made = Command::new("bash")
        .args(["-c", how])
        .current_dir(work.path())
        .output_within(Duration::from_secs(30));
    assert!(made.status.success(), "{how}: {made:?}");
    let out = token_run(
        &mut with(&work.path().join("client.pem"), &pki.path("client-v1.key")),
        "v",
    );
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);
}

#[test]
fn tls_insecure_skips_verification_and_warns_every_time() {
    let pki = Pki::get();
    let server = TlsServer::start("otherhost", "no");
    let warned = |out: &Out| {
        out.stderr
            .lines()
            .filter(|l| l.starts_with("distlock: warning: --tls-insecure"))
            .count()
    };
    // Neither the CA (system trust) nor the name (otherhost) would verify.
    for _ in 1..=2 {
        let out = token_run(
            distlock_at(&server.url("localhost")).arg("--tls-insecure"),
            "i",
        );
        assert_eq!(out.code, 0, "{out:?}");
        token(&out);
        assert_eq!(warned(&out), 1, "{out:?}");
    }
    // Even with a CA that would refuse it, and for every subcommand.
    let out = run(distlock_at(&server.url("localhost"))
        .arg("--tls-insecure")
        .arg("--tls-ca")
        .arg(pki.path("other-ca.pem"))
        .args(["inspect", "i"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(warned(&out), 1, "{out:?}");
}

#[test]
fn tls_options_need_a_rediss_url_and_go_together() {
    let pki = Pki::get();
    let ca = pki.path("ca.pem").display().to_string();
    let cert = pki.path("client.pem").display().to_string();
    let key = pki.path("client.key").display().to_string();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("redis://127.0.0.1:1", vec!["--tls-ca", &ca], "rediss://"),
        ("redis://127.0.0.1:1", vec!["--tls-insecure"], "rediss://"),
        (
            "redis://127.0.0.1:1",
            vec!["--tls-cert", &cert, "--tls-key", &key],
            "rediss://",
        ),
        (
            "rediss://localhost:1",
            vec!["--tls-cert", &cert],
            "--tls-key",
        ),
        (
            "rediss://localhost:1",
            vec!["--tls-key", &key],
            "--tls-cert",
        ),
        (
            "rediss://localhost:1",
            vec!["--tls-ca", "/nonexistent/ca.pem"],
            "/nonexistent/ca.pem",
        ),
    ];
    for (url, opts, says) in cases {
        let out = run(distlock_at(url)
            .args(&opts)
            .args(["run", "x", "--", "true"]));
        assert_eq!(out.code, 2, "{url} {opts:?}: {out:?}");
        assert_one_error_line(&out);
        assert!(out.stderr.contains(says), "{url} {opts:?}: {out:?}");
    }
}

// ---------------------------------------------------------------------------
// Passwords
// ---------------------------------------------------------------------------

/// A plain server whose default user needs `password`.
fn server_with_password(password: &str) -> RedisServer {
    let server = RedisServer::start();
    let _: () = server.cmd(&["CONFIG", "SET", "requirepass", password]);
    server
}

/// An admin connection to a password-protected server.
fn admin(server: &RedisServer, password: &str) -> redis::Connection {
    connect(&format!("redis://:{password}@127.0.0.1:{}", server.port))
}

/// A file holding `text`, in `dir`.
fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn the_password_comes_from_the_environment_or_a_file() {
    let pw = secret("pw");
    let server = server_with_password(&pw);
    let dir = tempfile::tempdir().unwrap();

    let out = token_run(distlock(&server).env("DISTLOCK_REDIS_PASSWORD", &pw), "p");
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);

    // First line, trailing newline stripped (also a CRLF), rest ignored.
    for (i, text) in [
        format!("{pw}\n"),
        pw.clone(),
        format!("{pw}\r\n"),
        format!("{pw}\nsecond line\n"),
    ]
    .iter()
    .enumerate()
    {
        let f = file(dir.path(), &format!("pw{i}"), text);
        let out = token_run(distlock(&server).arg("--redis-password-file").arg(&f), "p");
        assert_eq!(out.code, 0, "{text:?}: {out:?}");
        token(&out);
        // DISTLOCK_REDIS_PASSWORD_FILE is the option's variable.
        let out = token_run(
            distlock(&server).env("DISTLOCK_REDIS_PASSWORD_FILE", &f),
            "p",
        );
        assert_eq!(out.code, 0, "{text:?}: {out:?}");
    }

    // An empty or missing file is a usage error naming the file.
    let empty = file(dir.path(), "empty", "\n");
    for f in [empty, dir.path().join("missing")] {
        let out = run(distlock(&server)
            .arg("--redis-password-file")
            .arg(&f)
            .args(["run", "p", "--", "true"]));
        assert_eq!(out.code, 2, "{out:?}");
        assert_one_error_line(&out);
        assert!(out.stderr.contains(&f.display().to_string()), "{out:?}");
    }

    // No password at all: refused, exit 125, in words.
    let out = run(distlock(&server).args(["run", "p", "--", "true"]));
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert!(out.stderr.contains("auth"), "{out:?}");
}

#[test]
fn password_precedence_file_then_env_then_url() {
    let pw = secret("prec");
    let wrong = secret("wrong");
    let server = server_with_password(&pw);
    let dir = tempfile::tempdir().unwrap();
    let right_file = file(dir.path(), "right", &format!("{pw}\n"));
    let wrong_file = file(dir.path(), "wrong", &format!("{wrong}\n"));
    let url_with = |p: &str| format!("redis://:{p}@127.0.0.1:{}", server.port);

    // (file, env, url password, expected exit)
    #[allow(clippy::type_complexity)]
    let cases: Vec<(Option<&PathBuf>, Option<&str>, Option<&str>, i32)> = vec![
        // The file wins over everything.
        (Some(&right_file), Some(&wrong), Some(&wrong), 0),
        (Some(&wrong_file), Some(&pw), Some(&pw), 125),
        // Then the environment, over the URL.
        (None, Some(&pw), Some(&wrong), 0),
        (None, Some(&wrong), Some(&pw), 125),
        // The URL alone.
        (None, None, Some(&pw), 0),
        (None, None, Some(&wrong), 125),
    ];
    for (i, (f, env, url_pw, want)) in cases.into_iter().enumerate() {
        let mut cmd = bare_distlock();
        cmd.env(
            "DISTLOCK_REDIS_URL",
            url_pw.map_or_else(|| server.url(), url_with),
        );
        if let Some(f) = f {
            cmd.arg("--redis-password-file").arg(f);
        }
        if let Some(e) = env {
            cmd.env("DISTLOCK_REDIS_PASSWORD", e);
        }
        let out = run(cmd.args(["acquire", "--json", &format!("prec{i}")]));
        assert_eq!(out.code, want, "case {i}: {out:?}");
        for s in [&pw, &wrong] {
            assert_no_secret(s, &format!("case {i}"), &out.all());
        }
        if want == 125 {
            assert_one_error_line(&out);
            assert!(out.stderr.contains("auth"), "case {i}: {out:?}");
        }
    }
}

#[test]
fn an_env_password_does_not_break_a_server_without_one() {
    // DISTLOCK_REDIS_PASSWORD may be set for a whole environment; a server
    // with no password refuses AUTH, and distlock then goes on without it.
    let server = RedisServer::start();
    let pw = secret("ambient");
    let with_env = || {
        let mut c = distlock(&server);
        c.env("DISTLOCK_REDIS_PASSWORD", &pw);
        c
    };
    let out = token_run(&mut with_env(), "e");
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);

    // Waiting too (the subscription is a second connection).
    let mut holder = with_env()
        .args(["run", "e", "--", "sleep", "0.5"])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || server
        .get("distlock:{e}")
        .is_some()));
    let t = Instant::now();
    let out = run(with_env()
        .args(["run", "-w", "10s", "e", "--", "sh", "-c"])
        .arg("echo token $DISTLOCK_FENCING_TOKEN"));
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    wait_with_timeout(&mut holder, Duration::from_secs(10));

    // And hold's background renewer.
    let out = run(with_env().args(["hold", "--ttl", "1500ms", "--json", "h"]));
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(server.get("distlock:{h}").is_some(), "the renewer gave up");
    let out = run(with_env().args(["release", "--owner", v["owner"].as_str().unwrap(), "h"]));
    assert_eq!(out.code, 0, "{out:?}");
}

#[test]
fn acl_users_work_with_the_password_in_the_url_env_or_file() {
    let server = RedisServer::start();
    let pw = secret("acl");
    let _: () = server.cmd(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        &format!(">{pw}"),
        "~*",
        "&*",
        "+@all",
    ]);
    let _: () = server.cmd(&["ACL", "SETUSER", "default", "off"]);
    let port = server.port;
    let dir = tempfile::tempdir().unwrap();
    let f = file(dir.path(), "pw", &format!("{pw}\n"));

    let out = token_run(
        &mut distlock_at(&format!("redis://locker:{pw}@127.0.0.1:{port}")),
        "u",
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = token_run(
        distlock_at(&format!("redis://locker@127.0.0.1:{port}"))
            .env("DISTLOCK_REDIS_PASSWORD", &pw),
        "u",
    );
    assert_eq!(out.code, 0, "{out:?}");
    let out = token_run(
        distlock_at(&format!("redis://locker@127.0.0.1:{port}"))
            .arg("--redis-password-file")
            .arg(&f),
        "u",
    );
    assert_eq!(out.code, 0, "{out:?}");
    token(&out);

    // The right password for another user is refused, and not echoed.
    let out = token_run(
        &mut distlock_at(&format!("redis://nobody:{pw}@127.0.0.1:{port}")),
        "u",
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert_no_secret(&pw, "the refusal", &out.all());
    assert!(out.stderr.contains("redis://nobody:***@"), "{out:?}");
}

/// Every process on this machine whose command line holds `secret`.
fn argv_holding(secret: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(argv) = std::fs::read(e.path().join("cmdline")) {
            let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
            if argv.contains(secret) {
                found.push(format!("{}: {argv}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// The environment a process started with, as `K=V` lines.
fn environ(pid: i32) -> String {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    String::from_utf8_lossy(&env).replace('\0', "\n")
}

#[test]
fn the_password_is_never_in_argv_nor_in_cmds_environment() {
    let dir = tempfile::tempdir().unwrap();
    for source in ["env", "file"] {
        let pw = secret(source);
        let server = server_with_password(&pw);
        let pw_file = file(dir.path(), &format!("pw-{source}"), &format!("{pw}\n"));
        let with_pw = || {
            let mut c = distlock(&server);
            match source {
                "env" => c.env("DISTLOCK_REDIS_PASSWORD", &pw),
                _ => c.arg("--redis-password-file").arg(&pw_file),
            };
            c
        };

        // A running `distlock run` and its CMD.
        let mut holder =
            Holder::spawn_cmd(with_pw().args(["run", "ps"]).stderr(Stdio::null()), &[]);
        assert!(holder.try_wait_held(), "CMD started");
        let cmd_pid = holder.cmd_pid();
        // A `hold` with its background renewer.
        let out = run(with_pw().args(["hold", "--ttl", "3s", "--json", "ps-hold"]));
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
        let renewer = v["renewer_pid"].as_i64().unwrap() as i32;
        assert!(alive(renewer));

        // Nothing on this machine shows the password on its command line:
        // not distlock, its guardian, CMD, nor the hold renewer.
        assert_eq!(argv_holding(&pw), Vec::<String>::new(), "{source}");
        // CMD's environment has neither the password nor its variable.
        let env = environ(cmd_pid);
        assert_no_secret(&pw, "CMD's environment", &env);
        assert!(!env.contains("DISTLOCK_REDIS_PASSWORD="), "{env}");
        assert!(env.contains("DISTLOCK_FENCING_TOKEN="), "{env}");

        signal(holder.pid() as i32, libc::SIGTERM);
        let st = holder.wait();
        assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{source}");
        let out = run(with_pw().args([
            "release",
            "--owner",
            v["owner"].as_str().unwrap(),
            "ps-hold",
        ]));
        assert_eq!(out.code, 0, "{out:?}");
        // The renewer learns of the release at its next renewal (ttl/3).
        assert!(wait_until(Duration::from_secs(10), || !alive(renewer)));
    }
}

// ---------------------------------------------------------------------------
// Nothing leaks
// ---------------------------------------------------------------------------

#[test]
fn the_secret_appears_in_no_output_of_a_failing_or_a_succeeding_run() {
    let pw = secret("leak");
    let server = server_with_password(&pw);
    let port = server.port;
    let dir = tempfile::tempdir().unwrap();
    let pw_file = file(dir.path(), "pw", &format!("{pw}\n"));
    let url_pw = format!("redis://:{pw}@127.0.0.1:{port}");
    let mut outputs: Vec<(String, Out)> = Vec::new();
    let mut record = |what: &str, out: Out| outputs.push((what.to_owned(), out));

    // How a run can be given the password: URL, env, file.
    let sources: Vec<(&str, Maker<'_>)> = vec![
        // DISTLOCK_REDIS_URL holding the password: the issue's "no full
        // URL with credentials in the child's environment" covers it.
        ("url from env", Box::new(|| distlock_at(&url_pw))),
        (
            "url from -r",
            Box::new(|| {
                let mut c = bare_distlock();
                c.args(["-r", &url_pw]);
                c
            }),
        ),
        (
            "env",
            Box::new(|| {
                let mut c = distlock_at(&server.url());
                c.env("DISTLOCK_REDIS_PASSWORD", &pw);
                c
            }),
        ),
        (
            "file",
            Box::new(|| {
                let mut c = distlock_at(&server.url());
                c.arg("--redis-password-file").arg(&pw_file);
                c
            }),
        ),
    ];
    let dump_env = "env; echo token $DISTLOCK_FENCING_TOKEN";
    for (src, mk) in &sources {
        // Succeeding, with everything distlock can say: -vv, renewals.
        let out = run(mk()
            .args(["-vv", "run", "--ttl", "1s", "ok", "--", "sh", "-c"])
            .arg(format!("{dump_env}; sleep 0.5")));
        assert_eq!(out.code, 0, "{src}: {out:?}");
        assert!(out.stdout.contains("DISTLOCK_OWNER="), "{out:?}");
        record(&format!("{src}: run -vv (stdout holds CMD's env)"), out);

        // A waiter, -vv, woken by a release.
        let mut holder = mk()
            .args(["run", "busy", "--", "sleep", "0.4"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(5), || {
            redis::cmd("EXISTS")
                .arg("distlock:{busy}")
                .query::<i64>(&mut admin(&server, &pw))
                .unwrap()
                == 1
        }));
        let out = run(mk().args([
            "-vv", "run", "-w", "10s", "busy", "--", "sh", "-c", dump_env,
        ]));
        assert_eq!(out.code, 0, "{src}: {out:?}");
        record(&format!("{src}: run -vv -w"), out);
        wait_with_timeout(&mut holder, Duration::from_secs(10));

        // The manual subcommands and their JSON.
        let out = run(mk().args(["-vv", "acquire", "--json", "--ttl", "1m", "m"]));
        assert_eq!(out.code, 0, "{src}: {out:?}");
        let owner = serde_json::from_str::<serde_json::Value>(out.stdout.trim()).unwrap()["owner"]
            .as_str()
            .unwrap()
            .to_owned();
        record(&format!("{src}: acquire --json"), out);
        // Busy: the conflict line.
        let out = run(mk().args(["-vv", "acquire", "m"]));
        assert_eq!(out.code, 75, "{src}: {out:?}");
        record(&format!("{src}: acquire (busy)"), out);
        for args in [
            vec!["-vv", "renew", "--owner", &owner, "m"],
            vec!["-vv", "inspect", "m"],
            vec!["-vv", "inspect", "--json", "m"],
            vec!["-vv", "list"],
            vec!["-vv", "list", "--json"],
            vec!["-vv", "release", "--owner", &owner, "m"],
            vec!["-vv", "release", "--owner", &owner, "m"],
            vec!["-vv", "acquire", "m"],
            vec!["-vv", "release", "--force", "m"],
            vec!["-vv", "doctor"],
            vec!["-vv", "doctor", "--json"],
            vec![
                "-vv", "run", "--limit", "2", "sem", "--", "sh", "-c", dump_env,
            ],
            vec!["-vv", "inspect", "--limit", "2", "sem"],
        ] {
            let out = run(mk().args(&args));
            assert!(matches!(out.code, 0 | 1), "{src} {args:?}: {out:?}");
            record(&format!("{src}: {args:?}"), out);
        }
        let out = run(mk().args(["-vv", "hold", "--ttl", "1500ms", "held"]));
        assert_eq!(out.code, 0, "{src}: {out:?}");
        let owner = exported(&out.stdout, "DISTLOCK_OWNER");
        record(&format!("{src}: hold"), out);
        std::thread::sleep(Duration::from_millis(700));
        let out = run(mk().args(["-vv", "inspect", "held"]));
        record(&format!("{src}: inspect of a hold"), out);
        let out = run(mk().args(["-vv", "release", "--owner", &owner, "held"]));
        assert_eq!(out.code, 0, "{src}: {out:?}");
        record(&format!("{src}: release of a hold"), out);
    }

    // A URL in CMD's arguments whose password holds an unescaped `/`, `?`
    // or `#`: masked in the stored command line every host reads.
    let cmd_pw = secret("cmd");
    for (n, pass) in [
        format!("ab/{cmd_pw}"),
        format!("a?{cmd_pw}"),
        format!("a#{cmd_pw}"),
    ]
    .iter()
    .enumerate()
    {
        let arg = format!("--db=postgres://app:{pass}@db/x");
        let name = format!("cmdline-{n}");
        let mut holder = Holder::spawn_cmd(
            distlock_at(&url_pw)
                .args(["run", &name])
                .stderr(Stdio::null()),
            &[&arg],
        );
        assert!(holder.try_wait_held(), "{arg}");
        for args in [vec!["inspect", &name], vec!["inspect", "--json", &name]] {
            let out = run(distlock_at(&url_pw).args(&args));
            assert_eq!(out.code, 0, "{out:?}");
            assert!(out.stdout.contains("app:***@db/x"), "{out:?}");
            assert_no_secret(&cmd_pw, "the stored command line", &out.all());
            record(&format!("{args:?} of a CMD given {arg}"), out);
        }
        drop(holder);
    }

    // Failing: the secret given where it is wrong, or where nobody answers.
    let other = server_with_password("not-the-secret");
    let unreachable = free_port();
    let pw_s: &str = &pw;
    let with_env = |url: String| {
        move || {
            let mut c = distlock_at(&url);
            c.env("DISTLOCK_REDIS_PASSWORD", pw_s);
            c
        }
    };
    #[allow(clippy::type_complexity)]
    let failing: Vec<(&str, Maker<'_>)> = vec![
        ("wrong password in the URL", {
            let u = format!("redis://:{pw}@127.0.0.1:{}", other.port);
            Box::new(move || distlock_at(&u))
        }),
        ("wrong user:password in the URL", {
            let u = format!("redis://someone:{pw}@127.0.0.1:{}", other.port);
            Box::new(move || distlock_at(&u))
        }),
        ("wrong password from env", Box::new(with_env(other.url()))),
        ("wrong password from a file", {
            let (u, f) = (other.url(), pw_file.clone());
            Box::new(move || {
                let mut c = distlock_at(&u);
                c.arg("--redis-password-file").arg(&f);
                c
            })
        }),
        ("unreachable, password in the URL", {
            let u = format!("redis://u:{pw}@127.0.0.1:{unreachable}");
            Box::new(move || distlock_at(&u))
        }),
        (
            "unreachable, password from env",
            Box::new(with_env(format!("redis://127.0.0.1:{unreachable}"))),
        ),
        ("unreachable TLS, password in the URL", {
            let u = format!("rediss://u:{pw}@localhost:{unreachable}");
            Box::new(move || {
                let mut c = distlock_at(&u);
                c.arg("--tls-ca").arg(Pki::get().path("ca.pem"));
                c
            })
        }),
        ("unparsable URL with a password", {
            let u = format!("redis://u:{pw}@[::");
            Box::new(move || distlock_at(&u))
        }),
        // A password with an unescaped `/`, `?` or `#` (where a URL
        // parser ends the authority): refused, never echoed.
        ("a password with a / in the URL", {
            let u = format!("redis://:ab/{pw}@127.0.0.1:{port}");
            Box::new(move || distlock_at(&u))
        }),
        ("a password with a ? in the URL", {
            let u = format!("redis://u:a?{pw}@127.0.0.1:{port}/0");
            Box::new(move || distlock_at(&u))
        }),
        ("a password with a # and an @ in the URL", {
            let u = format!("rediss://u:a@#{pw}@localhost:{port}");
            Box::new(move || distlock_at(&u))
        }),
        ("an etcd password with a / in the URL", {
            let u = format!("etcd://root:ab/{pw}@127.0.0.1:{unreachable}");
            Box::new(move || distlock_at(&u))
        }),
        ("an etcd password with a ? in the URL", {
            let u = format!("etcds://root:a?{pw}@localhost:{unreachable},h2");
            Box::new(move || distlock_at(&u))
        }),
        ("URL without a scheme", {
            let u = format!("u:{pw}@127.0.0.1:{port}");
            Box::new(move || distlock_at(&u))
        }),
        ("unknown scheme", {
            let u = format!("http://u:{pw}@127.0.0.1:{port}");
            Box::new(move || distlock_at(&u))
        }),
        ("a TLS option with a plain URL", {
            let u = url_pw.clone();
            Box::new(move || {
                let mut c = distlock_at(&u);
                c.arg("--tls-insecure");
                c
            })
        }),
    ];
    for (what, mk) in &failing {
        for args in [
            vec!["-vv", "run", "f", "--", "sh", "-c", "env"],
            vec!["-vv", "acquire", "--json", "f"],
            vec!["-vv", "inspect", "--json", "f"],
            vec!["-vv", "list", "--json"],
            vec!["-vv", "doctor", "--json"],
            vec!["-vv", "doctor"],
            vec!["-vv", "hold", "f"],
        ] {
            let out = run(mk().args(&args));
            assert!(matches!(out.code, 2 | 125), "{what} {args:?}: {out:?}");
            assert!(
                !out.stdout.contains("DISTLOCK_OWNER="),
                "CMD ran: {what}: {out:?}"
            );
            record(&format!("failing, {what}: {args:?}"), out);
        }
    }

    for (what, out) in &outputs {
        assert_no_secret(&pw, what, &out.all());
    }
    // Nor was it written into Redis (holder metadata, last-run records).
    let mut con = admin(&server, &pw);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(!keys.is_empty());
    for k in keys {
        let ty: String = redis::cmd("TYPE").arg(&k).query(&mut con).unwrap();
        let dump: Vec<String> = match ty.as_str() {
            "string" => vec![redis::cmd("GET").arg(&k).query(&mut con).unwrap()],
            "hash" => redis::cmd("HGETALL").arg(&k).query(&mut con).unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .query(&mut con)
                .unwrap(),
            _ => Vec::new(),
        };
        assert_no_secret(&pw, &format!("redis key {k}"), &format!("{k} {dump:?}"));
    }
}

// ---------------------------------------------------------------------------
// Least privilege
// ---------------------------------------------------------------------------

/// docs/security.md's `ACL SETUSER` line for distlock, as printed there, split
/// into arguments; the password placeholder is replaced by `password`.
fn readme_acl_line(password: &str) -> Vec<String> {
    let readme = include_str!("../../docs/security.md");
    let line = readme
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ACL SETUSER distlock "))
        .expect("docs/security.md shows the ACL SETUSER line");
    line.split_whitespace()
        .map(|w| w.replace(">CHANGE-ME", &format!(">{password}")))
        .collect()
}

/// Creates docs/security.md's user under `name`, minus `without` (commands
/// like `+get`), plus `extra` words; returns a URL for it.
fn acl_user(server: &RedisServer, name: &str, without: &[&str], extra: &[&str]) -> String {
    let pw = format!("pw-{name}");
    let mut line = readme_acl_line(&pw);
    line[2] = name.to_owned();
    line.retain(|w| !without.contains(&w.as_str()));
    line.extend(extra.iter().map(|s| s.to_string()));
    let mut c = redis::cmd(&line[0]);
    for w in &line[1..] {
        c.arg(w);
    }
    let _: () = c.query(&mut server.conn()).unwrap();
    format!("redis://{name}:{pw}@127.0.0.1:{}", server.port)
}

#[test]
fn the_readme_acl_line_is_least_privilege_and_names_what_it_needs() {
    let line = readme_acl_line("x").join(" ");
    // No category grants, no wildcard keys: only what distlock calls.
    assert!(line.contains(" reset on "), "{line}");
    assert!(line.contains(" ~distlock:* "), "{line}");
    assert!(line.contains(" &distlock:* "), "{line}");
    assert!(!line.contains("+@"), "{line}");
    assert!(!line.contains("~*") && !line.contains("allkeys"), "{line}");
    for cmd in [
        "+evalsha",
        "+script|load",
        "+subscribe",
        "+publish",
        "+scan",
    ] {
        assert!(line.split(' ').any(|w| w == cmd), "{cmd} missing: {line}");
    }
}

#[test]
fn a_least_privilege_user_can_run_every_subcommand() {
    let server = RedisServer::start();
    let url = acl_user(&server, "distlock", &[], &[]);
    // The default user stays as it is, for the test's own checks.
    let d = || distlock_at(&url);
    let ok = |args: &[&str]| {
        let out = run(d().args(args));
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
        out
    };

    // run, with renewals, a minimum hold and the last-run record.
    let out = run(d()
        .args(["run", "--ttl", "1s", "r", "--", "sh", "-c"])
        .arg("sleep 0.5; echo token $DISTLOCK_FENCING_TOKEN"));
    assert_eq!(out.code, 0, "{out:?}");
    ok(&["run", "--ttl", "1s", "r2", "--", "sleep", "0.5"]);
    ok(&["run", "--min-hold", "200ms", "mh", "--", "true"]);
    let out = ok(&["inspect", "--json", "r2"]);
    assert!(out.stdout.contains("\"fencing_token\":"), "{out:?}");

    // run --wait with a waiter, both orders: SUBSCRIBE and PUBLISH at work.
    // The lease is 30s, so only a wake-up explains a quick hand-over.
    for order in ["fair", "any"] {
        let name = format!("w-{order}");
        let mut holder = d()
            .args(["run", &name, "--", "sleep", "0.5"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(5), || server
            .get(&format!("distlock:{{{name}}}"))
            .is_some()));
        let t = Instant::now();
        ok(&[
            "run",
            "-w",
            "20s",
            "--wait-order",
            order,
            &name,
            "--",
            "true",
        ]);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{order}: woken only after {:?}",
            t.elapsed()
        );
        wait_with_timeout(&mut holder, Duration::from_secs(10));
    }
    // A wait that runs out leaves the queue.
    let mut holder = d()
        .args(["run", "gone", "--", "sleep", "1"])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || server
        .get("distlock:{gone}")
        .is_some()));
    let out = run(d().args(["run", "-w", "200ms", "gone", "--", "true"]));
    assert_eq!(out.code, 75, "{out:?}");
    wait_with_timeout(&mut holder, Duration::from_secs(10));

    // acquire, renew, inspect, list, release, release --force.
    let out = ok(&["acquire", "--json", "a"]);
    let owner = serde_json::from_str::<serde_json::Value>(out.stdout.trim()).unwrap()["owner"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = run(d().args(["acquire", "a"]));
    assert_eq!(out.code, 75, "{out:?}");
    ok(&["renew", "--owner", &owner, "a"]);
    ok(&["inspect", "a"]);
    let out = ok(&["list", "--json"]);
    assert!(out.stdout.contains("\"name\":\"a\""), "{out:?}");
    ok(&["list"]);
    ok(&["history", "r2"]);
    ok(&["release", "--owner", &owner, "a"]);
    let out = run(d().args(["release", "--owner", &owner, "a"]));
    assert_eq!(out.code, 1, "{out:?}");
    ok(&["acquire", "--owner", "someone-else", "f"]);
    ok(&["release", "--force", "f"]);

    // hold + release.
    let out = ok(&["hold", "--ttl", "1500ms", "--json", "h"]);
    let owner = serde_json::from_str::<serde_json::Value>(out.stdout.trim()).unwrap()["owner"]
        .as_str()
        .unwrap()
        .to_owned();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(server.get("distlock:{h}").is_some(), "the renewer gave up");
    ok(&["release", "--owner", &owner, "h"]);

    // Semaphores: run --limit 2 (two in, a third waits), and the manual
    // subcommands with --limit.
    let mut a = d()
        .args(["run", "--limit", "2", "s", "--", "sleep", "0.6"])
        .spawn()
        .unwrap();
    let mut b = d()
        .args(["run", "--limit", "2", "s", "--", "sleep", "0.6"])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        server.cmd::<i64>(&["ZCARD", "distlock:{s}:slots"]) == 2
    }));
    ok(&["inspect", "--limit", "2", "s"]);
    let t = Instant::now();
    ok(&["run", "-w", "20s", "--limit", "2", "s", "--", "true"]);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    wait_with_timeout(&mut a, Duration::from_secs(10));
    wait_with_timeout(&mut b, Duration::from_secs(10));
    let out = ok(&["acquire", "--limit", "2", "--json", "s2"]);
    let owner = serde_json::from_str::<serde_json::Value>(out.stdout.trim()).unwrap()["owner"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&["renew", "--limit", "2", "--owner", &owner, "s2"]);
    ok(&["release", "--limit", "2", "--owner", &owner, "s2"]);
    ok(&["acquire", "--limit", "2", "s3"]);
    // A plain lock on a name in use as a semaphore: refused as a usage
    // error, not as a permission problem.
    let out = run(d().args(["acquire", "s3"]));
    assert_eq!(out.code, 2, "{out:?}");
    ok(&["release", "--force", "--limit", "2", "s3"]);

    // After SCRIPT FLUSH (or a restart) the scripts are loaded again.
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
    let out = token_run(&mut d(), "r");
    assert_eq!(out.code, 0, "{out:?}");
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
    ok(&["list"]);

    // doctor needs PING and INFO besides: named when missing, and enough
    // when granted (exit 1: this test server has no persistence).
    let out = run(d().arg("doctor"));
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.all().contains("may not run PING"), "{out:?}");
    let doctor = acl_user(&server, "doctor", &[], &["+ping", "+info"]);
    let out = run(distlock_at(&doctor).arg("doctor"));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("persistence"), "{out:?}");

    // Nothing outside the prefix was touched.
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    assert!(keys.iter().all(|k| k.starts_with("distlock:")), "{keys:?}");
}

#[test]
fn each_permission_of_the_acl_line_is_needed_and_named_when_missing() {
    let server = RedisServer::start();
    let admin = || distlock(&server);
    let owner_of = |out: &Out| -> String {
        serde_json::from_str::<serde_json::Value>(out.stdout.trim()).unwrap()["owner"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // (command taken away, what the test sets up as the default user, what
    // the restricted user then runs.) Every entry of docs/security.md's line is
    // here, so the line is also shown to be minimal: without any one of
    // them, some subcommand fails.
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, Box<dyn Fn(&str) -> Vec<String> + '_>)> = vec![
        ("+evalsha", Box::new(|n| args(&["acquire", n]))),
        (
            "+script|load",
            Box::new(|n| {
                run(admin().args(["acquire", n]));
                args(&["list"])
            }),
        ),
        ("+get", Box::new(|n| args(&["acquire", n]))),
        ("+set", Box::new(|n| args(&["acquire", n]))),
        ("+del", Box::new(|n| args(&["acquire", n]))),
        ("+exists", Box::new(|n| args(&["acquire", n]))),
        ("+pexpire", Box::new(|n| args(&["acquire", n]))),
        (
            "+pttl",
            Box::new(|n| {
                run(admin().args(["acquire", n]));
                args(&["acquire", n])
            }),
        ),
        ("+time", Box::new(|n| args(&["acquire", n]))),
        ("+type", Box::new(|n| args(&["acquire", n]))),
        ("+hset", Box::new(|n| args(&["acquire", n]))),
        (
            "+hget",
            Box::new(|n| {
                run(admin().args(["acquire", "--limit", "2", n]));
                args(&["inspect", "--limit", "2", n])
            }),
        ),
        (
            "+hdel",
            Box::new(|n| {
                let o = owner_of(&run(admin().args(["acquire", "--json", "--limit", "2", n])));
                args(&["release", "--limit", "2", "--owner", &o, n])
            }),
        ),
        (
            "+hmget",
            Box::new(|n| {
                let o = owner_of(&run(admin().args(["acquire", "--json", n])));
                args(&["release", "--owner", &o, n])
            }),
        ),
        (
            "+hgetall",
            Box::new(|n| {
                run(admin().args(["acquire", n]));
                args(&["inspect", n])
            }),
        ),
        ("+zadd", Box::new(|n| args(&["acquire", "--limit", "2", n]))),
        ("+zrem", Box::new(|n| args(&["acquire", n]))),
        (
            "+zcard",
            Box::new(|n| args(&["acquire", "--limit", "2", n])),
        ),
        (
            "+zcount",
            Box::new(|n| {
                run(admin().args(["acquire", "--limit", "2", n]));
                args(&["acquire", n])
            }),
        ),
        (
            "+zscore",
            Box::new(|n| args(&["acquire", "--limit", "2", n])),
        ),
        (
            "+zrank",
            Box::new(|n| {
                run(admin().args(["acquire", n]));
                args(&["run", "-w", "20s", n, "--", "true"])
            }),
        ),
        ("+zrange", Box::new(|n| args(&["acquire", n]))),
        ("+zrangebyscore", Box::new(|n| args(&["acquire", n]))),
        ("+lrange", Box::new(|n| args(&["history", n]))),
        (
            // A hand-off ends: here a run that finds the job done and
            // nobody left to wake.
            "+xadd",
            Box::new(|n| {
                run(admin().args(["run", "--once-per", "1h", n, "--", "true"]));
                args(&["run", "--once-per", "1h", n, "--", "true"])
            }),
        ),
        (
            // The release reads where ended hand-offs stand.
            "+xrevrange",
            Box::new(|n| {
                let o = owner_of(&run(admin().args(["acquire", "--json", n])));
                args(&["release", "--owner", &o, n])
            }),
        ),
        (
            "+publish",
            Box::new(|n| {
                let o = owner_of(&run(admin().args(["acquire", "--json", n])));
                args(&["release", "--owner", &o, n])
            }),
        ),
        (
            "+subscribe",
            Box::new(|n| {
                run(admin().args(["acquire", n]));
                args(&["run", "-w", "20s", n, "--", "true"])
            }),
        ),
        (
            "+scan",
            Box::new(|n| {
                run(admin().args(["acquire", n]));
                args(&["list"])
            }),
        ),
    ];
    let line = readme_acl_line("x");
    let granted: Vec<&String> = line.iter().filter(|w| w.starts_with('+')).collect();
    // The history's writes: a run still ends with CMD's status, and the
    // release's warning names the command (the lease expires by itself).
    let history_writes = ["+lpush", "+ltrim"];
    // A release seeing its hand-off through (below): it warns, exit 0.
    let relay = "+xread";
    let tested: HashSet<&str> = cases
        .iter()
        .map(|(c, _)| *c)
        .chain(history_writes)
        .chain([relay])
        .collect();
    for g in &granted {
        assert!(tested.contains(g.as_str()), "no case shows {g} is needed");
    }
    assert_eq!(granted.len(), cases.len() + history_writes.len() + 1);
    {
        let url = acl_user(&server, "hblpop", &[relay], &[]);
        let o = owner_of(&run(admin().args(["acquire", "--json", "bl"])));
        let mut waiter = admin()
            .args(["run", "-w", "20s", "bl", "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(wait_until(LIMIT, || server
            .cmd::<i64>(&["ZCARD", "distlock:{bl}:queue"])
            == 1));
        let out = run(distlock_at(&url).args(["release", "--owner", &o, "bl"]));
        assert_eq!(out.code, 0, "without {relay}: {out:?}");
        assert!(
            out.stderr.contains("may not run XREAD") && out.stderr.lines().count() == 1,
            "without {relay}: {out:?}"
        );
        assert!(wait_with_timeout(&mut waiter, LIMIT).success());
    }
    for cmd in history_writes {
        let url = acl_user(&server, &format!("h{}", &cmd[1..]), &[cmd], &[]);
        let out = run(distlock_at(&url).args(["run", "--ttl", "2s", "hw", "--", "true"]));
        assert_eq!(out.code, 0, "without {cmd}: {out:?}");
        let named = cmd.trim_start_matches('+').to_uppercase();
        assert!(
            out.stderr.contains(&format!("may not run {named}")),
            "without {cmd}: {out:?}"
        );
        // The lease expires by itself.
        assert!(wait_until(Duration::from_secs(5), || server
            .get("distlock:{hw}")
            .is_none()));
    }

    for (i, (cmd, setup)) in cases.iter().enumerate() {
        let user = format!("u{i}");
        let url = acl_user(&server, &user, &[cmd], &[]);
        let name = format!("n{i}");
        let a = setup(&name);
        let t = Instant::now();
        let out = run(distlock_at(&url).args(&a));
        assert_eq!(out.code, 125, "without {cmd}: {a:?}: {out:?}");
        assert_one_error_line(&out);
        let named = cmd.trim_start_matches('+').to_uppercase();
        assert!(
            out.stderr.contains(&format!("may not run {named}")),
            "without {cmd}, the message must name {named}: {out:?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{cmd}: {:?}",
            t.elapsed()
        );
    }

    // Keys and channels outside the granted patterns.
    let url = acl_user(&server, "keyless", &["~distlock:*"], &["~other:*"]);
    let out = run(distlock_at(&url).args(["acquire", "k"]));
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stderr.contains("~PREFIX:*"), "{out:?}");
    let url = acl_user(&server, "chanless", &["&distlock:*"], &["&other:*"]);
    run(admin().args(["acquire", "c"]));
    let out = run(distlock_at(&url).args(["run", "-w", "20s", "c", "--", "true"]));
    assert_eq!(out.code, 125, "{out:?}");
    assert!(out.stderr.contains("&PREFIX:*"), "{out:?}");

    // doctor's own two.
    for cmd in ["+ping", "+info"] {
        let extra: Vec<&str> = ["+ping", "+info"]
            .into_iter()
            .filter(|c| c != &cmd)
            .collect();
        let url = acl_user(&server, &format!("doc{}", &cmd[1..]), &[], &extra);
        let out = run(distlock_at(&url).arg("doctor"));
        assert_eq!(out.code, 125, "{out:?}");
        let named = cmd[1..].to_uppercase();
        assert!(
            out.all().contains(&format!("may not run {named}")),
            "{out:?}"
        );
    }
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// Owner ids and names
// ---------------------------------------------------------------------------

#[test]
fn owner_ids_are_distinct_and_carry_128_random_bits() {
    let server = RedisServer::start();
    let ids = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..8 {
            let (server, ids) = (&server, &ids);
            s.spawn(move || {
                for i in 0..125 {
                    let out =
                        run(distlock(server).args(["acquire", "--json", &format!("o{t}-{i}")]));
                    assert_eq!(out.code, 0, "{out:?}");
                    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
                    ids.lock()
                        .unwrap()
                        .push(v["owner"].as_str().unwrap().to_owned());
                }
            });
        }
    });
    let ids = ids.into_inner().unwrap();
    assert_eq!(ids.len(), 1000);
    let host = hostname();
    let mut random = HashSet::new();
    for id in &ids {
        let (rest, hex) = id.rsplit_once(':').unwrap();
        let (h, pid) = rest.rsplit_once(':').unwrap();
        assert_eq!(h, host, "{id}");
        assert!(pid.parse::<u32>().is_ok(), "{id}");
        assert_eq!(hex.len(), 32, "{id}");
        assert!(
            hex.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{id}"
        );
        random.insert(hex.to_owned());
    }
    assert_eq!(random.len(), 1000, "random parts repeat");
    // Each of the 128 bits varies across the sample (a constant bit would
    // mean fewer than 128 random bits).
    let mut ones = [0u32; 128];
    for hex in &random {
        let v = u128::from_str_radix(hex, 16).unwrap();
        for (b, n) in ones.iter_mut().enumerate() {
            *n += ((v >> b) & 1) as u32;
        }
    }
    assert!(ones.iter().all(|&n| (350..=650).contains(&n)), "{ones:?}");
}

#[test]
fn names_that_could_reach_another_key_or_break_the_hash_tag_are_refused() {
    let server = RedisServer::start();
    let long = "a".repeat(201);
    let bad = [
        "a{b",
        "a}b",
        "{x}",
        "x}:fence",
        "a*",
        "a?",
        "a[b]",
        "a b",
        "a\nb",
        "a\tb",
        "",
        "é",
        "a\\b",
        "a\"b",
        "a'b",
        long.as_str(),
    ];
    for name in bad {
        for sub in [
            vec!["run", name, "--", "true"],
            vec!["acquire", name],
            vec!["hold", name],
            vec!["renew", "--owner", "o", name],
            vec!["release", "--owner", "o", name],
            vec!["release", "--force", name],
            vec!["inspect", name],
        ] {
            let out = run(distlock(&server).args(&sub));
            assert_eq!(out.code, 2, "{sub:?}: {out:?}");
            assert_one_error_line(&out);
            assert!(out.stderr.contains("A-Z a-z 0-9"), "{sub:?}: {out:?}");
        }
    }
    for prefix in ["p{x}", "p*", "p }", "", "p\n"] {
        let out = run(distlock(&server).args(["--prefix", prefix, "acquire", "n"]));
        assert_eq!(out.code, 2, "{prefix:?}: {out:?}");
    }
    for owner in ["a b", "a\nb", "", "é"] {
        let out = run(distlock(&server).args(["acquire", "--owner", owner, "n"]));
        assert_eq!(out.code, 2, "{owner:?}: {out:?}");
    }
    let n: i64 = server.cmd(&["DBSIZE"]);
    assert_eq!(n, 0, "a refused name reached redis");
}

// ---------------------------------------------------------------------------
// docs/security.md's TLS set-up, run as written
// ---------------------------------------------------------------------------

#[test]
fn the_readme_tls_set_up_runs_as_written() {
    let readme = include_str!("../../docs/security.md");
    let start = readme
        .find("<!-- tls-setup -->")
        .expect("docs/security.md marks its TLS set-up");
    let block = &readme[start..];
    let block = &block[block.find("```sh\n").unwrap() + 6..];
    let block = &block[..block.find("```").unwrap()];
    assert!(block.contains("6380"), "{block}");

    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let script = block.replace("6380", &port);
    let path = format!(
        "{}:{}",
        bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-euc", &script])
        .current_dir(dir.path())
        .env("PATH", path);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("DISTLOCK_") {
            cmd.env_remove(k);
        }
    }
    let out = run(&mut cmd);
    // Whatever happened, stop the server the script started.
    if let Ok(pid) = std::fs::read_to_string(dir.path().join("tls/redis.pid")) {
        if let Ok(pid) = pid.trim().parse::<i32>() {
            signal(pid, libc::SIGKILL);
        }
    }
    assert_eq!(out.code, 0, "{out:?}");
    // The token CMD printed is the one inspect reports as the last.
    let printed = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("token "))
        .unwrap_or_else(|| panic!("no token line: {out:?}"));
    assert!(printed.parse::<u64>().is_ok(), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("demo: free, last token {printed}")),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------
// Names that old versions took
// ---------------------------------------------------------------------------

#[test]
fn locks_whose_names_start_with_a_dash_left_by_old_versions_are_still_listed() {
    // Old versions took `acquire -- -old`; the name rule now refuses it,
    // but `list` must still show what is held under such a name.
    let server = RedisServer::start();
    let _: () = server.cmd(&["SET", "distlock:{-old}", "vm:1:00", "PX", "60000"]);
    let _: () = server.cmd(&["SET", "distlock:{-old}:fence", "7"]);
    let out = run(distlock(&server).args(["acquire", "new"]));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(distlock(&server).args(["list", "--json"]));
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["-old", "new"], "{v}");
    assert_eq!(v[0]["fencing_token"], 7, "{v}");
    let out = run(distlock(&server).args(["list"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("-old"), "{out:?}");
    assert_eq!(out.stderr, "", "{out:?}");
}

// ---------------------------------------------------------------------------
// A URL user without a password; secrets in CMD's arguments
// ---------------------------------------------------------------------------

/// The users of the connections of other clients than the one asking,
/// from CLIENT LIST.
fn other_clients_users(admin: &mut redis::Connection) -> Vec<String> {
    let me: i64 = redis::cmd("CLIENT").arg("ID").query(admin).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    list.lines()
        .filter(|l| !l.starts_with(&format!("id={me} ")))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("user=")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_url_user_without_a_password_authenticates_as_that_user() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "alice", "on", "nopass", "~*", "&*", "+@all",
    ]);
    let port = server.port;
    let alice = format!("redis://alice@127.0.0.1:{port}");
    // A nopass user takes any password: how the test itself logs in.
    let mut admin = connect(&format!("redis://alice:x@127.0.0.1:{port}"));

    // While `default` still works, nothing may quietly run as `default`:
    // a holder and a waiter (whose subscription is a second connection).
    let mut holder = Holder::spawn_cmd(distlock_at(&alice).args(["run", "u"]), &[]);
    holder.wait_held();
    let mut waiter = distlock_at(&alice)
        .args(["run", "-w", "20s", "u", "--", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || other_clients_users(&mut admin)
            .len()
            >= 3),
        "{:?}",
        other_clients_users(&mut admin)
    );
    let users = other_clients_users(&mut admin);
    assert!(users.iter().all(|u| u == "alice"), "{users:?}");
    assert_eq!(holder.finish().code(), Some(0));
    assert_eq!(
        wait_with_timeout(&mut waiter, Duration::from_secs(20)).code(),
        Some(0)
    );

    // With `default` off only alice can work at all: every subcommand,
    // over TCP and over the unix socket (`?user=`).
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "off"][..])
        .query(&mut admin)
        .unwrap();
    let unix = format!("unix://{}?user=alice", server.socket().display());
    for url in [&alice, &unix] {
        let out = token_run(&mut distlock_at(url), "u");
        assert_eq!(out.code, 0, "{url}: {out:?}");
        let out = run(distlock_at(url).args(["acquire", "--json", "v"]));
        assert_eq!(out.code, 0, "{url}: {out:?}");
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
        let owner = v["owner"].as_str().unwrap();
        for args in [
            vec!["renew", "--owner", owner, "v"],
            vec!["inspect", "v"],
            vec!["list"],
            vec!["release", "--owner", owner, "v"],
        ] {
            let out = run(distlock_at(url).args(&args));
            assert_eq!(out.code, 0, "{url} {args:?}: {out:?}");
        }
    }
    // A user that does not exist is refused, not replaced by `default`.
    let out = token_run(
        &mut distlock_at(&format!("redis://nobody@127.0.0.1:{port}")),
        "u",
    );
    assert_eq!(out.code, 125, "{out:?}");
    assert_one_error_line(&out);
    assert!(out.stderr.contains("auth"), "{out:?}");
}

/// Every value in the server, as text: what other clients can read.
fn everything_in(c: &mut redis::Connection) -> String {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    let mut all = String::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE").arg(&k).query(c).unwrap();
        let v: redis::Value = match kind.as_str() {
            "string" => redis::cmd("GET").arg(&k).query(c),
            "hash" => redis::cmd("HGETALL").arg(&k).query(c),
            "list" => redis::cmd("LRANGE").arg(&k).arg(0).arg(-1).query(c),
            "zset" => redis::cmd("ZRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(c),
            "set" => redis::cmd("SMEMBERS").arg(&k).query(c),
            "stream" => redis::cmd("XRANGE").arg(&k).arg("-").arg("+").query(c),
            other => panic!("{k} is a {other}"),
        }
        .unwrap();
        all.push_str(&format!("{k} = {v:?}\n"));
    }
    all
}

#[test]
fn credentials_in_cmds_arguments_and_distlocks_own_password_never_reach_redis() {
    // Three places distlock learns its password from; each must be masked
    // wherever CMD's arguments carry it verbatim.
    for source in ["url", "env", "file"] {
        let pw = secret(source);
        let server = server_with_password(&pw);
        let port = server.port;
        let dir = tempfile::tempdir().unwrap();
        let pw_file = file(dir.path(), "pw", &format!("{pw}\n"));
        let mut cmd = match source {
            "url" => distlock_at(&format!("redis://:{pw}@127.0.0.1:{port}")),
            "env" => {
                let mut c = distlock(&server);
                c.env("DISTLOCK_REDIS_PASSWORD", &pw);
                c
            }
            _ => {
                let mut c = distlock(&server);
                c.arg("--redis-password-file").arg(&pw_file);
                c
            }
        };
        let (db, cache) = (secret("db"), secret("cache"));
        let args = [
            format!("--db=postgres://app:{db}@db.internal:5432/billing"),
            format!("redis://:{cache}@cache:6379/0"),
            format!("--both=mysql://u:{db}@h1/x,amqp://guest:{cache}@mq/"),
            format!("--own={pw}"),
            "https://example.com/a@b".to_owned(),
            "ssh://git@example.com/repo".to_owned(),
        ];
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut holder = Holder::spawn_cmd(cmd.args(["run", "masked"]), &arg_refs);
        holder.wait_held();

        let out = run(distlock(&server)
            .env("DISTLOCK_REDIS_PASSWORD", &pw)
            .args(["inspect", "--json", "masked"]));
        assert_eq!(out.code, 0, "{out:?}");
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
        let recorded = v["command"].as_str().unwrap_or_else(|| panic!("{v}"));
        let out = run(distlock(&server)
            .env("DISTLOCK_REDIS_PASSWORD", &pw)
            .args(["list"]));
        assert_eq!(out.code, 0, "{out:?}");
        let stored = everything_in(&mut admin(&server, &pw));
        for (what, text) in [
            ("inspect", recorded),
            ("list", &out.stdout),
            ("redis", &stored),
        ] {
            for s in [&pw, &db, &cache] {
                assert_no_secret(s, &format!("{source}: {what}"), text);
            }
        }
        // The users, hosts and everything else are kept.
        for kept in [
            "--db=postgres://app:***@db.internal:5432/billing",
            "redis://:***@cache:6379/0",
            "--both=mysql://u:***@h1/x,amqp://guest:***@mq/",
            "--own=***",
            "https://example.com/a@b",
            "ssh://git@example.com/repo",
        ] {
            assert!(
                recorded.contains(kept),
                "{source}: {kept} not in {recorded}"
            );
        }
        assert_eq!(holder.finish().code(), Some(0));
        let after = everything_in(&mut admin(&server, &pw));
        assert_no_secret(&pw, &format!("{source}: after the run"), &after);
    }
}
