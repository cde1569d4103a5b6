//! The committed completions and man pages must match what the binary
//! generates now; regenerate them with `scripts/gen-assets.sh`.

use std::path::Path;

use crate::common::Bounded;

fn generated(args: &[&str]) -> Vec<u8> {
    let out = crate::common::bare_distlock()
        .args(args)
        .output_within(std::time::Duration::from_secs(30));
    assert!(out.status.success(), "distlock {args:?}: {out:?}");
    out.stdout
}

fn assert_fresh(committed: &Path, fresh: &[u8]) {
    let old = std::fs::read(committed).unwrap_or_else(|e| {
        panic!(
            "{} is missing ({e}); run scripts/gen-assets.sh",
            committed.display()
        )
    });
    assert!(
        old == fresh,
        "{} is stale: run scripts/gen-assets.sh and commit the result",
        committed.display()
    );
}

#[test]
fn committed_completions_are_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("completions");
    for (shell, file) in [
        ("bash", "distlock.bash"),
        ("zsh", "_distlock"),
        ("fish", "distlock.fish"),
        ("elvish", "distlock.elv"),
        ("powershell", "_distlock.ps1"),
    ] {
        let fresh = generated(&["completions", shell]);
        assert!(String::from_utf8_lossy(&fresh).contains("acquire"));
        assert_fresh(&dir.join(file), &fresh);
    }
}

/// The hidden page writer has no default directory: run by mistake in
/// some project's root, it must not overwrite a `man/` there.
#[test]
fn the_man_page_writer_needs_a_directory_and_writes_nothing_without_one() {
    let cwd = tempfile::tempdir().unwrap();
    let out = crate::common::bare_distlock()
        .arg("man")
        .current_dir(cwd.path())
        .output_within(std::time::Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("distlock: ") && stderr.contains("--dir"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(cwd.path()).unwrap().count(), 0);
}

#[test]
fn committed_man_pages_are_up_to_date() {
    let tmp = tempfile::tempdir().unwrap();
    generated(&["man", "--dir", tmp.path().to_str().unwrap()]);
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let mut fresh_names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    fresh_names.sort();
    let mut committed_names: Vec<_> = std::fs::read_dir(&committed)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    committed_names.sort();
    assert_eq!(
        fresh_names, committed_names,
        "man/ has other pages than distlock generates"
    );
    for name in &fresh_names {
        let fresh = std::fs::read(tmp.path().join(name)).unwrap();
        assert_fresh(&committed.join(name), &fresh);
    }
    let run = String::from_utf8(std::fs::read(committed.join("distlock-run.1")).unwrap()).unwrap();
    for section in ["EXIT STATUS", "ENVIRONMENT", "EXAMPLES", "kill\\-grace"] {
        assert!(run.contains(section), "distlock-run.1 lacks {section}");
    }
    // The help headings are subsections of OPTIONS, in run --help's order,
    // not sections of their own next to EXAMPLES.
    let sections: Vec<&str> = run
        .lines()
        .filter(|l| l.starts_with(".SH ") || l.starts_with(".SS "))
        .collect();
    let options = sections.iter().position(|l| *l == ".SH OPTIONS");
    let options = options.expect("distlock-run.1 has an OPTIONS section");
    let expected = [
        ".SS \"Lease\"",
        ".SS \"Waiting\"",
        ".SS \"Stopping CMD\"",
        ".SS \"Cron and CI\"",
        ".SS \"Connection and security\"",
    ];
    assert_eq!(
        sections[options + 1..options + 1 + expected.len()],
        expected,
        "distlock-run.1: {sections:?}"
    );
    let lease = run.find(".SS \"Lease\"").unwrap();
    let waiting = run.find(".SS \"Waiting\"").unwrap();
    let ttl = run[lease..]
        .find("\\fB\\-\\-ttl\\fR")
        .map(|i| lease + i)
        .expect("distlock-run.1 documents --ttl under a heading");
    assert!(ttl < waiting, "--ttl is under Lease, not a later heading");
}

/// The README's exit table is the binary's (`src/exit.rs`), between its
/// marker comments, so the README cannot drift from `--help` and the man
/// pages.
#[test]
fn readme_exit_table_is_the_generated_one() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("<!-- exit-table:start")
        .expect("README has an <!-- exit-table:start --> marker");
    let body = &readme[start..];
    let body = &body[body.find("-->").unwrap() + 3..];
    let end = body
        .find("<!-- exit-table:end -->")
        .expect("README has an <!-- exit-table:end --> marker");
    let fresh = String::from_utf8(generated(&["man", "--exit-table"])).unwrap();
    assert!(
        fresh.contains("| 124 | `run`: the lease was lost"),
        "{fresh}"
    );
    assert_eq!(
        body[..end].trim(),
        fresh.trim(),
        "README's exit table is stale: run scripts/gen-assets.sh and commit the result"
    );
    // The same rows reach `--help` and every man page.
    let help = String::from_utf8(generated(&["--help"])).unwrap();
    let man = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("man/distlock-doctor.1"),
    )
    .unwrap();
    for line in fresh.lines().skip(2) {
        let code = line.split(" | ").next().unwrap().trim_start_matches("| ");
        assert!(
            help.contains(&format!("\n  {code} ")),
            "--help lacks {code}: {help}"
        );
        assert!(
            man.contains(&format!(".TP\n{code}\n")),
            "man page lacks {code}"
        );
    }
}
