//! `distlock history`: how the last runs of a name ended, for the operator
//! the morning after (did it run, where, how long, did it fail first) and,
//! with `--json`, for programs.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Result;

use super::output::{escape, print, print_json, rfc3339, short_duration};
use super::{Global, IO_TIMEOUT};
use crate::config::HistoryConfig;
use crate::store::{HistoryRecord, LockKeys, RunOutcome};

/// `distlock history NAME [-n N] [--json]`.
pub fn history(g: &Global, args: HistoryConfig) -> Result<u8> {
    let keys = LockKeys::new(&g.prefix, &args.name);
    let history = g.store(IO_TIMEOUT).history(&keys, args.count)?;
    if history.foreign > 0 {
        g.say(format_args!(
            "warning: skipped {} of the newest {} entries of {}: not distlock run records (another client wrote them)",
            history.foreign, args.count, keys.history
        ));
    }
    let records = history.records;
    if args.json {
        print_json(&serde_json::Value::Array(
            records.iter().map(record_json).collect(),
        ))?;
        return Ok(0);
    }
    let fancy = std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    print(&render(&records, fancy))?;
    Ok(0)
}

fn record_json(r: &HistoryRecord) -> serde_json::Value {
    let mut v = serde_json::json!({
        "started_at": rfc3339(r.started_ms, true),
        "duration_ms": r.duration_ms,
        "host": r.host,
        "pid": r.pid,
        "owner": r.owner,
        "fencing_token": r.token,
        "outcome": r.outcome.as_str(),
        "exit_code": r.exit_code,
    });
    if let Some(by) = r.outcome.stopped_by() {
        v["stopped_by"] = by.into();
    }
    v
}

/// The symbol of a run in the summary line: plain ASCII, or for a person
/// at a terminal a coloured one (green, red, yellow, dim).
fn symbol(o: RunOutcome, fancy: bool) -> &'static str {
    match (o, fancy) {
        (RunOutcome::Success, false) => "+",
        (RunOutcome::Failed | RunOutcome::Signaled | RunOutcome::NotStarted, false) => "x",
        (RunOutcome::LeaseLost | RunOutcome::MaxHold, false) => "!",
        (RunOutcome::SkippedDone, false) => "-",
        (RunOutcome::Success, true) => "\x1b[32m✔\x1b[0m",
        (RunOutcome::Failed | RunOutcome::Signaled | RunOutcome::NotStarted, true) => {
            "\x1b[31m✘\x1b[0m"
        }
        (RunOutcome::LeaseLost | RunOutcome::MaxHold, true) => "\x1b[33m!\x1b[0m",
        (RunOutcome::SkippedDone, true) => "\x1b[2m·\x1b[0m",
    }
}

/// What `history` prints: nothing for no records; else the summary line
/// (oldest to newest, so a week of nights reads left to right), then one
/// line per run, newest first, in aligned columns. Every cell another
/// client wrote is escaped; only the symbols carry escape sequences.
fn render(records: &[HistoryRecord], fancy: bool) -> String {
    if records.is_empty() {
        return String::new();
    }
    let mut text: String = records
        .iter()
        .rev()
        .map(|r| symbol(r.outcome, fancy))
        .collect();
    text.push('\n');
    let rows: Vec<[String; 5]> = records
        .iter()
        .map(|r| {
            let outcome = match r.outcome {
                RunOutcome::Success => "success".to_owned(),
                o => match o.stopped_by() {
                    Some(by) => format!("{} by {by} (exit {})", o.as_str(), r.exit_code),
                    None => format!("{} (exit {})", o.as_str(), r.exit_code),
                },
            };
            [
                rfc3339(r.started_ms, false).unwrap_or_else(|| format!("at_ms {}", r.started_ms)),
                escape(&r.host).into_owned(),
                short_duration(Duration::from_millis(r.duration_ms)),
                outcome,
                r.token.map_or("-".to_owned(), |t| format!("token {t}")),
            ]
        })
        .collect();
    let mut widths = [0; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(outcome: RunOutcome, host: &str, duration_ms: u64) -> HistoryRecord {
        HistoryRecord {
            started_ms: 1_764_633_601_042,
            duration_ms,
            host: host.into(),
            pid: 7,
            owner: format!("{host}:7:ab"),
            token: (outcome != RunOutcome::SkippedDone).then_some(41),
            outcome,
            exit_code: match outcome {
                RunOutcome::Success | RunOutcome::SkippedDone => 0,
                _ => 3,
            },
        }
    }

    #[test]
    fn the_summary_reads_oldest_to_newest_and_columns_line_up() {
        let records = [
            rec(RunOutcome::SkippedDone, "web-2", 0),
            rec(RunOutcome::Success, "web-1", 62_000),
            rec(RunOutcome::LeaseLost, "a-much-longer-host\x1b[2J", 400),
            rec(RunOutcome::Failed, "web-3", 12_345),
        ];
        let text = render(&records, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "x!+-");
        assert_eq!(lines.len(), 5);
        assert!(text.is_ascii() && !text.contains('\x1b'), "{text}");
        assert!(lines[3].contains(r"a-much-longer-host\x1b[2J"), "{text}");
        // Every column starts at the same place on every line.
        let col = |l: &str| l.find("token").or_else(|| l.rfind('-')).unwrap();
        assert!(lines[2..].iter().all(|l| col(l) == col(lines[1])), "{text}");
        assert!(
            lines[2].contains("1m 2s") && lines[4].contains("12.3s"),
            "{text}"
        );
        assert!(lines[4].contains("failed (exit 3)"), "{text}");
        assert!(lines[1].starts_with("2025-12-02T00:00:01Z"), "{text}");

        let fancy = render(&records, true);
        assert!(fancy.lines().next().unwrap().contains('✔'), "{fancy}");
        // Colour only in the summary; the rows are the same.
        assert_eq!(fancy.lines().skip(1).collect::<Vec<_>>(), lines[1..]);

        assert_eq!(render(&[], true), "");
    }
}
