//! TLS for the tests: certificates made with `openssl` once per test
//! binary, and a TLS-only `redis-server` that uses them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{alive, launch_redis, Bounded};

/// Files made once per test binary: a CA, a server certificate for
/// `localhost` and 127.0.0.1, one for `otherhost` only, a client certificate
/// (all signed by the CA), and an unrelated CA with a client certificate of
/// its own.
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// A file of the set, e.g. `ca.pem`, `client.key`.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The set, made on first use.
    pub fn get() -> &'static Pki {
        static PKI: OnceLock<Pki> = OnceLock::new();
        PKI.get_or_init(Pki::make)
    }

    fn make() -> Pki {
        // Under cargo's per-target scratch directory, so nothing piles up
        // in /tmp; one directory per test process, older ones swept.
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(base).unwrap();
        for e in std::fs::read_dir(base).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("tls-pki-") {
                if pid.parse::<i32>().is_ok_and(|p| !alive(p)) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = base.join(format!("tls-pki-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output_within(Duration::from_secs(30));
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let ca = |name: &str, cn: &str| {
            let subj = format!("/CN={cn}");
            let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend(["-days", "2", "-subj", &subj, "-keyout", &key, "-out", &pem]);
            openssl(&args);
        };
        let leaf = |name: &str, cn: &str, ext: &str, ca: &str, serial: &str| {
            let subj = format!("/CN={cn}");
            let (key, csr, pem, extf) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
                format!("{name}.ext"),
            );
            std::fs::write(dir.join(&extf), format!("{ext}\n")).unwrap();
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-subj", &subj, "-keyout", &key, "-out", &csr]);
            openssl(&args);
            let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-set_serial",
                serial,
                "-days",
                "2",
                "-extfile",
                &extf,
                "-out",
                &pem,
            ]);
        };
        ca("ca", "distlock test CA");
        ca("other-ca", "some other CA");
        leaf(
            "server",
            "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "ca",
            "1",
        );
        leaf(
            "otherhost",
            "otherhost",
            "subjectAltName=DNS:otherhost",
            "ca",
            "2",
        );
        leaf(
            "client",
            "distlock client",
            "extendedKeyUsage=clientAuth",
            "ca",
            "3",
        );
        leaf(
            "rogue-client",
            "rogue client",
            "extendedKeyUsage=clientAuth",
            "other-ca",
            "4",
        );
        // The common way, without extensions: OpenSSL makes it X.509 v1.
        let mut args = vec!["req"];
        args.extend(ec);
        args.extend([
            "-subj",
            "/CN=v1 client",
            "-keyout",
            "client-v1.key",
            "-out",
            "client-v1.csr",
        ]);
        openssl(&args);
        openssl(&[
            "x509",
            "-req",
            "-in",
            "client-v1.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "5",
            "-days",
            "2",
            "-out",
            "client-v1.pem",
        ]);
        Pki { dir }
    }
}

/// `redis-server --port 0 --tls-port P`: TLS only, so a test that passes
/// really spoke TLS. Killed and reaped on drop.
pub struct TlsServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl TlsServer {
    /// `cert`: the server certificate's file stem in the PKI directory;
    /// `auth_clients`: `yes` (mutual TLS) or `no`.
    pub fn start(cert: &str, auth_clients: &str) -> TlsServer {
        let pki = Pki::get();
        let (child, port, dir) = launch_redis(
            |port, dir| {
                let port = port.to_string();
                let mut args: Vec<OsString> = ["--port", "0", "--bind", "127.0.0.1"]
                    .into_iter()
                    .chain(["--tls-port", &port, "--tls-auth-clients", auth_clients])
                    .chain(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                    .map(OsString::from)
                    .collect();
                for (opt, file) in [
                    ("--tls-cert-file", pki.path(&format!("{cert}.pem"))),
                    ("--tls-key-file", pki.path(&format!("{cert}.key"))),
                    ("--tls-ca-cert-file", pki.path("ca.pem")),
                    ("--dir", dir.to_owned()),
                    ("--logfile", dir.join("redis.log")),
                ] {
                    args.extend([opt.into(), file.into()]);
                }
                args
            },
            // Ready once *this* process logs it: a server that lost the
            // port race exits instead ("address already in use").
            |_, _, dir| {
                std::fs::read_to_string(dir.join("redis.log"))
                    .is_ok_and(|l| l.contains("Ready to accept connections"))
            },
        );
        TlsServer {
            child,
            port,
            _dir: dir,
        }
    }

    /// `rediss://HOST:PORT`.
    pub fn url(&self, host: &str) -> String {
        format!("rediss://{host}:{}", self.port)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
