//! A model of the fair queue's hand-off, checked exhaustively with
//! stateright (docs/queue.md, docs/guarantees.md §11).
//!
//! The waiting tests show the queue behaved in the runs we made; this shows
//! the protocol holds in every interleaving of a small world: three
//! waiters behind an outside holder, a network that interleaves the
//! messages to different waiters in any order (each waiter's own arrive in
//! order, on one connection) and may lose any one, and a nemesis that stops
//! (SIGSTOP, for good) up to two waiters and kills one at any point. The
//! releaser sees its hand-off through (`Store::relay`): when every turn
//! promised has passed unclaimed it runs `RELAY`. With the real lookahead
//! (two promised turns) three waiters cannot put it to work, so the world
//! is also checked with a lookahead of one, where two stopped waiters in
//! a row leave only the releaser to act.
//!
//! The waiters run the project's own [`Turn`] on the store's [`Notice`]s
//! (what a message asks for, when a promised turn has come) and the wait loop's
//! order: forget the turn and the pending wake-up, then attempt, then
//! sleep. An attempt is two steps (the script runs; the reply arrives
//! later), so messages land between a check and the sleep. The server is
//! [`Server`], a line-for-line mirror of the Lua in `store/scripts.rs`
//! (`prune`, `promise`, `wake_next`, `end_turns`, `schedule_end`, and the
//! queue part of ACQUIRE, RELEASE and RELAY): Lua cannot run here, so the
//! mirror must be kept in step with the scripts by hand; the keep-alive
//! deadlines are left out (they only ever drop a waiter sooner).
//!
//! Time (ms, the real constants) stands still while anything is due: a
//! message in flight to a running waiter, a reply, a wake-up, a turn that
//! has come, a release, a relay. Then it jumps to the next moment a waiter
//! acts (its turn, or its keep-alive backstop) or the releaser does. Every
//! waiter arrives before time first moves.

use std::time::{Duration, Instant};

use stateright::{Checker, Model, Property};

use super::turn::{Turn, TURN_SLACK};
use crate::store::Notice;

const WAITERS: usize = 3;

/// `CLAIM_MS` and `AHEAD` of `wake_next!` in store/scripts.rs.
const CLAIM_MS: u32 = 900;
const AHEAD: usize = 2;

/// `RELAY_SLACK` of the releaser (store/redis_store/lock.rs).
const RELAY_SLACK_MS: u32 = 5;

/// A waiter's own backstop: it tries again this long after its last try
/// (its TTL) even if told nothing.
const BACKSTOP_MS: u32 = 30_000;

/// Time stops here: a world still waiting then has failed liveness.
const HORIZON_MS: u32 = 3 * BACKSTOP_MS;

fn ms(t: u32) -> Duration {
    Duration::from_millis(u64::from(t))
}

fn turn_in(t: u32) -> Notice {
    Notice::Turn { starts_in: ms(t) }
}

/// The queue's keys as the scripts keep them: `queue` in arrival order,
/// `turns` as owner → end of its claim window (server ms).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
struct Server {
    held: bool,
    queue: Vec<u8>,
    turns: Vec<(u8, u32)>,
}

/// What the server publishes: (waiter, message).
type Out = Vec<(u8, Notice)>;

impl Server {
    fn turn_of(&self, w: u8) -> Option<u32> {
        self.turns.iter().find(|t| t.0 == w).map(|t| t.1)
    }

    fn drop_waiter(&mut self, w: u8) {
        self.queue.retain(|&q| q != w);
        self.turns.retain(|t| t.0 != w);
    }

    fn prune(&mut self, now: u32) {
        let passed: Vec<u8> = self
            .turns
            .iter()
            .filter(|t| t.1 <= now)
            .map(|t| t.0)
            .collect();
        for w in passed {
            self.drop_waiter(w);
        }
    }

    /// `schedule_end` of the Lua, as a moment: when the last promised
    /// window ends.
    fn schedule_end(&self, now: u32) -> u32 {
        self.turns.iter().map(|t| t.1).max().unwrap_or(now).max(now)
    }

    /// `promise` of the Lua: returns the waiters told.
    fn promise(&mut self, now: u32, subscribed: &[bool], out: &mut Out, m: &Queue) -> Vec<u8> {
        let Some(mut last) = self.turns.iter().map(|t| t.1).max() else {
            return Vec::new();
        };
        let mut told = Vec::new();
        let front: Vec<u8> = self.queue.iter().take(m.ahead + 1).copied().collect();
        for w in front {
            if self.turn_of(w).is_none() {
                if subscribed[w as usize] {
                    out.push((w, turn_in(last.saturating_sub(now))));
                    last += CLAIM_MS;
                    self.turns.push((w, last));
                    told.push(w);
                } else {
                    self.drop_waiter(w);
                }
            }
        }
        told
    }

    /// `wake_next` of the Lua; `dead_head_ends` is the mutant that gives up
    /// at a head nobody hears.
    fn wake_next(
        &mut self,
        me: Option<u8>,
        now: u32,
        subscribed: &[bool],
        out: &mut Out,
        m: &Queue,
    ) -> Option<u8> {
        self.prune(now);
        loop {
            let head = *self.queue.first()?;
            if Some(head) == me {
                return None;
            }
            if subscribed[head as usize] {
                out.push((head, Notice::Wake));
                if self.turn_of(head).is_none() {
                    self.turns.push((head, now + CLAIM_MS));
                }
                self.promise(now, subscribed, out, m);
                return Some(head);
            }
            if m.dead_head_ends {
                return None;
            }
            self.drop_waiter(head);
        }
    }

    /// ACQUIRE in `fair` mode, for the lock's part: whether acquired, and
    /// whether that settled a hand-off (`turns` existed: `settle`).
    fn acquire(
        &mut self,
        me: u8,
        now: u32,
        subscribed: &[bool],
        out: &mut Out,
        m: &Queue,
    ) -> (bool, bool) {
        let ahead = if self.held {
            None
        } else {
            self.wake_next(Some(me), now, subscribed, out, m)
        };
        if !self.held && ahead.is_none() {
            let settled = !self.turns.is_empty();
            // end_turns, then DEL turns.
            for (w, _) in &self.turns {
                if *w != me {
                    out.push((*w, Notice::Claimed));
                }
            }
            self.turns.clear();
            self.drop_waiter(me);
            self.held = true;
            return (true, settled);
        }
        if !self.queue.contains(&me) {
            self.queue.push(me);
        }
        if ahead.is_some() {
            let told = self.promise(now, subscribed, out, m);
            if let Some(end) = self.turn_of(me) {
                if !told.contains(&me) {
                    let starts = (end - CLAIM_MS).saturating_sub(now);
                    out.push((me, turn_in(starts)));
                }
            }
        }
        (false, false)
    }

    /// RELEASE: when it woke a waiter, the moment the releaser acts
    /// unless the hand-off settles first.
    fn release(&mut self, now: u32, subscribed: &[bool], out: &mut Out, m: &Queue) -> Option<u32> {
        let woken = self.wake_next(None, now, subscribed, out, m);
        self.held = false;
        woken.map(|_| self.schedule_end(now) + RELAY_SLACK_MS)
    }

    /// RELAY: the releaser's next moment, or None when it is done.
    fn relay(&mut self, now: u32, subscribed: &[bool], out: &mut Out, m: &Queue) -> Option<u32> {
        if self.held {
            return None;
        }
        self.wake_next(None, now, subscribed, out, m)?;
        Some(self.schedule_end(now) + RELAY_SLACK_MS)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Phase {
    /// Not queued yet.
    Arriving,
    Waiting,
    /// The script ran; its reply (acquired or not) is on its way.
    Replying(bool),
    Holding,
    Served,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Waiter {
    phase: Phase,
    stopped: bool,
    killed: bool,
    turn: Turn,
    /// A byte in the wake-up pipe.
    wake: bool,
    last_try: u32,
    inbox: Vec<Notice>,
}

impl Waiter {
    fn runs(&self) -> bool {
        !self.stopped && !self.killed
    }

    fn turn_due(&self) -> Option<u32> {
        self.turn.0.map(|d| d.as_millis() as u32)
    }

    /// Whether it must try now: woken, its turn come, or its backstop.
    fn must_try(&self, now: u32) -> bool {
        self.phase == Phase::Waiting
            && (self.wake
                || self.turn_due().is_some_and(|t| t <= now)
                || now >= self.last_try + BACKSTOP_MS)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct World {
    now: u32,
    server: Server,
    outside_holds: bool,
    released_at: u32,
    waiters: Vec<Waiter>,
    arrivals: Vec<u8>,
    served: Vec<u8>,
    /// When the releaser acts next (its XREAD times out); None once the
    /// hand-off settled, or with nobody woken.
    relay_at: Option<u32>,
    stops: u8,
    kills: u8,
    drops: u8,
    /// A waiter that never stopped got the lock later than one claim
    /// window (and the retry slack) per stopped or killed waiter ahead.
    late: bool,
}

impl World {
    fn subscribed(&self) -> Vec<bool> {
        self.waiters.iter().map(|w| !w.killed).collect()
    }

    fn deliver(&mut self, out: Out) {
        for (w, n) in out {
            let w = &mut self.waiters[w as usize];
            if !w.killed {
                w.inbox.push(n);
            }
        }
    }

    fn nothing_due(&self) -> bool {
        !self.outside_holds
            && self.relay_at.is_none_or(|t| t > self.now)
            && self.waiters.iter().all(|w| {
                !w.runs()
                    || (w.inbox.is_empty()
                        && !matches!(
                            w.phase,
                            Phase::Arriving | Phase::Replying(_) | Phase::Holding
                        )
                        && !w.must_try(self.now))
            })
    }

    fn next_moment(&self) -> Option<u32> {
        self.waiters
            .iter()
            .filter(|w| w.runs() && w.phase == Phase::Waiting)
            .flat_map(|w| [w.turn_due(), Some(w.last_try + BACKSTOP_MS)])
            .chain([self.relay_at])
            .flatten()
            .filter(|&t| t > self.now && t <= HORIZON_MS)
            .min()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Action {
    Release(Option<u8>),
    /// The releaser's XREAD timed out: it runs RELAY.
    Relay,
    Try(u8),
    Reply(u8),
    /// The oldest message to a waiter: one connection delivers in order
    /// (messages to different waiters interleave freely).
    Deliver(u8),
    Stop(u8),
    Kill(u8),
    Lose(u8, usize),
    Tick(u32),
}

/// The world and its mutants.
#[derive(Clone, Copy)]
struct Queue {
    /// Waiters promised a turn behind the head (`AHEAD`).
    ahead: usize,
    max_stops: u8,
    max_kills: u8,
    max_drops: u8,
    /// Mutant: the release wakes nobody when the head is dead.
    dead_head_ends: bool,
    /// Mutant: the waiter forgets its wake-up and turn after the attempt's
    /// reply, not before the attempt (checks, then sleeps without looking).
    forget_after_reply: bool,
    /// Mutant: the releaser exits at once, as before `Store::relay`.
    releaser_leaves: bool,
}

impl Model for Queue {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let waiter = Waiter {
            phase: Phase::Arriving,
            stopped: false,
            killed: false,
            turn: Turn::default(),
            wake: false,
            last_try: 0,
            inbox: Vec::new(),
        };
        vec![World {
            now: 0,
            server: Server {
                held: true,
                ..Server::default()
            },
            outside_holds: true,
            released_at: 0,
            waiters: vec![waiter; WAITERS],
            arrivals: Vec::new(),
            served: Vec::new(),
            relay_at: None,
            stops: 0,
            kills: 0,
            drops: 0,
            late: false,
        }]
    }

    fn actions(&self, w: &World, actions: &mut Vec<Action>) {
        if w.outside_holds {
            actions.push(Action::Release(None));
        }
        if w.relay_at.is_some_and(|t| t <= w.now) {
            actions.push(Action::Relay);
        }
        for (i, x) in w.waiters.iter().enumerate() {
            let i = i as u8;
            if !x.runs() {
                continue;
            }
            match x.phase {
                Phase::Arriving => actions.push(Action::Try(i)),
                Phase::Waiting if x.must_try(w.now) => actions.push(Action::Try(i)),
                Phase::Replying(_) => actions.push(Action::Reply(i)),
                Phase::Holding => actions.push(Action::Release(Some(i))),
                _ => {}
            }
            if !x.inbox.is_empty() {
                actions.push(Action::Deliver(i));
            }
            for k in 0..x.inbox.len() {
                if w.drops < self.max_drops {
                    actions.push(Action::Lose(i, k));
                }
            }
            if matches!(x.phase, Phase::Waiting | Phase::Replying(_)) {
                if w.stops < self.max_stops {
                    actions.push(Action::Stop(i));
                }
                if w.kills < self.max_kills {
                    actions.push(Action::Kill(i));
                }
            }
        }
        if w.nothing_due() {
            if let Some(t) = w.next_moment() {
                actions.push(Action::Tick(t));
            }
        }
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut w = last.clone();
        let now = w.now;
        match action {
            Action::Release(who) => {
                let mut out = Vec::new();
                let subscribed = w.subscribed();
                let relay_at = w.server.release(now, &subscribed, &mut out, self);
                w.relay_at = relay_at.filter(|_| !self.releaser_leaves);
                w.deliver(out);
                w.released_at = now;
                match who {
                    None => w.outside_holds = false,
                    Some(i) => w.waiters[i as usize].phase = Phase::Served,
                }
            }
            Action::Relay => {
                let mut out = Vec::new();
                let subscribed = w.subscribed();
                w.relay_at = w.server.relay(now, &subscribed, &mut out, self);
                w.deliver(out);
            }
            Action::Try(i) => {
                let x = &mut w.waiters[i as usize];
                if x.phase == Phase::Arriving {
                    w.arrivals.push(i);
                }
                if !self.forget_after_reply {
                    x.turn = Turn::default();
                    x.wake = false;
                }
                x.last_try = now;
                let mut out = Vec::new();
                let subscribed = w.subscribed();
                let (got, settled) = w.server.acquire(i, now, &subscribed, &mut out, self);
                if settled {
                    w.relay_at = None;
                }
                w.waiters[i as usize].phase = Phase::Replying(got);
                w.deliver(out);
            }
            Action::Reply(i) => {
                let x = &mut w.waiters[i as usize];
                if self.forget_after_reply {
                    x.turn = Turn::default();
                    x.wake = false;
                }
                let Phase::Replying(got) = x.phase else {
                    return None;
                };
                if got {
                    x.phase = Phase::Holding;
                    let pos = |v: u8| w.arrivals.iter().position(|&a| a == v);
                    let mine = pos(i);
                    let faulty_ahead = w
                        .waiters
                        .iter()
                        .enumerate()
                        .filter(|(j, y)| (y.stopped || y.killed) && pos(*j as u8) < mine)
                        .count() as u32;
                    let x = &w.waiters[i as usize];
                    if !x.stopped
                        && w.drops == 0
                        && now - w.released_at
                            > faulty_ahead * (CLAIM_MS + TURN_SLACK.as_millis() as u32)
                    {
                        w.late = true;
                    }
                    w.served.push(i);
                } else {
                    x.phase = Phase::Waiting;
                }
            }
            Action::Deliver(i) => {
                let x = &mut w.waiters[i as usize];
                let n = x.inbox.remove(0);
                if x.turn.take(n, ms(now)) {
                    x.wake = true;
                }
            }
            Action::Lose(i, k) => {
                w.waiters[i as usize].inbox.remove(k);
                w.drops += 1;
            }
            Action::Stop(i) => {
                w.waiters[i as usize].stopped = true;
                w.stops += 1;
            }
            Action::Kill(i) => {
                let x = &mut w.waiters[i as usize];
                x.killed = true;
                x.inbox.clear();
                w.kills += 1;
            }
            Action::Tick(t) => w.now = t,
        }
        Some(w)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_HOLDER, |_, w: &World| {
                let holding = w
                    .waiters
                    .iter()
                    .filter(|x| x.phase == Phase::Holding)
                    .count();
                holding + usize::from(w.outside_holds) <= 1
            }),
            Property::always(ARRIVAL_ORDER, |_, w: &World| {
                let pos = |v: u8| w.arrivals.iter().position(|&a| a == v);
                w.drops > 0
                    || w.served
                        .iter()
                        .filter(|&&s| !w.waiters[s as usize].stopped)
                        .map(|&s| pos(s))
                        .collect::<Vec<_>>()
                        .is_sorted()
            }),
            Property::always(ONE_WINDOW, |_, w: &World| !w.late),
            Property::eventually(LIVENESS, |_, w: &World| {
                w.waiters
                    .iter()
                    .all(|x| !x.runs() || x.phase == Phase::Served)
            }),
            Property::sometimes(STOPPED_PASSED, |_, w: &World| {
                w.waiters.iter().any(|x| x.stopped)
                    && w.waiters
                        .iter()
                        .all(|x| !x.runs() || x.phase == Phase::Served)
            }),
        ]
    }
}

const ONE_HOLDER: &str = "never given to two";
const ARRIVAL_ORDER: &str = "live waiters served in arrival order";
const ONE_WINDOW: &str = "a stopped or dead waiter delays the next by at most one claim window";
const LIVENESS: &str = "every live waiter eventually gets it";
/// Not a promise: the world must reach a stopped waiter passed over, or
/// the delay property would hold for want of trying.
const STOPPED_PASSED: &str = "a stopped waiter is passed over";

fn check(q: Queue) -> Vec<(&'static str, String)> {
    let started = Instant::now();
    let checker = q.checker().spawn_bfs().join();
    eprintln!(
        "queue model: {} unique states, depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
        .discoveries()
        .into_iter()
        .map(|(name, path)| (name, format!("{path}")))
        .collect()
}

fn faults() -> Queue {
    Queue {
        ahead: AHEAD,
        max_stops: 2,
        max_kills: 1,
        max_drops: 1,
        dead_head_ends: false,
        forget_after_reply: false,
        releaser_leaves: false,
    }
}

/// A lookahead of one: two stopped waiters in a row use up every promise,
/// and only the releaser is left to wake the third.
fn short_lookahead() -> Queue {
    Queue {
        ahead: 1,
        ..faults()
    }
}

/// Checks `q` and fails on any broken promise, or if no stopped waiter
/// was ever passed over (the delay property would then hold vacuously).
fn assert_holds(q: Queue) {
    let found = check(q);
    let names: Vec<_> = found.iter().map(|f| f.0).collect();
    assert!(names.contains(&STOPPED_PASSED), "{names:?}");
    let broken: Vec<_> = found.iter().filter(|f| f.0 != STOPPED_PASSED).collect();
    assert!(broken.is_empty(), "{broken:#?}");
}

#[test]
fn the_queue_protocol_holds_its_promises() {
    assert_holds(faults());
}

#[test]
fn mutant_release_wakes_nobody_when_the_head_died_is_caught() {
    let found = check(Queue {
        dead_head_ends: true,
        ..faults()
    });
    assert!(found.iter().any(|f| f.0 == ONE_WINDOW), "{found:#?}");
}

#[test]
fn mutant_check_then_sleep_without_recheck_is_caught() {
    let found = check(Queue {
        forget_after_reply: true,
        ..faults()
    });
    assert!(found.iter().any(|f| f.0 == ONE_WINDOW), "{found:#?}");
}

#[test]
fn the_releaser_covers_more_stopped_waiters_than_were_promised_turns() {
    assert_holds(short_lookahead());
}

#[test]
fn mutant_releaser_leaves_at_once_is_caught() {
    let found = check(Queue {
        releaser_leaves: true,
        ..short_lookahead()
    });
    assert!(found.iter().any(|f| f.0 == ONE_WINDOW), "{found:#?}");
}
