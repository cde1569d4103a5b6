//! What a `run` leaves in the store, written with its release: the
//! last-run record and the history record (the same JSON on both stores),
//! read back by `inspect` and `distlock history`.

use std::time::Duration;

/// How a run ended, as its history record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// CMD exited 0.
    Success,
    /// CMD exited non-zero.
    Failed,
    /// A signal ended CMD (exit 128+N).
    Signaled,
    /// The lease was lost and CMD was stopped (124).
    LeaseLost,
    /// `--max-hold` ran out and CMD was stopped (124): the job ran too
    /// long, the lease was never in danger. The contract's outcomes are a
    /// closed set, so it is stored and shown as `lease_lost` (exit 124)
    /// with `"stopped_by": "max_hold"` beside it, which tells the two apart.
    MaxHold,
    /// CMD could not be started (126, 127).
    NotStarted,
    /// `--once-per` found the job already done; CMD never started.
    SkippedDone,
}

impl RunOutcome {
    const ALL: [RunOutcome; 7] = [
        RunOutcome::Success,
        RunOutcome::Failed,
        RunOutcome::Signaled,
        RunOutcome::LeaseLost,
        RunOutcome::MaxHold,
        RunOutcome::NotStarted,
        RunOutcome::SkippedDone,
    ];

    /// The name in records and output (the contract's words).
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Success => "success",
            RunOutcome::Failed => "failed",
            RunOutcome::Signaled => "signaled",
            RunOutcome::LeaseLost | RunOutcome::MaxHold => "lease_lost",
            RunOutcome::NotStarted => "not_started",
            RunOutcome::SkippedDone => "skipped_done",
        }
    }

    /// What stopped CMD, where the outcome's word alone does not say.
    pub fn stopped_by(self) -> Option<&'static str> {
        (self == RunOutcome::MaxHold).then_some("max_hold")
    }

    fn parse(s: &str, stopped_by: Option<&str>) -> Option<RunOutcome> {
        RunOutcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s && o.stopped_by() == stopped_by)
    }
}

/// One record of a name's run history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRecord {
    /// When the run acquired the lease (Unix ms, the server's clock); the
    /// server sets it, so what is written here is ignored.
    pub started_ms: u64,
    /// How long the run held the lease (0 for a skipped run).
    pub duration_ms: u64,
    pub host: String,
    /// distlock's pid on that host.
    pub pid: u32,
    pub owner: String,
    /// The run's fencing token; None for a run that took no lease.
    pub token: Option<u64>,
    pub outcome: RunOutcome,
    /// distlock's exit status.
    pub exit_code: u8,
}

impl HistoryRecord {
    /// The record as the script stores it, without `started_ms` (which the
    /// server puts in front). JSON so other clients can read it; the
    /// fields in the order `distlock history --json` prints them.
    pub(in crate::store) fn tail(&self) -> String {
        let mut v = serde_json::json!({
            "duration_ms": self.duration_ms,
            "host": self.host,
            "pid": self.pid,
            "owner": self.owner,
            "fencing_token": self.token,
            "outcome": self.outcome.as_str(),
            "exit_code": self.exit_code,
        });
        if let Some(by) = self.outcome.stopped_by() {
            v["stopped_by"] = by.into();
        }
        v.to_string()
    }

    /// A stored record, or None for one that is not distlock's.
    pub(in crate::store) fn parse(text: &[u8]) -> Option<HistoryRecord> {
        let v: serde_json::Value = serde_json::from_slice(text).ok()?;
        let u = |f: &str| v.get(f)?.as_u64();
        let s = |f: &str| Some(v.get(f)?.as_str()?.to_owned());
        Some(HistoryRecord {
            started_ms: u("started_ms")?,
            duration_ms: u("duration_ms")?,
            host: s("host")?,
            pid: u32::try_from(u("pid")?).ok()?,
            owner: s("owner")?,
            token: match v.get("fencing_token")? {
                serde_json::Value::Null => None,
                t => Some(t.as_u64()?),
            },
            outcome: RunOutcome::parse(
                v.get("outcome")?.as_str()?,
                v.get("stopped_by").and_then(|b| b.as_str()),
            )?,
            exit_code: u8::try_from(u("exit_code")?).ok()?,
        })
    }
}

/// What `history` read among the newest entries: distlock's records, and
/// how many entries were not (another client pushed them onto the list).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct History {
    pub records: Vec<HistoryRecord>,
    pub foreign: usize,
}

/// What `run` records about itself when it ends.
#[derive(Debug, Clone)]
pub struct LastRun {
    /// Host that ran CMD.
    pub host: String,
    /// Owner id of that run.
    pub owner: String,
    /// When the lock was acquired (Unix ms, the runner's wall clock).
    pub started_ms: u64,
    /// How long CMD held the lock.
    pub duration_ms: u64,
    /// distlock's exit status.
    pub exit: u8,
    /// The fencing token of that run.
    pub token: u64,
}

/// What `run` leaves behind when it ends, written with its release: the
/// last-run record (kept for a while) and the history record (the newest
/// N kept). Either may be absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunRecord<'a> {
    pub last: Option<(&'a LastRun, Duration)>,
    pub history: Option<(&'a HistoryRecord, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_with_the_servers_start() {
        let r = HistoryRecord {
            started_ms: 0,
            duration_ms: 1500,
            host: "web-1\n".into(),
            pid: 42,
            owner: "web-1:42:ab".into(),
            token: Some(1_796_417_000_000_123),
            outcome: RunOutcome::LeaseLost,
            exit_code: 124,
        };
        // As `record_history!` splices it.
        let stored = format!("{{\"started_ms\":1700000000123,{}", &r.tail()[1..]);
        let back = HistoryRecord::parse(stored.as_bytes()).unwrap();
        assert_eq!(
            back,
            HistoryRecord {
                started_ms: 1_700_000_000_123,
                ..r.clone()
            }
        );
        let skipped = HistoryRecord {
            token: None,
            outcome: RunOutcome::SkippedDone,
            ..r
        };
        let stored = format!("{{\"started_ms\":1,{}", &skipped.tail()[1..]);
        assert_eq!(HistoryRecord::parse(stored.as_bytes()).unwrap().token, None);
        for o in RunOutcome::ALL {
            assert_eq!(RunOutcome::parse(o.as_str(), o.stopped_by()), Some(o));
        }
    }

    #[test]
    fn records_of_others_are_refused() {
        for bad in [
            &b"not json"[..],
            b"{}",
            b"[1]",
            br#"{"started_ms":-1,"duration_ms":0,"host":"h","pid":1,"owner":"o","fencing_token":1,"outcome":"success","exit_code":0}"#,
            br#"{"started_ms":1,"duration_ms":0,"host":"h","pid":1,"owner":"o","fencing_token":1,"outcome":"great","exit_code":0}"#,
            br#"{"started_ms":1,"duration_ms":0,"host":"h","pid":1,"owner":"o","fencing_token":1,"outcome":"success","exit_code":300}"#,
            br#"{"started_ms":1e400,"duration_ms":0,"host":"h","pid":1,"owner":"o","fencing_token":1,"outcome":"success","exit_code":0}"#,
        ] {
            assert_eq!(HistoryRecord::parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
