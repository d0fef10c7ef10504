#!/usr/bin/env bash
# The cohort detectors against Optuna 5.0 and Ray Tune 2.60 on generated sweeps: the same reports in the same
# order to both, the stopped trials and their steps diffed (sweeps.py says how). Seconds once the venv exists.
# Usage: engine/bench/sweeps/check.sh [TRAINWARDEN_BIN]   (default: the workspace's debug build, built if missing)
# The peers are the pinned ones of engine/bench/peers/requirements.txt, in the bench's own venv (shared with
# engine/bench/peers: ~/.cache/trainwarden/bench-venv), installed here when missing or when the pins changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
peers="$root/engine/bench/peers"
venv="${TRAINWARDEN_BENCH_VENV:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/bench-venv}"
stamp="$venv/.requirements.sha256"
if [[ ! -x "$venv/bin/python" ]] || ! (cd "$peers" && sha256sum --status -c "$stamp" 2>/dev/null); then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$peers/requirements.txt"
  (cd "$peers" && sha256sum requirements.txt > "$stamp")
fi
bin="${1:-}"
if [[ -z "$bin" ]]; then
  (cd "$root" && cargo build -q -p trainwarden)
  bin="${CARGO_TARGET_DIR:-$root/target}/debug/trainwarden"
fi
"$venv/bin/python" "$here/sweeps.py" --trainwarden "$bin"
