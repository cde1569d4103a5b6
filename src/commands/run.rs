//! `distlock run`: acquire, spawn CMD, supervise it while renewing, empty
//! its process group, release, and turn the outcome into an exit status.
//!
//! Each phase is a method of [`Run`] that takes what the phase before it
//! produced, so data flows one way and every early end (busy, signalled,
//! CMD not found) is one `Step::Exit` from the phase that saw it. Every
//! record of the run comes from [`Runner::record`], so the skipped, the
//! not-started and the finished run's records cannot drift apart.

use std::ffi::OsString;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Result};

use super::inspect::readable_done;
use super::metrics;
use super::output::rfc3339;
use super::status_line::StatusLine;
use super::{granted, release_quietly, see_through, signal_policy, Global, Granted};
use crate::clock;
use crate::config::{self, fmt_duration, RunConfig};
use crate::exit;
use crate::lease::supervisor::{Action, Input, Loss, Options, Outcome, Supervisor, TtyFacts};
use crate::lease::{self, Event, LeaseSpec, Renewer};
use crate::process::{self, ChildState, Guardian, Signals, SpawnError, Standby, Tty};
use crate::store::{
    self, DoneMark, Handoff, HistoryRecord, LastRun, LockKeys, Release, RunOutcome, RunRecord,
    Store,
};

/// `distlock run`: acquire, spawn, supervise, release.
pub fn run(g: &Global, args: RunConfig) -> Result<u8> {
    let (run, store) = Run::prepare(g, args)?;
    let held = match run.acquire(store)? {
        Step::Next(held) => held,
        Step::Exit(code) => return Ok(code),
    };
    let started = match run.start(held)? {
        Step::Next(started) => started,
        Step::Exit(code) => return Ok(code),
    };
    let ran = run.drive(started);
    Ok(run.release_and_record(ran))
}

/// What a phase hands on: the next phase's input, or the run's exit status.
enum Step<T> {
    Next(T),
    Exit(u8),
}

/// What every phase reads, fixed before the lease is asked for.
struct Run<'a> {
    g: &'a Global,
    args: RunConfig,
    signals: Signals,
    runner: Runner,
    keys: LockKeys,
}

/// The lease this run holds, as its records and deadlines need it.
#[derive(Clone, Copy)]
struct Lease {
    token: u64,
    /// When the acquisition was sent (monotonic): the lease's deadlines
    /// count from it.
    t0: Duration,
    /// Wall clock before the acquisition: the run's recorded start.
    started: SystemTime,
    /// Wall clock once the lease was ours: the start in the metrics.
    acquired_at: SystemTime,
}

impl Lease {
    /// How long the lease has been held, as the records give it.
    fn held_ms(&self) -> u64 {
        clock::now().saturating_sub(self.t0).as_millis() as u64
    }

    fn started_ms(&self) -> u64 {
        self.started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// [`Run::acquire`]'s result: the lease, CMD not started yet.
struct Held {
    store: Store,
    lease: Lease,
    /// Signals that arrived during the wait, passed on to CMD once it runs.
    pending: Vec<i32>,
    /// The guardian a run that may wait forked before it waited.
    standby: Option<Standby>,
}

/// [`Run::start`]'s result: CMD running in its own process group, guarded.
struct Started {
    store: Store,
    lease: Lease,
    pending: Vec<i32>,
    /// CMD's pid, which is also its process group id.
    pgid: i32,
    guardian: Guardian,
    tty: Option<Tty>,
}

/// [`Run::drive`]'s result: CMD's group is gone and renewing has stopped.
struct Ran {
    /// The renewer's connection, if it gave it back.
    store: Option<Store>,
    lease: Lease,
    outcome: Outcome,
    /// Standing down; reaped once the release has gone out.
    guardian: Guardian,
}

impl<'a> Run<'a> {
    /// Checks what can be checked before anything is held, and fixes who
    /// this run is and the keys it uses.
    fn prepare(g: &'a Global, args: RunConfig) -> Result<(Run<'a>, Store)> {
        if let Some(path) = &args.metrics_file {
            metrics::check_path(path)?;
        }
        // First, before any thread exists (see process/signals.rs).
        let signals = Signals::install()?;
        let owner = config::new_owner_id()?;
        let runner = Runner {
            host: config::hostname(),
            owner,
        };
        // Written by the acquisition that finds the job done, if one does.
        let skipped = runner.record(RunOutcome::SkippedDone, args.done_exit_code, None, 0, 0);
        let keys = LockKeys::new(&g.prefix, &args.name)
            .with_limit(args.lease.limit)
            .with_once_per(args.once_per)
            .with_skip_record(&skipped, args.history_keep);
        // The acquisition's reply is useful until the kill deadline it would
        // start; a slow Redis is given that long (at most 5s), not less.
        let store = g.store(args.timings.soft_after().min(Duration::from_secs(5)));
        let run = Run {
            g,
            args,
            signals,
            runner,
            keys,
        };
        Ok((run, store))
    }

    /// Takes the lease, waiting as `--wait` allows, in time for CMD to
    /// start under it; or ends the run: busy, evicted, interrupted, or the
    /// job already done.
    fn acquire(&self, mut store: Store) -> Result<Step<Held>> {
        let (g, args, keys) = (self.g, &self.args, &self.keys);
        let holder_meta = self.holder_meta();
        let meta: Vec<(&str, &str)> = holder_meta.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // A run that may wait forks its guardian now, while it has time:
        // at a hand-off the fork would compete with CMD's start for the CPU.
        // A waiter that may not fork one more process now (a pids limit that a
        // long queue fills) does without, and forks once CMD runs, as without
        // --wait: a queue must not fail where it used to wait.
        let standby = match args.lease.wait {
            config::Wait::For(d) if d.is_zero() => None,
            _ => Guardian::standby().ok(),
        };

        // A signal that ends the wait also cuts short a call in progress.
        store.set_interrupt_signals(process::WAIT_ENDERS);
        let started = SystemTime::now();
        let waited = lease::acquire(
            &mut store,
            keys,
            &self.runner.owner,
            args.timings.ttl_ms(),
            &meta,
            args.lease.wait,
            args.lease.wait_order,
            // A grant later than this is of no use (see below): within the
            // wait it is given back and asked for again.
            Some(args.timings.soft_after()),
            &self.signals,
            &StatusLine::new(g, &keys.name),
        )?;
        let (token, t0) = match granted(g, &keys.name, waited, args.lease.conflict_exit_code) {
            Ok(Granted::Yes { token, sent_at }) => (token, sent_at),
            Ok(Granted::Done(mark)) => return self.already_done(&mark).map(Step::Exit),
            Err(code) => return Ok(Step::Exit(code)),
        };
        let acquired_at = SystemTime::now();
        if g.verbose > 0 {
            g.say(format_args!(
                "acquired {} with fencing token {token} as {}",
                keys.name, self.runner.owner
            ));
        }

        // A terminating signal that arrived during the last attempt still ends
        // the wait: CMD never starts. Others are passed on to CMD once it runs.
        let pending = self.signals.drain();
        if let Some(&sig) = pending.iter().find(|&&s| signal_policy::ends_wait(s)) {
            release_quietly(g, &mut store, keys, &self.runner.owner);
            return Ok(Step::Exit(exit::signal_code(sig)));
        }
        // Within the wait, lease::acquire gave a late grant back and asked
        // again; this one came with no wait left, or late by a hair.
        if clock::now() >= t0 + args.timings.soft_after() {
            release_quietly(g, &mut store, keys, &self.runner.owner);
            bail!(
                "{} answered too slowly: the lease would expire before CMD could run",
                store.display()
            );
        }
        let lease = Lease {
            token,
            t0,
            started,
            acquired_at,
        };
        Ok(Step::Next(Held {
            store,
            lease,
            pending,
            standby,
        }))
    }

    /// What the lock shows of its holder (`inspect`, `list`).
    fn holder_meta(&self) -> Vec<(&'static str, String)> {
        let g = self.g;
        let mut passwords = store::url_passwords(&g.url);
        passwords.extend(g.security.password.clone());
        let mut meta = vec![
            ("host", self.runner.host.clone()),
            ("pid", std::process::id().to_string()),
            ("command", describe_command(&self.args.command, &passwords)),
            // `run`: only this run ends the lease; a release by owner (CMD
            // knows the owner id) is refused while it holds it.
            ("run", "1".to_owned()),
        ];
        if let Some(d) = self.args.lease.min_hold {
            meta.push(("min_hold_ms", d.as_millis().to_string()));
        }
        meta
    }

    /// `--once-per` found the job done in its window: CMD does not run.
    /// The acquisition that found the mark recorded the skip.
    fn already_done(&self, mark: &DoneMark) -> Result<u8> {
        let args = &self.args;
        readable_done(&self.keys, mark)?;
        self.g.say(format_args!(
            "{}",
            done_line(&self.keys.name, mark, args.once_per.unwrap_or_default())
        ));
        self.write_metrics(SystemTime::now(), 0, args.done_exit_code, false);
        Ok(args.done_exit_code)
    }

    /// Starts CMD in a process group of its own, with the terminal if we
    /// have it, and its guardian armed; or, if CMD cannot start, ends the
    /// run ([`Run::not_started`]).
    fn start(&self, held: Held) -> Result<Step<Started>> {
        let (mut store, lease) = (held.store, held.lease);
        let keys = &self.keys;
        let tty = Tty::open();
        let handoff = tty.as_ref().filter(|t| t.we_are_foreground());
        process::become_subreaper();
        let token_s = lease.token.to_string();
        let mut env = vec![
            ("DISTLOCK_NAME", keys.name.as_str()),
            ("DISTLOCK_KEY", keys.lock.as_str()),
            ("DISTLOCK_OWNER", self.runner.owner.as_str()),
            ("DISTLOCK_FENCING_TOKEN", token_s.as_str()),
        ];
        // CMD gets no Redis credentials: DISTLOCK_REDIS_PASSWORD is removed
        // (by spawn), and a DISTLOCK_URL or DISTLOCK_REDIS_URL that holds a
        // password passes on without it.
        let urls_for_cmd: Vec<(&str, String)> = ["DISTLOCK_URL", "DISTLOCK_REDIS_URL"]
            .into_iter()
            .filter_map(|var| Some((var, store::without_password(&std::env::var(var).ok()?))))
            .collect();
        for (var, u) in &urls_for_cmd {
            env.push((var, u.as_str()));
        }
        let deadline = lease.t0 + self.args.timings.hard_after();
        // The guardian is forked before CMD (if the wait has not forked it),
        // and CMD's own process arms it before it execs: CMD is never
        // unguarded, even if it stops distlock at once.
        let standby = held.standby.or_else(|| Guardian::standby().ok());
        let arming = standby.as_ref().and_then(|s| s.arming(deadline));
        let pgid = match process::spawn(&self.args.command, &env, &self.signals, handoff, arming) {
            Ok(pid) => pid,
            Err(e) => {
                // CMD's process armed the guardian with its own pid before
                // its exec failed, and is reaped: stand the guardian down
                // now, before the release's round trip, or a deadline in
                // that time would kill a group that reuses the number.
                drop(standby);
                return self.not_started(&mut store, &lease, e).map(Step::Exit);
            }
        };
        let guardian = match standby {
            Some(standby) => standby.armed(pgid, deadline),
            None => Guardian::start(pgid, deadline),
        };
        let guardian = match guardian {
            Ok(g) => g,
            Err(e) => {
                process::kill_and_reap(pgid);
                release_quietly(self.g, &mut store, keys, &self.runner.owner);
                return Err(e);
            }
        };
        Ok(Step::Next(Started {
            store,
            lease,
            pending: held.pending,
            pgid,
            guardian,
            tty,
        }))
    }

    /// Supervises CMD while renewing the lease, until CMD's whole process
    /// group is gone; then stops renewing.
    fn drive(&self, started: Started) -> Ran {
        let (lease, tty) = (started.lease, started.tty);
        let timings = self.args.timings;
        let spec = LeaseSpec {
            keys: self.keys.clone(),
            owner: self.runner.owner.clone(),
            timings,
            t0: lease.t0,
        };
        let mut renewer = Renewer::new(started.store, spec);
        let options = Options {
            kill_signal: self.args.kill_signal.number,
            at_risk_signal: self.args.at_risk_signal.map(|s| s.number),
            max_hold: self.args.max_hold,
        };
        let mut driver = Driver {
            g: self.g,
            name: &self.keys.name,
            pgid: started.pgid,
            tty: tty.as_ref(),
            guardian: started.guardian,
            guardian_error: None,
            machine: Supervisor::new(timings, options, lease.t0),
        };
        let outcome = driver.drive(&self.signals, &mut renewer, started.pending);

        // CMD's group is empty, so the guardian has nothing left to guard: it
        // exits while the release (the next holder is waiting) goes out.
        driver.guardian.stand_down();
        let (store, late) = renewer.stop();
        for event in &late {
            driver.say_event(event);
        }
        Ran {
            store,
            lease,
            outcome,
            guardian: driver.guardian,
        }
    }

    /// CMD could not be started. Not found or not executable, it is the
    /// job's failure (127 or 126): the release records the run as not
    /// started. Anything else is distlock's own: 125 and its one line,
    /// even with -q.
    fn not_started(&self, store: &mut Store, lease: &Lease, e: SpawnError) -> Result<u8> {
        let (code, err) = match e {
            SpawnError::NotFound(e) => (exit::NOT_FOUND, e),
            SpawnError::CannotExecute(e) => (exit::CANNOT_EXECUTE, e),
            SpawnError::Failed(e) => {
                release_quietly(self.g, store, &self.keys, &self.runner.owner);
                bail!(
                    "cannot start {}: {e}",
                    self.args.command[0].to_string_lossy()
                )
            }
        };
        let entry = self.runner.record(
            RunOutcome::NotStarted,
            code,
            Some(lease.token),
            0,
            lease.held_ms(),
        );
        let record = RunRecord {
            last: None,
            history: Some((&entry, self.args.history_keep)),
        };
        if let Err(e) = store.release_recording(&self.keys, &self.runner.owner, record, false) {
            self.g.say(format_args!("warning: {e:#}"));
        }
        self.write_metrics(lease.acquired_at, lease.held_ms(), code, false);
        self.g.say(format_args!(
            "cannot run {}: {err}",
            self.args.command[0].to_string_lossy()
        ));
        Ok(code)
    }

    /// Releases the lease and records the run, once all of CMD's group is
    /// gone; then writes the metrics and sees a hand-off through. The run's
    /// exit status.
    fn release_and_record(&self, ran: Ran) -> u8 {
        let (args, lease, outcome) = (&self.args, ran.lease, ran.outcome);
        let mut store = ran.store.unwrap_or_else(|| {
            self.g
                .store(args.timings.renew_every.min(Duration::from_secs(5)))
        });
        // Only a CMD that exited 0 by itself, with the lease still ours, marks
        // the job done (and only if the release finds the lease ours).
        let mark_done = args.once_per.is_some() && outcome.marks_done();
        let code = outcome.exit_code();
        let entry = self.runner.record(
            history_outcome(&outcome),
            code,
            Some(lease.token),
            lease.started_ms(),
            lease.held_ms(),
        );
        let last = last_run(&entry, lease.token);
        let both = RunRecord {
            last: Some((&last, args.last_run_keep)),
            history: Some((&entry, args.history_keep)),
        };
        let handoff = self.release(&mut store, outcome.lost, both, mark_done);
        ran.guardian.wait_gone();
        let success = entry.outcome == RunOutcome::Success;
        self.write_metrics(lease.acquired_at, entry.duration_ms, code, success);
        see_through(self.g, &mut store, &self.keys, handoff, Some(&self.signals));
        code
    }

    /// The release after CMD, writing `both` records: as the lease is
    /// still ours, or on their own if it is not. A release that woke the
    /// next waiter is seen through, once all else is done (see
    /// `see_through`).
    fn release(
        &self,
        store: &mut Store,
        lost: Option<Loss>,
        both: RunRecord<'_>,
        mark_done: bool,
    ) -> Option<Handoff> {
        let (g, keys, owner) = (self.g, &self.keys, &self.runner.owner);
        let timings = self.args.timings;
        let not_marked = if mark_done {
            "; no done mark was written, so the job may run again in this window"
        } else {
            ""
        };
        match lost {
            Some(Loss::NotOwner) => {
                store.set_timeout(timings.renew_every.min(Duration::from_secs(1)));
                let _ = store.record_run(keys, both);
                None
            }
            Some(Loss::Unconfirmed | Loss::MaxHold | Loss::NoGuardian) => {
                store.set_timeout(timings.renew_every.min(Duration::from_secs(1)));
                // The release writes the records only if the lease is still
                // ours; if it is not, they go on their own.
                match store.release_recording(keys, owner, both, false) {
                    Ok(Release::NotOwner(_) | Release::Gone) => {
                        let _ = store.record_run(keys, both);
                        None
                    }
                    Ok(Release::Released(h)) => h,
                    _ => None,
                }
            }
            None => {
                store.set_timeout(timings.renew_every.min(Duration::from_secs(5)));
                let released = store.release_recording(keys, owner, both, mark_done);
                if let Ok(Release::NotOwner(_) | Release::Gone) = released {
                    // Lost after CMD ended: the run happened all the same.
                    // Gone: the lost release most likely wrote them; again
                    // in case it did not.
                    let _ = store.record_run(keys, both);
                }
                match released {
                    Ok(Release::Released(h)) => return h,
                    // HeldByRun only answers a release by owner, not this one;
                    // Gone was most likely our release, its answer lost.
                    Ok(Release::HeldByRun | Release::Gone) => {}
                    Ok(Release::Kept(left)) if g.verbose > 0 => g.say(format_args!(
                        "{} stays held for another {} (--min-hold)",
                        keys.name,
                        fmt_duration(left)
                    )),
                    Ok(Release::Kept(_)) => {}
                    Ok(Release::NotOwner(holder)) => g.say(format_args!(
                        "warning: the lease on {} was lost before CMD finished; {}{not_marked}",
                        keys.name,
                        match holder {
                            Some(h) => format!("it is now held by {h}, left alone"),
                            None => "it had expired".to_owned(),
                        }
                    )),
                    Err(e) => g.say(format_args!(
                        "warning: {e:#}; the lease on {} will expire by itself within {}{not_marked}",
                        keys.name,
                        fmt_duration(timings.ttl)
                    )),
                }
                None
            }
        }
    }

    /// `--metrics-file`: the run's metrics for monitoring, once its lease is
    /// released (the next holder need not wait for a disk). A file that
    /// cannot be written is a warning: the job's own status comes first.
    fn write_metrics(&self, started: SystemTime, duration_ms: u64, exit_code: u8, success: bool) {
        let args = &self.args;
        let Some(path) = &args.metrics_file else {
            return;
        };
        let run = metrics::RunMetrics {
            name: &args.name,
            started_s: started
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| (d.as_millis() as f64) / 1000.0),
            duration_s: duration_ms as f64 / 1000.0,
            exit_code,
            success,
        };
        if let Err(e) = metrics::write(path, &run) {
            self.g.say(format_args!("warning: {e:#}"));
        }
    }
}

/// Who ran: the same in every record this run writes.
struct Runner {
    host: String,
    owner: String,
}

impl Runner {
    /// The run's history record, whatever its outcome: skipped (no token,
    /// nothing held), not started, or run. The one place one is built.
    fn record(
        &self,
        outcome: RunOutcome,
        exit_code: u8,
        token: Option<u64>,
        started_ms: u64,
        duration_ms: u64,
    ) -> HistoryRecord {
        HistoryRecord {
            started_ms,
            duration_ms,
            host: self.host.clone(),
            pid: std::process::id(),
            owner: self.owner.clone(),
            token,
            outcome,
            exit_code,
        }
    }
}

/// The last-run record of a run that held the lease with `token`: what its
/// history record says.
fn last_run(entry: &HistoryRecord, token: u64) -> LastRun {
    LastRun {
        host: entry.host.clone(),
        owner: entry.owner.clone(),
        started_ms: entry.started_ms,
        duration_ms: entry.duration_ms,
        exit: entry.exit_code,
        token,
    }
}

/// How a run that started CMD ended, in the history's words.
fn history_outcome(outcome: &Outcome) -> RunOutcome {
    use std::os::unix::process::ExitStatusExt;
    match (outcome.lost, outcome.status) {
        (Some(Loss::NoGuardian), _) | (None, None) => RunOutcome::Failed,
        (Some(Loss::MaxHold), _) => RunOutcome::MaxHold,
        (Some(_), _) => RunOutcome::LeaseLost,
        (None, Some(st)) if st.success() => RunOutcome::Success,
        (None, Some(st)) if st.signal().is_some() => RunOutcome::Signaled,
        (None, Some(_)) => RunOutcome::Failed,
    }
}

/// The line `run --once-per` prints when the job is already done:
/// `billing: already done 3h 2m ago (2026-12-02T00:00:01Z) on web-2 with
/// fencing token 41; CMD not started (--once-per 20h)`. The age is the
/// server's, so a host with a wrong clock still reads it right.
/// The caller has checked that the time is readable (`readable_done`).
fn done_line(name: &str, mark: &DoneMark, window: Duration) -> String {
    let at = rfc3339(mark.at_ms, false).unwrap_or_else(|| format!("at_ms {}", mark.at_ms));
    let age = mark.age.unwrap_or_default();
    let age = if age < Duration::from_secs(1) {
        format!("{}ms", age.as_millis())
    } else {
        humantime::format_duration(Duration::from_secs(age.as_secs())).to_string()
    };
    let host = if mark.host.is_empty() {
        "an unknown host"
    } else {
        mark.host.as_str()
    };
    format!(
        "{name}: already done {age} ago ({at}) on {host} with fencing token {}; CMD not started (--once-per {})",
        mark.token,
        fmt_duration(window)
    )
}

/// Carries out what the [`Supervisor`] decides: the only place where its
/// inputs are gathered (signalfd, `waitpid`, the renewer, the terminal)
/// and its actions become signals, terminal hand-offs and messages.
struct Driver<'a> {
    g: &'a Global,
    name: &'a str,
    /// CMD's pid, which is also its process group id.
    pgid: i32,
    tty: Option<&'a Tty>,
    /// Kills CMD's group if distlock dies or cannot act by the deadline;
    /// told of every renewal, and replaced if it dies.
    guardian: Guardian,
    /// Why no new guardian could be started, for the one line that says
    /// CMD is being stopped.
    guardian_error: Option<anyhow::Error>,
    machine: Supervisor,
}

impl Driver<'_> {
    /// Runs until CMD has ended and its whole process group is gone.
    /// `pending` are signals that arrived before CMD started.
    fn drive(&mut self, signals: &Signals, renewer: &mut Renewer, pending: Vec<i32>) -> Outcome {
        for sig in pending {
            let tty = self.tty_facts();
            if let Some(o) = self.feed(Input::Signal { sig, tty }, renewer) {
                return o;
            }
        }
        loop {
            // A guardian that died (SIGCHLD woke us) is replaced before
            // anything relies on it: distlock's own death, or a stop.
            if self.guardian.is_gone() {
                if let Some(o) = self.feed(Input::GuardianGone, renewer) {
                    return o;
                }
            }
            // After whatever woke us (and before the first wait): the
            // deadlines, the end of the run, a stop of our own.
            let tick = Input::Tick {
                tty: self.tty_facts(),
                group_empty: process::group_is_empty(self.pgid),
            };
            if let Some(o) = self.feed(tick, renewer) {
                return o;
            }
            let wake = match (self.machine.next_deadline(), renewer.start_at()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout = wake.map(|w| w.saturating_sub(clock::now()));
            let (sigs, _) = signals.wait(timeout, renewer.wake_fd());
            if let Some(e) = renewer.start_if_due(clock::now()) {
                self.say_no_thread(&e);
            }

            for sig in sigs {
                let tty = self.tty_facts();
                if let Some(o) = self.feed(Input::Signal { sig, tty }, renewer) {
                    return o;
                }
            }
            if let Some(state) = process::reap(self.pgid) {
                let tty = self.tty_facts();
                let input = match state {
                    ChildState::Exited(status) => Input::Exited { status, tty },
                    ChildState::Stopped(sig) => Input::Stopped { sig, tty },
                    ChildState::Continued => Input::Continued,
                };
                if let Some(o) = self.feed(input, renewer) {
                    return o;
                }
            }
            for event in renewer.events() {
                self.say_event(&event);
                let input = match event {
                    Event::Renewed { sent_at, .. } => Input::Renewed { sent_at },
                    // The supervisor hears of the first of a run of failures.
                    Event::Failed { failures: 1, .. } => Input::Unconfirmed,
                    Event::NotOwner => Input::NotOwner,
                    Event::Failed { .. } => continue,
                };
                if let Some(o) = self.feed(input, renewer) {
                    return o;
                }
            }
        }
    }

    /// Who has the terminal now (all false without one).
    fn tty_facts(&self) -> TtyFacts {
        self.tty.map_or(TtyFacts::default(), |t| TtyFacts {
            present: true,
            we_have_it: t.we_are_foreground(),
            cmd_has_it: t.is_foreground(self.pgid),
        })
    }

    /// Steps the machine and carries out its actions; the outcome once the
    /// run is over.
    fn feed(&mut self, input: Input, renewer: &mut Renewer) -> Option<Outcome> {
        for action in self.machine.step(clock::now(), input) {
            match action {
                Action::SignalGroup(_) | Action::SignalCmd(_) if process::no_kill() => {}
                Action::SignalGroup(sig) => process::signal_group(self.pgid, sig),
                Action::SignalCmd(sig) => process::signal_process(self.pgid, sig),
                Action::StopSelf { whole_group } => self.guardian.stop_self(whole_group),
                Action::GiveTerminalToCmd => {
                    if let Some(tty) = self.tty {
                        tty.give_to(self.pgid);
                    }
                }
                Action::TakeTerminalBack => {
                    if let Some(tty) = self.tty {
                        tty.take_back();
                    }
                }
                Action::RenewNow => {
                    if let Some(e) = renewer.renew_now() {
                        self.say_no_thread(&e);
                    }
                }
                Action::ExtendGuardian(at) => self.guardian.extend(at),
                Action::RestartGuardian(at) => match Guardian::start(self.pgid, at) {
                    Ok(new) => {
                        std::mem::replace(&mut self.guardian, new).wait_gone();
                        if self.g.verbose > 0 {
                            self.g
                                .say(format_args!("the guardian died; a new one took its place"));
                        }
                    }
                    Err(e) => {
                        self.guardian_error = Some(e);
                        if let Some(o) = self.feed(Input::GuardianFailed, renewer) {
                            return Some(o);
                        }
                    }
                },
                Action::Lost(loss) => self.say_lost(loss),
                Action::Finish(outcome) => return Some(outcome),
                // Only a supervisor without CMD (`hold`) asks for these.
                Action::SendRenewal { .. } | Action::Release | Action::Exit(_) => {}
            }
        }
        None
    }

    /// Tells the user what the renewer reports: failures (each with -v),
    /// a confirmation after failures, every renewal with -vv.
    fn say_event(&self, event: &Event) {
        let g = self.g;
        match event {
            Event::Renewed { after_failures, .. } => {
                if *after_failures > 0 {
                    g.say(format_args!("renewal of {} confirmed again", self.name));
                }
                if g.verbose >= 2 {
                    g.say(format_args!("renewed {}", self.name));
                }
            }
            Event::Failed {
                error,
                failures,
                left,
            } => {
                if *failures == 1 || g.verbose >= 1 {
                    g.say(format_args!(
                        "warning: {error}; retrying, CMD will be stopped in {} unless a renewal of {} succeeds",
                        fmt_duration(*left),
                        self.name
                    ));
                }
            }
            Event::NotOwner => {}
        }
    }

    /// Nothing renews the lease: the supervisor's deadline stops CMD.
    fn say_no_thread(&self, e: &std::io::Error) {
        self.g.say(format_args!(
            "warning: cannot start the renewer thread: {e}"
        ));
    }

    fn say_lost(&self, loss: Loss) {
        match loss {
            Loss::NotOwner => self.g.say(format_args!(
                "the lease on {} is gone (expired or taken over); stopping CMD",
                self.name
            )),
            Loss::Unconfirmed => self.g.say(format_args!(
                "no renewal of the lease on {} was confirmed in time; stopping CMD before the lease can expire",
                self.name
            )),
            Loss::MaxHold => self.g.say(format_args!(
                "CMD has held {} for --max-hold; stopping it",
                self.name
            )),
            // Exit 125: its one line, even with -q.
            Loss::NoGuardian => super::stderr_line(format_args!(
                "the guardian of CMD's process group died and could not be replaced{}; stopping CMD",
                self.guardian_error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" ({e:#})"))
            )),
        }
    }
}

/// CMD as one line for holder metadata, bounded in length. Every host
/// that can read the lock sees it (`inspect`, `list`), so the passwords of
/// URLs in it are masked, and so is any of distlock's own `passwords`
/// wherever it appears (`--password=$REDIS_PASSWORD`).
fn describe_command(argv: &[OsString], passwords: &[String]) -> String {
    let mut s = argv
        .iter()
        .map(|a| hide(&store::redact_urls_in(&a.to_string_lossy()), passwords))
        .collect::<Vec<_>>()
        .join(" ");
    if s.len() > 1000 {
        let mut cut = 1000;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// `text` with every occurrence of each of `passwords` replaced by `***`;
/// the longest first, so that one password inside another is no clue to
/// the rest of it.
fn hide(text: &str, passwords: &[String]) -> String {
    let mut sorted: Vec<&String> = passwords.iter().filter(|p| !p.is_empty()).collect();
    sorted.sort_by_key(|p| std::cmp::Reverse(p.len()));
    sorted
        .into_iter()
        .fold(text.to_owned(), |t, p| t.replace(p.as_str(), "***"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_command_line_holds_no_password() {
        let argv: Vec<OsString> = [
            "psql",
            "--db=postgres://app:dbpw@db/x",
            "--redis=redis://:hunter2@cache",
            "-p",
            "hunter2",
            "hunter2hunter2",
            "x-hunter2-y",
            "ssh://git@example.com/r",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let known = ["hunter2".to_owned(), "hunter".to_owned(), String::new()];
        assert_eq!(
            describe_command(&argv, &known),
            "psql --db=postgres://app:***@db/x --redis=redis://:***@cache -p *** ****** x-***-y ssh://git@example.com/r"
        );
        // Nothing to hide: the line as it is.
        assert_eq!(describe_command(&argv[..1], &[]), "psql");
    }

    #[test]
    fn a_long_command_line_is_cut_after_masking() {
        let long = format!("redis://u:secretpw@h/{}", "x".repeat(2000));
        let s = describe_command(&[OsString::from(long)], &[]);
        assert!(s.starts_with("redis://u:***@h/"), "{s}");
        assert!(!s.contains("secretpw"));
        assert!(s.ends_with('…') && s.len() <= 1000 + '…'.len_utf8());
    }
}
