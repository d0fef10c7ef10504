#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install what is missing, build (or reuse) a real kube-apiserver +
# etcd, start them, run every Rust test (unit, CLI and real-API integration) and the policy catalog tests with
# `trainwarden test`, then stop the control plane. This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

tests/install-prereqs.sh
export TRAINWARDEN_PYTHON="${TRAINWARDEN_VENV:-$HOME/.cache/trainwarden/venv}/bin/python"

# Build first, outside the control plane's lifetime, so a slow cold compile does not keep it running idle.
cargo build --workspace --all-targets --locked

tests/k8s/with-control-plane.sh bash -c '
  set -euo pipefail
  cargo test --workspace --locked
  cargo run --quiet --locked -p trainwarden -- test policies/ examples/
'
