#!/usr/bin/env bash
# The decision bench's Keras EarlyStopping re-implementation against the real Keras 3.15.1 callback on a corpus.
# Usage: engine/bench/peers/check-keras.sh [CORPUS_DIR] [METRIC]   (default examples/corpus loss)
# Installs keras + jax (pinned, requirements-keras-check.txt) into their own venv, ~700 MB.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
venv="${TRAINWARDEN_KERAS_CHECK_VENV:-$HOME/.cache/trainwarden/keras-check-venv}"
stamp="$venv/.requirements.sha256"
if [[ ! -x "$venv/bin/python" ]] || ! (cd "$here" && sha256sum --status -c "$stamp" 2>/dev/null); then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements-keras-check.txt"
  (cd "$here" && sha256sum requirements-keras-check.txt > "$stamp")
fi
"$venv/bin/python" "$here/check_keras.py" "$(realpath "${1:-$root/examples/corpus}")" "${2:-loss}"
