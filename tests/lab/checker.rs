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
    /// The leader (master) after the fault was not the one before it.
    pub failover: bool,
    /// An election across the fault (etcd's raft term moved), whether
    /// or not it chose another leader: a new term's leader gives every
    /// lease its whole TTL again. Implied by `failover`.
    pub election: bool,
    /// The fault's targets included the leader (master) of its start.
    pub with_leader: bool,
}

/// How long after a fault heals its outcomes are still its own: the TTL
/// (2 s) plus a renewal interval, unless the next fault starts sooner.
const AFTERMATH_US: u64 = 3_000_000;

/// A time with no holder this long, while three clients wait for the
/// lock, is an outcome a fault changed: between faults the longest gaps
/// are tens of milliseconds (a hand-off).
const CHANGED_GAP_US: u64 = 1_000_000;

/// The row of one fault kind (or of the time with no fault active) in
/// the per-kind table: what happened from each such fault's start to the
/// end of its aftermath.
#[derive(Debug, Default, Clone)]
pub struct KindRow {
    pub faults: usize,
    /// Faults whose window saw an outcome the nemesis provably changed: a
    /// run ended 124 (lease lost, CMD stopped), 125 (a store call failed)
    /// or otherwise not 0, a fenced write refused, a failover, an overlap,
    /// or a second or more with no holder.
    pub changed: usize,
    pub acquisitions: usize,
    pub exit_124: usize,
    pub exit_125: usize,
    pub exit_other: usize,
    pub refused: usize,
    pub failovers: usize,
    pub overlaps_unpaused: usize,
    pub overlaps_paused: usize,
    pub stale_accepted: usize,
    pub held_us: u64,
    pub window_us: u64,
    pub longest_gap_us: u64,
    /// For a fault that cuts a client off ([`CLIENT_CUTS`]): the longest
    /// time from its start until a CMD of another client started, what
    /// the fault cost the others, over the cuts [`Cut::undisturbed`]
    /// (at most [`CUT_TARGET_US`] is the aim: docs/guarantees.md, "How
    /// we test it").
    pub to_other_holder_us: Option<u64>,
    /// Every client cut's time to another client's CMD.
    pub cuts: Vec<Cut>,
}

/// One client cut: the time from it to another client's CMD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut {
    pub to_other_us: u64,
    /// No election across the cut, the leader (master) not cut off with
    /// the client, and the other CMD started before the nemesis's next
    /// fault: the time is the cut's alone. Otherwise an election (a
    /// leader of a new term, even the same member, gives every lease its
    /// whole TTL again), a store the others cannot reach (a master cut
    /// off for less than Sentinel takes to fail it over) or a later fault
    /// (a member paused, a quorum lost) adds its own wait.
    pub undisturbed: bool,
}

/// The availability aim under a client cut: the TTL (2 s) plus one
/// renewal interval (a third of it). The cut holder's lease was renewed
/// at most an interval before the cut and runs out a TTL after that.
pub const CUT_TARGET_US: u64 = 2_666_667;

impl KindRow {
    pub fn availability(&self) -> f64 {
        self.held_us as f64 / self.window_us.max(1) as f64
    }
}

/// How close to a paused leader's wake an overlap must begin, and how
/// soon after it the earlier holder must have been stopped, to bear the
/// mark of etcd-io/etcd#15247: a renewal interval (TTL/3, 0.67 s) and
/// the scheduling around it.
const STALL_CAUGHT_US: u64 = 1_000_000;

/// The per-kind table's label for time in no fault's window.
pub const NO_FAULT: &str = "(no fault)";

/// Fault kinds that pause a client's distlock: a CMD of such a run may
/// outlive its lease (that is what fencing is for).
const CLIENT_PAUSES: [&str; 2] = ["pause-distlock", "pause-client"];

/// Fault kinds that cut a client (the target's first `+` part) off the
/// members a majority needs.
const CLIENT_CUTS: [&str; 2] = ["client-minority", "isolate-holder"];

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
    /// Of `overlaps_unpaused`, those with the mark of a stalled leader's
    /// revocations: at the end of a pause of the leader, the earlier
    /// holder stopped by distlock (124) within a renewal of the later
    /// one's start. On an etcd that has etcd-io/etcd#15247
    /// (`stalled_leader_revokes`) those are the store's, shown apart and
    /// not violations; on any other server they count in full.
    pub overlaps_stalled_leader: usize,
    /// Set by the caller for a server known to have etcd-io/etcd#15247.
    pub stalled_leader_revokes: bool,
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
    /// The first overlaps found, unpaused first, for the report.
    pub examples: Vec<String>,
    /// Per fault kind, in the nemesis's order, then [`NO_FAULT`].
    pub kinds: Vec<(String, KindRow)>,
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
            let stalled = if self.stalled_leader_revokes {
                self.overlaps_stalled_leader
            } else {
                0
            };
            must_be_0(
                self.overlaps_unpaused - stalled,
                "overlaps between unpaused CMDs",
            );
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

    /// The fault kinds injected at least `min` times that never changed
    /// an outcome: a nemesis that gentle proves nothing of them.
    /// `masked`: kinds the store is built to absorb, not judged.
    pub fn unchanged_kinds(&self, min: usize, masked: &[&str]) -> Vec<String> {
        self.kinds
            .iter()
            .filter(|(k, _)| k != NO_FAULT && !masked.contains(&k.as_str()))
            .filter(|(_, r)| r.faults >= min && r.changed == 0)
            .map(|(k, r)| format!("{k} ({} faults)", r.faults))
            .collect()
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
                failover: w.get(5) == Some(&"1"),
                election: w.get(5) == Some(&"1") || w.get(6) == Some(&"1"),
                with_leader: w.get(7) == Some(&"1"),
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
    // Each overlap: when it began, and whether both CMDs were unpaused.
    let mut overlaps: Vec<(u64, bool)> = Vec::new();
    // The first few overlaps for the report: unpaused, paused.
    let mut shown: [Vec<String>; 2] = Default::default();
    for (i, a) in by_start.iter().enumerate() {
        for b in &by_start[i + 1..] {
            if b.start >= end_of(a) {
                break;
            }
            if b.run != a.run {
                let excused = paused(&a.run) || paused(&b.run);
                overlaps.push((b.start, !excused));
                if excused {
                    v.overlaps_paused += 1;
                } else {
                    v.overlaps_unpaused += 1;
                    let stopped_by_distlock = runs.get(&a.run).is_some_and(|r| r.rc == 124)
                        && a.killed.is_some_and(|k| k <= b.start + STALL_CAUGHT_US);
                    let at_a_leaders_wake = faults.iter().any(|f| {
                        f.kind == "pause-member"
                            && f.with_leader
                            && f.end.abs_diff(b.start) <= STALL_CAUGHT_US
                    });
                    if stopped_by_distlock && at_a_leaders_wake {
                        v.overlaps_stalled_leader += 1;
                    }
                }
                let shown = &mut shown[usize::from(excused)];
                if shown.len() < 6 {
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
                    shown.push(format!("overlap ({paused}): {} / {}", at(a), at(b)));
                }
            }
        }
    }
    let [unpaused_shown, paused_shown] = shown;
    v.examples = unpaused_shown
        .into_iter()
        .chain(paused_shown)
        .take(6)
        .collect();
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
    // When each stale write was accepted: the store's n-th write of a run
    // is the n-th write CMD of that run recorded as accepted.
    let mut accepted_at: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for c in &all {
        let at = c
            .writes
            .iter()
            .filter(|(_, a)| *a == Some(true))
            .map(|(t, _)| *t);
        accepted_at.entry(c.run.as_str()).or_default().extend(at);
    }
    let mut nth: BTreeMap<&str, usize> = BTreeMap::new();
    let mut stale_at = Vec::new();
    let mut highest = 0;
    for (token, run) in commits {
        let n = nth.entry(run.as_str()).or_default();
        if *token < highest {
            v.stale_accepted += 1;
            let at = accepted_at.get(run.as_str()).and_then(|a| a.get(*n));
            stale_at.push(at.copied().unwrap_or(t1));
        }
        *n += 1;
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
    let spans: Vec<(u64, u64)> = by_start.iter().map(|c| (c.start, end_of(c))).collect();
    let events = Events {
        runs: &runs,
        cmds: &by_start,
        spans: &spans,
        overlaps: &overlaps,
        stale_at: &stale_at,
    };
    v.kinds = per_kind(&faults, t0, t1, &events);
    v.table = table(&v);
    v
}

/// What the per-kind table attributes to the time it happened in.
struct Events<'a> {
    runs: &'a BTreeMap<String, Run>,
    cmds: &'a [&'a Cmd],
    /// Each CMD's (start, end), by start.
    spans: &'a [(u64, u64)],
    overlaps: &'a [(u64, bool)],
    stale_at: &'a [u64],
}

/// The per-kind rows. `[t0, t1]` is cut into slots: each fault's window,
/// from its start to the end of its aftermath or the next fault's start,
/// whichever is first (so every outcome is the fault's active then), and
/// the time between windows ([`NO_FAULT`]).
fn per_kind(faults: &[Fault], t0: u64, t1: u64, ev: &Events) -> Vec<(String, KindRow)> {
    let mut faults: Vec<&Fault> = faults.iter().filter(|f| f.start < t1).collect();
    faults.sort_by_key(|f| f.start);
    // (start, end, fault) covering [t0, t1] without overlap.
    let mut slots: Vec<(u64, u64, Option<&Fault>)> = Vec::new();
    let mut cursor = t0;
    for (i, f) in faults.iter().enumerate() {
        let s = f.start.max(cursor);
        let next = faults.get(i + 1).map_or(t1, |n| n.start);
        let e = (f.end + AFTERMATH_US).min(next).min(t1).max(s);
        if s > cursor {
            slots.push((cursor, s, None));
        }
        slots.push((s, e, Some(f)));
        cursor = e;
    }
    if t1 > cursor {
        slots.push((cursor, t1, None));
    }
    let slot_of = |t: u64| -> Option<usize> {
        if t < t0 || t > t1 {
            return None;
        }
        Some(slots.partition_point(|(s, _, _)| *s <= t).saturating_sub(1))
    };
    let mut rows: Vec<KindRow> = vec![KindRow::default(); slots.len()];
    for c in ev.cmds {
        if let Some(i) = slot_of(c.start) {
            rows[i].acquisitions += 1;
        }
        for (t, a) in &c.writes {
            if *a == Some(false) {
                if let Some(i) = slot_of(*t) {
                    rows[i].refused += 1;
                }
            }
        }
    }
    // A run that lost its lease counts when its CMD got the stop signal,
    // inside the fault, not when the run ended (its release may wait for
    // the network to heal).
    let killed: BTreeMap<&str, u64> = ev
        .cmds
        .iter()
        .filter_map(|c| Some((c.run.as_str(), c.killed?)))
        .collect();
    for (name, r) in ev.runs {
        let at = match r.rc {
            124 => killed.get(name.as_str()).copied().unwrap_or(r.end),
            _ => r.end,
        };
        let Some(i) = slot_of(at) else { continue };
        match r.rc {
            0 => {}
            124 => rows[i].exit_124 += 1,
            125 => rows[i].exit_125 += 1,
            _ => rows[i].exit_other += 1,
        }
    }
    for (t, unpaused) in ev.overlaps {
        if let Some(i) = slot_of(*t) {
            if *unpaused {
                rows[i].overlaps_unpaused += 1;
            } else {
                rows[i].overlaps_paused += 1;
            }
        }
    }
    for t in ev.stale_at {
        if let Some(i) = slot_of(*t) {
            rows[i].stale_accepted += 1;
        }
    }
    for (row, (s, e, f)) in rows.iter_mut().zip(&slots) {
        let (held, gap) = held_and_gap(ev.spans, *s, *e);
        row.held_us = held;
        row.window_us = e - s;
        row.longest_gap_us = gap;
        if let Some(f) = f {
            row.faults = 1;
            row.failovers = usize::from(f.failover);
            if CLIENT_CUTS.contains(&f.kind.as_str()) {
                let host = format!("{}.", f.target.split('+').next().unwrap_or_default());
                let next_fault = faults
                    .iter()
                    .map(|g| g.start)
                    .find(|&t| t > f.start)
                    .unwrap_or(u64::MAX);
                let other = ev
                    .cmds
                    .iter()
                    .find(|c| c.start > f.start && !c.run.starts_with(&host));
                if let Some(c) = other {
                    let cut = Cut {
                        to_other_us: c.start - f.start,
                        undisturbed: !f.election && !f.with_leader && c.start < next_fault,
                    };
                    row.cuts.push(cut);
                    row.to_other_holder_us = cut.undisturbed.then_some(cut.to_other_us);
                }
            }
            let outcomes = row.exit_124
                + row.exit_125
                + row.exit_other
                + row.refused
                + row.failovers
                + row.overlaps_unpaused
                + row.overlaps_paused;
            row.changed = usize::from(outcomes > 0 || gap >= CHANGED_GAP_US);
        }
    }
    let mut kinds: Vec<(String, KindRow)> = crate::nemesis::KINDS
        .iter()
        .chain(&[NO_FAULT])
        .map(|k| (k.to_string(), KindRow::default()))
        .collect();
    for (row, (_, _, f)) in rows.iter().zip(&slots) {
        let kind = f.map_or(NO_FAULT, |f| f.kind.as_str());
        let at = match kinds.iter().position(|(k, _)| k == kind) {
            Some(at) => at,
            None => {
                kinds.push((kind.to_string(), KindRow::default()));
                kinds.len() - 1
            }
        };
        let k = &mut kinds[at].1;
        k.faults += row.faults;
        k.changed += row.changed;
        k.acquisitions += row.acquisitions;
        k.exit_124 += row.exit_124;
        k.exit_125 += row.exit_125;
        k.exit_other += row.exit_other;
        k.refused += row.refused;
        k.failovers += row.failovers;
        k.overlaps_unpaused += row.overlaps_unpaused;
        k.overlaps_paused += row.overlaps_paused;
        k.stale_accepted += row.stale_accepted;
        k.held_us += row.held_us;
        k.window_us += row.window_us;
        k.longest_gap_us = k.longest_gap_us.max(row.longest_gap_us);
        k.to_other_holder_us = k.to_other_holder_us.max(row.to_other_holder_us);
        k.cuts.extend_from_slice(&row.cuts);
    }
    kinds.retain(|(k, r)| r.faults > 0 || (k == NO_FAULT && r.window_us > 0));
    kinds
}

fn table(v: &Verdict) -> String {
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
    let rows: [(&str, String); 13] = [
        ("faults injected", v.faults.to_string()),
        ("overlaps, unpaused CMDs", v.overlaps_unpaused.to_string()),
        (
            "  at a paused leader's wake (etcd#15247)",
            v.overlaps_stalled_leader.to_string(),
        ),
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
    // Per fault kind, from each fault's start to 3 s after it healed (TTL
    // plus a renewal) or the next fault: "changed" counts the faults
    // after which some outcome differed (124, 125, another failure, a
    // refused write, a failover, an overlap, a gap of 1 s); "ovl u/p" are overlaps
    // between unpaused CMDs / with a paused one's; "other ms": the longest
    // time from a client's cut to another client's CMD.
    let _ = writeln!(
        t,
        "{:<16} {:>6} {:>7} {:>5} {:>4} {:>4} {:>5} {:>7} {:>8} {:>7} {:>5} {:>6} {:>7} {:>8}",
        "fault",
        "faults",
        "changed",
        "acq",
        "124",
        "125",
        "other",
        "refused",
        "failover",
        "ovl u/p",
        "stale",
        "avail",
        "gap ms",
        "other ms"
    );
    for (kind, r) in &v.kinds {
        let _ = writeln!(
            t,
            "{kind:<16} {:>6} {:>7} {:>5} {:>4} {:>4} {:>5} {:>7} {:>8} {:>7} {:>5} {:>5.0}% {:>7} {:>8}",
            r.faults,
            r.changed,
            r.acquisitions,
            r.exit_124,
            r.exit_125,
            r.exit_other,
            r.refused,
            r.failovers,
            format!("{}/{}", r.overlaps_unpaused, r.overlaps_paused),
            r.stale_accepted,
            r.availability() * 100.0,
            r.longest_gap_us / 1000,
            r.to_other_holder_us
                .map_or("-".into(), |us| (us / 1000).to_string())
        );
    }
    for (kind, r) in v.kinds.iter().filter(|(_, r)| !r.cuts.is_empty()) {
        let _ = writeln!(t, "{}", cut_summary(kind, &r.cuts));
    }
    t
}

/// One line per client-cut kind: its undisturbed cuts against
/// [`CUT_TARGET_US`], and the longest of the others.
fn cut_summary(kind: &str, cuts: &[Cut]) -> String {
    let mut clean: Vec<u64> = cuts
        .iter()
        .filter(|c| c.undisturbed)
        .map(|c| c.to_other_us)
        .collect();
    clean.sort_unstable();
    let over = clean.iter().filter(|&&us| us > CUT_TARGET_US).count();
    let clean: Vec<u64> = clean.iter().map(|us| us / 1000).collect();
    let rest = cuts.iter().filter(|c| !c.undisturbed);
    let rest_max = rest.clone().map(|c| c.to_other_us / 1000).max();
    format!(
        "{kind} to another holder: {} undisturbed, median {} ms, max {} ms, {over} over {} ms; \
         {} after an election, with the leader cut off or before a further fault, max {} ms",
        clean.len(),
        clean
            .get(clean.len() / 2)
            .map_or("-".into(), |m| m.to_string()),
        clean.last().map_or("-".into(), |m| m.to_string()),
        CUT_TARGET_US / 1000,
        rest.count(),
        rest_max.map_or("-".into(), |m| m.to_string()),
    )
}

/// The time inside `[s, e]` in which some CMD ran, and the longest time
/// in which none did; `spans` are the CMDs' (start, end), by start.
fn held_and_gap(spans: &[(u64, u64)], s: u64, e: u64) -> (u64, u64) {
    let (mut cursor, mut held, mut gap) = (s, 0, 0);
    for &(a, b) in spans {
        let (a, b) = (a.clamp(s, e), b.clamp(s, e));
        if a > cursor {
            gap = gap.max(a - cursor);
            cursor = a;
        }
        if b > cursor {
            held += b - cursor;
            cursor = b;
        }
    }
    (held, gap.max(e.saturating_sub(cursor)))
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
        assert!(v.examples[0].starts_with("overlap (UNPAUSED)"));
        assert_eq!(v.stale_accepted, 1, "{}", v.table);
        assert_eq!(v.violations(true).len(), 2, "{:?}", v.violations(true));
        // A store that may hand out a second lease still owes fencing.
        assert_eq!(v.violations(false), ["1 stale writes accepted"]);
    }

    /// A leader paused past an election and awake again, on an etcd
    /// with etcd-io/etcd#15247, revokes a lease the new leader kept
    /// alive: the later holder starts as it wakes, and the earlier one is
    /// stopped at its next renewal. Counted apart, and a violation only
    /// where the server is not known to do that.
    #[test]
    fn an_overlap_at_a_paused_leaders_wake_is_the_stores_where_it_revokes_so() {
        let history = |rc: i32, kind: &str, leader: u8| {
            format!(
                "\
F 1000000 3500000 {kind} m2 1 1 {leader}
S 3400000 c1.1 11
K 3410000 c1.1 11
R 1000000 3500000 c1.1 {rc}
S 3405000 c2.1 14
E 3470000 c2.1 14
R 3300000 3480000 c2.1 0
"
            )
        };
        let judge = |h: &str, known: bool| {
            let mut v = check(h, &commits(&[11, 14]), 0, 4_000_000);
            v.stalled_leader_revokes = known;
            (
                v.overlaps_unpaused,
                v.overlaps_stalled_leader,
                v.violations(true),
            )
        };
        let marked = history(124, "pause-member", 1);
        assert_eq!(judge(&marked, true), (1, 1, Vec::<String>::new()));
        let one = vec!["1 overlaps between unpaused CMDs".to_string()];
        assert_eq!(judge(&marked, false), (1, 1, one.clone()));
        // Without each part of the mark it is an overlap like any other.
        assert_eq!(
            judge(&history(125, "pause-member", 1), true),
            (1, 0, one.clone())
        );
        assert_eq!(
            judge(&history(124, "kill-member", 1), true),
            (1, 0, one.clone())
        );
        assert_eq!(judge(&history(124, "pause-member", 0), true), (1, 0, one));
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

    /// Outcomes go to the fault active when they happened (its window
    /// ends 3 s after it healed, or at the next fault), a lost lease when
    /// its CMD got the stop signal; the rest to no fault. A kind met often enough that never changed an outcome is
    /// named.
    #[test]
    fn outcomes_are_attributed_to_the_fault_active_then() {
        let history = "\
F 1000000 2000000 isolate-holder c1 0
R 900000 5500000 c1.1 124
S 950000 c1.1 10
W 960000 c1.1 10 1
K 2400000 c1.1 10
R 2600000 3200000 c2.1 0
S 2700000 c2.1 11
W 2710000 c2.1 11 1
E 3000000 c2.1 11
R 5400000 8600000 c2.2 0
S 5500000 c2.2 12
E 8500000 c2.2 12
F 6000000 7000000 loss m1:20% 0
F 8000000 9000000 loss m2:20% 1
R 9500000 12000000 c3.1 0
S 10500000 c3.1 13
E 11000000 c3.1 13
";
        let v = check(history, &commits(&[10, 11]), 0, 12_500_000);
        let row = |k: &str| v.kinds.iter().find(|(n, _)| n == k).unwrap().1.clone();
        let holder = row("isolate-holder");
        assert_eq!(
            (
                holder.faults,
                holder.changed,
                holder.exit_124,
                holder.acquisitions
            ),
            (1, 1, 1, 1),
            "{}",
            v.table
        );
        // Its window: 1.0 s to 5.0 s; c1 held to 2.4 s, c2 from 2.7 to 3.0 s.
        assert_eq!(holder.window_us, 4_000_000);
        assert_eq!(holder.held_us, 1_700_000);
        assert_eq!(holder.longest_gap_us, 2_000_000);
        // Cut at 1.0 s; c2 (another client) started at 2.7 s, before the
        // next fault (6.0 s), with no leader change.
        assert_eq!(holder.to_other_holder_us, Some(1_700_000));
        let cut = Cut {
            to_other_us: 1_700_000,
            undisturbed: true,
        };
        assert_eq!(holder.cuts, [cut]);
        assert!(
            v.table
                .contains("isolate-holder to another holder: 1 undisturbed, median 1700 ms"),
            "{}",
            v.table
        );
        let loss = row("loss");
        assert_eq!((loss.faults, loss.changed, loss.failovers), (2, 1, 1));
        // The first loss's window ends where the second one starts.
        assert_eq!(loss.window_us, 2_000_000 + 4_000_000);
        let quiet = row(NO_FAULT);
        assert_eq!((quiet.faults, quiet.acquisitions), (0, 2), "{}", v.table);
        assert!(v.unchanged_kinds(1, &[]).is_empty());
        let v = check(
            "F 0 1000 pause-member m2 0\nS 100 c1.1 5\nE 9000 c1.1 5\n",
            &[],
            0,
            10_000,
        );
        assert_eq!(v.unchanged_kinds(1, &[]), ["pause-member (1 faults)"]);
        assert!(v.unchanged_kinds(2, &[]).is_empty());
        assert!(v.unchanged_kinds(1, &["pause-member"]).is_empty());
    }

    /// A cut's time to another holder is its own only when no leader
    /// changed across it and no further fault came first; the others are
    /// counted apart, not against the aim.
    #[test]
    fn a_cut_followed_by_a_leader_change_or_a_further_fault_is_counted_apart() {
        let history = "\
F 1000000 2000000 isolate-holder c1 0
F 2500000 3000000 pause-member m2 0
S 4000000 c2.1 11
E 4100000 c2.1 11
F 5000000 6000000 client-minority c2+m1 0 1
S 6000000 c3.1 12
E 6100000 c3.1 12
F 7000000 8000000 isolate-holder c3 0
S 9000000 c1.2 13
E 9100000 c1.2 13
F 10000000 11000000 client-minority c1+m3 0 0 1
S 11500000 c2.2 14
E 11600000 c2.2 14
";
        let v = check(history, &commits(&[11, 12, 13, 14]), 0, 12_000_000);
        let row = |k: &str| v.kinds.iter().find(|(n, _)| n == k).unwrap().1.clone();
        let cut = |ms: u64, undisturbed| Cut {
            to_other_us: ms * 1000,
            undisturbed,
        };
        // The first cut waited out a paused member too; the third is clean.
        assert_eq!(
            row("isolate-holder").cuts,
            [cut(3000, false), cut(2000, true)]
        );
        assert_eq!(row("isolate-holder").to_other_holder_us, Some(2_000_000));
        // An election across the cut (the same leader in a new term); the
        // leader (master) cut off with the client, no election seen.
        assert_eq!(
            row("client-minority").cuts,
            [cut(1000, false), cut(1500, false)]
        );
        assert_eq!(row("client-minority").failovers, 0);
        assert_eq!(row("client-minority").to_other_holder_us, None);
        assert!(
            v.table.contains(
                "isolate-holder to another holder: 1 undisturbed, median 2000 ms, max 2000 ms, \
                 0 over 2666 ms; 1 after an election, with the leader cut off or before a \
                 further fault, max 3000 ms"
            ),
            "{}",
            v.table
        );
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
