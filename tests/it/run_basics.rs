//! `distlock run` against a real redis-server: fencing tokens and keys,
//! CMD's environment and stdio, holding and releasing the lease, exit
//! statuses, conflicts and waiting, usage errors, Redis failures, and a
//! stress test for mutual exclusion.

use crate::common::holder;
use crate::common::*;
use holder::Holder;

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// `Out` is tests/it/common's; these checks are this file's own.
impl Out {
    /// The exit code; a signal death of distlock itself fails the test.
    fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("distlock itself was killed by a signal: {self:?}"))
    }

    /// Asserts stderr is exactly one line starting `distlock: ` and returns it.
    fn one_error_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one stderr line, got: {:?}",
            self.stderr
        );
        assert!(
            lines[0].starts_with("distlock: "),
            "stderr line must start with 'distlock: ': {:?}",
            lines[0]
        );
        assert!(self.stderr.ends_with('\n'), "{:?}", self.stderr);
        lines[0]
    }

    /// Asserts nothing of a Rust panic or debug output leaked.
    fn no_rust_noise(&self) {
        for bad in [
            "panicked",
            "RUST_BACKTRACE",
            "stack backtrace",
            "Os {",
            "Error {",
        ] {
            assert!(
                !self.stderr.contains(bad) && !self.stdout.contains(bad),
                "output contains {bad:?}: {self:?}"
            );
        }
    }
}

/// Runs `cmd` to completion (bounded by `LIMIT`), with `stdin` as its
/// input (or /dev/null), capturing stdout and stderr through files so a
/// chatty child can never block on a full pipe.
fn run_with_input(cmd: &mut Command, stdin: Option<&[u8]>) -> Out {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    cmd.stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = cmd.spawn().unwrap();
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(data).unwrap();
        drop(pipe);
    }
    let started = Instant::now();
    let status = wait_with_timeout(&mut child, LIMIT);
    Out {
        code: status.code().unwrap_or(-1),
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap(),
        stderr: std::fs::read_to_string(&err_path).unwrap(),
        took: started.elapsed(),
    }
}

fn run(cmd: &mut Command) -> Out {
    exec(cmd, LIMIT)
}

/// A TCP port on 127.0.0.1 that nothing listens on.
fn closed_port() -> u16 {
    free_port()
}

/// Parses `env` output into (name, value) pairs (values without newlines).
fn parse_env(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn env_value<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// A path in `dir` that CMD creates if it ever runs.
fn marker(dir: &Path) -> PathBuf {
    dir.join("cmd-ran")
}

/// CMD arguments that create `marker` and succeed.
fn touch_cmd(marker: &Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        r#": > "$1""#.into(),
        "sh".into(),
        marker.to_str().unwrap().into(),
    ]
}

// ---------------------------------------------------------------------------
// Fencing tokens and keys

#[test]
fn three_runs_get_increasing_fencing_tokens_and_the_fence_key_holds_the_last() {
    let server = RedisServer::start();
    let mut last = 0u64;
    for _ in 1..=3 {
        let out = run(distlock(&server).args([
            "run",
            "billing",
            "--",
            "sh",
            "-c",
            "echo $DISTLOCK_FENCING_TOKEN",
        ]));
        assert_eq!(out.code(), 0, "{out:?}");
        let token: u64 = out.stdout.trim_end_matches('\n').parse().unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
        assert_eq!(out.stderr, "", "a successful run prints nothing of its own");
    }
    assert_eq!(
        server.get("distlock:{billing}:fence"),
        Some(last.to_string())
    );
    assert_eq!(server.get("distlock:{billing}"), None);
    let ttl: i64 = server.cmd(&["PTTL", "distlock:{billing}:fence"]);
    assert_eq!(ttl, -1, "the fence key never expires");
}

/// guarantees.md §8: a counter at 2^53 or above cannot be counted exactly
/// in a Lua number, so five runs used to get the same token. Such a
/// counter is refused like a key of another type (exit 125, one line
/// naming it, nothing written, CMD never started); a token just below
/// 2^53 is still handed out exactly.
#[test]
fn a_fencing_counter_at_2_pow_53_or_above_is_refused_and_tokens_below_are_exact() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let fence = "distlock:{billing}:fence";
    for counter in [
        "1796417000000000000",
        "9007199254740992",
        "9007199254740991",
    ] {
        let _: () = server.cmd(&["SET", fence, counter]);
        for _ in 0..5 {
            let out = run(distlock(&server)
                .args(["run", "billing", "--"])
                .args(touch_cmd(&marker(dir.path()))));
            assert_eq!(out.code(), 125, "counter {counter}: {out:?}");
            let line = out.one_error_line();
            assert!(line.contains(fence), "names the key: {line}");
            out.no_rust_noise();
            assert!(!marker(dir.path()).exists(), "CMD ran: {out:?}");
            assert_eq!(server.get(fence).as_deref(), Some(counter));
            assert_eq!(server.get("distlock:{billing}"), None, "a lease was left");
            let left: Vec<String> = server.cmd(&["KEYS", "distlock:{billing}*"]);
            assert_eq!(left, [fence], "only the counter: {left:?}");
        }
    }
    // The last exact token: 2^53 - 1.
    let _: () = server.cmd(&["SET", fence, "9007199254740990"]);
    let out = run(distlock(&server).args([
        "run",
        "billing",
        "--",
        "sh",
        "-c",
        "echo $DISTLOCK_FENCING_TOKEN",
    ]));
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "9007199254740991\n");
    let out = run(distlock(&server).args(["inspect", "--json", "billing"]));
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout.contains(r#""fencing_token":9007199254740991"#),
        "{out:?}"
    );
}

#[test]
fn prefix_option_moves_both_keys_and_the_key_cmd_sees() {
    let server = RedisServer::start();
    let out = run(distlock(&server).args([
        "run",
        "--prefix",
        "myapp",
        "jobs",
        "--",
        "sh",
        "-c",
        r#"echo "$DISTLOCK_KEY""#,
    ]));
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "myapp:{jobs}\n");
    assert!(server.get("myapp:{jobs}:fence").is_some());
    assert_eq!(server.get("distlock:{jobs}:fence"), None);
}

#[test]
fn prefix_env_var_moves_the_keys_and_the_option_overrides_it() {
    let server = RedisServer::start();
    let echo_key = ["--", "sh", "-c", r#"echo "$DISTLOCK_KEY""#];

    let out = run(distlock(&server)
        .env("DISTLOCK_PREFIX", "fromenv")
        .args(["run", "jobs"])
        .args(echo_key));
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "fromenv:{jobs}\n");
    let fromenv = server.get("fromenv:{jobs}:fence");
    assert!(fromenv.is_some());

    let out = run(distlock(&server)
        .env("DISTLOCK_PREFIX", "fromenv")
        .args(["--prefix", "fromopt", "run", "jobs"])
        .args(echo_key));
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "fromopt:{jobs}\n");
    assert!(server.get("fromopt:{jobs}:fence").is_some());
    assert_eq!(server.get("fromenv:{jobs}:fence"), fromenv);
    assert_eq!(server.get("distlock:{jobs}:fence"), None);
}

#[test]
fn redis_url_option_overrides_the_env_var_before_or_after_the_subcommand() {
    let server = RedisServer::start();
    let dead = format!("redis://127.0.0.1:{}", closed_port());
    let url = server.url();
    let cmd = ["--", "true"];
    let fence = || -> u64 {
        server
            .get("distlock:{where}:fence")
            .map_or(0, |f| f.parse().unwrap())
    };

    // Env points nowhere, -r at the server: -r wins, in both positions.
    let out = run(distlock(&server)
        .env("DISTLOCK_REDIS_URL", &dead)
        .args(["-r", &url, "run", "where"])
        .args(cmd));
    assert_eq!(out.code(), 0, "-r before run: {out:?}");
    let first = fence();
    assert!(first > 0);
    let out = run(distlock(&server)
        .env("DISTLOCK_REDIS_URL", &dead)
        .args(["run", "where", "-r", &url])
        .args(cmd));
    assert_eq!(out.code(), 0, "-r after run: {out:?}");
    let out = run(distlock(&server)
        .env("DISTLOCK_REDIS_URL", &dead)
        .args(["run", "--redis-url", &url, "where"])
        .args(cmd));
    assert_eq!(out.code(), 0, "--redis-url after run: {out:?}");
    let third = fence();
    assert!(third > first, "three runs at the server");

    // Env at the server, -r nowhere: -r still wins, so distlock fails.
    let out = run(distlock(&server)
        .args(["run", "where", "-r", &dead])
        .args(cmd));
    assert_eq!(out.code(), 125, "{out:?}");
    // Env alone is used when there is no option.
    assert_eq!(fence(), third, "the run at the dead URL took nothing");
    let out = run(distlock(&server).args(["run", "where"]).args(cmd));
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(fence() > third);
}

#[test]
fn global_options_are_accepted_after_the_subcommand_and_its_arguments() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "late", "--prefix", "pp"]);
    // -q and --prefix after the name: the conflict on pp:{late} is silent.
    let out = run(distlock(&server).args(["run", "late", "--prefix", "pp", "-q", "--", "true"]));
    assert_eq!(out.code(), 75, "{out:?}");
    assert_eq!(out.stderr, "");
    // Same options before the subcommand.
    let out = run(distlock(&server).args(["--prefix", "pp", "-q", "run", "late", "--", "true"]));
    assert_eq!(out.code(), 75, "{out:?}");
    assert_eq!(out.stderr, "");
    assert!(holder.finish().success());
}

// ---------------------------------------------------------------------------
// CMD's environment and stdio

#[test]
fn cmd_sees_name_key_owner_and_token_and_the_owner_is_what_redis_holds() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "deploy/prod"]);

    assert_eq!(holder.var("DISTLOCK_NAME"), Some("deploy/prod"));
    assert_eq!(holder.var("DISTLOCK_KEY"), Some("distlock:{deploy/prod}"));
    assert_eq!(
        server.get("distlock:{deploy/prod}:fence"),
        Some(holder.token().to_string())
    );

    let owner = holder.owner().to_owned();
    let parts: Vec<&str> = owner.rsplitn(3, ':').collect();
    assert_eq!(parts.len(), 3, "owner {owner:?} is not host:pid:hex");
    let (hex, pid, host) = (parts[0], parts[1], parts[2]);
    assert_eq!(host, hostname(), "owner {owner:?}");
    assert_eq!(
        pid,
        holder.pid().to_string(),
        "the pid in {owner:?} must be distlock's own"
    );
    assert_eq!(hex.len(), 32, "owner {owner:?}");
    assert!(
        hex.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "owner {owner:?} must end in 32 lowercase hex digits"
    );
    assert_eq!(
        server.get("distlock:{deploy/prod}").as_deref(),
        Some(owner.as_str()),
        "Redis holds CMD's DISTLOCK_OWNER while CMD runs"
    );
    assert!(holder.finish().success());

    // A second acquisition gets a fresh random part.
    let out = run(distlock(&server).args([
        "run",
        "deploy/prod",
        "--",
        "sh",
        "-c",
        r#"echo "$DISTLOCK_OWNER""#,
    ]));
    assert_eq!(out.code(), 0, "{out:?}");
    let second = out.stdout.trim();
    assert_ne!(second, owner);
    assert_ne!(second.rsplit(':').next(), Some(hex));
}

#[test]
fn redis_password_variable_is_removed_from_cmd_env_while_others_pass_through() {
    let server = RedisServer::start();
    let out = run(distlock(&server)
        .env("DISTLOCK_REDIS_PASSWORD", "hunter2")
        .env("SOME_OTHER_VAR", "keep me = as is")
        .env("DISTLOCK_TTL", "20s")
        .args(["run", "envcheck", "--", "env"]));
    assert_eq!(out.code(), 0, "{out:?}");
    let env = parse_env(&out.stdout);
    assert_eq!(env_value(&env, "DISTLOCK_REDIS_PASSWORD"), None, "{env:?}");
    assert!(!out.stdout.contains("hunter2"));
    assert_eq!(env_value(&env, "SOME_OTHER_VAR"), Some("keep me = as is"));
    assert_eq!(env_value(&env, "DISTLOCK_TTL"), Some("20s"));
    assert_eq!(
        env_value(&env, "DISTLOCK_REDIS_URL"),
        Some(server.url().as_str())
    );
    assert_eq!(
        env_value(&env, "PATH").map(str::to_owned),
        std::env::var("PATH").ok()
    );
    assert_eq!(env_value(&env, "DISTLOCK_NAME"), Some("envcheck"));
}

#[test]
fn stdin_and_stdout_are_inherited_so_data_pipes_through_cat() {
    let server = RedisServer::start();
    let data: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    let out = run_with_input(
        distlock(&server).args(["run", "pipe", "--", "cat"]),
        Some(data.as_bytes()),
    );
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stdout == data, "stdout differs from stdin");
    assert_eq!(out.stderr, "");

    // stderr is CMD's too.
    let out = run(distlock(&server).args(["run", "pipe", "--", "sh", "-c", "echo oops >&2"]));
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stderr, "oops\n");
}

/// A caller that closed stdin and stdout (a daemon, `cmd <&- >&-`) must not
/// have distlock's own descriptors land on 0 and 1: CMD would write its
/// output into whatever took fd 1 (the Redis socket, say). std reopens
/// closed standard descriptors on /dev/null before `main`; CMD inherits
/// that.
#[test]
fn closed_stdin_and_stdout_reach_cmd_as_dev_null_not_as_distlock_descriptors() {
    use std::os::unix::process::CommandExt;
    let server = RedisServer::start();
    let mut cmd = distlock(&server);
    cmd.args([
        "run",
        "closed",
        "--",
        "sh",
        "-c",
        // A pipeline: a redirection on the shell itself would change what
        // it shows.
        "readlink /proc/$$/fd/0 /proc/$$/fd/1 | cat >&2",
    ]);
    // SAFETY: close(2) is async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(0);
            libc::close(1);
            Ok(())
        });
    }
    let out = run(&mut cmd);
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stderr, "/dev/null\n/dev/null\n");
}

/// build.rs links the unwinder from libgcc_eh.a, so a run loads libc and
/// nothing else: a second shared library cost every run 0.15 to 0.3 ms
/// (docs/design.md). Read from the running distlock's own map, through CMD.
#[test]
fn a_run_maps_no_shared_library_but_libc() {
    let server = RedisServer::start();
    let mut cmd = distlock(&server);
    cmd.args(["run", "maps", "--", "sh", "-c", "cat /proc/$PPID/maps"]);
    let out = run(&mut cmd);
    assert_eq!(out.code(), 0, "{out:?}");
    let mut libraries: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|path| path.contains(".so"))
        .filter_map(|path| path.rsplit('/').next())
        .filter(|name| !name.starts_with("ld-")) // the dynamic loader
        .collect();
    libraries.dedup();
    assert_eq!(libraries, ["libc.so.6"], "{}", out.stdout);
}

// ---------------------------------------------------------------------------
// Holding and releasing the lease

#[test]
fn lock_is_held_with_a_ttl_at_most_the_lease_while_cmd_runs_and_gone_after() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "held", "--ttl", "10s"]);
    let pttl: i64 = server.cmd(&["PTTL", "distlock:{held}"]);
    assert!(
        pttl > 0 && pttl <= 10_000,
        "PTTL {pttl} must be in (0, 10000] while CMD runs"
    );
    assert_eq!(
        server.get("distlock:{held}").as_deref(),
        Some(holder.owner())
    );
    let token = holder.token();
    let status = holder.finish();
    assert!(status.success(), "{status:?}");
    assert_eq!(server.get("distlock:{held}"), None, "released after CMD");
    let exists: i64 = server.cmd(&["EXISTS", "distlock:{held}", "distlock:{held}:meta"]);
    assert_eq!(exists, 0, "no lease or metadata key left behind");
    assert_eq!(server.get("distlock:{held}:fence"), Some(token.to_string()));
}

/// guarantees.md §4: CMD has `DISTLOCK_OWNER`, so it can call `renew` and
/// `release` as the owner. A renewal only ever extends, and a `release` by
/// owner of a lease that a running `run` holds is refused (exit 1, one
/// line saying so): only the `run` itself ends it, when CMD has exited.
/// With `--min-hold` the refusal comes before the minimum-hold logic, which
/// would otherwise shorten the lease to what is left of the minimum.
#[test]
fn cmd_can_neither_shorten_nor_release_the_lease_its_run_holds() {
    let server = RedisServer::start();
    for (name, extra) in [("held", &[][..]), ("kept", &["--min-hold", "30s"][..])] {
        let mut args = vec!["run", name, "--ttl", "60s"];
        args.extend(extra);
        let mut holder = Holder::start(&server.url(), &args);
        let owner = holder.owner().to_owned();
        let lock = format!("distlock:{{{name}}}");
        let meta = format!("{lock}:meta");
        let as_cmd = |args: &[&str]| {
            run(distlock(&server)
                .env("DISTLOCK_OWNER", &owner)
                .env("DISTLOCK_NAME", name)
                .args(args))
        };
        let whole = |what: &str| {
            assert_eq!(server.get(&lock).as_deref(), Some(owner.as_str()), "{what}");
            for k in [&lock, &meta] {
                let pttl: i64 = server.cmd(&["PTTL", k]);
                assert!(pttl > 50_000, "{name}: {what}: PTTL of {k} is {pttl}");
            }
        };
        whole("to begin with");

        let out = as_cmd(&["renew", name, "--ttl", "1s"]);
        assert_eq!(out.code(), 0, "{out:?}");
        whole("after renew --ttl 1s");
        let out = as_cmd(&["acquire", name, "--owner", &owner, "--ttl", "1s"]);
        assert_eq!(out.code(), 0, "{out:?}");
        whole("after acquire --ttl 1s by the same owner");

        let out = as_cmd(&["release", name]);
        assert_eq!(out.code(), 1, "{name}: {out:?}");
        let line = out.one_error_line();
        assert!(
            line.contains(name) && line.contains("distlock run") && line.contains("--force"),
            "{line}"
        );
        out.no_rust_noise();
        whole("after release by owner");

        let out = run(distlock(&server).args(["run", name, "--", "true"]));
        assert_eq!(out.code(), 75, "a second holder got in: {out:?}");

        assert!(holder.finish().success());
        let exists: i64 = server.cmd(&["EXISTS", &lock, &meta]);
        let kept = !extra.is_empty();
        assert_eq!(
            exists > 0,
            kept,
            "{name}: the run's own release still works"
        );
    }

    // A slot of `run --limit 2` likewise: its expiry (the slot's score,
    // server ms) is not shortened, and a release by owner is refused.
    let mut holder = Holder::start(
        &server.url(),
        &["run", "--limit", "2", "sem", "--ttl", "60s"],
    );
    let owner = holder.owner().to_owned();
    let slots = "distlock:{sem}:slots";
    let left = || {
        let t: Vec<String> = server.cmd(&["TIME"]);
        let now = t[0].parse::<i64>().unwrap() * 1000 + t[1].parse::<i64>().unwrap() / 1000;
        let score: Option<i64> = server.cmd(&["ZSCORE", slots, &owner]);
        score.map(|s| s - now)
    };
    let as_cmd = |args: &[&str]| run(distlock(&server).env("DISTLOCK_OWNER", &owner).args(args));
    let out = as_cmd(&["renew", "--limit", "2", "sem", "--ttl", "1s"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        left().unwrap() > 50_000,
        "renew --ttl 1s shortened the slot: {:?}",
        left()
    );
    let out = as_cmd(&["release", "--limit", "2", "sem"]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(out.one_error_line().contains("distlock run"), "{out:?}");
    assert!(
        left().unwrap() > 50_000,
        "the slot was released: {:?}",
        left()
    );
    assert!(holder.finish().success());
    assert_eq!(left(), None, "the run's own release frees its slot");
    let rest: i64 = server.cmd(&["EXISTS", "distlock:{sem}:tokens"]);
    assert_eq!(rest, 0, "nothing of the slot is left");

    // A lease of `acquire` is released by owner as before.
    let out = run(distlock(&server).args(["acquire", "--owner", "me", "plain"]));
    assert_eq!(out.code(), 0, "{out:?}");
    let out = run(distlock(&server).args(["release", "--owner", "me", "plain"]));
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(server.get("distlock:{plain}"), None);
}

/// guarantees.md §8: Redis does not roll back the writes a script made
/// before a command in it failed. A user who may not PUBLISH used to have
/// the lease deleted by a release that then failed, while the warning said
/// the lease "will expire by itself"; and an acquire that had to tell a
/// waiter `claimed` was left holding a lease it reported as failed. Now
/// the lease's own key is the last thing a script writes: a refused
/// command leaves it as it was, so the warning is true.
#[test]
fn a_user_denied_publish_never_leaves_a_lease_half_released_or_half_taken() {
    let server = RedisServer::start();
    let _: () = server.cmd(&[
        "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish",
    ]);
    let url = format!("redis://nopub:pw@127.0.0.1:{}", server.port);
    let denied = |out: &Out| {
        assert_eq!(out.code(), 125, "{out:?}");
        assert!(out.one_error_line().contains("PUBLISH"), "{out:?}");
        out.no_rust_noise();
    };

    // release by owner, and --force: refused, the lease intact.
    for force in [false, true] {
        let name = format!("rel{force}");
        let out = run(distlock(&server).args(["acquire", "--owner", "me", "--ttl", "60s", &name]));
        assert_eq!(out.code(), 0, "{out:?}");
        let mut cmd = distlock_at(&url);
        if force {
            cmd.args(["release", "--force", &name]);
        } else {
            cmd.args(["release", "--owner", "me", &name]);
        }
        denied(&run(&mut cmd));
        assert_eq!(
            server.get(&key(&name)).as_deref(),
            Some("me"),
            "force {force}"
        );
        let pttl: i64 = server.cmd(&["PTTL", &key(&name)]);
        assert!(pttl > 50_000, "force {force}: PTTL {pttl}");
    }

    // run: CMD's status, and a warning that tells the truth.
    let out = run(distlock_at(&url).args(["run", "--ttl", "60s", "job", "--", "true"]));
    assert_eq!(out.code(), 0, "{out:?}");
    let line = out.one_error_line();
    assert!(
        line.contains("PUBLISH") && line.contains("will expire by itself"),
        "{line}"
    );
    assert!(
        server.get(&key("job")).is_some(),
        "the warning says it will expire: {line}"
    );
    let pttl: i64 = server.cmd(&["PTTL", &key("job")]);
    assert!(pttl > 0, "PTTL {pttl}");

    // acquire while a waiter still holds a turn: telling it `claimed` is
    // refused, and no lease or token was taken.
    let far = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 600_000)
        .to_string();
    let _: i64 = server.cmd(&["ZADD", "distlock:{turn}:turns", &far, "ghost"]);
    denied(&run(distlock_at(&url).args(["acquire", "turn"])));
    assert_eq!(server.get(&key("turn")), None, "a lease was left");
    assert_eq!(server.get(&fence("turn")), None, "a token was burnt");
}

#[test]
fn lock_is_released_when_cmd_fails_with_exit_3() {
    let server = RedisServer::start();
    let out = run(distlock(&server).args(["run", "failing", "--", "sh", "-c", "exit 3"]));
    assert_eq!(out.code(), 3, "{out:?}");
    assert_eq!(server.get("distlock:{failing}"), None);
    assert!(server.get("distlock:{failing}:fence").is_some());
    // The next run gets the lock at once.
    let out = run(distlock(&server).args(["run", "failing", "--", "true"]));
    assert_eq!(out.code(), 0, "{out:?}");
}

#[test]
fn lock_is_released_when_cmd_cannot_be_executed_126() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();

    let out = run(distlock(&server).args(["run", "noexec", "--"]).arg(&script));
    assert_eq!(out.code(), 126, "{out:?}");
    assert_eq!(out.stdout, "");
    out.no_rust_noise();
    assert!(
        out.one_error_line().contains("not-executable.sh"),
        "{out:?}"
    );
    assert!(
        server.get("distlock:{noexec}:fence").is_some(),
        "the lock was acquired before the exec failed"
    );
    assert_eq!(server.get("distlock:{noexec}"), None, "and then released");
}

#[test]
fn lock_is_released_when_cmd_is_not_found_127() {
    let server = RedisServer::start();
    let out = run(distlock(&server).args([
        "run",
        "nocmd",
        "--",
        "/nonexistent/definitely-not-a-command",
    ]));
    assert_eq!(out.code(), 127, "{out:?}");
    assert_eq!(out.stdout, "");
    out.no_rust_noise();
    assert!(
        out.one_error_line().contains("definitely-not-a-command"),
        "{out:?}"
    );
    let first = server.get("distlock:{nocmd}:fence").expect("acquired");
    assert_eq!(server.get("distlock:{nocmd}"), None);

    // Also via PATH lookup.
    let out = run(distlock(&server).args(["run", "nocmd", "--", "definitely-not-a-command-xyz"]));
    assert_eq!(out.code(), 127, "{out:?}");
    let second = server.get("distlock:{nocmd}:fence").expect("acquired");
    assert!(second.parse::<u64>().unwrap() > first.parse().unwrap());
    assert_eq!(server.get("distlock:{nocmd}"), None);
}

/// distlock looks CMD up in PATH itself (it spawns without std's
/// `execvp`): like execvp(3), a file that is there but not executable is
/// skipped for a later one, and reported (126) only when nothing else is
/// found.
#[test]
fn path_search_skips_a_non_executable_match_for_a_later_one_as_execvp_does() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    for d in [&first, &second] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(first.join("dl-tool"), "#!/bin/sh\necho first\n").unwrap();
    std::fs::set_permissions(
        first.join("dl-tool"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(second.join("dl-tool"), "#!/bin/sh\necho second \"$@\"\n").unwrap();
    std::fs::set_permissions(
        second.join("dl-tool"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let path = |dirs: &[&Path]| {
        let mut p: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        p.push(std::env::var("PATH").unwrap());
        p.join(":")
    };

    let out = run(distlock(&server)
        .env(
            "PATH",
            path(&[&dir.path().join("missing"), &first, &second]),
        )
        .args(["run", "pathsearch", "--", "dl-tool", "a b"]));
    assert_eq!(out.code(), 0, "{out:?}");
    assert_eq!(out.stdout, "second a b\n");

    let out = run(distlock(&server).env("PATH", path(&[&first])).args([
        "run",
        "pathsearch",
        "--",
        "dl-tool",
    ]));
    assert_eq!(out.code(), 126, "{out:?}");
    assert_eq!(out.stdout, "");
    out.no_rust_noise();
    let line = out.one_error_line();
    assert!(
        line.contains("dl-tool") && line.contains("ermission denied"),
        "{line}"
    );
    assert_eq!(server.get("distlock:{pathsearch}"), None, "released");
}

/// An executable file that is not a binary and has no `#!` line runs with
/// /bin/sh, as execvp(3) runs it, by path and through PATH, and its exit
/// status is CMD's.
#[test]
fn executable_script_without_a_shebang_runs_with_bin_sh() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("no-shebang");
    std::fs::write(&script, "echo \"ran $# $1\"\nexit 7\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

    let out = run(distlock(&server)
        .args(["run", "script", "--"])
        .arg(&script)
        .arg("x y"));
    assert_eq!(out.code(), 7, "{out:?}");
    assert_eq!(out.stdout, "ran 1 x y\n");

    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    let out = run(distlock(&server)
        .env("PATH", path)
        .args(["run", "script", "--", "no-shebang"]));
    assert_eq!(out.code(), 7, "{out:?}");
    assert_eq!(out.stdout, "ran 0 \n");
}

/// Variables distlock sets for CMD replace a caller's variables of the same
/// name (a `distlock run` inside another one): CMD sees each exactly once,
/// with the inner lock's values.
#[test]
fn distlock_variables_replace_the_callers_and_appear_once() {
    let server = RedisServer::start();
    let out = run(distlock(&server)
        .env("DISTLOCK_NAME", "outer")
        .env("DISTLOCK_FENCING_TOKEN", "999")
        .env("DISTLOCK_OWNER", "someone-else")
        .env("DISTLOCK_KEY", "distlock:{outer}")
        .args(["run", "inner", "--", "env"]));
    assert_eq!(out.code(), 0, "{out:?}");
    let env = parse_env(&out.stdout);
    let token = server.get("distlock:{inner}:fence").unwrap();
    for (key, want) in [
        ("DISTLOCK_NAME", "inner"),
        ("DISTLOCK_FENCING_TOKEN", token.as_str()),
        ("DISTLOCK_KEY", "distlock:{inner}"),
    ] {
        let values: Vec<&str> = env
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(values, [want], "{key}: {env:?}");
    }
    let owners = env.iter().filter(|(k, _)| k == "DISTLOCK_OWNER").count();
    assert_eq!(owners, 1, "{env:?}");
    assert_ne!(env_value(&env, "DISTLOCK_OWNER"), Some("someone-else"));
}

// ---------------------------------------------------------------------------
// Exit statuses

#[test]
fn cmd_exit_codes_pass_through_unchanged() {
    let server = RedisServer::start();
    for code in [0, 1, 2, 64, 126, 127, 254, 255] {
        let out = run(distlock(&server).args([
            "run",
            "codes",
            "--",
            "sh",
            "-c",
            &format!("exit {code}"),
        ]));
        assert_eq!(out.code(), code, "sh -c 'exit {code}': {out:?}");
        assert_eq!(out.stderr, "", "exit {code}: distlock adds nothing");
        assert_eq!(
            server.get("distlock:{codes}"),
            None,
            "released after {code}"
        );
    }
}

#[test]
fn cmd_killed_by_signal_n_gives_128_plus_n() {
    let server = RedisServer::start();
    for (sig, code) in [("TERM", 143), ("KILL", 137), ("HUP", 129), ("USR1", 138)] {
        let out = run(distlock(&server).args([
            "run",
            "sig",
            "--",
            "sh",
            "-c",
            &format!("kill -{sig} $$"),
        ]));
        assert_eq!(out.code(), code, "kill -{sig}: {out:?}");
        assert_eq!(server.get("distlock:{sig}"), None, "released after {sig}");
    }
}

// ---------------------------------------------------------------------------
// Conflicts and waiting

#[test]
fn busy_lock_exits_75_without_starting_cmd_and_names_the_full_holder() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "busy"]);
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());

    let out = run(distlock(&server)
        .args(["run", "busy", "--"])
        .args(touch_cmd(&mark)));
    assert_eq!(out.code(), 75, "{out:?}");
    assert!(!mark.exists(), "CMD must not start on a busy lock");
    assert_eq!(out.stdout, "");
    out.no_rust_noise();
    let line = out.one_error_line();
    assert!(
        line.contains(holder.owner()),
        "{line:?} must name the holder {:?}",
        holder.owner()
    );
    // The holder is untouched and no token was burnt.
    assert_eq!(
        server.get("distlock:{busy}").as_deref(),
        Some(holder.owner())
    );
    assert_eq!(
        server.get("distlock:{busy}:fence"),
        Some(holder.token().to_string())
    );
    assert!(holder.finish().success());
}

#[test]
fn conflict_exit_code_option_changes_the_busy_status() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "busy"]);
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());
    for (args, code) in [
        (vec!["-E", "0"], 0),
        (vec!["-E", "9"], 9),
        (vec!["--conflict-exit-code", "200"], 200),
    ] {
        let out = run(distlock(&server)
            .args(["run", "busy"])
            .args(&args)
            .arg("--")
            .args(touch_cmd(&mark)));
        assert_eq!(out.code(), code, "{args:?}: {out:?}");
        assert!(!mark.exists(), "{args:?}: CMD must not start");
        assert_eq!(out.stdout, "");
        assert!(out.one_error_line().contains(holder.owner()));
    }
    assert!(holder.finish().success());
}

#[test]
fn quiet_silences_the_busy_line() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "busy"]);
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());
    for q in ["-q", "--quiet"] {
        let out = run(distlock(&server)
            .args(["run", "busy", q, "--"])
            .args(touch_cmd(&mark)));
        assert_eq!(out.code(), 75, "{out:?}");
        assert_eq!(out.stderr, "", "{q} must silence the conflict line");
        assert_eq!(out.stdout, "");
        assert!(!mark.exists());
    }
    assert!(holder.finish().success());
}

#[test]
fn wait_300ms_on_a_held_lock_gives_up_with_75_after_at_least_300ms() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "slow"]);
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());
    let start = Instant::now();
    let out = run(distlock(&server)
        .args(["run", "--wait", "300ms", "slow", "--"])
        .args(touch_cmd(&mark)));
    let took = start.elapsed();
    assert_eq!(out.code(), 75, "{out:?}");
    assert!(!mark.exists());
    assert!(took >= Duration::from_millis(300), "gave up after {took:?}");
    assert!(took < Duration::from_secs(3), "gave up only after {took:?}");
    assert!(out.one_error_line().contains(holder.owner()), "{out:?}");
    assert!(holder.finish().success());
}

/// How many acquire attempts (script calls) Redis has served so far.
fn script_calls(server: &RedisServer) -> u64 {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|s| s.split(',').next())
        .map(|n| n.parse::<u64>().unwrap())
        .sum()
}

/// Starts a `--wait` distlock on a held lock whose CMD prints its token,
/// and returns once it has been refused at least `attempts` times.
fn start_waiter(server: &RedisServer, name: &str, wait: &str, out: &Path, attempts: u64) -> Child {
    let before = script_calls(server);
    let child = distlock(server)
        .args(["run", "--wait", wait, name, "--", "sh", "-c"])
        .arg(r#"echo "$DISTLOCK_FENCING_TOKEN" > "$1.tmp" && mv "$1.tmp" "$1""#)
        .arg("sh")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(LIMIT, || script_calls(server) >= before + attempts),
        "the waiter never tried to acquire"
    );
    assert!(
        !out.exists(),
        "the waiter must not run while the lock is held"
    );
    child
}

#[test]
fn wait_5s_acquires_once_the_holder_releases_with_the_next_token() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "queue"]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let mut waiter = start_waiter(&server, "queue", "5s", &token_file, 1);

    assert!(holder.finish().success());
    let status = wait_with_timeout(&mut waiter, LIMIT);
    assert_eq!(status.code(), Some(0), "the waiter must acquire and run");
    let got = wait_for_line(&token_file, LIMIT).expect("waiter's CMD ran");
    assert!(got.parse::<u64>().unwrap() > first, "{got} after {first}");
    assert_eq!(server.get("distlock:{queue}"), None);
    assert_eq!(server.get("distlock:{queue}:fence"), Some(got));
}

/// guarantees.md §5: "A waiter must notice a release promptly (milliseconds,
/// not a polling period), and must not hammer Redis while waiting". The
/// mechanism, not the milliseconds (those are measured by `cargo bench`):
/// a waiter subscribes and queues, then sends nothing while the holder
/// holds the lock, and the release itself wakes it.
#[test]
fn waiter_sends_nothing_while_it_waits_and_is_woken_by_the_release() {
    let server = RedisServer::start();
    let mut holder = Holder::start(&server.url(), &["run", "prompt"]);
    let first = holder.token();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let mut waiter = start_waiter(&server, "prompt", "forever", &token_file, 2);
    // Queued, and subscribed to its own wake-up channel.
    assert!(wait_until(LIMIT, || {
        server.cmd::<u64>(&["ZCARD", "distlock:{prompt}:queue"]) == 1
    }));
    let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", "distlock:{prompt}:wake:*"]);
    assert_eq!(channels.len(), 1, "one wake-up channel: {channels:?}");
    // Watch for half a second: a poller with any backoff that starts below
    // the holder's 30s TTL would try several times in that window. (An
    // absence cannot be awaited; this is an observation window, not a
    // synchronisation.)
    let calls = script_calls(&server);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(script_calls(&server), calls, "the waiter polled Redis");
    assert!(!token_file.exists());
    // The release wakes it: it runs with the next token and exits.
    assert!(holder.finish().success());
    let got = wait_for_line(&token_file, LIMIT).expect("the waiter's CMD ran");
    assert!(got.parse::<u64>().unwrap() > first, "{got} after {first}");
    assert!(wait_with_timeout(&mut waiter, LIMIT).success());
    assert_eq!(server.cmd::<u64>(&["EXISTS", "distlock:{prompt}:queue"]), 0);
}

// ---------------------------------------------------------------------------
// Usage errors

/// Runs distlock with `args` against a closed port (a usage error must be
/// found before any connection) and asserts a clean usage error; returns
/// the one line.
fn usage_error(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());
    let mut cmd = bare_distlock();
    cmd.env(
        "DISTLOCK_REDIS_URL",
        format!("redis://127.0.0.1:{}", closed_port()),
    )
    .env_remove("RUST_BACKTRACE")
    .env("MARK", &mark)
    .args(args);
    let out = run(&mut cmd);
    assert_eq!(out.code(), 2, "{args:?}: {out:?}");
    assert_eq!(out.stdout, "", "{args:?}");
    out.no_rust_noise();
    assert!(!mark.exists(), "{args:?}: CMD must not run");
    out.one_error_line().to_owned()
}

/// CMD for usage-error cases: would create $MARK if it ever ran.
const MARK_CMD: [&str; 4] = ["--", "sh", "-c", r#": > "$MARK""#];

fn run_args<'a>(before_cmd: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["run"];
    v.extend_from_slice(before_cmd);
    v.extend_from_slice(&MARK_CMD);
    v
}

#[test]
fn bad_lock_names_are_usage_errors_that_state_the_rule() {
    let long = "a".repeat(201);
    for name in [
        "",
        "has space",
        "{x}",
        "a}b",
        "a{b",
        "é",
        "tab\tname",
        "a*b",
        &long,
    ] {
        let line = usage_error(&run_args(&[name]));
        assert!(
            line.contains("A-Z a-z 0-9 . _ - : / @ +") && line.contains("200"),
            "{name:?}: the message must state the rule: {line:?}"
        );
    }
}

#[test]
fn lock_names_of_200_characters_and_every_allowed_character_are_accepted() {
    let server = RedisServer::start();
    let long = "a".repeat(200);
    for name in [long.as_str(), "A-Za-z0-9._-:/@+", "repo:main", "x"] {
        let out = run(distlock(&server).args([
            "run",
            name,
            "--",
            "sh",
            "-c",
            r#"echo "$DISTLOCK_NAME""#,
        ]));
        assert_eq!(out.code(), 0, "{name:?}: {out:?}");
        assert_eq!(out.stdout, format!("{name}\n"));
        assert!(server.get(&format!("distlock:{{{name}}}:fence")).is_some());
    }
}

#[test]
fn durations_without_a_unit_are_usage_errors() {
    for args in [
        ["--ttl", "30"],
        ["--wait", "5"],
        ["--renew-every", "10"],
        ["--kill-grace", "1"],
        ["--ttl", "soon"],
    ] {
        let mut a = args.to_vec();
        a.push("name");
        let line = usage_error(&run_args(&a));
        assert!(line.contains(args[1]), "{args:?}: {line:?}");
    }
    // The env var is checked the same way.
    let dir = tempfile::tempdir().unwrap();
    let out = run(bare_distlock()
        .env("DISTLOCK_TTL", "30")
        .env(
            "DISTLOCK_REDIS_URL",
            format!("redis://127.0.0.1:{}", closed_port()),
        )
        .env("MARK", marker(dir.path()))
        .args(run_args(&["name"])));
    assert_eq!(out.code(), 2, "DISTLOCK_TTL=30: {out:?}");
    out.one_error_line();
}

/// A lease Redis would count as zero milliseconds is refused the same way
/// by every subcommand that takes one: the check exists once, in config.
#[test]
fn a_ttl_under_one_millisecond_is_the_same_usage_error_everywhere() {
    for ttl in ["0s", "500us"] {
        for args in [
            run_args(&["--ttl", ttl, "t"]),
            vec!["acquire", "--ttl", ttl, "t"],
            vec!["hold", "--ttl", ttl, "t"],
        ] {
            let line = usage_error(&args);
            assert_eq!(line, "distlock: --ttl must be at least 1ms", "{args:?}");
        }
    }
}

#[test]
fn clashing_timings_are_usage_errors_that_name_the_values() {
    // renew-every more than half the ttl.
    let line = usage_error(&run_args(&["--ttl", "10s", "--renew-every", "6s", "t"]));
    assert!(
        line.contains("6s") && line.contains("10s"),
        "must name --renew-every 6s and --ttl 10s: {line:?}"
    );
    // renew-every + kill-grace + margin >= ttl (each fine on its own).
    let line = usage_error(&run_args(&[
        "--ttl",
        "10s",
        "--renew-every",
        "5s",
        "--kill-grace",
        "5s",
        "t",
    ]));
    assert!(
        line.contains("--renew-every 5s")
            && line.contains("--kill-grace 5s")
            && line.contains("10s"),
        "must name the clashing values: {line:?}"
    );
    // The margin (ttl/100 + 5ms) alone tips it over: 5s + 4.8s + 105ms.
    let line = usage_error(&run_args(&[
        "--ttl",
        "10s",
        "--renew-every",
        "5s",
        "--kill-grace",
        "4900ms",
        "t",
    ]));
    assert!(line.contains("10s"), "{line:?}");
    // A default kill-grace can clash too: ttl 1s, renew 500ms, grace 250ms,
    // margin 15ms is fine; renew 500ms with grace 490ms is not.
    usage_error(&run_args(&[
        "--ttl",
        "1s",
        "--renew-every",
        "500ms",
        "--kill-grace",
        "490ms",
        "t",
    ]));
}

#[test]
fn timings_just_inside_the_limits_are_accepted() {
    let server = RedisServer::start();
    // renew-every == ttl/2 and 5s + 4800ms + 105ms < 10s.
    let out = run(distlock(&server).args([
        "run",
        "--ttl",
        "10s",
        "--renew-every",
        "5s",
        "--kill-grace",
        "4800ms",
        "ok",
        "--",
        "true",
    ]));
    assert_eq!(out.code(), 0, "{out:?}");
}

#[test]
fn bad_kill_signal_exit_code_and_missing_cmd_are_usage_errors() {
    for sig in ["NOPE", "STOP", "CONT", "0", "99"] {
        let line = usage_error(&run_args(&["--kill-signal", sig, "n"]));
        assert!(line.contains(sig), "{sig}: {line:?}");
    }
    for code in ["256", "-1", "x"] {
        usage_error(&run_args(&["-E", code, "n"]));
    }
    // Missing CMD: no `--`, or nothing after it.
    usage_error(&["run", "n"]);
    usage_error(&["run", "n", "--"]);
    // Missing NAME.
    usage_error(&["run", "--", "true"]);
}

#[test]
fn unknown_options_are_usage_errors() {
    let line = usage_error(&run_args(&["--bogus", "n"]));
    assert!(line.contains("--bogus"), "{line:?}");
    usage_error(&["--bogus", "run", "n", "--", "true"]);
    usage_error(&["frobnicate"]);
}

#[test]
fn bad_redis_url_schemes_are_usage_errors_without_the_password() {
    for url in [
        "http://user:hunter2@127.0.0.1:6379",
        "127.0.0.1:6379",
        "hunter2",
        "redis//127.0.0.1",
    ] {
        let line = usage_error(&["-r", url, "run", "n", "--", "sh", "-c", r#": > "$MARK""#]);
        assert!(!line.contains("hunter2"), "{url}: {line:?}");
    }
    // Also from the environment.
    let dir = tempfile::tempdir().unwrap();
    let out = run(bare_distlock()
        .env("DISTLOCK_REDIS_URL", "ftp://u:hunter2@127.0.0.1/")
        .env("MARK", marker(dir.path()))
        .args(run_args(&["n"])));
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(!out.stderr.contains("hunter2"));
    out.one_error_line();
}

// ---------------------------------------------------------------------------
// Redis failures

#[test]
fn unreachable_redis_exits_125_without_starting_cmd() {
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());
    let port = closed_port();
    let out = run(bare_distlock()
        .env_remove("RUST_BACKTRACE")
        .args(["-r", &format!("redis://127.0.0.1:{port}"), "run", "n", "--"])
        .args(touch_cmd(&mark)));
    assert_eq!(out.code(), 125, "{out:?}");
    assert!(!mark.exists(), "CMD must not start without the lock");
    assert_eq!(out.stdout, "");
    out.no_rust_noise();
    let line = out.one_error_line();
    assert!(
        line.contains(&port.to_string()),
        "name the server: {line:?}"
    );

    // -q does not silence the error line of a 125.
    let out = run(bare_distlock()
        .args([
            "-q",
            "-r",
            &format!("redis://127.0.0.1:{port}"),
            "run",
            "n",
            "--",
        ])
        .args(touch_cmd(&mark)));
    assert_eq!(out.code(), 125, "{out:?}");
    out.one_error_line();
    assert!(!mark.exists());
}

#[test]
fn password_in_an_unreachable_url_never_appears_in_output() {
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());
    let url = format!("redis://user:hunter2@127.0.0.1:{}", closed_port());
    for verbose in [&[][..], &["-v"][..], &["-vvv"][..]] {
        let out = run(bare_distlock()
            .args(verbose)
            .args(["-r", &url, "run", "n", "--"])
            .args(touch_cmd(&mark)));
        assert_eq!(out.code(), 125, "{out:?}");
        assert!(!out.stdout.contains("hunter2"), "{out:?}");
        assert!(!out.stderr.contains("hunter2"), "{out:?}");
        out.one_error_line();
        assert!(!mark.exists());
    }
    // Same through the environment.
    let out = run(bare_distlock()
        .env("DISTLOCK_REDIS_URL", &url)
        .args(["run", "n", "--"])
        .args(touch_cmd(&mark)));
    assert_eq!(out.code(), 125, "{out:?}");
    assert!(!out.stderr.contains("hunter2") && !out.stdout.contains("hunter2"));
}

#[test]
fn wrong_password_exits_125_without_showing_it_and_the_right_one_works() {
    let server = RedisServer::start();
    let _: String = server.cmd(&["CONFIG", "SET", "requirepass", "s3cr3t-right"]);
    let dir = tempfile::tempdir().unwrap();
    let mark = marker(dir.path());
    let port = server.port;

    for url in [
        format!("redis://:wr0ng-pass@127.0.0.1:{port}"),
        format!("redis://default:wr0ng-pass@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let out = run(bare_distlock()
            .env_remove("RUST_BACKTRACE")
            .args(["-r", &url, "run", "auth", "--"])
            .args(touch_cmd(&mark)));
        assert_eq!(out.code(), 125, "{url}: {out:?}");
        assert!(!mark.exists(), "{url}: CMD must not start");
        for secret in ["wr0ng-pass", "s3cr3t-right"] {
            assert!(!out.stderr.contains(secret), "{url}: {out:?}");
            assert!(!out.stdout.contains(secret), "{url}: {out:?}");
        }
        out.no_rust_noise();
        out.one_error_line();
    }

    let out = run(bare_distlock()
        .args([
            "-r",
            &format!("redis://:s3cr3t-right@127.0.0.1:{port}"),
            "run",
            "auth",
            "--",
        ])
        .args(touch_cmd(&mark)));
    assert_eq!(out.code(), 0, "the right password works: {out:?}");
    assert!(mark.exists());
    assert!(!out.stderr.contains("s3cr3t-right"));

    let mut c = redis::Client::open(format!("redis://:s3cr3t-right@127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let fence: Option<String> = redis::cmd("GET")
        .arg("distlock:{auth}:fence")
        .query(&mut c)
        .unwrap();
    assert!(fence.is_some());
}

// ---------------------------------------------------------------------------
// Mutual exclusion under contention

#[test]
fn concurrent_runs_never_overlap_and_tokens_increase_in_start_order() {
    const PROCS: usize = 6;
    const RUNS: usize = 5;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = r#"echo "start $DISTLOCK_FENCING_TOKEN $(date +%s%N)" >> "$1"
echo "end $DISTLOCK_FENCING_TOKEN $(date +%s%N)" >> "$1""#;

    std::thread::scope(|s| {
        for _ in 0..PROCS {
            s.spawn(|| {
                for _ in 0..RUNS {
                    let mut child = distlock(&server)
                        .args(["run", "--wait", "forever", "--ttl", "5s", "stress"])
                        .args(["--", "sh", "-c", script, "sh"])
                        .arg(&log)
                        .stdin(Stdio::null())
                        .spawn()
                        .unwrap();
                    let st = wait_with_timeout(&mut child, Duration::from_secs(20));
                    assert_eq!(st.code(), Some(0), "a stress run failed");
                }
            });
        }
    });

    let text = std::fs::read_to_string(&log).unwrap();
    let mut starts: Vec<(u128, u64)> = Vec::new();
    let mut ends = std::collections::HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 3, "bad log line {line:?}");
        let token: u64 = f[1].parse().unwrap();
        let ns: u128 = f[2].parse().unwrap();
        match f[0] {
            "start" => starts.push((ns, token)),
            "end" => assert!(
                ends.insert(token, ns).is_none(),
                "token {token} ended twice"
            ),
            _ => panic!("bad log line {line:?}"),
        }
    }
    assert_eq!(starts.len(), PROCS * RUNS, "{text}");
    let distinct: BTreeSet<u64> = starts.iter().map(|&(_, t)| t).collect();
    assert_eq!(distinct.len(), PROCS * RUNS, "30 distinct tokens");
    starts.sort();
    for pair in starts.windows(2) {
        let ((s1, t1), (s2, t2)) = (pair[0], pair[1]);
        let e1 = ends[&t1];
        assert!(s1 <= e1, "token {t1} ended before it started");
        assert!(
            e1 < s2,
            "token {t1} [{s1}, {e1}] overlaps token {t2} starting at {s2}"
        );
        assert!(t1 < t2, "token {t2} started after {t1}, so must be larger");
    }
    assert_eq!(server.get("distlock:{stress}"), None);
    assert_eq!(
        server.get("distlock:{stress}:fence"),
        distinct.last().map(u64::to_string)
    );
}
