//! The status line of a waiting `run` or `acquire` at a terminal: who
//! holds the lock, for how long, our place in the queue and how long we
//! have waited, redrawn in place about once a second and erased when the
//! wait ends. It is drawn from what the last attempt's reply said (see
//! `lease::Watch`), so watching costs the server nothing.

use std::cell::Cell;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use super::output::escape;
use super::Global;
use crate::lease::{Waiting, Watch};

/// How often the line is redrawn.
const EVERY: Duration = Duration::from_secs(1);

/// Goes back to the start of the line and clears it.
const ERASE: &str = "\r\x1b[K";

/// The status line on stderr, or nothing when nobody can see it.
pub struct StatusLine {
    name: String,
    on: bool,
    drawn: Cell<bool>,
}

impl StatusLine {
    /// Shown only to a person: stderr a terminal that understands the
    /// erase sequence (not `TERM=dumb`), and not `-q`.
    pub fn new(g: &Global, name: &str) -> StatusLine {
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        StatusLine {
            name: name.to_owned(),
            on: !g.quiet && !dumb && std::io::stderr().is_terminal(),
            drawn: Cell::new(false),
        }
    }
}

impl Watch for StatusLine {
    fn every(&self) -> Option<Duration> {
        self.on.then_some(EVERY)
    }

    fn show(&self, waiting: &Waiting, now: Duration) {
        let text = line(&self.name, waiting, now, columns());
        // A write that fails (stderr gone) costs only the line.
        let _ = write!(std::io::stderr().lock(), "{ERASE}{text}");
        self.drawn.set(true);
    }

    fn end(&self) {
        if self.drawn.replace(false) {
            let _ = write!(std::io::stderr().lock(), "{ERASE}");
        }
    }
}

/// The terminal's width, 0 when unknown.
fn columns() -> usize {
    // SAFETY: TIOCGWINSZ fills the winsize it is given, nothing else.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) == 0 {
            return usize::from(ws.ws_col);
        }
    }
    0
}

/// What the line says at `now`, cut to fit `cols` columns (0: no limit)
/// so it never wraps, which would defeat the redraw. The holder's command,
/// of any length, comes last, so a cut takes it and nothing else. Text
/// from other clients (host, command, owner id) is escaped.
pub fn line(name: &str, w: &Waiting, now: Duration, cols: usize) -> String {
    let m = &w.watched;
    let waited = format!("waited {}", short(now.saturating_sub(w.since)));
    let ours = match m.place {
        Some(place) => format!("{} in line, {waited}", ordinal(place + 1)),
        None => waited,
    };
    let mut text = format!("distlock: waiting for {name} ({ours}): ");
    if let Some(holder) = &w.holder {
        text.push_str("held by ");
        text.push_str(&escape(m.host.as_deref().unwrap_or(holder.as_str())));
        if let Some(pid) = m.pid {
            text.push_str(&format!(" pid {pid}"));
        }
        if let Some(held) = m.held {
            let since_reply = now.saturating_sub(w.seen_at);
            text.push_str(&format!(" for {}", short(held + since_reply)));
        }
        if let Some(cmd) = &m.command {
            text.push_str(&format!(": {}", escape(cmd)));
        }
    } else if w.ahead.is_some() {
        text.push_str("being handed to the next in line");
    } else if w.unacked {
        text.push_str("waiting for replicas to acknowledge");
    } else {
        text.push_str("free, trying again");
    }
    match cols {
        0 => text,
        n => text.chars().take(n - 1).collect(),
    }
}

/// `7s`, `1m05s`, `2h03m`: whole seconds, short enough to redraw.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, … `11th`, `12th`, `13th`, `21st`.
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Watched;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A wait that started at 100 s on the fake clock, whose last reply
    /// came at 110 s.
    fn waiting(watched: Watched) -> Waiting {
        Waiting {
            holder: Some("web-1:4242:ab".into()),
            ahead: None,
            unacked: false,
            watched,
            seen_at: secs(110),
            since: secs(100),
        }
    }

    fn full() -> Watched {
        Watched {
            host: Some("web-1".into()),
            pid: Some(4242),
            command: Some("./bill --all".into()),
            held: Some(secs(63)),
            place: Some(1),
        }
    }

    #[test]
    fn the_line_names_holder_time_held_place_and_time_waited() {
        let w = waiting(full());
        assert_eq!(
            line("nightly", &w, secs(110), 0),
            "distlock: waiting for nightly (2nd in line, waited 10s): held by web-1 pid 4242 for 1m03s: ./bill --all"
        );
        // Redrawn later from the same reply: both clocks move on.
        assert_eq!(
            line("nightly", &w, secs(112), 0),
            "distlock: waiting for nightly (2nd in line, waited 12s): held by web-1 pid 4242 for 1m05s: ./bill --all"
        );
    }

    #[test]
    fn what_is_unknown_is_left_out() {
        let w = waiting(Watched::default());
        assert_eq!(
            line("n", &w, secs(100), 0),
            "distlock: waiting for n (waited 0s): held by web-1:4242:ab"
        );
        let handed = Waiting {
            holder: None,
            ahead: Some("w".into()),
            watched: Watched {
                place: Some(0),
                ..Watched::default()
            },
            ..waiting(Watched::default())
        };
        assert_eq!(
            line("n", &handed, secs(3700), 0),
            "distlock: waiting for n (1st in line, waited 1h00m): being handed to the next in line"
        );
    }

    #[test]
    fn foreign_text_is_escaped_and_the_line_fits_the_terminal() {
        let w = waiting(Watched {
            host: Some("evil\x1b[2J".into()),
            command: Some("rm\nx".into()),
            ..full()
        });
        let text = line("n", &w, secs(110), 0);
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(
            text.contains(r"evil\x1b[2J") && text.contains(r"rm\nx"),
            "{text}"
        );
        let cut = line("n", &w, secs(110), 60);
        assert_eq!(cut.chars().count(), 59, "{cut}");
        assert!(text.starts_with(&cut));
        assert!(cut.contains("2nd in line, waited 10s"), "{cut}");
    }

    #[test]
    fn durations_and_places_read_short() {
        assert_eq!(short(Duration::from_millis(999)), "0s");
        assert_eq!(short(secs(59)), "59s");
        assert_eq!(short(secs(60)), "1m00s");
        assert_eq!(short(secs(3599)), "59m59s");
        assert_eq!(short(secs(7380)), "2h03m");
        let o: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            o,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th"
            ]
        );
    }
}
