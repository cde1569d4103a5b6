//! `distlock run`: acquire, spawn CMD, supervise it while renewing, empty
//! its process group, release, and turn the outcome into an exit status.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{bail, Result};

use super::{busy_line, release_quietly, Global};
use crate::cli::RunArgs;
use crate::config::{self, fmt_duration, Signal, Timings, UsageError};
use crate::exit;
use crate::lease::{self, Acquired, Event, LeaseSpec, Renewer};
use crate::store::{self, DoneMark, LastRun, LockKeys, Release};
use crate::supervise::{self, ChildState, Guardian, Signals, SpawnError, Tty};

/// `distlock run`: acquire, spawn, supervise, release.
pub fn run(g: &Global, args: RunArgs) -> Result<u8> {
    if args.once_per.is_some() && args.lease.limit > 1 {
        // Once per window means one success: N holders at a time would
        // run it N times, and the mark could not say which run counts.
        bail!(UsageError(format!(
            "--once-per cannot be used with --limit {}: a job done once per window has one holder at a time",
            args.lease.limit
        )));
    }
    let timings = Timings::new(args.lease.ttl, args.renew_every, args.kill_grace)?;
    // First, before any thread exists (see supervise.rs).
    let signals = Signals::install()?;
    let keys = LockKeys::new(&g.prefix, &args.name)
        .with_limit(args.lease.limit)
        .with_once_per(args.once_per);
    let owner = config::new_owner_id()?;
    // The acquisition's reply is useful until the kill deadline it would
    // start; a slow Redis is given that long (at most 5s), not less.
    let mut store = g.store(timings.soft_after().min(Duration::from_secs(5)));
    let host = config::hostname();
    let pid = std::process::id().to_string();
    let command_line = describe_command(&args.command);
    let min_hold = args.lease.min_hold.map(|d| d.as_millis().to_string());
    let mut meta = vec![
        ("host", host.as_str()),
        ("pid", pid.as_str()),
        ("command", command_line.as_str()),
    ];
    if let Some(ms) = &min_hold {
        meta.push(("min_hold_ms", ms.as_str()));
    }

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
        Acquired::Interrupted(sig) => return Ok(exit::signal_code(sig)),
        Acquired::Done(mark) => {
            g.say(format_args!(
                "{}",
                done_line(&keys.name, &mark, args.once_per.unwrap_or_default())
            ));
            return Ok(args.done_exit_code);
        }
    };
    if g.verbose > 0 {
        g.say(format_args!(
            "acquired {} with fencing token {token} as {owner}",
            keys.name
        ));
    }

    // A terminating signal that arrived during the last attempt still ends
    // the wait: CMD never starts. Others are passed on to CMD once it runs.
    let pending = signals.drain();
    if let Some(&sig) = pending.iter().find(|s| supervise::WAIT_ENDERS.contains(s)) {
        release_quietly(g, &mut store, &keys, &owner);
        return Ok(exit::signal_code(sig));
    }
    if lease::now() >= t0 + timings.soft_after() {
        release_quietly(g, &mut store, &keys, &owner);
        bail!(
            "redis at {} answered too slowly: the lease would expire before CMD could run",
            store.display()
        );
    }

    let tty = Tty::open();
    let handoff = tty.as_ref().filter(|t| t.we_are_foreground());
    supervise::become_subreaper();
    let token_s = token.to_string();
    let mut env = vec![
        ("DISTLOCK_NAME", keys.name.as_str()),
        ("DISTLOCK_KEY", keys.lock.as_str()),
        ("DISTLOCK_OWNER", owner.as_str()),
        ("DISTLOCK_FENCING_TOKEN", token_s.as_str()),
    ];
    // CMD gets no Redis credentials: DISTLOCK_REDIS_PASSWORD is removed
    // (by spawn), and a DISTLOCK_REDIS_URL that holds a password passes on
    // without it.
    let url_for_cmd = std::env::var("DISTLOCK_REDIS_URL")
        .ok()
        .map(|u| store::without_password(&u));
    if let Some(u) = &url_for_cmd {
        env.push(("DISTLOCK_REDIS_URL", u.as_str()));
    }
    let pgid = match supervise::spawn(&args.command, &env, &signals, handoff) {
        Ok(pid) => pid,
        Err(e) => {
            release_quietly(g, &mut store, &keys, &owner);
            let (code, err) = match e {
                SpawnError::NotFound(e) => (exit::NOT_FOUND, e),
                SpawnError::CannotExecute(e) => (exit::CANNOT_EXECUTE, e),
            };
            g.say(format_args!(
                "cannot run {}: {err}",
                args.command[0].to_string_lossy()
            ));
            return Ok(code);
        }
    };
    let guardian = match Guardian::start(pgid, t0 + timings.hard_after()) {
        Ok(g) => g,
        Err(e) => {
            abort_child(pgid);
            release_quietly(g, &mut store, &keys, &owner);
            return Err(e);
        }
    };
    let spec = LeaseSpec {
        keys: keys.clone(),
        owner: owner.clone(),
        timings,
        t0,
        verbose: g.verbose,
        quiet: g.quiet,
    };
    let mut renewer = Renewer::new(store, spec);

    let mut sup = Supervisor {
        g,
        name: &keys.name,
        pgid,
        timings,
        kill_signal: args.kill_signal,
        // A bound beyond the clock's range is no bound (and no panic with
        // the lease held and CMD running).
        max_hold_at: args.max_hold.and_then(|d| t0.checked_add(d)),
        at_risk: args.at_risk_signal,
        t0,
        tty: tty.as_ref(),
        guardian: &guardian,
        lost: None,
        status: None,
        stopped: false,
        killing: None,
    };
    for sig in pending {
        sup.on_signal(sig, &mut renewer);
    }
    sup.supervise(&signals, &mut renewer);
    let (lost, status) = (sup.lost, sup.status);

    // CMD's group is empty: release first (the next holder is waiting),
    // then stand the guardian down.
    let mut store = renewer
        .stop()
        .unwrap_or_else(|| g.store(timings.renew_every.min(Duration::from_secs(5))));
    // Only a CMD that exited 0 by itself, with the lease still ours, marks
    // the job done (and only if the release finds the lease ours).
    let mark_done =
        args.once_per.is_some() && lost.is_none() && status.is_some_and(|s| s.success());
    let not_marked = if mark_done {
        "; no done mark was written, so the job may run again in this window"
    } else {
        ""
    };
    let code = match (lost, status) {
        (Some(_), _) => exit::LEASE_LOST,
        (None, Some(st)) => exit::from_status(st),
        (None, None) => exit::FAILURE,
    };
    let record = LastRun {
        host,
        owner: owner.clone(),
        started_ms: started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        duration_ms: lease::now().saturating_sub(t0).as_millis() as u64,
        exit: code,
        token,
    };
    match lost {
        Some(Loss::NotOwner) => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(1)));
            let _ = store.record_last_run(&keys, &record, args.last_run_keep);
        }
        Some(Loss::Unconfirmed | Loss::MaxHold) => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(1)));
            let last = Some((&record, args.last_run_keep));
            let _ = store.release_recording(&keys, &owner, last, false);
        }
        None => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(5)));
            let last = Some((&record, args.last_run_keep));
            match store.release_recording(&keys, &owner, last, mark_done) {
                Ok(Release::Released) => {}
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
    guardian.disarm();
    Ok(code)
}

/// The line `run --once-per` prints when the job is already done:
/// `billing: already done 3h 2m ago (2026-12-02T00:00:01Z) on web-2 with
/// fencing token 41; CMD not started (--once-per 20h)`. The age is the
/// server's, so a host with a wrong clock still reads it right.
fn done_line(name: &str, mark: &DoneMark, window: Duration) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(mark.at_ms);
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
        "{name}: already done {age} ago ({}) on {host} with fencing token {}; CMD not started (--once-per {})",
        humantime::format_rfc3339_seconds(at),
        mark.token,
        fmt_duration(window)
    )
}

/// Why CMD is being stopped by distlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// Redis said the lease is no longer ours.
    NotOwner,
    /// No renewal was confirmed in time; the lease may expire.
    Unconfirmed,
    /// CMD held the lock for `--max-hold`.
    MaxHold,
}

/// The escalation in progress: the first signal went out, SIGKILL follows.
#[derive(Debug, Clone, Copy)]
struct Killing {
    sigkill_at: Duration,
    sigkill_sent: bool,
}

/// The main loop's state while CMD runs.
struct Supervisor<'a> {
    g: &'a Global,
    name: &'a str,
    /// CMD's pid, which is also its process group id.
    pgid: i32,
    timings: Timings,
    kill_signal: Signal,
    /// When `--max-hold` runs out (boot-time clock).
    max_hold_at: Option<Duration>,
    /// `--at-risk-signal`, until it has been sent once.
    at_risk: Option<Signal>,
    /// Send time of the last confirmed acquire/renew (boot-time clock).
    t0: Duration,
    tty: Option<&'a Tty>,
    /// Kills CMD's group if distlock dies or cannot act by the deadline;
    /// told of every renewal.
    guardian: &'a Guardian,
    /// Set once the lease is lost; CMD is being stopped.
    lost: Option<Loss>,
    /// CMD's wait status once it has ended.
    status: Option<ExitStatus>,
    /// CMD is stopped (job control).
    stopped: bool,
    /// Set once distlock has begun to signal CMD's group.
    killing: Option<Killing>,
}

impl Supervisor<'_> {
    /// Runs until CMD has ended and its whole process group is gone.
    fn supervise(&mut self, signals: &Signals, renewer: &mut Renewer) {
        let soft = self.timings.soft_after();
        let hard = self.timings.hard_after();
        loop {
            let now = lease::now();
            // The deadline comes first, so a distlock that was itself
            // stopped or starved acts on it before anything else.
            if self.lost.is_none() && self.status.is_none() && now >= self.t0 + soft {
                self.lose(Loss::Unconfirmed, self.t0 + hard);
            }
            // A renewal not confirmed half a period after it was due has
            // failed to be confirmed in time, whether or not its request
            // has timed out yet: warn CMD now, while it has the most time.
            if self.lost.is_none() && self.status.is_none() && now >= self.at_risk_at() {
                self.warn_at_risk();
            }
            if let Some(at) = self.max_hold_at {
                if self.lost.is_none() && self.status.is_none() && now >= at {
                    let sigkill_at = (now + self.timings.kill_grace).min(self.t0 + hard);
                    self.lose(Loss::MaxHold, sigkill_at);
                }
            }
            if let Some(k) = &mut self.killing {
                if !k.sigkill_sent && now >= k.sigkill_at {
                    supervise::signal_group(self.pgid, libc::SIGKILL);
                    k.sigkill_sent = true;
                }
            }
            if self.status.is_some() {
                if supervise::group_is_empty(self.pgid) {
                    return;
                }
                if self.killing.is_none() {
                    // CMD is gone but left processes in its group: they
                    // must not outlive the lease.
                    let sigkill_at = (now + self.timings.kill_grace).min(self.t0 + hard);
                    self.start_kill(sigkill_at);
                }
            }

            let mut wake: Option<Duration> = None;
            let mut at = |t: Duration| wake = Some(wake.map_or(t, |w| w.min(t)));
            if let Some(t) = renewer.start_at() {
                at(t);
            }
            if self.lost.is_none() && self.status.is_none() {
                at(self.t0 + soft);
                if let Some(m) = self.max_hold_at {
                    at(m);
                }
                if self.at_risk.is_some() {
                    at(self.at_risk_at());
                }
            }
            if let Some(k) = self.killing.filter(|k| !k.sigkill_sent) {
                at(k.sigkill_at);
            }
            if self.status.is_some() {
                // Group members that are not our children report no exit:
                // look again soon.
                at(now + Duration::from_millis(10));
            }
            let timeout = wake.map(|w| w.saturating_sub(lease::now()));
            let (sigs, _) = signals.wait(timeout, renewer.wake_fd());
            renewer.start_if_due(lease::now());

            for sig in sigs {
                self.on_signal(sig, renewer);
            }
            if let Some(state) = supervise::reap(self.pgid) {
                self.on_child(state);
            }
            for event in renewer.events() {
                match event {
                    Event::Renewed { sent_at } => {
                        if sent_at > self.t0 {
                            self.t0 = sent_at;
                            if self.lost.is_none() {
                                self.guardian.extend(self.t0 + hard);
                            }
                        }
                    }
                    Event::Unconfirmed => {
                        if self.status.is_none() {
                            self.warn_at_risk();
                        }
                    }
                    Event::NotOwner => {
                        if self.lost.is_none() && self.status.is_none() {
                            let at = lease::now() + self.timings.kill_grace;
                            self.lose(Loss::NotOwner, at);
                        }
                    }
                }
            }
            if self.stopped && self.killing.is_none() {
                // CMD was stopped (Ctrl-Z, SIGTSTP): stop too, so the shell
                // gets its prompt back. While stopped, nothing renews.
                let whole_group = self.tty.is_some_and(|t| t.is_foreground(self.pgid));
                supervise::stop_self(whole_group);
            }
        }
    }

    /// A signal sent to distlock: SIGCHLD is ours (the reaping follows),
    /// SIGCONT resumes the job, a stop signal stops it, and everything else
    /// goes on to CMD's group.
    fn on_signal(&mut self, sig: i32, renewer: &mut Renewer) {
        match sig {
            libc::SIGCHLD => {}
            libc::SIGCONT => self.on_continue(renewer),
            s if supervise::STOPS.contains(&s) => self.on_stop_request(),
            _ => forward(self.pgid, sig),
        }
    }

    /// A SIGTSTP, SIGTTIN or SIGTTOU sent to distlock itself (`kill -TSTP`;
    /// the terminal's Ctrl-Z goes to CMD's foreground group instead): stop
    /// CMD's whole group with SIGSTOP, as dumb-init does in its setsid
    /// mode. Forwarding the signal itself would let a CMD that catches
    /// SIGTSTP run on, and distlock would then either stop while CMD runs
    /// without renewals, or never stop. distlock stops once CMD is reported
    /// stopped (`on_child`, then the end of the loop), so it never stops
    /// while CMD keeps running.
    ///
    /// While CMD is being killed, or has exited and its group is being
    /// emptied, a stop is ignored: the group must be able to act on the
    /// kill signal before its deadline.
    fn on_stop_request(&mut self) {
        if self.killing.is_none() && self.status.is_none() {
            supervise::signal_group(self.pgid, libc::SIGSTOP);
        }
    }

    /// When a renewal counts as overdue: half a period after it was due,
    /// or half-way from then to the kill deadline if that is sooner.
    fn at_risk_at(&self) -> Duration {
        let due = self.timings.renew_every;
        let soft = self.timings.soft_after();
        self.t0 + (due * 3 / 2).min((due + soft) / 2)
    }

    /// Sends `--at-risk-signal`, once, to CMD itself, not its group:
    /// children that do not expect it would die of it.
    fn warn_at_risk(&mut self) {
        if let Some(sig) = self.at_risk.take() {
            supervise::signal_process(self.pgid, sig.number);
        }
    }

    fn lose(&mut self, loss: Loss, sigkill_at: Duration) {
        self.lost = Some(loss);
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
        }
        self.start_kill(sigkill_at);
    }

    /// Sends the kill signal to CMD's group, SIGKILL at `sigkill_at`. A
    /// stopped CMD gets SIGKILL at once: it would otherwise run again just
    /// to handle the first signal, after its lease is gone.
    fn start_kill(&mut self, sigkill_at: Duration) {
        let sig = if self.stopped {
            libc::SIGKILL
        } else {
            self.kill_signal.number
        };
        supervise::signal_group(self.pgid, sig);
        if sig != libc::SIGKILL {
            // Stopped members of the group cannot act on it otherwise.
            supervise::signal_group(self.pgid, libc::SIGCONT);
        }
        self.killing = Some(Killing {
            sigkill_at,
            sigkill_sent: sig == libc::SIGKILL,
        });
    }

    fn on_child(&mut self, state: ChildState) {
        match state {
            ChildState::Exited(st) => {
                self.status = Some(st);
                self.stopped = false;
                // Take the terminal back from CMD's (now leaderless) group.
                if let Some(tty) = self.tty.filter(|t| t.is_foreground(self.pgid)) {
                    // SAFETY: plain syscall.
                    tty.give_to(unsafe { libc::getpgrp() });
                }
            }
            ChildState::Stopped(sig) => {
                // CMD used the terminal from a background group although
                // distlock is now the foreground job: the shell's `fg` of a
                // job that was running in the background (after `&` or
                // `bg`) hands over the terminal but sends no SIGCONT, so
                // distlock heard nothing. Pass the terminal on and let CMD
                // go on, as it would have if it were the job itself,
                // instead of stopping the whole job.
                let tty = self.tty.filter(|t| t.we_are_foreground());
                match tty {
                    Some(tty) if self.killing.is_none() && is_tty_stop(sig) => {
                        tty.give_to(self.pgid);
                        supervise::signal_group(self.pgid, libc::SIGCONT);
                    }
                    _ => self.stopped = true,
                }
            }
            ChildState::Continued => self.stopped = false,
        }
    }

    /// distlock was continued (`fg`, `bg`, `kill -CONT`): CMD may run again
    /// only if the lease is still good; then renew at once, hand over the
    /// terminal if we have it, and continue CMD.
    fn on_continue(&mut self, renewer: &mut Renewer) {
        if self.killing.is_some() {
            return;
        }
        if self.status.is_none() && lease::now() >= self.t0 + self.timings.soft_after() {
            let at = self.t0 + self.timings.hard_after();
            self.lose(Loss::Unconfirmed, at);
            return;
        }
        renewer.renew_now();
        if let Some(tty) = self.tty.filter(|t| t.we_are_foreground()) {
            tty.give_to(self.pgid);
        }
        supervise::signal_group(self.pgid, libc::SIGCONT);
        self.stopped = false;
    }
}

/// Whether a stop came from using the terminal outside its foreground
/// group (reading it, or writing or changing its modes with TOSTOP).
fn is_tty_stop(sig: i32) -> bool {
    sig == libc::SIGTTIN || sig == libc::SIGTTOU
}

/// Passes a signal sent to distlock on to CMD's process group.
fn forward(pgid: i32, sig: i32) {
    supervise::signal_group(pgid, sig);
}

/// Kills and reaps a CMD that must not run (distlock cannot supervise it).
fn abort_child(pgid: i32) {
    supervise::signal_group(pgid, libc::SIGKILL);
    let mut status = 0;
    // SAFETY: plain waitpid on our child.
    unsafe { libc::waitpid(pgid, &mut status, 0) };
}

/// CMD as one line for holder metadata, bounded in length.
fn describe_command(argv: &[OsString]) -> String {
    let mut s = argv
        .iter()
        .map(|a| a.to_string_lossy())
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
