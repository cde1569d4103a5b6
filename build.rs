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
    link_hot_code_first();
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

/// A Redis run executes about 600 of the binary's functions, some 0.5 MiB
/// of its 3 MiB of code, but they lay scattered through it, between etcd's,
/// TLS's and the other subcommands' code. The kernel maps the page cache's
/// pages around each page fault on the binary (64 KiB at a time), so that
/// a holding distlock had 2.1 MiB of its code resident: most of its peak
/// RSS (docs/benchmarks.md). A linker script puts the functions listed in
/// link/hot-symbols.txt (from scripts/gen-hot-symbols.sh) first, together:
/// 0.7 MiB resident. Each name is matched twice: exactly, then with its
/// hash as a wildcard. The hashes differ between `cargo build --release`
/// and `cargo bench` (whose dev-dependencies change the crates' metadata),
/// and change with a dependency or toolchain update; the wildcard still
/// finds the function then, with every other instance of a generic one
/// (0.1 MiB more). A name that matches nothing costs nothing: a stale list
/// costs memory, never a build. Only with rust-lld, the default linker on
/// x86_64-unknown-linux-gnu since Rust 1.90, the one this was measured with.
fn link_hot_code_first() {
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let list = Path::new(&var("CARGO_MANIFEST_DIR")).join("link/hot-symbols.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let own_linker = std::env::var_os("RUSTC_LINKER").is_some()
        || ["linker", "fuse-ld", "link-self-contained"]
            .iter()
            .any(|f| flags.contains(f));
    if var("TARGET") != "x86_64-unknown-linux-gnu" || own_linker || !rustc_links_with_lld() {
        return;
    }
    let Ok(names) = std::fs::read_to_string(&list) else {
        return;
    };
    // Only the characters of mangled names: none of a script's own.
    let names: Vec<&str> = names
        .lines()
        .filter(|n| !n.is_empty())
        .filter(|n| {
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_$.".contains(&b))
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let hashless = names.iter().filter_map(|n| {
        let (path, hash) = n.strip_suffix('E')?.rsplit_once("17h")?;
        let is_hash = hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        is_hash.then(|| format!("{path}17h{}E", "?".repeat(16)))
    });
    let hashless: Vec<String> = hashless.filter(|p| seen.insert(p.clone())).collect();
    // Before them, the code that runs before `main` and on every call into
    // libc: the C start files' (`_start`, `frame_dummy`), `.init` (crti's
    // and crtn's, in link order) and the PLT; left where the linker puts
    // them, on the first and last pages of .text, they faulted in a window
    // of cold code each.
    let mut script = String::from(concat!(
        "SECTIONS\n{\n",
        "  .init : { KEEP(*(SORT_NONE(.init))) }\n",
        "  .plt : { *(.plt) *(.iplt) }\n",
        "  .text.hot : {\n",
        "    *crt1.o(.text) *crti.o(.text) *crtn.o(.text) *crtbegin*.o(.text) *crtend*.o(.text)\n",
    ));
    for pattern in names.iter().map(|n| n.to_string()).chain(hashless) {
        script += &format!("    *(.text.{pattern} .text.unlikely.{pattern})\n");
    }
    script += "  }\n}\nINSERT BEFORE .text;\n";
    let path = Path::new(&var("OUT_DIR")).join("hot-text.ld");
    let path_str = path.to_string_lossy();
    if path_str.contains(',') || std::fs::write(&path, script).is_err() {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{path_str}");
}

/// Whether rustc is 1.90 or later, which links x86_64-unknown-linux-gnu
/// with its own lld.
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(release) = text.lines().find_map(|l| l.strip_prefix("release: ")) else {
        return false;
    };
    let mut parts = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
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
