#!/usr/bin/env bash
# The main job on a fresh machine: install what the build and the tests
# need (scripts/install-deps.sh: redis-server, etcd, promtool, ... as root),
# build distlock, start a throw-away redis-server on a free loopback port,
# and run a command under the lock three times to show the fencing token
# increasing (each token is at least the server's clock in µs, so they read
# like 1796169601000412). After it, `cargo test --locked` passes.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

cargo build --release --locked --quiet

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 6390)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; wait $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
done

export DISTLOCK_REDIS_URL="redis://127.0.0.1:$port"
for _ in 1 2 3; do
    target/release/distlock run demo -- sh -c 'echo "holding $DISTLOCK_NAME with fencing token $DISTLOCK_FENCING_TOKEN as $DISTLOCK_OWNER"'
done
target/release/distlock inspect demo
