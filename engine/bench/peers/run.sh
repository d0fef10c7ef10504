#!/usr/bin/env bash
# trainwarden against Ray Tune's TrialPlateauStopper and Optuna's PatientPruner on one generated stream, plus
# the bare serde_json decode, in one run. Usage: engine/bench/peers/run.sh [JOBS] [SAMPLES] (default 2000 500).
# Installs ray[tune] and optuna (pinned in requirements.txt) into their own venv, never the test venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
venv="${TRAINWARDEN_BENCH_VENV:-$HOME/.cache/trainwarden/bench-venv}"
stamp="$venv/.requirements.sha256"
if [[ ! -x "$venv/bin/python" ]] || ! (cd "$here" && sha256sum --status -c "$stamp" 2>/dev/null); then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements.txt"
  (cd "$here" && sha256sum requirements.txt > "$stamp")
fi
cd "$root"
cargo build --release -q -p trainwarden -p trainwarden-bench
target="${CARGO_TARGET_DIR:-$root/target}/release"
stream="${TMPDIR:-/tmp}/trainwarden-peers-${1:-2000}x${2:-500}.jsonl"
"$target/peer_stream" "$stream" "${1:-2000}" "${2:-500}"
"$venv/bin/python" "$here/peers.py" --stream "$stream" --trainwarden "$target/trainwarden" \
  --decode-floor "$target/decode_floor" --replay-stream "$target/replay_stream" --policies "$here"
