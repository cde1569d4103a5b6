//! The replies of distlock's scripts and of the few plain commands it
//! sends, as types (`FromRedisValue`), so each shape a script can answer
//! is written down once, next to the others, and a reply of any other
//! shape is a protocol error rather than a guess. The Lua side of each
//! shape is in `scripts.rs`.
//!
//! Two shapes are shared by most scripts and checked before these types
//! see a reply: `{-2, key, type}` (a foreign key, see [`foreign_key`]) and
//! `{-1, n}` (the name is in use with another `--limit`, see [`Limited`]).

use std::collections::HashMap;
use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::{
    Acquire, DoneMark, ForeignKey, Handoff, LockInfo, LockKeys, Release, SlotsInfo, Watched,
};

/// The reply of a script that refuses a name in use with another
/// `--limit`: `{-1, n}` (n ≤ 1: as a plain lock), else `T`.
pub(super) enum Limited<T> {
    Reply(T),
    InUse(i64),
}

impl<T: FromRedisValue> FromRedisValue for Limited<T> {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        if let Value::Array(items) | Value::Set(items) = &v {
            if let [Value::Int(-1), n] = items.as_slice() {
                return Ok(Limited::InUse(int(n)?));
            }
        }
        T::from_redis_value(v).map(Limited::Reply)
    }
}

impl<T> Limited<T> {
    /// The reply, or the error that names the lock whose limit disagrees.
    pub(super) fn of(self, keys: &LockKeys) -> super::Result<T> {
        match self {
            Limited::Reply(t) => Ok(t),
            Limited::InUse(n) => Err(super::StoreError::limit_mismatch(keys, n)),
        }
    }
}

/// What `ACQUIRE` and `ACQUIRE_SLOT` answer: `{1, token}`, `{0, holder,
/// pttl[, ahead[, host, pid, command, held ms, place]]}` (any of the
/// status line's part may be nil), or with `run --once-per` `{2, at_ms,
/// age_ms, host, token}` (see `ACQUIRE`).
impl FromRedisValue for Acquire {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = array(v)?;
        match items.as_slice() {
            [Value::Int(1), token] => Ok(Acquire::Acquired {
                token: int(token)?.max(0) as u64,
            }),
            [Value::Int(0), holder, pttl, rest @ ..] => Ok(Acquire::Busy {
                holder: string(holder)?,
                ttl: pttl_to_ttl(int(pttl)?),
                ahead: rest.first().map(string).transpose()?.flatten(),
                watched: watched(rest.get(1..).unwrap_or_default()),
            }),
            [Value::Int(2), at, age, host, token] => Ok(Acquire::Done(DoneMark {
                // Lua took it for a time (`tonumber`): one that is no u64
                // (1e20, -5) is past every time distlock can show, so the
                // caller refuses the mark by name.
                at_ms: int(at)
                    .ok()
                    .and_then(|at| u64::try_from(at).ok())
                    .unwrap_or(u64::MAX),
                host: string(host)?.unwrap_or_default(),
                // The token is the mark's own field, written by a release:
                // a missing one is no reason to start CMD again.
                token: int(token).unwrap_or(0).max(0) as u64,
                owner: None,
                age: Some(millis(age)?),
                expires_in: None,
            })),
            other => Err(unexpected("acquire", other)),
        }
    }
}

/// The status line's part of a busy reply: another client's metadata,
/// so what cannot be read is simply not shown (never an error).
fn watched(items: &[Value]) -> Watched {
    let text = |i: usize| items.get(i).and_then(|v| string(v).ok().flatten());
    let number = |i: usize| {
        items.get(i).and_then(|v| match v {
            Value::Int(n) => u64::try_from(*n).ok(),
            v => string(v).ok().flatten()?.parse().ok(),
        })
    };
    Watched {
        host: text(0),
        pid: number(1),
        command: text(2),
        held: number(3).map(Duration::from_millis),
        place: number(4),
    }
}

/// What `RENEW` and `RENEW_SLOT` answer: 1 when the lease was ours and is
/// extended, 0 when it is not ours (any more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Renewed(pub bool);

impl FromRedisValue for Renewed {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match int(&v)? {
            1 => Ok(Renewed(true)),
            0 => Ok(Renewed(false)),
            _ => Err(unexpected("renewal", &[v])),
        }
    }
}

/// What `RELEASE` and `RELEASE_SLOT` answer: `{1}` deleted; `{1, ms, id}`
/// deleted, and a waiter woken whose promised turns end in `ms`, `id` the
/// newest entry of `settled` then (see `RELAY`); `{2, ms}` kept for its
/// minimum hold; `{0[, holder]}` not ours; `{3}` ours, but a `run` holds
/// it and only that run may end it.
impl FromRedisValue for Release {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = array(v)?;
        match items.as_slice() {
            [Value::Int(1)] => Ok(Release::Released(None)),
            [Value::Int(1), ms, id] => Ok(Release::Released(Some(Handoff {
                until: millis(ms)?,
                since: string(id)?.unwrap_or_default(),
            }))),
            [Value::Int(2), left] => Ok(Release::Kept(millis(left)?)),
            [Value::Int(0)] => Ok(Release::NotOwner(None)),
            [Value::Int(3)] => Ok(Release::HeldByRun),
            [Value::Int(0), holder] => Ok(Release::NotOwner(string(holder)?)),
            other => Err(unexpected("release", other)),
        }
    }
}

/// What `FORCE_RELEASE` (the evicted holder, or nil) and
/// `FORCE_RELEASE_SLOTS` (every evicted slot holder) answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Evicted(pub Vec<String>);

impl FromRedisValue for Evicted {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(Evicted(match v {
            Value::Array(owners) => owners
                .iter()
                .filter_map(|o| string(o).ok().flatten())
                .collect(),
            one => string(&one)?.into_iter().collect(),
        }))
    }
}

/// What `INSPECT` answers: `{holder, pttl, token, meta, last, semaphore,
/// done mark, its pttl}`.
impl FromRedisValue for LockInfo {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = array(v)?;
        let [holder, pttl, token, meta, last, semaphore, done, done_pttl] = items.as_slice() else {
            return Err(unexpected("inspect", &items));
        };
        let holder = string(holder)?;
        let token = string(token)?.as_deref().map(counter).transpose()?;
        Ok(LockInfo {
            ttl: holder
                .as_ref()
                .and_then(|_| pttl_to_ttl(int(pttl).unwrap_or(-2))),
            holder,
            token,
            meta: pairs(meta),
            last_run: pairs(last),
            semaphore: string(semaphore)?.and_then(|n| n.parse().ok()),
            done: done_mark(&pairs(done), int(done_pttl).unwrap_or(-2)),
            waiters: None,
        })
    }
}

/// What `FORGET_DONE` answers: the done mark it deleted, as HGETALL's
/// field/value pairs (none if there was no mark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ForgetDoneReply(pub Option<DoneMark>);

impl FromRedisValue for ForgetDoneReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::Array(_) | Value::Map(_) => Ok(ForgetDoneReply(done_mark(&pairs(&v), -2))),
            other => Err(unexpected("forgetting the done mark", &[other])),
        }
    }
}

/// A done mark from its hash fields (as HGETALL returns them) and PTTL;
/// None when there is no mark, or one without the time it stands for
/// (which could not say whether the window is over).
///
/// A time Lua reads as a number but that is no u64 (1e20, a negative)
/// counts for the acquire script: it comes out as `u64::MAX`, past every
/// time distlock can show, for the caller to refuse by name.
fn done_mark(fields: &[(String, String)], pttl: i64) -> Option<DoneMark> {
    let get = |f: &str| fields.iter().find(|(k, _)| k == f).map(|(_, v)| v.as_str());
    let at = get("at_ms")?;
    Some(DoneMark {
        at_ms: at.parse().ok().or_else(|| {
            at.trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(|_| u64::MAX)
        })?,
        host: get("host").unwrap_or("").to_owned(),
        token: get("fencing_token")
            .and_then(|t| t.parse().ok())
            .unwrap_or(0),
        owner: get("owner").map(str::to_owned),
        age: None,
        expires_in: pttl_to_ttl(pttl),
    })
}

/// What `INSPECT_SLOTS` answers: `{limit, {owner, ms, token}…, token,
/// last, plain}`; `plain` is 1 when the name is in use as a plain lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlotsReply {
    pub info: SlotsInfo,
    pub plain: bool,
}

impl FromRedisValue for SlotsReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = array(v)?;
        let [limit, holders, token, last, plain] = items.as_slice() else {
            return Err(unexpected("inspect", &items));
        };
        let mut out = Vec::new();
        for h in array(holders.clone())?.chunks_exact(3) {
            let owner = string(&h[0])?.unwrap_or_default();
            out.push((owner, millis(&h[1])?, int(&h[2])?.max(0) as u64));
        }
        Ok(SlotsReply {
            info: SlotsInfo {
                limit: string(limit)?.and_then(|l| l.parse().ok()),
                holders: out,
                token: string(token)?.as_deref().map(counter).transpose()?,
                last_run: pairs(last),
            },
            plain: int(plain)? == 1,
        })
    }
}

/// One page of `SCAN`: the next cursor (0: done) and the keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScanPage {
    pub cursor: u64,
    pub keys: Vec<String>,
}

impl FromRedisValue for ScanPage {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = array(v)?;
        let [next, keys] = items.as_slice() else {
            return Err(unexpected("SCAN", &items));
        };
        Ok(ScanPage {
            cursor: string(next)?.unwrap_or_default().parse().unwrap_or(0),
            keys: array(keys.clone())?
                .iter()
                .filter_map(|k| string(k).ok().flatten())
                .collect(),
        })
    }
}

/// An `INFO section` reply, field by field (`# Section` lines and blank
/// lines dropped).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Info(pub HashMap<String, String>);

impl FromRedisValue for Info {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let text = match v {
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            Value::VerbatimString { text, .. } => text,
            other => return Err(unexpected("INFO", &[other])),
        };
        Ok(Info(
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
                .collect(),
        ))
    }
}

/// A `TIME` reply: the server's wall clock, since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ServerTime(pub Duration);

impl FromRedisValue for ServerTime {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let items = array(v)?;
        let parts: Vec<u64> = items
            .iter()
            .filter_map(|x| u64::try_from(int(x).ok()?).ok())
            .collect();
        match parts.as_slice() {
            [s, us] => Ok(ServerTime(
                Duration::from_secs(*s) + Duration::from_micros(*us),
            )),
            _ => Err(unexpected("TIME", &items)),
        }
    }
}

/// The `{-2, key, type}` reply of a script that found a foreign key. The
/// type `counter` (no Redis type is called so) is a fencing counter the
/// script cannot read, told in words (see `foreign_key!` in `scripts.rs`),
/// and `stream_full` a `settled` stream that takes no entry (`settle`).
pub(super) fn foreign_key(v: &Value) -> Option<ForeignKey> {
    let Value::Array(items) = v else { return None };
    let [Value::Int(-2), key, kind] = items.as_slice() else {
        return None;
    };
    Some(ForeignKey {
        key: string(key).ok()??,
        kind: match string(kind).ok()??.as_str() {
            "counter" => UNREADABLE_COUNTER.to_owned(),
            "stream_full" => FULL_STREAM.to_owned(),
            k => k.to_owned(),
        },
        store: "a Redis",
    })
}

/// What a fencing counter that distlock cannot read is, as the type in
/// [`ForeignKey`]'s sentence ("the key … is a Redis {this} written by
/// something else").
const UNREADABLE_COUNTER: &str =
    "string that is no fencing counter distlock can read (a whole number whose next token stays below 2^53),";

/// What a `settled` stream that takes no more entries is (its last id is
/// the largest there is, so XADD cannot add one), as the type in
/// [`ForeignKey`]'s sentence.
const FULL_STREAM: &str = "stream at its last possible entry id (no entry can be added),";

/// The largest token a fencing counter may hold: 2^53 - 1, the largest
/// integer a double (a Lua number, a JSON number in JavaScript) holds
/// exactly.
const MAX_TOKEN: u64 = (1 << 53) - 1;

/// A fencing counter read in Rust (`inspect`): the scripts refuse one that
/// is not an exact integer, so anything else is a protocol error rather
/// than a wrong number.
fn counter(s: &str) -> Result<u64, ParsingError> {
    s.parse::<u64>()
        .ok()
        .filter(|t| *t <= MAX_TOKEN)
        .ok_or_else(|| {
            format!(
                "the fencing counter ({}) is not an integer below 2^53",
                shape(&Value::BulkString(s.as_bytes().to_vec()))
            )
            .into()
        })
}

fn unexpected(what: &str, items: &[Value]) -> ParsingError {
    format!(
        "unexpected reply to {what}: {}",
        shape(&Value::Array(items.to_vec()))
    )
    .into()
}

/// What a reply is, in words, for an error line: its kind and size, and a
/// short value where one is short. Never the client's debug dump, which is
/// Rust syntax and can be as long as whatever another client stored.
pub(super) fn shape(v: &Value) -> String {
    const SHORT: usize = 40;
    let text = |b: &[u8]| {
        let t = String::from_utf8_lossy(b);
        if t.chars().count() <= SHORT {
            format!("\"{t}\"")
        } else {
            format!("{} bytes", b.len())
        }
    };
    match v {
        Value::Nil => "nil".to_owned(),
        Value::Int(i) => format!("the integer {i}"),
        Value::BulkString(b) => format!("the string {}", text(b)),
        Value::SimpleString(s) => format!("the status {}", text(s.as_bytes())),
        Value::Okay => "OK".to_owned(),
        Value::Array(a) | Value::Set(a) => format!("a list of {} items", a.len()),
        Value::Map(m) => format!("a map of {} entries", m.len()),
        Value::Double(d) => format!("the number {d}"),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::ServerError(e) => format!("the error {}", text(e.to_string().as_bytes())),
        _ => "a reply of another kind".to_owned(),
    }
}

pub(super) fn array(v: Value) -> Result<Vec<Value>, ParsingError> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        other => Err(format!("unexpected reply from redis: {}", shape(&other)).into()),
    }
}

pub(super) fn int(v: &Value) -> Result<i64, ParsingError> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)?
            .parse()
            .map_err(|_| format!("expected an integer from redis, got {}", shape(v)).into()),
        other => Err(format!("expected an integer from redis, got {}", shape(other)).into()),
    }
}

pub(super) fn string(v: &Value) -> Result<Option<String>, ParsingError> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => Ok(Some(String::from_utf8_lossy(b).into_owned())),
        Value::SimpleString(s) => Ok(Some(s.clone())),
        Value::Int(i) => Ok(Some(i.to_string())),
        other => Err(format!("expected a string from redis, got {}", shape(other)).into()),
    }
}

/// A HGETALL reply (flat array in RESP2, map in RESP3) as pairs.
fn pairs(v: &Value) -> Vec<(String, String)> {
    let items = match v {
        Value::Array(a) => a.clone(),
        Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
        _ => Vec::new(),
    };
    items
        .chunks(2)
        .filter_map(|kv| match kv {
            [k, v] => Some((string(k).ok()??, string(v).ok()??)),
            _ => None,
        })
        .collect()
}

/// A count of milliseconds (a negative one as none).
fn millis(v: &Value) -> Result<Duration, ParsingError> {
    Ok(Duration::from_millis(int(v)?.max(0) as u64))
}

/// PTTL is -2 for a missing key and -1 for one without expiry.
fn pttl_to_ttl(pttl: i64) -> Option<Duration> {
    (pttl >= 0).then(|| Duration::from_millis(pttl as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_in_an_error_line_is_words_not_a_debug_dump() {
        let long = Value::BulkString(vec![b'x'; 100_000]);
        assert_eq!(shape(&long), "the string 100000 bytes");
        assert_eq!(
            shape(&Value::BulkString(b"abc".to_vec())),
            "the string \"abc\""
        );
        assert_eq!(shape(&Value::Int(-3)), "the integer -3");
        assert_eq!(
            shape(&Value::Array(vec![Value::Nil; 3])),
            "a list of 3 items"
        );
        let e = int(&Value::Array(vec![long])).unwrap_err().to_string();
        assert!(
            !e.contains("Array(") && !e.contains("BulkString") && e.len() < 200,
            "{e}"
        );
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn acquire_replies_are_read_by_shape() {
        let r = |items: Vec<Value>| Acquire::from_redis_value(Value::Array(items));
        assert_eq!(
            r(vec![Value::Int(1), Value::Int(7)]).unwrap(),
            Acquire::Acquired { token: 7 }
        );
        assert_eq!(
            r(vec![Value::Int(0), bulk("h:1:ab"), Value::Int(1500)]).unwrap(),
            Acquire::Busy {
                holder: Some("h:1:ab".into()),
                ttl: Some(Duration::from_millis(1500)),
                ahead: None,
                watched: Watched::default(),
            }
        );
        assert_eq!(
            r(vec![Value::Int(0), Value::Nil, Value::Int(-2), bulk("w")]).unwrap(),
            Acquire::Busy {
                holder: None,
                ttl: None,
                ahead: Some("w".into()),
                watched: Watched::default(),
            }
        );
        // As ACQUIRE sends the status line's part: strings from the
        // metadata hash, the time held as a string, the place as a number.
        assert_eq!(
            r(vec![
                Value::Int(0),
                bulk("web-1:42:ab"),
                Value::Int(9000),
                Value::Nil,
                bulk("web-1"),
                bulk("42"),
                bulk("./bill --all"),
                bulk("65000"),
                Value::Int(2),
            ])
            .unwrap(),
            Acquire::Busy {
                holder: Some("web-1:42:ab".into()),
                ttl: Some(Duration::from_millis(9000)),
                ahead: None,
                watched: Watched {
                    host: Some("web-1".into()),
                    pid: Some(42),
                    command: Some("./bill --all".into()),
                    held: Some(Duration::from_secs(65)),
                    place: Some(2),
                },
            }
        );
        // Another client's metadata that is no number is not shown.
        let odd = r(vec![
            Value::Int(0),
            bulk("x"),
            Value::Int(5),
            Value::Nil,
            Value::Nil,
            bulk("-3"),
            Value::Nil,
            bulk("1e400"),
            Value::Nil,
        ])
        .unwrap();
        assert!(
            matches!(&odd, Acquire::Busy { watched, .. } if *watched == Watched::default()),
            "{odd:?}"
        );
        assert!(matches!(
            Limited::<Acquire>::from_redis_value(Value::Array(vec![Value::Int(-1), Value::Int(3)])),
            Ok(Limited::InUse(3))
        ));
        assert!(r(vec![Value::Int(5)]).is_err());
        assert!(Acquire::from_redis_value(Value::Okay).is_err());
    }

    #[test]
    fn acquire_reads_the_done_mark_of_once_per() {
        let r = |items: Vec<Value>| Acquire::from_redis_value(Value::Array(items));
        // As ACQUIRE sends it: at_ms and token as the hash's strings, the
        // age as a number.
        assert_eq!(
            r(vec![
                Value::Int(2),
                bulk("1764633601042"),
                Value::Int(3_600_000),
                bulk("web-2"),
                bulk("41")
            ])
            .unwrap(),
            Acquire::Done(DoneMark {
                at_ms: 1_764_633_601_042,
                host: "web-2".into(),
                token: 41,
                owner: None,
                age: Some(Duration::from_secs(3600)),
                expires_in: None,
            })
        );
        // A mark written without a token still stops CMD.
        let Acquire::Done(mark) = r(vec![
            Value::Int(2),
            bulk("5"),
            Value::Int(0),
            bulk(""),
            bulk(""),
        ])
        .unwrap() else {
            panic!("not a done mark");
        };
        assert_eq!((mark.at_ms, mark.token, mark.host.as_str()), (5, 0, ""));
        // A time that is no u64 is past any readable one; short of a
        // field, it is no done mark.
        for at in ["x", "-5", "99999999999999999999"] {
            let Acquire::Done(mark) = r(vec![
                Value::Int(2),
                bulk(at),
                Value::Int(0),
                bulk("h"),
                bulk("1"),
            ])
            .unwrap() else {
                panic!("not a done mark");
            };
            assert_eq!(mark.at_ms, u64::MAX, "{at}");
        }
        assert!(r(vec![Value::Int(2), bulk("5"), Value::Int(0), bulk("h")]).is_err());
    }

    #[test]
    fn inspect_replies_carry_the_done_mark() {
        let fields = |kv: &[(&str, &str)]| {
            Value::Array(kv.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect())
        };
        let reply = |done: Value, pttl: i64| {
            LockInfo::from_redis_value(Value::Array(vec![
                Value::Nil,
                Value::Int(-2),
                bulk("41"),
                Value::Array(vec![]),
                Value::Array(vec![]),
                Value::Nil,
                done,
                Value::Int(pttl),
            ]))
        };
        let mark = fields(&[
            ("at_ms", "1000"),
            ("host", "web-2"),
            ("fencing_token", "41"),
            ("owner", "web-2:7:ab"),
            ("once_per_ms", "72000000"),
        ]);
        let info = reply(mark.clone(), 5000).unwrap();
        assert_eq!((info.holder, info.token), (None, Some(41)));
        assert_eq!(
            info.done,
            Some(DoneMark {
                at_ms: 1000,
                host: "web-2".into(),
                token: 41,
                owner: Some("web-2:7:ab".into()),
                age: None,
                expires_in: Some(Duration::from_secs(5)),
            })
        );
        assert_eq!(reply(Value::Array(vec![]), -2).unwrap().done, None);
        // A hash without at_ms, or with one Lua cannot read either, is no
        // mark; a number too large or negative is one past readable times.
        assert_eq!(
            reply(fields(&[("host", "web-2")]), 5000).unwrap().done,
            None
        );
        assert_eq!(reply(fields(&[("at_ms", "x")]), 5000).unwrap().done, None);
        for at in ["-5", "1e20", "99999999999999999999"] {
            let done = reply(fields(&[("at_ms", at)]), 5000).unwrap().done;
            assert_eq!(done.map(|d| d.at_ms), Some(u64::MAX), "{at}");
        }
        // The reply of INSPECT before the done mark (6 items) is refused.
        assert!(LockInfo::from_redis_value(Value::Array(vec![Value::Nil; 6])).is_err());
        // release --forget-done: the mark it deleted, or none.
        let forgot = ForgetDoneReply::from_redis_value(mark).unwrap().0.unwrap();
        assert_eq!((forgot.at_ms, forgot.expires_in), (1000, None));
        assert_eq!(
            ForgetDoneReply::from_redis_value(Value::Array(vec![])).unwrap(),
            ForgetDoneReply(None)
        );
        assert!(ForgetDoneReply::from_redis_value(Value::Int(1)).is_err());
    }

    #[test]
    fn release_and_renew_replies_are_read_by_shape() {
        let r = |items: Vec<Value>| Release::from_redis_value(Value::Array(items)).unwrap();
        assert_eq!(r(vec![Value::Int(1)]), Release::Released(None));
        assert_eq!(
            r(vec![
                Value::Int(1),
                Value::Int(2700),
                Value::BulkString(b"1700000000000-0".to_vec())
            ]),
            Release::Released(Some(Handoff {
                until: Duration::from_millis(2700),
                since: "1700000000000-0".to_owned()
            }))
        );
        assert_eq!(
            r(vec![Value::Int(2), Value::Int(250)]),
            Release::Kept(Duration::from_millis(250))
        );
        assert_eq!(r(vec![Value::Int(0)]), Release::NotOwner(None));
        assert_eq!(r(vec![Value::Int(3)]), Release::HeldByRun);
        assert_eq!(
            r(vec![Value::Int(0), bulk("other")]),
            Release::NotOwner(Some("other".into()))
        );
        assert_eq!(
            Renewed::from_redis_value(Value::Int(1)).unwrap(),
            Renewed(true)
        );
        assert_eq!(
            Renewed::from_redis_value(Value::Int(0)).unwrap(),
            Renewed(false)
        );
        assert!(Renewed::from_redis_value(Value::Int(9)).is_err());
        assert_eq!(
            Evicted::from_redis_value(Value::Nil).unwrap(),
            Evicted(vec![])
        );
        assert_eq!(
            Evicted::from_redis_value(Value::Array(vec![bulk("a"), bulk("b")])).unwrap(),
            Evicted(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn foreign_key_replies_name_the_key_and_its_type() {
        let v = Value::Array(vec![Value::Int(-2), bulk("p:{n}:fence"), bulk("hash")]);
        assert_eq!(
            foreign_key(&v),
            Some(ForeignKey {
                key: "p:{n}:fence".into(),
                kind: "hash".into(),
                store: "a Redis",
            })
        );
        assert_eq!(foreign_key(&Value::Array(vec![Value::Int(1)])), None);
    }

    #[test]
    fn a_fencing_counter_is_read_only_when_exact() {
        assert_eq!(counter("0"), Ok(0));
        assert_eq!(counter("9007199254740991"), Ok(MAX_TOKEN));
        for bad in [
            "9007199254740992",
            "1796417000000000000",
            "-1",
            "1.5",
            "",
            "x",
        ] {
            assert!(counter(bad).is_err(), "{bad:?}");
        }
        let inspect = |token: &str| {
            LockInfo::from_redis_value(Value::Array(vec![
                Value::Nil,
                Value::Int(-2),
                bulk(token),
                Value::Array(vec![]),
                Value::Array(vec![]),
                Value::Nil,
                Value::Array(vec![]),
                Value::Int(-2),
            ]))
        };
        assert_eq!(inspect("41").unwrap().token, Some(41));
        assert!(inspect("1796417000000000000").is_err());
        let fk = foreign_key(&Value::Array(vec![
            Value::Int(-2),
            bulk("p:{n}:fence"),
            bulk("counter"),
        ]))
        .unwrap();
        assert!(fk.to_string().contains("2^53"), "{fk}");
    }

    #[test]
    fn info_and_time_replies() {
        let info =
            Info::from_redis_value(bulk("# Server\r\nredis_version:7.2.4\r\n\r\nx:y\r\n")).unwrap();
        assert_eq!(
            info.0.get("redis_version").map(String::as_str),
            Some("7.2.4")
        );
        assert_eq!(info.0.len(), 2);
        let t = ServerTime::from_redis_value(Value::Array(vec![bulk("10"), bulk("500")])).unwrap();
        assert_eq!(t.0, Duration::from_secs(10) + Duration::from_micros(500));
        assert!(ServerTime::from_redis_value(Value::Array(vec![])).is_err());
    }
}
