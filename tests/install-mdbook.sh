#!/usr/bin/env bash
# mdBook for the book in docs/ (built and link-checked by the test command, engine/cli/tests/book.rs): one
# pinned version from crates.io, compiled once into $TRAINWARDEN_CACHE_DIR/mdbook-VERSION and reused by every
# later run (a cache hit costs a stat). Only the `search` feature: `serve` and `watch` (tokio, axum, notify)
# are for authors and would double the cold compile. Prints the binary's path.
set -euo pipefail

version=0.5.4
cache="${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/mdbook-$version"
bin="$cache/bin/mdbook"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi
command -v cargo >/dev/null || { echo "install-mdbook: cargo not found (tests/install-prereqs.sh)" >&2; exit 1; }
# Its own target dir, removed after: the compile's objects are not worth keeping beside one binary.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-mdbook.XXXXXX")"
# Installed beside the cache dir, so that making it the cache dir is one rename on one file system.
mkdir -p "$(dirname "$cache")"
stage="$(mktemp -d "$(dirname "$cache")/.mdbook-$version.XXXXXX")"
chmod 755 "$stage"
trap 'rm -rf "$scratch" "$stage"' EXIT
echo "install-mdbook: compiling mdbook $version from crates.io (once; cached in $cache)" >&2
CARGO_TARGET_DIR="$scratch/target" cargo install --quiet --locked mdbook --version "=$version" \
  --no-default-features --features search --root "$stage" >&2
# Complete or absent: the cache dir appears only once the binary is whole (one rename). Another run that
# finished first wins; this one's copy goes with its stage dir.
mv -T "$stage" "$cache" 2>/dev/null || [[ -x "$bin" ]]
echo "$bin"
