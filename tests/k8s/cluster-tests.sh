#!/usr/bin/env bash
# The cluster tier's tests in one command (root): build or reuse the binaries and images, start the cluster, run
# the smoke test and the end-to-end tests, and always take the cluster down again (logs are kept in
# ~/.cache/trainwarden/cluster/logs, test artifacts are copied to TRAINWARDEN_CLUSTER_ARTIFACTS or a temp dir).
# tests/run-all.sh runs it as soon as the binaries and images it needs are built. Usage:
# tests/k8s/cluster-tests.sh [E2E_TEST...]
#
# One cluster per machine (a fixed bridge and node address): runs hold TRAINWARDEN_CLUSTER_LOCK (default
# /run/lock/trainwarden-cluster.lock) from `up` to `down`, so a second run waits instead of breaking the first.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${TRAINWARDEN_CLUSTER_DIR:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/cluster}"
LOCK="${TRAINWARDEN_CLUSTER_LOCK:-/run/lock/trainwarden-cluster.lock}"
log() { printf '[cluster-tests] %s\n' "$*" >&2; }

# The lock is held by a `flock` process around this script; --close: the cluster's daemons do not inherit it.
if [[ "${TRAINWARDEN_CLUSTER_LOCKED:-}" != "$LOCK" ]]; then
  mkdir -p "$(dirname "$LOCK")"
  flock -n "$LOCK" true || log "another cluster tier holds $LOCK; waiting for it"
  TRAINWARDEN_CLUSTER_LOCKED="$LOCK" exec flock --close "$LOCK" bash "$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")" "$@"
fi

t0=$SECONDS
"$SCRIPT_DIR/cluster-prereqs.sh"
"$SCRIPT_DIR/build-binaries.sh" >/dev/null
"$SCRIPT_DIR/build-cluster-binaries.sh" >/dev/null
"$SCRIPT_DIR/build-helm.sh" >/dev/null
# run-all.sh's scratch Go build cache has served the last Go build: give its disk to the image build.
if [[ -n "${TRAINWARDEN_SCRATCH_GOCACHE:-}" && -d "$TRAINWARDEN_SCRATCH_GOCACHE" ]]; then
  log "removing the scratch Go build cache ($(du -sh "$TRAINWARDEN_SCRATCH_GOCACHE" 2>/dev/null | cut -f1))"
  rm -rf "$TRAINWARDEN_SCRATCH_GOCACHE"
fi
"$SCRIPT_DIR/build-images.sh" --no-import
log "binaries and images ready in $((SECONDS - t0)) s"

# shellcheck disable=SC2317  # invoked via trap
cleanup() {
  local rc=$?
  trap '' INT TERM
  local keep="${TRAINWARDEN_CLUSTER_ARTIFACTS:-}"
  [[ -n "$keep" ]] || keep="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-cluster-tests.XXXXXX")"
  mkdir -p "$keep"
  cp -r "$STATE/run/smoke" "$STATE/run/e2e" "$keep/" 2>/dev/null || true
  "$SCRIPT_DIR/cluster.sh" down || log "WARNING: cluster.sh down failed"
  cp -r "$STATE/logs" "$keep/" 2>/dev/null || true
  log "exit code $rc after $((SECONDS - t0)) s; artifacts and logs in $keep"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$SCRIPT_DIR/cluster.sh" up >/dev/null
"$SCRIPT_DIR/cluster/smoke.sh"
"$SCRIPT_DIR/cluster/e2e.sh" "$@"
