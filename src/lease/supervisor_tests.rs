//! guarantees.md §2's rules, stepped on a fake clock: plain `Duration`s, no
//! sleeps, no processes.

use std::os::unix::process::ExitStatusExt;

use proptest::prelude::*;

use super::*;

const T0: Duration = Duration::from_secs(1000);
const NS: Duration = Duration::from_nanos(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The defaults for --ttl 30s: renew every 10s, grace 5s, margin 305ms,
/// so the kill deadline is t0 + 24.695s and the hard one t0 + 29.695s.
fn timings() -> Timings {
    Timings::new(Duration::from_secs(30), None, None).unwrap()
}

fn options() -> Options {
    Options {
        kill_signal: libc::SIGTERM,
        at_risk_signal: None,
        max_hold: None,
    }
}

fn machine(options: Options) -> Supervisor {
    Supervisor::new(timings(), options, T0)
}

/// A tick with a terminal that neither distlock nor CMD has: job control
/// as from a background job.
fn tick(s: &mut Supervisor, at: Duration) -> Vec<Action> {
    s.step(
        at,
        Input::Tick {
            tty: STOP_TTY,
            group_empty: false,
        },
    )
}

fn exit_status(code: i32) -> ExitStatus {
    ExitStatus::from_raw(code << 8)
}

fn soft() -> Duration {
    T0 + timings().soft_after()
}

fn hard() -> Duration {
    T0 + timings().hard_after()
}

const STOP_TTY: TtyFacts = TtyFacts {
    present: true,
    we_have_it: false,
    cmd_has_it: false,
};

#[test]
fn the_kill_signal_goes_out_by_t0_plus_ttl_minus_grace_minus_margin() {
    let mut s = machine(options());
    assert_eq!(timings().soft_after(), ms(24_695));
    assert_eq!(s.next_deadline(), Some(soft()));
    assert_eq!(tick(&mut s, soft() - NS), vec![]);
    assert_eq!(
        tick(&mut s, soft()),
        vec![
            Action::Lost(Loss::Unconfirmed),
            Action::SignalGroup(libc::SIGTERM),
            Action::SignalGroup(libc::SIGCONT),
        ],
        "the kill signal, then SIGCONT for stopped members, never the other way round"
    );
}

#[test]
fn sigkill_goes_out_by_t0_plus_ttl_minus_margin() {
    let mut s = machine(options());
    tick(&mut s, soft());
    assert_eq!(s.next_deadline(), Some(hard()));
    assert_eq!(tick(&mut s, hard() - NS), vec![]);
    assert_eq!(
        tick(&mut s, hard()),
        vec![Action::SignalGroup(libc::SIGKILL)]
    );
    assert_eq!(
        tick(&mut s, hard() + ms(1)),
        vec![],
        "SIGKILL goes out once"
    );
}

#[test]
fn a_renewal_that_times_out_is_retried_before_the_kill_deadline() {
    // --ttl 3s: renew every 1s, grace 750ms, margin 35ms; the kill
    // deadline is t0 + 2.215s.
    let t = Timings::new(Duration::from_secs(3), None, None).unwrap();
    let soft = T0 + t.soft_after();
    assert_eq!(soft, T0 + ms(2_215));
    let mut p = RenewalPolicy::new(t, T0);
    let first = T0 + t.renew_every;
    assert_eq!(p.next_due(), Some(first));
    assert_eq!(
        p.attempt(first),
        Attempt::Send {
            timeout: t.renew_every
        }
    );
    // It times out after its full timeout, at t0 + 2s: the usual pause
    // (250ms) would land past the deadline; half of what is left is used.
    let failed_at = first + t.renew_every;
    p.failed(failed_at);
    let retry = p.next_due().unwrap();
    assert_eq!(retry, failed_at + (soft - failed_at) / 2);
    let Attempt::Send { timeout } = p.attempt(retry) else {
        panic!("the retry is too late")
    };
    assert_eq!(retry + timeout, soft, "its reply is still useful");
    // Every further failure leaves room for one more try until the very
    // end, and nothing is sent from the deadline on.
    let mut now = retry + timeout / 2;
    while now < soft - ms(2) {
        p.failed(now);
        let next = p.next_due().unwrap();
        assert!(next < soft, "retry at {next:?} is past the deadline");
        now = next;
    }
    assert_eq!(p.attempt(soft), Attempt::TooLate);
    assert_eq!(p.next_due(), None);
    // Early in the lease the usual pause applies.
    let mut p = RenewalPolicy::new(t, T0);
    p.failed(T0 + ms(1_010));
    assert_eq!(p.next_due(), Some(T0 + ms(1_260)));
}

#[test]
fn a_confirmed_renewal_moves_the_policy_on_and_not_owner_ends_it() {
    let t = timings();
    let mut p = RenewalPolicy::new(t, T0);
    p.failed(T0 + ms(10_100));
    assert_eq!(p.failures(), 1);
    p.confirmed(T0 + ms(10_200));
    assert_eq!(p.failures(), 0);
    assert_eq!(p.next_due(), Some(T0 + ms(20_200)));
    assert_eq!(p.deadline(), T0 + ms(10_200) + t.soft_after());
    p.not_owner();
    assert_eq!(p.next_due(), None);
}

#[test]
fn a_holder_renews_until_the_lease_itself_may_expire() {
    // `hold` has no CMD to give a grace to: its deadline is ttl − margin.
    let t = Timings::for_holder(Duration::from_secs(30));
    assert_eq!(t.renew_every, Duration::from_secs(10));
    assert_eq!(t.soft_after(), t.hard_after());
    assert_eq!(t.hard_after(), ms(29_695));
    let mut p = RenewalPolicy::new(t, T0);
    p.failed(T0 + ms(29_000));
    assert!(p.next_due().unwrap() < T0 + ms(29_695));
    // A ttl below the margin is lost at once, not a panic.
    let t = Timings::for_holder(ms(1));
    assert_eq!(t.hard_after(), Duration::ZERO);
    assert_eq!(RenewalPolicy::new(t, T0).attempt(T0), Attempt::TooLate);
}

/// `hold`'s background renewer for --ttl 30s: renew every 10s, no grace,
/// deadline t0 + 29.695s.
fn holder(release_at: Option<Duration>) -> Supervisor {
    Supervisor::without_cmd(Timings::for_holder(Duration::from_secs(30)), T0, release_at)
}

fn hold_tick(s: &mut Supervisor, at: Duration) -> Vec<Action> {
    s.step(
        at,
        Input::Tick {
            tty: TtyFacts::default(),
            group_empty: true,
        },
    )
}

#[test]
fn a_hold_renews_every_third_of_the_ttl_and_one_at_a_time() {
    let mut s = holder(None);
    assert_eq!(s.next_deadline(), Some(T0 + ms(10_000)));
    assert_eq!(hold_tick(&mut s, T0 + ms(10_000) - NS), vec![]);
    assert_eq!(
        hold_tick(&mut s, T0 + ms(10_000)),
        vec![Action::SendRenewal {
            timeout: ms(10_000)
        }]
    );
    // In flight: no second request, and only the deadline to wake for.
    assert_eq!(hold_tick(&mut s, T0 + ms(10_001)), vec![]);
    assert_eq!(s.next_deadline(), Some(T0 + ms(29_695)));
    let sent_at = T0 + ms(10_000);
    assert_eq!(s.step(T0 + ms(10_050), Input::Renewed { sent_at }), vec![]);
    assert_eq!(s.next_deadline(), Some(sent_at + ms(10_000)));
    // The deadline moved with the confirmed renewal: still a full timeout.
    assert_eq!(
        hold_tick(&mut s, T0 + ms(20_000)),
        vec![Action::SendRenewal {
            timeout: ms(10_000)
        }]
    );
}

#[test]
fn a_hold_releases_and_exits_0_at_max() {
    let release_at = T0 + ms(15_000);
    let mut s = holder(Some(release_at));
    hold_tick(&mut s, T0 + ms(10_000));
    s.step(
        T0 + ms(10_001),
        Input::Renewed {
            sent_at: T0 + ms(10_000),
        },
    );
    assert_eq!(s.next_deadline(), Some(release_at));
    assert_eq!(hold_tick(&mut s, release_at - NS), vec![]);
    assert_eq!(
        hold_tick(&mut s, release_at),
        vec![Action::Release, Action::Exit(exit::SUCCESS)]
    );
    assert_eq!(s.next_deadline(), None);
    assert_eq!(hold_tick(&mut s, release_at + ms(1)), vec![]);
    // Woken only after the lease may have expired, it still releases.
    let mut s = holder(Some(T0 + ms(5_000)));
    assert_eq!(
        hold_tick(&mut s, T0 + ms(40_000)),
        vec![Action::Release, Action::Exit(exit::SUCCESS)]
    );
}

#[test]
fn a_hold_that_is_not_owner_exits_0_without_releasing() {
    let mut s = holder(None);
    hold_tick(&mut s, T0 + ms(10_000));
    assert_eq!(
        s.step(T0 + ms(10_002), Input::NotOwner),
        vec![Action::Exit(exit::SUCCESS)]
    );
    assert_eq!(s.next_deadline(), None);
    assert_eq!(hold_tick(&mut s, T0 + ms(20_000)), vec![]);
}

#[test]
fn a_hold_with_no_renewal_confirmed_exits_124_at_ttl_minus_margin_without_releasing() {
    let mut s = holder(None);
    let deadline = T0 + ms(29_695);
    let mut now;
    let mut sent = Vec::new();
    let exit = loop {
        now = s
            .next_deadline()
            .expect("a hold always has something to wait for");
        let actions = hold_tick(&mut s, now);
        match actions.as_slice() {
            [Action::SendRenewal { timeout }] => {
                sent.push(now);
                assert!(
                    now + *timeout <= deadline,
                    "a reply after the deadline is useless"
                );
                // Redis refuses the connection, 100ms later.
                now += ms(100);
                assert_eq!(s.step(now, Input::Unconfirmed), vec![]);
            }
            [] => {}
            other => break other.to_vec(),
        }
    };
    assert_eq!(exit, vec![Action::Exit(exit::LEASE_LOST)]);
    assert_eq!(now, deadline);
    assert!(sent.len() > 2, "failures are retried: {sent:?}");
    assert!(sent.iter().all(|&t| t < deadline));
    // The first retry comes renew_every/4 (at most 1s) after the failure.
    assert_eq!(sent[1], T0 + ms(11_100));
}

#[test]
fn a_hold_releases_on_int_term_and_hup_and_ignores_other_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let mut s = holder(None);
        let tty = TtyFacts::default();
        assert_eq!(
            s.step(T0 + ms(1), Input::Signal { sig, tty }),
            vec![Action::Release, Action::Exit(exit::SUCCESS)]
        );
    }
    let mut s = holder(None);
    for sig in [libc::SIGUSR1, libc::SIGTSTP, libc::SIGCONT, libc::SIGCHLD] {
        let tty = TtyFacts::default();
        assert_eq!(s.step(T0 + ms(1), Input::Signal { sig, tty }), vec![]);
    }
    assert_eq!(s.next_deadline(), Some(T0 + ms(10_000)));
}

#[test]
fn a_partition_that_heals_1ms_before_the_deadline_keeps_cmd() {
    let mut s = machine(options());
    let sent_at = soft() - ms(2);
    assert_eq!(
        s.step(soft() - ms(1), Input::Renewed { sent_at }),
        vec![Action::ExtendGuardian(sent_at + timings().hard_after())]
    );
    assert_eq!(tick(&mut s, soft()), vec![]);
    let new_soft = sent_at + timings().soft_after();
    assert_eq!(s.next_deadline(), Some(new_soft));
    assert_eq!(tick(&mut s, new_soft - NS), vec![]);
    // An older confirmation arriving late changes nothing.
    assert_eq!(
        s.step(new_soft - NS, Input::Renewed { sent_at: T0 }),
        vec![]
    );
}

#[test]
fn a_cont_after_the_deadline_kills_without_running() {
    let mut s = machine(options());
    s.step(
        T0 + ms(1),
        Input::Stopped {
            sig: libc::SIGTSTP,
            tty: STOP_TTY,
        },
    );
    assert_eq!(
        tick(&mut s, T0 + ms(1)),
        vec![Action::StopSelf { whole_group: false }]
    );
    // distlock itself was stopped past the deadline: no tick ran.
    let acts = s.step(
        soft() + Duration::from_secs(1),
        Input::Signal {
            sig: libc::SIGCONT,
            tty: TtyFacts {
                present: true,
                we_have_it: true,
                cmd_has_it: false,
            },
        },
    );
    assert_eq!(
        acts,
        vec![
            Action::Lost(Loss::Unconfirmed),
            Action::SignalGroup(libc::SIGKILL)
        ],
        "no SIGCONT, no renewal, no terminal for a CMD whose lease may be gone"
    );
}

#[test]
fn a_cont_before_the_deadline_renews_hands_over_the_terminal_and_continues() {
    let mut s = machine(options());
    s.step(
        T0 + ms(1),
        Input::Stopped {
            sig: libc::SIGTSTP,
            tty: STOP_TTY,
        },
    );
    let tty = TtyFacts {
        present: true,
        we_have_it: true,
        cmd_has_it: false,
    };
    let acts = s.step(
        soft() - ms(1),
        Input::Signal {
            sig: libc::SIGCONT,
            tty,
        },
    );
    assert_eq!(
        acts,
        vec![
            Action::RenewNow,
            Action::GiveTerminalToCmd,
            Action::SignalGroup(libc::SIGCONT)
        ]
    );
    assert_eq!(tick(&mut s, soft() - ms(1)), vec![], "no longer stopped");
}

#[test]
fn the_at_risk_signal_goes_to_cmd_half_a_period_late_once() {
    let mut s = machine(Options {
        at_risk_signal: Some(libc::SIGUSR1),
        ..options()
    });
    let late = T0 + Duration::from_secs(15);
    assert_eq!(s.next_deadline(), Some(late));
    assert_eq!(tick(&mut s, late - NS), vec![]);
    assert_eq!(tick(&mut s, late), vec![Action::SignalCmd(libc::SIGUSR1)]);
    assert_eq!(s.next_deadline(), Some(soft()));
    assert_eq!(s.step(late, Input::Unconfirmed), vec![]);
}

#[test]
fn a_failed_renewal_sends_the_at_risk_signal_at_once() {
    let mut s = machine(Options {
        at_risk_signal: Some(libc::SIGUSR1),
        ..options()
    });
    assert_eq!(
        s.step(T0 + ms(10_001), Input::Unconfirmed),
        vec![Action::SignalCmd(libc::SIGUSR1)]
    );
    assert_eq!(tick(&mut s, T0 + Duration::from_secs(15)), vec![]);
}

#[test]
fn max_hold_stops_cmd_with_the_grace_bounded_by_the_lease() {
    let mut s = machine(Options {
        max_hold: Some(Duration::from_secs(12)),
        ..options()
    });
    let at = T0 + Duration::from_secs(12);
    assert_eq!(s.next_deadline(), Some(at));
    assert_eq!(tick(&mut s, at - NS), vec![]);
    assert_eq!(
        tick(&mut s, at),
        vec![
            Action::Lost(Loss::MaxHold),
            Action::SignalGroup(libc::SIGTERM),
            Action::SignalGroup(libc::SIGCONT),
        ]
    );
    assert_eq!(s.next_deadline(), Some(at + timings().kill_grace));

    // Late in the lease, SIGKILL still comes before the hard deadline.
    let mut s = machine(Options {
        max_hold: Some(ms(24_500)),
        ..options()
    });
    tick(&mut s, T0 + ms(24_500));
    assert_eq!(s.next_deadline(), Some(T0 + ms(29_500)));
    assert!(T0 + ms(29_500) < hard());
    // A max-hold beyond the clock's range is none.
    let s = machine(Options {
        max_hold: Some(Duration::MAX),
        ..options()
    });
    assert_eq!(s.next_deadline(), Some(soft()));
}

#[test]
fn a_stopped_cmd_gets_sigkill_at_once() {
    let mut s = machine(options());
    s.step(
        T0 + ms(5),
        Input::Stopped {
            sig: libc::SIGSTOP,
            tty: STOP_TTY,
        },
    );
    assert_eq!(
        s.step(T0 + ms(6), Input::NotOwner),
        vec![
            Action::Lost(Loss::NotOwner),
            Action::SignalGroup(libc::SIGKILL)
        ]
    );
    assert_eq!(s.next_deadline(), None);
    assert_eq!(tick(&mut s, T0 + ms(7)), vec![], "no stop while killing");
}

#[test]
fn not_owner_stops_cmd_with_the_grace() {
    let mut s = machine(options());
    let at = T0 + ms(10_010);
    assert_eq!(
        s.step(at, Input::NotOwner),
        vec![
            Action::Lost(Loss::NotOwner),
            Action::SignalGroup(libc::SIGTERM),
            Action::SignalGroup(libc::SIGCONT),
        ]
    );
    assert_eq!(s.next_deadline(), Some(at + timings().kill_grace));
    // A confirmation after the loss does not reprieve CMD or the guardian.
    assert_eq!(s.step(at, Input::Renewed { sent_at: at }), vec![]);
}

#[test]
fn after_cmd_exits_its_group_is_emptied_then_released() {
    let mut s = machine(options());
    let at = T0 + Duration::from_secs(3);
    let tty = TtyFacts {
        present: true,
        we_have_it: false,
        cmd_has_it: true,
    };
    assert_eq!(
        s.step(
            at,
            Input::Exited {
                status: exit_status(0),
                tty
            }
        ),
        vec![Action::TakeTerminalBack]
    );
    // Something CMD started is still in the group.
    assert_eq!(
        tick(&mut s, at),
        vec![
            Action::SignalGroup(libc::SIGTERM),
            Action::SignalGroup(libc::SIGCONT)
        ]
    );
    assert_eq!(s.next_deadline(), Some(at + ms(10)), "polls the group");
    let sigkill_at = at + timings().kill_grace;
    assert_eq!(
        tick(&mut s, sigkill_at),
        vec![Action::SignalGroup(libc::SIGKILL)]
    );
    let done = s.step(
        sigkill_at + ms(1),
        Input::Tick {
            tty: TtyFacts::default(),
            group_empty: true,
        },
    );
    let outcome = Outcome {
        lost: None,
        status: Some(exit_status(0)),
    };
    assert_eq!(done, vec![Action::Finish(outcome)]);
    assert_eq!(s.next_deadline(), None);
    assert_eq!(tick(&mut s, sigkill_at + ms(2)), vec![], "finished once");
    // A stop request while the group is emptied is ignored.
    let mut s = machine(options());
    s.step(
        at,
        Input::Exited {
            status: exit_status(3),
            tty: STOP_TTY,
        },
    );
    let stop = Input::Signal {
        sig: libc::SIGTSTP,
        tty: STOP_TTY,
    };
    assert_eq!(s.step(at, stop), vec![]);
}

#[test]
fn an_exit_with_an_empty_group_finishes_at_once_with_cmds_status() {
    let mut s = machine(options());
    let at = T0 + ms(50);
    s.step(
        at,
        Input::Exited {
            status: exit_status(7),
            tty: STOP_TTY,
        },
    );
    let acts = s.step(
        at,
        Input::Tick {
            tty: TtyFacts::default(),
            group_empty: true,
        },
    );
    let [Action::Finish(o)] = acts[..] else {
        panic!("{acts:?}")
    };
    assert_eq!(o.exit_code(), 7);
    assert!(!o.marks_done());
}

#[test]
fn the_done_mark_is_written_only_for_a_cmd_that_exited_0_with_the_lease_held() {
    let ok = Some(exit_status(0));
    let held = Outcome {
        lost: None,
        status: ok,
    };
    assert!(held.marks_done());
    assert_eq!(held.exit_code(), 0);
    for lost in [Loss::NotOwner, Loss::Unconfirmed, Loss::MaxHold] {
        let o = Outcome {
            lost: Some(lost),
            status: ok,
        };
        assert!(!o.marks_done(), "{lost:?}");
        assert_eq!(o.exit_code(), exit::LEASE_LOST);
    }
    let failed = Outcome {
        lost: None,
        status: Some(exit_status(1)),
    };
    assert!(!failed.marks_done());
    let killed = Outcome {
        lost: None,
        status: Some(ExitStatus::from_raw(libc::SIGTERM)),
    };
    assert!(!killed.marks_done());
    assert_eq!(killed.exit_code(), 143);
    let unknown = Outcome {
        lost: None,
        status: None,
    };
    assert!(!unknown.marks_done());
    assert_eq!(unknown.exit_code(), exit::FAILURE);
}

#[test]
fn a_stop_sent_to_distlock_stops_the_group_then_distlock() {
    let mut s = machine(options());
    let stop = Input::Signal {
        sig: libc::SIGTSTP,
        tty: STOP_TTY,
    };
    assert_eq!(
        s.step(T0 + ms(1), stop),
        vec![Action::SignalGroup(libc::SIGSTOP)]
    );
    assert_eq!(tick(&mut s, T0 + ms(1)), vec![], "not before CMD stopped");
    let cmd_fg = TtyFacts {
        present: true,
        we_have_it: false,
        cmd_has_it: true,
    };
    s.step(
        T0 + ms(2),
        Input::Stopped {
            sig: libc::SIGSTOP,
            tty: cmd_fg,
        },
    );
    let acts = s.step(
        T0 + ms(2),
        Input::Tick {
            tty: cmd_fg,
            group_empty: false,
        },
    );
    assert_eq!(acts, vec![Action::StopSelf { whole_group: true }]);
    // Continued by someone else: no stop of our own any more.
    s.step(T0 + ms(3), Input::Continued);
    assert_eq!(tick(&mut s, T0 + ms(3)), vec![]);
    // While CMD is being killed, a stop request is ignored.
    tick(&mut s, soft());
    assert_eq!(s.step(soft(), stop), vec![]);
}

const NO_TTY: TtyFacts = TtyFacts {
    present: false,
    we_have_it: false,
    cmd_has_it: false,
};

fn tick_without_tty(s: &mut Supervisor, at: Duration) -> Vec<Action> {
    s.step(
        at,
        Input::Tick {
            tty: NO_TTY,
            group_empty: false,
        },
    )
}

#[test]
fn without_a_terminal_a_cmd_stopped_by_someone_else_leaves_distlock_supervising() {
    let mut s = machine(options());
    let stopped = Input::Stopped {
        sig: libc::SIGSTOP,
        tty: NO_TTY,
    };
    assert_eq!(s.step(T0 + ms(1), stopped), vec![]);
    assert_eq!(
        tick_without_tty(&mut s, T0 + ms(1)),
        vec![],
        "no stop of its own"
    );
    // It keeps renewing: confirmations still move the guardian's deadline.
    let sent_at = T0 + ms(10_000);
    assert_eq!(
        s.step(sent_at + ms(1), Input::Renewed { sent_at }),
        vec![Action::ExtendGuardian(sent_at + timings().hard_after())]
    );
    assert_eq!(tick_without_tty(&mut s, sent_at + ms(1)), vec![]);
    // A SIGCONT to distlock renews and continues CMD.
    let cont = Input::Signal {
        sig: libc::SIGCONT,
        tty: NO_TTY,
    };
    assert_eq!(
        s.step(sent_at + ms(2), cont),
        vec![Action::RenewNow, Action::SignalGroup(libc::SIGCONT)]
    );
    // Deadlines still hold for a stopped CMD: SIGKILL at once.
    s.step(sent_at + ms(3), stopped);
    let soft = sent_at + timings().soft_after();
    assert_eq!(tick_without_tty(&mut s, soft - NS), vec![]);
    assert_eq!(
        tick_without_tty(&mut s, soft),
        vec![
            Action::Lost(Loss::Unconfirmed),
            Action::SignalGroup(libc::SIGKILL)
        ]
    );
}

#[test]
fn without_a_terminal_a_stop_sent_to_distlock_still_stops_the_group_then_distlock() {
    let mut s = machine(options());
    let stop = Input::Signal {
        sig: libc::SIGTSTP,
        tty: NO_TTY,
    };
    assert_eq!(
        s.step(T0 + ms(1), stop),
        vec![Action::SignalGroup(libc::SIGSTOP)]
    );
    let stopped = Input::Stopped {
        sig: libc::SIGSTOP,
        tty: NO_TTY,
    };
    s.step(T0 + ms(2), stopped);
    assert_eq!(
        tick_without_tty(&mut s, T0 + ms(2)),
        vec![Action::StopSelf { whole_group: false }]
    );
    // Continued (by SIGCONT to distlock): a later stop by someone else is
    // not a request of distlock's.
    let cont = Input::Signal {
        sig: libc::SIGCONT,
        tty: NO_TTY,
    };
    s.step(T0 + ms(3), cont);
    s.step(T0 + ms(4), stopped);
    assert_eq!(tick_without_tty(&mut s, T0 + ms(4)), vec![]);
    // Nor after CMD alone was continued.
    s.step(T0 + ms(5), Input::Continued);
    s.step(T0 + ms(5), stop);
    s.step(T0 + ms(6), Input::Continued);
    s.step(T0 + ms(7), stopped);
    assert_eq!(tick_without_tty(&mut s, T0 + ms(7)), vec![]);
}

#[test]
fn a_guardian_that_died_is_replaced_with_the_deadline_it_held() {
    let mut s = machine(options());
    assert_eq!(
        s.step(T0 + ms(1), Input::GuardianGone),
        vec![Action::RestartGuardian(hard())]
    );
    let sent_at = T0 + ms(10_000);
    s.step(sent_at + ms(1), Input::Renewed { sent_at });
    let later = sent_at + timings().hard_after();
    assert_eq!(
        s.step(sent_at + ms(2), Input::GuardianGone),
        vec![Action::RestartGuardian(later)]
    );
    // The lease is gone: a new guardian keeps the deadline the last one
    // had, not one from a confirmation that came after the loss.
    s.step(sent_at + ms(3), Input::NotOwner);
    s.step(
        sent_at + ms(4),
        Input::Renewed {
            sent_at: sent_at + ms(3),
        },
    );
    assert_eq!(
        s.step(sent_at + ms(5), Input::GuardianGone),
        vec![Action::RestartGuardian(later)]
    );
}

#[test]
fn a_guardian_gone_past_its_deadline_is_not_replaced_the_group_is_sigkilled() {
    // distlock was stopped past the deadline; the guardian did its job and
    // exited. On waking, distlock finishes it rather than forking one.
    let mut s = machine(options());
    assert_eq!(
        s.step(hard(), Input::GuardianGone),
        vec![
            Action::Lost(Loss::Unconfirmed),
            Action::SignalGroup(libc::SIGTERM),
            Action::SignalGroup(libc::SIGCONT),
            Action::SignalGroup(libc::SIGKILL),
        ]
    );
    assert_eq!(s.step(hard() + ms(1), Input::GuardianGone), vec![]);
}

#[test]
fn no_new_guardian_stops_cmd_within_the_grace_and_exits_125() {
    let mut s = machine(options());
    let now = T0 + ms(1);
    assert_eq!(
        s.step(now, Input::GuardianGone),
        vec![Action::RestartGuardian(hard())]
    );
    assert_eq!(
        s.step(now, Input::GuardianFailed),
        vec![
            Action::Lost(Loss::NoGuardian),
            Action::SignalGroup(libc::SIGTERM),
            Action::SignalGroup(libc::SIGCONT),
        ]
    );
    assert_eq!(s.next_deadline(), Some(now + timings().kill_grace));
    // No more attempts.
    assert_eq!(s.step(now + ms(1), Input::GuardianGone), vec![]);
    assert_eq!(
        tick(&mut s, now + timings().kill_grace),
        vec![Action::SignalGroup(libc::SIGKILL)]
    );
    s.step(
        now + timings().kill_grace,
        Input::Exited {
            status: ExitStatus::from_raw(libc::SIGKILL),
            tty: TtyFacts::default(),
        },
    );
    let acts = s.step(
        now + timings().kill_grace,
        Input::Tick {
            tty: TtyFacts::default(),
            group_empty: true,
        },
    );
    let [Action::Finish(outcome)] = acts[..] else {
        panic!("{acts:?}");
    };
    assert_eq!(outcome.exit_code(), exit::FAILURE);
    assert!(!outcome.marks_done());
}

#[test]
fn a_background_read_after_fg_hands_over_the_terminal_instead_of_stopping() {
    let mut s = machine(options());
    let ours = TtyFacts {
        present: true,
        we_have_it: true,
        cmd_has_it: false,
    };
    assert_eq!(
        s.step(
            T0 + ms(1),
            Input::Stopped {
                sig: libc::SIGTTIN,
                tty: ours
            }
        ),
        vec![
            Action::GiveTerminalToCmd,
            Action::SignalGroup(libc::SIGCONT)
        ]
    );
    assert_eq!(tick(&mut s, T0 + ms(1)), vec![]);
    // Without the terminal it is an ordinary stop.
    let acts = s.step(
        T0 + ms(2),
        Input::Stopped {
            sig: libc::SIGTTIN,
            tty: STOP_TTY,
        },
    );
    assert_eq!(acts, vec![]);
    assert_eq!(
        tick(&mut s, T0 + ms(2)),
        vec![Action::StopSelf { whole_group: false }]
    );
}

#[test]
fn other_signals_go_to_cmds_group_and_sigchld_to_nobody() {
    let mut s = machine(options());
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1] {
        let acts = s.step(T0, Input::Signal { sig, tty: STOP_TTY });
        assert_eq!(acts, vec![Action::SignalGroup(sig)]);
    }
    let chld = Input::Signal {
        sig: libc::SIGCHLD,
        tty: STOP_TTY,
    };
    assert_eq!(s.step(T0, chld), vec![]);
}

// Property: whatever happens, in whatever order and at whatever times, a
// driver that wakes at `next_deadline` never lets CMD's group live past
// the last confirmed send + ttl − margin, and never sends SIGCONT after
// the kill deadline before the kill signal.

/// The kill signal of the property test: one the inputs never forward, so
/// the kill signal's emission is told apart from a forwarded one.
const KILL_SIGNAL: i32 = libc::SIGALRM;

const SIGNALS: [i32; 10] = [
    libc::SIGCHLD,
    libc::SIGCONT,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGWINCH,
];

const STOP_SIGNALS: [i32; 4] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGSTOP];

#[derive(Debug, Clone)]
enum Op {
    /// Let this many ms pass (the driver wakes at each deadline).
    Wait(u64),
    /// A renewal sent this many ms ago is confirmed.
    Renewed(u64),
    NotOwner,
    Unconfirmed,
    Signal(usize, bool, bool),
    Exited(i32),
    Stopped(usize, bool, bool),
    Continued,
    /// Everything left in CMD's group has died.
    GroupGone,
    /// The guardian died; a new one starts (or, if false, cannot).
    GuardianGone(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3_000).prop_map(Op::Wait),
        2 => (0u64..3_000).prop_map(Op::Renewed),
        1 => Just(Op::NotOwner),
        1 => Just(Op::Unconfirmed),
        2 => (0..SIGNALS.len(), any::<bool>(), any::<bool>()).prop_map(|(i, a, b)| Op::Signal(i, a, b)),
        1 => (0i32..3).prop_map(Op::Exited),
        1 => (0..STOP_SIGNALS.len(), any::<bool>(), any::<bool>()).prop_map(|(i, a, b)| Op::Stopped(i, a, b)),
        1 => Just(Op::Continued),
        1 => Just(Op::GroupGone),
        1 => any::<bool>().prop_map(Op::GuardianGone),
    ]
}

/// The world around the machine, as the property sees it.
struct World {
    s: Supervisor,
    t: Timings,
    now: Duration,
    /// The latest send time of any confirmed request fed in.
    last_ok: Duration,
    exited: bool,
    group_empty: bool,
    kill_sent: bool,
    sigkill_sent: bool,
    finished: bool,
    /// distlock has a controlling terminal.
    tty: bool,
    /// A stop was sent to distlock since CMD or distlock was last continued.
    stop_asked: bool,
    /// Whether a new guardian can be started.
    guardian_starts: bool,
}

impl World {
    fn feed(&mut self, input: Input) -> Result<(), TestCaseError> {
        match input {
            Input::Renewed { sent_at } => self.last_ok = self.last_ok.max(sent_at),
            Input::Signal { sig, .. } if is_stop_request(sig) => self.stop_asked = true,
            Input::Signal { sig: SIGCONT, .. } | Input::Continued => self.stop_asked = false,
            _ => {}
        }
        for a in self.s.step(self.now, input) {
            match a {
                Action::StopSelf { .. } => prop_assert!(
                    self.tty || self.stop_asked,
                    "without a terminal, distlock stopped although nobody asked it to"
                ),
                Action::SignalGroup(libc::SIGKILL) => {
                    self.sigkill_sent = true;
                    self.kill_sent = true;
                }
                Action::SignalGroup(KILL_SIGNAL) => self.kill_sent = true,
                Action::RestartGuardian(d) => {
                    prop_assert!(self.now < d, "a guardian started past its deadline");
                    prop_assert!(
                        d <= self.last_ok + self.t.hard_after(),
                        "a guardian that would let CMD outlive the lease"
                    );
                    if !self.guardian_starts {
                        self.feed(Input::GuardianFailed)?;
                    }
                }
                Action::SignalGroup(libc::SIGCONT) => prop_assert!(
                    self.kill_sent || self.now < self.last_ok + self.t.soft_after(),
                    "SIGCONT at {:?} past the kill deadline before the kill signal",
                    self.now
                ),
                Action::Finish(o) => {
                    prop_assert!(self.exited && self.group_empty);
                    prop_assert!(!self.finished, "finished twice");
                    prop_assert_eq!(o.marks_done(), o.lost.is_none() && o.exit_code() == 0);
                    self.finished = true;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<(), TestCaseError> {
        self.feed(Input::Tick {
            tty: TtyFacts {
                present: self.tty,
                ..TtyFacts::default()
            },
            group_empty: self.group_empty,
        })
    }

    /// Lets time pass to `to`, waking at every deadline on the way, and
    /// checks at the hard deadline itself (if it is on the way) and at
    /// `to` that nothing of CMD is left alive from the hard deadline on.
    fn advance(&mut self, to: Duration) -> Result<(), TestCaseError> {
        let hard = self.last_ok + self.t.hard_after();
        if self.now < hard && hard < to {
            self.advance_to(hard)?;
        }
        self.advance_to(to)
    }

    fn advance_to(&mut self, to: Duration) -> Result<(), TestCaseError> {
        let mut wakes = 0;
        while let Some(d) = self.s.next_deadline().filter(|&d| d <= to) {
            self.now = self.now.max(d);
            self.tick()?;
            wakes += 1;
            prop_assert!(wakes < 100_000, "the deadlines make no progress");
        }
        self.now = self.now.max(to);
        if self.now >= self.last_ok + self.t.hard_after() {
            prop_assert!(
                self.sigkill_sent || self.finished,
                "CMD's group may be alive at {:?}, past {:?}",
                self.now,
                self.last_ok + self.t.hard_after()
            );
        }
        Ok(())
    }
}

proptest! {
    #[test]
    fn cmd_never_outlives_the_last_confirmed_send_plus_ttl_minus_margin(
        ttl_ms in 100u64..5_000,
        at_risk in any::<bool>(),
        max_hold_ms in proptest::option::of(0u64..10_000),
        tty in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..40),
    ) {
        let t = Timings::new(ms(ttl_ms), None, None).unwrap();
        let options = Options {
            kill_signal: KILL_SIGNAL,
            at_risk_signal: at_risk.then_some(libc::SIGUSR2),
            max_hold: max_hold_ms.map(ms),
        };
        let mut w = World {
            s: Supervisor::new(t, options, T0),
            t,
            now: T0,
            last_ok: T0,
            exited: false,
            group_empty: false,
            kill_sent: false,
            sigkill_sent: false,
            finished: false,
            tty,
            stop_asked: false,
            guardian_starts: true,
        };
        w.tick()?;
        for op in ops {
            let input = match op {
                Op::Wait(d) => {
                    w.advance(w.now + ms(d))?;
                    continue;
                }
                Op::Renewed(ago) => Input::Renewed {
                    sent_at: w.now.saturating_sub(ms(ago)).max(T0),
                },
                Op::NotOwner => Input::NotOwner,
                Op::Unconfirmed => Input::Unconfirmed,
                Op::Signal(i, we, cmd) => Input::Signal {
                    sig: SIGNALS[i],
                    tty: TtyFacts { present: w.tty, we_have_it: we, cmd_has_it: cmd },
                },
                Op::Exited(_) | Op::Stopped(..) | Op::Continued if w.exited => continue,
                Op::Exited(code) => {
                    w.exited = true;
                    Input::Exited { status: exit_status(code), tty: TtyFacts::default() }
                }
                Op::Stopped(i, we, cmd) => Input::Stopped {
                    sig: STOP_SIGNALS[i],
                    tty: TtyFacts { present: w.tty, we_have_it: we, cmd_has_it: cmd },
                },
                Op::Continued => Input::Continued,
                Op::GroupGone => {
                    w.group_empty = w.exited;
                    continue;
                }
                Op::GuardianGone(starts) => {
                    w.guardian_starts = starts;
                    Input::GuardianGone
                }
            };
            w.feed(input)?;
            // The driver ticks after whatever woke it.
            w.tick()?;
        }
        let end = w.now.max(w.last_ok) + t.ttl * 2;
        w.advance(end)?;
    }
}

#[derive(Debug, Clone)]
enum HoldOp {
    /// Let this many ms pass (the driver wakes at each deadline).
    Wait(u64),
    /// The renewal in flight, if any, is answered after this many ms:
    /// 0 confirmed, 1 not owner, 2 failed.
    Reply(u64, u8),
    Signal(usize),
}

fn hold_op() -> impl Strategy<Value = HoldOp> {
    prop_oneof![
        3 => (0u64..3_000).prop_map(HoldOp::Wait),
        4 => (0u64..3_000, prop_oneof![6 => Just(0u8), 1 => Just(1u8), 6 => Just(2u8)])
            .prop_map(|(d, r)| HoldOp::Reply(d, r)),
        1 => (0..SIGNALS.len()).prop_map(HoldOp::Signal),
    ]
}

/// `hold`'s renewer and its Redis, as the property sees them.
struct HoldWorld {
    s: Supervisor,
    t: Timings,
    now: Duration,
    last_ok: Duration,
    /// When the renewal in flight was sent, and its timeout.
    in_flight: Option<(Duration, Duration)>,
    exited: bool,
}

impl HoldWorld {
    fn deadline(&self) -> Duration {
        self.last_ok + self.t.hard_after()
    }

    fn feed(&mut self, input: Input) -> Result<(), TestCaseError> {
        let actions = self.s.step(self.now, input);
        prop_assert!(!self.exited || actions.is_empty(), "acted after exiting");
        let mut releasing = false;
        for a in actions {
            prop_assert!(!releasing || a == Action::Exit(exit::SUCCESS));
            match a {
                Action::SendRenewal { timeout } => {
                    prop_assert!(self.in_flight.is_none(), "two renewals at once");
                    prop_assert!(self.now + timeout <= self.deadline());
                    prop_assert!(!timeout.is_zero());
                    self.in_flight = Some((self.now, timeout));
                }
                Action::Release => releasing = true,
                Action::Exit(code) => {
                    if code == exit::LEASE_LOST {
                        prop_assert!(self.now >= self.deadline());
                    }
                    self.exited = true;
                }
                other => prop_assert!(false, "{other:?} without CMD"),
            }
        }
        Ok(())
    }

    fn tick(&mut self) -> Result<(), TestCaseError> {
        self.feed(Input::Tick {
            tty: TtyFacts::default(),
            group_empty: true,
        })
    }

    /// Lets time pass to `to`, waking at every deadline on the way; from
    /// the moment the lease may expire unrenewed, the holder has exited.
    fn advance(&mut self, to: Duration) -> Result<(), TestCaseError> {
        let mut wakes = 0;
        while let Some(d) = self.s.next_deadline().filter(|&d| d <= to) {
            self.now = self.now.max(d);
            self.tick()?;
            wakes += 1;
            prop_assert!(wakes < 100_000, "the deadlines make no progress");
        }
        self.now = self.now.max(to);
        prop_assert!(
            self.exited || self.now < self.deadline(),
            "still holding at {:?}, past {:?}",
            self.now,
            self.deadline()
        );
        Ok(())
    }
}

proptest! {
    #[test]
    fn a_hold_exits_by_the_last_confirmed_send_plus_ttl_minus_margin(
        ttl_ms in 1u64..5_000,
        max_ms in proptest::option::of(0u64..10_000),
        ops in proptest::collection::vec(hold_op(), 0..40),
    ) {
        let t = Timings::for_holder(ms(ttl_ms));
        let mut w = HoldWorld {
            s: Supervisor::without_cmd(t, T0, max_ms.map(|m| T0 + ms(m))),
            t,
            now: T0,
            last_ok: T0,
            in_flight: None,
            exited: false,
        };
        w.tick()?;
        for op in ops {
            let input = match op {
                HoldOp::Wait(d) => {
                    w.advance(w.now + ms(d))?;
                    continue;
                }
                HoldOp::Reply(d, kind) => {
                    let Some((sent_at, timeout)) = w.in_flight.take() else {
                        continue;
                    };
                    // The driver is blocked in the request meanwhile, at
                    // most for its timeout.
                    w.now += ms(d).min(timeout);
                    match kind {
                        0 => {
                            w.last_ok = w.last_ok.max(sent_at);
                            Input::Renewed { sent_at }
                        }
                        1 => Input::NotOwner,
                        _ => Input::Unconfirmed,
                    }
                }
                HoldOp::Signal(i) => Input::Signal {
                    sig: SIGNALS[i],
                    tty: TtyFacts::default(),
                },
            };
            w.feed(input)?;
            w.tick()?;
        }
        let end = w.now.max(w.last_ok) + t.ttl * 2;
        if w.in_flight.take().is_some() {
            w.feed(Input::Unconfirmed)?;
        }
        w.advance(end)?;
    }
}
