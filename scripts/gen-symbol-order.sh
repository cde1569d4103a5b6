#!/usr/bin/env bash
# Regenerates link/symbol-order.txt: every function of the release binary
# that the everyday paths execute (a plain run, a run that waits its turn,
# a run that renews, a run parsed by clap, acquire, renew, release, inspect,
# list), found with callgrind. build.rs hands the list to the linker, which
# places those functions first and together in .text, so a run maps a few
# hundred KiB of code rather than most of the binary (issue 15: resident set
# and page faults). tests/package.rs fails when the list is stale.
#
# Needs valgrind and redis-server. Run it after changing the code or the
# toolchain, and commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "needs redis-server" >&2; exit 1; }

cargo build --release --locked --quiet
bin="$(cargo metadata --format-version 1 --no-deps |
    sed -E 's/.*"target_directory":"([^"]*)".*/\1/')/release/distlock"
work="$(mktemp -d)"
port=$((20000 + RANDOM % 20000))
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" --daemonize yes --pidfile "$work/redis.pid" >/dev/null
trap 'kill "$(cat "$work/redis.pid")" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
export DISTLOCK_REDIS_URL="redis://127.0.0.1:$port"

# Each path under callgrind; %p keeps the forked guardian's profile apart.
n=0
profile() {
    n=$((n + 1))
    valgrind --tool=callgrind --demangle=no --compress-strings=no \
        --callgrind-out-file="$work/cg.$n.%p" "$bin" "$@" >/dev/null 2>&1 || true
}
profile run gen -- true
"$bin" run gen-wait -- sleep 1 &
sleep 0.3
profile run -w 10s gen-wait -- true
wait
profile run --ttl 1s gen -- sleep 1.2
profile run --ttl 20s -E 3 gen -- true
eval "$("$bin" acquire gen-manual)"
profile renew gen-manual
profile inspect gen-manual
profile list
profile release gen-manual

# The functions of the binary itself (callgrind's "ob=" of each "fn="),
# first seen first, without callgrind's recursion marks ('2), its
# "(below main)" and unnamed addresses. _start and main lead.
mkdir -p link
{
    # lld reads "#" as a comment. tests/package.rs compares this line with
    # the toolchain it runs under: another rustc mangles other names.
    echo "# $(rustc -V), written by scripts/gen-symbol-order.sh"
    echo _start
    echo main
    for f in $(for i in $(seq "$n"); do ls "$work/cg.$i".*; done); do
        awk '
            /^ob=/ { ours = $0 ~ /\/release\/distlock$/ }
            /^fn=/ && ours { print substr($0, 4) }
        ' "$f"
    done
} | sed -E "s/'[0-9]+$//" | grep -v -E '^\(|^0x' | awk '!seen[$0]++' > link/symbol-order.txt
echo "wrote link/symbol-order.txt: $(wc -l < link/symbol-order.txt) functions"
