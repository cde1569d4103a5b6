//! `distlock run`: acquire, spawn CMD, supervise it while renewing, empty
//! its process group, release, and turn the outcome into an exit status.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{bail, Result};

use super::inspect::readable_done;
use super::metrics;
use super::output::rfc3339;
use super::status_line::StatusLine;
use super::{busy_line, evicted_line, release_quietly, see_through, signal_policy, Global};
use crate::clock;
use crate::config::{self, fmt_duration, RunConfig};
use crate::exit;
use crate::lease::supervisor::{Action, Input, Loss, Options, Outcome, Supervisor, TtyFacts};
use crate::lease::{self, Acquired, Event, LeaseSpec, Renewer};
use crate::process::{self, ChildState, Guardian, Signals, SpawnError, Tty};
use crate::store::{
    self, DoneMark, HistoryRecord, LastRun, LockKeys, Release, RunOutcome, RunRecord,
};

/// `distlock run`: acquire, spawn, supervise, release.
pub fn run(g: &Global, args: RunConfig) -> Result<u8> {
    if let Some(path) = &args.metrics_file {
        metrics::check_path(path)?;
    }
    let timings = args.timings;
    // First, before any thread exists (see process/signals.rs).
    let signals = Signals::install()?;
    let owner = config::new_owner_id()?;
    let host = config::hostname();
    // Written by the acquisition that finds the job done, if one does.
    let skipped = HistoryRecord {
        started_ms: 0,
        duration_ms: 0,
        host: host.clone(),
        pid: std::process::id(),
        owner: owner.clone(),
        token: None,
        outcome: RunOutcome::SkippedDone,
        exit_code: args.done_exit_code,
    };
    let keys = LockKeys::new(&g.prefix, &args.name)
        .with_limit(args.lease.limit)
        .with_once_per(args.once_per)
        .with_skip_record(&skipped, args.history_keep);
    // The acquisition's reply is useful until the kill deadline it would
    // start; a slow Redis is given that long (at most 5s), not less.
    let mut store = g.store(timings.soft_after().min(Duration::from_secs(5)));
    let pid = std::process::id().to_string();
    let mut passwords = store::url_passwords(&g.url);
    passwords.extend(g.security.password.clone());
    let command_line = describe_command(&args.command, &passwords);
    let min_hold = args.lease.min_hold.map(|d| d.as_millis().to_string());
    // `run`: only this run ends the lease; a release by owner (CMD knows
    // the owner id) is refused while it holds it.
    let mut meta = vec![
        ("host", host.as_str()),
        ("pid", pid.as_str()),
        ("command", command_line.as_str()),
        ("run", "1"),
    ];
    if let Some(ms) = &min_hold {
        meta.push(("min_hold_ms", ms.as_str()));
    }

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
    let started = std::time::SystemTime::now();
    let (token, t0) = match lease::acquire(
        &mut store,
        &keys,
        &owner,
        timings.ttl_ms(),
        &meta,
        args.lease.wait,
        args.lease.wait_order,
        &signals,
        &StatusLine::new(g, &keys.name),
    )? {
        Acquired::Yes { token, sent_at } => (token, sent_at),
        Acquired::Busy {
            holder,
            ahead,
            unacked,
        } => {
            g.say(format_args!(
                "{}",
                busy_line(&keys.name, holder, ahead, unacked)
            ));
            return Ok(args.lease.conflict_exit_code);
        }
        Acquired::Evicted => {
            g.say(format_args!("{}", evicted_line(&keys.name)));
            return Ok(args.lease.conflict_exit_code);
        }
        Acquired::Interrupted(sig) => return Ok(exit::signal_code(sig)),
        Acquired::Done(mark) => {
            // The acquisition that found the mark recorded the skip.
            readable_done(&keys, &mark)?;
            g.say(format_args!(
                "{}",
                done_line(&keys.name, &mark, args.once_per.unwrap_or_default())
            ));
            write_metrics(
                g,
                &args,
                std::time::SystemTime::now(),
                0,
                args.done_exit_code,
                false,
            );
            return Ok(args.done_exit_code);
        }
    };
    let acquired_at = std::time::SystemTime::now();
    if g.verbose > 0 {
        g.say(format_args!(
            "acquired {} with fencing token {token} as {owner}",
            keys.name
        ));
    }

    // A terminating signal that arrived during the last attempt still ends
    // the wait: CMD never starts. Others are passed on to CMD once it runs.
    let pending = signals.drain();
    if let Some(&sig) = pending.iter().find(|&&s| signal_policy::ends_wait(s)) {
        release_quietly(g, &mut store, &keys, &owner);
        return Ok(exit::signal_code(sig));
    }
    if clock::now() >= t0 + timings.soft_after() {
        release_quietly(g, &mut store, &keys, &owner);
        bail!(
            "{} answered too slowly: the lease would expire before CMD could run",
            store.display()
        );
    }

    let tty = Tty::open();
    let handoff = tty.as_ref().filter(|t| t.we_are_foreground());
    process::become_subreaper();
    let token_s = token.to_string();
    let mut env = vec![
        ("DISTLOCK_NAME", keys.name.as_str()),
        ("DISTLOCK_KEY", keys.lock.as_str()),
        ("DISTLOCK_OWNER", owner.as_str()),
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
    let deadline = t0 + timings.hard_after();
    // The guardian is forked before CMD (if the wait has not forked it),
    // and CMD's own process arms it before it execs: CMD is never
    // unguarded, even if it stops distlock at once.
    let standby = standby.or_else(|| Guardian::standby().ok());
    let arming = standby.as_ref().and_then(|s| s.arming(deadline));
    let pgid = match process::spawn(&args.command, &env, &signals, handoff, arming) {
        Ok(pid) => pid,
        Err(e) => {
            let code = match &e {
                SpawnError::NotFound(_) => Some(exit::NOT_FOUND),
                SpawnError::CannotExecute(_) => Some(exit::CANNOT_EXECUTE),
                SpawnError::Failed(_) => None,
            };
            match code {
                Some(exit_code) => {
                    let not_started = HistoryRecord {
                        started_ms: 0,
                        duration_ms: clock::now().saturating_sub(t0).as_millis() as u64,
                        host: host.clone(),
                        pid: std::process::id(),
                        owner: owner.clone(),
                        token: Some(token),
                        outcome: RunOutcome::NotStarted,
                        exit_code,
                    };
                    let record = RunRecord {
                        last: None,
                        history: Some((&not_started, args.history_keep)),
                    };
                    if let Err(e) = store.release_recording(&keys, &owner, record, false) {
                        g.say(format_args!("warning: {e:#}"));
                    }
                }
                None => release_quietly(g, &mut store, &keys, &owner),
            }
            if let Some(code) = code {
                let held = clock::now().saturating_sub(t0).as_millis() as u64;
                write_metrics(g, &args, acquired_at, held, code, false);
            }
            let (code, err) = match e {
                SpawnError::NotFound(e) => (exit::NOT_FOUND, e),
                SpawnError::CannotExecute(e) => (exit::CANNOT_EXECUTE, e),
                // distlock's own failure: 125 and its one line, even
                // with -q.
                SpawnError::Failed(e) => {
                    bail!("cannot start {}: {e}", args.command[0].to_string_lossy())
                }
            };
            g.say(format_args!(
                "cannot run {}: {err}",
                args.command[0].to_string_lossy()
            ));
            return Ok(code);
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
            release_quietly(g, &mut store, &keys, &owner);
            return Err(e);
        }
    };
    let spec = LeaseSpec {
        keys: keys.clone(),
        owner: owner.clone(),
        timings,
        t0,
    };
    let mut renewer = Renewer::new(store, spec);

    let options = Options {
        kill_signal: args.kill_signal.number,
        at_risk_signal: args.at_risk_signal.map(|s| s.number),
        max_hold: args.max_hold,
    };
    let mut driver = Driver {
        g,
        name: &keys.name,
        pgid,
        tty: tty.as_ref(),
        guardian,
        guardian_error: None,
        machine: Supervisor::new(timings, options, t0),
    };
    let outcome = driver.drive(&signals, &mut renewer, pending);

    // CMD's group is empty, so the guardian has nothing left to guard: it
    // exits while the release (the next holder is waiting) goes out.
    driver.guardian.stand_down();
    let (store, late) = renewer.stop();
    for event in &late {
        driver.say_event(event);
    }
    let mut store =
        store.unwrap_or_else(|| g.store(timings.renew_every.min(Duration::from_secs(5))));
    // Only a CMD that exited 0 by itself, with the lease still ours, marks
    // the job done (and only if the release finds the lease ours).
    let mark_done = args.once_per.is_some() && outcome.marks_done();
    let not_marked = if mark_done {
        "; no done mark was written, so the job may run again in this window"
    } else {
        ""
    };
    let code = outcome.exit_code();
    let record = LastRun {
        host,
        owner: owner.clone(),
        started_ms: started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        duration_ms: clock::now().saturating_sub(t0).as_millis() as u64,
        exit: code,
        token,
    };
    let entry = HistoryRecord {
        started_ms: record.started_ms,
        duration_ms: record.duration_ms,
        host: record.host.clone(),
        pid: std::process::id(),
        owner: owner.clone(),
        token: Some(token),
        outcome: history_outcome(&outcome),
        exit_code: code,
    };
    let both = RunRecord {
        last: Some((&record, args.last_run_keep)),
        history: Some((&entry, args.history_keep)),
    };
    // A release that woke the next waiter is seen through, once all else
    // is done (see `see_through`).
    let mut handoff = None;
    match outcome.lost {
        Some(Loss::NotOwner) => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(1)));
            let _ = store.record_run(&keys, both);
        }
        Some(Loss::Unconfirmed | Loss::MaxHold | Loss::NoGuardian) => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(1)));
            // The release writes the records only if the lease is still
            // ours; if it is not, they go on their own.
            match store.release_recording(&keys, &owner, both, false) {
                Ok(Release::NotOwner(_)) => {
                    let _ = store.record_run(&keys, both);
                }
                Ok(Release::Released(h)) => handoff = h,
                _ => {}
            }
        }
        None => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(5)));
            let released = store.release_recording(&keys, &owner, both, mark_done);
            if let Ok(Release::NotOwner(_)) = released {
                // Lost after CMD ended: the run happened all the same.
                let _ = store.record_run(&keys, both);
            }
            match released {
                Ok(Release::Released(h)) => handoff = h,
                // HeldByRun only answers a release by owner, not this one.
                Ok(Release::HeldByRun) => {}
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
        }
    }
    driver.guardian.wait_gone();
    let success = entry.outcome == RunOutcome::Success;
    write_metrics(g, &args, acquired_at, record.duration_ms, code, success);
    see_through(g, &mut store, &keys, handoff, Some(&signals));
    Ok(code)
}

/// `--metrics-file`: the run's metrics for monitoring, once its lease is
/// released (the next holder need not wait for a disk). A file that
/// cannot be written is a warning: the job's own status comes first.
fn write_metrics(
    g: &Global,
    args: &RunConfig,
    started: std::time::SystemTime,
    duration_ms: u64,
    exit_code: u8,
    success: bool,
) {
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
        g.say(format_args!("warning: {e:#}"));
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
