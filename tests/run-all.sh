#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install what is missing, build (or reuse) a real kube-apiserver +
# etcd, start them, run every Rust test (unit, CLI and real-API integration) and the policy catalog tests with
# `trainwarden test`, then stop the control plane; then the cluster tier's end-to-end tests against the real
# Kubeflow controllers. This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."

tests/install-prereqs.sh
export TRAINWARDEN_PYTHON="${TRAINWARDEN_VENV:-$HOME/.cache/trainwarden/venv}/bin/python"

# Go's build cache serves only the cold builds of the test tools (kube-apiserver, helm, the cluster binaries...),
# whose binaries are then cached by version under ~/.cache/trainwarden: a scratch cache for this run, shared by
# all those builds, then removed (by cluster-tests.sh before the image build, and at exit) instead of leaving
# ~10 GB in the machine's GOCACHE. Runs with warm binaries never write to it.
TRAINWARDEN_SCRATCH_GOCACHE="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-gocache.XXXXXX")"
export TRAINWARDEN_SCRATCH_GOCACHE GOCACHE="$TRAINWARDEN_SCRATCH_GOCACHE"
trap 'rm -rf "$TRAINWARDEN_SCRATCH_GOCACHE"' EXIT
# A clean CI checkout builds once: incremental compilation data (~2.5 GB) would only take disk.
if [[ "${CI:-}" == true || "${CI:-}" == 1 ]]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi

# Build first, outside the control plane's lifetime, so a slow cold compile does not keep it running idle.
cargo build --workspace --all-targets --locked

# The fault-injection suite (engine/e2e/tests/faults.rs) appends one row per scenario here.
fault_table="${CARGO_TARGET_DIR:-target}/tmp/fault-table.tsv"
rm -f "$fault_table"

tests/k8s/with-control-plane.sh bash -c '
  set -euo pipefail
  cargo test --workspace --locked
  cargo run --quiet --locked -p trainwarden -- test policies/ examples/
'

if [[ -s "$fault_table" ]]; then
  echo "== fault injection (real kube-apiserver + etcd, controllers as processes): every action once =="
  { printf 'scenario\texpected\tperformed\tdoubled\tlost\trecovered in\n'; cat "$fault_table"; } |
    if command -v column >/dev/null; then column -t -s $'\t'; else cat; fi
fi

# The cluster tier: a real node (kubelet + containerd), the real Kubeflow Trainer, JobSet and Kueue, and
# trainwarden installed by its chart from the image its Dockerfile builds (tests/k8s/README.md). It changes host
# state (undone by `cluster.sh down`, which it always runs), so it needs root; under CI=true nothing skips it.
if [[ "$(id -u)" == 0 ]]; then
  tests/k8s/cluster-tests.sh
elif [[ "${CI:-}" == true || "${CI:-}" == 1 ]]; then
  echo "the cluster tier needs root (CI=true, so this fails)" >&2
  exit 1
else
  echo "SKIPPED: the cluster tier (tests/k8s/cluster-tests.sh) needs root" >&2
fi
