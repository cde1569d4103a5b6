//! One function per subcommand. Each returns the exit status for a known
//! outcome (busy, not owner, CMD's own status) and an error only when
//! distlock itself failed; `main` maps errors to 2 or 125.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::cli::RunArgs;
use crate::config::{self, fmt_duration, Signal, Timings};
use crate::exit;
use crate::lease::{self, Acquired, Event, LeaseSpec, Renewer};
use crate::store::{LockKeys, Release, Store, Target};
use crate::supervise::{self, ChildState, Guardian, Signals, SpawnError, Tty};

/// Options shared by every subcommand, resolved.
pub struct Global {
    /// Where Redis is.
    pub target: Target,
    /// Key prefix.
    pub prefix: String,
    /// -v count.
    pub verbose: u8,
    /// -q: no notices or warnings.
    pub quiet: bool,
}

impl Global {
    /// Prints a notice or warning unless `-q`.
    fn say(&self, msg: std::fmt::Arguments<'_>) {
        if !self.quiet {
            eprintln!("distlock: {msg}");
        }
    }
}

/// `distlock run`: acquire, spawn, supervise, release.
pub fn run(g: &Global, args: RunArgs) -> Result<u8> {
    let timings = Timings::new(args.ttl, args.renew_every, args.kill_grace)?;
    // First, before any thread exists (see supervise.rs).
    let signals = Signals::install()?;
    let keys = LockKeys::new(&g.prefix, &args.name);
    let owner = config::new_owner_id()?;
    let mut store = Store::new(
        g.target.clone(),
        timings.renew_every.min(Duration::from_secs(5)),
    );
    let host = config::hostname();
    let pid = std::process::id().to_string();
    let command_line = describe_command(&args.command);
    let meta = [
        ("host", host.as_str()),
        ("pid", pid.as_str()),
        ("command", command_line.as_str()),
    ];

    let (token, t0) = match lease::acquire(
        &mut store,
        &keys,
        &owner,
        timings.ttl_ms(),
        &meta,
        args.wait,
        &signals,
    )? {
        Acquired::Yes { token, sent_at } => (token, sent_at),
        Acquired::Busy { holder } => {
            g.say(format_args!("{} is held by {holder}", keys.name));
            return Ok(args.conflict_exit_code);
        }
        Acquired::Interrupted(sig) => return Ok(exit::signal_code(sig)),
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
    if let Some(&sig) = pending
        .iter()
        .find(|s| supervise::WAIT_ENDERS.contains(s))
    {
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
    let env = [
        ("DISTLOCK_NAME", keys.name.as_str()),
        ("DISTLOCK_KEY", keys.lock.as_str()),
        ("DISTLOCK_OWNER", owner.as_str()),
        ("DISTLOCK_FENCING_TOKEN", token_s.as_str()),
    ];
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
    let renewer = match Renewer::start(store, spec) {
        Ok(r) => r,
        Err(e) => {
            abort_child(pgid);
            guardian.disarm();
            return Err(e);
        }
    };
    for sig in pending {
        forward(pgid, sig);
    }

    let mut sup = Supervisor {
        g,
        name: &keys.name,
        pgid,
        timings,
        kill_signal: args.kill_signal,
        t0,
        tty: tty.as_ref(),
        guardian: &guardian,
        lost: None,
        status: None,
        stopped: false,
        killing: None,
    };
    sup.supervise(&signals, &renewer);
    let (lost, status) = (sup.lost, sup.status);

    guardian.disarm();
    let mut store = renewer.stop();
    match lost {
        Some(Loss::NotOwner) => {}
        Some(Loss::Unconfirmed) => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(1)));
            let _ = store.release(&keys, &owner);
        }
        None => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(5)));
            match store.release(&keys, &owner) {
                Ok(Release::Released) => {}
                Ok(Release::NotOwner(holder)) => g.say(format_args!(
                    "warning: the lease on {} was lost before CMD finished; {}",
                    keys.name,
                    match holder {
                        Some(h) => format!("it is now held by {h}, left alone"),
                        None => "it had expired".to_owned(),
                    }
                )),
                Err(e) => g.say(format_args!(
                    "warning: {e:#}; the lease on {} will expire by itself within {}",
                    keys.name,
                    fmt_duration(timings.ttl)
                )),
            }
        }
    }
    Ok(match (lost, status) {
        (Some(_), _) => exit::LEASE_LOST,
        (None, Some(st)) => exit::from_status(st),
        (None, None) => exit::FAILURE,
    })
}

/// Why CMD is being stopped by distlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// Redis said the lease is no longer ours.
    NotOwner,
    /// No renewal was confirmed in time; the lease may expire.
    Unconfirmed,
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
    fn supervise(&mut self, signals: &Signals, renewer: &Renewer) {
        let soft = self.timings.soft_after();
        let hard = self.timings.hard_after();
        loop {
            let now = lease::now();
            // The deadline comes first, so a distlock that was itself
            // stopped or starved acts on it before anything else.
            if self.lost.is_none() && self.status.is_none() && now >= self.t0 + soft {
                self.lose(Loss::Unconfirmed, self.t0 + hard);
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
            if self.lost.is_none() && self.status.is_none() {
                at(self.t0 + soft);
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
            let (sigs, _) = signals.wait(timeout, Some(renewer.wake_fd()));

            for sig in sigs {
                match sig {
                    libc::SIGCHLD => {}
                    libc::SIGCONT => self.on_continue(renewer),
                    _ => forward(self.pgid, sig),
                }
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
            ChildState::Stopped => self.stopped = true,
            ChildState::Continued => self.stopped = false,
        }
    }

    /// distlock was continued (`fg`, `bg`, `kill -CONT`): CMD may run again
    /// only if the lease is still good; then renew at once, hand over the
    /// terminal if we have it, and continue CMD.
    fn on_continue(&mut self, renewer: &Renewer) {
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

/// Releases a lease we took but will not use; failures only warn, the
/// lease expires by itself.
fn release_quietly(g: &Global, store: &mut Store, keys: &LockKeys, owner: &str) {
    if let Err(e) = store.release(keys, owner) {
        g.say(format_args!("warning: {e:#}"));
    }
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
