//! The module graph of `src/` must match the layout src/main.rs
//! describes (and docs/design.md). This test reads every `crate::` path in the
//! sources (`use crate::x::…`, `use crate::{x, y}`, `crate::x::f()`),
//! builds the graph of top-level modules, and fails on a cycle or on an
//! arrow the layout forbids. It also checks the rules that are not arrows:
//! only `store` names `redis::` or `etcd_client::` items, and inside it
//! neither backend names the other; only `main` and `commands` print;
//! `main` reads no files and builds no TLS or password settings; and only
//! `store/call.rs` bounds and ends a call.
//!
//! An arrow `a -> b` means "module a uses something of module b".

use crate::common::rust_files;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each top-level module may use, besides itself. `main` wires
/// everything together and may use any module.
///
/// - `cli`: clap types only; may use `config`'s value enums and parsers
///   and `exit`'s codes (for help texts and defaults), and turns its
///   arguments into `config`'s settings.
/// - `config`: validated settings; a leaf.
/// - `exit`, `clock`: leaves.
/// - `store`: the only Redis and etcd code; takes settings from `config`
///   and times a waiter's keep-alives by the clock.
/// - `lease`: taking and keeping the lease; uses the store and the clock.
/// - `process`: processes, signals, terminal, guardian; no Redis.
/// - `commands`: the subcommands, which drive all of the above with the
///   checked settings `config` holds (`cli` builds them); no clap types.
const ALLOWED: &[(&str, &[&str])] = &[
    ("cli", &["config", "exit"]),
    ("config", &[]),
    ("exit", &[]),
    ("clock", &[]),
    ("store", &["config", "clock"]),
    ("lease", &["config", "store", "clock", "exit"]),
    ("process", &["config", "clock", "exit"]),
    (
        "commands",
        &["config", "lease", "process", "store", "clock", "exit"],
    ),
];

/// Known violations, each to be removed by the change that fixes it: none
/// left. Entries are `(module, what)`, where `what` is a module it may not
/// use, a store client crate it names (`"redis"`, `"etcd_client"`), or
/// `"print"` for printing outside `main` and `commands`. An entry
/// that no longer occurs fails the test too, so the list can only shrink.
const KNOWN_VIOLATIONS: &[(&str, &str)] = &[];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source without comments (line comments and doc comments; distlock
/// has no block comments) and without string literals, so that neither
/// prose nor a `"redis://"` counts as a path.
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                if c == '"' && prev != '\\' {
                    in_str = false;
                }
                prev = if prev == '\\' && c == '\\' { ' ' } else { c };
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            // A char literal like '"' must not open a string.
            if c == '"' && prev != '\'' {
                in_str = true;
                prev = ' ';
                continue;
            }
            out.push(c);
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// The top-level modules named after `crate::` in `code`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `some_crate::x`
        }
        let rest_trim = rest.trim_start();
        if let Some(group) = rest_trim.strip_prefix('{') {
            // `crate::{a, b::c, d::{e}}`: the first ident of each item.
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        out.insert(ident(&group[j..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let m = ident(rest_trim);
            if !m.is_empty() {
                out.insert(m);
            }
        }
    }
    out
}

/// Whether `code` names `path` as a path of its own, not as the tail of
/// another (`distlock_redis::` does not name `redis::`).
fn names(code: &str, path: &str) -> bool {
    code.match_indices(path).any(|(i, _)| {
        !code[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

struct Source {
    module: String,
    file: String,
    code: String,
}

fn sources() -> Vec<Source> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let t = std::fs::read_to_string(&f).unwrap();
            (f, t)
        })
        .collect();
    // Files included with `#[path = "x.rs"]` belong to the module of the
    // file that includes them (a test module elsewhere, say).
    let mut included: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (f, t) in &texts {
        for part in t.split("#[path = \"").skip(1) {
            if let Some(name) = part.split('"').next() {
                included.insert(name.to_owned(), f.clone());
            }
        }
    }
    let module_of = |f: &Path| -> String {
        let rel = f.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let first = first.trim_end_matches(".rs").to_owned();
        first
    };
    texts
        .iter()
        .map(|(f, t)| {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let module = match included.get(&name) {
                Some(parent) if parent.parent() == f.parent() => module_of(parent),
                _ => module_of(f),
            };
            Source {
                module,
                file: f.strip_prefix(&root).unwrap().display().to_string(),
                code: code(t),
            }
        })
        .collect()
}

/// Every arrow, with the files that make it.
fn arrows(sources: &[Source]) -> BTreeMap<(String, String), BTreeSet<String>> {
    let modules: BTreeSet<&str> = sources.iter().map(|s| s.module.as_str()).collect();
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        let mut used = crate_paths(&s.code);
        if s.file == "main.rs" {
            // The crate root names its modules without `crate::`.
            for m in &modules {
                let path = format!("{m}::");
                let named = s.code.match_indices(&path).any(|(i, _)| {
                    !s.code[..i]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                });
                if named {
                    used.insert((*m).to_owned());
                }
            }
        }
        for to in used {
            if to != s.module {
                out.entry((s.module.clone(), to))
                    .or_default()
                    .insert(s.file.clone());
            }
        }
    }
    out
}

/// A cycle in the graph, as the modules along it, if there is one.
fn find_cycle(edges: &BTreeSet<(String, String)>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeSet<(String, String)>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_owned(), 1);
        path.push(n.to_owned());
        for (_, to) in edges.iter().filter(|(from, _)| from == n) {
            match state.get(to.as_str()) {
                Some(1) => {
                    let start = path.iter().position(|p| p == to).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(to.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(to, edges, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(n.to_owned(), 2);
        None
    }
    let mut state = BTreeMap::new();
    let nodes: BTreeSet<&String> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    for n in nodes {
        if !state.contains_key(n.as_str()) {
            if let Some(c) = visit(n, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Files compiled only into the unit tests: those declared as
/// `#[cfg(test)] mod name;` (as `name.rs` or `name/mod.rs` next to the
/// declaring file, or in its directory when it is a `mod.rs` or the crate
/// root).
fn test_only_files(sources: &[Source]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in sources {
        let path = Path::new(&s.file);
        let stem = path.file_stem().unwrap().to_str().unwrap();
        let parent = path.parent().unwrap_or(Path::new(""));
        let dir = if matches!(stem, "mod" | "main" | "lib") {
            parent.to_path_buf()
        } else {
            parent.join(stem)
        };
        let mut rest = s.code.as_str();
        while let Some(at) = rest.find("#[cfg(test)]") {
            rest = &rest[at + "#[cfg(test)]".len()..];
            let decl = rest.trim_start();
            let Some(after) = decl.strip_prefix("mod ") else {
                continue;
            };
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if after[name.len()..].trim_start().starts_with(';') {
                out.insert(dir.join(format!("{name}.rs")).display().to_string());
                out.insert(dir.join(&name).join("mod.rs").display().to_string());
            }
        }
    }
    out
}

/// The problems found, each as `(module, what, detail)`.
fn violations(sources: &[Source]) -> Vec<(String, String, String)> {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let test_only = test_only_files(sources);
    let mut found = Vec::new();
    for ((from, to), files) in arrows(sources) {
        // A top-level module compiled only into the unit tests (declared
        // `#[cfg(test)] mod` in `main.rs`) is help any module's tests may
        // use; it may use no module itself, which the check of its own
        // arrows below enforces, as it is in no list of ALLOWED.
        let to_test_only = [format!("{to}.rs"), format!("{to}/mod.rs")]
            .iter()
            .any(|f| test_only.contains(f));
        if from == "main" || to_test_only {
            continue;
        }
        let ok = allowed
            .get(from.as_str())
            .is_some_and(|list| list.contains(&to.as_str()));
        if !ok {
            let files: Vec<_> = files.into_iter().collect();
            found.push((from, to, files.join(", ")));
        }
    }
    for s in sources {
        for client in ["redis", "etcd_client"] {
            let named =
                names(&s.code, &format!("{client}::")) || s.code.contains(&format!("use {client}"));
            if s.module != "store" && named {
                found.push((s.module.clone(), client.into(), s.file.clone()));
            }
        }
        let prints = ["println!", "eprintln!", "print!", "eprint!"]
            .iter()
            .any(|m| s.code.contains(m));
        // Test-only code (a model checker reporting what it explored) is
        // not part of what distlock prints.
        let product = !test_only.contains(&s.file);
        if prints && product && s.module != "main" && s.module != "commands" {
            found.push((s.module.clone(), "print".into(), s.file.clone()));
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    found
}

#[test]
fn the_parser_reads_every_form_of_crate_path() {
    let c = code(
        "use crate::config::{self, Wait};\nuse crate::{exit, store::{A, B}};\n\
         let x = crate::clock::now(); // crate::lease::x\nlet s = \"crate::cli::x\";\n\
         let q = '\"'; let y = other_crate::z;\n",
    );
    let got: Vec<String> = crate_paths(&c).into_iter().collect();
    assert_eq!(got, ["clock", "config", "exit", "store"]);
}

#[test]
fn module_graph_is_acyclic_and_follows_the_layout() {
    let sources = sources();
    assert!(
        sources.iter().any(|s| s.module == "store"),
        "no sources found under {}",
        src().display()
    );
    let graph = arrows(&sources);
    let edges: BTreeSet<(String, String)> = graph.keys().cloned().collect();
    let listing: Vec<String> = edges.iter().map(|(a, b)| format!("{a} -> {b}")).collect();
    println!("module graph:\n{}", listing.join("\n"));
    if let Some(cycle) = find_cycle(&edges) {
        panic!("the module graph has a cycle: {}", cycle.join(" -> "));
    }
    let found = violations(&sources);
    let unexpected: Vec<String> = found
        .iter()
        .filter(|(m, w, _)| !KNOWN_VIOLATIONS.contains(&(m.as_str(), w.as_str())))
        .map(|(m, w, files)| format!("{m} -> {w} (in {files})"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "arrows the layout forbids (see ALLOWED in tests/it/architecture.rs):\n{}",
        unexpected.join("\n")
    );
    let fixed: Vec<String> = KNOWN_VIOLATIONS
        .iter()
        .filter(|(m, w)| !found.iter().any(|(fm, fw, _)| fm == m && fw == w))
        .map(|(m, w)| format!("{m} -> {w}"))
        .collect();
    assert!(
        fixed.is_empty(),
        "fixed, so take them out of KNOWN_VIOLATIONS: {}",
        fixed.join(", ")
    );
}

#[test]
fn main_reads_no_files_and_builds_no_connection_settings() {
    let main = sources().into_iter().find(|s| s.file == "main.rs").unwrap();
    for banned in ["std::fs", "read_to_string", "Security {", "build_with_tls"] {
        assert!(
            !main.code.contains(banned),
            "main.rs contains {banned:?}: reading files and building TLS or password settings belongs in config"
        );
    }
    assert!(
        main.code.contains("config::Security::new"),
        "main.rs should take its connection settings from config::Security::new"
    );
}

/// The print rule's exemption covers the test-only model and nothing that
/// ships: a file the release binary contains must never be exempt.
#[test]
fn only_test_only_files_are_exempt_from_the_print_rule() {
    let sources = sources();
    let exempt = test_only_files(&sources);
    assert!(exempt.contains("lease/model.rs"), "{exempt:?}");
    for product in [
        "lease/mod.rs",
        "lease/turn.rs",
        "lease/supervisor.rs",
        "store/mod.rs",
        "main.rs",
    ] {
        assert!(!exempt.contains(product), "{product} ships: {exempt:?}");
    }
}

/// Inside `store/`, the files use each other without a circle either, so
/// each can be read knowing only the ones below it. Test modules are left
/// out: a test may use anything.
#[test]
fn store_files_use_each_other_without_a_cycle() {
    let mut edges = BTreeSet::new();
    for s in sources().iter().filter(|s| s.file.starts_with("store/")) {
        let from = s.file["store/".len()..].trim_end_matches(".rs").to_owned();
        // A backend's files (`store/redis_store/lock.rs`) use their
        // siblings through `super::`, as the top-level ones do.
        let dir = match from.rsplit_once('/') {
            Some((d, _)) => format!("{d}/"),
            None => String::new(),
        };
        let code = s.code.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, _) in code.match_indices("super::") {
            if code[..i].ends_with("super::") {
                continue;
            }
            let to: String = code[i + "super::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let to = format!("{dir}{to}");
            let is_file = to != from && src().join("store").join(format!("{to}.rs")).exists();
            if is_file {
                edges.insert((from.clone(), to));
            }
        }
    }
    assert!(edges.len() > 5, "the parser found no arrows: {edges:?}");
    assert_eq!(find_cycle(&edges), None, "store/ arrows: {edges:?}");
}

/// The two backends share only what `store/` itself holds (errors, keys,
/// records, URLs, the types of the answers): neither names the other or
/// the other's client crate, and `store/mod.rs` imports nothing from a
/// backend to hand on, so no shared word lives inside one of them.
#[test]
fn store_backends_share_only_what_store_holds() {
    let sources = sources();
    let mut found = Vec::new();
    for (dir, other) in [
        ("store/etcd_store/", ["redis_store", "redis::"]),
        ("store/redis_store/", ["etcd_store", "etcd_client::"]),
    ] {
        let files: Vec<&Source> = sources.iter().filter(|s| s.file.starts_with(dir)).collect();
        assert!(!files.is_empty(), "no sources under src/{dir}");
        for s in files {
            for path in other.iter().filter(|p| names(&s.code, p)) {
                found.push(format!("{} names {path}", s.file));
            }
        }
    }
    let store = sources.iter().find(|s| s.file == "store/mod.rs").unwrap();
    for line in store.code.lines().map(str::trim) {
        let import = line.starts_with("use ") || line.starts_with("pub") && line.contains(" use ");
        if import && (line.contains("redis_store") || line.contains("etcd_store")) {
            found.push(format!("store/mod.rs imports from a backend: {line}"));
        }
    }
    assert!(
        found.is_empty(),
        "a backend's words outside it (move shared ones to a file of store/):\n{}",
        found.join("\n")
    );
}

/// One way to bound and end a call, on both backends: only
/// `store/call.rs` reads pending signals (sigpending(2)) and shuts sockets
/// down, so no backend keeps a watchdog or a signal poll of its own. Redis
/// had one (`redis_store/deadline.rs`) and etcd another (a sigpending poll
/// every 10 ms on its runtime) until both became `store/call.rs`'s.
#[test]
fn only_store_call_reads_pending_signals_and_cuts_sockets() {
    let mut found = Vec::new();
    for s in sources().iter().filter(|s| s.file != "store/call.rs") {
        for word in ["sigpending", "shutdown(", "SHUT_RDWR"] {
            if s.code.contains(word) {
                found.push(format!("{} names {word}", s.file));
            }
        }
    }
    assert!(
        found.is_empty(),
        "outside store/call.rs:\n{}",
        found.join("\n")
    );
    assert!(!src().join("store/redis_store/deadline.rs").exists());
    let call = std::fs::read_to_string(src().join("store/call.rs")).unwrap();
    assert!(
        code(&call).contains("sigpending"),
        "the parser lost sigpending"
    );
}

/// No code runs before `main`: no `.init_array` (or `.preinit_array`,
/// `.ctors`) function, and no `link_section` to place one. Such a hook
/// once read argv for the guardian and depended on glibc's calling
/// convention for those functions; the guardian now reads where its
/// command line lies from /proc/self/stat (src/process/guardian.rs).
#[test]
fn no_code_runs_before_main() {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut found = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.strip_prefix(&root).unwrap().display().to_string();
        if code(&text).contains("link_section") {
            found.push(format!("{file}: link_section"));
        }
        // Outside comments, strings included: `#[link_section = ".init_array"]`.
        for (n, line) in text.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            for section in [".init_array", ".preinit_array", ".ctors"] {
                if line.contains(section) {
                    found.push(format!("{file}:{}: {section}", n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "code placed to run before main:\n{}",
        found.join("\n")
    );
}
