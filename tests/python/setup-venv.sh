#!/usr/bin/env bash
# The Python environment the tests use (a real SMTP server, the Kubeflow SDK, the Python peers of the
# benchmarks): one virtual environment under $TRAINWARDEN_CACHE_DIR/venv (~/.cache/trainwarden/venv) with every tests/python/*.txt
# requirements file installed from PyPI. Re-installs only when a requirements file changed (hash stamp).
# Prints nothing but errors; tests find it through TRAINWARDEN_PYTHON (tests/run-all.sh exports it).
set -euo pipefail
cd "$(dirname "$0")"
venv="${TRAINWARDEN_VENV:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/venv}"
shopt -s nullglob
reqs=(*.txt)
[ ${#reqs[@]} -gt 0 ] || exit 0
stamp="$(cat "${reqs[@]}" | sha256sum | cut -c1-16)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.trainwarden-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
echo "setup-venv: installing ${reqs[*]} into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
for r in "${reqs[@]}"; do
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$r" >&2
done
echo "$stamp" >"$venv/.trainwarden-stamp"
