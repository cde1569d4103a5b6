//! `run --metrics-file PATH`: the run's metrics for node_exporter's
//! textfile collector, so monitoring can alert when the job stops
//! succeeding (Prometheus's advice for batch jobs: export the time of the
//! last success).
//!
//! The collector may read the file at any moment, so it is never written
//! in place: a temporary file in the same directory (same filesystem, so
//! rename is atomic), then rename. The last success is carried over from
//! the file being replaced, since a failed run has none of its own.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::config::UsageError;

/// The most of the previous file read for its last success: this module
/// writes well under 2 KiB, so anything longer is not its file.
const PREVIOUS_MAX: u64 = 64 * 1024;

/// What one run tells monitoring.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMetrics<'a> {
    pub name: &'a str,
    /// When the run started (Unix seconds).
    pub started_s: f64,
    pub duration_s: f64,
    pub exit_code: u8,
    /// Whether the run counts as the job's success (CMD exited 0).
    pub success: bool,
}

/// Refuses, before the lock is taken, a path that exists and is no
/// regular file: reading a FIFO for the last success would block until
/// someone writes to it, and renaming over a device or a directory is no
/// metrics file either. A symlink counts as what it points to.
pub fn check_path(path: &Path) -> std::result::Result<(), UsageError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(UsageError(format!(
            "--metrics-file {}: not a regular file (it is {}); give the path of a file, e.g. DIR/NAME.prom in node_exporter's textfile directory",
            super::output::escape(&path.display().to_string()),
            file_kind(&m)
        ))),
        _ => Ok(()),
    }
}

fn file_kind(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    match () {
        () if t.is_dir() => "a directory",
        () if t.is_fifo() => "a FIFO",
        () if t.is_socket() => "a socket",
        () if t.is_char_device() || t.is_block_device() => "a device",
        () => "not a regular file",
    }
}

/// Writes the metrics of `run` to `path`, keeping the last success found
/// in the file it replaces.
pub fn write(path: &Path, run: &RunMetrics) -> Result<()> {
    let previous = read_previous(path);
    let last_success = if run.success {
        Some(run.started_s)
    } else {
        previous.as_deref().and_then(|t| last_success(t, run.name))
    };
    write_atomically(path, &render(run, last_success))
        .with_context(|| format!("cannot write the metrics file {}", path.display()))
}

const GAUGES: [(&str, &str); 4] = [
    (
        "distlock_last_run_timestamp_seconds",
        "When the last run of the job started (Unix time).",
    ),
    (
        "distlock_last_run_duration_seconds",
        "How long the last run held the lock.",
    ),
    (
        "distlock_last_exit_code",
        "Exit status of the last run (distlock's, as a shell reports it).",
    ),
    (
        "distlock_last_success_timestamp_seconds",
        "When the newest run that succeeded started (Unix time; 0: none known).",
    ),
];

/// The file's text (Prometheus text format 0.0.4).
fn render(run: &RunMetrics, last_success: Option<f64>) -> String {
    let values = [
        run.started_s,
        run.duration_s,
        f64::from(run.exit_code),
        last_success.unwrap_or(0.0),
    ];
    let label = label_value(run.name);
    let mut text = String::new();
    for ((metric, help), value) in GAUGES.iter().zip(values) {
        text.push_str(&format!(
            "# HELP {metric} {help}\n# TYPE {metric} gauge\n{metric}{{name=\"{label}\"}} {value}\n"
        ));
    }
    text
}

/// The last success recorded for `name` in a file this module wrote.
fn last_success(text: &str, name: &str) -> Option<f64> {
    let prefix = format!(
        "distlock_last_success_timestamp_seconds{{name=\"{}\"}} ",
        label_value(name)
    );
    let v: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))?
        .parse()
        .ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// The file being replaced, if it is a regular file: opened without
/// blocking (a FIFO put there since [`check_path`] has no writer) and read
/// up to [`PREVIOUS_MAX`], so the run's end never waits on it.
fn read_previous(path: &Path) -> Option<String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(PREVIOUS_MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

/// A label value as the text format escapes it.
fn label_value(s: &str) -> String {
    s.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// `text` at `path` by way of a temporary file in the same directory and
/// a rename: a reader sees the old file or the new one, never part of one.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    // The collector reads only `*.prom`: the temporary name must not end so.
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(success: bool) -> RunMetrics<'static> {
        RunMetrics {
            name: "nightly-billing",
            started_s: 1_764_633_601.042,
            duration_s: 12.5,
            exit_code: if success { 0 } else { 3 },
            success,
        }
    }

    #[test]
    fn the_last_success_reads_back_and_a_failure_has_none_of_its_own() {
        let text = render(&run(true), Some(1_764_633_601.042));
        assert!(text.contains(
            "distlock_last_success_timestamp_seconds{name=\"nightly-billing\"} 1764633601.042\n"
        ));
        assert!(text.contains("distlock_last_exit_code{name=\"nightly-billing\"} 0\n"));
        assert_eq!(
            last_success(&text, "nightly-billing"),
            Some(1_764_633_601.042)
        );
        assert_eq!(last_success(&text, "other"), None);
        let never = render(&run(false), None);
        assert_eq!(last_success(&never, "nightly-billing"), None);
        assert_eq!(last_success("garbage\n", "nightly-billing"), None);
    }

    /// A FIFO put at the path after `check_path` (or by a race) is not
    /// read: opened without blocking and seen for what it is, then
    /// replaced by the file. A blocking read would wait for a writer.
    #[test]
    fn a_fifo_at_the_path_is_replaced_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("m.prom");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(check_path(&fifo).unwrap_err().0.contains("a FIFO"));
        let (done, finished) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || done.send(write(&path, &run(false)).is_ok()));
        let ok = finished.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(ok, Ok(true), "writing the metrics blocked on a FIFO");
        assert!(std::fs::metadata(&fifo).unwrap().is_file());
        assert!(check_path(&fifo).is_ok());
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a directory fails after the write.
        let target = dir.path().join("x.prom");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), "").unwrap();
        assert!(write(&target, &run(true)).is_err());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
}
