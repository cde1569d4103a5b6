//! Turns raw command-line values into checked, typed settings.
//!
//! The value parsers (`parse_*`) are what clap calls for single values, so a
//! bad name or duration is reported as a usage error (exit 2) naming the
//! option. The checks that relate several values (`Timings::new`, the
//! settings of each subcommand in [`settings`]) run when `cli` turns its
//! arguments into those settings. Both sides share `UsageError`, which
//! `main` maps to exit 2.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

mod settings;

pub use settings::{
    check_once_per, check_ttl, require_owner, AcquireConfig, HistoryConfig, HoldConfig,
    HoldRenewerConfig, InspectConfig, LeaseConfig, ReleaseConfig, ReleaseHow, RenewConfig,
    RunConfig,
};

/// A mistake in what the user typed. `main` maps it to exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Longest lock name or prefix we accept; keeps keys short and readable.
const MAX_NAME: usize = 200;

/// The lock name rule in words, for every message that refuses a name or
/// misses one.
pub const NAME_RULE: &str =
    "1 to 200 characters from A-Z a-z 0-9 . _ - : / @ +, not starting with -";

/// Whether `s` is 1 to [`MAX_NAME`] characters of the lock name alphabet.
fn in_name_alphabet(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "._-:/@+".contains(c);
    !s.is_empty() && s.len() <= MAX_NAME && s.chars().all(ok_char)
}

/// Checks a lock name against the contract's alphabet. Braces in particular
/// are refused: they would break the `{NAME}` hash tag that keeps a lock's
/// keys in one Redis Cluster slot. A leading `-` is refused too: `run`
/// would read such a name as an option, so a lock taken with
/// `acquire -- -x` could never be run under.
pub fn parse_name(s: &str) -> Result<String, String> {
    if !in_name_alphabet(s) || s.starts_with('-') {
        return Err(format!("invalid lock name {s:?}: use {NAME_RULE}"));
    }
    Ok(s.to_owned())
}

/// Checks a key prefix. It shares the lock name alphabet: what matters is
/// that it holds no brace (hash tags), no glob character (`list` scans
/// with `PREFIX:{*}`) and no whitespace. A leading `-` stays allowed, as
/// before: a prefix set in DISTLOCK_PREFIX is never read as an option.
pub fn parse_prefix(s: &str) -> Result<String, String> {
    if !in_name_alphabet(s) {
        return Err(format!(
            "invalid prefix {s:?}: use 1 to {MAX_NAME} characters from A-Z a-z 0-9 . _ - : / @ +"
        ));
    }
    Ok(s.to_owned())
}

/// Parses a humantime duration and insists on a unit: a bare `30` is far
/// more likely a mistake (seconds? milliseconds?) than a request.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.strip_prefix('-')
        .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
    {
        return Err(format!(
            "invalid duration {s:?}: durations cannot be negative (examples: 500ms, 30s, 2m, 1h30m)"
        ));
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "invalid duration {s:?}: a unit is required, e.g. 500ms, 30s, 2m, 1h30m"
        ));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("invalid duration {s:?}: {e} (examples: 500ms, 30s, 2m, 1h30m)"))
}

/// Longest duration distlock sends to Redis as an expiry (a lease, a
/// minimum hold, how long to keep the last-run record): 100000 years.
/// Redis counts expiries in milliseconds in a signed 64-bit number, and
/// the scripts add them to the server clock in Lua's doubles, exact only
/// below 2^53; 100000 years stays well inside both. Beyond it the value
/// would be cut short in the conversion, not refused.
pub const MAX_EXPIRY: Duration = Duration::from_secs(100_000 * 31_557_600);

/// `parse_duration` for a value that becomes a Redis expiry: also at most
/// `MAX_EXPIRY`.
pub fn parse_expiry(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > MAX_EXPIRY {
        return Err(format!(
            "invalid duration {s:?}: too long for a Redis expiry (at most 100000y)"
        ));
    }
    Ok(d)
}

/// Parses the window of `run --once-per D`: a positive expiry of at least
/// 1ms (the done mark expires on Redis's millisecond clock). Zero and
/// negative windows get a message of their own, since "once per nothing"
/// has no meaning and `-1s` would otherwise read as an odd parse error.
pub fn parse_window(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let positive =
        format!("invalid window {s:?}: the window must be a positive duration, e.g. 20h or 1d");
    if t.starts_with('-') || (!t.is_empty() && t.chars().all(|c| c == '0')) {
        return Err(positive);
    }
    let d = parse_expiry(s)?;
    if d < Duration::from_millis(1) {
        return Err(positive);
    }
    Ok(d)
}

/// How long `run`/`acquire` wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Give up after this long; zero means "try once".
    For(Duration),
    /// Wait without limit.
    Forever,
}

/// Order in which waiters get a busy lock (`--wait-order`). A value enum
/// of the command line, kept here rather than in `lease` so that `cli`
/// imports nothing but `config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WaitOrder {
    /// First come, first served: a queue under the lock's hash tag.
    Fair,
    /// Whoever asks first once the lock is free (no queue).
    Any,
}

/// Parses `--wait`: a duration, `0` (do not wait, as with flock `-w 0`) or
/// `forever`.
pub fn parse_wait(s: &str) -> Result<Wait, String> {
    match s.trim() {
        "forever" | "inf" | "infinity" => Ok(Wait::Forever),
        "0" => Ok(Wait::For(Duration::ZERO)),
        _ => parse_duration(s).map(Wait::For),
    }
}

/// Parses an exit status for `-E`: 0 to 255, the range a process can report.
pub fn parse_exit_code(s: &str) -> Result<u8, String> {
    s.trim()
        .parse::<u8>()
        .map_err(|_| format!("invalid exit code {s:?}: use a whole number from 0 to 255"))
}

/// A signal chosen by the user, kept as its number (for `kill`) and its name
/// (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    /// The signal number, as `kill(2)` takes it.
    pub number: i32,
    /// The name without the `SIG` prefix, for messages.
    pub name: &'static str,
}

/// Signals a user may name, as `kill -l` spells them.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// Looks a signal up by name (`TERM`, `SIGTERM`, any case) or number.
fn find_signal(s: &str) -> Option<Signal> {
    let t = s.trim().to_ascii_uppercase();
    let t = t.strip_prefix("SIG").unwrap_or(&t);
    let found = match t.parse::<i32>() {
        Ok(n) => SIGNALS.iter().find(|(_, v)| *v == n),
        Err(_) => SIGNALS.iter().find(|(name, _)| *name == t),
    };
    found.map(|&(name, number)| Signal { number, name })
}

/// Parses `--kill-signal`: `TERM`, `SIGTERM`, `term` or `15`. Signals that
/// cannot end a process (STOP, CONT, CHLD, …) are refused: they would make
/// the grace period pointless and leave CMD running until SIGKILL.
pub fn parse_signal(s: &str) -> Result<Signal, String> {
    const HARMLESS: [i32; 8] = [
        libc::SIGSTOP,
        libc::SIGCONT,
        libc::SIGCHLD,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGURG,
        libc::SIGWINCH,
    ];
    match find_signal(s) {
        Some(sig) if !HARMLESS.contains(&sig.number) => Ok(sig),
        Some(_) => Err(format!(
            "invalid signal {s:?}: it does not end a process; use e.g. TERM, INT, HUP or KILL"
        )),
        None => Err(format!(
            "invalid signal {s:?}: use a name such as TERM, INT, HUP, KILL or a number"
        )),
    }
}

/// Parses a signal to *notify* with (`--at-risk-signal`): any catchable
/// signal by name or number, e.g. USR1, HUP, 10.
pub fn parse_any_signal(s: &str) -> Result<Signal, String> {
    match find_signal(s) {
        Some(sig) if sig.number != libc::SIGKILL && sig.number != libc::SIGSTOP => Ok(sig),
        _ => Err(format!(
            "invalid signal {s:?}: use a catchable signal such as USR1, USR2, HUP or a number"
        )),
    }
}

/// Validated timings of `run`, all on the local monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timings {
    /// Lease length in Redis.
    pub ttl: Duration,
    /// Period between renewals.
    pub renew_every: Duration,
    /// Time between the kill signal and SIGKILL.
    pub kill_grace: Duration,
    /// Allowance for clock-rate drift and scheduling: ttl/100 + 5ms.
    pub margin: Duration,
}

impl Timings {
    /// Fills in defaults and checks the contract's two relations:
    /// `renew_every <= ttl/2` (two chances to renew per lease) and
    /// `renew_every + kill_grace + margin < ttl` (after a missed renewal there
    /// is still time to signal CMD, wait the grace and SIGKILL it before the
    /// lease can expire).
    pub fn new(
        ttl: Duration,
        renew_every: Option<Duration>,
        kill_grace: Option<Duration>,
    ) -> Result<Timings, UsageError> {
        let ttl = check_ttl(ttl)?;
        // Redis keeps expiries in whole milliseconds; so do we.
        let ttl = Duration::from_millis(ttl.as_millis() as u64);
        let renew_every = renew_every.unwrap_or(ttl / 3);
        let kill_grace = kill_grace.unwrap_or_else(|| (ttl / 4).min(Duration::from_secs(5)));
        let margin = Timings::margin_for(ttl);
        if renew_every.is_zero() {
            return Err(UsageError("--renew-every must be greater than 0".into()));
        }
        if renew_every > ttl / 2 {
            return Err(UsageError(format!(
                "--renew-every {} is more than half of --ttl {}: renew at least twice per lease",
                fmt_duration(renew_every),
                fmt_duration(ttl)
            )));
        }
        // Saturating: a huge --kill-grace is a clash to report, not an
        // overflow.
        if renew_every
            .saturating_add(kill_grace)
            .saturating_add(margin)
            >= ttl
        {
            return Err(UsageError(format!(
                "--renew-every {} + --kill-grace {} + safety margin {} must be less than --ttl {}",
                fmt_duration(renew_every),
                fmt_duration(kill_grace),
                fmt_duration(margin),
                fmt_duration(ttl)
            )));
        }
        Ok(Timings {
            ttl,
            renew_every,
            kill_grace,
            margin,
        })
    }

    /// The safety margin for a lease of `ttl`: ttl/100 + 5ms, an allowance
    /// for clock-rate drift between us and Redis and for scheduling. The
    /// one place this formula is written.
    pub fn margin_for(ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(5)
    }

    /// Timings of a lease with no CMD to stop (`hold`'s background
    /// renewer): renew every ttl/3, no kill grace, the usual margin, so
    /// its deadline is `hard_after`. Not checked against the relations of
    /// `new`: `acquire` takes any ttl of 1ms or more, and a holder whose
    /// ttl is shorter than the margin simply reports the lease lost at
    /// once rather than refusing to start.
    pub fn for_holder(ttl: Duration) -> Timings {
        let ttl = Duration::from_millis(ttl.as_millis().max(1) as u64);
        Timings {
            ttl,
            renew_every: ttl / 3,
            kill_grace: Duration::ZERO,
            margin: Timings::margin_for(ttl),
        }
    }

    /// The lease length as Redis's PX wants it.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis() as u64
    }

    /// How long after a request was sent CMD must get the kill signal if no
    /// later request has been confirmed.
    pub fn soft_after(&self) -> Duration {
        // Saturating only matters for `for_holder` with a tiny ttl; `new`
        // guarantees renew_every + kill_grace + margin < ttl.
        self.ttl
            .saturating_sub(self.kill_grace)
            .saturating_sub(self.margin)
    }

    /// How long after a request was sent nothing of CMD may be alive.
    pub fn hard_after(&self) -> Duration {
        self.ttl.saturating_sub(self.margin)
    }
}

/// Formats a duration for messages: `30s`, `1m 30s`, `305ms`.
pub fn fmt_duration(d: Duration) -> String {
    // Rounded down to 100ms (whole ms below 1s), without a detour through
    // a u64 of milliseconds, which would wrap beyond 584 million years.
    let d = if d >= Duration::from_secs(1) {
        Duration::new(d.as_secs(), d.subsec_millis() / 100 * 100_000_000)
    } else {
        Duration::from_millis(u64::from(d.subsec_millis()))
    };
    humantime::format_duration(d).to_string()
}

/// A fresh owner id, `<host>:<pid>:<32 hex>`: readable for operators, and
/// 128 bits from the OS random source so nobody can guess it and release
/// someone else's lease.
pub fn new_owner_id() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot read the OS random source: {e}"))?;
    let mut hex = String::with_capacity(32);
    for b in bytes {
        hex.push_str(&format!("{b:02x}"));
    }
    Ok(format!("{}:{}:{hex}", hostname(), std::process::id()))
}

/// `gethostname()` as it is, for owner ids and holder metadata.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".into())
}

/// Checks a user-supplied `--owner`: 1 to 200 printable ASCII characters and
/// no whitespace, so it survives shell quoting and log lines intact.
pub fn parse_owner(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > MAX_NAME || !s.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "invalid owner id {s:?}: use 1 to {MAX_NAME} printable ASCII characters without spaces"
        ));
    }
    Ok(s.to_owned())
}

/// TLS and password settings from the command line and environment,
/// with the password file read here, once, so that no other module reads
/// it (and `main` builds no settings). What depends on the URL (TLS
/// options need `rediss://`, --tls-cert goes with --tls-key, the files
/// themselves) is checked by `store::Target::parse`, in that order.
#[derive(Debug, Default, Clone)]
pub struct Security {
    /// A password from --redis-password-file or DISTLOCK_REDIS_PASSWORD;
    /// overrides one in the URL.
    pub password: Option<String>,
    /// The password came from DISTLOCK_REDIS_PASSWORD, which may be set in
    /// an environment shared with servers that need none.
    pub password_from_env: bool,
    /// PEM file of the CA(s) to trust instead of the system's.
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate and key, for mutual TLS.
    pub tls_cert: Option<PathBuf>,
    /// See `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Skip certificate verification (testing only).
    pub tls_insecure: bool,
}

/// The raw connection options as the command line gives them, for
/// [`Security::new`] (plain values, so `config` needs nothing of `cli`).
#[derive(Debug, Default, Clone)]
pub struct SecurityOptions {
    /// `--redis-password-file`.
    pub password_file: Option<PathBuf>,
    /// `--tls-ca`.
    pub tls_ca: Option<PathBuf>,
    /// `--tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`.
    pub tls_key: Option<PathBuf>,
    /// `--tls-insecure`.
    pub tls_insecure: bool,
}

impl Security {
    /// Reads the password from outside the URL, so it need not show in
    /// `ps`: `--redis-password-file` (first line, trailing newline
    /// stripped) wins over `DISTLOCK_REDIS_PASSWORD`, which wins over a
    /// password in the URL. `env_password` is that variable's value.
    /// Errors are usage errors that name the file, never its contents.
    pub fn new(opts: SecurityOptions, env_password: Option<String>) -> Result<Security> {
        let (password, password_from_env) = match &opts.password_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    UsageError(format!(
                        "cannot read --redis-password-file {}: {e}",
                        path.display()
                    ))
                })?;
                let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
                if line.is_empty() {
                    anyhow::bail!(UsageError(format!(
                        "--redis-password-file {} is empty",
                        path.display()
                    )));
                }
                (Some(line.to_owned()), false)
            }
            None => {
                let env = env_password.filter(|p| !p.is_empty());
                let from_env = env.is_some();
                (env, from_env)
            }
        };
        Ok(Security {
            password,
            password_from_env,
            tls_ca: opts.tls_ca,
            tls_cert: opts.tls_cert,
            tls_key: opts.tls_key,
            tls_insecure: opts.tls_insecure,
        })
    }

    /// Whether any TLS option was given.
    pub fn uses_tls(&self) -> bool {
        self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_insecure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract_alphabet() {
        for ok in ["billing", "deploy/prod", "repo:main", "a.b_c-d@e+f", "x"] {
            assert!(parse_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(201);
        for bad in ["", "has space", "{x}", "tab\t", "é", long.as_str(), "a*b"] {
            assert!(parse_name(bad).is_err(), "{bad:?}");
        }
        assert!(parse_name(&"a".repeat(200)).is_ok());
    }

    #[test]
    fn durations_need_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("0"), Ok(Wait::For(Duration::ZERO)));
        assert_eq!(parse_wait("2s"), Ok(Wait::For(Duration::from_secs(2))));
    }

    #[test]
    fn windows_are_positive_durations() {
        assert_eq!(parse_window("20h"), Ok(Duration::from_secs(72_000)));
        assert_eq!(parse_window("1ms"), Ok(Duration::from_millis(1)));
        for bad in ["0", "0s", "-1s", "-5m", "500us", "20", "", "100001y"] {
            assert!(parse_window(bad).is_err(), "{bad:?}");
        }
        assert!(parse_window("0s").unwrap_err().contains("positive"));
        assert!(parse_window("-1s").unwrap_err().contains("positive"));
    }

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("TERM").unwrap().number, libc::SIGTERM);
        assert_eq!(parse_signal("sigint").unwrap().number, libc::SIGINT);
        assert_eq!(parse_signal("9").unwrap().number, libc::SIGKILL);
        assert!(parse_signal("STOP").is_err());
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("0").is_err());
    }

    #[test]
    fn default_timings_follow_the_contract() {
        let t = Timings::new(Duration::from_secs(30), None, None).unwrap();
        assert_eq!(t.renew_every, Duration::from_secs(10));
        assert_eq!(t.kill_grace, Duration::from_secs(5));
        assert_eq!(t.margin, Duration::from_millis(305));
        let t = Timings::new(Duration::from_millis(400), None, None).unwrap();
        assert_eq!(t.kill_grace, Duration::from_millis(100));
    }

    #[test]
    fn clashing_timings_are_refused_with_their_values() {
        let e =
            Timings::new(Duration::from_secs(10), Some(Duration::from_secs(6)), None).unwrap_err();
        assert!(e.0.contains("--renew-every 6s"), "{e}");
        let e = Timings::new(
            Duration::from_secs(10),
            Some(Duration::from_secs(5)),
            Some(Duration::from_secs(5)),
        )
        .unwrap_err();
        assert!(
            e.0.contains("--kill-grace 5s") && e.0.contains("--ttl 10s"),
            "{e}"
        );
    }

    #[test]
    fn expiries_longer_than_redis_can_keep_are_refused_not_cut_short() {
        assert_eq!(parse_expiry("100000y"), Ok(MAX_EXPIRY));
        assert_eq!(parse_expiry("30s"), Ok(Duration::from_secs(30)));
        // 2^64 ms and a bit: as u64 milliseconds this was about 332 days.
        let e = parse_expiry("584542047y").unwrap_err();
        assert!(e.contains("at most 100000y"), "{e}");
        assert!(parse_expiry("100001y").is_err());
        assert!(parse_expiry("30").is_err(), "units are still required");
        // Exact in Lua's doubles even added to today's clock in ms.
        assert!(MAX_EXPIRY.as_millis() + 2_000_000_000_000 < 1 << 53);
    }

    #[test]
    fn huge_durations_are_clashes_or_shown_as_they_are_never_overflows() {
        let huge = Duration::from_secs(u64::MAX);
        let e = Timings::new(Duration::from_secs(10), None, Some(huge)).unwrap_err();
        assert!(e.0.contains("--kill-grace"), "{e}");
        assert!(Timings::new(Duration::from_secs(10), Some(huge), None).is_err());
        let shown = fmt_duration(Duration::from_secs(500_000_000_000 * 31_557_600));
        assert_eq!(shown, "500000000000years");
        assert_eq!(fmt_duration(Duration::from_millis(1_234)), "1s 200ms");
        assert_eq!(fmt_duration(Duration::from_micros(305_900)), "305ms");
    }

    #[test]
    fn owner_ids_are_host_pid_and_128_random_bits() {
        let a = new_owner_id().unwrap();
        let b = new_owner_id().unwrap();
        assert_ne!(a, b);
        let hex = a.rsplit(':').next().unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert!(a.contains(&format!(":{}:", std::process::id())));
    }
}

#[cfg(test)]
mod props;
