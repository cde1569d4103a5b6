#!/usr/bin/env bash
# Regenerates the committed shell completions (completions/), man pages
# (man/) and the README's exit-code table (from src/exit.rs) from the
# binary. tests/it/assets.rs fails when any of them is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet
bin=target/debug/distlock
mkdir -p completions man
"$bin" completions bash > completions/distlock.bash
"$bin" completions zsh > completions/_distlock
"$bin" completions fish > completions/distlock.fish
"$bin" completions elvish > completions/distlock.elv
"$bin" completions powershell > completions/_distlock.ps1
rm -f man/*.1
"$bin" man --dir man
# The README's copy of the exit table, between its marker comments (blank
# lines around it, so Markdown sees a table and not HTML).
EXIT_TABLE="$("$bin" man --exit-table)" awk '
    /^<!-- exit-table:end -->$/ { skip = 0 }
    !skip { print }
    /^<!-- exit-table:start/ { print ""; print ENVIRON["EXIT_TABLE"]; print ""; skip = 1 }
' README.md > README.md.tmp
mv README.md.tmp README.md
echo "regenerated completions/, man/ and the README's exit table"
