#!/usr/bin/env bash
# Tests of the companion package (sdk/python): builds and installs it into a venv of its own under
# ~/.cache/trainwarden/ (re-created only when a requirements file or pyproject.toml changes), lints it with ruff,
# type-checks it with mypy --strict, and runs pytest. Seconds once the venv exists.
#
#   sdk/python/run-tests.sh [--with-torch] [pytest arguments...]
#
# --with-torch uses a second venv that adds requirements-torch.txt (torch, accelerate, Lightning: ~5.6 GB) and runs
# the real transformers Trainer, Lightning and torch.distributed tests, which otherwise skip.
# TRAINWARDEN_BIN=/path/to/trainwarden also runs the test against `trainwarden watch`'s status endpoint (under
# CI=true it is then required).
set -euo pipefail
cd "$(dirname "$0")"

with_torch=0
if [[ "${1:-}" == --with-torch ]]; then
  with_torch=1
  shift
fi
reqs=(requirements-test.txt)
venv="${TRAINWARDEN_SDK_VENV:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/sdk-venv}"
if [[ $with_torch == 1 ]]; then
  reqs+=(requirements-torch.txt)
  venv="${TRAINWARDEN_SDK_TORCH_VENV:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/sdk-venv-torch}"
  export TRAINWARDEN_SDK_REQUIRE_TORCH=1
fi

stamp="$(cat "${reqs[@]}" pyproject.toml | sha256sum | cut -c1-16)"
if ! [[ -x "$venv/bin/python" && "$(cat "$venv/.trainwarden-stamp" 2>/dev/null)" == "$stamp" ]]; then
  echo "run-tests: installing ${reqs[*]} into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  for r in "${reqs[@]}"; do
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$r" >&2
  done
  # Editable: the tests see the working tree; test_package.py checks that a real (wheel) install works too.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . >&2
  echo "$stamp" >"$venv/.trainwarden-stamp"
fi
# The venv is shared by every checkout on the machine (a cache), but an editable install points at one
# checkout's src/: when that is not this one (another clone, a removed worktree), point it here again.
if [[ "$("$venv/bin/python" -c 'import trainwarden, os; print(os.path.dirname(os.path.dirname(trainwarden.__file__)))' 2>/dev/null)" != "$PWD/src" ]]; then
  echo "run-tests: pointing the editable install in $venv at $PWD" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . >&2
fi

"$venv/bin/ruff" check --quiet --no-cache src tests
"$venv/bin/python" -m mypy --cache-dir "$venv/.mypy_cache" --no-error-summary
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
