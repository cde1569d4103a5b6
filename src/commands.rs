//! One function per subcommand. Each returns the exit status for a known
//! outcome (busy, not owner, CMD's own status) and an error only when
//! distlock itself failed; `main` maps errors to 2 or 125.

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cli::{
    AcquireArgs, DoctorArgs, HoldArgs, HoldRenewerArgs, InspectArgs, ListArgs, ReleaseArgs,
    RenewArgs, RunArgs,
};
use crate::config::{self, fmt_duration, Signal, Timings, UsageError, Wait};
use crate::exit;
use crate::lease::{self, Acquired, Event, LeaseSpec, Renewer};
use crate::store::{
    self, LastRun, LockInfo, LockKeys, Release, Security, SlotsInfo, Store, Target,
};
use crate::supervise::{self, ChildState, Guardian, Signals, SpawnError, Tty};

/// Options shared by every subcommand, resolved.
pub struct Global {
    /// The Redis URL as given (with any password): only ever passed on in
    /// the environment of `hold`'s renewer, never printed.
    pub url: String,
    /// Where Redis is.
    pub target: Target,
    /// Password and TLS settings, passed on to `hold`'s renewer.
    pub security: Security,
    /// Key prefix.
    pub prefix: String,
    /// `--min-replicas`.
    pub min_replicas: u32,
    /// -v count.
    pub verbose: u8,
    /// -q: no notices or warnings.
    pub quiet: bool,
}

impl Global {
    /// A store for this target, with `--min-replicas` applied.
    fn store(&self, timeout: Duration) -> Store {
        let mut store = Store::new(self.target.clone(), timeout);
        store.set_min_replicas(self.min_replicas);
        store
    }

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
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let owner = config::new_owner_id()?;
    // The acquisition's reply is useful until the kill deadline it would
    // start; a slow Redis is given that long (at most 5s), not less.
    let mut store = g.store(timings.soft_after().min(Duration::from_secs(5)));
    let host = config::hostname();
    let pid = std::process::id().to_string();
    let command_line = describe_command(&args.command);
    let min_hold = args.min_hold.map(|d| d.as_millis().to_string());
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
        args.wait,
        args.wait_order,
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
    for sig in pending {
        forward(pgid, sig);
    }

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
    sup.supervise(&signals, &mut renewer);
    let (lost, status) = (sup.lost, sup.status);

    // CMD's group is empty: release first (the next holder is waiting),
    // then stand the guardian down.
    let mut store = renewer
        .stop()
        .unwrap_or_else(|| g.store(timings.renew_every.min(Duration::from_secs(5))));
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
            let _ = store.release_recording(&keys, &owner, last);
        }
        None => {
            store.set_timeout(timings.renew_every.min(Duration::from_secs(5)));
            let last = Some((&record, args.last_run_keep));
            match store.release_recording(&keys, &owner, last) {
                Ok(Release::Released) => {}
                Ok(Release::Kept(left)) if g.verbose > 0 => g.say(format_args!(
                    "{} stays held for another {} (--min-hold)",
                    keys.name,
                    fmt_duration(left)
                )),
                Ok(Release::Kept(_)) => {}
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
    guardian.disarm();
    Ok(code)
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
                    Event::Unconfirmed => {
                        if let Some(sig) = self.at_risk.take() {
                            if self.status.is_none() {
                                // CMD itself, not its group: children that
                                // do not expect it would die of it.
                                supervise::signal_process(self.pgid, sig.number);
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

/// A lease taken by `acquire` or `hold`.
struct Taken {
    keys: LockKeys,
    owner: String,
    token: u64,
    ttl_ms: u64,
    sent_at: Duration,
}

/// The common part of `acquire` and `hold`: take the lease, waiting as
/// asked. Err(code) is the exit status of a known outcome (busy, signal).
fn take(g: &Global, args: &AcquireArgs) -> Result<Result<Taken, u8>> {
    if args.ttl.as_millis() < 1 {
        bail!(UsageError("--ttl must be at least 1ms".into()));
    }
    // Waiting is interruptible by SIGINT/SIGTERM/SIGHUP (exit 128+N).
    let signals = Signals::install()?;
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let owner = match &args.owner {
        Some(o) => o.clone(),
        None => config::new_owner_id()?,
    };
    let ttl_ms = args.ttl.as_millis() as u64;
    let mut store = g.store(IO_TIMEOUT);
    let host = config::hostname();
    let pid = std::process::id().to_string();
    let min_hold = args.min_hold.map(|d| d.as_millis().to_string());
    let mut meta = vec![("host", host.as_str()), ("pid", pid.as_str())];
    if let Some(ms) = &min_hold {
        meta.push(("min_hold_ms", ms.as_str()));
    }
    match lease::acquire(
        &mut store,
        &keys,
        &owner,
        ttl_ms,
        &meta,
        args.wait,
        args.wait_order,
        &signals,
    )? {
        Acquired::Yes { token, sent_at } => Ok(Ok(Taken {
            keys,
            owner,
            token,
            ttl_ms,
            sent_at,
        })),
        Acquired::Busy {
            holder,
            ahead,
            unacked,
        } => {
            g.say(format_args!(
                "{}",
                busy_line(&keys.name, holder, ahead, unacked)
            ));
            Ok(Err(args.conflict_exit_code))
        }
        Acquired::Interrupted(sig) => Ok(Err(exit::signal_code(sig))),
    }
}

/// Prints a taken lease as `export` lines or one JSON object; `extra` adds
/// fields (the renewer's pid for `hold`).
fn print_taken(t: &Taken, json: bool, extra: &[(&str, u64)]) {
    if json {
        let mut obj = serde_json::json!({
            "name": t.keys.name,
            "key": t.keys.lock,
            "owner": t.owner,
            "fencing_token": t.token,
            "ttl_ms": t.ttl_ms,
        });
        for (k, v) in extra {
            obj[*k] = (*v).into();
        }
        println!("{obj}");
        return;
    }
    let mut out = format!(
        "export DISTLOCK_NAME={}\nexport DISTLOCK_OWNER={}\nexport DISTLOCK_FENCING_TOKEN={}",
        shell_quote(&t.keys.name),
        shell_quote(&t.owner),
        shell_quote(&t.token.to_string())
    );
    for (k, v) in extra {
        let var = match *k {
            "renewer_pid" => "DISTLOCK_HOLD_PID",
            other => other,
        };
        out.push_str(&format!("\nexport {var}={}", shell_quote(&v.to_string())));
    }
    println!("{out}");
}

/// `distlock acquire`: take the lease and print how to use it.
pub fn acquire(g: &Global, args: AcquireArgs) -> Result<u8> {
    match take(g, &args)? {
        Ok(t) => {
            print_taken(&t, args.json, &[]);
            Ok(0)
        }
        Err(code) => Ok(code),
    }
}

/// `distlock hold`: `acquire`, plus a detached process that renews the
/// lease until it is released, `--max` passes or renewal fails.
pub fn hold(g: &Global, args: HoldArgs) -> Result<u8> {
    let t = match take(g, &args.acquire)? {
        Ok(t) => t,
        Err(code) => return Ok(code),
    };
    // The renewer gets the deadline as boot-clock nanoseconds in a u64
    // (about 584 years): one it cannot be told, or that the clock cannot
    // count to, is no deadline, rather than a renewer that refuses its
    // arguments and leaves the lease to expire while `hold` says it holds.
    let release_at = match args.max {
        Wait::For(d) => t
            .sent_at
            .checked_add(d)
            .filter(|at| u64::try_from(at.as_nanos()).is_ok()),
        Wait::Forever => None,
    };
    let mut cmd = std::process::Command::new(
        std::env::current_exe().context("cannot find distlock's own executable")?,
    );
    cmd.arg("__hold-renewer")
        .arg(&t.keys.name)
        .arg("--limit")
        .arg(t.keys.limit.unwrap_or(1).to_string())
        .env("DISTLOCK_OWNER", &t.owner)
        .arg("--ttl")
        .arg(format!("{}ms", t.ttl_ms))
        .arg("--t0-ns")
        .arg(t.sent_at.as_nanos().to_string());
    if let Some(at) = release_at {
        cmd.arg("--release-at-ns").arg(at.as_nanos().to_string());
    }
    // The URL travels in the environment, never on a command line that
    // `ps` shows; the renewer detaches from the terminal and from the
    // caller's stdout (a `$(distlock hold …)` must not wait for it).
    cmd.env("DISTLOCK_REDIS_URL", &g.url)
        .env("DISTLOCK_PREFIX", &g.prefix)
        .env("DISTLOCK_MIN_REPLICAS", g.min_replicas.to_string())
        .env_remove("DISTLOCK_REDIS_PASSWORD_FILE");
    let s = &g.security;
    for (var, val) in [
        ("DISTLOCK_TLS_CA", &s.tls_ca),
        ("DISTLOCK_TLS_CERT", &s.tls_cert),
        ("DISTLOCK_TLS_KEY", &s.tls_key),
    ] {
        match val {
            Some(p) => cmd.env(var, p),
            None => cmd.env_remove(var),
        };
    }
    match &s.password {
        Some(p) => cmd.env("DISTLOCK_REDIS_PASSWORD", p),
        None => cmd.env_remove("DISTLOCK_REDIS_PASSWORD"),
    };
    if s.tls_insecure {
        cmd.arg("--tls-insecure").arg("--quiet");
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let mut store = g.store(IO_TIMEOUT);
            release_quietly(g, &mut store, &t.keys, &t.owner);
            return Err(e).context("cannot start the background renewer");
        }
    };
    print_taken(
        &t,
        args.acquire.json,
        &[("renewer_pid", u64::from(child.id()))],
    );
    Ok(0)
}

/// The background renewer of `hold`. Exits when the lease is released by
/// someone (renewal says "not owner"), at `--release-at-ns` (then it
/// releases), on SIGTERM/SIGINT/SIGHUP (releases), or when no renewal was
/// confirmed before the lease could expire.
pub fn hold_renewer(g: &Global, args: HoldRenewerArgs) -> Result<u8> {
    let signals = Signals::install()?;
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let ttl = Duration::from_millis(args.ttl.as_millis().max(1) as u64);
    let renew_every = ttl / 3;
    let margin = ttl / 100 + Duration::from_millis(5);
    let retry = (renew_every / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    let release_at = args.release_at_ns.map(Duration::from_nanos);
    let mut store = g.store(renew_every);
    let mut last_ok = Duration::from_nanos(args.t0_ns);
    let mut next = last_ok + renew_every;
    loop {
        let wake = release_at.map_or(next, |r| r.min(next));
        let (sigs, _) = signals.wait(Some(wake.saturating_sub(lease::now())), None);
        let now = lease::now();
        let stop = sigs.iter().any(|s| supervise::WAIT_ENDERS.contains(s));
        if stop || release_at.is_some_and(|r| now >= r) {
            let _ = store.release(&keys, &args.owner);
            return Ok(0);
        }
        if now >= last_ok + ttl - margin {
            return Ok(exit::LEASE_LOST);
        }
        if now < next {
            continue;
        }
        store.set_timeout((last_ok + ttl - margin - now).min(renew_every));
        match store.renew(&keys, &args.owner, ttl.as_millis() as u64) {
            Ok(true) => {
                last_ok = now;
                next = now + renew_every;
            }
            Ok(false) => return Ok(0),
            Err(_) => next = now + retry,
        }
    }
}

/// `distlock renew`: compare-and-extend.
pub fn renew(g: &Global, args: RenewArgs) -> Result<u8> {
    let owner = require_owner(args.owner)?;
    if args.ttl.as_millis() < 1 {
        bail!(UsageError("--ttl must be at least 1ms".into()));
    }
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let mut store = g.store(IO_TIMEOUT);
    if store.renew(&keys, &owner, args.ttl.as_millis() as u64)? {
        return Ok(0);
    }
    g.say(format_args!("{} is not held by {owner}", keys.name));
    Ok(exit::NOT_OWNER)
}

/// `distlock release`: compare-and-delete, or `--force`.
pub fn release(g: &Global, args: ReleaseArgs) -> Result<u8> {
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let mut store = g.store(IO_TIMEOUT);
    if args.force {
        return Ok(match store.force_release(&keys)? {
            Some(holder) => {
                println!("released {}, held by {holder}", keys.name);
                0
            }
            None => {
                g.say(format_args!("{} was not held", keys.name));
                exit::NOT_OWNER
            }
        });
    }
    let owner = require_owner(args.owner)?;
    match store.release(&keys, &owner)? {
        Release::Released => Ok(0),
        Release::Kept(left) => {
            g.say(format_args!(
                "{} stays held for another {} (--min-hold)",
                keys.name,
                fmt_duration(left)
            ));
            Ok(0)
        }
        Release::NotOwner(holder) => {
            g.say(format_args!(
                "{} is not held by {owner}; {}",
                keys.name,
                match holder {
                    Some(h) => format!("held by {h}, left alone"),
                    None => "it is free".to_owned(),
                }
            ));
            Ok(exit::NOT_OWNER)
        }
    }
}

/// `distlock inspect`: one lock, for people or (with --json) programs.
pub fn inspect(g: &Global, args: InspectArgs) -> Result<u8> {
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let mut store = g.store(IO_TIMEOUT);
    if keys.limit.is_some() {
        return inspect_slots(&mut store, &keys, args.json);
    }
    let info = store.inspect(&keys)?;
    if args.json {
        println!("{}", info_json(&keys, &info));
        return Ok(0);
    }
    let token = match info.token {
        Some(t) => format!("token {t}"),
        None => "never acquired".to_owned(),
    };
    match &info.holder {
        Some(owner) => {
            let expires = info.ttl.map_or("no expiry".to_owned(), |t| {
                format!("expires in {}", fmt_ttl(t))
            });
            println!("{}: held by {owner}, {expires}, {token}", keys.name);
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
                println!("{line}");
            }
        }
        None => {
            let last = match info.token {
                Some(t) => format!("last token {t}"),
                None => token,
            };
            println!("{}: free, {last}", keys.name);
        }
    }
    if let Some(last) = LastRunView::of(&info.last_run) {
        println!("  last run: {}", last.line());
    }
    Ok(0)
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
        println!("{}", slots_json(keys, &info));
        return Ok(0);
    }
    println!(
        "{}: {} of {n} slots held{}",
        keys.name,
        info.holders.len(),
        info.token
            .map_or(", never acquired".into(), |t| format!(", last token {t}"))
    );
    for (o, left, t) in &info.holders {
        println!("  {o}, expires in {}, token {t}", fmt_ttl(*left));
    }
    if let Some(last) = LastRunView::of(&info.last_run) {
        println!("  last run: {}", last.line());
    }
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
        let t = std::time::UNIX_EPOCH + Duration::from_millis(self.started_ms?);
        Some(humantime::format_rfc3339_seconds(t).to_string())
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

/// `distlock list`: every held lock under the prefix.
pub fn list(g: &Global, args: ListArgs) -> Result<u8> {
    let mut store = g.store(IO_TIMEOUT);
    let found = store.list_names(&g.prefix)?;
    let plain: Vec<LockKeys> = found
        .iter()
        .filter(|f| !f.semaphore)
        .map(|f| LockKeys::new(&g.prefix, &f.name))
        .collect();
    let infos = store.inspect_many(&plain)?;
    // (name, JSON object, table row), merged and sorted by name.
    let mut entries: Vec<(String, serde_json::Value, [String; 5])> = plain
        .iter()
        .zip(&infos)
        .filter(|(_, i)| i.holder.is_some())
        .map(|(k, i)| {
            let row = [
                k.name.clone(),
                i.ttl.map_or("-".into(), fmt_ttl),
                i.token.map_or("-".into(), |t| t.to_string()),
                i.holder.clone().unwrap_or_default(),
                Meta::of(i).command.unwrap_or("").to_owned(),
            ];
            (k.name.clone(), info_json(k, i), row)
        })
        .collect();
    for f in found.iter().filter(|f| f.semaphore) {
        // Any N above 1 reads the slots; the agreed N comes back with them.
        let keys = LockKeys::new(&g.prefix, &f.name).with_limit(2);
        let Ok(info) = store.inspect_slots(&keys) else {
            continue;
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
        ];
        entries.push((f.name.clone(), slots_json(&keys, &info), row));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    if args.json {
        let arr: Vec<_> = entries.into_iter().map(|e| e.1).collect();
        println!("{}", serde_json::Value::Array(arr));
        return Ok(0);
    }
    if entries.is_empty() {
        g.say(format_args!("no locks held under prefix {}", g.prefix));
        return Ok(0);
    }
    let rows: Vec<[String; 5]> = entries.into_iter().map(|e| e.2).collect();
    let header = ["NAME", "EXPIRES IN", "TOKEN", "OWNER", "COMMAND"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let line = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        println!("{}", line.trim_end());
    }
    Ok(0)
}

/// The conflict line: who holds the lock, naming the full owner id.
fn busy_line(name: &str, holder: Option<String>, ahead: Option<String>, unacked: bool) -> String {
    if unacked {
        return format!(
            "{name} was taken but not acknowledged by --min-replicas replicas in time, so it was released"
        );
    }
    match (holder, ahead) {
        (Some(h), _) => format!("{name} is held by {h}"),
        (None, Some(a)) => format!("{name} is being handed to the next waiter in line, {a}"),
        (None, None) => format!("{name} is busy"),
    }
}

/// How worrying one `doctor` finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Ok,
    Warn,
    Danger,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Danger => "danger",
        }
    }
}

/// One `doctor` line.
struct Check {
    name: &'static str,
    verdict: Verdict,
    detail: String,
    advice: String,
}

/// `distlock doctor`: is this Redis fit to hold leases?
pub fn doctor(g: &Global, args: DoctorArgs) -> Result<u8> {
    let mut store = g.store(IO_TIMEOUT);
    let mut checks = Vec::new();
    let mut rtts = Vec::new();
    let mut reach_error = None;
    for _ in 0..5 {
        let t = std::time::Instant::now();
        match store.command("PING", &redis::cmd("PING")) {
            Ok(_) => rtts.push(t.elapsed()),
            Err(e) => {
                reach_error = Some(e);
                break;
            }
        }
    }
    if let Some(e) = reach_error {
        checks.push(Check {
            name: "reachable",
            verdict: Verdict::Danger,
            detail: format!("{e:#}"),
            advice: "check the URL, the network, the password and TLS settings".into(),
        });
        print_checks(&checks, args.json);
        return Ok(exit::FAILURE);
    }
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    checks.push(Check {
        name: "reachable",
        verdict: if median > Duration::from_millis(100) {
            Verdict::Warn
        } else {
            Verdict::Ok
        },
        detail: format!(
            "{} answered PING in {:.2} ms (median of {})",
            store.display(),
            median.as_secs_f64() * 1000.0,
            rtts.len()
        ),
        advice: if median > Duration::from_millis(100) {
            "slow round trips eat into the lease: use a --ttl far above them".into()
        } else {
            String::new()
        },
    });

    let info =
        |store: &mut Store, section: &str| -> Result<std::collections::HashMap<String, String>> {
            let v = store.command("INFO", redis::cmd("INFO").arg(section))?;
            let text = match v {
                redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                redis::Value::VerbatimString { text, .. } => text,
                other => format!("{other:?}"),
            };
            Ok(text
                .lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
                .collect())
        };
    let server = info(&mut store, "server")?;
    let version = server.get("redis_version").cloned().unwrap_or_default();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    checks.push(Check {
        name: "version",
        verdict: if major >= 5 {
            Verdict::Ok
        } else {
            Verdict::Danger
        },
        detail: format!("redis {version}"),
        advice: if major >= 5 {
            String::new()
        } else {
            "distlock's scripts read the server clock (TIME), which needs Redis 5 or later".into()
        },
    });

    let persistence = info(&mut store, "persistence")?;
    let aof = persistence.get("aof_enabled").map(String::as_str) == Some("1");
    checks.push(Check {
        name: "persistence",
        verdict: if aof { Verdict::Ok } else { Verdict::Danger },
        detail: if aof {
            "appendonly yes".into()
        } else {
            "appendonly no: a restart forgets leases and resets fencing counters".into()
        },
        advice: if aof {
            String::new()
        } else {
            "set appendonly yes (appendfsync everysec or always), or fencing tokens can go backwards after a restart".into()
        },
    });

    let memory = info(&mut store, "memory")?;
    let policy = memory
        .get("maxmemory_policy")
        .cloned()
        .unwrap_or_else(|| "unknown".into());
    let evicts = policy.starts_with("allkeys-") || policy.starts_with("volatile-");
    checks.push(Check {
        name: "maxmemory-policy",
        verdict: if evicts { Verdict::Danger } else { Verdict::Ok },
        detail: format!("maxmemory-policy {policy}"),
        advice: if evicts {
            "use noeviction: under memory pressure this policy can evict a held lease (two holders) or a fencing counter (allkeys-*)".into()
        } else {
            String::new()
        },
    });

    let replication = info(&mut store, "replication")?;
    let role = replication.get("role").cloned().unwrap_or_default();
    let replicas: u32 = replication
        .get("connected_slaves")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (verdict, detail, advice) = match (role.as_str(), replicas) {
        ("slave" | "replica", _) => (
            Verdict::Danger,
            "role replica: writes are refused".to_owned(),
            "point distlock at the master".to_owned(),
        ),
        (_, 0) => (Verdict::Ok, "role master, no replicas".to_owned(), String::new()),
        (_, n) => (
            Verdict::Warn,
            format!("role master with {n} replica(s)"),
            "replication is asynchronous: a failover can lose a lease; see the README's High availability".to_owned(),
        ),
    };
    checks.push(Check {
        name: "role",
        verdict,
        detail,
        advice,
    });

    let time = |store: &mut Store| -> Result<Duration> {
        let v = store.command("TIME", &redis::cmd("TIME"))?;
        let parts: Vec<u64> = match v {
            redis::Value::Array(a) => a
                .iter()
                .filter_map(|x| match x {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).parse().ok(),
                    redis::Value::Int(i) => u64::try_from(*i).ok(),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        match parts.as_slice() {
            [s, us] => Ok(Duration::from_secs(*s) + Duration::from_micros(*us)),
            _ => bail!("unexpected reply to TIME"),
        }
    };
    let local = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let first = time(&mut store)?;
    let second = time(&mut store)?;
    let skew = first.as_secs_f64() - local.as_secs_f64();
    let (verdict, advice) = if second < first {
        (
            Verdict::Danger,
            "the server clock went backwards between two calls: leases and queues are judged on it"
                .to_owned(),
        )
    } else if skew.abs() > 5.0 {
        (
            Verdict::Warn,
            "leases do not depend on it, but acquired/last-run times shown by inspect will be off; run NTP".to_owned(),
        )
    } else {
        (Verdict::Ok, String::new())
    };
    checks.push(Check {
        name: "clock",
        verdict,
        detail: format!("server TIME is {skew:+.3}s from this host's clock, and advances"),
        advice,
    });

    print_checks(&checks, args.json);
    let worst = checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    Ok(if worst == Verdict::Danger { 1 } else { 0 })
}

fn print_checks(checks: &[Check], json: bool) {
    if json {
        let arr: Vec<_> = checks
            .iter()
            .map(|c| {
                serde_json::json!({
                    "check": c.name,
                    "verdict": c.verdict.word(),
                    "detail": c.detail,
                    "advice": if c.advice.is_empty() { None } else { Some(&c.advice) },
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(arr));
        return;
    }
    for c in checks {
        let mut line = format!("{:<7} {:<17} {}", c.verdict.word(), c.name, c.detail);
        if !c.advice.is_empty() {
            line.push_str(&format!(" — {}", c.advice));
        }
        println!("{line}");
    }
}

/// Timeout for the manual subcommands' connect and each call.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

fn require_owner(owner: Option<String>) -> Result<String> {
    owner.ok_or_else(|| {
        UsageError("no owner id: pass --owner ID or set DISTLOCK_OWNER".into()).into()
    })
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
        let t = std::time::UNIX_EPOCH + Duration::from_millis(self.acquired_ms?);
        Some(humantime::format_rfc3339_seconds(t).to_string())
    }
}

/// The `inspect --json` object (also each element of `list --json`).
fn info_json(keys: &LockKeys, info: &LockInfo) -> serde_json::Value {
    let m = Meta::of(info);
    serde_json::json!({
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
    })
}

/// A remaining lease for people: `27.3s`, `4m 12s`.
fn fmt_ttl(t: Duration) -> String {
    if t < Duration::from_secs(60) {
        format!("{:.1}s", t.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(t.as_secs())).to_string()
    }
}

/// Quotes a value for `eval` in sh, bash and zsh: single quotes, with each
/// `'` written as `'\''`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `distlock man --dir D`: writes `distlock.1` and one page per visible
/// subcommand. clap_mangen renders the usual sections; we add EXAMPLES (from
/// each command's long help), EXIT STATUS and ENVIRONMENT, as flock(1) has.
pub fn man(dir: &std::path::Path) -> Result<()> {
    use clap::CommandFactory;
    fn page(cmd: &clap::Command, dir: &std::path::Path) -> Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            page(sub, dir)?;
        }
        let man = clap_mangen::Man::new(cmd.clone())
            .date("")
            .source("distlock");
        let mut out = Vec::new();
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(&mut out)?;
        }
        if cmd.has_subcommands() {
            man.render_subcommands_section(&mut out)?;
        }
        if let Some(examples) = cmd.get_after_long_help() {
            let text = examples.to_string();
            let body = text.strip_prefix("Examples:\n").unwrap_or(&text);
            out.extend_from_slice(b".SH EXAMPLES\n.nf\n");
            out.extend_from_slice(roff_escape(body).as_bytes());
            out.extend_from_slice(b"\n.fi\n");
        }
        out.extend_from_slice(MAN_EXIT_AND_ENV.as_bytes());
        man.render_version_section(&mut out)?;
        std::fs::write(dir.join(man.get_filename()), out)?;
        Ok(())
    }
    std::fs::create_dir_all(dir)?;
    let mut cmd = crate::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    page(&cmd, dir)
}

/// Escapes text for a roff `.nf` block: backslashes, and leading dots or
/// quotes that roff would read as requests.
fn roff_escape(s: &str) -> String {
    s.lines()
        .map(|l| {
            let l = l.replace('\\', r"\e").replace('-', r"\-");
            if l.starts_with('.') || l.starts_with('\'') {
                format!(r"\&{l}")
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The EXIT STATUS and ENVIRONMENT sections, word for word the table in
/// `exit.rs` and the README.
const MAN_EXIT_AND_ENV: &str = r#".SH "EXIT STATUS"
.TP
CMD's own status
run: CMD exited by itself; 128+N if signal N ended it.
.TP
0
The subcommand succeeded.
.TP
1
renew/release: the lock is not held by that owner.
.TP
2
Usage error: bad option, name, duration or URL.
.TP
75
Lock not acquired (busy, or the wait ran out); \-E changes it.
.TP
124
run: the lease was lost and CMD was stopped.
.TP
125
distlock failed: Redis unreachable, authentication refused, protocol error.
.TP
126
CMD was found but could not be executed.
.TP
127
CMD was not found.
.SH ENVIRONMENT
.TP
DISTLOCK_REDIS_URL
Default for \-\-redis\-url (redis://127.0.0.1:6379).
.TP
DISTLOCK_PREFIX
Default for \-\-prefix (distlock).
.TP
DISTLOCK_TTL
Default for \-\-ttl of run, acquire and renew (30s).
.TP
DISTLOCK_OWNER
Default for \-\-owner of renew and release; set by eval of acquire's output.
.TP
DISTLOCK_NAME, DISTLOCK_KEY, DISTLOCK_OWNER, DISTLOCK_FENCING_TOKEN
Set by run in CMD's environment: the lock name, its Redis key, the owner id
and the fencing token of this acquisition. Pass the token to the storage CMD
writes to, so a late writer is turned away.
.TP
DISTLOCK_REDIS_PASSWORD
Removed from CMD's environment.
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_survives_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn ttl_is_readable() {
        assert_eq!(fmt_ttl(Duration::from_millis(27_345)), "27.3s");
        assert_eq!(fmt_ttl(Duration::from_secs(252)), "4m 12s");
    }
}
