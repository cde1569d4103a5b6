#!/bin/sh
# The README's "Crontab on three redundant hosts", for real on one machine:
# three "hosts" web-1, web-2, web-3 (each distlock in its own UTS namespace
# with its own hostname, so owner ids and the done mark name it; needs root
# for `unshare -u`) start the same line at once:
#
#   distlock run --wait 2h --once-per 20h nightly-billing -- JOB
#
# Usage: DISTLOCK_REDIS_URL=redis://… examples/three-hosts.sh [fail-first]
# With `fail-first`, the job fails (exit 3) on the first host that runs it.
set -eu
mode=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
distlock release --forget-done nightly-billing >/dev/null
job='echo "$(date -u +%T) billing on $(hostname)" >> "$0/billing.log"; sleep 2
if [ "$1" = fail-first ] && [ "$(wc -l < "$0/billing.log")" -eq 1 ]; then
    echo "billing failed" >&2; exit 3
fi'
for h in web-1 web-2 web-3; do
    unshare -u sh -c '
        hostname "$1"; shift
        distlock run --wait 2h --once-per 20h nightly-billing -- sh -c "$@"
        echo "distlock exited $?"' sh "$h" "$job" "$work" "$mode" 2>&1 | sed "s/^/$h | /" &
    sleep 0.2   # only so that the hosts start in a readable order
done
wait
echo "billing.log:"; cat "$work/billing.log"
