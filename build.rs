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
}

/// On glibc, std links the unwinder as the shared libgcc_s, only for
/// backtraces and unwinding (the release build aborts on panic). Loading
/// and relocating a second shared library was 0.15 to 0.3 ms of every
/// `distlock run`, and 100 KiB of its resident memory (docs/benchmarks.md). The
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
