#!/usr/bin/env bash
# Regenerates the committed shell completions (completions/) and man pages
# (man/) from the clap definition. tests/assets.rs fails when they are stale.
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
echo "regenerated completions/ and man/"
