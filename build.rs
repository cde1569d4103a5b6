//! Sets `DISTLOCK_VERSION` for `distlock --version`: the package version,
//! plus the commit when built from a git checkout (`0.1.0 (abc1234)`), so a
//! binary found on a fleet host says exactly what it was built from.
//!
//! This must never fail a build: a source tarball has no `.git`, a build
//! host may have no `git`, and a checkout may be damaged. In every such case
//! the version is the plain package version.

use std::path::Path;
use std::process::Command;

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git_commit();
    let full = match commit {
        Some(hash) => format!("{version} ({hash})"),
        None => version,
    };
    println!("cargo:rustc-env=DISTLOCK_VERSION={full}");
    link_the_unwinder_statically();
    order_the_hot_functions_first();
}

/// Hands link/symbol-order.txt (written by scripts/gen-symbol-order.sh) to
/// the linker, which then places the functions an everyday run executes
/// first and together in `.text`. They were spread over the whole 1.8 MB
/// of code, so a run mapped most of it; together they are a few hundred
/// KiB: median peak RSS 3.09 -> 2.13 MiB, page faults 124 -> 103 (issue
/// 15). Only lld knows `--symbol-ordering-file` (Rust's default linker on
/// x86_64 Linux since 1.90; a distribution's rustc may link with GNU ld),
/// so a tiny program is linked with it first, with the same rustc, target
/// and flags: where that fails the binary is built as before. Release
/// builds only (the probe costs a fraction of a second, and only the
/// installed binary's layout matters). A stale list is harmless to
/// correctness: names no longer present are skipped.
fn order_the_hot_functions_first() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let list = Path::new(&var("CARGO_MANIFEST_DIR")).join("link/symbol-order.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    if var("PROFILE") != "release" || !list.exists() {
        return;
    }
    let args = [
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    if links_with(&args) {
        for arg in args {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}

/// Whether rustc, for this target and with this build's flags, links a
/// program when `link_args` are added.
fn links_with(link_args: &[String]) -> bool {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let out = Path::new(&var("OUT_DIR")).join("link-probe");
    let _ = std::fs::create_dir_all(&out);
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args(["--crate-type=bin", "--crate-name=link_probe", "-"])
        .arg("--target")
        .arg(var("TARGET"))
        .arg("--out-dir")
        .arg(&out);
    // The linker cargo resolved for this target (`target.*.linker`), which
    // cargo passes to rustc itself, not through the flags.
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        let mut arg = std::ffi::OsString::from("linker=");
        arg.push(linker);
        cmd.arg("-C").arg(arg);
    }
    for flag in var("CARGO_ENCODED_RUSTFLAGS")
        .split('\x1f')
        .filter(|f| !f.is_empty())
    {
        cmd.arg(flag);
    }
    for arg in link_args {
        cmd.arg("-C").arg(format!("link-arg={arg}"));
    }
    let Ok(mut child) = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(b"fn main() {}");
    }
    child.wait().is_ok_and(|s| s.success())
}

/// On glibc, std links the unwinder as the shared libgcc_s, only for
/// backtraces and unwinding (the release build aborts on panic). Loading
/// and relocating a second shared library was 0.15 to 0.3 ms of every
/// `distlock run`, and 100 KiB of its resident memory (issue 15). The
/// same unwinder from libgcc_eh.a, which gcc ships next to libgcc.a and
/// which every statically linked glibc Rust binary uses, is linked in
/// instead: `--as-needed` then drops libgcc_s, since nothing is left for
/// it to provide. Whole-archive, so that it defines those symbols whatever
/// the order of the link line, before the linker reaches std's `-lgcc_s`.
/// Not when the target links statically: std then links libgcc_eh itself.
fn link_the_unwinder_statically() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let static_crt = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !static_crt
    {
        println!("cargo:rustc-link-lib=static:+whole-archive=gcc_eh");
    }
}

/// The short commit hash of HEAD, if the crate's own directory is a git
/// checkout (a `.git` directory, or a `.git` file in a worktree) and git
/// answers. Only the crate's own `.git` counts: a crate vendored inside some
/// other repository must not take that repository's commit.
fn git_commit() -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let dir = Path::new(&dir);
    if !dir.join(".git").exists() {
        return None;
    }
    let hash = git(dir, &["rev-parse", "--short", "HEAD"])?;
    if hash.is_empty() || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // Rebuild when HEAD moves: HEAD itself (checkout of another branch or a
    // detached commit), the ref it points to (a commit on the branch), and
    // packed-refs (where the ref lives after `git gc`). `--git-path` finds
    // them in a worktree too, whose HEAD is private and whose refs are
    // shared. A path that does not exist is left out: cargo would rerun the
    // script on every build.
    let mut watched = vec![git(dir, &["rev-parse", "--git-path", "HEAD"])];
    if let Some(head_ref) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(dir, &["rev-parse", "--git-path", &head_ref]));
    }
    watched.push(git(dir, &["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        let path = dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(hash)
}

/// Runs git in `dir`; its trimmed stdout if it succeeded, else None.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string())
}
