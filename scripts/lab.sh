#!/usr/bin/env bash
# The nemesis lab's long run (tests/lab/; docs/guarantees.md, "How we test
# it"): the same tests as the short run in `cargo test` (etcd, and Redis
# with Sentinel, side by side), for longer, with the seed given or drawn.
#
#   scripts/lab.sh [--minutes N] [--seed S] [--keep]
#
# Needs root (network namespaces). Prints each fault and, at the end, the
# checker's table; exits non-zero if the checker found a violation (the
# history is then kept, and its directory named). --keep keeps it anyway.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=30
seed=
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) minutes=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --keep) export DISTLOCK_LAB_KEEP=1; shift ;;
        *) echo "usage: scripts/lab.sh [--minutes N] [--seed S] [--keep]" >&2; exit 2 ;;
    esac
done
export DISTLOCK_LAB_SECONDS=$((minutes * 60))
if [ -n "$seed" ]; then
    export DISTLOCK_LAB_SEED=$seed
fi
exec cargo test --locked --test lab -- --nocapture under_the_nemesis
