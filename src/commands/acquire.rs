//! `acquire` and `hold` (with hold's background renewer): taking a lease
//! for a shell script, and keeping it from a detached process.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::status_line::StatusLine;
use super::{granted, output, release_quietly, Global, Granted, IO_TIMEOUT};
use crate::clock;
use crate::config::{self, fmt_duration, AcquireConfig, HoldConfig, HoldRenewerConfig};
use crate::lease;
use crate::lease::supervisor::{Action, Input, Supervisor, TtyFacts};
use crate::process::{self, Signals};
use crate::store::{LockKeys, Release, Store};

/// A lease taken by `acquire` or `hold`.
struct Taken {
    keys: LockKeys,
    owner: String,
    token: u64,
    ttl_ms: u64,
    sent_at: Duration,
}

/// The common part of `acquire` and `hold`: take the lease, waiting as
/// asked. Err(code) is the exit status of a known outcome (busy, signal).
fn take(g: &Global, args: &AcquireConfig) -> Result<Result<Taken, u8>> {
    // Waiting is interruptible by SIGINT/SIGTERM/SIGHUP (exit 128+N).
    let signals = Signals::install()?;
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.lease.limit);
    let owner = match &args.owner {
        Some(o) => o.clone(),
        None => config::new_owner_id()?,
    };
    let ttl_ms = args.lease.ttl.as_millis() as u64;
    let mut store = g.store(IO_TIMEOUT);
    let host = config::hostname();
    let pid = std::process::id().to_string();
    let min_hold = args.lease.min_hold.map(|d| d.as_millis().to_string());
    let mut meta = vec![("host", host.as_str()), ("pid", pid.as_str())];
    if let Some(ms) = &min_hold {
        meta.push(("min_hold_ms", ms.as_str()));
    }
    // A signal that ends the wait also cuts short a call in progress.
    store.set_interrupt_signals(process::WAIT_ENDERS);
    let waited = lease::acquire(
        &mut store,
        &keys,
        &owner,
        ttl_ms,
        &meta,
        args.lease.wait,
        args.lease.wait_order,
        None,
        &signals,
        &StatusLine::new(g, &keys.name),
    )?;
    match granted(g, &keys.name, waited, args.lease.conflict_exit_code) {
        Ok(Granted::Yes { token, sent_at }) => Ok(Ok(Taken {
            keys,
            owner,
            token,
            ttl_ms,
            sent_at,
        })),
        // Only `run --once-per` looks at the done mark.
        Ok(Granted::Done(_)) => bail!("unexpected done mark for {}", keys.name),
        Err(code) => Ok(Err(code)),
    }
}

/// A taken lease as `export` lines or one JSON object, for stdout;
/// `extra` adds fields (the renewer's pid for `hold`). The shell lines
/// need no escaping for a terminal: the name and `--owner` are printable
/// ASCII, and a generated owner id is this host's own name.
fn taken_text(t: &Taken, json: bool, extra: &[(&str, u64)]) -> String {
    if json {
        let mut obj = serde_json::json!({
            "name": t.keys.name,
            "key": t.keys.lock,
            "owner": t.owner,
            "fencing_token": t.token,
            "ttl_ms": t.ttl_ms,
        });
        for (k, v) in extra {
            obj[*k] = (*v).into();
        }
        return output::json(&obj) + "\n";
    }
    let mut out = format!(
        "export DISTLOCK_NAME={}\nexport DISTLOCK_OWNER={}\nexport DISTLOCK_FENCING_TOKEN={}",
        shell_quote(&t.keys.name),
        shell_quote(&t.owner),
        shell_quote(&t.token.to_string())
    );
    for (k, v) in extra {
        let var = match *k {
            "renewer_pid" => "DISTLOCK_HOLD_PID",
            other => other,
        };
        out.push_str(&format!("\nexport {var}={}", shell_quote(&v.to_string())));
    }
    out + "\n"
}

/// The error for a lease whose output could not be written whole (a full
/// disk, a closed pipe alike). The output is the only record of its owner
/// id, so no one could use or release it: it is released here.
fn unprinted(g: &Global, t: &Taken, e: std::io::Error) -> anyhow::Error {
    let mut store = g.store(IO_TIMEOUT);
    let fate = match store.release(&t.keys, &t.owner) {
        Ok(Release::Released(_) | Release::Gone) => "so it was released again".to_owned(),
        Ok(Release::Kept(left)) => format!(
            "so it was released again, to end in {} (--min-hold)",
            fmt_duration(left)
        ),
        // HeldByRun answers only a release by owner, not the holder's own.
        Ok(Release::NotOwner(_) | Release::HeldByRun) => "and it was already gone".to_owned(),
        Err(_) => format!(
            "and releasing it failed, so it expires by itself within {}",
            fmt_duration(Duration::from_millis(t.ttl_ms))
        ),
    };
    anyhow::Error::new(e).context(format!(
        "took {} but cannot write its owner id to stdout, {fate}",
        t.keys.name
    ))
}

/// `distlock acquire`: take the lease and print how to use it.
pub fn acquire(g: &Global, args: AcquireConfig) -> Result<u8> {
    match take(g, &args)? {
        Ok(t) => match output::write_stdout(&taken_text(&t, args.json, &[])) {
            Ok(()) => Ok(0),
            Err(e) => Err(unprinted(g, &t, e)),
        },
        Err(code) => Ok(code),
    }
}

/// `distlock hold`: `acquire`, plus a detached process that renews the
/// lease until it is released, `--max` passes or renewal fails.
pub fn hold(g: &Global, args: HoldConfig) -> Result<u8> {
    let t = match take(g, &args.acquire)? {
        Ok(t) => t,
        Err(code) => return Ok(code),
    };
    let release_at = args.release_at(t.sent_at);
    let mut cmd = std::process::Command::new(
        std::env::current_exe().context("cannot find distlock's own executable")?,
    );
    cmd.arg("__hold-renewer")
        .arg(&t.keys.name)
        .arg("--limit")
        .arg(t.keys.limit.unwrap_or(1).to_string())
        .env("DISTLOCK_OWNER", &t.owner)
        .arg("--ttl")
        .arg(format!("{}ms", t.ttl_ms))
        .arg("--t0-ns")
        .arg(t.sent_at.as_nanos().to_string());
    if let Some(at) = release_at {
        cmd.arg("--release-at-ns").arg(at.as_nanos().to_string());
    }
    // The URL travels in the environment, never on a command line that
    // `ps` shows; the renewer detaches from the terminal and from the
    // caller's stdout (a `$(distlock hold …)` must not wait for it).
    cmd.env("DISTLOCK_URL", &g.url)
        .env("DISTLOCK_PREFIX", &g.prefix)
        .env("DISTLOCK_MIN_REPLICAS", g.min_replicas.to_string())
        .env_remove("DISTLOCK_REDIS_PASSWORD_FILE");
    let s = &g.security;
    for (var, val) in [
        ("DISTLOCK_TLS_CA", &s.tls_ca),
        ("DISTLOCK_TLS_CERT", &s.tls_cert),
        ("DISTLOCK_TLS_KEY", &s.tls_key),
    ] {
        match val {
            Some(p) => cmd.env(var, p),
            None => cmd.env_remove(var),
        };
    }
    match &s.password {
        Some(p) => cmd.env("DISTLOCK_REDIS_PASSWORD", p),
        None => cmd.env_remove("DISTLOCK_REDIS_PASSWORD"),
    };
    if s.tls_insecure {
        cmd.arg("--tls-insecure").arg("--quiet");
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let mut store = g.store(IO_TIMEOUT);
            release_quietly(g, &mut store, &t.keys, &t.owner);
            return Err(e).context("cannot start the background renewer");
        }
    };
    let text = taken_text(
        &t,
        args.acquire.json,
        &[("renewer_pid", u64::from(child.id()))],
    );
    if let Err(e) = output::write_stdout(&text) {
        // Stopped before the release, so nothing renews the lease once it
        // is given back; still our child, so the pid is still its own.
        let _ = child.kill();
        let _ = child.wait();
        return Err(unprinted(g, &t, e));
    }
    Ok(0)
}

/// The background renewer of `hold`: drives the supervisor without a CMD
/// ([`Supervisor::without_cmd`], which holds every rule: when to renew,
/// `--max`, which signals release, when to give up) and carries out what
/// it asks: renewals, the release, the exit status.
pub fn hold_renewer(g: &Global, args: HoldRenewerConfig) -> Result<u8> {
    let signals = Signals::install()?;
    let keys = LockKeys::new(&g.prefix, &args.name).with_limit(args.limit);
    let timings = args.timings;
    let mut store = g.store(timings.renew_every);
    let mut holder = Holder {
        machine: Supervisor::without_cmd(timings, args.t0, args.release_at),
        store: &mut store,
        keys: &keys,
        owner: &args.owner,
        ttl_ms: timings.ttl_ms(),
    };
    let tty = TtyFacts::default();
    loop {
        let tick = Input::Tick {
            tty,
            group_empty: true,
        };
        if let Some(code) = holder.feed(tick) {
            return Ok(code);
        }
        let wake = holder.machine.next_deadline();
        let (sigs, _) = signals.wait(wake.map(|w| w.saturating_sub(clock::now())), None);
        for sig in sigs {
            if let Some(code) = holder.feed(Input::Signal { sig, tty }) {
                return Ok(code);
            }
        }
    }
}

/// What `hold_renewer` needs to carry out the supervisor's actions.
struct Holder<'a> {
    machine: Supervisor,
    store: &'a mut Store,
    keys: &'a LockKeys,
    owner: &'a str,
    ttl_ms: u64,
}

impl Holder<'_> {
    /// Steps the machine with `input`, and with the outcome of each
    /// renewal it asks for; the exit status once it says to exit.
    fn feed(&mut self, input: Input) -> Option<u8> {
        let mut next = Some(input);
        while let Some(input) = next.take() {
            let now = clock::now();
            for action in self.machine.step(now, input) {
                match action {
                    Action::SendRenewal { timeout } => {
                        self.store.set_timeout(timeout);
                        next = Some(match self.store.renew(self.keys, self.owner, self.ttl_ms) {
                            Ok(true) => Input::Renewed { sent_at: now },
                            Ok(false) => Input::NotOwner,
                            Err(_) => Input::Unconfirmed,
                        });
                    }
                    Action::Release => {
                        // Seen through as `run` does (docs/queue.md), in
                        // silence: nobody reads a hold's stderr by then. A
                        // second SIGTERM ends the stay.
                        if let Ok(Release::Released(Some(handoff))) =
                            self.store.release(self.keys, self.owner)
                        {
                            self.store.set_interrupt_signals(process::WAIT_ENDERS);
                            let _ = self.store.relay(self.keys, handoff);
                        }
                    }
                    Action::Exit(code) => return Some(code),
                    // The rest is about a CMD, which a hold does not have.
                    _ => {}
                }
            }
        }
        None
    }
}

/// Quotes a value for `eval` in sh, bash and zsh: single quotes, with each
/// `'` written as `'\''`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting_survives_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
