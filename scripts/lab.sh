#!/usr/bin/env bash
# The nemesis lab's long run (tests/lab/; docs/guarantees.md, "How we test
# it"): the same tests as the short run in `cargo test` (etcd, and Redis
# with Sentinel, side by side), for longer, with the seed given or drawn.
#
#   scripts/lab.sh [--minutes N | --seconds N] [--seed S] [--kinds K,K] [--keep]
#
# Needs root (network namespaces). Prints each fault and, at the end, the
# checker's table for each store, broken down by fault kind (acquisitions,
# faults, outcomes changed, overlaps, stale writes accepted, availability,
# longest gap) and, for the faults that cut a client off, the time until
# another client held (undisturbed cuts against the TTL plus a renewal,
# the rest apart); exits non-zero if the checker found a violation, or a fault
# kind met three times never changed an outcome (the history is then kept,
# and its directory named). --keep keeps it anyway. --kinds draws the faults
# from the kinds named only (e.g. client-minority), to replay one many times.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=1800
seed=
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) seconds=$(($2 * 60)); shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --kinds) export DISTLOCK_LAB_KINDS=$2; shift 2 ;;
        --keep) export DISTLOCK_LAB_KEEP=1; shift ;;
        *) echo "usage: scripts/lab.sh [--minutes N | --seconds N] [--seed S] [--kinds K,K] [--keep]" >&2; exit 2 ;;
    esac
done
export DISTLOCK_LAB_SECONDS=$seconds
if [ -n "$seed" ]; then
    export DISTLOCK_LAB_SEED=$seed
fi
log=$(mktemp -t distlock-lab.XXXXXX)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked --test lab -- --nocapture under_the_nemesis 2>&1 | tee "$log" || status=$?
# The two stores' tables again, together, after the interleaved fault logs.
echo
echo "=== results (seconds: $seconds) ==="
awk '/^lab [a-z]+: seed [0-9]+, [0-9.]+ s, [0-9]+ failovers$/ { on = 1 }
     on && /^$/ { on = 0; print ""; next }
     on { print }' "$log"
exit "$status"
