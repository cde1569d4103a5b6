//! A waiter's wake-up channel: a second connection, subscribed to one
//! channel, from which messages are read one at a time with a timeout.
//! The rest of distlock sees payloads (bytes) and [`StoreError`]s, never a
//! redis-rs connection.

use std::mem::ManuallyDrop;
use std::time::Duration;

use redis::{Connection, Value};

use super::error::{describe, timed_out};
use super::replies::string;
use super::Call;
use super::{Result, Store, StoreError, Target};

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
    /// A second connection subscribed to `channel`, confirmed by the server
    /// before this returns, so no message published after it is missed.
    /// Connecting and subscribing is one call: within the timeout, and
    /// ended by the signals of `set_interrupt_signals`.
    pub fn subscribe(&mut self, channel: &str) -> Result<Subscription> {
        let call = Call::start(self.timeout, self.interrupt_on);
        self.subscribe_within(channel, &call).map_err(|e| {
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
    /// The payload of the next message, waiting at most `timeout` (at
    /// least 1 ms) for it: Ok(None) when none came in that time. An error
    /// means the subscription is lost (connection closed or broken); the
    /// caller then falls back to polling.
    /// A message that starts to arrive must be whole within the store's
    /// call timeout: a server that trickles it loses the subscription.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<Vec<u8>>> {
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
            Ok(msg) => Ok(Some(msg.get_payload_bytes().to_vec())),
            Err(e) if e.is_timeout() => Ok(None),
            Err(e) => Err(describe(e, &self.target).during("reading the wake-up channel")),
        }
    }
}
