#!/bin/sh
# fenced-write.sh DB VALUE: the storage side of fencing, with SQLite.
#
# Run it under `distlock run`. It writes VALUE into the ledger only if this
# holder's fencing token is at least as new as any token the database has
# already seen. A holder that froze, lost its lease and woke up after a newer
# holder wrote carries an older token, and its write is refused, even though
# the freeze was invisible to distlock.
#
# Set-up, once:
#   sqlite3 ledger.db "CREATE TABLE ledger (id INTEGER PRIMARY KEY,
#                        value TEXT, fence INTEGER NOT NULL);
#                      INSERT INTO ledger VALUES (1, NULL, 0);"
# Tokens are about the server's clock in µs (1.8e15 in 2026), below 2^53:
# SQLite's INTEGER holds them (64 bits); elsewhere use BIGINT, never INT.
set -eu
db=$1
value=$2
token=${DISTLOCK_FENCING_TOKEN:?run me under distlock run}

# One statement: the check and the write are atomic in the database. `<=`
# lets one holder write several times with its token; a newer holder's
# write raises `fence` and shuts every older token out.
changed=$(sqlite3 "$db" "UPDATE ledger SET value = '$value', fence = $token
                         WHERE id = 1 AND fence <= $token;
                         SELECT changes();")
if [ "$changed" != 1 ]; then
    echo "fenced-write: token $token is stale (a newer holder wrote); write refused" >&2
    exit 1
fi
echo "fenced-write: wrote '$value' with token $token"
