#!/usr/bin/env bash
# Installs every program the build and the test suite start, so that the
# README's two commands (`bash scripts/demo.sh`, then `cargo test --locked`)
# pass on a fresh Debian machine (and `cargo bench` finds what it compares). scripts/demo.sh and .ci/run both call this
# script; tests/it/deps.rs checks that every program a test starts is in the
# table below, so a new one cannot be forgotten here.
#
#   scripts/install-deps.sh          install what is missing (apt, as root)
#   scripts/install-deps.sh --list   print the table, install nothing
#
# Without root it installs nothing and names the apt command to run.
set -euo pipefail

# program  Debian package  (why)
table=$(cat <<'EOF'
redis-server    redis-server       the store every test starts
redis-cli       redis-tools        tests/it/common/ha.rs (Sentinel set-up)
etcd            etcd-server        tests/it/common/etcd.rs, etcd_cluster.rs
etcdctl         etcd-client        the etcd tests read etcd's keys with it
promtool        prometheus         tests/it/metrics.rs: promtool check metrics
sqlite3         sqlite3            the fencing example (examples/fenced-write.sh)
openssl         openssl            tests/it/common/tls.rs makes certificates
protoc          protobuf-compiler  the build: the etcd feature's gRPC code
man             man-db             tests/it/assets.rs, package.rs: man -w
dpkg-shlibdeps  dpkg-dev           cargo-deb's Depends: $auto (package test)
git             git                tests/it/cli.rs: --version names the commit
bash            bash               shell snippets in the tests
sh              dash               CMDs in the tests
zsh             zsh                tests/it/lock.rs evals acquire output in zsh too
sleep           coreutils          CMDs in the tests
mkfifo          coreutils          tests/it/faults.rs
flock           util-linux         cargo bench compares with flock(1)
chrt            util-linux         cargo bench's scale rounds
dpkg            dpkg               tests/it/package.rs installs the .deb
dpkg-deb        dpkg               tests/it/package.rs reads the .deb
ip              iproute2           tests/lab: network namespaces, veth, bridge
nft             nftables           tests/lab: partitions and packet loss
iptables        iptables           tests/lab: the delay fault (NFQUEUE rule)
EOF
)
# Files, not programs, that a test reads: path, package.
files='
/usr/share/bash-completion/bash_completion  bash-completion
'

if [ "${1:-}" = --list ]; then
    printf '%s\n' "$table" | sed '/^$/d'
    exit 0
fi

need=()
while read -r program package _; do
    [ -n "$program" ] || continue
    command -v "$program" >/dev/null 2>&1 || need+=("$package")
done <<<"$table"
while read -r path package; do
    [ -n "$path" ] || continue
    [ -e "$path" ] || need+=("$package")
done <<<"$files"

if [ ${#need[@]} -gt 0 ]; then
    # One package can serve several programs: name it once.
    mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "install-deps: apt-get install ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The package test builds the .deb with cargo-deb (tests/it/package.rs;
# skipped without it, unless DISTLOCK_PACKAGE_TEST=require).
if ! cargo deb --version >/dev/null 2>&1; then
    echo "install-deps: cargo install cargo-deb" >&2
    cargo install --locked --quiet cargo-deb
fi
