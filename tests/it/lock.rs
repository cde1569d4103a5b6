//! The manual subcommands (`acquire`, `renew`, `release`, `inspect`, `list`)
//! and the fencing counter, against a real redis-server, held to
//! docs/data-model.md, docs/guide.md "Manual subcommands" and guarantees.md §9.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::holder;
use crate::common::*;
use holder::Holder;
use serde_json::Value;

/// `distlock ARGS...` against `server`.
fn dl(server: &RedisServer, args: &[&str]) -> Out {
    let mut cmd = distlock(server);
    cmd.args(args);
    exec(&mut cmd, LIMIT)
}

/// `distlock ARGS...` with extra environment variables.
fn dl_env(server: &RedisServer, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut cmd = distlock(server);
    cmd.envs(env.iter().copied()).args(args);
    exec(&mut cmd, LIMIT)
}

/// Asserts success and returns stdout.
fn ok(out: Out) -> String {
    assert_eq!(out.code, 0, "expected exit 0: {out:#?}");
    out.stdout
}

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// Checks `<host>:<pid>:<32 lowercase hex>` with this machine's host name.
fn assert_generated_owner(owner: &str) {
    let mut parts = owner.rsplitn(3, ':');
    let hex = parts.next().unwrap_or("");
    let pid = parts.next().unwrap_or("");
    let host = parts.next().unwrap_or("");
    assert_eq!(hex.len(), 32, "owner {owner:?}: random part");
    assert!(
        hex.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "owner {owner:?}: random part must be lowercase hex"
    );
    assert!(
        pid.parse::<u32>().is_ok_and(|p| p > 0),
        "owner {owner:?}: pid part"
    );
    assert_eq!(host, hostname(), "owner {owner:?}: host part");
}

/// A shell command line whose DISTLOCK_* environment is clean except for
/// the Redis URL; `$DL` is the distlock binary.
fn shell(shell: &str, server: &RedisServer, script: &str, args: &[&str]) -> Out {
    let mut cmd = Command::new(shell);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("DISTLOCK_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("DISTLOCK_REDIS_URL", server.url())
        .env("DL", bin())
        .arg("-c")
        .arg(script)
        .arg(shell)
        .args(args);
    exec(&mut cmd, LIMIT)
}

/// The POSIX-family shells whose `eval` the acquire output must satisfy.
/// sh and bash are required; zsh is tested when installed.
fn shells() -> Vec<&'static str> {
    let mut v = vec!["sh", "bash"];
    let has_zsh = Command::new("zsh")
        .args(["-c", "true"])
        .try_output_within(Duration::from_secs(60))
        .is_ok_and(|o| o.status.success());
    if has_zsh {
        v.push("zsh");
    } else {
        eprintln!("zsh is not installed: skipping the zsh variant (sh and bash are tested)");
    }
    v
}

/// A loopback port that refuses connections for as long as this value
/// lives: the socket is bound but never listens, so no other process (say a
/// redis-server of a test running in parallel) can take the port meanwhile.
struct DeadPort {
    fd: libc::c_int,
    port: u16,
}

impl DeadPort {
    fn new() -> DeadPort {
        // SAFETY: plain socket/bind/getsockname on a fresh fd we own.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
            addr.sin_port = 0;
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            let rc = libc::bind(fd, std::ptr::addr_of!(addr).cast(), len);
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            let mut len = len;
            let rc = libc::getsockname(fd, std::ptr::addr_of_mut!(addr).cast(), &mut len);
            assert_eq!(rc, 0, "getsockname: {}", std::io::Error::last_os_error());
            DeadPort {
                fd,
                port: u16::from_be(addr.sin_port),
            }
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for DeadPort {
    fn drop(&mut self) {
        // SAFETY: closing the fd we opened.
        unsafe { libc::close(self.fd) };
    }
}

// ---------------------------------------------------------------- acquire

#[test]
fn acquire_output_evaluated_by_sh_and_bash_exports_name_owner_and_token() {
    let server = RedisServer::start();
    for sh in shells() {
        let name = format!("eval-{sh}");
        let out = shell(
            sh,
            &server,
            r#"eval "$("$DL" acquire "$1" --ttl 20s)"; echo "$DISTLOCK_NAME|$DISTLOCK_OWNER|$DISTLOCK_FENCING_TOKEN""#,
            &[&name],
        );
        assert_eq!(out.code, 0, "{sh}: {out:#?}");
        let line = out.stdout.trim();
        let fields: Vec<&str> = line.split('|').collect();
        assert_eq!(fields.len(), 3, "{sh}: {line:?}");
        assert_eq!(fields[0], name, "{sh}: DISTLOCK_NAME");
        let owner = fields[1];
        assert_generated_owner(owner);
        assert_eq!(
            server.get(&key(&name)).as_deref(),
            Some(owner),
            "{sh}: DISTLOCK_OWNER must be the value of the lock key"
        );
        assert_eq!(
            server.get(&fence(&name)).as_deref(),
            Some(fields[2]),
            "{sh}: DISTLOCK_FENCING_TOKEN must be the fence counter"
        );
        assert!(fields[2].parse::<u64>().unwrap() > 0, "{sh}: {line:?}");
        let ttl = pttl(&server, &key(&name));
        assert!(
            (15_000..=20_000).contains(&ttl),
            "{sh}: PTTL {ttl} should be about --ttl 20s"
        );
    }
}

#[test]
fn generated_owner_ids_differ_between_acquisitions() {
    let server = RedisServer::start();
    let a = json(&ok(dl(&server, &["acquire", "one", "--json"])));
    let b = json(&ok(dl(&server, &["acquire", "two", "--json"])));
    assert_generated_owner(a["owner"].as_str().unwrap());
    assert_generated_owner(b["owner"].as_str().unwrap());
    assert_ne!(a["owner"], b["owner"]);
}

#[test]
fn acquire_output_survives_eval_with_quotes_and_shell_syntax_in_the_owner() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pwned = dir.path().join("pwned");
    // Printable ASCII without whitespace, so a valid --owner; a naive
    // quoting would break on the quote or run the substitution.
    let nasty = format!(
        "a'b\"c$(touch${{IFS}}{p})`touch${{IFS}}{p}`;\\x",
        p = pwned.display()
    );
    assert!(!nasty.contains(char::is_whitespace));
    for sh in shells() {
        for owner in ["it's-me", nasty.as_str()] {
            let name = format!("quote-{sh}");
            let out = shell(
                sh,
                &server,
                r#"eval "$("$DL" acquire "$1" --owner "$2")" || exit 9; printf '%s\n' "$DISTLOCK_OWNER""#,
                &[&name, owner],
            );
            assert_eq!(out.code, 0, "{sh}, owner {owner:?}: {out:#?}");
            assert_eq!(out.stdout, format!("{owner}\n"), "{sh}: {out:#?}");
            assert_eq!(server.get(&key(&name)).as_deref(), Some(owner));
            assert!(!pwned.exists(), "{sh}: eval ran code from the owner id");
            server.cmd::<i64>(&["DEL", &key(&name)]);
        }
    }
}

#[test]
fn acquire_json_has_exactly_name_key_owner_token_and_ttl() {
    let server = RedisServer::start();
    let out = ok(dl(
        &server,
        &["acquire", "deploy/prod", "--ttl", "45s", "--json"],
    ));
    assert_eq!(out.lines().count(), 1, "one object on one line: {out:?}");
    let v = json(&out);
    let expected: BTreeSet<String> = ["name", "key", "owner", "fencing_token", "ttl_ms"]
        .map(String::from)
        .into();
    assert_eq!(keys_of(&v), expected, "{v}");
    assert_eq!(v["name"], "deploy/prod");
    assert_eq!(v["key"], "distlock:{deploy/prod}");
    let owner = v["owner"].as_str().expect("owner is a string");
    assert_generated_owner(owner);
    assert_eq!(server.get("distlock:{deploy/prod}").as_deref(), Some(owner));
    assert!(
        v["fencing_token"].is_u64(),
        "fencing_token is a number: {v}"
    );
    assert_eq!(
        server.get("distlock:{deploy/prod}:fence"),
        Some(v["fencing_token"].to_string())
    );
    assert!(v["ttl_ms"].is_u64(), "ttl_ms is a number: {v}");
    assert_eq!(v["ttl_ms"], 45_000);
    // The pid in the owner id is distlock's own, as its metadata says.
    let meta = json(&ok(dl(&server, &["inspect", "deploy/prod", "--json"])));
    assert_eq!(
        owner.split(':').nth_back(1).map(str::to_owned),
        meta["pid"].as_u64().map(|p| p.to_string()),
        "owner {owner} vs holder metadata {meta}"
    );
}

#[test]
fn reacquire_by_the_same_owner_keeps_the_token_and_refreshes_the_lease() {
    let server = RedisServer::start();
    let first = json(&ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "10s", "--json"],
    )));
    let token = first["fencing_token"].as_u64().unwrap();
    let again = json(&ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "60s", "--json"],
    )));
    assert_eq!(
        again["fencing_token"], token,
        "a retry must not burn a token"
    );
    assert_eq!(server.get(&fence("job")), Some(token.to_string()));
    assert_eq!(server.get(&key("job")).as_deref(), Some("me"));
    let ttl = pttl(&server, &key("job"));
    assert!(
        ttl > 50_000,
        "re-acquire must reset the TTL to 60s, PTTL {ttl}"
    );
}

#[test]
fn acquire_of_a_lock_held_by_another_owner_exits_75_naming_the_holder() {
    let server = RedisServer::start();
    ok(dl(&server, &["acquire", "job", "--owner", "holder-1"]));
    let token = server.get(&fence("job"));
    let out = dl(&server, &["acquire", "job", "--owner", "intruder"]);
    assert_eq!(out.code, 75, "{out:#?}");
    assert_eq!(out.stdout, "", "nothing to eval on a conflict");
    let line = out.stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "one line: {out:#?}");
    assert!(line.starts_with("distlock: "), "{line:?}");
    assert!(line.contains("holder-1"), "must name the holder: {line:?}");

    let out = dl(&server, &["acquire", "job", "-E", "3"]);
    assert_eq!(out.code, 3, "-E changes the conflict code: {out:#?}");
    assert!(out.stderr.contains("holder-1"), "{out:#?}");

    let out = dl(&server, &["-q", "acquire", "job"]);
    assert_eq!(out.code, 75, "{out:#?}");
    assert_eq!(out.stderr, "", "-q silences the conflict line");

    assert_eq!(server.get(&key("job")).as_deref(), Some("holder-1"));
    assert_eq!(server.get(&fence("job")), token, "no token burnt");
}

#[test]
fn every_manual_subcommand_survives_a_script_flush() {
    let server = RedisServer::start();
    let flush = || server.cmd::<String>(&["SCRIPT", "FLUSH"]);
    let steps: [&[&str]; 8] = [
        &["acquire", "job", "--owner", "me"],
        &["acquire", "job", "--owner", "me"],
        &["renew", "job", "--owner", "me"],
        &["inspect", "job", "--json"],
        &["list", "--json"],
        &["release", "job", "--owner", "me"],
        &["acquire", "job"],
        &["release", "job", "--force"],
    ];
    let mut tokens = Vec::new();
    for args in steps {
        flush();
        ok(dl(&server, args));
        tokens.push(server.get(&fence("job")).unwrap().parse::<u64>().unwrap());
    }
    assert_eq!(server.get(&key("job")), None);
    // Two acquisitions took a token each; the retry and the rest none.
    tokens.dedup();
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    assert!(tokens[0] < tokens[1], "{tokens:?}");
}

// ---------------------------------------------------------------- renew

#[test]
fn renew_by_the_owner_resets_the_ttl_and_by_anyone_else_exits_1() {
    let server = RedisServer::start();
    ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "10s"],
    ));

    ok(dl(
        &server,
        &["renew", "job", "--owner", "me", "--ttl", "60s"],
    ));
    let ttl = pttl(&server, &key("job"));
    assert!(
        (50_000..=60_000).contains(&ttl),
        "PTTL {ttl} after renew 60s"
    );

    let out = dl(
        &server,
        &["renew", "job", "--owner", "other", "--ttl", "300s"],
    );
    assert_eq!(out.code, 1, "{out:#?}");
    let ttl = pttl(&server, &key("job"));
    assert!(ttl <= 60_000, "a wrong owner must not extend: PTTL {ttl}");
    assert_eq!(server.get(&key("job")).as_deref(), Some("me"));

    let out = dl(&server, &["renew", "free-lock", "--owner", "me"]);
    assert_eq!(out.code, 1, "renewing a free lock: {out:#?}");
    assert_eq!(server.get(&key("free-lock")), None);
}

#[test]
fn renew_takes_the_owner_from_distlock_owner_when_no_option_is_given() {
    let server = RedisServer::start();
    ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "10s"],
    ));
    ok(dl_env(
        &server,
        &[("DISTLOCK_OWNER", "me")],
        &["renew", "job", "--ttl", "90s"],
    ));
    let ttl = pttl(&server, &key("job"));
    assert!(
        (80_000..=90_000).contains(&ttl),
        "PTTL {ttl} after renew 90s"
    );

    let out = dl_env(
        &server,
        &[("DISTLOCK_OWNER", "someone-else")],
        &["renew", "job", "--ttl", "90s"],
    );
    assert_eq!(out.code, 1, "{out:#?}");

    // --ttl defaults to $DISTLOCK_TTL, else 30s.
    ok(dl_env(
        &server,
        &[("DISTLOCK_OWNER", "me"), ("DISTLOCK_TTL", "2m")],
        &["renew", "job"],
    ));
    let ttl = pttl(&server, &key("job"));
    assert!(
        (110_000..=120_000).contains(&ttl),
        "PTTL {ttl} after DISTLOCK_TTL=2m"
    );
    ok(dl(
        &server,
        &["acquire", "short", "--owner", "me", "--ttl", "5s"],
    ));
    ok(dl_env(
        &server,
        &[("DISTLOCK_OWNER", "me")],
        &["renew", "short"],
    ));
    let ttl = pttl(&server, &key("short"));
    assert!(
        (20_000..=30_000).contains(&ttl),
        "PTTL {ttl} after the default 30s"
    );
}

/// A renewal only ever extends (guarantees.md §4): a `--ttl`
/// shorter than what the lease has left leaves it, and the metadata that
/// expires with it, as they are; so does a re-acquire by the same owner.
/// Otherwise anyone who knows the owner id (a CMD has it in
/// `DISTLOCK_OWNER`) could cut the lease short and let a second holder in.
#[test]
fn a_renewal_or_reacquire_with_a_shorter_ttl_never_shortens_the_lease() {
    let server = RedisServer::start();
    let first = json(&ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "60s", "--json"],
    )));
    let meta = format!("{}:meta", key("job"));
    let both = || (pttl(&server, &key("job")), pttl(&server, &meta));
    let (lock, m) = both();
    assert!(lock > 50_000 && m > 50_000, "{lock} {m}");

    ok(dl(
        &server,
        &["renew", "job", "--owner", "me", "--ttl", "1s"],
    ));
    let (lock, m) = both();
    assert!(
        lock > 50_000 && m > 50_000,
        "renew --ttl 1s shortened the lease: PTTL {lock}, meta {m}"
    );

    let again = json(&ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "1s", "--json"],
    )));
    assert_eq!(again["fencing_token"], first["fencing_token"], "{again}");
    let (lock, m) = both();
    assert!(
        lock > 50_000 && m > 50_000,
        "re-acquire --ttl 1s shortened the lease: PTTL {lock}, meta {m}"
    );

    // A longer one still extends, the metadata with it.
    ok(dl(
        &server,
        &["renew", "job", "--owner", "me", "--ttl", "120s"],
    ));
    let (lock, m) = both();
    assert!(lock > 110_000 && m > 110_000, "{lock} {m}");
}

#[test]
fn renew_and_release_without_any_owner_are_usage_errors() {
    let server = RedisServer::start();
    ok(dl(&server, &["acquire", "job", "--owner", "me"]));
    for args in [&["renew", "job"][..], &["release", "job"][..]] {
        let out = dl(&server, args);
        assert_eq!(out.code, 2, "{args:?}: {out:#?}");
        assert!(out.stderr.starts_with("distlock: "), "{out:#?}");
        assert!(out.stderr.contains("owner"), "{out:#?}");
    }
    assert_eq!(server.get(&key("job")).as_deref(), Some("me"));
}

// ---------------------------------------------------------------- release

#[test]
fn release_deletes_only_for_the_owner_and_only_once() {
    let server = RedisServer::start();
    ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "60s"],
    ));
    let token = server.get(&fence("job"));

    let out = dl(&server, &["release", "job", "--owner", "other"]);
    assert_eq!(out.code, 1, "{out:#?}");
    assert_eq!(server.get(&key("job")).as_deref(), Some("me"));
    assert!(pttl(&server, &key("job")) > 0, "TTL left intact");

    ok(dl_env(
        &server,
        &[("DISTLOCK_OWNER", "me")],
        &["release", "job"],
    ));
    assert_eq!(server.get(&key("job")), None);
    assert_eq!(
        server.get(&fence("job")),
        token,
        "release leaves the counter alone"
    );

    let out = dl(&server, &["release", "job", "--owner", "me"]);
    assert_eq!(out.code, 1, "second release: {out:#?}");
}

#[test]
fn release_force_evicts_any_holder_names_it_and_leaves_the_counter() {
    let server = RedisServer::start();
    let a = json(&ok(dl(&server, &["acquire", "job", "--json"])));
    let holder = a["owner"].as_str().unwrap().to_owned();
    let token = a["fencing_token"].as_u64().unwrap();

    let out = dl(&server, &["release", "job", "--force"]);
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stdout.contains(&holder),
        "--force must say who was evicted ({holder}): {out:#?}"
    );
    assert_eq!(server.get(&key("job")), None);
    assert_eq!(server.get(&fence("job")), Some(token.to_string()));

    let out = dl(&server, &["release", "job", "--force"]);
    assert_eq!(out.code, 1, "--force on a free lock: {out:#?}");

    let b = json(&ok(dl(&server, &["acquire", "job", "--json"])));
    assert!(
        b["fencing_token"].as_u64().unwrap() > token,
        "token after a forced release: {b}"
    );
}

// ---------------------------------------------------------------- inspect

#[test]
fn inspect_describes_held_and_free_locks_for_people() {
    let server = RedisServer::start();
    ok(dl(
        &server,
        &["acquire", "job", "--owner", "me@box", "--ttl", "60s"],
    ));
    let token = server.get(&fence("job")).unwrap();
    let out = ok(dl(&server, &["inspect", "job"]));
    assert!(out.contains("held by me@box"), "{out:?}");
    assert!(out.contains("expires in"), "{out:?}");
    assert!(out.contains(&format!("token {token}")), "{out:?}");

    ok(dl(&server, &["release", "job", "--owner", "me@box"]));
    let out = ok(dl(&server, &["inspect", "job"]));
    assert!(out.contains("free"), "{out:?}");
    assert!(!out.contains("held by"), "{out:?}");

    let out = ok(dl(&server, &["inspect", "never-used"]));
    assert!(out.contains("free"), "{out:?}");
}

#[test]
fn inspect_json_reports_holder_ttl_and_token_and_nulls_when_free() {
    let server = RedisServer::start();
    let required = ["name", "key", "held", "owner", "ttl_ms", "fencing_token"];

    let v = json(&ok(dl(&server, &["inspect", "--json", "never"])));
    for k in required {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(v["name"], "never");
    assert_eq!(v["key"], "distlock:{never}");
    assert_eq!(v["held"], false);
    assert!(v["owner"].is_null(), "{v}");
    assert!(v["ttl_ms"].is_null(), "{v}");
    assert!(v["fencing_token"].is_null(), "never acquired: {v}");

    ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "60s"],
    ));
    ok(dl(
        &server,
        &["acquire", "job", "--owner", "me", "--ttl", "60s"],
    ));
    let v = json(&ok(dl(&server, &["inspect", "job", "--json"])));
    for k in required {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(v["name"], "job");
    assert_eq!(v["key"], "distlock:{job}");
    assert_eq!(v["held"], true);
    assert_eq!(v["owner"], "me");
    let ttl = v["ttl_ms"].as_u64().expect("ttl_ms is a number when held");
    assert!((50_000..=60_000).contains(&ttl), "{v}");
    let token = v["fencing_token"].as_u64().expect("a number");
    assert_eq!(
        server.get(&fence("job")),
        Some(token.to_string()),
        "one token for both"
    );

    ok(dl(&server, &["release", "job", "--owner", "me"]));
    let v = json(&ok(dl(&server, &["inspect", "job", "--json"])));
    assert_eq!(v["held"], false);
    assert!(v["owner"].is_null(), "{v}");
    assert!(v["ttl_ms"].is_null(), "{v}");
    assert_eq!(
        v["fencing_token"], token,
        "a free lock keeps its last token"
    );
}

#[test]
fn inspect_json_shows_the_host_pid_and_command_of_a_running_holder() {
    let server = RedisServer::start();
    let mut cmd = distlock(&server);
    cmd.args(["run", "meta-demo"]).stderr(Stdio::null());
    let mut holder = Holder::spawn_cmd(&mut cmd, &["marker-word-xyzzy"]);
    let pid = holder.pid();
    assert!(holder.try_wait_held(), "CMD of distlock run never started");
    let v = json(&ok(dl(&server, &["inspect", "meta-demo", "--json"])));
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["host"], hostname(), "{v}");
    assert_eq!(v["pid"], pid, "pid of the distlock run process: {v}");
    let command = v["command"].as_str().unwrap_or_else(|| panic!("{v}"));
    for word in ["sh", "-c", "marker-word-xyzzy"] {
        assert!(command.contains(word), "command {command:?} lacks {word}");
    }
    let owner = v["owner"].as_str().unwrap();
    assert_generated_owner(owner);
    assert!(
        owner.split(':').nth_back(1) == Some(pid.to_string().as_str()),
        "owner id carries distlock's own pid {pid}: {owner}"
    );

    let st = holder.finish();
    assert_eq!(st.code(), Some(0));
    let v = json(&ok(dl(&server, &["inspect", "meta-demo", "--json"])));
    assert_eq!(v["held"], false, "{v}");
    // Metadata goes with the lease: only the counter, the last-run record
    // (kept for days on purpose) and the run history are left.
    let mut left: Vec<String> = server.cmd(&["KEYS", "distlock:{meta-demo}*"]);
    left.sort();
    assert_eq!(
        left,
        vec![
            fence("meta-demo"),
            "distlock:{meta-demo}:history".to_owned(),
            "distlock:{meta-demo}:last".to_owned()
        ]
    );
}

// ---------------------------------------------------------------- list

/// Names from a `list --json` array.
fn listed_names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("list --json must be an array: {v}"))
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Names from the human `list` table (first column after the header).
fn table_names(s: &str) -> Vec<String> {
    let mut lines = s.lines();
    let header = lines.next().unwrap_or("");
    assert!(header.starts_with("NAME"), "table header: {s:?}");
    lines
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect()
}

#[test]
fn list_shows_only_held_locks_of_its_prefix_sorted_by_name() {
    let server = RedisServer::start();
    for name in ["zeta", "b", "c:1", "a/x"] {
        ok(dl(
            &server,
            &["acquire", name, "--owner", &format!("o-{name}")],
        ));
    }
    // Released: not held any more, so not listed (its counter remains).
    ok(dl(&server, &["acquire", "gone", "--owner", "x"]));
    ok(dl(&server, &["release", "gone", "--owner", "x"]));
    // Another prefix.
    ok(dl(&server, &["--prefix", "other", "acquire", "elsewhere"]));
    ok(dl(&server, &["acquire", "also-other", "--prefix", "other"]));

    let want = ["a/x", "b", "c:1", "zeta"].map(String::from).to_vec();
    let v = json(&ok(dl(&server, &["list", "--json"])));
    assert_eq!(listed_names(&v), want, "{v}");
    for e in v.as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        let single = json(&ok(dl(&server, &["inspect", name, "--json"])));
        for k in ["name", "key", "held", "owner", "fencing_token"] {
            assert_eq!(e[k], single[k], "list vs inspect for {name}.{k}");
        }
        assert_eq!(e["owner"], format!("o-{name}"));
        assert_eq!(e["held"], true);
        assert!(e["ttl_ms"].as_u64().is_some_and(|t| t > 0), "{e}");
    }
    assert_eq!(table_names(&ok(dl(&server, &["list"]))), want);

    let want_other = ["also-other", "elsewhere"].map(String::from).to_vec();
    let v = json(&ok(dl(&server, &["--prefix", "other", "list", "--json"])));
    assert_eq!(listed_names(&v), want_other, "{v}");
    assert_eq!(v[0]["key"], "other:{also-other}");
    assert_eq!(
        table_names(&ok(dl(&server, &["list", "--prefix", "other"]))),
        want_other
    );

    let v = json(&ok(dl(&server, &["--prefix", "empty", "list", "--json"])));
    assert_eq!(v, serde_json::json!([]));
}

#[test]
fn list_finds_exactly_the_held_locks_among_ten_thousand_other_keys() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        match i % 4 {
            0 => pipe.set(format!("junk:{i}"), i),
            // Counters of names that are free now: not held, not listed.
            1 => pipe.set(format!("distlock:{{old-{i}}}:fence"), 3),
            // Look-alikes under other prefixes.
            2 => pipe.set(format!("distlockx:{{n{i}}}"), "someone"),
            _ => pipe.hset(format!("distlock:{{h{i}}}:meta"), "host", "x"),
        };
        pipe.ignore();
    }
    pipe.query::<()>(&mut con).unwrap();
    let dbsize: i64 = server.cmd(&["DBSIZE"]);
    assert_eq!(dbsize, 10_000);

    let mut want = Vec::new();
    for i in 0..25 {
        let name = format!("held-{i:02}");
        ok(dl(&server, &["acquire", &name]));
        want.push(name);
    }
    server.cmd::<String>(&["CONFIG", "RESETSTAT"]);
    // exec() bounds the run with a generous timeout; no timing assertion.
    let v = json(&ok(dl(&server, &["list", "--json"])));
    assert_eq!(listed_names(&v), want);
    assert_eq!(table_names(&ok(dl(&server, &["list"]))), want);
    // SCAN, never KEYS (which blocks the server).
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_scan:"), "{stats}");
    assert!(!stats.contains("cmdstat_keys:"), "list used KEYS: {stats}");
}

// ---------------------------------------------------------------- fencing

/// Token of one `distlock acquire --json`, released again afterwards.
fn acquire_token(server: &RedisServer, name: &str, ttl: &str) -> (u64, String) {
    let v = json(&ok(dl(server, &["acquire", name, "--ttl", ttl, "--json"])));
    (
        v["fencing_token"].as_u64().unwrap(),
        v["owner"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn fencing_tokens_strictly_increase_across_run_acquire_and_expiry() {
    let server = RedisServer::start();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        tokens.push(token_run(&server.url(), &[], "fx"));
        let (t, owner) = acquire_token(&server, "fx", "30s");
        tokens.push(t);
        ok(dl(&server, &["release", "fx", "--owner", &owner]));
    }
    // A lease that expires by itself.
    let (t, _) = acquire_token(&server, "fx", "100ms");
    tokens.push(t);
    assert!(
        wait_until(Duration::from_secs(10), || {
            server.cmd::<i64>(&["EXISTS", &key("fx")]) == 0
        }),
        "a 100ms lease never expired"
    );
    let (t, owner) = acquire_token(&server, "fx", "30s");
    tokens.push(t);
    ok(dl(&server, &["release", "fx", "--owner", &owner]));
    tokens.push(token_run(&server.url(), &[], "fx"));

    assert_eq!(tokens.len(), 7);
    for w in tokens.windows(2) {
        assert!(w[0] < w[1], "{tokens:?}");
    }
    assert_eq!(server.get(&fence("fx")), Some(tokens[6].to_string()));
    assert_eq!(pttl(&server, &fence("fx")), -1, "the counter never expires");
}

// ---------------------------------------------------------------- errors

#[test]
fn every_manual_subcommand_exits_125_when_redis_is_unreachable() {
    let dead = DeadPort::new();
    let nowhere = tempfile::tempdir().unwrap();
    let urls = [
        dead.url(),
        format!("unix://{}", nowhere.path().join("no.sock").display()),
    ];
    let cases: [&[&str]; 8] = [
        &["acquire", "job"],
        &["acquire", "job", "--json"],
        &["renew", "job", "--owner", "me"],
        &["release", "job", "--owner", "me"],
        &["release", "job", "--force"],
        &["inspect", "job"],
        &["list"],
        &["list", "--json"],
    ];
    for url in &urls {
        for args in cases {
            let mut cmd = bare_distlock();
            cmd.arg("--redis-url").arg(url).args(args);
            let out = exec(&mut cmd, LIMIT);
            assert_eq!(out.code, 125, "{url} {args:?}: {out:#?}");
            assert_eq!(out.stdout, "", "{url} {args:?}");
            let err = out.stderr.trim_end();
            assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err:?}");
            assert!(err.starts_with("distlock: "), "{args:?}: {err:?}");
            assert!(err.contains(url.as_str()), "names the server: {err:?}");
        }
    }
}

#[test]
fn bad_lock_names_are_usage_errors_for_every_subcommand() {
    let server = RedisServer::start();
    let long = "a".repeat(201);
    let bad = [
        "",
        "has space",
        "{x}",
        "a}b",
        "tab\tname",
        "é",
        "a*b",
        long.as_str(),
    ];
    for name in bad {
        let cases: [Vec<&str>; 6] = [
            vec!["acquire", name],
            vec!["renew", name, "--owner", "me"],
            vec!["release", name, "--owner", "me"],
            vec!["release", name, "--force"],
            vec!["inspect", name],
            vec!["run", name, "--", "true"],
        ];
        for args in cases {
            let out = dl(&server, &args);
            assert_eq!(out.code, 2, "{args:?}: {out:#?}");
            assert_eq!(out.stdout, "", "{args:?}");
            assert!(out.stderr.starts_with("distlock: "), "{out:#?}");
            assert_eq!(out.stderr.trim_end().lines().count(), 1, "{out:#?}");
            assert!(
                out.stderr.contains("A-Z a-z 0-9 . _ - : / @ +"),
                "the message states the rule: {out:#?}"
            );
        }
    }
    // Nothing reached Redis.
    let n: i64 = server.cmd(&["DBSIZE"]);
    assert_eq!(n, 0);
    // The limits themselves are fine.
    ok(dl(&server, &["acquire", &"a".repeat(200)]));
    ok(dl(&server, &["acquire", "A-Z.a_z-0:9/@+"]));
}

#[test]
fn ttl_is_not_a_bare_number_for_acquire_and_renew() {
    let server = RedisServer::start();
    for args in [
        &["acquire", "job", "--ttl", "30"][..],
        &["renew", "job", "--owner", "me", "--ttl", "30"][..],
    ] {
        let out = dl(&server, args);
        assert_eq!(out.code, 2, "{args:?}: {out:#?}");
    }
    assert_eq!(server.get(&key("job")), None);
}

/// README "Options and environment": `-r, --url URL` (alias `--redis-url`), env
/// `DISTLOCK_URL`, else `DISTLOCK_REDIS_URL`. Each case points the losing
/// source at a port where nothing listens, so only the right precedence
/// reaches the server and takes the lock.
#[test]
fn the_url_comes_from_url_then_distlock_url_then_distlock_redis_url() {
    let server = RedisServer::start();
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let url = server.url();
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<&'a str>);
    let cases: [Case; 4] = [
        ("--url", vec![("DISTLOCK_URL", &dead)], vec!["--url", &url]),
        (
            "--redis-url",
            vec![("DISTLOCK_URL", &dead)],
            vec!["--redis-url", &url],
        ),
        ("-r", vec![("DISTLOCK_REDIS_URL", &dead)], vec!["-r", &url]),
        (
            "DISTLOCK_URL",
            vec![("DISTLOCK_URL", &url), ("DISTLOCK_REDIS_URL", &dead)],
            vec![],
        ),
    ];
    for (i, (how, env, opts)) in cases.iter().enumerate() {
        let name = format!("url-{i}");
        let mut cmd = bare_distlock();
        cmd.envs(env.iter().copied())
            .args(opts)
            .args(["acquire", &name]);
        let out = exec(&mut cmd, LIMIT);
        assert_eq!(out.code, 0, "{how}: {out:#?}");
        assert!(
            server.get(&key(&name)).is_some(),
            "{how}: no lease in the server"
        );
    }
    // And the older variable alone still works (every other test uses it).
    let out = dl(&server, &["acquire", "url-old"]);
    assert_eq!(out.code, 0, "{out:#?}");
    // The dead URL alone fails as a connection failure, so the cases above
    // could only pass by choosing the live one.
    let mut cmd = bare_distlock();
    cmd.env("DISTLOCK_URL", &dead).args(["acquire", "url-dead"]);
    assert_eq!(exec(&mut cmd, LIMIT).code, 125);
}
