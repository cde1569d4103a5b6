//! The lease supervisor as a pure state machine, and the renewal policy.
//!
//! Everything distlock decides while CMD runs is here: when CMD gets the
//! kill signal and SIGKILL, when it is warned, when a stop or a continue is
//! honoured, when the terminal changes hands, and what the outcome means
//! for the release. Nothing here does I/O or reads a clock: `now` is an
//! argument and the facts about the terminal and CMD's group come in with
//! the inputs (quinn-proto's "sans I/O" design). `run` feeds it what the
//! signalfd, `waitpid` and the renewer report, and carries out the
//! returned actions; `hold`'s background renewer drives the same machine
//! without a CMD ([`Supervisor::without_cmd`]). The unit tests below drive
//! it on a fake clock.
//!
//! All times are on the boot-time clock (`crate::clock`), as `Duration`s
//! since boot.

use std::process::ExitStatus;
use std::time::Duration;

use crate::config::Timings;
use crate::exit;

/// A renewal that was not confirmed is tried again after this pause,
/// unless half the time left before the deadline is shorter.
fn retry_pause(t: &Timings) -> Duration {
    (t.renew_every / 4).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

/// When to send renewals and how long each may take: the rules shared by
/// `run`'s renewer thread and `hold`'s background renewer.
///
/// - the first renewal is due `renew_every` after the acquisition was sent,
///   each next one `renew_every` after the last confirmed one was sent;
/// - a failed renewal is retried after `renew_every / 4` (5ms to 1s), but
///   never so late that no attempt fits before the deadline: half-way there
///   at the latest (with the default timings a timed-out renewal ends at
///   t0 + 2/3 ttl, and the pause, ttl/12, would land past the kill
///   deadline at t0 + 3/4 ttl − margin);
/// - a request may take `(deadline − sent_at).min(renew_every)`: a reply
///   after the deadline is useless, and a stalled connection is better
///   replaced than waited on;
/// - nothing is sent once the deadline has passed: a late "renewed" would
///   be a lie while CMD is being stopped.
///
/// The deadline is `soft_after` past the last confirmed send: the kill
/// deadline for `run`, and for `hold` (no kill grace) the moment the lease
/// may expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RenewalPolicy {
    timings: Timings,
    /// Send time of the last confirmed acquire/renew.
    last_ok: Duration,
    /// When the next renewal is due; None: renew no more.
    next: Option<Duration>,
    /// Failed attempts since the last confirmed one.
    failures: u32,
}

/// What [`RenewalPolicy::attempt`] says about sending a renewal now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Send it, waiting at most this long for the reply.
    Send { timeout: Duration },
    /// The deadline has passed: send nothing, renew no more.
    TooLate,
}

impl RenewalPolicy {
    /// The policy for a lease whose acquisition was sent at `t0`.
    pub fn new(timings: Timings, t0: Duration) -> RenewalPolicy {
        RenewalPolicy {
            timings,
            last_ok: t0,
            next: Some(t0 + timings.renew_every),
            failures: 0,
        }
    }

    /// When the next renewal is due; None once renewing is over.
    pub fn next_due(&self) -> Option<Duration> {
        self.next
    }

    /// The deadline: the last confirmed send plus `soft_after`.
    pub fn deadline(&self) -> Duration {
        self.last_ok + self.timings.soft_after()
    }

    /// Failed attempts since the last confirmed one.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether (and with which timeout) to send a renewal at `now`, due or
    /// asked for (after a SIGCONT). Too late ends renewing.
    pub fn attempt(&mut self, now: Duration) -> Attempt {
        let deadline = self.deadline();
        if now >= deadline {
            self.next = None;
            return Attempt::TooLate;
        }
        Attempt::Send {
            timeout: (deadline - now).min(self.timings.renew_every),
        }
    }

    /// A renewal sent at `sent_at` was confirmed.
    pub fn confirmed(&mut self, sent_at: Duration) {
        self.failures = 0;
        self.last_ok = self.last_ok.max(sent_at);
        self.next = Some(sent_at + self.timings.renew_every);
    }

    /// A renewal failed (timed out, connection lost) and it is `now`.
    pub fn failed(&mut self, now: Duration) {
        self.failures += 1;
        let left = self.deadline().saturating_sub(now);
        let pause = retry_pause(&self.timings)
            .min(left / 2)
            .max(Duration::from_millis(1));
        self.next = Some(now + pause);
    }

    /// The store said the lease is not ours: renew no more.
    pub fn not_owner(&mut self) {
        self.next = None;
    }
}

/// What `run` was asked to do, beyond the timings.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `--kill-signal`, sent to CMD's group first.
    pub kill_signal: i32,
    /// `--at-risk-signal`, sent to CMD itself once.
    pub at_risk_signal: Option<i32>,
    /// `--max-hold`, counted from the acquisition.
    pub max_hold: Option<Duration>,
}

/// Who has the terminal, when distlock has one; all false without one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TtyFacts {
    /// distlock has a controlling terminal. Without one (cron, CI) there
    /// is no job control: no shell waits for its prompt, so a CMD stopped
    /// by someone else does not stop distlock.
    pub present: bool,
    /// distlock's process group is the terminal's foreground group.
    pub we_have_it: bool,
    /// CMD's process group is the terminal's foreground group.
    pub cmd_has_it: bool,
}

/// Something that happened, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The driver woke up (a deadline, or after handling what woke it).
    /// `group_empty` says whether CMD's process group has no member left.
    Tick { tty: TtyFacts, group_empty: bool },
    /// A renewal sent at `sent_at` was confirmed.
    Renewed { sent_at: Duration },
    /// The store says the lease is no longer ours.
    NotOwner,
    /// A renewal could not be confirmed (the first of a run of failures).
    Unconfirmed,
    /// A signal was sent to distlock.
    Signal { sig: i32, tty: TtyFacts },
    /// CMD ended with this wait status.
    Exited { status: ExitStatus, tty: TtyFacts },
    /// CMD was stopped by this signal.
    Stopped { sig: i32, tty: TtyFacts },
    /// CMD was continued.
    Continued,
    /// The guardian has died on its own (`kill -9` of its pid alone).
    GuardianGone,
    /// No new guardian could be started after `RestartGuardian`.
    GuardianFailed,
}

/// What the driver must do, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Send this signal to CMD's process group.
    SignalGroup(i32),
    /// Send this signal to CMD alone (the at-risk warning).
    SignalCmd(i32),
    /// Stop distlock itself (and its own group if `whole_group`); the
    /// driver returns from it once distlock is continued. The guardian is
    /// told, so that it leaves this stop (the user's) in place at the
    /// deadline, where it would continue a distlock stopped by others.
    StopSelf { whole_group: bool },
    /// Make CMD's group the terminal's foreground group.
    GiveTerminalToCmd,
    /// Make distlock's group the terminal's foreground group again.
    TakeTerminalBack,
    /// Ask the renewer for a renewal now.
    RenewNow,
    /// Without CMD: send a renewal now and wait at most `timeout` for the
    /// reply, then report it (`Renewed` with the time of this step,
    /// `NotOwner`, or `Unconfirmed`).
    SendRenewal { timeout: Duration },
    /// Without CMD: release the lease.
    Release,
    /// Without CMD: exit with this status; nothing more to do.
    Exit(u8),
    /// The guardian's deadline moves to this time (a renewal was confirmed).
    ExtendGuardian(Duration),
    /// Start a new guardian with this deadline in place of one that died.
    RestartGuardian(Duration),
    /// The lease is lost for this reason (tell the user); CMD is being
    /// stopped.
    Lost(Loss),
    /// CMD has ended and its whole group is gone: release per the outcome.
    Finish(Outcome),
}

/// Why CMD is being stopped by distlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Loss {
    /// The store said the lease is no longer ours.
    NotOwner,
    /// No renewal was confirmed in time; the lease may expire.
    Unconfirmed,
    /// CMD held the lock for `--max-hold`.
    MaxHold,
    /// The guardian died and no new one could be started: distlock's own
    /// failure (125), since nothing would empty CMD's group if distlock
    /// died now.
    NoGuardian,
}

/// How a supervised run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Set if distlock stopped CMD because of the lease (or max-hold).
    pub lost: Option<Loss>,
    /// CMD's wait status.
    pub status: Option<ExitStatus>,
}

impl Outcome {
    /// distlock's exit status: 124 when the lease was lost (or max-hold),
    /// 125 when distlock could not keep a guardian, else CMD's status as a
    /// shell reports it.
    pub fn exit_code(&self) -> u8 {
        match (self.lost, self.status) {
            (Some(Loss::NoGuardian), _) => exit::FAILURE,
            (Some(_), _) => exit::LEASE_LOST,
            (None, Some(st)) => exit::from_status(st),
            (None, None) => exit::FAILURE,
        }
    }

    /// Whether the release writes `--once-per`'s done mark: only for a CMD
    /// that exited 0 by itself with the lease still ours (the release
    /// writes it only if it finds the lease ours too).
    pub fn marks_done(&self) -> bool {
        self.lost.is_none() && self.status.is_some_and(|s| s.success())
    }
}

/// The escalation in progress: the first signal went out, SIGKILL follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Killing {
    sigkill_at: Duration,
    sigkill_sent: bool,
}

const SIGKILL: i32 = libc::SIGKILL;
const SIGCONT: i32 = libc::SIGCONT;
const SIGSTOP: i32 = libc::SIGSTOP;
const SIGCHLD: i32 = libc::SIGCHLD;

/// Job-control stops sent to distlock itself (`kill -TSTP`).
fn is_stop_request(sig: i32) -> bool {
    matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU)
}

/// Whether a stop came from using the terminal outside its foreground
/// group (reading it, or writing or changing its modes with TOSTOP).
fn is_tty_stop(sig: i32) -> bool {
    sig == libc::SIGTTIN || sig == libc::SIGTTOU
}

/// The supervisor of one lease: with a CMD (`run`) or without (`hold`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervisor {
    timings: Timings,
    kill_signal: i32,
    /// When `--max-hold` runs out.
    max_hold_at: Option<Duration>,
    /// `--at-risk-signal`, until it has been sent once.
    at_risk: Option<i32>,
    /// Send time of the last confirmed acquire/renew.
    t0: Duration,
    /// The time of the last step.
    now: Duration,
    lost: Option<Loss>,
    status: Option<ExitStatus>,
    /// CMD is stopped (job control).
    stopped: bool,
    /// distlock was told to stop (SIGTSTP, SIGTTIN or SIGTTOU sent to it)
    /// and stopped CMD's group for it; it stops itself once CMD has,
    /// terminal or not. Cleared when CMD or distlock is continued.
    stop_requested: bool,
    killing: Option<Killing>,
    /// The deadline the guardian holds: a new one gets the same.
    guardian_deadline: Duration,
    /// A new guardian could not be started: no more attempts.
    guardian_failed: bool,
    /// Finish was emitted; nothing more to do.
    done: bool,
    /// Without CMD (`hold`): the machine schedules renewals itself.
    renewal: Option<RenewalPolicy>,
    /// Without CMD: a renewal was asked for and not reported on yet.
    renewal_in_flight: bool,
}

/// Without CMD, these signals release the lease and end the holder
/// (`kill $DISTLOCK_HOLD_PID`, or the session's end); others are ignored.
fn ends_hold(sig: i32) -> bool {
    matches!(sig, libc::SIGINT | libc::SIGTERM | libc::SIGHUP)
}

impl Supervisor {
    /// A supervisor for a CMD started under a lease whose acquisition was
    /// sent at `t0`.
    pub fn new(timings: Timings, options: Options, t0: Duration) -> Supervisor {
        Supervisor {
            timings,
            kill_signal: options.kill_signal,
            // A bound beyond the clock's range is no bound (and no panic
            // with the lease held and CMD running).
            max_hold_at: options.max_hold.and_then(|d| t0.checked_add(d)),
            at_risk: options.at_risk_signal,
            t0,
            now: t0,
            lost: None,
            status: None,
            stopped: false,
            stop_requested: false,
            killing: None,
            guardian_deadline: t0 + timings.hard_after(),
            guardian_failed: false,
            done: false,
            renewal: None,
            renewal_in_flight: false,
        }
    }

    /// A supervisor of a lease with no CMD (`hold`'s background renewer),
    /// acquired by a request sent at `t0`. It asks for renewals by the
    /// [`RenewalPolicy`] (`SendRenewal`), releases the lease and exits 0
    /// at `release_at` (`--max`) or on SIGINT, SIGTERM or SIGHUP, exits 0
    /// without releasing when the store says the lease is not ours, and exits
    /// 124 without releasing once no renewal was confirmed by the moment
    /// the lease may expire (`t0 + ttl − margin` with `Timings::for_holder`).
    pub fn without_cmd(timings: Timings, t0: Duration, release_at: Option<Duration>) -> Supervisor {
        // No CMD to signal: the CMD-side options are inert.
        let options = Options {
            kill_signal: libc::SIGTERM,
            at_risk_signal: None,
            max_hold: None,
        };
        Supervisor {
            max_hold_at: release_at,
            renewal: Some(RenewalPolicy::new(timings, t0)),
            ..Supervisor::new(timings, options, t0)
        }
    }

    /// Feeds one input at `now` and returns what to do, in order.
    pub fn step(&mut self, now: Duration, input: Input) -> Vec<Action> {
        self.now = self.now.max(now);
        let now = self.now;
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        if self.renewal.is_some() {
            self.step_without_cmd(now, input, &mut out);
            return out;
        }
        match input {
            Input::Tick { tty, group_empty } => self.tick(now, tty, group_empty, &mut out),
            Input::Renewed { sent_at } => {
                if sent_at > self.t0 {
                    self.t0 = sent_at;
                    if self.lost.is_none() {
                        self.guardian_deadline = self.hard_deadline();
                        out.push(Action::ExtendGuardian(self.guardian_deadline));
                    }
                }
            }
            Input::Unconfirmed => {
                if self.status.is_none() {
                    self.warn_at_risk(&mut out);
                }
            }
            Input::NotOwner => {
                if self.running() {
                    self.lose(Loss::NotOwner, now + self.timings.kill_grace, &mut out);
                }
            }
            Input::Signal { sig, tty } => match sig {
                SIGCHLD => {}
                SIGCONT => self.on_continue(now, tty, &mut out),
                s if is_stop_request(s) => self.on_stop_request(&mut out),
                s => out.push(Action::SignalGroup(s)),
            },
            Input::Exited { status, tty } => {
                self.status = Some(status);
                self.stopped = false;
                // Take the terminal back from CMD's (now leaderless) group.
                if tty.cmd_has_it {
                    out.push(Action::TakeTerminalBack);
                }
            }
            Input::Stopped { sig, tty } => {
                // CMD used the terminal from a background group although
                // distlock is now the foreground job: the shell's `fg` of a
                // job that was running in the background (after `&` or
                // `bg`) hands over the terminal but sends no SIGCONT, so
                // distlock heard nothing. Pass the terminal on and let CMD
                // go on, as it would have if it were the job itself,
                // instead of stopping the whole job.
                if tty.we_have_it && self.killing.is_none() && is_tty_stop(sig) {
                    out.push(Action::GiveTerminalToCmd);
                    out.push(Action::SignalGroup(SIGCONT));
                } else {
                    self.stopped = true;
                }
            }
            Input::Continued => {
                self.stopped = false;
                self.stop_requested = false;
            }
            Input::GuardianGone => self.on_guardian_gone(now, &mut out),
            Input::GuardianFailed => {
                self.guardian_failed = true;
                if self.running() {
                    let sigkill_at = (now + self.timings.kill_grace).min(self.hard_deadline());
                    self.lose(Loss::NoGuardian, sigkill_at, &mut out);
                }
            }
        }
        out
    }

    /// The next time the driver must wake up with a `Tick` if nothing else
    /// happens first; None when there is nothing to wait for.
    pub fn next_deadline(&self) -> Option<Duration> {
        if self.done {
            return None;
        }
        let mut wake: Option<Duration> = None;
        let mut at = |t: Duration| wake = Some(wake.map_or(t, |w| w.min(t)));
        if let Some(policy) = &self.renewal {
            at(policy.deadline());
            if let Some(r) = self.max_hold_at {
                at(r);
            }
            if let Some(n) = policy.next_due().filter(|_| !self.renewal_in_flight) {
                at(n);
            }
            return wake;
        }
        if self.running() {
            at(self.kill_deadline());
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
            at(self.now + Duration::from_millis(10));
        }
        wake
    }

    /// [`Supervisor::step`] without CMD: renewals, `--max`, the signals
    /// that end a hold, and the deadline. CMD's inputs cannot occur.
    fn step_without_cmd(&mut self, now: Duration, input: Input, out: &mut Vec<Action>) {
        let Some(policy) = &mut self.renewal else {
            return;
        };
        match input {
            Input::Tick { .. } => {
                // `--max` first: a holder woken late releases rather than
                // leaving the lease to expire.
                if self.max_hold_at.is_some_and(|r| now >= r) {
                    out.extend([Action::Release, Action::Exit(exit::SUCCESS)]);
                    self.done = true;
                } else if now >= policy.deadline() {
                    out.push(Action::Exit(exit::LEASE_LOST));
                    self.done = true;
                } else if !self.renewal_in_flight && policy.next_due().is_some_and(|n| now >= n) {
                    match policy.attempt(now) {
                        Attempt::Send { timeout } => {
                            self.renewal_in_flight = true;
                            out.push(Action::SendRenewal { timeout });
                        }
                        Attempt::TooLate => {
                            out.push(Action::Exit(exit::LEASE_LOST));
                            self.done = true;
                        }
                    }
                }
            }
            Input::Renewed { sent_at } => {
                self.renewal_in_flight = false;
                policy.confirmed(sent_at);
                self.t0 = self.t0.max(sent_at);
            }
            Input::Unconfirmed => {
                self.renewal_in_flight = false;
                policy.failed(now);
            }
            Input::NotOwner => {
                policy.not_owner();
                self.lost = Some(Loss::NotOwner);
                out.push(Action::Exit(exit::SUCCESS));
                self.done = true;
            }
            Input::Signal { sig, .. } if ends_hold(sig) => {
                out.extend([Action::Release, Action::Exit(exit::SUCCESS)]);
                self.done = true;
            }
            Input::Signal { .. }
            | Input::Exited { .. }
            | Input::Stopped { .. }
            | Input::Continued
            | Input::GuardianGone
            | Input::GuardianFailed => {}
        }
    }

    /// The lease is ours as far as we know and CMD has not ended.
    fn running(&self) -> bool {
        self.lost.is_none() && self.status.is_none()
    }

    /// By when CMD gets the kill signal unless a later renewal is
    /// confirmed: t0 + ttl − kill grace − margin.
    fn kill_deadline(&self) -> Duration {
        self.t0 + self.timings.soft_after()
    }

    /// By when nothing of CMD may be alive: t0 + ttl − margin.
    fn hard_deadline(&self) -> Duration {
        self.t0 + self.timings.hard_after()
    }

    /// When a renewal counts as overdue: half a period after it was due,
    /// or half-way from then to the kill deadline if that is sooner.
    fn at_risk_at(&self) -> Duration {
        let due = self.timings.renew_every;
        let soft = self.timings.soft_after();
        self.t0 + (due * 3 / 2).min((due + soft) / 2)
    }

    /// The deadlines, escalation and the end of the run. The lease deadline
    /// comes first, so a distlock that was itself stopped or starved acts
    /// on it before anything else.
    fn check_deadlines(&mut self, now: Duration, out: &mut Vec<Action>) {
        if self.running() && now >= self.kill_deadline() {
            self.lose(Loss::Unconfirmed, self.hard_deadline(), out);
        }
        // A renewal not confirmed half a period after it was due has
        // failed to be confirmed in time, whether or not its request has
        // timed out yet: warn CMD now, while it has the most time.
        if self.running() && now >= self.at_risk_at() {
            self.warn_at_risk(out);
        }
        if let Some(at) = self.max_hold_at {
            if self.running() && now >= at {
                let sigkill_at = (now + self.timings.kill_grace).min(self.hard_deadline());
                self.lose(Loss::MaxHold, sigkill_at, out);
            }
        }
        if let Some(k) = &mut self.killing {
            if !k.sigkill_sent && now >= k.sigkill_at {
                out.push(Action::SignalGroup(SIGKILL));
                k.sigkill_sent = true;
            }
        }
    }

    fn tick(&mut self, now: Duration, tty: TtyFacts, group_empty: bool, out: &mut Vec<Action>) {
        self.check_deadlines(now, out);
        if self.status.is_some() {
            if group_empty {
                self.done = true;
                out.push(Action::Finish(Outcome {
                    lost: self.lost,
                    status: self.status,
                }));
                return;
            }
            if self.killing.is_none() {
                // CMD is gone but left processes in its group: they must
                // not outlive the lease.
                let sigkill_at = (now + self.timings.kill_grace).min(self.hard_deadline());
                self.start_kill(sigkill_at, out);
            }
        }
        if self.stopped && self.killing.is_none() && (tty.present || self.stop_requested) {
            // CMD was stopped (Ctrl-Z, SIGTSTP): stop too, so the shell
            // gets its prompt back. While stopped, nothing renews. Without
            // a terminal there is no shell to give a prompt back to, and a
            // distlock stopped with CMD would wait in state T for a SIGCONT
            // that may never come: it keeps supervising (and renewing)
            // instead, unless it was itself told to stop.
            out.push(Action::StopSelf {
                whole_group: tty.cmd_has_it,
            });
        }
    }

    /// A SIGTSTP, SIGTTIN or SIGTTOU sent to distlock itself (`kill -TSTP`;
    /// the terminal's Ctrl-Z goes to CMD's foreground group instead): stop
    /// CMD's whole group with SIGSTOP, as dumb-init does in its setsid
    /// mode. Forwarding the signal itself would let a CMD that catches
    /// SIGTSTP run on, and distlock would then either stop while CMD runs
    /// without renewals, or never stop. distlock stops once CMD is reported
    /// stopped (the `Stopped` input, then the next `Tick`), so it never
    /// stops while CMD keeps running.
    ///
    /// While CMD is being killed, or has exited and its group is being
    /// emptied, a stop is ignored: the group must be able to act on the
    /// kill signal before its deadline.
    fn on_stop_request(&mut self, out: &mut Vec<Action>) {
        if self.killing.is_none() && self.status.is_none() {
            out.push(Action::SignalGroup(SIGSTOP));
            self.stop_requested = true;
        }
    }

    /// distlock was continued (`fg`, `bg`, `kill -CONT`): the deadlines
    /// are checked first, so CMD may run again only if the lease is still
    /// good (a CONT after the kill deadline kills CMD without letting it
    /// run); then renew at once, hand over the terminal if we have it, and
    /// continue CMD.
    fn on_continue(&mut self, now: Duration, tty: TtyFacts, out: &mut Vec<Action>) {
        self.check_deadlines(now, out);
        if self.killing.is_some() {
            return;
        }
        out.push(Action::RenewNow);
        if tty.we_have_it {
            out.push(Action::GiveTerminalToCmd);
        }
        out.push(Action::SignalGroup(SIGCONT));
        self.stopped = false;
        self.stop_requested = false;
    }

    /// The guardian died on its own (`pkill -9` of its name, `kill -9` of
    /// its pid): without it, a SIGKILL of distlock would leave CMD's group
    /// running with no lease, so a new one takes its place with the same
    /// deadline, before anything relies on it. Past that deadline the old
    /// one would have SIGKILLed the group (and may have): distlock does so
    /// itself instead of forking a guardian only to do it.
    fn on_guardian_gone(&mut self, now: Duration, out: &mut Vec<Action>) {
        if self.guardian_failed {
            return;
        }
        if now < self.guardian_deadline {
            out.push(Action::RestartGuardian(self.guardian_deadline));
            return;
        }
        self.check_deadlines(now, out);
        match &mut self.killing {
            Some(k) if k.sigkill_sent => {}
            Some(k) => {
                out.push(Action::SignalGroup(SIGKILL));
                k.sigkill_sent = true;
            }
            // CMD has exited; what it left in its group is killed now.
            None => {
                out.push(Action::SignalGroup(SIGKILL));
                self.killing = Some(Killing {
                    sigkill_at: now,
                    sigkill_sent: true,
                });
            }
        }
    }

    /// Sends `--at-risk-signal`, once, to CMD itself, not its group:
    /// children that do not expect it would die of it.
    fn warn_at_risk(&mut self, out: &mut Vec<Action>) {
        if let Some(sig) = self.at_risk.take() {
            out.push(Action::SignalCmd(sig));
        }
    }

    fn lose(&mut self, loss: Loss, sigkill_at: Duration, out: &mut Vec<Action>) {
        self.lost = Some(loss);
        out.push(Action::Lost(loss));
        self.start_kill(sigkill_at, out);
    }

    /// Sends the kill signal to CMD's group, SIGKILL at `sigkill_at`. A
    /// stopped CMD gets SIGKILL at once: it would otherwise run again just
    /// to handle the first signal, after its lease is gone. SIGCONT follows
    /// the kill signal, never precedes it, so a stopped member wakes to
    /// find it pending.
    fn start_kill(&mut self, sigkill_at: Duration, out: &mut Vec<Action>) {
        let sig = if self.stopped {
            SIGKILL
        } else {
            self.kill_signal
        };
        out.push(Action::SignalGroup(sig));
        if sig != SIGKILL {
            out.push(Action::SignalGroup(SIGCONT));
        }
        self.killing = Some(Killing {
            sigkill_at,
            sigkill_sent: sig == SIGKILL,
        });
    }
}

#[cfg(test)]
#[path = "supervisor_tests.rs"]
mod tests;
