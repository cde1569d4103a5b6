//! The subscriber: a thread that blocks on the store's [`Subscription`]
//! and writes a byte to a pipe when the main thread must make an attempt
//! (a wake-up, our turn come, or the subscription lost), so the main
//! thread can sleep in one poll on signals and wake-ups. A subscription
//! reads with a timeout but exposes no socket to poll, hence the thread.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::pipe::{drain_pipe, pipe, poke};
use super::turn::Turn;
use crate::clock::now;
use crate::store::Subscription;

pub(super) struct Subscriber {
    stop: Arc<AtomicBool>,
    dead: Arc<AtomicBool>,
    turn: Arc<Mutex<Turn>>,
    wake: OwnedFd,
}

impl Subscriber {
    /// How often the thread looks up from the socket to see whether it
    /// should stop; costs no request to the store.
    const TICK: Duration = Duration::from_millis(200);

    pub(super) fn start(mut sub: Subscription) -> std::io::Result<Subscriber> {
        let (wake, notify) = pipe()?;
        let stop = Arc::new(AtomicBool::new(false));
        let dead = Arc::new(AtomicBool::new(false));
        let turn = Arc::new(Mutex::new(Turn::default()));
        let (stop2, dead2, turn2) = (stop.clone(), dead.clone(), turn.clone());
        std::thread::Builder::new()
            .name("subscriber".into())
            .spawn(move || {
                let turn = || turn2.lock().unwrap_or_else(PoisonError::into_inner);
                while !stop2.load(Ordering::Relaxed) {
                    let timeout = turn().read_timeout(now(), Self::TICK);
                    let Ok(notice) = sub.next_message(timeout) else {
                        dead2.store(true, Ordering::Relaxed);
                        poke(&notify);
                        break;
                    };
                    if notice.is_some_and(|n| turn().take(n, now())) || turn().has_come(now()) {
                        poke(&notify);
                    }
                }
            })?;
        Ok(Subscriber {
            stop,
            dead,
            turn,
            wake,
        })
    }

    pub(super) fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    pub(super) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    /// Forgets the turn we were promised: called before each attempt,
    /// whose reply (or a notice it causes) tells us again.
    pub(super) fn forget_turn(&self) {
        *self.turn.lock().unwrap_or_else(PoisonError::into_inner) = Turn::default();
    }

    /// Empties the wake-up pipe before the attempt it asked for.
    pub(super) fn drain(&self) {
        drain_pipe(&self.wake);
    }

    /// Lets the thread finish on its own (within one tick); nothing waits
    /// for it, so CMD starts at once.
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
