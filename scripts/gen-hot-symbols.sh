#!/usr/bin/env bash
# Regenerates link/hot-symbols.txt: the functions a Redis run executes,
# which build.rs has the linker place first in .text (see
# `link_hot_code_first` there for why). Run it after a change that renames
# or adds functions on a Redis run's path (or a toolchain or dependency
# update, which renames std's and the dependencies' symbols); a stale entry
# costs resident memory, never correctness.
#
# It runs the release binary under valgrind's callgrind against its own
# redis-server: a holder, a waiter queued behind it, a holder that renews,
# and `run -- true`, given the URL each way a user can (`-r`, `--url`,
# `DISTLOCK_URL`, the older `DISTLOCK_REDIS_URL` the bench sets: each
# parses with code of its own, and one function left out of the list
# costs a 64 to 128 KiB window of cold code); every function any of them
# executed is listed, in the order callgrind first met it, and so are the
# guardian and what CMD's child runs before its exec (`process::spawn`,
# `process::lifeline`): callgrind does not follow either, and the child
# shares distlock's address space until its exec, so its pages count in
# distlock's. Then the same for the binary `cargo bench` builds, whose
# symbols have other hashes (build.rs says why), so that the bench
# measures the layout a release build gets.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "gen-hot-symbols: needs valgrind" >&2; exit 1; }
work="$(mktemp -d)"
trap 'kill "${redis:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
redis=$!
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
url="redis://127.0.0.1:$port"
bin="${CARGO_TARGET_DIR:-target}/release/distlock"
cg() {
    local out="$work/cg.$build.$1.%p"
    shift
    valgrind -q --tool=callgrind --demangle=no --compress-strings=no \
        --callgrind-out-file="$out" "$bin" "$@" 2>/dev/null
}
profile() {
    cg hold -r "$url" run hot -- sleep 3 &
    local holder=$!
    until [ "$(redis-cli -p "$port" exists 'distlock:{hot}')" = 1 ]; do sleep 0.1; done
    DISTLOCK_REDIS_URL="$url" cg wait run --wait forever hot -- true
    wait "$holder"
    DISTLOCK_URL="$url" cg renew run --ttl 1s renewing -- sleep 2.5
    cg true --url "$url" run once -- true
    nm --defined-only "$bin" | awk '$2 ~ /^[tT]$/ { print $3 }' | sort -u > "$work/defined"
    {
        sed -n "/^fn=/ { s/^fn=//; s/'[0-9]*\$//; p; }" "$work"/cg."$build".*
        grep '^_ZN8distlock7process\(8guardian\|5spawn\|8lifeline\)' "$work/defined"
    } | awk 'NR == FNR { d[$0] = 1; next } d[$0]' "$work/defined" - >> "$work/hot"
}
build=release
cargo build --release --locked --quiet
profile
build=bench
cargo bench --locked --no-run --quiet --bench compare 2>/dev/null
profile
awk '!seen[$0]++' "$work/hot" > link/hot-symbols.txt
echo "link/hot-symbols.txt: $(wc -l < link/hot-symbols.txt) functions"
