#!/usr/bin/env bash
# Fresh-machine install step for the test suite: checks the toolchains the machine image provides (Rust, Go)
# and installs the Debian packages the scripts use when they are missing. Idempotent and quick when all is there.
set -euo pipefail

need_apt=()
# chromium: the backtest's HTML report is checked in a real headless browser (engine/cli/tests/backtest.rs).
for tool in openssl:openssl curl:curl python3:python3 flock:util-linux chromium:chromium; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need_apt+=("${tool##*:}")
done
# Debian splits `python3 -m venv` (used by tests/python/setup-venv.sh) into python3-venv.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  need_apt+=(python3-venv)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-prereqs: installing ${need_apt[*]} from Debian" >&2
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-prereqs: need root to apt-get install ${need_apt[*]}" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "install-prereqs: cargo not found. Install Rust (rustup, stable >= 1.89) and re-run." >&2
  exit 1
fi
if ! command -v go >/dev/null 2>&1; then
  echo "install-prereqs: go not found. Go >= 1.26 builds the test kube-apiserver and etcd (tests/k8s/)." >&2
  exit 1
fi
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "${go_minor:-0}" -lt 26 ]; then
  echo "install-prereqs: $(go env GOVERSION) is too old; the pinned etcd and kube-apiserver need Go >= 1.26." >&2
  exit 1
fi
# Python packages the tests use (aiosmtpd, the Kubeflow SDK, ...), in a venv of their own.
"$(dirname "$0")/python/setup-venv.sh"

echo "install-prereqs: $(cargo --version), $(go env GOVERSION), $(openssl version | cut -d' ' -f1-2)" >&2
