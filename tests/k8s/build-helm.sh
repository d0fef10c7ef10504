#!/usr/bin/env bash
# Build (or reuse from the cache) the helm CLI that the chart test runs (engine/e2e/tests/chart/),
# from the Go module proxy only, the same way build-binaries.sh builds kube-apiserver/etcd/kubectl.
#
# The wrapper module tests/k8s/wrappers/helm/ pins helm and every dependency (go.mod + go.sum);
# `--regenerate` rewrites it from the proxy for HELM_VERSION below.
#
# Usage:
#   tests/k8s/build-helm.sh               build or reuse; last stdout line = cache dir (helm is in DIR/bin/helm)
#   tests/k8s/build-helm.sh --print-dir   only print the cache dir (no go needed)
#   tests/k8s/build-helm.sh --regenerate  rewrite the wrapper go.mod/go.sum, then build
#   tests/k8s/build-helm.sh --force       rebuild even if the cache looks fine
#   tests/k8s/build-helm.sh --prefetch    only download the modules a build needs (into GOMODCACHE)
# The build is tests/k8s/go-build.sh's, like every Go tool of the tests.
#
# Environment:
#   TRAINWARDEN_K8S_CACHE           cache root (default $TRAINWARDEN_CACHE_DIR/k8s-bins), shared with build-binaries.sh
#   TRAINWARDEN_HELM_MIN_FREE_GIB   free disk needed for a cold build (default 3)
#
# Everything except the cache dir goes to stderr, so callers can do
#   HELM="$(tests/k8s/build-helm.sh | tail -n1)/bin/helm"
set -euo pipefail

# Helm 4: helm 3 is out of security support since November 2026. Chart apiVersion v2 works with both.
HELM_VERSION=v4.3.1
HELM_MODULE=helm.sh/helm/v4

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# free_kib, require_free_gib
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"
# shellcheck source=go-build.sh
. "$SCRIPT_DIR/go-build.sh"
WRAPPER="$SCRIPT_DIR/wrappers/helm"
CACHE_ROOT="${TRAINWARDEN_K8S_CACHE:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/k8s-bins}"
MIN_FREE_GIB="${TRAINWARDEN_HELM_MIN_FREE_GIB:-3}"

log() { printf '[build-helm] %s\n' "$*" >&2; }
die() { printf '[build-helm] ERROR: %s\n' "$*" >&2; exit 1; }

# Prints the header comment of this file.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; }

mode=build
force=0
regenerate=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) mode=print ;;
    --regenerate) regenerate=1 ;;
    --force) force=1 ;;
    --prefetch) mode=prefetch ;;
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown argument: $arg" ;;
  esac
done

# The helm version is whatever the committed wrapper pins.
helm_version_from_wrapper() {
  local f="$WRAPPER/go.mod"
  [[ -f "$f" && -f "$WRAPPER/go.sum" ]] || die "$WRAPPER/go.{mod,sum} missing; run $0 --regenerate"
  local v
  v="$(grep -Eo "${HELM_MODULE//./\\.} v[0-9]+\.[0-9]+\.[0-9]+" "$f" | awk '{print $2}' | head -n1)"
  [[ -n "$v" ]] || die "cannot find $HELM_MODULE in $f; run $0 --regenerate"
  printf '%s\n' "$v"
}

# Usable if it runs and reports the expected version.
bin_ok() {
  local dir="$1" out
  [[ -x "$dir/bin/helm" && -f "$dir/BUILD-INFO" ]] || return 1
  out="$(HELM_CONFIG_HOME=/nonexistent "$dir/bin/helm" version --template '{{.Version}}' 2>/dev/null)" || return 1
  [[ "$out" == "$HV" ]]
}

build_helm() {
  local out="$1"
  go_need "$WRAPPER"
  require_free_gib "$MIN_FREE_GIB" "a cold helm build needs about ${MIN_FREE_GIB} GiB (module cache + build cache). Free some space, or point TRAINWARDEN_K8S_CACHE / GOMODCACHE / GOCACHE somewhere bigger." \
    "$CACHE_ROOT" "$(go env GOMODCACHE)" "$(go env GOCACHE)"
  # What helm's Makefile sets for a tagged release build (the module zip carries no git commit).
  local pkg="$HELM_MODULE/internal/version"
  printf 'helm %s, built %s on %s\n' "$HV" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -m)" >"$out/BUILD-INFO"
  go_build_mains "$WRAPPER" "$out" "-s -w -X $pkg.version=$HV -X $pkg.metadata= -X $pkg.gitTreeState=archive -X $pkg.gitCommit=" "" \
    "helm=$HELM_MODULE/cmd/helm"
}

# Turn signals into a normal exit so EXIT traps remove temp dirs.
trap 'exit 130' INT
trap 'exit 143' TERM

main() {
  if ((regenerate)); then
    [[ "$mode" == build ]] || die "--regenerate and --print-dir do not mix"
    go_need
    go_wrapper_generate "$WRAPPER" "$HELM_MODULE" "$HELM_VERSION" tests/k8s/build-helm.sh "$HELM_MODULE/cmd/helm"
  fi

  HV="$(helm_version_from_wrapper)"
  local final="$CACHE_ROOT/helm-$HV"
  case "$mode" in
    print) printf '%s\n' "$final"; return 0 ;;
    prefetch) bin_ok "$final" || go_prefetch "$WRAPPER" "" "$HELM_MODULE/cmd/helm"; return 0 ;;
  esac
  GO_FORCE=$force cached_build "$final" helm bin_ok build_helm
  printf '%s\n' "$final"
}

main
