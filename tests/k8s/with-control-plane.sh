#!/usr/bin/env bash
# Run a command against a fresh, throw-away etcd + kube-apiserver with the
# Kubeflow Trainer CRDs installed, then always tear the control plane down.
#
# Usage:
#   tests/k8s/with-control-plane.sh CMD [ARGS...]
#   e.g. tests/k8s/with-control-plane.sh cargo test -p trainwarden-engine --test k8s
#
# CMD sees: KUBECONFIG, TRAINWARDEN_TEST_KUBECONFIG (same file),
# TRAINWARDEN_KUBECTL (the built kubectl), KUBECACHEDIR (per-plane cache),
# TRAINWARDEN_HELM (helm built by build-helm.sh), and TRAINWARDEN_PROMTOOL and
# TRAINWARDEN_PROMETHEUS (built by build-prometheus.sh).
# The exit code is CMD's. If CMD (or the setup) fails, the etcd and apiserver
# logs are copied to a directory that is printed (TRAINWARDEN_K8S_LOG_DIR
# to choose it); the temp dir is always removed.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[with-control-plane] %s\n' "$*" >&2; }
die() { printf '[with-control-plane] ERROR: %s\n' "$*" >&2; exit 1; }

(($# >= 1)) || die "usage: $0 CMD [ARGS...]"

plane_dir=""

# shellcheck disable=SC2317  # invoked via trap
cleanup() {
  local rc=$?
  # Ignore further Ctrl-C while tearing down, so the plane is never leaked.
  trap '' INT TERM
  if [[ -n "$plane_dir" && -d "$plane_dir" ]]; then
    "$SCRIPT_DIR/control-plane.sh" stop "$plane_dir" || log "WARNING: stopping the control plane failed; see $plane_dir"
    if ((rc != 0)); then
      local keep="${TRAINWARDEN_K8S_LOG_DIR:-}"
      if [[ -z "$keep" ]]; then
        keep="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-k8s-logs.XXXXXX")"
      fi
      mkdir -p "$keep"
      cp "$plane_dir"/*.log "$keep/" 2>/dev/null || true
      log "exit code $rc; control-plane logs kept in $keep"
    fi
    rm -rf "$plane_dir"
  fi
  exit "$rc"
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap runs (128 + signal number).
trap 'exit 130' INT
trap 'exit 143' TERM

cache="$("$SCRIPT_DIR/build-binaries.sh" | tail -n1)" || die "build-binaries.sh failed"
export TRAINWARDEN_K8S_BIN_DIR="$cache/bin"
# helm, for the chart test (engine/e2e/tests/chart/).
helm_cache="$("$SCRIPT_DIR/build-helm.sh" | tail -n1)" || die "build-helm.sh failed"
export TRAINWARDEN_HELM="$helm_cache/bin/helm"
# promtool, for the chart's rules and dashboard (engine/e2e/tests/monitoring/), and prometheus.
prometheus_cache="$("$SCRIPT_DIR/build-prometheus.sh" | tail -n1)" || die "build-prometheus.sh failed"
export TRAINWARDEN_PROMTOOL="$prometheus_cache/bin/promtool"
export TRAINWARDEN_PROMETHEUS="$prometheus_cache/bin/prometheus"

plane_dir="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-k8s.XXXXXX")"
"$SCRIPT_DIR/control-plane.sh" start "$plane_dir" >/dev/null
# shellcheck source=/dev/null  # written by control-plane.sh start
. "$plane_dir/env"
"$SCRIPT_DIR/control-plane.sh" install-crds "$KUBECONFIG"

log "running: $*"
rc=0
"$@" || rc=$?
exit "$rc"
