//! A model of the lease promise, checked exhaustively with stateright.
//!
//! The fault tests show the promise held in the runs we made; this shows it
//! holds in every interleaving of a small world: a Redis server (the lock
//! key with a TTL on the server's clock, the acquire, renew and release
//! scripts' effects, the fencing counter), two clients, each driving the
//! project's own [`Supervisor`] and [`RenewalPolicy`] (the model calls
//! `step`, `attempt`, `confirmed`, `failed` and carries out the returned
//! actions; it decides nothing itself), a guardian per client, a network
//! that delays, drops and reorders every message, a resource that checks
//! fencing tokens, and a nemesis.
//!
//! Time is discrete: one tick is [`TICK`]. Every process is prompt unless
//! the nemesis pauses it: the clock does not advance while a running
//! process has something due (a deadline, a timeout, a reply older than
//! the network's longest delay). So a late action is always the
//! nemesis's doing, and each fault is counted.
//!
//! The nemesis may drop a message, pause distlock alone (SIGSTOP: CMD and
//! the guardian run on), pause a whole host (distlock, CMD and guardian
//! frozen, its clock running on), pause Redis, restart Redis without
//! persistence (the lock and the fencing counter are forgotten, the
//! server's clock is not), and slow a client's clock by a tick (drift,
//! within the margin).
//!
//! Fencing tokens are the acquire script's: `max(last token + 1, the
//! server's clock)`, the clock in units finer than a tick ([`SUB`]) that
//! have always moved on by the next acquisition (a script takes longer than
//! a microsecond). The resource keeps the largest token it has seen, as the
//! README's ledger does; a ghost numbers the acquisitions in the order the
//! server made them, whatever it forgot, and the fencing property demands
//! that no write is accepted from an acquisition older than one whose
//! write was accepted before.
//!
//! Simplified on purpose: the state where the clock has reached a deadline
//! and nobody has acted yet is checked, but the work then due runs in one
//! order ([`World::settle`]); CMD ignores the kill signal and writes once,
//! when it ends or first thing when its frozen host wakes; waiters retry
//! after the holder's TTL (no wake-up messages, no fair queue); clocks only
//! fall behind (the dangerous way); no job control, `--max-hold` or
//! `--at-risk-signal`.

use std::hash::{Hash, Hasher};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use stateright::{Checker, Model, Property};

use super::supervisor::{Action, Attempt, Input, Options, RenewalPolicy, Supervisor, TtyFacts};
use crate::config::Timings;

/// One step of the model's clock.
const TICK: Duration = Duration::from_millis(2);

/// Clients in the model.
const CLIENTS: usize = 2;

/// Server clock units per tick (the microseconds of TIME).
const SUB: u16 = 4;

fn at(ticks: u8) -> Duration {
    TICK * u32::from(ticks)
}

/// The timings every client runs with: a 20 ms lease renewed every 4 ms,
/// 4 ms of kill grace, and the margin `Timings::new` computes (5.2 ms).
fn timings() -> Timings {
    Timings::new(
        Duration::from_millis(20),
        Some(Duration::from_millis(4)),
        Some(Duration::from_millis(4)),
    )
    .expect("the model's timings are valid")
}

/// Which faults the nemesis may inject.
#[derive(Clone, Copy, Debug)]
struct Faults {
    drop: bool,
    pause_distlock: bool,
    pause_host: bool,
    pause_redis: bool,
    restart_redis: bool,
    drift: bool,
}

const ALL_FAULTS: Faults = Faults {
    drop: true,
    pause_distlock: true,
    pause_host: true,
    pause_redis: true,
    restart_redis: true,
    drift: true,
};

const NO_FAULTS: Faults = Faults {
    drop: false,
    pause_distlock: false,
    pause_host: false,
    pause_redis: false,
    restart_redis: false,
    drift: false,
};

/// The world's bounds and the knobs of the mutants.
#[derive(Clone, Debug)]
struct Lease {
    timings: Timings,
    /// Mutant: t0 counted from when the reply arrived, not from the send.
    t0_from_reply: bool,
    /// Mutant: the token is a plain `INCR` of the counter, without the
    /// server clock as its floor.
    plain_incr: bool,
    /// Also demand the promise of a host that froze (which no lease can
    /// keep), to show the exclusion is not vacuous.
    cover_frozen_host: bool,
    faults: Faults,
    /// How many faults in one run.
    budget: u8,
    /// No fault starts at or after this tick...
    faults_until: u8,
    /// ...and no pause lasts longer than this.
    pause_max: u8,
    /// The run ends here.
    horizon: u8,
    /// A message is delivered within this many ticks (unless its
    /// receiver is paused), or dropped by the nemesis.
    max_delay: u8,
    /// CMD exits by itself at most this many ticks after it started.
    cmd_max: u8,
    /// How long distlock waits for an acquire or release reply.
    request_timeout: u8,
    /// How many ticks a client's clock may fall behind the server's.
    max_drift: u8,
    /// Check only this property (so a mutant run stops at its first
    /// counterexample).
    only: Option<&'static str>,
}

impl Lease {
    /// The world every test checks: one fault of any kind in the first 8
    /// ticks (a pause lasting up to 11, longer than a lease), messages
    /// delivered within a tick, CMD running up to 10 ticks (longer than
    /// its lease unless renewed), and a horizon long enough for the
    /// waiter to get the lock after the worst of it.
    fn new() -> Lease {
        Lease {
            timings: timings(),
            t0_from_reply: false,
            plain_incr: false,
            cover_frozen_host: false,
            faults: ALL_FAULTS,
            budget: 1,
            faults_until: 8,
            pause_max: 11,
            horizon: 44,
            max_delay: 1,
            cmd_max: 10,
            request_timeout: 3,
            max_drift: 1,
            only: None,
        }
    }

    /// Where a reply may take two ticks (4 ms) and CMD outlives its lease
    /// unless renewed; the one fault is a Redis pause, which stops the
    /// renewals so that the deadlines decide. The mutants are run here.
    fn slow_network() -> Lease {
        Lease {
            faults: Faults {
                pause_redis: true,
                ..NO_FAULTS
            },
            max_delay: 2,
            cmd_max: 12,
            horizon: 30,
            ..Lease::new()
        }
    }

    /// The deeper run: the same faults with messages taking up to two
    /// ticks each way, so the waiter needs a longer horizon. The acquire
    /// timeout must outlast the round trip: a waiter whose replies always
    /// come too late keeps refreshing a key it already holds in Redis and
    /// never learns it, so nobody gets the lock (the liveness check found
    /// that with 3 ticks).
    fn deep() -> Lease {
        Lease {
            max_delay: 2,
            request_timeout: 5,
            horizon: 52,
            ..Lease::new()
        }
    }

    fn ttl_ticks(&self) -> u8 {
        (self.timings.ttl.as_millis() / TICK.as_millis()) as u8
    }
}

/// The supervisor in the state. std's `ExitStatus` (one of its fields) is
/// not `Hash`, so it is hashed by its derived `Debug` form, which covers
/// every field, present and future.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sup(Supervisor);

impl Hash for Sup {
    fn hash<H: Hasher>(&self, h: &mut H) {
        format!("{:?}", self.0).hash(h);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Op {
    Acquire,
    Renew,
    Release,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Reply {
    /// `epoch`: ghost, which acquisition this is (see [`Redis::clock`]).
    Acquired {
        token: u16,
        epoch: u16,
    },
    Busy {
        pttl: u8,
    },
    Renewed,
    NotOwner,
    Released,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Msg {
    /// To Redis. An orphan's client gave up on it: its effects still
    /// happen, its reply is never read.
    Request {
        from: u8,
        op: Op,
        orphan: bool,
    },
    Reply {
        to: u8,
        reply: Reply,
    },
    /// From CMD to the resource. `live`: sent while the server's grant to
    /// this client had not run out; `frozen`: sent by a CMD whose lease ran
    /// out while its host was frozen (ghost facts, for the properties).
    Write {
        from: u8,
        token: u16,
        epoch: u16,
        live: bool,
        frozen: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct InFlight {
    msg: Msg,
    age: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Redis {
    /// The lock key: owner and expiry (server ticks).
    holder: Option<(u8, u8)>,
    fence: u16,
    /// The server's clock (TIME), read by each new acquisition: at least
    /// `SUB` per tick, and one more than at the previous acquisition. A
    /// restart keeps it. Its value at an acquisition also numbers that
    /// acquisition (the ghost epoch), since it never repeats.
    clock: u16,
    /// Ghost: the epoch of the holder's acquisition.
    held_epoch: u16,
    paused_since: Option<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Pause {
    /// SIGSTOP of distlock alone.
    Distlock,
    /// The whole host: distlock, CMD and the guardian.
    Host,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Cmd {
    alive: bool,
    wrote: bool,
    /// Local tick by which CMD exits by itself.
    ends_by: u8,
    /// Raw wait status once it ended.
    status: Option<i32>,
    reaped: bool,
    /// Its lease ran out while its host was frozen.
    frozen: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Holding {
    sup: Sup,
    policy: RenewalPolicy,
    /// The renewal in flight: sent at, times out at (local clock).
    renewing: Option<(Duration, Duration)>,
    renew_now: bool,
    /// The guardian's deadline (local clock) while it is armed.
    guardian: Option<Duration>,
    token: u16,
    /// Ghost: which acquisition gave the token.
    epoch: u16,
    cmd: Cmd,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// Wants the lock: next attempt at `retry_at`, or one in flight (sent
    /// at, times out at), local ticks.
    Waiting {
        retry_at: u8,
        sent: Option<(u8, u8)>,
    },
    Holding(Box<Holding>),
    Releasing {
        timeout_at: u8,
    },
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Client {
    /// How far this client's clock is behind the server's.
    lag: u8,
    paused: Option<(Pause, u8)>,
    phase: Phase,
    /// Ghost: the latest expiry the server set for this client's key.
    granted: u8,
    /// Ghost: it has held the lock.
    got: bool,
    /// Ghost: its CMD was SIGKILLed (by distlock or the guardian).
    killed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Resource {
    max_token: u16,
    /// Ghost: the newest acquisition whose write it accepted.
    max_epoch: u16,
    /// Ghost: accepted a write from an acquisition older than one whose
    /// write it had accepted (the token did not tell them apart).
    stale: bool,
    /// Ghost: accepted a write not sent under a live grant.
    unleased: bool,
    /// Ghost: the same, from a host that froze past its lease.
    unleased_frozen: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct World {
    now: u8,
    faults_left: u8,
    redis: Redis,
    /// Kept sorted: the network is a multiset.
    net: Vec<InFlight>,
    clients: [Client; CLIENTS],
    resource: Resource,
}

/// What can happen next. Each step is followed by the work it makes due
/// (see [`World::settle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Step {
    Tick,
    /// Every process does the work the clock made due (the state before it
    /// is the one where a deadline has come and nobody has acted yet).
    Run,
    /// A tick on which client `c`'s clock does not move (drift).
    SlowTick(u8),
    Deliver(u8),
    Drop(u8),
    Pause(u8, Pause),
    Resume(u8),
    /// A frozen host wakes and CMD is scheduled first: it gets its write
    /// out before the guardian or distlock can act.
    ResumeCmdFirst(u8),
    PauseRedis,
    ResumeRedis,
    RestartRedis,
}

/// A piece of a client's local work that is due.
enum Due {
    GuardianFires,
    CmdEnds,
    Acquire,
    RequestTimeout,
    Reap,
    Deadline,
    RenewTimeout,
    Renew,
}

impl World {
    fn local(&self, c: usize) -> u8 {
        self.now - self.clients[c].lag
    }

    fn distlock_runs(&self, c: usize) -> bool {
        self.clients[c].paused.is_none()
    }

    fn host_runs(&self, c: usize) -> bool {
        !matches!(self.clients[c].paused, Some((Pause::Host, _)))
    }

    fn send(&mut self, msg: Msg) {
        self.net.push(InFlight { msg, age: 0 });
        self.net.sort();
    }

    /// Client `c` gives up on its request: its reply will not be read.
    fn orphan(&mut self, c: usize) {
        let c = c as u8;
        self.net
            .retain(|m| !matches!(m.msg, Msg::Reply { to, .. } if to == c));
        for m in &mut self.net {
            if let Msg::Request { from, orphan, .. } = &mut m.msg {
                if *from == c {
                    *orphan = true;
                }
            }
        }
        self.net.sort();
    }

    fn deliverable(&self, m: &InFlight) -> bool {
        match m.msg {
            Msg::Request { .. } => self.redis.paused_since.is_none(),
            Msg::Reply { to, .. } => self.distlock_runs(to as usize),
            Msg::Write { .. } => true,
        }
    }

    /// Something that must happen before the clock may advance.
    fn overdue(&self, lease: &Lease) -> bool {
        if self
            .net
            .iter()
            .any(|m| m.age >= lease.max_delay && self.deliverable(m))
        {
            return true;
        }
        if let Some(s) = self.redis.paused_since {
            if self.now - s >= lease.pause_max {
                return true;
            }
        }
        (0..CLIENTS).any(|c| self.client_overdue(lease, c))
    }

    fn client_overdue(&self, lease: &Lease, c: usize) -> bool {
        self.clients[c]
            .paused
            .is_some_and(|(_, s)| self.now - s >= lease.pause_max)
    }

    /// Runs every process's due local work until none is left. Work due at
    /// the same instant runs in one order (the guardian and CMD, then
    /// distlock's driver: reaping, deadlines, the renewer): local steps
    /// touch only their own client, so the order between clients does not
    /// matter, and the races that do (a reply against a deadline, a
    /// frozen CMD against its guardian) are steps of their own.
    fn settle(&mut self, lease: &Lease) {
        for _ in 0..64 {
            let mut worked = false;
            for c in 0..CLIENTS {
                if let Some(due) = self.due(c) {
                    self.work(lease, c, due);
                    worked = true;
                }
            }
            if !worked {
                return;
            }
        }
        panic!("the local work does not settle: {self:?}");
    }

    fn due(&self, c: usize) -> Option<Due> {
        let local = self.local(c);
        let now = at(local);
        let host = self.host_runs(c);
        let runs = self.distlock_runs(c);
        match &self.clients[c].phase {
            Phase::Holding(h) if host && h.cmd.alive && h.guardian.is_some_and(|g| g <= now) => {
                Some(Due::GuardianFires)
            }
            Phase::Holding(h) if host && h.cmd.alive && local >= h.cmd.ends_by => {
                Some(Due::CmdEnds)
            }
            _ if !runs => None,
            Phase::Waiting {
                retry_at,
                sent: None,
            } if *retry_at <= local => Some(Due::Acquire),
            Phase::Waiting {
                sent: Some((_, t)), ..
            } if *t <= local => Some(Due::RequestTimeout),
            Phase::Releasing { timeout_at } if *timeout_at <= local => Some(Due::RequestTimeout),
            Phase::Holding(h) if !h.cmd.alive && !h.cmd.reaped => Some(Due::Reap),
            Phase::Holding(h) if h.sup.0.next_deadline().is_some_and(|d| d <= now) => {
                Some(Due::Deadline)
            }
            Phase::Holding(h) => match h.renewing {
                Some((_, t)) if t <= now => Some(Due::RenewTimeout),
                None if h.renew_now || h.policy.next_due().is_some_and(|d| d <= now) => {
                    Some(Due::Renew)
                }
                _ => None,
            },
            _ => None,
        }
    }

    fn work(&mut self, lease: &Lease, c: usize, due: Due) {
        let local = self.local(c);
        let now = at(local);
        let cu = c as u8;
        match due {
            Due::GuardianFires => {
                self.clients[c].killed = true;
                let h = self.holding(c);
                h.guardian = None;
                h.cmd.alive = false;
                h.cmd.status = Some(libc::SIGKILL);
            }
            Due::CmdEnds => {
                self.cmd_writes(c);
                let h = self.holding(c);
                h.cmd.alive = false;
                h.cmd.status = Some(0);
            }
            Due::Acquire => {
                if let Phase::Waiting { sent, .. } = &mut self.clients[c].phase {
                    *sent = Some((local, local + lease.request_timeout));
                }
                self.send(Msg::Request {
                    from: cu,
                    op: Op::Acquire,
                    orphan: false,
                });
            }
            Due::RequestTimeout => {
                self.orphan(c);
                match &mut self.clients[c].phase {
                    Phase::Waiting { retry_at, sent } => {
                        *retry_at = local;
                        *sent = None;
                    }
                    phase => *phase = Phase::Done,
                }
            }
            Due::Reap => {
                let h = self.holding(c);
                h.cmd.reaped = true;
                let status = ExitStatus::from_raw(h.cmd.status.unwrap_or(0));
                let tty = TtyFacts::default();
                self.feed(lease, c, Input::Exited { status, tty });
                self.feed(
                    lease,
                    c,
                    Input::Tick {
                        tty,
                        group_empty: true,
                    },
                );
            }
            Due::Deadline => {
                let group_empty = !self.holding(c).cmd.alive;
                self.feed(
                    lease,
                    c,
                    Input::Tick {
                        tty: TtyFacts::default(),
                        group_empty,
                    },
                );
            }
            Due::RenewTimeout => {
                self.orphan(c);
                let h = self.holding(c);
                h.renewing = None;
                h.policy.failed(now);
                if h.policy.failures() == 1 {
                    self.feed(lease, c, Input::Unconfirmed);
                }
            }
            Due::Renew => {
                let h = self.holding(c);
                h.renew_now = false;
                if let Attempt::Send { timeout } = h.policy.attempt(now) {
                    h.renewing = Some((now, now + timeout));
                    self.send(Msg::Request {
                        from: cu,
                        op: Op::Renew,
                        orphan: false,
                    });
                }
            }
        }
    }

    /// CMD writes to the resource, once, with its token.
    fn cmd_writes(&mut self, c: usize) {
        let live = self.now < self.clients[c].granted;
        let h = self.holding(c);
        if h.cmd.wrote {
            return;
        }
        h.cmd.wrote = true;
        let (token, epoch, frozen) = (h.token, h.epoch, h.cmd.frozen);
        self.send(Msg::Write {
            from: c as u8,
            token,
            epoch,
            live,
            frozen,
        });
    }

    fn tick(&mut self, slow: Option<usize>) {
        self.now += 1;
        if let Some(c) = slow {
            self.clients[c].lag += 1;
        }
        for m in &mut self.net {
            m.age = m.age.saturating_add(1).min(u8::MAX - 1);
        }
    }

    fn redis_handles(&mut self, lease: &Lease, from: u8, op: Op, orphan: bool) {
        let now = self.now;
        let expiry = now + lease.ttl_ticks();
        let live = self.redis.holder.filter(|&(_, exp)| now < exp);
        let c = from as usize;
        let reply = match op {
            Op::Acquire => match live {
                None => {
                    let clock = (self.redis.clock + 1).max(u16::from(now) * SUB);
                    self.redis.clock = clock;
                    self.redis.fence = if lease.plain_incr {
                        self.redis.fence + 1
                    } else {
                        (self.redis.fence + 1).max(clock)
                    };
                    self.redis.held_epoch = clock;
                    self.redis.holder = Some((from, expiry));
                    self.clients[c].granted = self.clients[c].granted.max(expiry);
                    Reply::Acquired {
                        token: self.redis.fence,
                        epoch: clock,
                    }
                }
                Some((h, _)) if h == from => {
                    self.redis.holder = Some((from, expiry));
                    self.clients[c].granted = self.clients[c].granted.max(expiry);
                    Reply::Acquired {
                        token: self.redis.fence,
                        epoch: self.redis.held_epoch,
                    }
                }
                Some((_, exp)) => Reply::Busy { pttl: exp - now },
            },
            Op::Renew => match live {
                Some((h, _)) if h == from => {
                    self.redis.holder = Some((from, expiry));
                    self.clients[c].granted = self.clients[c].granted.max(expiry);
                    Reply::Renewed
                }
                _ => Reply::NotOwner,
            },
            Op::Release => {
                if live.is_some_and(|(h, _)| h == from) {
                    self.redis.holder = None;
                }
                Reply::Released
            }
        };
        if !orphan {
            self.send(Msg::Reply { to: from, reply });
        }
    }

    fn resource_gets(&mut self, token: u16, epoch: u16, live: bool, frozen: bool) {
        let r = &mut self.resource;
        if token < r.max_token {
            return;
        }
        if epoch < r.max_epoch {
            r.stale = true;
        }
        r.max_epoch = r.max_epoch.max(epoch);
        if !live {
            if frozen {
                r.unleased_frozen = true;
            } else {
                r.unleased = true;
            }
        }
        r.max_token = token;
    }

    fn client_gets(&mut self, lease: &Lease, c: usize, reply: Reply) {
        let local = self.local(c);
        match (&mut self.clients[c].phase, reply) {
            (
                Phase::Waiting {
                    sent: Some((s, _)), ..
                },
                Reply::Acquired { token, epoch },
            ) => {
                let t0 = at(if lease.t0_from_reply { local } else { *s });
                let t = lease.timings;
                let options = Options {
                    kill_signal: libc::SIGTERM,
                    at_risk_signal: None,
                    max_hold: None,
                };
                self.clients[c].phase = Phase::Holding(Box::new(Holding {
                    sup: Sup(Supervisor::new(t, options, t0)),
                    policy: RenewalPolicy::new(t, t0),
                    renewing: None,
                    renew_now: false,
                    guardian: Some(t0 + t.hard_after()),
                    token,
                    epoch,
                    cmd: Cmd {
                        alive: true,
                        wrote: false,
                        ends_by: local + lease.cmd_max,
                        status: None,
                        reaped: false,
                        frozen: false,
                    },
                }));
                self.clients[c].got = true;
            }
            (Phase::Waiting { retry_at, sent }, Reply::Busy { pttl }) => {
                *retry_at = local + pttl + 1;
                *sent = None;
            }
            (Phase::Holding(h), Reply::Renewed | Reply::NotOwner) => {
                let Some((sent_at, _)) = h.renewing.take() else {
                    return;
                };
                let input = if reply == Reply::Renewed {
                    let sent_at = if lease.t0_from_reply {
                        at(local)
                    } else {
                        sent_at
                    };
                    h.policy.confirmed(sent_at);
                    Input::Renewed { sent_at }
                } else {
                    h.policy.not_owner();
                    Input::NotOwner
                };
                self.feed(lease, c, input);
            }
            (Phase::Releasing { .. }, Reply::Released) => self.clients[c].phase = Phase::Done,
            _ => {}
        }
    }

    /// Steps client `c`'s supervisor and carries out what it returns, as
    /// `run`'s driver does.
    fn feed(&mut self, lease: &Lease, c: usize, input: Input) {
        let local = self.local(c);
        let Phase::Holding(h) = &mut self.clients[c].phase else {
            return;
        };
        let (mut finished, mut killed) = (false, false);
        for action in h.sup.0.step(at(local), input) {
            match action {
                Action::SignalGroup(libc::SIGKILL) => {
                    if h.cmd.alive {
                        h.cmd.alive = false;
                        h.cmd.status = Some(libc::SIGKILL);
                        killed = true;
                    }
                }
                // CMD may ignore the kill signal (and may exit any time).
                Action::SignalGroup(_) | Action::SignalCmd(_) => {}
                Action::GiveTerminalToCmd | Action::TakeTerminalBack | Action::Lost(_) => {}
                Action::StopSelf { .. } => unreachable!("the model has no job control"),
                Action::SendRenewal { .. } | Action::Release | Action::Exit(_) => {
                    unreachable!("only a supervisor without CMD asks for these")
                }
                Action::RenewNow => h.renew_now = true,
                Action::ExtendGuardian(d) => {
                    if let Some(g) = &mut h.guardian {
                        *g = (*g).max(d);
                    }
                }
                Action::RestartGuardian(_) => unreachable!("the model's guardian never dies"),
                Action::Finish(_) => finished = true,
            }
        }
        let renewing = h.renewing.is_some();
        self.clients[c].killed |= killed;
        if finished {
            self.clients[c].phase = Phase::Releasing {
                timeout_at: local + lease.request_timeout,
            };
            if renewing {
                self.orphan(c);
            }
            self.send(Msg::Request {
                from: c as u8,
                op: Op::Release,
                orphan: false,
            });
        }
    }

    fn holding(&mut self, c: usize) -> &mut Holding {
        match &mut self.clients[c].phase {
            Phase::Holding(h) => h,
            _ => unreachable!("only offered while holding"),
        }
    }
}

impl Model for Lease {
    type State = World;
    type Action = Step;

    fn init_states(&self) -> Vec<World> {
        let client = Client {
            lag: 0,
            paused: None,
            phase: Phase::Waiting {
                retry_at: 0,
                sent: None,
            },
            granted: 0,
            got: false,
            killed: false,
        };
        let mut w = World {
            now: 0,
            faults_left: self.budget,
            redis: Redis {
                holder: None,
                fence: 0,
                clock: 0,
                held_epoch: 0,
                paused_since: None,
            },
            net: Vec::new(),
            clients: [client.clone(), client],
            resource: Resource {
                max_token: 0,
                max_epoch: 0,
                stale: false,
                unleased: false,
                unleased_frozen: false,
            },
        };
        w.settle(self);
        vec![w]
    }

    fn actions(&self, w: &World, out: &mut Vec<Step>) {
        if w.now >= self.horizon || w.clients.iter().all(|c| c.phase == Phase::Done) {
            return;
        }
        if (0..CLIENTS).any(|c| w.due(c).is_some()) {
            out.push(Step::Run);
            return;
        }
        let may_fault = w.faults_left > 0 && w.now < self.faults_until;
        if !w.overdue(self) {
            out.push(Step::Tick);
            if may_fault && self.faults.drift {
                for c in 0..CLIENTS {
                    if w.clients[c].lag < self.max_drift {
                        out.push(Step::SlowTick(c as u8));
                    }
                }
            }
        }
        for (i, m) in w.net.iter().enumerate() {
            if w.deliverable(m) {
                out.push(Step::Deliver(i as u8));
            }
            if may_fault && self.faults.drop {
                out.push(Step::Drop(i as u8));
            }
        }
        for (c, client) in w.clients.iter().enumerate() {
            let cu = c as u8;
            match client.paused {
                Some((pause, _)) => {
                    out.push(Step::Resume(cu));
                    if let (Pause::Host, Phase::Holding(h)) = (pause, &client.phase) {
                        if h.cmd.alive && !h.cmd.wrote {
                            out.push(Step::ResumeCmdFirst(cu));
                        }
                    }
                }
                None if may_fault && client.phase != Phase::Done => {
                    if self.faults.pause_distlock {
                        out.push(Step::Pause(cu, Pause::Distlock));
                    }
                    if self.faults.pause_host {
                        out.push(Step::Pause(cu, Pause::Host));
                    }
                }
                None => {}
            }
        }
        match w.redis.paused_since {
            Some(_) => out.push(Step::ResumeRedis),
            None if may_fault => {
                if self.faults.pause_redis {
                    out.push(Step::PauseRedis);
                }
                if self.faults.restart_redis {
                    out.push(Step::RestartRedis);
                }
            }
            None => {}
        }
    }

    fn next_state(&self, w: &World, step: Step) -> Option<World> {
        let mut w = w.clone();
        match step {
            Step::Tick => {
                w.tick(None);
                return Some(w);
            }
            Step::SlowTick(c) => {
                w.faults_left -= 1;
                w.tick(Some(c as usize));
                return Some(w);
            }
            Step::Run => {}
            Step::Deliver(i) => {
                let m = w.net.remove(i as usize);
                match m.msg {
                    Msg::Request { from, op, orphan } => w.redis_handles(self, from, op, orphan),
                    Msg::Reply { to, reply } => w.client_gets(self, to as usize, reply),
                    Msg::Write {
                        token,
                        epoch,
                        live,
                        frozen,
                        ..
                    } => w.resource_gets(token, epoch, live, frozen),
                }
            }
            Step::Drop(i) => {
                w.faults_left -= 1;
                w.net.remove(i as usize);
            }
            Step::Pause(c, p) => {
                w.faults_left -= 1;
                w.clients[c as usize].paused = Some((p, w.now));
            }
            Step::Resume(c) | Step::ResumeCmdFirst(c) => {
                let c = c as usize;
                let (now, granted) = (w.now, w.clients[c].granted);
                match w.clients[c].paused.take() {
                    Some((Pause::Distlock, _)) => {
                        let tty = TtyFacts::default();
                        w.feed(
                            self,
                            c,
                            Input::Signal {
                                sig: libc::SIGCONT,
                                tty,
                            },
                        );
                    }
                    Some((Pause::Host, _)) => {
                        if let Phase::Holding(h) = &mut w.clients[c].phase {
                            if h.cmd.alive && now >= granted {
                                h.cmd.frozen = true;
                            }
                        }
                        if step == Step::ResumeCmdFirst(c as u8) {
                            w.cmd_writes(c);
                        }
                    }
                    None => {}
                }
            }
            Step::PauseRedis => {
                w.faults_left -= 1;
                w.redis.paused_since = Some(w.now);
            }
            Step::ResumeRedis => w.redis.paused_since = None,
            Step::RestartRedis => {
                w.faults_left -= 1;
                w.redis.holder = None;
                w.redis.fence = 0;
            }
        }
        w.settle(self);
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let all = vec![
            Property::always(NO_CMD_ALIVE, |lease: &Lease, w: &World| {
                (0..CLIENTS).all(|c| {
                    let Phase::Holding(h) = &w.clients[c].phase else {
                        return true;
                    };
                    let excused = !lease.cover_frozen_host && (!w.host_runs(c) || h.cmd.frozen);
                    !h.cmd.alive || excused || w.now < w.clients[c].granted
                })
            }),
            Property::always(FENCING, |lease: &Lease, w: &World| {
                let r = &w.resource;
                !r.stale && !r.unleased && (!lease.cover_frozen_host || !r.unleased_frozen)
            }),
            Property::eventually(LIVENESS, |_, w: &World| w.clients.iter().all(|c| c.got)),
            Property::sometimes(KILLED, |_, w: &World| w.clients.iter().any(|c| c.killed)),
        ];
        all.into_iter()
            .filter(|p| self.only.is_none_or(|o| o == p.name))
            .collect()
    }
}

const NO_CMD_ALIVE: &str = "no CMD alive after its lease may have expired";
const FENCING: &str = "fencing";
const LIVENESS: &str = "liveness";
/// Not a promise: the healthy world must reach the deadlines, or the first
/// property would hold for want of trying.
const KILLED: &str = "a CMD outlives its renewals and is SIGKILLed";

/// What one exhaustive run found.
struct Run {
    unique: usize,
    max_depth: usize,
    took: Duration,
    found: Vec<(&'static str, String)>,
}

fn check(lease: Lease) -> Run {
    let started = Instant::now();
    let checker = lease.checker().spawn_bfs().join();
    let mut found: Vec<_> = checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| {
            let last = format!("{:?}", path.last_state());
            (name, format!("{path}ending in {last}"))
        })
        .collect();
    found.sort();
    Run {
        unique: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        took: started.elapsed(),
        found,
    }
}

fn report(what: &str, run: &Run) {
    eprintln!(
        "model {what}: {} unique states, depth {}, {:.1?}",
        run.unique, run.max_depth, run.took
    );
    for (name, path) in &run.found {
        eprintln!("model {what}: found {name:?}:\n{path}");
    }
}

/// The correct model, explored once for the three properties' tests: the
/// world `cargo test` checks, or with `DISTLOCK_MODEL_DEEP=1` the deeper
/// one (by hand: `DISTLOCK_MODEL_DEEP=1 cargo test model:: -- --nocapture`).
fn healthy() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let deep = std::env::var_os("DISTLOCK_MODEL_DEEP").is_some();
        let lease = if deep { Lease::deep() } else { Lease::new() };
        let run = check(lease);
        report(if deep { "deep" } else { "healthy" }, &run);
        run
    })
}

fn assert_holds(run: &Run, property: &str) {
    assert!(
        run.found.iter().all(|(n, _)| *n != property),
        "{property:?} fails:\n{}",
        run.found
            .iter()
            .filter(|(n, _)| *n == property)
            .map(|(_, p)| p.as_str())
            .collect::<String>()
    );
}

/// Runs a mutant for one property and returns its counterexample.
fn counterexample(what: &str, lease: Lease, property: &'static str) -> String {
    let run = check(Lease {
        only: Some(property),
        ..lease
    });
    report(what, &run);
    run.found
        .into_iter()
        .find(|(n, _)| *n == property)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("the checker found no counterexample to {property:?} in {what}"))
}

#[test]
fn no_cmd_alive_after_its_lease_may_have_expired() {
    let run = healthy();
    assert!(
        run.found.iter().any(|(n, _)| *n == KILLED),
        "the world never reaches a deadline"
    );
    assert_holds(run, NO_CMD_ALIVE);
}

#[test]
fn fencing() {
    assert_holds(healthy(), FENCING);
}

#[test]
fn liveness() {
    assert_holds(healthy(), LIVENESS);
}

#[test]
fn mutant_t0_from_the_reply_is_caught() {
    counterexample(
        "t0 from the reply",
        Lease {
            t0_from_reply: true,
            ..Lease::slow_network()
        },
        NO_CMD_ALIVE,
    );
}

#[test]
fn mutant_margin_zero_is_caught() {
    counterexample(
        "margin zero",
        Lease {
            timings: Timings {
                margin: Duration::ZERO,
                ..timings()
            },
            ..Lease::slow_network()
        },
        NO_CMD_ALIVE,
    );
}

#[test]
fn a_frozen_host_is_not_covered() {
    let lease = || Lease {
        cover_frozen_host: true,
        faults: Faults {
            pause_host: true,
            ..NO_FAULTS
        },
        ..Lease::new()
    };
    let path = counterexample("frozen host", lease(), NO_CMD_ALIVE);
    assert!(
        path.contains("Pause("),
        "a freeze, not something else:\n{path}"
    );
    let path = counterexample("frozen host", lease(), FENCING);
    assert!(path.contains("Host"), "a host freeze:\n{path}");
}

/// The world where a plain `INCR` hands out a token twice: a holder's host
/// freezes with CMD about to write, Redis restarts without persistence and
/// forgets the counter, the next holder gets the same token and writes,
/// then the frozen CMD wakes and writes.
fn restart_and_freeze() -> Lease {
    Lease {
        faults: Faults {
            restart_redis: true,
            pause_host: true,
            ..NO_FAULTS
        },
        budget: 2,
        faults_until: 4,
        horizon: 24,
        only: Some(FENCING),
        ..Lease::new()
    }
}

#[test]
fn fencing_holds_through_a_restart_that_forgets_the_counter() {
    let run = check(restart_and_freeze());
    report("restart and freeze", &run);
    assert_holds(&run, FENCING);
}

#[test]
fn mutant_plain_incr_is_caught_through_a_restart() {
    let path = counterexample(
        "plain INCR",
        Lease {
            plain_incr: true,
            ..restart_and_freeze()
        },
        FENCING,
    );
    assert!(path.contains("RestartRedis"), "through a restart:\n{path}");
}
