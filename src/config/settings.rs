//! The checked settings of each subcommand. `cli` builds them from what
//! clap parsed (`TryFrom`), calling the checks here, so the subcommands
//! take values already known to be good and each check is written once.

use std::ffi::OsString;
use std::time::Duration;

use super::{Signal, Timings, UsageError, Wait, WaitOrder};

/// Checks a lease length: Redis counts leases in whole milliseconds, so
/// anything below 1ms would be no lease at all.
pub fn check_ttl(ttl: Duration) -> Result<Duration, UsageError> {
    if ttl.as_millis() < 1 {
        return Err(UsageError("--ttl must be at least 1ms".into()));
    }
    Ok(ttl)
}

/// The owner id a subcommand acts as: `--owner` or `DISTLOCK_OWNER`, which
/// clap already merged; none is a usage error.
pub fn require_owner(owner: Option<String>) -> Result<String, UsageError> {
    owner.ok_or_else(|| UsageError("no owner id: pass --owner ID or set DISTLOCK_OWNER".into()))
}

/// `--once-per` means one success per window: N holders at a time would
/// run the job N times, and the mark could not say which run counts.
pub fn check_once_per(once_per: Option<Duration>, limit: u32) -> Result<(), UsageError> {
    if once_per.is_some() && limit > 1 {
        return Err(UsageError(format!(
            "--once-per cannot be used with --limit {limit}: a job done once per window has one holder at a time"
        )));
    }
    Ok(())
}

/// How a lease is taken: `run`, `acquire` and `hold`.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Up to this many holders at once (1: a plain lock).
    pub limit: u32,
    /// Lease length.
    pub ttl: Duration,
    /// How long to wait for a busy lock.
    pub wait: Wait,
    /// Who gets a busy lock first.
    pub wait_order: WaitOrder,
    /// Exit status when the lock was not acquired.
    pub conflict_exit_code: u8,
    /// `--min-hold`.
    pub min_hold: Option<Duration>,
}

/// `distlock run`, checked: the timings relate to each other as the
/// contract says, and `--once-per` goes with a plain lock.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Lock name.
    pub name: String,
    /// How the lease is taken.
    pub lease: LeaseConfig,
    /// Lease length, renewal period, kill grace and margin.
    pub timings: Timings,
    /// First signal sent to CMD's group when the lease is lost.
    pub kill_signal: Signal,
    /// `--max-hold`.
    pub max_hold: Option<Duration>,
    /// `--at-risk-signal`.
    pub at_risk_signal: Option<Signal>,
    /// `--once-per` window.
    pub once_per: Option<Duration>,
    /// Exit status when the job is already done in the window.
    pub done_exit_code: u8,
    /// How long Redis keeps the last-run record.
    pub last_run_keep: Duration,
    /// How many history records Redis keeps for the name (0: none).
    pub history_keep: u32,
    /// Where to write the Prometheus metrics when the run ends.
    pub metrics_file: Option<std::path::PathBuf>,
    /// CMD and its arguments.
    pub command: Vec<OsString>,
}

/// `distlock acquire`, checked.
#[derive(Debug, Clone)]
pub struct AcquireConfig {
    /// Lock name.
    pub name: String,
    /// How the lease is taken; its ttl is at least 1ms.
    pub lease: LeaseConfig,
    /// `--owner`; None: a new owner id.
    pub owner: Option<String>,
    /// One JSON object instead of export lines.
    pub json: bool,
}

/// `distlock hold`, checked.
#[derive(Debug, Clone)]
pub struct HoldConfig {
    /// What `acquire` would do.
    pub acquire: AcquireConfig,
    /// `--max`: release after this long at the latest.
    pub max: Wait,
}

impl HoldConfig {
    /// When `--max` runs out for a lease acquired at `t0`. The renewer is
    /// told it as boot-clock nanoseconds in a u64 (about 584 years): one it
    /// cannot be told, or that the clock cannot count to, is no deadline,
    /// rather than a renewer that refuses its arguments and leaves the
    /// lease to expire while `hold` says it holds.
    pub fn release_at(&self, t0: Duration) -> Option<Duration> {
        match self.max {
            Wait::For(d) => t0
                .checked_add(d)
                .filter(|at| u64::try_from(at.as_nanos()).is_ok()),
            Wait::Forever => None,
        }
    }
}

/// The hidden background renewer of `hold`, with its times on the
/// boot-time clock.
#[derive(Debug, Clone)]
pub struct HoldRenewerConfig {
    /// Lock name.
    pub name: String,
    /// `--limit`.
    pub limit: u32,
    /// The owner id the lease is held as.
    pub owner: String,
    /// The timings of a lease without CMD.
    pub timings: Timings,
    /// When the acquisition was sent.
    pub t0: Duration,
    /// When to release; None: never.
    pub release_at: Option<Duration>,
}

impl HoldRenewerConfig {
    /// The renewer's settings from its arguments; nothing to refuse:
    /// `hold` wrote them.
    pub fn new(
        name: String,
        limit: u32,
        owner: String,
        ttl: Duration,
        t0_ns: u64,
        release_at_ns: Option<u64>,
    ) -> HoldRenewerConfig {
        HoldRenewerConfig {
            name,
            limit,
            owner,
            timings: Timings::for_holder(ttl),
            t0: Duration::from_nanos(t0_ns),
            release_at: release_at_ns.map(Duration::from_nanos),
        }
    }
}

/// `distlock renew`, checked.
#[derive(Debug, Clone)]
pub struct RenewConfig {
    /// Lock name.
    pub name: String,
    /// `--limit`.
    pub limit: u32,
    /// The owner id that must hold the lease.
    pub owner: String,
    /// New lease length, at least 1ms.
    pub ttl: Duration,
}

/// What `distlock release` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseHow {
    /// `--forget-done`: delete only the done mark.
    ForgetDone,
    /// `--force`: delete the lease whoever holds it.
    Force,
    /// Compare-and-delete as this owner.
    Owner(String),
}

/// `distlock release`, checked.
#[derive(Debug, Clone)]
pub struct ReleaseConfig {
    /// Lock name.
    pub name: String,
    /// `--limit`.
    pub limit: u32,
    /// What to delete.
    pub how: ReleaseHow,
}

impl ReleaseConfig {
    /// `--forget-done` wins over `--force` (clap refuses both), and only a
    /// plain release needs an owner.
    pub fn new(
        name: String,
        limit: u32,
        owner: Option<String>,
        force: bool,
        forget_done: bool,
    ) -> Result<ReleaseConfig, UsageError> {
        let how = if forget_done {
            ReleaseHow::ForgetDone
        } else if force {
            ReleaseHow::Force
        } else {
            ReleaseHow::Owner(require_owner(owner)?)
        };
        Ok(ReleaseConfig { name, limit, how })
    }
}

/// `distlock inspect`.
#[derive(Debug, Clone)]
pub struct InspectConfig {
    /// Lock name.
    pub name: String,
    /// `--limit`.
    pub limit: u32,
    /// One JSON object.
    pub json: bool,
}

/// `distlock history`.
#[derive(Debug, Clone)]
pub struct HistoryConfig {
    /// Lock name.
    pub name: String,
    /// How many records, newest first.
    pub count: u32,
    /// A JSON array.
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(max: Wait) -> HoldConfig {
        HoldConfig {
            acquire: AcquireConfig {
                name: "x".into(),
                lease: LeaseConfig {
                    limit: 1,
                    ttl: Duration::from_secs(30),
                    wait: Wait::For(Duration::ZERO),
                    wait_order: WaitOrder::Fair,
                    conflict_exit_code: 75,
                    min_hold: None,
                },
                owner: None,
                json: false,
            },
            max,
        }
    }

    #[test]
    fn a_max_the_renewer_cannot_be_told_is_no_deadline() {
        let t0 = Duration::from_secs(100);
        let hour = Duration::from_secs(3600);
        assert_eq!(hold(Wait::For(hour)).release_at(t0), Some(t0 + hour));
        assert_eq!(hold(Wait::Forever).release_at(t0), None);
        let thousand_years = Duration::from_secs(1000 * 31_557_600);
        assert_eq!(hold(Wait::For(thousand_years)).release_at(t0), None);
        assert_eq!(hold(Wait::For(Duration::MAX)).release_at(t0), None);
    }

    #[test]
    fn a_release_needs_an_owner_only_when_it_compares() {
        let r = |owner: Option<&str>, force, forget| {
            ReleaseConfig::new("x".into(), 1, owner.map(String::from), force, forget)
                .map(|c| c.how)
                .map_err(|e| e.0)
        };
        assert_eq!(r(None, false, true), Ok(ReleaseHow::ForgetDone));
        assert_eq!(r(Some("o"), true, false), Ok(ReleaseHow::Force));
        assert_eq!(
            r(Some("o"), false, false),
            Ok(ReleaseHow::Owner("o".into()))
        );
        assert!(r(None, false, false).unwrap_err().contains("no owner id"));
        assert!(check_ttl(Duration::from_micros(999)).is_err());
        assert!(check_ttl(Duration::from_millis(1)).is_ok());
    }
}
