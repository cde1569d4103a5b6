//! The Debian package: `cargo deb` builds it, `dpkg -i` installs
//! it into this machine, and what a fleet host needs works from there: the
//! binary in /usr/bin, the man pages, bash completion; `dpkg -r` then leaves
//! nothing behind.
//!
//! It changes the machine, so it runs only as root with dpkg, dpkg-dev,
//! cargo-deb, man-db and bash-completion present (`.ci/run` installs them),
//! and never when a distlock is installed already; otherwise it says on
//! stderr why it skipped. `.ci/run` as root sets
//! `DISTLOCK_PACKAGE_TEST=require`, which turns a skip into a failure, so CI
//! cannot pass without the package.

use crate::common::*;

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The package name in Cargo.toml's `[package.metadata.deb]` (the crate's).
const PACKAGE: &str = "distlock";

/// Runs `cmd` to completion within `limit`, output into files (a release
/// build says more than a pipe holds), and returns it; kills it on timeout.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let status = wait_with_timeout(&mut child, limit);
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether `program --version`-like `args` run and succeed.
fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .try_output_within(Duration::from_secs(60))
        .is_ok_and(|o| o.status.success())
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Why this machine cannot run the test, if it cannot.
fn reason_to_skip() -> Option<String> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (dpkg -i needs root)".into());
    }
    if !works("dpkg", &["--version"]) {
        return Some("no dpkg on this machine".into());
    }
    if !works("dpkg-deb", &["--version"]) {
        return Some("no dpkg-deb on this machine".into());
    }
    if !works("dpkg-shlibdeps", &["--version"]) {
        // Without it cargo-deb only warns and writes no Depends at all.
        return Some("dpkg-shlibdeps is missing (apt-get install dpkg-dev)".into());
    }
    if !cargo()
        .args(["deb", "--version"])
        .try_output_within(Duration::from_secs(60))
        .is_ok_and(|o| o.status.success())
    {
        return Some("cargo-deb is missing (cargo install --locked cargo-deb)".into());
    }
    if works("dpkg", &["-s", PACKAGE]) {
        return Some(format!(
            "package {PACKAGE} is installed already; not replacing it"
        ));
    }
    if Path::new("/usr/bin/distlock").exists() {
        return Some("/usr/bin/distlock exists (not from dpkg); not replacing it".into());
    }
    if !works("man", &["-w", "man"]) {
        return Some("man-db is missing (apt-get install man-db)".into());
    }
    if !Path::new("/usr/share/bash-completion/bash_completion").exists() {
        return Some("bash-completion is missing (apt-get install bash-completion)".into());
    }
    None
}

/// Runs dpkg with `args`, retrying while another dpkg or apt holds its lock
/// (other builds on a shared machine install packages too).
fn dpkg(args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let out = run_bounded(Command::new("dpkg").args(args), Duration::from_secs(120));
        let err = text(&out.stderr);
        let locked = !out.status.success() && err.contains("lock");
        if !locked || Instant::now() >= deadline {
            return out;
        }
        // The lock holder sends no event we can wait for.
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Says why the test does not run: on the real stderr, which libtest does
/// not capture (`eprintln!` would only show if the test failed), or as a
/// failure when CI requires the package test.
fn skip(why: &str) {
    if std::env::var("DISTLOCK_PACKAGE_TEST").as_deref() == Ok("require") {
        panic!("package test required (DISTLOCK_PACKAGE_TEST=require) but: {why}");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "package test skipped: {why}");
}

/// Removes the package on every exit path of the test, so a failed
/// assertion does not leave it installed on the machine.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        if works("dpkg", &["-s", PACKAGE]) {
            let _ = dpkg(&["-r", PACKAGE]);
        }
    }
}

/// `bash` as a user gets it on Tab: bash-completion loaded, the completion
/// for `distlock` looked up on demand in its standard directories.
fn bash_completion_of_distlock() -> Output {
    run_bounded(
        Command::new("bash").args([
            "--norc",
            "--noprofile",
            "-ic",
            ". /usr/share/bash-completion/bash_completion && \
             __load_completion distlock; complete -p distlock",
        ]),
        Duration::from_secs(30),
    )
}

#[test]
fn the_debian_package_installs_works_and_removes_cleanly() {
    let _heavy = heavy();
    if let Some(why) = reason_to_skip() {
        skip(&why);
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    // Build it as the README says. `cargo test` no longer holds the build
    // lock while tests run, so this shares target/ (and its release build).
    let built = run_bounded(
        cargo().current_dir(root).args(["deb", "--locked"]),
        Duration::from_secs(900),
    );
    assert!(built.status.success(), "cargo deb: {built:?}");
    let deb = text(&built.stdout)
        .lines()
        .rev()
        .find(|l| l.trim_end().ends_with(".deb"))
        .map(|l| PathBuf::from(l.trim()))
        .unwrap_or_else(|| panic!("cargo deb printed no .deb path: {built:?}"));
    let version = env!("CARGO_PKG_VERSION");
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("{PACKAGE}_{version}-")) && name.ends_with(".deb"),
        "{name}"
    );

    let fields = run_bounded(
        Command::new("dpkg-deb")
            .arg("-f")
            .arg(&deb)
            .args(["Depends", "Recommends"]),
        Duration::from_secs(30),
    );
    let fields = text(&fields.stdout);
    assert!(
        fields.contains("Depends: libc6"),
        "shared-library Depends: {fields}"
    );
    // build.rs links the unwinder statically: libc is the only library.
    assert!(!fields.contains("libgcc"), "Depends on libgcc_s: {fields}");
    assert!(fields.contains("Recommends: redis-tools"), "{fields}");

    let contents = run_bounded(
        Command::new("dpkg-deb").arg("-c").arg(&deb),
        Duration::from_secs(30),
    );
    let contents: Vec<PathBuf> = text(&contents.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| Path::new("/").join(p.trim_start_matches("./")))
        .collect();
    // The README's links into docs/ work on an installed host too.
    for doc in [
        "README.md",
        "docs/guide.md",
        "docs/guarantees.md",
        "docs/security.md",
    ] {
        let path = Path::new("/usr/share/doc/distlock").join(doc);
        assert!(
            contents.contains(&path),
            "{} not in the package",
            path.display()
        );
    }
    // dpkg would overwrite a file nobody owns without a word (say man pages
    // or completions copied by hand as the old README said), then delete it.
    if let Some(clash) = contents.iter().find(|p| p.exists() && !p.is_dir()) {
        skip(&format!(
            "{} exists already; not replacing it",
            clash.display()
        ));
        return;
    }
    let before = bash_completion_of_distlock();
    assert!(
        !before.status.success(),
        "a distlock completion before install: {before:?}"
    );

    // Directories that exist before the install stay after the removal
    // (/usr/bin, /usr/share/man/man1, ...); everything else must go.
    let dirs_before: HashSet<PathBuf> = contents.into_iter().filter(|p| p.is_dir()).collect();
    let _guard = Installed;
    let installed = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(installed.status.success(), "dpkg -i: {installed:?}");

    // --version from /usr/bin matches Cargo.toml (and the tests' binary).
    let v = run_bounded(
        Command::new("/usr/bin/distlock").arg("--version"),
        Duration::from_secs(10),
    );
    let v = text(&v.stdout);
    assert!(
        v.starts_with(&format!("distlock {version}")),
        "/usr/bin/distlock --version: {v}"
    );
    let ours = run_bounded(bare_distlock().arg("--version"), Duration::from_secs(10));
    assert_eq!(v, text(&ours.stdout), "the package's binary is this build");

    for page in ["distlock", "distlock-run"] {
        let w = run_bounded(
            Command::new("man").args(["-w", page]),
            Duration::from_secs(30),
        );
        let path = text(&w.stdout);
        assert!(
            w.status.success() && path.trim() == format!("/usr/share/man/man1/{page}.1.gz"),
            "man -w {page}: {w:?}"
        );
    }

    let completion = bash_completion_of_distlock();
    let line = text(&completion.stdout);
    assert!(
        completion.status.success() && line.contains("_distlock") && line.contains("distlock"),
        "bash completion after install: {completion:?}"
    );

    // The installed binary takes and releases a lease.
    let server = RedisServer::start();
    let ran = run_bounded(
        Command::new("/usr/bin/distlock")
            .env_remove("DISTLOCK_PREFIX")
            .args(["-r", &server.url(), "run", "pkg-test", "--"])
            .args(["sh", "-c", "echo \"token=$DISTLOCK_FENCING_TOKEN\""]),
        Duration::from_secs(30),
    );
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    let token = text(&ran.stdout);
    let token = token
        .strip_prefix("token=")
        .and_then(|t| t.strip_suffix('\n'))
        .filter(|t| t.parse::<u64>().is_ok_and(|t| t > 0));
    assert!(token.is_some(), "{ran:?}");
    assert_eq!(
        server.get("distlock:{pkg-test}"),
        None,
        "released after CMD"
    );
    // The counter holds the token CMD was given.
    assert_eq!(server.get("distlock:{pkg-test}:fence").as_deref(), token);

    // Removal: every path the package owned is gone, except directories
    // that were there before it.
    let listed = run_bounded(
        Command::new("dpkg").args(["-L", PACKAGE]),
        Duration::from_secs(30),
    );
    assert!(listed.status.success(), "dpkg -L: {listed:?}");
    let owned: Vec<PathBuf> = text(&listed.stdout)
        .lines()
        .filter(|l| l.starts_with('/') && *l != "/.")
        .map(PathBuf::from)
        .collect();
    assert!(
        owned.contains(&PathBuf::from("/usr/bin/distlock")),
        "{owned:?}"
    );
    let removed = dpkg(&["-r", PACKAGE]);
    assert!(removed.status.success(), "dpkg -r: {removed:?}");
    let left: Vec<&PathBuf> = owned
        .iter()
        .filter(|p| p.symlink_metadata().is_ok() && !dirs_before.contains(*p))
        .collect();
    assert!(left.is_empty(), "left behind after dpkg -r: {left:?}");
    assert!(
        !works("dpkg", &["-s", PACKAGE]),
        "dpkg still knows {PACKAGE}"
    );
}
