//! The checker: reads the whole history (CMD's records, how each run
//! ended, the nemesis's faults) and the fenced store's log of accepted
//! writes, and gives its verdicts as a table. Times are CLOCK_REALTIME µs
//! of the one machine, so they compare exactly.
//!
//! History lines:
//! `S|W|E|K T RUN TOKEN [ACCEPTED]` from CMD (start, fenced write with
//! 1/0 accepted, end, got the stop signal), `R START END RUN RC` from
//! the client loop, `F START END KIND TARGET` from the nemesis.

use std::collections::BTreeMap;
use std::fmt::Write as _;

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[derive(Default, Debug, Clone)]
struct Cmd {
    run: String,
    token: u64,
    start: u64,
    end: Option<u64>,
    killed: Option<u64>,
    /// (time, accepted); None: the write failed (not refused).
    writes: Vec<(u64, Option<bool>)>,
}

#[derive(Debug, Clone)]
struct Run {
    start: u64,
    end: u64,
    rc: i32,
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub start: u64,
    pub end: u64,
    pub kind: String,
    pub target: String,
}

/// Fault kinds that pause a client's distlock: a CMD of such a run may
/// outlive its lease (that is what fencing is for).
const CLIENT_PAUSES: [&str; 2] = ["pause-distlock", "pause-client"];

#[derive(Debug, Default)]
pub struct Verdict {
    pub runs: usize,
    pub acquisitions: usize,
    pub exit_0: usize,
    pub exit_124: usize,
    pub exit_other: BTreeMap<i32, usize>,
    pub faults: usize,
    pub overlaps_paused: usize,
    pub overlaps_unpaused: usize,
    pub writes_accepted: usize,
    pub writes_refused_paused: usize,
    pub writes_refused_unpaused: usize,
    pub writes_failed: usize,
    pub stale_accepted: usize,
    pub token_order_violations: usize,
    pub duplicate_tokens: usize,
    pub availability: f64,
    pub longest_gap_ms: u64,
    /// Where the longest gap began, in ms after the window's start.
    pub longest_gap_at_ms: u64,
    pub runs_lost: usize,
    pub runs_doubled: usize,
    /// The first overlaps found, for the report.
    pub examples: Vec<String>,
    pub table: String,
}

impl Verdict {
    /// What must never happen, one line each; empty when the run is clean.
    /// Without `exclusive` (a store that does not promise one holder
    /// through every failover), overlaps, and what follows from them, are
    /// not violations: fencing is then what keeps the resource safe.
    pub fn violations(&self, exclusive: bool) -> Vec<String> {
        let mut v = Vec::new();
        let mut must_be_0 = |n: usize, what: &str| {
            if n != 0 {
                v.push(format!("{n} {what}"));
            }
        };
        if exclusive {
            must_be_0(self.overlaps_unpaused, "overlaps between unpaused CMDs");
            let refused = self.writes_refused_unpaused;
            must_be_0(refused, "writes of unpaused holders refused");
            let order = self.token_order_violations;
            must_be_0(order, "tokens out of acquisition order");
        }
        must_be_0(self.stale_accepted, "stale writes accepted");
        must_be_0(self.duplicate_tokens, "tokens given twice");
        must_be_0(self.runs_lost, "runs lost");
        must_be_0(self.runs_doubled, "runs doubled");
        v
    }
}

/// Checks `history` and the store's accepted writes (`commits`: token
/// and run, in the order the store accepted them) over the window
/// `[t0, t1]` in which the nemesis ran; runs ended after `t1` were cut
/// by the teardown.
pub fn check(history: &str, commits: &[(u64, String)], t0: u64, t1: u64) -> Verdict {
    let mut cmds: BTreeMap<String, Vec<Cmd>> = BTreeMap::new();
    let mut runs: BTreeMap<String, Run> = BTreeMap::new();
    let mut faults = Vec::new();
    for line in history.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        match w.first().copied() {
            Some("S") if w.len() >= 4 => cmds.entry(w[2].into()).or_default().push(Cmd {
                run: w[2].into(),
                token: num(3),
                start: num(1),
                ..Cmd::default()
            }),
            Some(k @ ("W" | "E" | "K")) if w.len() >= 4 => {
                let Some(c) = cmds.get_mut(w[2]).and_then(|v| v.last_mut()) else {
                    continue;
                };
                match k {
                    "E" => c.end = Some(num(1)),
                    "K" => c.killed = Some(num(1)),
                    _ => c.writes.push((
                        num(1),
                        w.get(4).and_then(|a| match *a {
                            "1" => Some(true),
                            "0" => Some(false),
                            _ => None,
                        }),
                    )),
                }
            }
            Some("R") if w.len() >= 5 => {
                let rc = w[4].parse().unwrap_or(-1);
                runs.insert(
                    w[3].into(),
                    Run {
                        start: num(1),
                        end: num(2),
                        rc,
                    },
                );
            }
            Some("F") if w.len() >= 5 => faults.push(Fault {
                start: num(1),
                end: num(2),
                kind: w[3].into(),
                target: w[4].into(),
            }),
            _ => {}
        }
    }
    let host = |run: &str| run.split('.').next().unwrap_or("").to_string();
    let paused = |run: &str| {
        let (s, e) = runs.get(run).map_or((0, u64::MAX), |r| (r.start, r.end));
        faults.iter().any(|f| {
            CLIENT_PAUSES.contains(&f.kind.as_str())
                && f.target == host(run)
                && f.start < e
                && s < f.end
        })
    };
    let mut v = Verdict {
        faults: faults.len(),
        ..Verdict::default()
    };
    let all: Vec<&Cmd> = cmds.values().flatten().collect();
    v.acquisitions = all.len();
    // A CMD ends at its E, else when it got the stop signal, else (killed
    // before it could say) when its run ended: late, never early.
    let end_of = |c: &Cmd| {
        c.end
            .or(c.killed)
            .or(runs.get(&c.run).map(|r| r.end))
            .unwrap_or(u64::MAX)
    };
    let mut by_start = all.clone();
    by_start.sort_by_key(|c| c.start);
    for (i, a) in by_start.iter().enumerate() {
        for b in &by_start[i + 1..] {
            if b.start >= end_of(a) {
                break;
            }
            if b.run != a.run {
                let excused = paused(&a.run) || paused(&b.run);
                if excused {
                    v.overlaps_paused += 1;
                } else {
                    v.overlaps_unpaused += 1;
                }
                if v.examples.len() < 6 {
                    let at = |c: &Cmd| {
                        let rc = runs.get(&c.run).map_or(-1, |r| r.rc);
                        format!(
                            "{} token {} {}+{}ms end {} rc {rc}",
                            c.run,
                            c.token,
                            c.start.saturating_sub(t0) / 1000,
                            end_of(c).saturating_sub(c.start) / 1000,
                            if c.end.is_some() {
                                "E"
                            } else if c.killed.is_some() {
                                "K"
                            } else {
                                "R"
                            },
                        )
                    };
                    let paused = if excused { "paused" } else { "UNPAUSED" };
                    v.examples
                        .push(format!("overlap ({paused}): {} / {}", at(a), at(b)));
                }
            }
        }
    }
    for c in &all {
        for (_, accepted) in &c.writes {
            match accepted {
                Some(true) => v.writes_accepted += 1,
                Some(false) if paused(&c.run) => v.writes_refused_paused += 1,
                Some(false) => v.writes_refused_unpaused += 1,
                None => v.writes_failed += 1,
            }
        }
    }
    let mut highest = 0;
    for (token, _) in commits {
        if *token < highest {
            v.stale_accepted += 1;
        }
        highest = highest.max(*token);
    }
    let unpaused: Vec<&&Cmd> = by_start.iter().filter(|c| !paused(&c.run)).collect();
    v.token_order_violations = unpaused
        .windows(2)
        .filter(|p| p[1].token <= p[0].token)
        .count();
    let mut owner: BTreeMap<u64, &str> = BTreeMap::new();
    for c in &all {
        if *owner.entry(c.token).or_insert(&c.run) != c.run {
            v.duplicate_tokens += 1;
        }
    }
    // Availability: the union of CMD intervals inside [t0, t1].
    let (mut held, mut cursor, mut gap, mut gap_at) = (0u64, t0, 0u64, t0);
    for c in &by_start {
        let (s, e) = (c.start.clamp(t0, t1), end_of(c).clamp(t0, t1));
        if s > cursor {
            if s - cursor > gap {
                (gap, gap_at) = (s - cursor, cursor);
            }
            cursor = s;
        }
        if e > cursor {
            held += e - cursor;
            cursor = e;
        }
    }
    if t1.saturating_sub(cursor) > gap {
        (gap, gap_at) = (t1 - cursor, cursor);
    }
    v.longest_gap_at_ms = (gap_at - t0) / 1000;
    v.availability = held as f64 / (t1.saturating_sub(t0)).max(1) as f64;
    v.longest_gap_ms = gap / 1000;
    v.runs = runs.len();
    for (name, r) in &runs {
        let started = cmds.get(name).map_or(0, |c| c.len());
        match r.rc {
            0 => v.exit_0 += 1,
            124 => v.exit_124 += 1,
            rc => *v.exit_other.entry(rc).or_default() += 1,
        }
        if started > 1 {
            v.runs_doubled += 1;
        }
        // Success reported, yet CMD did not run to its end: a lost run.
        let finished = cmds
            .get(name)
            .is_some_and(|c| c.iter().all(|c| c.end.is_some()));
        if r.rc == 0 && (started == 0 || !finished) {
            v.runs_lost += 1;
        }
    }
    // A CMD whose run never reported, though the run was not cut by the
    // teardown: lost as well.
    v.runs_lost += cmds
        .keys()
        .filter(|k| !runs.contains_key(*k))
        .filter(|k| cmds[*k].iter().all(|c| c.start < t1))
        .count();
    v.table = table(&v, &faults, &all, &runs, &end_of);
    v
}

fn table(
    v: &Verdict,
    faults: &[Fault],
    cmds: &[&Cmd],
    runs: &BTreeMap<String, Run>,
    end_of: &dyn Fn(&Cmd) -> u64,
) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<38} {:>10}",
        "acquisitions (CMDs started)", v.acquisitions
    );
    let other: Vec<String> = v
        .exit_other
        .iter()
        .map(|(rc, n)| format!("{n}x{rc}"))
        .collect();
    let _ = writeln!(
        t,
        "{:<38} {:>10} {}",
        "runs: exit 0 / 124 / other",
        format!(
            "{}/{}/{}",
            v.exit_0,
            v.exit_124,
            v.exit_other.values().sum::<usize>()
        ),
        other.join(" ")
    );
    let rows: [(&str, String); 12] = [
        ("faults injected", v.faults.to_string()),
        ("overlaps, unpaused CMDs", v.overlaps_unpaused.to_string()),
        (
            "overlaps, a paused distlock's CMD",
            v.overlaps_paused.to_string(),
        ),
        ("fenced writes accepted", v.writes_accepted.to_string()),
        (
            "stale writes accepted (must be 0)",
            v.stale_accepted.to_string(),
        ),
        (
            "writes refused, paused holder",
            v.writes_refused_paused.to_string(),
        ),
        (
            "writes refused, unpaused holder",
            v.writes_refused_unpaused.to_string(),
        ),
        (
            "tokens out of order / given twice",
            format!("{}/{}", v.token_order_violations, v.duplicate_tokens),
        ),
        (
            "availability (some CMD holding)",
            format!("{:.1}%", v.availability * 100.0),
        ),
        (
            "longest gap",
            format!("{} ms at {} ms", v.longest_gap_ms, v.longest_gap_at_ms),
        ),
        (
            "runs lost / doubled",
            format!("{}/{}", v.runs_lost, v.runs_doubled),
        ),
        ("writes failed (store error)", v.writes_failed.to_string()),
    ];
    for (k, val) in rows {
        let _ = writeln!(t, "{k:<38} {val:>10}");
    }
    for e in &v.examples {
        let _ = writeln!(t, "{e}");
    }
    // Per fault kind: how often, and what it did to the runs around it
    // (a run that ended 124, or a write refused, from the fault's start
    // to 3 s after it healed: TTL plus a renewal).
    let mut kinds: BTreeMap<&str, (usize, usize, usize, u64)> = BTreeMap::new();
    for f in faults {
        let (s, e) = (f.start, f.end + 3_000_000);
        let k = kinds.entry(&f.kind).or_default();
        k.0 += 1;
        k.1 += runs
            .values()
            .filter(|r| r.rc == 124 && r.end >= s && r.end <= e)
            .count();
        k.2 += cmds
            .iter()
            .flat_map(|c| c.writes.iter())
            .filter(|(t, a)| *a == Some(false) && *t >= s && *t <= e)
            .count();
        k.3 = k.3.max(gap_in(cmds, end_of, f.start, f.end + 3_000_000));
    }
    let _ = writeln!(
        t,
        "{:<16} {:>6} {:>8} {:>8} {:>12}",
        "fault", "count", "exit124", "refused", "max gap ms"
    );
    for (kind, (n, x124, refused, gap)) in kinds {
        let _ = writeln!(
            t,
            "{kind:<16} {n:>6} {x124:>8} {refused:>8} {:>12}",
            gap / 1000
        );
    }
    t
}

/// The longest time inside `[s, e]` in which no CMD ran.
fn gap_in(cmds: &[&Cmd], end_of: &dyn Fn(&Cmd) -> u64, s: u64, e: u64) -> u64 {
    let mut spans: Vec<(u64, u64)> = cmds
        .iter()
        .map(|c| (c.start.clamp(s, e), end_of(c).clamp(s, e)))
        .collect();
    spans.sort();
    let (mut cursor, mut gap) = (s, 0);
    for (a, b) in spans {
        if a > cursor {
            gap = gap.max(a - cursor);
        }
        cursor = cursor.max(b);
    }
    gap.max(e.saturating_sub(cursor))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clean runs, one after the other.
    const CLEAN: &str = "\
R 1000 2000 c1.1 0
S 1100 c1.1 10
W 1150 c1.1 10 1
E 1200 c1.1 10
R 1300 2500 c2.1 0
S 1300 c2.1 11
W 1350 c2.1 11 1
E 1400 c2.1 11
";

    fn commits(tokens: &[u64]) -> Vec<(u64, String)> {
        tokens.iter().map(|t| (*t, "r".to_string())).collect()
    }

    #[test]
    fn a_clean_history_has_no_violations() {
        let v = check(CLEAN, &commits(&[10, 11]), 1000, 1500);
        assert!(
            v.violations(true).is_empty(),
            "{:?}\n{}",
            v.violations(true),
            v.table
        );
        assert_eq!(v.acquisitions, 2);
        assert_eq!(v.longest_gap_ms, 0);
    }

    /// The broken mode: a distlock that let CMD run on after losing its
    /// lease, with a store that took the old holder's write after the
    /// new one's. The checker must see both.
    #[test]
    fn the_checker_fails_an_overlap_and_a_stale_write() {
        let history = "\
R 1000 3000 c1.1 0
S 1100 c1.1 10
R 1200 2500 c2.1 0
S 1300 c2.1 11
W 1350 c2.1 11 1
E 1400 c2.1 11
W 1500 c1.1 10 1
E 1600 c1.1 10
";
        let v = check(history, &commits(&[11, 10]), 1000, 2000);
        assert_eq!(v.overlaps_unpaused, 1, "{}", v.table);
        assert_eq!(v.stale_accepted, 1, "{}", v.table);
        assert_eq!(v.violations(true).len(), 2, "{:?}", v.violations(true));
        // A store that may hand out a second lease still owes fencing.
        assert_eq!(v.violations(false), ["1 stale writes accepted"]);
    }

    /// The same overlap while the nemesis had the first client's distlock
    /// stopped is what fencing is for: allowed, and the write refused.
    #[test]
    fn an_overlap_of_a_paused_distlock_is_allowed() {
        let history = "\
R 1000 3000 c1.1 124
S 1100 c1.1 10
F 1150 1450 pause-distlock c1
R 1200 2500 c2.1 0
S 1300 c2.1 11
W 1350 c2.1 11 1
E 1400 c2.1 11
W 1500 c1.1 10 0
K 1600 c1.1 10
";
        let v = check(history, &commits(&[11]), 1000, 2000);
        assert_eq!(
            (v.overlaps_paused, v.overlaps_unpaused),
            (1, 0),
            "{}",
            v.table
        );
        assert_eq!(v.writes_refused_paused, 1);
        assert!(v.violations(true).is_empty(), "{:?}", v.violations(true));
    }

    #[test]
    fn a_run_reported_done_whose_cmd_did_not_end_is_lost_and_two_starts_double() {
        let history = "\
R 1000 2000 c1.1 0
S 1100 c1.1 10
R 2100 2900 c2.1 0
S 2200 c2.1 11
E 2300 c2.1 11
S 2400 c2.1 12
E 2500 c2.1 12
";
        let v = check(history, &[], 1000, 3000);
        assert_eq!((v.runs_lost, v.runs_doubled), (1, 1), "{}", v.table);
    }
}
