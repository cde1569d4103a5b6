//! `distlock man --dir D`: the man pages, from the clap definition.

use anyhow::Result;

/// `distlock man --dir D`: writes `distlock.1` and one page per visible
/// subcommand. clap_mangen renders the usual sections; we add EXAMPLES (from
/// each command's long help), EXIT STATUS and ENVIRONMENT, as flock(1) has,
/// and turn the help headings into subsections of OPTIONS. `cli` is the
/// clap definition and `headings` its help headings (`main` passes them,
/// so the subcommands need nothing of `cli`).
pub fn man(dir: &std::path::Path, cli: clap::Command, headings: &[&str]) -> Result<()> {
    fn page(cmd: &clap::Command, dir: &std::path::Path, headings: &[&str]) -> Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            page(sub, dir, headings)?;
        }
        // clap_mangen's own SYNOPSIS lists every option in declaration
        // order, which shuffles run's options and the global ones together
        // again; the OPTIONS subsections list them properly, so the
        // synopsis is clap's short usage line, as `--help` prints it.
        let usage = cmd.clone().render_usage().to_string();
        let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).to_string();
        let man = clap_mangen::Man::new(cmd.clone().override_usage(usage))
            .date("")
            .source("distlock");
        let mut out = Vec::new();
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            let mut options = Vec::new();
            man.render_options_section(&mut options)?;
            out.extend_from_slice(
                headings_as_subsections(&String::from_utf8(options)?, headings).as_bytes(),
            );
        }
        if cmd.has_subcommands() {
            man.render_subcommands_section(&mut out)?;
        }
        if let Some(examples) = cmd.get_after_long_help() {
            let text = examples.to_string();
            let body = text.strip_prefix("Examples:\n").unwrap_or(&text);
            out.extend_from_slice(b".SH EXAMPLES\n.nf\n");
            out.extend_from_slice(roff_escape(body).as_bytes());
            out.extend_from_slice(b"\n.fi\n");
        }
        out.extend_from_slice(crate::exit::roff().as_bytes());
        out.extend_from_slice(MAN_ENV.as_bytes());
        man.render_version_section(&mut out)?;
        std::fs::write(dir.join(man.get_filename()), out)?;
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    // The plain package version, not `--version`'s commit (build.rs): the
    // pages are committed, and a commit hash in them would make them stale
    // with every commit.
    let mut cmd = cli
        .disable_help_subcommand(true)
        .version(env!("CARGO_PKG_VERSION"));
    cmd.build();
    page(&cmd, dir, headings)
}

/// clap_mangen turns each help heading into a section of its own (`.SH
/// LEASE` next to `.SH EXAMPLES`); man pages group options as subsections of
/// OPTIONS instead (as git(1) and curl(1) do), so a reader finds every option
/// under one section and `/^OPTIONS` still works. Rewrites the heading
/// sections of `headings` into `.SS` lines under one `.SH OPTIONS`.
fn headings_as_subsections(roff: &str, headings: &[&str]) -> String {
    let mut out = String::new();
    let mut have_options = false;
    for line in roff.lines() {
        let section = line.strip_prefix(".SH ").map(|s| s.trim_matches('"'));
        if section == Some("OPTIONS") {
            have_options = true;
        }
        let heading =
            section.and_then(|s| headings.iter().copied().find(|h| h.to_uppercase() == s));
        match heading {
            Some(h) => {
                if !have_options {
                    out.push_str(".SH OPTIONS\n");
                    have_options = true;
                }
                out.push_str(&format!(".SS \"{h}\"\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Escapes text for a roff `.nf` block: backslashes, and leading dots or
/// quotes that roff would read as requests.
fn roff_escape(s: &str) -> String {
    s.lines()
        .map(|l| {
            let l = l.replace('\\', r"\e").replace('-', r"\-");
            if l.starts_with('.') || l.starts_with('\'') {
                format!(r"\&{l}")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The ENVIRONMENT section, word for word the README's table; EXIT STATUS
/// comes before it, rendered from `exit::TABLE`.
const MAN_ENV: &str = r#".SH ENVIRONMENT
.TP
DISTLOCK_URL, DISTLOCK_REDIS_URL
Default for \-\-url (alias \-\-redis\-url), the first one set; else
redis://127.0.0.1:6379. In CMD's environment without a password.
.TP
DISTLOCK_PREFIX
Default for \-\-prefix (distlock).
.TP
DISTLOCK_TTL
Default for \-\-ttl of run, acquire and renew (30s).
.TP
DISTLOCK_OWNER
Default for \-\-owner of renew and release; set by eval of acquire's output.
.TP
DISTLOCK_NAME, DISTLOCK_KEY, DISTLOCK_OWNER, DISTLOCK_FENCING_TOKEN
Set by run in CMD's environment: the lock name, its Redis key, the owner id
and the fencing token of this acquisition. Pass the token to the storage CMD
writes to, so a late writer is turned away.
.TP
DISTLOCK_REDIS_PASSWORD
Removed from CMD's environment.
"#;
