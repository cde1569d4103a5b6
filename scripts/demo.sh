#!/usr/bin/env bash
# The main job on a fresh machine: install redis-server (and sqlite3 and
# openssl, which the tests use) when missing, build distlock, start a throw-away
# redis-server on a free loopback port, and run a command under the lock
# three times to show the fencing token increasing (each token is at least
# the server's clock in µs, so they read like 1796169601000412).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)   # the etcd feature's build
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "demo: please install ${need[*]} (e.g. sudo apt-get install ${need[*]})" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

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
