//! A waiter's wake-up channel: a second connection, subscribed to one
//! channel, from which messages are read one at a time with a timeout.
//! The channels and their messages are the scripts' (`scripts.rs`): a fair
//! waiter's own `P:{N}:wake:OWNER` gets `wake`, `turn MS` and `claimed`;
//! `P:{N}:released` gets `released`. The rest of distlock sees [`Notice`]s
//! and [`StoreError`]s, never a payload or a redis-rs connection.

use std::mem::ManuallyDrop;
use std::time::Duration;

use redis::{Connection, Value};

use super::error::{describe, timed_out};
use super::replies::string;
use super::Call;
use super::{LockKeys, Mode, Result, Store, StoreError, Target};
use crate::store::Notice;

/// A connection subscribed to one channel. Dropping it closes the socket
/// without an UNSUBSCRIBE round trip: the server forgets the subscription
/// with the connection.
pub struct Subscription {
    conn: Connection,
    /// For error sentences (password redacted) and TLS/ACL wording.
    target: Target,
    /// How long a message may take to arrive whole, once it starts.
    timeout: Duration,
}

impl Store {
    /// A second connection subscribed to the channel of `owner` (`Fair`)
    /// or of every release, confirmed by the server before this returns,
    /// so no message published after it is missed. Connecting and
    /// subscribing is one call: within the timeout, and ended by the
    /// signals of `set_interrupt_signals`.
    pub fn subscribe(&mut self, keys: &LockKeys, owner: &str, mode: Mode) -> Result<Subscription> {
        let channel = match mode {
            Mode::Fair => format!("{}{owner}", keys.wake_prefix),
            Mode::Once | Mode::Any => keys.released.clone(),
        };
        let call = Call::start(self.timeout, self.interrupt_on);
        self.subscribe_within(&channel, &call).map_err(|e| {
            if call.ran_out(&e) {
                StoreError::Timeout(super::Failure {
                    op: Some("subscribe".into()),
                    server: self.target.display.clone(),
                    detail: timed_out("timed out", &self.target),
                })
            } else {
                e
            }
        })
    }

    fn subscribe_within(&mut self, channel: &str, call: &Call) -> Result<Subscription> {
        let mut conn = self
            .target
            .connect(call.left(), self.node.as_ref())
            .map_err(|e| describe(e, &self.target))?;
        let target = &self.target;
        conn.set_read_timeout(Some(call.left()))
            .and_then(|()| conn.set_write_timeout(Some(call.left())))
            .map_err(|e| describe(e, target))?;
        // SUBSCRIBE by hand rather than with redis-rs's PubSub::subscribe,
        // which reads the reply and throws it away: a refusal (an ACL user
        // without +subscribe or without the channel) would pass unnoticed,
        // and the waiter would sleep through every wake-up meant for it.
        let reply = conn
            .send_packed_command(&redis::cmd("SUBSCRIBE").arg(channel).get_packed_command())
            .and_then(|()| conn.recv_response())
            .and_then(Value::extract_error)
            .map_err(|e| describe(e, target).during("subscribe"))?;
        let confirmed = match &reply {
            Value::Array(items) => {
                matches!(items.first().map(string), Some(Ok(Some(k))) if k == "subscribe")
            }
            Value::Push { kind, .. } => *kind == redis::PushKind::Subscribe,
            _ => false,
        };
        if !confirmed {
            return Err(StoreError::protocol(
                &target.display,
                format!(
                    "unexpected reply from redis: {}",
                    super::replies::shape(&reply)
                ),
            )
            .during("subscribe"));
        }
        Ok(Subscription {
            conn,
            target: target.clone(),
            timeout: self.timeout,
        })
    }
}

impl Subscription {
    /// The next message, waiting at most `timeout` (at least 1 ms) for it:
    /// Ok(None) when none came in that time. An error
    /// means the subscription is lost (connection closed or broken); the
    /// caller then falls back to polling.
    /// A message that starts to arrive must be whole within the store's
    /// call timeout: a server that trickles it loses the subscription.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<Notice>> {
        let timeout = timeout.max(Duration::from_millis(1));
        let _call = Call::start(timeout + self.timeout, &[]);
        self.conn
            .set_read_timeout(Some(timeout))
            .map_err(|e| describe(e, &self.target))?;
        // redis-rs's PubSub reads messages without counting a timed-out
        // read as a reply still owed (which `recv_response` would, and
        // then swallow the next message). Its Drop sends UNSUBSCRIBE and
        // waits for the answer: a round trip per read for nothing, so it
        // is never dropped. It holds only a borrow of the connection and
        // a queue that stays empty (filled only by its own `subscribe`),
        // so nothing leaks.
        let mut pubsub = ManuallyDrop::new(self.conn.as_pubsub());
        match pubsub.get_message() {
            Ok(msg) => Ok(Some(notice(msg.get_payload_bytes()))),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(describe(e, &self.target).during("reading the wake-up channel")),
        }
    }
}

/// Reads a message: anything not understood is a `wake`.
fn notice(payload: &[u8]) -> Notice {
    if payload == b"claimed" {
        return Notice::Claimed;
    }
    let ms = payload.strip_prefix(b"turn ");
    match ms.and_then(|ms| std::str::from_utf8(ms).ok()?.parse().ok()) {
        Some(ms) => Notice::Turn {
            starts_in: Duration::from_millis(ms),
        },
        None => Notice::Wake,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_channel_messages_are_read_as_notices() {
        assert_eq!(notice(b"wake"), Notice::Wake);
        assert_eq!(notice(b"released"), Notice::Wake);
        assert_eq!(notice(b"claimed"), Notice::Claimed);
        let turn = |ms| Notice::Turn {
            starts_in: Duration::from_millis(ms),
        };
        assert_eq!(notice(b"turn 1800"), turn(1800));
        assert_eq!(notice(b"turn 0"), turn(0));
        // Anything garbled is one attempt too many, never a lost wake-up.
        assert_eq!(notice(b"turn -5"), Notice::Wake);
        assert_eq!(notice(b"turn"), Notice::Wake);
    }
}
