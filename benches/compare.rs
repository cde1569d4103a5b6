//! `cargo bench --bench compare`: distlock side by side with bare `true` and
//! `flock(1)`, in one run, on one machine.
//!
//! It starts its own `redis-server` (free loopback port, no persistence)
//! and needs nothing else but `flock` (util-linux) and `true` on `PATH`.
//! Every number is a whole-process timing of the release-built binary
//! (`CARGO_BIN_EXE_distlock`, built with the `bench` profile):
//!
//! 1. **Overhead**: `true`, `flock LOCKFILE true` and
//!    `distlock run bench -- true`, interleaved (a new shuffled order
//!    every round); spawn to reaped exit, p50/p95. Two floor rows
//!    run in the same rounds: *fork+exec*, this binary re-executed as a
//!    helper that exits at once (what starting any Rust process costs,
//!    before it does anything), and *connect + PING*, the same helper
//!    opening a TCP connection to the bench's redis-server and doing one
//!    PING round trip (the least any wrapper that asks Redis can do).
//! 2. **Handoff**: a holder's CMD writes CLOCK_MONOTONIC just before it
//!    exits; a waiter, already blocked (`flock` in the kernel, distlock
//!    queued in Redis), runs a CMD that writes CLOCK_MONOTONIC as it starts.
//!    Handoff = waiter start − holder end. flock and distlock alternate.
//! 3. **Contention**: 8 workers × 25 runs on one lock (`--wait forever`),
//!    CMD logs start/end/token; rate = runs / wall time; checks that no two
//!    runs overlap, that fencing tokens increase strictly in start order,
//!    and how many other acquisitions a run waited behind (from just before
//!    its process was spawned to its CMD's start). Both tools alternate,
//!    one 8×25 block at a time. One more, untimed, distlock block runs with
//!    a `MONITOR` connection to check FIFO from the moment each waiter
//!    joined the queue, as Redis saw it.
//! 4. **Redis load from 4 blocked waiters**: `INFO stats`
//!    `total_commands_processed` sampled over ~2s while a holder
//!    (`--ttl 60s`, so no renewal falls in the window) keeps 4 queued
//!    waiters blocked; the INFO calls themselves are subtracted.
//! 5. **Peak RSS**: `VmHWM` of the distlock (and flock) process while it
//!    holds the lock.
//!
//! The CMDs are this very binary, re-executed with a helper argv, so that no
//! shell or `date` fork blurs the timestamps.
//!
//! Knobs: `DISTLOCK_BENCH_N` (overhead rounds, default 200),
//! `DISTLOCK_BENCH_HANDOFF` (handoff rounds per tool, default 50),
//! `DISTLOCK_BENCH_CONTENTION_ROUNDS` (8×25 blocks per tool, default 2),
//! `DISTLOCK_BENCH_BEFORE` (the path of another distlock binary, e.g. one
//! built from an earlier commit: it runs as one more tool, interleaved with
//! the others in the overhead, handoff and contention parts, so a before
//! and after are measured under the same load).
//!
//! `DISTLOCK_BENCH_ETCD=0` leaves the etcd rows out; `DISTLOCK_BENCH_ETCD=only`
//! runs nothing but them (overhead, handoff, contention and etcd's requests
//! per run, for distlock on etcd and `etcdctl lock`).
//!
//! `DISTLOCK_BENCH_SCALE` (a list of queue lengths, e.g. `1,10,100,1000`)
//! runs the scale parts instead of these five: N waiters on one lock
//! against flock(1) and `etcdctl lock`, renewal load with 1,000 names
//! held, and `list` over 100,000 held locks (see `compare/scale.rs`).
//!
//! Exit status: 0 when everything ran, even if a performance target was
//! missed (the table says PASS/FAIL); 1 when a safety check failed (two
//! runs overlapped, or tokens went backwards).

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// argv[1] that turns this binary into a CMD helper.
const HELPER: &str = "__distlock_bench_helper";

const DISTLOCK: &str = env!("CARGO_BIN_EXE_distlock");

#[path = "compare/scale.rs"]
mod scale;

#[path = "compare/etcd.rs"]
mod etcd;
use etcd::Etcd;

const WORKERS: usize = 8;
const RUNS_PER_WORKER: usize = 25;
const LOAD_WAITERS: usize = 4;
const LOAD_WINDOW: Duration = Duration::from_secs(2);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(HELPER) {
        helper(&args[2..]);
    }
    let started = Instant::now();
    let n = env_usize("DISTLOCK_BENCH_N", 200);
    let handoff_rounds = env_usize("DISTLOCK_BENCH_HANDOFF", 50);
    let contention_rounds = env_usize("DISTLOCK_BENCH_CONTENTION_ROUNDS", 2);

    let redis = RedisServer::start();
    let dir = redis.dir.path().join("work");
    fs::create_dir_all(&dir).unwrap();
    // Under target/, not $TMPDIR: /tmp may be noexec, or tmpfs (memory,
    // not the disk users run distlock from).
    let bins = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let installed = |from: &Path, name: &str| -> PathBuf {
        let to = bins.path().join(name);
        fs::copy(from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
        to
    };
    let scale: Vec<usize> = std::env::var("DISTLOCK_BENCH_SCALE")
        .map(|v| scale::parse_counts("DISTLOCK_BENCH_SCALE", &v))
        .unwrap_or_default();
    // The scale parts start their own etcd; the everyday ones measure
    // distlock on etcd beside `etcdctl lock` unless told not to.
    let etcd_knob = std::env::var("DISTLOCK_BENCH_ETCD").unwrap_or_default();
    let only_etcd = etcd_knob == "only";
    let etcd = if scale.is_empty() && etcd_knob != "0" {
        match Etcd::start() {
            Ok(e) => Some(e),
            Err(why) => {
                eprintln!("  etcd: not measured: {why}");
                None
            }
        }
    } else {
        None
    };
    let ctx = Ctx {
        url: redis.url(),
        helper: installed(&std::env::current_exe().expect("current_exe"), "helper"),
        distlock: installed(Path::new(DISTLOCK), "distlock"),
        before: std::env::var_os("DISTLOCK_BENCH_BEFORE")
            .map(|b| installed(Path::new(&b), "distlock-before")),
        dir,
        etcd: etcd.as_ref().map(|e| e.endpoint.clone()),
        only_etcd: only_etcd && etcd.is_some(),
    };
    if let Some(e) = &etcd {
        eprintln!("  etcd: {} at {} (data on tmpfs)", e.version(), e.endpoint);
    }
    let mut con = redis.conn();
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut con)
        .ok()
        .and_then(|s| info_field(&s, "redis_version"))
        .unwrap_or_else(|| "?".into());
    eprintln!(
        "distlock bench: {DISTLOCK}\n  redis-server {version} on {}, {} CPUs, load average {}; overhead N={n}, handoff rounds={handoff_rounds}, contention {contention_rounds}×({WORKERS}×{RUNS_PER_WORKER}) per tool",
        ctx.url,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
    );

    if !scale.is_empty() {
        let ok = scale::run(&ctx, &redis, &scale);
        println!(
            "\n(bench ran {:.1}s; load average at the end: {})",
            started.elapsed().as_secs_f64(),
            loadavg()
        );
        drop((redis, bins));
        std::process::exit(if ok { 0 } else { 1 });
    }
    eprintln!("[1/5] overhead …");
    let overhead = bench_overhead(&ctx, n);
    let requests = etcd.as_ref().map(|e| etcd::requests_per_run(&ctx, e));
    eprintln!("[2/5] handoff …");
    let handoff = bench_handoff(&ctx, &redis, etcd.as_ref(), handoff_rounds);
    eprintln!("[3/5] contention …");
    let contention = bench_contention(&ctx, &redis, etcd.as_ref(), contention_rounds);
    if ctx.only_etcd {
        let rate = |t: Tool| {
            contention
                .get(&t)
                .map(|c| c.runs as f64 / c.wall.as_secs_f64())
        };
        let safe = etcd_rows(&overhead, &handoff, &rate, &contention, requests.as_ref());
        println!(
            "\n(etcd rows only: overhead N={n}, handoff rounds={handoff_rounds}, contention {contention_rounds}×({WORKERS}×{RUNS_PER_WORKER}); bench ran {:.1}s; load average at the end: {})",
            started.elapsed().as_secs_f64(),
            loadavg()
        );
        // exit() runs no destructors: the servers and their data dirs
        // (etcd's on tmpfs) go first.
        drop((etcd, redis, bins));
        std::process::exit(if safe { 0 } else { 1 });
    }
    eprintln!("      FIFO check under MONITOR …");
    let fifo = fifo_check(&ctx, &redis);
    eprintln!("[4/5] Redis load of blocked waiters, distlock RSS …");
    let load = bench_load(&ctx, &redis);
    eprintln!("[5/5] flock RSS …");
    let flock_rss = flock_rss(&ctx);
    let elapsed = started.elapsed();

    let ok = report(
        &overhead,
        &handoff,
        &contention,
        requests.as_ref(),
        &fifo,
        &load,
        flock_rss,
        n,
        handoff_rounds,
        contention_rounds,
    );
    println!(
        "\n(bench ran {:.1}s; load average at the end: {})",
        elapsed.as_secs_f64(),
        loadavg()
    );
    drop((etcd, redis, bins));
    if !ok {
        std::process::exit(1);
    }
}

// ---------------------------------------------------------------------------
// The CMD helper: this binary, re-executed.

/// `stamp FILE`: write CLOCK_MONOTONIC ns to FILE.
/// `hold READY GATE [END]`: create READY, wait for GATE to exist, then
/// write CLOCK_MONOTONIC ns to END just before exiting.
/// `log FILE`: append `S`/`E` lines (worker, iteration, token, ns).
/// `work FILE MS`: append `S`/`E` lines (BENCH_ITER, token, ns) around an
/// MS ms sleep. `park READY GATE`: create READY, then poll for GATE every
/// 100 ms (a thousand of them must not keep the CPUs busy).
/// `noop`: exit at once. `ping HOST:PORT`: connect, PING, read +PONG.
fn helper(args: &[String]) -> ! {
    let now = mono_ns();
    match args.first().map(String::as_str) {
        Some("noop") => {}
        Some("ping") => {
            use std::io::Read;
            let mut s = std::net::TcpStream::connect(&args[1]).unwrap();
            s.set_nodelay(true).unwrap();
            s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
            let mut reply = [0u8; 7];
            s.read_exact(&mut reply).unwrap();
            assert_eq!(&reply, b"+PONG\r\n");
        }
        Some("work") => {
            let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "-".into());
            let (i, tok) = (var("BENCH_ITER"), token());
            let mut f = OpenOptions::new()
                .append(true)
                .create(true)
                .open(&args[1])
                .unwrap();
            f.write_all(format!("S {i} {tok} {now}\n").as_bytes())
                .unwrap();
            std::thread::sleep(Duration::from_millis(args[2].parse().unwrap()));
            f.write_all(format!("E {i} {tok} {}\n", mono_ns()).as_bytes())
                .unwrap();
        }
        Some("park") => {
            fs::write(&args[1], "").unwrap();
            while !Path::new(&args[2]).exists() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Some("stamp") => {
            fs::write(&args[1], now.to_string()).unwrap();
        }
        Some("hold") => {
            fs::write(&args[1], "").unwrap();
            let gate = Path::new(&args[2]);
            while !gate.exists() {
                std::thread::sleep(Duration::from_millis(1));
            }
            if let Some(end) = args.get(3) {
                fs::write(end, mono_ns().to_string()).unwrap();
            }
        }
        Some("log") => {
            let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "-".into());
            let (w, i, tok) = (var("BENCH_WORKER"), var("BENCH_ITER"), token());
            let mut f = OpenOptions::new()
                .append(true)
                .create(true)
                .open(&args[1])
                .unwrap();
            // One write(2) per line on an O_APPEND file: lines never mix.
            f.write_all(format!("S {w} {i} {tok} {now}\n").as_bytes())
                .unwrap();
            f.write_all(format!("E {w} {i} {tok} {}\n", mono_ns()).as_bytes())
                .unwrap();
        }
        other => {
            eprintln!("bench helper: unknown mode {other:?}");
            std::process::exit(2);
        }
    }
    std::process::exit(0)
}

/// The CMD's fencing token: distlock's, or the revision `etcdctl lock`
/// exports (its lock key's create revision), or `-`.
fn token() -> String {
    std::env::var("DISTLOCK_FENCING_TOKEN")
        .or_else(|_| std::env::var("ETCD_LOCK_REV"))
        .unwrap_or_else(|_| "-".into())
}

/// CLOCK_MONOTONIC in ns: one clock for every process on the machine.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime fills ts.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ---------------------------------------------------------------------------
// Commands under test.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Tool {
    True,
    /// Floor: this binary as a helper that exits at once.
    Exec,
    /// Floor: the helper doing one connect and PING round trip.
    Ping,
    Flock,
    Distlock,
    /// `DISTLOCK_BENCH_BEFORE`, when set.
    Before,
    /// distlock against the bench's etcd (`etcd://`), when etcd is there.
    DistlockEtcd,
    /// `etcdctl lock`, against the same etcd.
    Etcdctl,
    /// `DISTLOCK_BENCH_BEFORE` on etcd, when both are there.
    BeforeEtcd,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::True => "true",
            Tool::Exec => "fork+exec",
            Tool::Ping => "connect + PING",
            Tool::Flock => "flock",
            Tool::Distlock => "distlock",
            Tool::Before => "distlock-before",
            Tool::DistlockEtcd => "distlock on etcd",
            Tool::Etcdctl => "etcdctl lock",
            Tool::BeforeEtcd => "distlock-before on etcd",
        }
    }
}

#[derive(Clone)]
struct Ctx {
    url: String,
    /// `helper`, `distlock` and `before` are copies of the binaries
    /// measured (this one as the CMD helper), under `target/tmp`: a file
    /// the linker has just written (lld writes through a shared mapping)
    /// sits in the page cache in small pages, and exec maps it with more
    /// page faults than a copy written with write(2), as `cargo install`,
    /// `cp` and dpkg write it. The same bytes measured about 0.1 ms slower
    /// per `run -- true` from `target/release` than from a copy, which
    /// also made any `DISTLOCK_BENCH_BEFORE` copy look faster than the
    /// build under test.
    helper: PathBuf,
    distlock: PathBuf,
    dir: PathBuf,
    before: Option<PathBuf>,
    /// The bench's etcd client URL (`http://127.0.0.1:PORT`), when etcd
    /// and etcdctl are on PATH: the etcd tools then run beside the others.
    etcd: Option<String>,
    /// `DISTLOCK_BENCH_ETCD=only`: the etcd tools alone.
    only_etcd: bool,
}

impl Ctx {
    /// `flock LOCKFILE CMD…` or `distlock run NAME [opts] -- CMD…`, with a
    /// clean DISTLOCK_* environment pointed at our server. Quiet stdio.
    fn locked(&self, tool: Tool, lock: &str, opts: &[&str], cmd: &[&str]) -> Command {
        let mut c = match tool {
            Tool::True => {
                let mut c = Command::new(cmd[0]);
                c.args(&cmd[1..]);
                c
            }
            Tool::Exec | Tool::Ping => {
                let mut c = Command::new(&self.helper);
                c.arg(HELPER);
                if tool == Tool::Exec {
                    c.arg("noop");
                } else {
                    c.args(["ping", self.url.trim_start_matches("redis://")]);
                }
                c
            }
            Tool::Flock => {
                let mut c = Command::new("flock");
                c.arg(self.dir.join(format!("{lock}.lock"))).args(cmd);
                c
            }
            Tool::Distlock | Tool::Before | Tool::DistlockEtcd | Tool::BeforeEtcd => {
                let mut c = match (tool, &self.before) {
                    (Tool::Before | Tool::BeforeEtcd, Some(before)) => Command::new(before),
                    _ => Command::new(&self.distlock),
                };
                c.args(["run", lock]).args(opts).arg("--").args(cmd);
                c
            }
            // Waits by default; distlock's options mean nothing to it.
            Tool::Etcdctl => {
                let mut c = Command::new("etcdctl");
                c.env("ETCDCTL_API", "3")
                    .env("ETCDCTL_ENDPOINTS", self.etcd.as_deref().expect("etcd"))
                    .args(["lock", lock])
                    .args(cmd);
                c
            }
        };
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("DISTLOCK_") {
                c.env_remove(k);
            }
        }
        c.env("DISTLOCK_REDIS_URL", &self.url);
        if matches!(tool, Tool::DistlockEtcd | Tool::BeforeEtcd) {
            let endpoint = self.etcd.as_deref().expect("etcd");
            c.env("DISTLOCK_URL", endpoint.replacen("http://", "etcd://", 1));
        }
        c.stdin(Stdio::null()).stdout(Stdio::null());
        c
    }

    /// The helper as a CMD: `[exe, HELPER, mode, args…]`.
    fn helper_cmd<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec![self.helper.to_str().unwrap(), HELPER];
        v.extend_from_slice(args);
        v
    }

    /// The locking tools, in round `r`'s order (rotated every round).
    fn lockers(&self, r: usize) -> Vec<Tool> {
        let mut tools = vec![Tool::Flock, Tool::Distlock];
        if self.only_etcd {
            tools.clear();
        }
        if self.before.is_some() && !self.only_etcd {
            tools.push(Tool::Before);
        }
        if self.etcd.is_some() {
            tools.extend([Tool::DistlockEtcd, Tool::Etcdctl]);
            if self.before.is_some() {
                tools.push(Tool::BeforeEtcd);
            }
        }
        let n = tools.len();
        tools.rotate_left(r % n);
        tools
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

fn check(tool: Tool, what: &str, st: ExitStatus) {
    assert!(st.success(), "{} ({what}) failed: {st}", tool.name());
}

// ---------------------------------------------------------------------------
// 1. Overhead.

fn bench_overhead(ctx: &Ctx, n: usize) -> HashMap<Tool, Vec<f64>> {
    let mut tools = vec![
        Tool::True,
        Tool::Exec,
        Tool::Ping,
        Tool::Flock,
        Tool::Distlock,
    ];
    if ctx.before.is_some() {
        tools.push(Tool::Before);
    }
    if ctx.only_etcd {
        tools.clear();
    }
    if ctx.etcd.is_some() {
        tools.extend([Tool::DistlockEtcd, Tool::Etcdctl]);
        if ctx.before.is_some() {
            tools.push(Tool::BeforeEtcd);
        }
    }
    let mut samples: HashMap<Tool, Vec<f64>> = HashMap::new();
    let warmup = 5;
    let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
    for i in 0..n + warmup {
        // A new order every round, not a rotation: rotated, each tool
        // always ran right after the same other tool, and a run right
        // after a distlock (its code and libc's still in the caches)
        // measured 0.05 ms faster, so two copies of one binary differed
        // by that much.
        shuffle(&mut tools, &mut rng);
        for &tool in &tools {
            let mut cmd = ctx.locked(tool, "bench", &[], &["true"]);
            let t = Instant::now();
            let st = cmd.status().expect("spawn");
            let ms = t.elapsed().as_secs_f64() * 1e3;
            check(tool, "overhead", st);
            if i >= warmup {
                samples.entry(tool).or_default().push(ms);
            }
        }
    }
    samples
}

// ---------------------------------------------------------------------------
// 2. Handoff.

/// Hand-off gaps (ms) per tool, and the private memory (RssAnon, KiB) of
/// each waiter once it was blocked.
struct Handoff {
    gaps: HashMap<Tool, Vec<f64>>,
    waiter_kib: HashMap<Tool, Vec<f64>>,
}

fn bench_handoff(ctx: &Ctx, redis: &RedisServer, etcd: Option<&Etcd>, rounds: usize) -> Handoff {
    let mut out = Handoff {
        gaps: HashMap::new(),
        waiter_kib: HashMap::new(),
    };
    let mut con = redis.conn();
    for r in 0..rounds {
        for tool in ctx.lockers(r) {
            let (ms, kib) = handoff_once(ctx, &mut con, etcd, tool, r);
            out.gaps.entry(tool).or_default().push(ms);
            out.waiter_kib.entry(tool).or_default().push(kib as f64);
        }
    }
    out
}

fn handoff_once(
    ctx: &Ctx,
    con: &mut redis::Connection,
    etcd: Option<&Etcd>,
    tool: Tool,
    round: usize,
) -> (f64, u64) {
    let tag = format!("handoff-{}-{round}", tool.name());
    let (ready, gate, end, start) = (
        ctx.path(&format!("{tag}.ready")),
        ctx.path(&format!("{tag}.gate")),
        ctx.path(&format!("{tag}.end")),
        ctx.path(&format!("{tag}.start")),
    );
    let mut holder = ctx
        .locked(
            tool,
            "handoff",
            &[],
            &ctx.helper_cmd(&["hold", &ready, &gate, &end]),
        )
        .spawn()
        .unwrap();
    wait_until(&format!("{} holder to start", tool.name()), || {
        Path::new(&ready).exists()
    });
    // On etcd, the waiter has queued once a key of its own joins the
    // holder's: distlock's under `distlock:{handoff}`, etcdctl's under
    // `handoff/`.
    let etcd_keys = || {
        let prefix = match tool {
            Tool::Etcdctl => "handoff/",
            _ => "distlock:{handoff}",
        };
        etcd.expect("etcd").count(prefix)
    };
    let held_keys =
        matches!(tool, Tool::DistlockEtcd | Tool::Etcdctl | Tool::BeforeEtcd).then(etcd_keys);
    let mut waiter = ctx
        .locked(
            tool,
            "handoff",
            &["--wait", "forever"],
            &ctx.helper_cmd(&["stamp", &start]),
        )
        .spawn()
        .unwrap();
    let pid = waiter.id();
    wait_until(&format!("{} waiter to block", tool.name()), || match tool {
        Tool::Flock => flock_blocked(pid),
        Tool::DistlockEtcd | Tool::Etcdctl | Tool::BeforeEtcd => Some(etcd_keys()) > held_keys,
        _ => queued(con, "handoff") == 1,
    });
    let waiter_kib = scale::rss_anon_with_guardian(pid).unwrap_or(0);
    fs::write(&gate, "").unwrap();
    check(tool, "handoff holder", wait_child(&mut holder));
    check(tool, "handoff waiter", wait_child(&mut waiter));
    let read = |p: &str| -> u64 { fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    ((read(&start) as f64 - read(&end) as f64) / 1e6, waiter_kib)
}

/// Whether process `pid` is blocked waiting for a flock: /proc/locks lists
/// blocked requests with `->`.
fn flock_blocked(pid: u32) -> bool {
    let locks = fs::read_to_string("/proc/locks").unwrap_or_default();
    let pid = pid.to_string();
    locks
        .lines()
        .any(|l| l.contains("->") && l.split_whitespace().any(|w| w == pid))
}

/// Number of fair waiters queued on distlock lock `name`.
fn queued(con: &mut redis::Connection, name: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(format!("distlock:{{{name}}}:queue"))
        .query(con)
        .unwrap()
}

// ---------------------------------------------------------------------------
// 3. Contention.

#[derive(Default)]
struct Contention {
    runs: usize,
    wall: Duration,
    overlaps: usize,
    token_errors: usize,
    max_behind: usize,
    /// Largest number of *distinct* other workers acquired in between.
    max_behind_workers: usize,
    /// Runs that started before a run of another worker that had arrived
    /// earlier, summed over all runs, and the most suffered by one run.
    overtakes: usize,
    max_overtaken: usize,
    /// CPU time, user and system, of every process the workers started
    /// (with the guardians and CMDs they reaped), and of redis-server.
    cpu: Duration,
    redis_cpu: Duration,
    /// On etcd: the requests etcd received, and its CPU time.
    requests: etcd::Requests,
    etcd_cpu: Duration,
}

struct Run {
    worker: usize,
    iter: usize,
    token: Option<u64>,
    start: u64,
    end: u64,
}

fn bench_contention(
    ctx: &Ctx,
    redis: &RedisServer,
    etcd: Option<&Etcd>,
    rounds: usize,
) -> HashMap<Tool, Contention> {
    let mut out: HashMap<Tool, Contention> = HashMap::new();
    for r in 0..rounds {
        for tool in ctx.lockers(r) {
            let on_etcd = etcd
                .filter(|_| matches!(tool, Tool::DistlockEtcd | Tool::Etcdctl | Tool::BeforeEtcd));
            let before = on_etcd.map(|e| (e.requests(), e.cpu()));
            let c = contention_once(ctx, redis, tool, r);
            let after = on_etcd.map(|e| (e.requests(), e.cpu()));
            eprintln!(
                "      {:8} round {r}: {:.1} runs/s, overlaps {}, token errors {}, max waited behind {}",
                tool.name(),
                c.runs as f64 / c.wall.as_secs_f64(),
                c.overlaps,
                c.token_errors,
                c.max_behind
            );
            let acc = out.entry(tool).or_default();
            acc.runs += c.runs;
            acc.wall += c.wall;
            acc.overlaps += c.overlaps;
            acc.token_errors += c.token_errors;
            acc.max_behind = acc.max_behind.max(c.max_behind);
            acc.max_behind_workers = acc.max_behind_workers.max(c.max_behind_workers);
            acc.overtakes += c.overtakes;
            acc.cpu += c.cpu;
            acc.redis_cpu += c.redis_cpu;
            acc.max_overtaken = acc.max_overtaken.max(c.max_overtaken);
            if let (Some((r0, cpu0)), Some((r1, cpu1))) = (before, after) {
                acc.requests.add(&r1.per_run(&r0, 1));
                acc.etcd_cpu += cpu1.saturating_sub(cpu0);
            }
        }
    }
    out
}

fn contention_once(ctx: &Ctx, redis: &RedisServer, tool: Tool, round: usize) -> Contention {
    let log = ctx.path(&format!("contention-{}-{round}.log", tool.name()));
    contention_on(ctx, redis, tool, &format!("contention-{round}"), &log)
}

/// 8 workers × 25 runs of `tool` on lock `lock`, CMDs logging to `log`.
fn contention_on(ctx: &Ctx, redis: &RedisServer, tool: Tool, lock: &str, log: &str) -> Contention {
    let (lock, log) = (lock.to_owned(), log.to_owned());
    let barrier = Arc::new(Barrier::new(WORKERS + 1));
    let arrivals = Arc::new(Mutex::new(HashMap::new()));
    let ctx = Arc::new(ctx.clone());
    let threads: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (barrier, arrivals, ctx, log, lock) = (
                barrier.clone(),
                arrivals.clone(),
                ctx.clone(),
                log.clone(),
                lock.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..RUNS_PER_WORKER {
                    let mut cmd = ctx.locked(
                        tool,
                        &lock,
                        &["--wait", "forever"],
                        &ctx.helper_cmd(&["log", &log]),
                    );
                    cmd.env("BENCH_WORKER", w.to_string())
                        .env("BENCH_ITER", i.to_string());
                    let arrive = mono_ns();
                    let st = cmd.status().expect("spawn");
                    check(tool, "contention", st);
                    arrivals.lock().unwrap().insert((w, i), arrive);
                }
            })
        })
        .collect();
    let mut con = redis.conn();
    let (cpu0, redis0) = (children_cpu(), redis_cpu(&mut con));
    barrier.wait();
    let t = Instant::now();
    for th in threads {
        th.join().unwrap();
    }
    let wall = t.elapsed();
    let (cpu, redis_cpu) = (
        children_cpu() - cpu0,
        redis_cpu(&mut con).saturating_sub(redis0),
    );

    let mut runs: HashMap<(usize, usize), Run> = HashMap::new();
    for line in fs::read_to_string(log).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (w, i): (usize, usize) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        let ns: u64 = f[4].parse().unwrap();
        let run = runs.entry((w, i)).or_insert(Run {
            worker: w,
            iter: i,
            token: f[3].parse().ok(),
            start: 0,
            end: 0,
        });
        match f[0] {
            "S" => run.start = ns,
            _ => run.end = ns,
        }
    }
    let mut runs: Vec<Run> = runs.into_values().collect();
    assert_eq!(runs.len(), WORKERS * RUNS_PER_WORKER, "runs logged");
    runs.sort_by_key(|r| r.start);

    let mut c = Contention {
        runs: runs.len(),
        wall,
        cpu,
        redis_cpu,
        ..Contention::default()
    };
    let mut max_end = 0;
    for (k, r) in runs.iter().enumerate() {
        if r.start < max_end {
            c.overlaps += 1;
        }
        max_end = max_end.max(r.end);
        if tool != Tool::Flock && k > 0 {
            match (runs[k - 1].token, r.token) {
                (Some(a), Some(b)) if b > a => {}
                _ => c.token_errors += 1,
            }
        }
    }
    let arrivals = arrivals.lock().unwrap();
    for r in &runs {
        let arrive = arrivals[&(r.worker, r.iter)];
        let between: Vec<&Run> = runs
            .iter()
            .filter(|o| o.start > arrive && o.start < r.start)
            .collect();
        let mut workers: Vec<usize> = between.iter().map(|o| o.worker).collect();
        workers.sort_unstable();
        workers.dedup();
        c.max_behind = c.max_behind.max(between.len());
        c.max_behind_workers = c.max_behind_workers.max(workers.len());
        let overtaken = between
            .iter()
            .filter(|o| o.worker != r.worker && arrivals[&(o.worker, o.iter)] > arrive)
            .count();
        c.overtakes += overtaken;
        c.max_overtaken = c.max_overtaken.max(overtaken);
    }
    c
}

/// FIFO as Redis saw it: one more 8×25 distlock round (not timed) with a
/// MONITOR connection recording, in execution order, when each owner
/// joined the queue (the first `ZADD queue NX`) and when it took the lock
/// (`SET lock owner PX`), both issued inside the scripts.
struct Fifo {
    acquisitions: usize,
    queued: usize,
    /// Most acquisitions by others between joining the queue and acquiring.
    max_behind: usize,
    /// Acquisitions by an owner that joined the queue later (or never)
    /// while an earlier one was queued.
    violations: usize,
    /// Safety checks of this round too.
    overlaps: usize,
    token_errors: usize,
}

fn fifo_check(ctx: &Ctx, redis: &RedisServer) -> Fifo {
    use std::io::{BufRead, BufReader};
    use std::net::TcpStream;
    let name = "fifo";
    let (lock_key, queue_key) = (
        format!("distlock:{{{name}}}"),
        format!("distlock:{{{name}}}:queue"),
    );
    let sentinel = "distlock-bench-monitor-done";
    let mut mon = TcpStream::connect(("127.0.0.1", redis.port)).unwrap();
    mon.write_all(b"MONITOR\r\n").unwrap();
    let mut reader = BufReader::new(mon.try_clone().unwrap());
    let mut ok = String::new();
    reader.read_line(&mut ok).unwrap();
    assert!(ok.starts_with("+OK"), "MONITOR: {ok}");
    let recorder = std::thread::spawn(move || {
        let mut events: Vec<(bool, String)> = Vec::new(); // (is_enqueue, owner)
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line.contains(sentinel) {
                return events;
            }
            // 1700000000.123456 [0 lua] "ZADD" "key" "NX" "score" "owner"
            let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
            match args.as_slice() {
                ["ZADD", k, "NX", _, owner] if *k == queue_key => {
                    events.push((true, owner.to_string()))
                }
                ["SET", k, owner, "PX", _] if *k == lock_key => {
                    events.push((false, owner.to_string()))
                }
                _ => {}
            }
        }
    });
    let c = contention_on(ctx, redis, Tool::Distlock, name, &ctx.path("fifo.log"));
    let _: String = redis::cmd("ECHO")
        .arg(sentinel)
        .query(&mut redis.conn())
        .unwrap();
    let events = recorder.join().unwrap();
    drop(mon);

    let mut joined: HashMap<&str, usize> = HashMap::new();
    let mut acquired: Vec<(usize, &str)> = Vec::new();
    for (i, (enqueue, owner)) in events.iter().enumerate() {
        if *enqueue {
            joined.entry(owner).or_insert(i);
        } else {
            acquired.push((i, owner));
        }
    }
    let mut f = Fifo {
        acquisitions: acquired.len(),
        queued: 0,
        max_behind: 0,
        violations: 0,
        overlaps: c.overlaps,
        token_errors: c.token_errors,
    };
    for &(at, owner) in &acquired {
        let Some(&since) = joined.get(owner) else {
            continue; // took a free lock on its first attempt: waited for nobody
        };
        f.queued += 1;
        let between: Vec<&str> = acquired
            .iter()
            .filter(|&&(i, o)| i > since && i < at && o != owner)
            .map(|&(_, o)| o)
            .collect();
        f.max_behind = f.max_behind.max(between.len());
        f.violations += between
            .iter()
            .filter(|o| joined.get(*o).is_none_or(|&j| j > since))
            .count();
    }
    f
}

// ---------------------------------------------------------------------------
// 4. Redis load of blocked waiters, and 5. peak RSS.

struct Load {
    cmds_per_s: f64,
    raw_delta: i64,
    info_calls: i64,
    renewals: i64,
    window: Duration,
    holder_hwm_kib: u64,
    holder_rss_kib: u64,
    waiter_hwm_kib: u64,
}

fn bench_load(ctx: &Ctx, redis: &RedisServer) -> Load {
    let mut con = redis.conn();
    let (ready, gate) = (ctx.path("load.ready"), ctx.path("load.gate"));
    let mut holder = ctx
        .locked(
            Tool::Distlock,
            "load",
            &["--ttl", "60s"],
            &ctx.helper_cmd(&["hold", &ready, &gate]),
        )
        .spawn()
        .unwrap();
    wait_until("load holder to start", || Path::new(&ready).exists());
    let mut waiters: Vec<Child> = (0..LOAD_WAITERS)
        .map(|_| {
            ctx.locked(Tool::Distlock, "load", &["--wait", "forever"], &["true"])
                .spawn()
                .unwrap()
        })
        .collect();
    wait_until("4 waiters to queue", || {
        queued(&mut con, "load") == LOAD_WAITERS as i64
    });
    // Let every waiter settle into its sleep.
    std::thread::sleep(Duration::from_millis(300));

    let pttl = |con: &mut redis::Connection| -> i64 {
        redis::cmd("PTTL")
            .arg("distlock:{load}")
            .query(con)
            .unwrap()
    };
    let pttl0 = pttl(&mut con);
    let c0 = total_commands(&mut con);
    let c0b = total_commands(&mut con);
    let info_cost = c0b - c0; // what one INFO adds to the counter
    let t = Instant::now();
    std::thread::sleep(LOAD_WINDOW);
    let c1 = total_commands(&mut con);
    let window = t.elapsed();
    let pttl1 = pttl(&mut con);
    // A renewal pushes the expiry back up: without one, PTTL only falls.
    let renewals = i64::from(pttl1 > pttl0 - window.as_millis() as i64 + 500);
    let raw_delta = c1 - c0b;
    let by_waiters = (raw_delta - info_cost - renewals).max(0);

    let holder_hwm_kib = proc_status_kib(holder.id(), "VmHWM");
    let holder_rss_kib = proc_status_kib(holder.id(), "VmRSS");
    let waiter_hwm_kib = waiters
        .iter()
        .map(|w| proc_status_kib(w.id(), "VmHWM"))
        .max()
        .unwrap_or(0);

    fs::write(&gate, "").unwrap();
    check(Tool::Distlock, "load holder", wait_child(&mut holder));
    for w in &mut waiters {
        check(Tool::Distlock, "load waiter", wait_child(w));
    }
    Load {
        cmds_per_s: by_waiters as f64 / window.as_secs_f64(),
        raw_delta,
        info_calls: info_cost,
        renewals,
        window,
        holder_hwm_kib,
        holder_rss_kib,
        waiter_hwm_kib,
    }
}

fn flock_rss(ctx: &Ctx) -> u64 {
    let (ready, gate) = (ctx.path("rss.ready"), ctx.path("rss.gate"));
    let mut holder = ctx
        .locked(
            Tool::Flock,
            "rss",
            &[],
            &ctx.helper_cmd(&["hold", &ready, &gate]),
        )
        .spawn()
        .unwrap();
    wait_until("flock holder to start", || Path::new(&ready).exists());
    let kib = proc_status_kib(holder.id(), "VmHWM");
    fs::write(&gate, "").unwrap();
    check(Tool::Flock, "rss holder", wait_child(&mut holder));
    kib
}

fn total_commands(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(con).unwrap();
    info_field(&info, "total_commands_processed")
        .and_then(|v| v.parse().ok())
        .expect("total_commands_processed")
}

/// User and system CPU of this process's reaped descendants: the workers'
/// tools reap their CMDs (and distlock its guardian), so their time is in
/// here once the tools are reaped.
fn children_cpu() -> Duration {
    // SAFETY: rusage is plain integers, for which all zeroes is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        // SAFETY: getrusage only writes into the struct it is given.
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) },
        0
    );
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// redis-server's own CPU so far (`INFO cpu`, microsecond resolution).
fn redis_cpu(con: &mut redis::Connection) -> Duration {
    let info: String = redis::cmd("INFO").arg("cpu").query(con).unwrap();
    let secs = |f| {
        info_field(&info, f)
            .and_then(|v| v.parse::<f64>().ok())
            .expect("used_cpu field")
    };
    Duration::from_secs_f64(secs("used_cpu_sys") + secs("used_cpu_user"))
}

fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// A `kB` line of /proc/PID/status, in KiB.
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

// ---------------------------------------------------------------------------
// The report.

fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    // Nearest rank.
    let k = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[k.min(s.len()) - 1]
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    overhead: &HashMap<Tool, Vec<f64>>,
    handoffs: &Handoff,
    contention: &HashMap<Tool, Contention>,
    requests: Option<&HashMap<Tool, etcd::Requests>>,
    fifo: &Fifo,
    load: &Load,
    flock_rss_kib: u64,
    n: usize,
    handoff_rounds: usize,
    contention_rounds: usize,
) -> bool {
    let handoff = &handoffs.gaps;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let p = |m: &HashMap<Tool, Vec<f64>>, t: Tool, q: f64| m.get(&t).map(|v| pct(v, q));
    let pair = |m: &HashMap<Tool, Vec<f64>>, t: Tool| match (p(m, t, 50.0), p(m, t, 95.0)) {
        (Some(a), Some(b)) => format!("{a:.2} / {b:.2}"),
        _ => "—".into(),
    };
    let rate = |t: Tool| {
        contention
            .get(&t)
            .map(|c| c.runs as f64 / c.wall.as_secs_f64())
    };

    println!();
    println!(
        "| tool | overhead p50 / p95 (ms) | handoff p50 / p95 (ms) | contention {WORKERS}×{RUNS_PER_WORKER} (runs/s) | waiters' Redis cmds/s | peak RSS holding (MiB) |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| `true` | {} | — | — | — | — |",
        pair(overhead, Tool::True)
    );
    println!(
        "| fork+exec (floor) | {} | — | — | — | — |",
        pair(overhead, Tool::Exec)
    );
    println!(
        "| connect + PING (floor) | {} | — | — | — | — |",
        pair(overhead, Tool::Ping)
    );
    println!(
        "| `flock` | {} | {} | {:.1} | — (no Redis) | {:.2} |",
        pair(overhead, Tool::Flock),
        pair(handoff, Tool::Flock),
        rate(Tool::Flock).unwrap_or(f64::NAN),
        mib(flock_rss_kib)
    );
    println!(
        "| `distlock` | {} | {} | {:.1} | {:.1} | {:.2} |",
        pair(overhead, Tool::Distlock),
        pair(handoff, Tool::Distlock),
        rate(Tool::Distlock).unwrap_or(f64::NAN),
        load.cmds_per_s,
        mib(load.holder_hwm_kib)
    );
    if overhead.contains_key(&Tool::Before) {
        println!(
            "| `distlock` before (`DISTLOCK_BENCH_BEFORE`) | {} | {} | {:.1} | — | — |",
            pair(overhead, Tool::Before),
            pair(handoff, Tool::Before),
            rate(Tool::Before).unwrap_or(f64::NAN),
        );
    }
    let etcd_safe = !overhead.contains_key(&Tool::DistlockEtcd)
        || etcd_rows(overhead, handoffs, &rate, contention, requests);
    println!();
    println!(
        "overhead: {n} interleaved rounds; handoff: {handoff_rounds} rounds per tool; contention: {contention_rounds} × ({WORKERS} workers × {RUNS_PER_WORKER} runs) per tool; waiters: {LOAD_WAITERS} queued for {:.2}s",
        load.window.as_secs_f64()
    );
    println!();

    let o = |t| p(overhead, t, 50.0).unwrap_or(f64::NAN);
    let (o_true, o_flock, o_dl) = (o(Tool::True), o(Tool::Flock), o(Tool::Distlock));
    let h50 = |t| p(handoff, t, 50.0).unwrap_or(f64::NAN);
    let h95 = |t| p(handoff, t, 95.0).unwrap_or(f64::NAN);
    let (rf, rd) = (
        rate(Tool::Flock).unwrap_or(f64::NAN),
        rate(Tool::Distlock).unwrap_or(f64::NAN),
    );
    let cf = &contention[&Tool::Flock];
    let cd = &contention[&Tool::Distlock];

    println!("Ratios to flock (distlock ÷ flock) and targets:");
    let r = o_dl / o_flock;
    println!(
        "- overhead p50: {o_dl:.2} / {o_flock:.2} ms = {r:.2}× (target ≤ 1.2×) {}",
        verdict(r <= 1.2)
    );
    let (o_exec, o_ping) = (o(Tool::Exec), o(Tool::Ping));
    println!(
        "  (floors: fork+exec {o_exec:.2} ms, connect + PING {o_ping:.2} ms: one round trip costs {:.2} ms over a bare start; flock + that = {:.2}× flock; informative)",
        o_ping - o_exec,
        (o_flock + o_ping - o_exec) / o_flock
    );
    println!(
        "  (above bare `true` at {o_true:.2} ms: flock +{:.2} ms, distlock +{:.2} ms = {:.1}×; informative)",
        o_flock - o_true,
        o_dl - o_true,
        (o_dl - o_true) / (o_flock - o_true)
    );
    let r = h50(Tool::Distlock) / h50(Tool::Flock);
    println!(
        "- handoff p50: {:.2} / {:.2} ms = {r:.2}× (target ≤ 1.25×) {}",
        h50(Tool::Distlock),
        h50(Tool::Flock),
        verdict(r <= 1.25)
    );
    let r = h95(Tool::Distlock) / h95(Tool::Flock);
    println!(
        "- handoff p95: {:.2} / {:.2} ms = {r:.2}× (target ≤ 1.5×) {}",
        h95(Tool::Distlock),
        h95(Tool::Flock),
        verdict(r <= 1.5)
    );
    let r = rd / rf;
    println!(
        "- contention rate: {rd:.1} / {rf:.1} runs/s = {r:.2}× (target ≥ 1.0×) {}",
        verdict(r >= 1.0)
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let per_run = |c: &Contention| {
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / c.runs as f64;
        (
            ms(c.cpu),
            ms(c.redis_cpu),
            c.cpu.as_secs_f64() + c.redis_cpu.as_secs_f64(),
        )
    };
    let ((dl, dl_redis, dl_total), (fl, fl_redis, fl_total)) = (per_run(cd), per_run(cf));
    let ceiling = cpus * 1e3 / (dl + dl_redis);
    println!(
        "  (CPU per run, user + system: distlock {dl:.2} ms + redis-server {dl_redis:.2} ms, flock {fl:.2} ms (+ {fl_redis:.2} ms of idle redis-server); CPUs busy: distlock {:.0}%, flock {:.0}% of {cpus}; at that CPU per run no schedule gets distlock above {cpus} CPUs ÷ {:.2} ms = {ceiling:.0} runs/s = {:.2}× flock; informative)",
        100.0 * dl_total / (cd.wall.as_secs_f64() * cpus),
        100.0 * fl_total / (cf.wall.as_secs_f64() * cpus),
        dl + dl_redis,
        ceiling / rf
    );
    let safe = cd.overlaps == 0
        && cf.overlaps == 0
        && cd.token_errors == 0
        && fifo.overlaps == 0
        && fifo.token_errors == 0
        && etcd_safe;
    println!(
        "- mutual exclusion: {} overlapping runs of {} (flock: {} of {}) {}",
        cd.overlaps + fifo.overlaps,
        cd.runs + fifo.acquisitions,
        cf.overlaps,
        cf.runs,
        verdict(cd.overlaps + fifo.overlaps + cf.overlaps == 0)
    );
    println!(
        "- fencing tokens strictly increasing in start order: {} violations {}",
        cd.token_errors + fifo.token_errors,
        verdict(cd.token_errors + fifo.token_errors == 0)
    );
    println!(
        "- FIFO: max waited behind {} other acquisitions, from just before the process was spawned (target ≤ {}) {}; flock, unordered: {}",
        cd.max_behind,
        WORKERS - 1,
        verdict(cd.max_behind < WORKERS),
        cf.max_behind,
    );
    println!(
        "- FIFO from joining the queue (MONITOR, 1 extra untimed round): {} of {} runs queued, max waited behind {} (target ≤ {}), {} out-of-order acquisitions {}",
        fifo.queued,
        fifo.acquisitions,
        fifo.max_behind,
        WORKERS - 1,
        fifo.violations,
        verdict(fifo.max_behind < WORKERS && fifo.violations == 0)
    );
    println!(
        "  (informative: at most {} distinct workers in between; overtaken by a later arrival: {} times in {} runs, at most {} times per run; flock: {} times, at most {})",
        cd.max_behind_workers,
        cd.overtakes,
        cd.runs,
        cd.max_overtaken,
        cf.overtakes,
        cf.max_overtaken
    );
    println!(
        "- Redis commands/s from {LOAD_WAITERS} blocked waiters: {:.1} (counter +{} over {:.2}s, minus {} for the INFO call and {} renewal(s)) (target 0) {}",
        load.cmds_per_s,
        load.raw_delta,
        load.window.as_secs_f64(),
        load.info_calls,
        load.renewals,
        verdict(load.cmds_per_s == 0.0)
    );
    println!(
        "- peak RSS while holding: VmHWM {:.2} MiB (VmRSS {:.2} MiB; a queued waiter: {:.2} MiB; flock: {:.2} MiB) (target ≤ 3 MiB) {}",
        mib(load.holder_hwm_kib),
        mib(load.holder_rss_kib),
        mib(load.waiter_hwm_kib),
        mib(flock_rss_kib),
        verdict(load.holder_hwm_kib <= 3072)
    );
    safe
}

/// distlock on etcd against `etcdctl lock`, measured in the same rounds
/// as the rows above (issue 33: ahead on every row), with the requests
/// each makes of etcd and the contention blocks' safety checks; false if
/// one failed.
fn etcd_rows(
    overhead: &HashMap<Tool, Vec<f64>>,
    handoffs: &Handoff,
    rate: &dyn Fn(Tool) -> Option<f64>,
    contention: &HashMap<Tool, Contention>,
    requests: Option<&HashMap<Tool, etcd::Requests>>,
) -> bool {
    let p =
        |m: &HashMap<Tool, Vec<f64>>, t: Tool, q: f64| m.get(&t).map_or(f64::NAN, |v| pct(v, q));
    println!();
    println!("| on etcd | overhead p50 / p95 (ms) | handoff p50 / p95 (ms) | contention {WORKERS}×{RUNS_PER_WORKER} (runs/s) | a blocked waiter's RssAnon, its guardian included (KiB) |");
    println!("|---|---|---|---|---|");
    let tools = [Tool::DistlockEtcd, Tool::Etcdctl, Tool::BeforeEtcd];
    for t in tools.into_iter().filter(|t| overhead.contains_key(t)) {
        println!(
            "| `{}` | {:.2} / {:.2} | {:.2} / {:.2} | {:.1} | {:.0} |",
            t.name(),
            p(overhead, t, 50.0),
            p(overhead, t, 95.0),
            p(&handoffs.gaps, t, 50.0),
            p(&handoffs.gaps, t, 95.0),
            rate(t).unwrap_or(f64::NAN),
            p(&handoffs.waiter_kib, t, 50.0),
        );
    }
    let (d, e) = (Tool::DistlockEtcd, Tool::Etcdctl);
    let rows = [
        ("overhead p50", p(overhead, d, 50.0) < p(overhead, e, 50.0)),
        (
            "handoff p50",
            p(&handoffs.gaps, d, 50.0) < p(&handoffs.gaps, e, 50.0),
        ),
        (
            "handoff p95",
            p(&handoffs.gaps, d, 95.0) < p(&handoffs.gaps, e, 95.0),
        ),
        (
            "contention (target ≥ 1.3×)",
            rate(d).unwrap_or(0.0) >= 1.3 * rate(e).unwrap_or(f64::INFINITY),
        ),
        (
            "waiter memory",
            p(&handoffs.waiter_kib, d, 50.0) < p(&handoffs.waiter_kib, e, 50.0),
        ),
    ];
    for (row, ahead) in rows {
        println!(
            "- distlock on etcd ahead of etcdctl lock in {row}: {}",
            verdict(ahead)
        );
    }
    let none = Contention::default();
    let mut safe = true;
    for t in tools.into_iter().filter(|t| overhead.contains_key(t)) {
        let c = contention.get(&t).unwrap_or(&none);
        if let Some(r) = requests.and_then(|r| r.get(&t)) {
            println!(
                "- etcd requests per run of `{}`, uncontended `run -- true`: {}",
                t.name(),
                r.line()
            );
        }
        if c.runs > 0 {
            println!(
                "- etcd requests per run of `{}` under {WORKERS}×{RUNS_PER_WORKER} contention: {}; CPU per run: etcd {:.2} ms, the tool's processes (CMD included) {:.2} ms",
                t.name(),
                c.requests.scaled(1.0 / c.runs as f64).line(),
                c.etcd_cpu.as_secs_f64() * 1e3 / c.runs as f64,
                c.cpu.as_secs_f64() * 1e3 / c.runs as f64,
            );
        }
        let ok = c.overlaps == 0 && (t == e || c.token_errors == 0);
        safe &= ok;
        println!(
            "- `{}` on etcd: {} overlapping runs of {}, {} token errors {}",
            t.name(),
            c.overlaps,
            c.runs,
            c.token_errors,
            verdict(ok)
        );
    }
    safe
}

// ---------------------------------------------------------------------------
// Plumbing.

/// Fisher-Yates with xorshift64: a fixed sequence of orders, so runs are
/// comparable, without a dependency for it.
fn shuffle<T>(items: &mut [T], state: &mut u64) {
    for i in (1..items.len()).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        items.swap(i, (*state % (i as u64 + 1)) as usize);
    }
}

/// The 1-minute load average: other work on the machine skews timings.
fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a positive integer")),
        Err(_) => default,
    }
}

/// Polls `cond` every millisecond; panics after 20s.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits for a child, killing it after 60s.
fn wait_child(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {} did not exit within 60s", child.id());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Our own `redis-server`, killed on drop (also on panic).
struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    fn start() -> RedisServer {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("free port")
                .port();
            let dir = tempfile::tempdir().unwrap();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be on PATH");
            let mut server = RedisServer { child, port, dir };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if server.child.try_wait().unwrap().is_some() {
                    break; // e.g. lost the port race: try another port
                }
                if server.ping() {
                    return server;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            // Dropping kills it.
        }
        panic!("could not start redis-server");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn ping(&self) -> bool {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    fn conn(&self) -> redis::Connection {
        let con = redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .expect("connect to our redis-server");
        con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        con
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
