#!/usr/bin/env bash
# Decision quality: the default catalog and the peers (Ray Tune, Optuna, Keras, Lightning, SageMaker) on the
# corpus, judged by `trainwarden backtest`, on the held-out part and the tuning part; see decisions.py.
# Usage: engine/bench/peers/decisions.sh [CORPUS_DIR] [OUT_DIR]   (default examples/corpus, a temp dir)
#        extra decisions.py options go after them (--jobs, --metric, --new-result, --tune, --held-out,
#        --stops-only).
# Installs the pinned Python packages (requirements.txt) into the bench's own venv, never the test venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
corpus="$root/examples/corpus"
out=""
if [[ $# -gt 0 && $1 != -* ]]; then corpus="$1"; shift; fi
if [[ $# -gt 0 && $1 != -* ]]; then out="$1"; shift; fi
corpus="$(realpath "$corpus")"
out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-decisions.XXXXXX")}"
venv="${TRAINWARDEN_BENCH_VENV:-$HOME/.cache/trainwarden/bench-venv}"
stamp="$venv/.requirements.sha256"
if [[ ! -x "$venv/bin/python" ]] || ! (cd "$here" && sha256sum --status -c "$stamp" 2>/dev/null); then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements.txt"
  (cd "$here" && sha256sum requirements.txt > "$stamp")
fi
# The peers' own known answers first (re-implementations, the new-result rule, the real Ray and Optuna).
(cd "$here" && "$venv/bin/python" -m unittest -q test_decisions.py)
cd "$root"
cargo build --release -q -p trainwarden
target="${CARGO_TARGET_DIR:-$root/target}/release"
mkdir -p "$out"
"$venv/bin/python" "$here/decisions.py" "$corpus" --trainwarden "$target/trainwarden" \
  --policies "$root/policies" --out "$out" "$@"
