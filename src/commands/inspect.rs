//! `inspect` and `list`: who holds what, for people and programs.

use std::time::Duration;

use anyhow::{bail, Result};

use super::output::{
    self, escape, print_json, print_lines, print_more, rfc3339, short_duration as fmt_ttl,
};
use super::{Global, IO_TIMEOUT};
use crate::config::{InspectConfig, UsageError};
use crate::store::{
    DoneMark, Found, LockInfo, LockKeys, SlotsInfo, Store, StoreError, Waiter, Waiters,
};

/// `distlock inspect`: one lock, for people or (with --json) programs.
pub fn inspect(g: &Global, args: InspectConfig) -> Result<u8> {
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let mut store = g.store(IO_TIMEOUT);
    if keys.limit.is_some() {
        return inspect_slots(&mut store, &keys, args.json);
    }
    let info = store.inspect(&keys)?;
    unreadable(&keys, &info)?;
    if args.json {
        print_json(&info_json(&keys, &info))?;
        return Ok(0);
    }
    let mut lines = Vec::new();
    let token = match info.token {
        Some(t) => format!("token {t}"),
        None => "never acquired".to_owned(),
    };
    match &info.holder {
        Some(owner) => {
            let expires = info.ttl.map_or("no expiry".to_owned(), |t| {
                format!("expires in {}", fmt_ttl(t))
            });
            lines.push(format!(
                "{}: held by {owner}, {expires}, {token}",
                keys.name
            ));
            let m = Meta::of(&info);
            if let Some(at) = m.acquired_at() {
                let mut line = format!("  acquired {at}");
                if let Some(host) = m.host {
                    line.push_str(&format!(" on {host}"));
                }
                if let Some(pid) = m.pid {
                    line.push_str(&format!(", pid {pid}"));
                }
                if let Some(cmd) = m.command {
                    line.push_str(&format!(": {cmd}"));
                }
                lines.push(line);
            }
        }
        None => {
            let last = match info.token {
                Some(t) => format!("last token {t}"),
                None => token,
            };
            lines.push(format!("{}: free, {last}", keys.name));
        }
    }
    if let Some(w) = info.waiters.as_ref().filter(|w| w.count > 0) {
        lines.push(waiters_line(w));
        if info.holder.is_none() {
            lines.push(format!(
                "  a call without --wait yields to them; 'distlock release {} --force' removes them",
                keys.name
            ));
        }
    }
    if let Some(last) = LastRunView::of(&info.last_run) {
        lines.push(format!("  last run: {}", last.line()));
    }
    if let Some(mark) = &info.done {
        lines.push(format!("  done: {}", DoneView(mark).line()));
    }
    print_lines(lines)?;
    Ok(0)
}

/// `  queue: 2 waiting: a (lease expires in 28s), b (no lease: ...)`.
fn waiters_line(w: &Waiters) -> String {
    let each: Vec<String> = w
        .first
        .iter()
        .map(|x| format!("{} ({})", escape(&x.owner), waiter_lease(x)))
        .collect();
    let more = match w.count.saturating_sub(w.first.len() as u64) {
        0 => String::new(),
        n => format!(", and {n} more"),
    };
    format!("  queue: {} waiting: {}{more}", w.count, each.join(", "))
}

fn waiter_lease(w: &Waiter) -> String {
    match w.ttl {
        Some(t) => format!("lease expires in {}", fmt_ttl(t)),
        None => "no lease: stays until deleted".to_owned(),
    }
}

/// The queue in `inspect --json`: how many wait, and the first of them.
fn waiters_json(w: &Waiters) -> serde_json::Value {
    let first: Vec<_> = w
        .first
        .iter()
        .map(|x| {
            serde_json::json!({
                "owner": x.owner,
                "ttl_ms": x.ttl.map(|t| t.as_millis() as u64),
            })
        })
        .collect();
    serde_json::json!({ "count": w.count, "first": first })
}

/// A key of a lock that holds a value distlock cannot read: treated like
/// a key of another type (`store::ForeignKey`), that is refused by name,
/// left alone, and skipped by `list`.
#[derive(Debug)]
pub(super) struct Unreadable {
    /// The full Redis key.
    pub key: String,
    /// What in it cannot be read.
    pub what: &'static str,
    /// How an operator gets rid of it.
    pub fix: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the key {} holds {} that distlock cannot read, written by something else: it does not hold a distlock lease (distlock left it alone; {})",
            self.key, self.what, self.fix
        )
    }
}

impl std::error::Error for Unreadable {}

/// The done mark of `run --once-per` decides whether CMD runs, so a time
/// in it that cannot be read (after the year 9999: the acquire script
/// takes it for a run that succeeded in the future, and the job would
/// never run again) is refused by name rather than shown as a guess.
/// Other times (acquired, last run) only inform, and show as unknown.
pub(super) fn readable_done(keys: &LockKeys, mark: &DoneMark) -> Result<(), Unreadable> {
    match rfc3339(mark.at_ms, false) {
        Some(_) => Ok(()),
        None => Err(Unreadable {
            key: keys.done.clone(),
            what: "a done mark with a time outside the years 1970 to 9999",
            fix: format!("'distlock release {} --forget-done' deletes it", keys.name),
        }),
    }
}

/// [`readable_done`] for what `inspect` read.
fn unreadable(keys: &LockKeys, info: &LockInfo) -> Result<(), Unreadable> {
    info.done
        .as_ref()
        .map_or(Ok(()), |m| readable_done(keys, m))
}

/// The done mark of `run --once-per` as `inspect`, `list` and `release
/// --forget-done` show it.
pub(super) struct DoneView<'a>(pub(super) &'a DoneMark);

impl DoneView<'_> {
    /// RFC 3339, UTC, milliseconds: the acquisition of the run that
    /// succeeded, on the server's clock.
    fn at(&self) -> Option<String> {
        rfc3339(self.0.at_ms, true)
    }

    /// `2026-12-02T00:00:01.042Z on web-2, token 41, expires in 19h 58m`
    pub(super) fn line(&self) -> String {
        // Only `release --forget-done` shows a mark it could not read
        // (it deletes it first).
        let at = self.at().unwrap_or_else(|| "an unreadable time".to_owned());
        let mut line = format!("{at} on {}, token {}", self.host(), self.0.token);
        if let Some(left) = self.0.expires_in {
            line.push_str(&format!(", expires in {}", fmt_ttl(left)));
        }
        line
    }

    fn host(&self) -> &str {
        if self.0.host.is_empty() {
            "an unknown host"
        } else {
            &self.0.host
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "at": self.at(),
            "host": self.0.host,
            "fencing_token": self.0.token,
            "owner": self.0.owner,
            "expires_in_ms": self.0.expires_in.map(|d| d.as_millis() as u64),
        })
    }
}

/// `inspect --limit N`: a semaphore's holders.
fn inspect_slots(store: &mut Store, keys: &LockKeys, json: bool) -> Result<u8> {
    let info = store.inspect_slots(keys)?;
    let n = keys.limit.unwrap_or(1);
    if let Some(agreed) = info.limit.filter(|&l| l != n && !info.holders.is_empty()) {
        bail!(UsageError(format!(
            "{} is a semaphore with --limit {agreed}, not {n}",
            keys.name
        )));
    }
    if json {
        print_json(&slots_json(keys, &info))?;
        return Ok(0);
    }
    let mut lines = vec![format!(
        "{}: {} of {n} slots held{}",
        keys.name,
        info.holders.len(),
        info.token
            .map_or(", never acquired".into(), |t| format!(", last token {t}"))
    )];
    for (o, left, t) in &info.holders {
        lines.push(format!("  {o}, expires in {}, token {t}", fmt_ttl(*left)));
    }
    if let Some(last) = LastRunView::of(&info.last_run) {
        lines.push(format!("  last run: {}", last.line()));
    }
    print_lines(lines)?;
    Ok(0)
}

/// The `inspect --limit N --json` object (also in `list --json`).
fn slots_json(keys: &LockKeys, info: &SlotsInfo) -> serde_json::Value {
    let holders: Vec<_> = info
        .holders
        .iter()
        .map(|(o, left, t)| {
            serde_json::json!({"owner": o, "ttl_ms": left.as_millis() as u64, "fencing_token": t})
        })
        .collect();
    serde_json::json!({
        "name": keys.name,
        "key": keys.slots,
        "held": !info.holders.is_empty(),
        "limit": keys.limit.unwrap_or(1),
        "holders": holders,
        "fencing_token": info.token,
        "last_run": LastRunView::of(&info.last_run).map(|l| l.json()),
    })
}

/// The last-run record as `inspect` shows it.
struct LastRunView<'a> {
    host: &'a str,
    owner: &'a str,
    started_ms: Option<u64>,
    duration_ms: Option<u64>,
    exit: Option<u8>,
    token: Option<u64>,
}

impl<'a> LastRunView<'a> {
    /// Numbers that do not parse, or times RFC 3339 cannot write, show as
    /// unknown.
    fn of(record: &'a [(String, String)]) -> Option<LastRunView<'a>> {
        let get = |f: &str| record.iter().find(|(k, _)| k == f).map(|(_, v)| v.as_str());
        get("owner")?;
        Some(LastRunView {
            host: get("host").unwrap_or(""),
            owner: get("owner").unwrap_or(""),
            started_ms: get("started_ms").and_then(|v| v.parse().ok()),
            duration_ms: get("duration_ms").and_then(|v| v.parse().ok()),
            exit: get("exit").and_then(|v| v.parse().ok()),
            token: get("token").and_then(|v| v.parse().ok()),
        })
    }

    fn started_at(&self) -> Option<String> {
        rfc3339(self.started_ms?, false)
    }

    /// `web-2, 2026-12-02 00:00:01 UTC, 31.2s, exit 0, token 41`
    fn line(&self) -> String {
        let started = self
            .started_at()
            .map(|s| s.replace('T', " ").replace('Z', " UTC"))
            .unwrap_or_else(|| "unknown time".into());
        let took = self
            .duration_ms
            .map_or("?".into(), |ms| fmt_ttl(Duration::from_millis(ms)));
        let exit = self.exit.map_or("?".into(), |e| e.to_string());
        let token = self.token.map_or("?".into(), |t| t.to_string());
        format!(
            "{}, {started}, {took}, exit {exit}, token {token}",
            self.host
        )
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "host": self.host,
            "owner": self.owner,
            "started_at": self.started_at(),
            "duration_ms": self.duration_ms,
            "exit": self.exit,
            "fencing_token": self.token,
        })
    }
}

/// How many locks `list` reads per round trip and prints at a time: its
/// memory is the sorted names plus one batch, not the whole listing.
const LIST_BATCH: usize = 500;

/// `distlock list`: every held lock under the prefix, sorted by name.
/// With `json`, one JSON array of `inspect --json` objects.
///
/// SCAN collects only the names (sorting needs them all); the details are
/// then read [`LIST_BATCH`] names at a time and each batch is printed as
/// it comes, so output starts after the first batch and memory does not
/// grow with what is printed.
pub fn list(g: &Global, json: bool) -> Result<u8> {
    let mut store = g.store(IO_TIMEOUT);
    let found = store.list_names(&g.prefix)?;
    let mut out = ListOut::new(json);
    for batch in found.chunks(LIST_BATCH) {
        let entries = list_batch(g, &mut store, batch)?;
        if !out.print(entries)? {
            // The reader went away (`| head -1`): done, as if printed.
            return Ok(0);
        }
    }
    if !out.finish()? {
        return Ok(0);
    }
    if !json && out.printed == 0 {
        g.say(format_args!("no locks held under prefix {}", g.prefix));
    }
    Ok(0)
}

/// One `list` entry: the `inspect --json` object and the table row.
type Entry = (serde_json::Value, [String; 6]);

/// The held locks among `batch` (sorted names), in its order. Locks
/// released since the SCAN drop out.
fn list_batch(g: &Global, store: &mut Store, batch: &[Found]) -> Result<Vec<Entry>> {
    let plain: Vec<LockKeys> = batch
        .iter()
        .filter(|f| !f.semaphore)
        .map(|f| LockKeys::new(&g.prefix, &f.name))
        .collect();
    let mut infos = store.inspect_many(&plain)?.into_iter().zip(plain);
    let mut entries = Vec::with_capacity(batch.len());
    for f in batch {
        if !f.semaphore {
            let Some((info, k)) = infos.next() else {
                break;
            };
            // A lock with a key of another type, or one it cannot read, is
            // skipped, with one warning: one stray key must not hide every
            // other lock from everyone.
            let Some(i) = info.map_err(|fk| skip_foreign(g, &fk)).ok() else {
                continue;
            };
            if unreadable(&k, &i).map_err(|u| skip_foreign(g, &u)).is_err() {
                continue;
            }
            if i.holder.is_none() {
                continue;
            }
            let row = [
                k.name.clone(),
                i.ttl.map_or("-".into(), fmt_ttl),
                i.token.map_or("-".into(), |t| t.to_string()),
                i.holder.clone().unwrap_or_default(),
                Meta::of(&i).command.unwrap_or("").to_owned(),
                i.done
                    .as_ref()
                    .map_or(String::new(), |d| DoneView(d).line()),
            ];
            entries.push((info_json(&k, &i), row));
            continue;
        }
        // Any N above 1 reads the slots; the agreed N comes back with them.
        let keys = LockKeys::new(&g.prefix, &f.name).with_limit(2);
        let info = match store.inspect_slots(&keys) {
            Ok(info) => info,
            Err(StoreError::WrongType(fk)) => {
                skip_foreign(g, &fk);
                continue;
            }
            // A plain lock under the same name (its slots expired): listed
            // by its own entry.
            Err(StoreError::LimitMismatch { .. }) => continue,
            // Refused or unreachable, as for a plain lock: a list that
            // leaves out what it could not read would tell the operator
            // nobody holds it.
            Err(e) => return Err(e.into()),
        };
        if info.holders.is_empty() {
            continue;
        }
        let n = info.limit.unwrap_or(0);
        let keys = LockKeys::new(&g.prefix, &f.name).with_limit(n);
        let owners: Vec<&str> = info.holders.iter().map(|h| h.0.as_str()).collect();
        let row = [
            f.name.clone(),
            info.holders.first().map_or("-".into(), |h| fmt_ttl(h.1)),
            info.token.map_or("-".into(), |t| t.to_string()),
            format!("{} of {n} slots: {}", owners.len(), owners.join(", ")),
            String::new(),
            String::new(),
        ];
        entries.push((slots_json(&keys, &info), row));
    }
    Ok(entries)
}

/// `list`'s output, written a batch at a time: the table (see [`Table`])
/// or the elements of one JSON array, byte for byte what printing the
/// whole array at once would give.
struct ListOut {
    json: bool,
    table: Table,
    printed: usize,
}

impl ListOut {
    fn new(json: bool) -> ListOut {
        ListOut {
            json,
            table: Table::default(),
            printed: 0,
        }
    }

    /// Prints one batch; false when stdout is a closed pipe.
    fn print(&mut self, entries: Vec<Entry>) -> Result<bool> {
        if entries.is_empty() {
            return Ok(true);
        }
        let mut text = String::new();
        if self.json {
            for (v, _) in entries {
                text.push(if self.printed == 0 { '[' } else { ',' });
                text.push_str(&output::json(&v));
                self.printed += 1;
            }
        } else {
            self.printed += entries.len();
            for line in self.table.rows(entries.into_iter().map(|e| e.1).collect()) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        print_more(&text)
    }

    /// Ends the JSON array; false when stdout is a closed pipe.
    fn finish(&mut self) -> Result<bool> {
        match (self.json, self.printed) {
            (true, 0) => print_more("[]\n"),
            (true, _) => print_more("]\n"),
            (false, _) => Ok(true),
        }
    }
}

/// `list`'s table: a header, then the rows, in columns padded to the
/// widest cell so far. The first batch sets the widths; a later batch
/// with a wider cell widens that column from its own first row on (the
/// widths never shrink), so up to [`LIST_BATCH`] locks the table lines up
/// exactly and beyond that it stays readable without holding every row.
/// The DONE column (`run --once-per`'s mark) has a header when a lock of
/// the first batch has one; a later mark is still shown, last on its row.
/// Cells are escaped before they are measured, so the columns line up as
/// the terminal shows them. Padding is by hand: a width in a format string
/// must fit in 16 bits, and a cell is as long as another client made it.
/// So a cell longer than its column's cap ([`CELL_CAPS`]) is cut and ends
/// with `...`: one foreign value 70,000 characters long must not pad
/// every line to its width. `--json` and `inspect` show values whole.
#[derive(Default)]
struct Table {
    widths: Option<[usize; 6]>,
}

/// The widest each column of `list`'s table gets, in characters: NAME
/// fits the longest name, OWNER an owner id of a 63-character host name
/// (a Kubernetes pod's), COMMAND and DONE enough to recognise them.
const CELL_CAPS: [usize; 6] = [200, 40, 20, 100, 60, 100];

/// `cell` cut to `cap` characters, the last three `...` when it was cut.
fn cut(cell: String, cap: usize) -> String {
    if cell.chars().count() <= cap {
        return cell;
    }
    let mut short: String = cell.chars().take(cap.saturating_sub(3)).collect();
    short.push_str("...");
    short
}

impl Table {
    /// The lines for one batch of rows (with the header before the first).
    fn rows(&mut self, rows: Vec<[String; 6]>) -> Vec<String> {
        let header = self.widths.is_none().then(|| {
            let columns = if rows.iter().any(|r| !r[5].is_empty()) {
                6
            } else {
                5
            };
            let mut h =
                ["NAME", "EXPIRES IN", "TOKEN", "OWNER", "COMMAND", "DONE"].map(String::from);
            h[columns..].iter_mut().for_each(String::clear);
            h
        });
        let cells: Vec<[String; 6]> = header
            .into_iter()
            .chain(rows)
            .map(|r| {
                let mut i = 0;
                r.map(|c| {
                    i += 1;
                    cut(escape(&c).into_owned(), CELL_CAPS[i - 1])
                })
            })
            .collect();
        let widths = self.widths.get_or_insert([0; 6]);
        for r in &cells {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let widths = *widths;
        cells
            .iter()
            .map(|r| {
                let mut line = String::new();
                for (i, (c, w)) in r.iter().zip(widths).enumerate() {
                    if i > 0 {
                        line.push_str("  ");
                    }
                    line.push_str(c);
                    line.extend(std::iter::repeat_n(' ', w - c.chars().count()));
                }
                line.trim_end().to_owned()
            })
            .collect()
    }
}

/// The warning of `list` for a lock it skips because of a foreign key
/// ([`ForeignKey`](crate::store::ForeignKey) or [`Unreadable`]).
fn skip_foreign(g: &Global, fk: &dyn std::fmt::Display) {
    g.say(format_args!("warning: skipped in the list: {fk}"));
}

/// Holder metadata, as the acquire script stored it.
struct Meta<'a> {
    acquired_ms: Option<u64>,
    host: Option<&'a str>,
    pid: Option<u32>,
    command: Option<&'a str>,
}

impl<'a> Meta<'a> {
    fn of(info: &'a LockInfo) -> Meta<'a> {
        let get = |f: &str| {
            info.meta
                .iter()
                .find(|(k, _)| k == f)
                .map(|(_, v)| v.as_str())
        };
        Meta {
            acquired_ms: get("acquired_ms").and_then(|v| v.parse().ok()),
            host: get("host"),
            pid: get("pid").and_then(|v| v.parse().ok()),
            command: get("command"),
        }
    }

    /// RFC 3339, UTC, whole seconds.
    fn acquired_at(&self) -> Option<String> {
        rfc3339(self.acquired_ms?, false)
    }
}

/// The `inspect --json` object (also each element of `list --json`).
fn info_json(keys: &LockKeys, info: &LockInfo) -> serde_json::Value {
    let m = Meta::of(info);
    let mut obj = serde_json::json!({
        "name": keys.name,
        "key": keys.lock,
        "held": info.holder.is_some(),
        "owner": info.holder,
        "ttl_ms": info.holder.as_ref().and(info.ttl.map(|t| t.as_millis() as u64)),
        "fencing_token": info.token,
        "acquired_at": m.acquired_at(),
        "host": m.host,
        "pid": m.pid,
        "command": m.command,
        "last_run": LastRunView::of(&info.last_run).map(|l| l.json()),
        "done": info.done.as_ref().map(|d| DoneView(d).json()),
    });
    // Only where the store reads its queue (etcd): absent is "not known",
    // never "nobody waits".
    if let Some(w) = &info.waiters {
        obj["waiters"] = waiters_json(w);
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up_escaped_cells_and_cuts_long_ones() {
        let row = |name: &str, owner: &str, cmd: &str| {
            [name, "1.0s", "3", owner, cmd, ""].map(String::from)
        };
        let long = "o".repeat(70_000);
        let lines = Table::default().rows(vec![
            row("a", "x\x1b[2Jy", "c"),
            row("bb", &long, &"c".repeat(70_000)),
        ]);
        let pad = " ".repeat(100 - "OWNER".len());
        assert_eq!(
            lines[0],
            format!("NAME  EXPIRES IN  TOKEN  OWNER{pad}  COMMAND")
        );
        let pad = " ".repeat(100 - r"x\x1b[2Jy".len());
        assert_eq!(
            lines[1],
            format!(r"a     1.0s        3      x\x1b[2Jy{pad}  c")
        );
        assert_eq!(
            lines[2],
            format!(
                "bb    1.0s        3      {}...  {}...",
                "o".repeat(97),
                "c".repeat(57)
            )
        );
        assert!(lines.iter().all(|l| l.chars().count() < 250), "{lines:?}");
    }

    #[test]
    fn a_later_batch_widens_columns_and_prints_no_second_header() {
        let row = |name: &str, owner: &str, done: &str| {
            [name, "1.0s", "3", owner, "", done].map(String::from)
        };
        let mut t = Table::default();
        let first = t.rows(vec![row("a", "o1", "")]);
        assert_eq!(
            first,
            [
                "NAME  EXPIRES IN  TOKEN  OWNER  COMMAND",
                "a     1.0s        3      o1"
            ]
        );
        let second = t.rows(vec![row("b", "owner-2", "d"), row("c", "o3", "")]);
        assert_eq!(
            second,
            [
                "b     1.0s        3      owner-2           d",
                "c     1.0s        3      o3"
            ]
        );
        let third = t.rows(vec![row("d", "o4", "")]);
        assert_eq!(
            third,
            ["d     1.0s        3      o4"],
            "widths never shrink"
        );
    }

    #[test]
    fn ttl_is_readable() {
        assert_eq!(fmt_ttl(Duration::from_millis(27_345)), "27.3s");
        assert_eq!(fmt_ttl(Duration::from_secs(252)), "4m 12s");
        assert_eq!(fmt_ttl(Duration::from_secs(11_045)), "3h 4m 5s");
    }
}
