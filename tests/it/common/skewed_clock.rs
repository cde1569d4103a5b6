//! A fake Redis node that answers `TIME` from a clock set off from this
//! host's by a fixed amount, and `+OK` to anything else (the client's
//! hand-shake): a replica whose clock is wrong, which no real redis-server
//! can be made into.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The listener runs on a thread of its own until the test process ends.
pub struct SkewedClock {
    pub port: u16,
}

impl SkewedClock {
    /// A node whose TIME is this host's clock plus `ahead_ms` (negative:
    /// behind).
    pub fn start(ahead_ms: i64) -> SkewedClock {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || serve(stream, ahead_ms));
            }
        });
        SkewedClock { port }
    }
}

fn serve(stream: TcpStream, ahead_ms: i64) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut out = stream.try_clone().unwrap();
    let mut input = BufReader::new(stream);
    while let Some(command) = read_command(&mut input) {
        let reply = if command.eq_ignore_ascii_case("TIME") {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            let us = now.as_micros() as i64 + ahead_ms * 1000;
            let (s, us) = (us / 1_000_000, us % 1_000_000);
            format!(
                "*2\r\n${}\r\n{s}\r\n${}\r\n{us}\r\n",
                s.to_string().len(),
                us.to_string().len()
            )
        } else {
            "+OK\r\n".to_owned()
        };
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// The first word of one RESP command (an array of bulk strings), or None
/// at the end of the stream.
fn read_command(input: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    let mut read_line = |line: &mut String| -> Option<()> {
        line.clear();
        (input.read_line(line).ok()? > 0).then_some(())
    };
    read_line(&mut line)?;
    let n: usize = line.trim().strip_prefix('*')?.parse().ok()?;
    let mut first = None;
    for _ in 0..n {
        read_line(&mut line)?; // $len
        read_line(&mut line)?; // the word (no CR or LF in what clients send here)
        first.get_or_insert_with(|| line.trim().to_owned());
    }
    first
}
