//! The one table of exit statuses, shared by every subcommand. `TABLE` is
//! the only copy: `distlock --help` (built from it at compile time), the man
//! pages' EXIT STATUS section and the README's table (both rendered from it
//! by `distlock man`) are generated, so they cannot drift apart. Same
//! meanings everywhere, as timeout(1).

use std::process::ExitStatus;

/// The subcommand succeeded.
pub const SUCCESS: u8 = 0;
/// renew/release: the lock is not held by that owner.
pub const NOT_OWNER: u8 = 1;
/// `doctor`: at least one check found a danger. It shares 1 with
/// `NOT_OWNER` because the README, `doctor --help` and scripts already rely
/// on "exit 1 otherwise" (guarantees.md §9 is silent on doctor); no subcommand
/// can return both, so 1 is never ambiguous, and the table says both.
pub const DOCTOR_DANGER: u8 = 1;
/// Usage error: bad option, name, duration, URL.
pub const USAGE: u8 = 2;
/// Lock not acquired (busy, or the wait ran out); `-E` changes it.
pub const CONFLICT: u8 = 75;
/// `run`: the lease was lost and CMD was stopped.
pub const LEASE_LOST: u8 = 124;
/// distlock itself failed: Redis unreachable, auth refused, protocol error.
pub const FAILURE: u8 = 125;
/// CMD was found but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// CMD was not found.
pub const NOT_FOUND: u8 = 127;

/// Which status one row of the table is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// `run` passes CMD's own status through (128+N for signal N), so it
    /// has no single number.
    Cmd,
    /// One fixed status.
    Is(u8),
}

/// One row of the exit table: a status and what it means. `meaning` uses
/// backticks for command and option names, as the README writes them; the
/// plain-text and roff renderings drop them.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub code: Code,
    pub meaning: &'static str,
}

/// The exit table, word for word docs/guarantees.md §9 (plus doctor's
/// use of 1), in ascending order of status.
pub const TABLE: &[Row] = &[
    Row {
        code: Code::Cmd,
        meaning: "`run`: CMD exited by itself; 128+N if signal N ended it",
    },
    Row {
        code: Code::Is(SUCCESS),
        meaning: "subcommand succeeded; `run --once-per`: the job already succeeded in this window and CMD was not started (`--done-exit-code` changes it)",
    },
    Row {
        code: Code::Is(NOT_OWNER),
        meaning: "renew/release: not held by that owner; `doctor`: a check found a danger",
    },
    Row {
        code: Code::Is(USAGE),
        meaning: "usage error: bad option, name, duration, URL",
    },
    Row {
        code: Code::Is(CONFLICT),
        meaning: "lock not acquired (busy, or the wait ran out); `-E` changes it",
    },
    Row {
        code: Code::Is(LEASE_LOST),
        meaning: "`run`: the lease was lost and CMD was stopped",
    },
    Row {
        code: Code::Is(FAILURE),
        meaning: "distlock failed: Redis unreachable, auth refused, protocol error",
    },
    Row {
        code: Code::Is(CANNOT_EXECUTE),
        meaning: "CMD found but could not be executed",
    },
    Row {
        code: Code::Is(NOT_FOUND),
        meaning: "CMD not found",
    },
];

/// How the `Code::Cmd` row names its status.
const CMD_CODE: &str = "CMD's own";

/// The exit-status part of `distlock --help`, rendered from `TABLE` at
/// compile time: start-up is benchmarked, and clap builds its command (with
/// this text) on every run, so the table must cost nothing at run time.
pub const HELP: &str = match std::str::from_utf8(&HELP_BYTES) {
    Ok(s) => s,
    Err(_) => panic!("the exit table is not UTF-8"),
};

const HELP_LEN: usize = render_help(&mut []);
const HELP_BYTES: [u8; HELP_LEN] = {
    let mut out = [0u8; HELP_LEN];
    render_help(&mut out);
    out
};

/// Writes the help text into `out` as far as it fits and returns its full
/// length, so one call with an empty buffer sizes the real one.
const fn render_help(out: &mut [u8]) -> usize {
    /// Width of the status column: the longest status and two spaces.
    const WIDTH: usize = CMD_CODE.len() + 2;
    let mut at = put(out, 0, b"Exit status:\n", false);
    let mut i = 0;
    while i < TABLE.len() {
        at = put(out, at, b"  ", false);
        let start = at;
        at = match TABLE[i].code {
            Code::Cmd => put(out, at, CMD_CODE.as_bytes(), false),
            Code::Is(n) => put_u8(out, at, n),
        };
        while at < start + WIDTH {
            at = put(out, at, b" ", false);
        }
        at = put(out, at, TABLE[i].meaning.as_bytes(), true);
        at = put(out, at, b"\n", false);
        i += 1;
    }
    put(
        out,
        at,
        b"\nSee 'distlock run --help' and man distlock(1).",
        false,
    )
}

/// Copies `s` to `out[at..]` (what fits), dropping backticks when `plain`;
/// returns the position after it.
const fn put(out: &mut [u8], mut at: usize, s: &[u8], plain: bool) -> usize {
    let mut i = 0;
    while i < s.len() {
        if !(plain && s[i] == b'`') {
            if at < out.len() {
                out[at] = s[i];
            }
            at += 1;
        }
        i += 1;
    }
    at
}

/// Writes `n` in decimal at `out[at..]`.
const fn put_u8(out: &mut [u8], at: usize, n: u8) -> usize {
    let digits = [b'0' + n / 100, b'0' + n / 10 % 10, b'0' + n % 10];
    let skip = if n >= 100 {
        0
    } else if n >= 10 {
        1
    } else {
        2
    };
    let (_, tail) = digits.split_at(skip);
    put(out, at, tail, false)
}

/// A row's status as the README and man page write it.
fn code_text(code: Code) -> String {
    match code {
        Code::Cmd => CMD_CODE.to_string(),
        Code::Is(n) => n.to_string(),
    }
}

/// The README's exit table (Markdown), between its `exit-table` markers;
/// `distlock man --exit-table` prints it and tests/it/assets.rs compares.
pub fn markdown() -> String {
    let mut s = String::from("| code | meaning |\n|---|---|\n");
    for row in TABLE {
        s.push_str(&format!("| {} | {} |\n", code_text(row.code), row.meaning));
    }
    s
}

/// The man pages' EXIT STATUS section (roff), one `.TP` entry per row.
pub fn roff() -> String {
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for row in TABLE {
        let meaning = row.meaning.replace('`', "").replace('-', r"\-");
        s.push_str(&format!(".TP\n{}\n{meaning}.\n", code_text(row.code)));
    }
    s
}

/// The shell's view of how a process ended: its exit code, or 128+N when
/// signal N ended it (bash, tini, dumb-init, flock all agree).
pub fn from_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => signal_code(sig),
        (None, None) => FAILURE,
    }
}

/// 128+N for signal N, clamped to a byte as tini does.
pub fn signal_code(sig: i32) -> u8 {
    ((128 + sig) % 256) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn exit_codes_pass_through_and_signals_become_128_plus_n() {
        for code in [0, 1, 2, 64, 126, 127, 254, 255] {
            assert_eq!(from_status(ExitStatus::from_raw(code << 8)), code as u8);
        }
        assert_eq!(from_status(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(from_status(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(signal_code(libc::SIGINT), 130);
    }

    /// Every named status has its row, in ascending order, so none of the
    /// generated copies can leave one out (doctor's 1 was missing once).
    #[test]
    fn every_named_status_has_a_row_in_ascending_order() {
        let codes: Vec<u8> = TABLE
            .iter()
            .filter_map(|r| match r.code {
                Code::Is(n) => Some(n),
                Code::Cmd => None,
            })
            .collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "{codes:?}");
        for named in [
            SUCCESS,
            NOT_OWNER,
            DOCTOR_DANGER,
            USAGE,
            CONFLICT,
            LEASE_LOST,
            FAILURE,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ] {
            assert!(codes.contains(&named), "{named} has no row");
        }
        assert!(TABLE[1].meaning.contains("succeeded"));
        assert!(TABLE
            .iter()
            .any(|r| r.code == Code::Is(1) && r.meaning.contains("doctor")));
    }

    /// The compile-time help text holds every row, aligned, without the
    /// README's backticks.
    #[test]
    fn help_lists_every_row_aligned_and_plain() {
        assert!(HELP.starts_with("Exit status:\n"), "{HELP}");
        assert!(!HELP.contains('`'), "{HELP}");
        assert!(
            HELP.contains("\n  CMD's own  run: CMD exited by itself;"),
            "{HELP}"
        );
        assert!(
            HELP.contains("\n  0          subcommand succeeded; run --once-per: the job already"),
            "{HELP}"
        );
        assert!(HELP.contains("\n  75         lock not acquired"), "{HELP}");
        assert!(HELP.contains("; -E changes it\n"), "{HELP}");
        assert!(HELP.contains("\n  127        CMD not found\n"), "{HELP}");
        assert!(HELP.ends_with("man distlock(1)."), "{HELP}");
        assert_eq!(
            HELP.lines().filter(|l| l.starts_with("  ")).count(),
            TABLE.len()
        );
    }

    #[test]
    fn markdown_and_roff_have_one_entry_per_row() {
        let md = markdown();
        assert_eq!(md.lines().count(), TABLE.len() + 2);
        assert!(md.contains(
            "| 1 | renew/release: not held by that owner; `doctor`: a check found a danger |\n"
        ));
        let roff = roff();
        assert!(roff.starts_with(".SH \"EXIT STATUS\"\n"));
        assert_eq!(roff.matches(".TP\n").count(), TABLE.len());
        assert!(roff.contains(
            ".TP\n75\nlock not acquired (busy, or the wait ran out); \\-E changes it.\n"
        ));
    }
}
