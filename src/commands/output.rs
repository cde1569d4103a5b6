//! How distlock prints: stdout written whole and once per subcommand, with
//! a reader that goes away handled here and nowhere else, and text another
//! client wrote made harmless for a terminal.
//!
//! Owner ids, hosts, commands and records come from whoever can write to
//! the Redis server: any job on any host, through its argv. Printed raw,
//! an ESC or BEL in them would retitle, recolour or clear the terminal of
//! every operator who runs `inspect` or `list`, and a newline would forge
//! a line. So every line distlock prints (stdout and stderr, terminal or
//! not) passes through [`escape`], and JSON through [`json`].

use std::borrow::Cow;
use std::io::{ErrorKind, Write};

use anyhow::Result;

/// `s` with each control character (C0, DEL and the C1 range
/// U+0080–U+009F, which some terminals also obey) written as Rust writes
/// it in a literal: `\n`, `\r`, `\t`, `\x1b`, `\u{9b}`. Everything else,
/// printable non-ASCII included, is unchanged; backslashes are too, so an
/// owner id stays the one to type after `--owner`.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!(r"\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!(r"\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `v` as one line of JSON. serde_json escapes what JSON requires (below
/// U+0020) but writes DEL and the C1 controls as they are; they are only
/// ever inside strings, where `\u00XX` means the same to every reader.
pub fn json(v: &serde_json::Value) -> String {
    let text = v.to_string();
    if !text.chars().any(char::is_control) {
        return text;
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                format!(r"\u{:04x}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Prints `lines` on stdout, each escaped (see [`escape`]) and ended by a
/// newline. See [`print`].
pub fn print_lines<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) -> Result<()> {
    let mut text = String::new();
    for line in lines {
        text.push_str(&escape(line.as_ref()));
        text.push('\n');
    }
    print(&text)
}

/// Prints `v` as one line of JSON on stdout. See [`print`].
pub fn print_json(v: &serde_json::Value) -> Result<()> {
    print(&(json(v) + "\n"))
}

/// [`print`] for output written in parts: false once the reader has gone
/// away, so the caller stops reading the server for output nobody reads.
pub fn print_more(text: &str) -> Result<bool> {
    match write_stdout(text) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
        Ok(()) => Ok(true),
    }
}

/// Writes `text` on stdout, all of it at once. A reader that went away
/// (`distlock list | head -1`; SIGPIPE is ignored, so it is an EPIPE) is
/// no failure, as for ripgrep and C tools: output stops and the caller
/// goes on to exit as if it had printed everything. Any other failure
/// (`> /dev/full`) is an error, and exit 125.
pub fn print(text: &str) -> Result<()> {
    match write_stdout(text) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write to stdout"))
        }
        _ => Ok(()),
    }
}

/// Writes `text` on stdout and flushes it, reporting every failure, a
/// closed pipe included: for `acquire`, whose output is the only record
/// of the lease it took.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// A duration for people, in a table or a line (a lease left, a run's
/// length): `27.3s` below a minute, then whole seconds as humantime writes
/// them, `4m 12s`, `3h 4m 5s`.
pub fn short_duration(d: std::time::Duration) -> String {
    if d < std::time::Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(std::time::Duration::from_secs(d.as_secs())).to_string()
    }
}

/// Unix milliseconds as RFC 3339 in UTC, to the millisecond or the second;
/// None past 9999-12-31T23:59:59.999Z, the last instant RFC 3339 can
/// write (a time another client wrote can be any number).
pub fn rfc3339(ms: u64, millis: bool) -> Option<String> {
    const LAST_MS: u64 = 253_402_300_800_000 - 1;
    if ms > LAST_MS {
        return None;
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    Some(if millis {
        humantime::format_rfc3339_millis(t).to_string()
    } else {
        humantime::format_rfc3339_seconds(t).to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(escape("web-2:7:ab"), "web-2:7:ab");
        assert_eq!(
            escape("a\x1b]0;t\x07\x1b[2J\nb\r\t\x7f\u{9b}c"),
            r"a\x1b]0;t\x07\x1b[2J\nb\r\t\x7f\u{9b}c"
        );
        assert_eq!(escape("héllo ✓ \\x"), "héllo ✓ \\x");
        assert_eq!(escape("\0"), r"\x00");
    }

    #[test]
    fn json_has_no_raw_control_characters_and_means_the_same() {
        let v = serde_json::json!({"owner": "a\x1b[31m\u{9b}\x7f\nb"});
        let text = json(&v);
        assert!(!text.chars().any(char::is_control), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn times_past_the_year_9999_have_no_rfc3339() {
        assert_eq!(
            rfc3339(1_764_633_601_042, true).as_deref(),
            Some("2025-12-02T00:00:01.042Z")
        );
        assert_eq!(
            rfc3339(253_402_300_799_999, false).as_deref(),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(rfc3339(253_402_300_800_000, true), None);
        assert_eq!(rfc3339(u64::MAX, false), None);
    }
}
