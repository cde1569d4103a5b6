//! `renew` and `release`: compare-and-extend and compare-and-delete for
//! a lease a script holds.

use anyhow::Result;

use super::inspect::DoneView;
use super::output::print_lines;
use super::{see_through, Global, IO_TIMEOUT};
use crate::config::{fmt_duration, ReleaseConfig, ReleaseHow, RenewConfig};
use crate::exit;
use crate::store::{LockKeys, Release};

/// `distlock renew`: compare-and-extend.
pub fn renew(g: &Global, args: RenewConfig) -> Result<u8> {
    let owner = args.owner;
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let mut store = g.store(IO_TIMEOUT);
    if store.renew(&keys, &owner, args.ttl.as_millis() as u64)? {
        return Ok(0);
    }
    g.say(format_args!("{} is not held by {owner}", keys.name));
    Ok(exit::NOT_OWNER)
}

/// `distlock release`: compare-and-delete, or `--force`.
pub fn release(g: &Global, args: ReleaseConfig) -> Result<u8> {
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let mut store = g.store(IO_TIMEOUT);
    let owner = match args.how {
        ReleaseHow::ForgetDone => {
            // The result of the command, either way: on stdout, exit 0.
            let line = match store.forget_done(&keys)? {
                Some(mark) => format!(
                    "forgot the done mark of {}: {}",
                    keys.name,
                    DoneView(&mark).line()
                ),
                None => format!("{} had no done mark", keys.name),
            };
            print_lines([line])?;
            return Ok(0);
        }
        ReleaseHow::Force => {
            // The queue first: once the lock is gone, nobody in it can
            // take it in between. A queue distlock may not clear (a role
            // without the queue's keys) must not keep the lock from being
            // forced: that is a warning, and the release goes on.
            let waiters = store.clear_queue(&keys).unwrap_or_else(|e| {
                g.say(format_args!("warning: the queue was left as it is: {e:#}"));
                Vec::new()
            });
            let mut lines = Vec::new();
            if let Some(holder) = store.force_release(&keys)? {
                lines.push(format!("released {}, held by {holder}", keys.name));
            }
            if !waiters.is_empty() {
                let n = waiters.len();
                let s = if n == 1 { "" } else { "s" };
                lines.push(format!(
                    "removed {n} waiter{s} from the queue of {}",
                    keys.name
                ));
            }
            if lines.is_empty() {
                g.say(format_args!("{} was not held", keys.name));
                return Ok(exit::NOT_OWNER);
            }
            print_lines(lines)?;
            return Ok(0);
        }
        ReleaseHow::Owner(owner) => owner,
    };
    match store.release_by_owner(&keys, &owner)? {
        Release::Released(handoff) => {
            see_through(g, &mut store, &keys, handoff, None);
            Ok(0)
        }
        Release::HeldByRun => {
            g.say(format_args!(
                "{} is held by a running `distlock run` as {owner}: only that run releases it, when its command has exited (use --force to end it early); nothing changed",
                keys.name
            ));
            Ok(exit::NOT_OWNER)
        }
        Release::Gone => {
            g.say(format_args!(
                "{} is free: the answer to this release was lost, and when sent again it found the lock held by nobody",
                keys.name
            ));
            Ok(0)
        }
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
