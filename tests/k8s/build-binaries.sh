#!/usr/bin/env bash
# Build (or reuse from the cache) a real kube-apiserver, etcd and kubectl for the
# integration tests, from the Go module proxy only (no GitHub, no dl.k8s.io).
#
# Recipe: shared/research/real-apiserver.md (sections 1, 3.2 and 6.1).
# The wrapper modules under tests/k8s/wrappers/{kube,etcd}/ pin every module
# version (go.mod + go.sum); `--regenerate` rewrites them from the proxy.
#
# Usage:
#   tests/k8s/build-binaries.sh               build or reuse; last stdout line = cache dir
#   tests/k8s/build-binaries.sh --print-dir   only print the cache dir (no go needed)
#   tests/k8s/build-binaries.sh --regenerate  rewrite the wrapper go.mod/go.sum, then build
#   tests/k8s/build-binaries.sh --force       rebuild even if the cache looks fine
#   tests/k8s/build-binaries.sh --prefetch    only download the modules a build needs (into GOMODCACHE)
# The build is tests/k8s/go-build.sh's, like every Go tool of the tests.
#
# Environment:
#   TRAINWARDEN_K8S_CACHE          cache root (default $TRAINWARDEN_CACHE_DIR/k8s-bins, ~/.cache/trainwarden/k8s-bins)
#   TRAINWARDEN_K8S_MIN_FREE_GIB   free disk needed for a cold build (default 6)
#   TRAINWARDEN_ETCD_VERSION       etcd version for --regenerate (default: newest v3.6.x on the proxy)
#
# Everything except the cache dir goes to stderr, so callers can do
#   BIN="$(tests/k8s/build-binaries.sh | tail -n1)/bin"
set -euo pipefail

# The one Kubernetes version the tests run against (k8s-openapi feature v1_35).
K8S_VERSION=v1.35.4

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# free_kib, require_free_gib
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"
# go_need, go_wrapper_*, go_build_mains, cached_build, go_prefetch
# shellcheck source=go-build.sh
. "$SCRIPT_DIR/go-build.sh"
WRAPPERS="$SCRIPT_DIR/wrappers"
CACHE_ROOT="${TRAINWARDEN_K8S_CACHE:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/k8s-bins}"
MIN_FREE_GIB="${TRAINWARDEN_K8S_MIN_FREE_GIB:-6}"
# Kubernetes' own release build flags (hack/lib/golang.sh).
BUILD_TAGS="selinux,notest,grpcnotrace"

log() { printf '[build-binaries] %s\n' "$*" >&2; }
die() { printf '[build-binaries] ERROR: %s\n' "$*" >&2; exit 1; }

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

# --- wrapper modules ---------------------------------------------------------

# The etcd version is whatever the committed etcd wrapper pins.
etcd_version_from_wrapper() {
  local f="$WRAPPERS/etcd/go.mod"
  [[ -f "$f" ]] || die "$f is missing; run $0 --regenerate"
  local v
  v="$(grep -Eo 'go\.etcd\.io/etcd/server/v3 v3\.[0-9]+\.[0-9]+' "$f" | awk '{print $2}' | head -n1)"
  [[ -n "$v" ]] || die "cannot find go.etcd.io/etcd/server/v3 in $f; run $0 --regenerate"
  printf '%s\n' "$v"
}

regenerate_wrappers() {
  go_need
  go_wrapper_generate "$WRAPPERS/kube" k8s.io/kubernetes "$K8S_VERSION" tests/k8s/build-binaries.sh \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
  # etcd in a wrapper of its own, so MVS does not raise kube-apiserver's grpc/otel/etcd-client.
  local ev="${TRAINWARDEN_ETCD_VERSION:-}"
  if [[ -z "$ev" ]]; then
    ev="$(GOTOOLCHAIN=local GOWORK=off GOFLAGS=-mod=mod go list -m -versions go.etcd.io/etcd/server/v3 | tr ' ' '\n' |
      grep -E '^v3\.6\.[0-9]+$' | sort -V | tail -n1)"
    [[ -n "$ev" ]] || die "the module proxy lists no go.etcd.io/etcd/server/v3 v3.6.x version"
  fi
  log "etcd: using go.etcd.io/etcd/server/v3@$ev"
  go_wrapper_generate "$WRAPPERS/etcd" go.etcd.io/etcd/server/v3 "$ev" tests/k8s/build-binaries.sh go.etcd.io/etcd/server/v3
}

# --- build -------------------------------------------------------------------

# A binary is usable if it runs and reports the expected version.
bin_ok() {
  local dir="$1" out
  [[ -x "$dir/bin/kube-apiserver" && -x "$dir/bin/etcd" && -x "$dir/bin/kubectl" && -f "$dir/BUILD-INFO" ]] || return 1
  out="$("$dir/bin/kube-apiserver" --version 2>&1)" && [[ "$out" == *"$K8S_VERSION"* ]] || return 1
  out="$("$dir/bin/etcd" --version 2>&1)" && [[ "$out" == *"${ETCD_VERSION#v}"* ]] || return 1
  out="$("$dir/bin/kubectl" version --client 2>&1)" && [[ "$out" == *"$K8S_VERSION"* ]] || return 1
}

# The variables hack/lib/version.sh sets, so /version and `kubectl version` are right (the module zip carries no
# commit: an empty gitCommit beats the "$Format:%H$" placeholder).
kube_ldflags() {
  local minor="${K8S_VERSION#v1.}" pkg out="-s -w"
  minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=archive -X $pkg.gitCommit="
  done
  printf '%s\n' "$out"
}

build_all() {
  local out="$1"
  go_need "$WRAPPERS/kube" "$WRAPPERS/etcd"
  go_wrapper_check "$WRAPPERS/kube" k8s.io/kubernetes "$K8S_VERSION"
  require_free_gib "$MIN_FREE_GIB" "a cold build of kube-apiserver/etcd/kubectl needs about ${MIN_FREE_GIB} GiB (module cache + build cache + binaries). Free some space, or point TRAINWARDEN_K8S_CACHE / GOMODCACHE / GOCACHE somewhere bigger." \
    "$CACHE_ROOT" "$(go env GOMODCACHE)" "$(go env GOCACHE)"
  printf 'kube-apiserver/kubectl %s, etcd %s, built %s on %s\n' "$K8S_VERSION" "$ETCD_VERSION" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -m)" >"$out/BUILD-INFO"
  log "building kube-apiserver and kubectl $K8S_VERSION, and etcd $ETCD_VERSION beside them (cold: ~5-10 min on 2 cores)"
  # Two go commands at once: etcd's compiles fill the gaps of kube-apiserver's long serial link.
  go_build_mains "$WRAPPERS/etcd" "$out" "-s -w" "$BUILD_TAGS" etcd=go.etcd.io/etcd/server/v3 &
  local etcd_pid=$!
  go_build_mains "$WRAPPERS/kube" "$out" "$(kube_ldflags)" "$BUILD_TAGS" \
    kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kubectl=k8s.io/kubernetes/cmd/kubectl
  wait "$etcd_pid" || die "the etcd build failed"
}

# Turn signals into a normal exit so EXIT traps remove temp dirs.
trap 'exit 130' INT
trap 'exit 143' TERM

main() {
  if ((regenerate)); then
    [[ "$mode" == build ]] || die "--regenerate and --print-dir do not mix"
    regenerate_wrappers
  fi

  ETCD_VERSION="$(etcd_version_from_wrapper)"
  local final="$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
  case "$mode" in
    print) printf '%s\n' "$final"; return 0 ;;
    prefetch)
      bin_ok "$final" && return 0
      go_prefetch "$WRAPPERS/kube" "$BUILD_TAGS" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
      go_prefetch "$WRAPPERS/etcd" "$BUILD_TAGS" go.etcd.io/etcd/server/v3
      return 0 ;;
  esac
  GO_FORCE=$force cached_build "$final" k8s bin_ok build_all
  printf '%s\n' "$final"
}

main
