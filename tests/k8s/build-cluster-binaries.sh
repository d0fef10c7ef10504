#!/usr/bin/env bash
# Build (or reuse from the cache) the binaries of the cluster tier (tests/k8s/cluster.sh), from the Go
# module proxy only, the same way build-binaries.sh builds kube-apiserver/etcd/kubectl:
#   kube-node   kubelet, kube-controller-manager, kube-scheduler, kube-proxy   (k8s.io/kubernetes, K8S_VERSION)
#   coredns     CoreDNS (github.com/coredns/coredns, the cluster DNS with its kubernetes plugin)
#   trainer     Kubeflow Trainer trainer-controller-manager (github.com/kubeflow/trainer/v2)
#   jobset      JobSet controller (sigs.k8s.io/jobset, main package at the module root)
#   kueue       Kueue controller (sigs.k8s.io/kueue/cmd/kueue)
# Each component is one throw-away wrapper module under tests/k8s/wrappers/<component>/ (go.mod + go.sum
# pin every module) and one cache dir, so bumping one version rebuilds only that one.
#
# Usage:
#   tests/k8s/build-cluster-binaries.sh               build or reuse; last stdout line = a dir whose bin/ has all of them
#   tests/k8s/build-cluster-binaries.sh --print-dir   only print that dir (no go needed)
#   tests/k8s/build-cluster-binaries.sh --regenerate  rewrite the wrapper go.mod/go.sum from the proxy, then build
#   tests/k8s/build-cluster-binaries.sh --force       rebuild even if the cache looks fine
#   tests/k8s/build-cluster-binaries.sh --only NAME   build only one component (kube-node, coredns, trainer, jobset, kueue)
#   tests/k8s/build-cluster-binaries.sh --prefetch    only download the modules the builds need (into GOMODCACHE)
# The builds are tests/k8s/go-build.sh's, like every Go tool of the tests; two components build at a time.
#
# Environment:
#   TRAINWARDEN_K8S_CACHE                  cache root (default $TRAINWARDEN_CACHE_DIR/k8s-bins), shared with build-binaries.sh
#   TRAINWARDEN_CLUSTER_MIN_FREE_GIB       free disk needed for a cold build (default 8)
#   TRAINWARDEN_GO_JOBS                    components built at once (default 2)
#
# The controllers' manifests (CRDs, webhook configurations) are copied from the module source into the
# cache dir (<component dir>/src/...), so cluster.sh needs neither go nor GOMODCACHE.
# Everything except the result dir goes to stderr.
set -euo pipefail

K8S_VERSION=v1.35.4
COREDNS_VERSION=v1.15.0
TRAINER_VERSION=v2.2.0
JOBSET_VERSION=v0.11.1
KUEUE_VERSION=v0.17.0

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# free_kib, require_free_gib
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"
# shellcheck source=go-build.sh
. "$SCRIPT_DIR/go-build.sh"
WRAPPERS="$SCRIPT_DIR/wrappers"
CACHE_ROOT="${TRAINWARDEN_K8S_CACHE:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/k8s-bins}"
MIN_FREE_GIB="${TRAINWARDEN_CLUSTER_MIN_FREE_GIB:-8}"
JOBS="${TRAINWARDEN_GO_JOBS:-2}"
# Longest build first: two build at a time, and the last one builds alone.
COMPONENTS=(kueue kube-node coredns trainer jobset)

log() { printf '[build-cluster-binaries] %s\n' "$*" >&2; }
die() { printf '[build-cluster-binaries] ERROR: %s\n' "$*" >&2; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; }

mode=build
force=0
regenerate=0
only=""
while (($#)); do
  case "$1" in
    --print-dir) mode=print ;;
    --regenerate) regenerate=1 ;;
    --force) force=1 ;;
    --prefetch) mode=prefetch ;;
    --only) shift; only="${1:-}"; [[ " ${COMPONENTS[*]} " == *" $only "* ]] || die "--only wants one of: ${COMPONENTS[*]}" ;;
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown argument: $1" ;;
  esac
  shift
done

# --- per-component facts ----------------------------------------------------------------------------

# module@version that the wrapper requires
comp_module() {
  case "$1" in
    kube-node) echo "k8s.io/kubernetes@$K8S_VERSION" ;;
    coredns) echo "github.com/coredns/coredns@$COREDNS_VERSION" ;;
    trainer) echo "github.com/kubeflow/trainer/v2@$TRAINER_VERSION" ;;
    jobset) echo "sigs.k8s.io/jobset@$JOBSET_VERSION" ;;
    kueue) echo "sigs.k8s.io/kueue@$KUEUE_VERSION" ;;
  esac
}
# "output-name=main-package" pairs
comp_mains() {
  case "$1" in
    kube-node)
      local c
      for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do echo "$c=k8s.io/kubernetes/cmd/$c"; done ;;
    coredns) echo "coredns=github.com/coredns/coredns" ;;
    trainer) echo "trainer-controller-manager=github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager" ;;
    jobset) echo "jobset-controller=sigs.k8s.io/jobset" ;;
    kueue) echo "kueue=sigs.k8s.io/kueue/cmd/kueue" ;;
  esac
}
# Source dirs copied into the cache (CRDs, webhook manifests)
comp_manifests() {
  case "$1" in
    trainer) echo "manifests/base" ;;
    jobset | kueue) echo "config/components" ;;
  esac
}
comp_version() { local m; m="$(comp_module "$1")"; echo "${m##*@}"; }
comp_dir() { echo "$CACHE_ROOT/$1-$(comp_version "$1")"; }
comp_tags() { [[ "$1" == kube-node ]] && echo "selinux,notest,grpcnotrace" || echo ""; }
# The version variables each project's own Makefile sets (the module zip carries no git commit).
comp_ldflags() {
  local v
  v="$(comp_version "$1")"
  case "$1" in
    kube-node)
      local minor="${K8S_VERSION#v1.}" pkg out=""
      minor="${minor%%.*}"
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        out+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=archive -X $pkg.gitCommit="
      done
      echo "-s -w$out" ;;
    coredns) echo "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$v" ;;
    jobset) echo "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$v" ;;
    kueue) echo "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$v" ;;
    *) echo "-s -w" ;;
  esac
}

# --- build ------------------------------------------------------------------------------------------

bin_ok() {
  local c="$1" dir="$2" p name out v
  [[ -f "$dir/BUILD-INFO" ]] || return 1
  v="$(comp_version "$c")"
  for p in $(comp_manifests "$c"); do [[ -d "$dir/src/$p" ]] || return 1; done
  while IFS= read -r p; do
    name="${p%%=*}"
    [[ -x "$dir/bin/$name" ]] || return 1
  done < <(comp_mains "$c")
  # The ones that can report a version must report ours.
  case "$c" in
    kube-node)
      for name in kubelet kube-controller-manager kube-scheduler kube-proxy; do
        out="$("$dir/bin/$name" --version 2>&1)" && [[ "$out" == *"$v"* ]] || return 1
      done ;;
    coredns) out="$("$dir/bin/coredns" -version 2>&1)" && [[ "$out" == *"${v#v}"* ]] || return 1 ;;
  esac
  return 0
}

# One component: its mains in one go build, then the manifests copied from the module source.
build_one() {
  local c="$1" out="$2" mains=() p
  while IFS= read -r p; do mains+=("$p"); done < <(comp_mains "$c")
  printf '%s %s, built %s on %s\n' "$(comp_module "$c")" "${mains[*]}" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -m)" >"$out/BUILD-INFO"
  go_build_mains "$WRAPPERS/$c" "$out" "$(comp_ldflags "$c")" "$(comp_tags "$c")" "${mains[@]}"
  local sub srcdir
  srcdir="$(cd "$WRAPPERS/$c" && GOTOOLCHAIN=local GOWORK=off go list -mod=readonly -m -f '{{.Dir}}' "$(comp_module "$c" | sed 's/@.*//')")"
  for sub in $(comp_manifests "$c"); do
    mkdir -p "$out/src/$(dirname "$sub")"
    cp -r "$srcdir/$sub" "$out/src/$sub"
    chmod -R u+w "$out/src"
  done
}

# cached_build calls these with the dir only; the component is BUILDING.
ok_current() { bin_ok "$BUILDING" "$1"; }
build_current() { build_one "$BUILDING" "$1"; }

trap 'exit 130' INT
trap 'exit 143' TERM

# The result: one dir whose bin/ links every component's binaries (and the sources' dirs in GOMODCACHE).
result_dir() {
  echo "$CACHE_ROOT/cluster-k8s-$K8S_VERSION-coredns-$COREDNS_VERSION-trainer-$TRAINER_VERSION-jobset-$JOBSET_VERSION-kueue-$KUEUE_VERSION"
}

main() {
  local list=("${COMPONENTS[@]}") c
  [[ -z "$only" ]] || list=("$only")
  if ((regenerate)); then
    [[ "$mode" == build ]] || die "--regenerate and --print-dir do not mix"
    go_need
    local mv p tools
    for c in "${list[@]}"; do
      mv="$(comp_module "$c")"
      tools=()
      while IFS= read -r p; do tools+=("${p#*=}"); done < <(comp_mains "$c")
      go_wrapper_generate "$WRAPPERS/$c" "${mv%@*}" "${mv##*@}" tests/k8s/build-cluster-binaries.sh "${tools[@]}"
    done
  fi
  local res
  res="$(result_dir)"
  case "$mode" in
    print) printf '%s\n' "$res"; return 0 ;;
    prefetch)
      local p pkgs
      for c in "${list[@]}"; do
        bin_ok "$c" "$(comp_dir "$c")" && continue
        pkgs=()
        while IFS= read -r p; do pkgs+=("${p#*=}"); done < <(comp_mains "$c")
        go_prefetch "$WRAPPERS/$c" "$(comp_tags "$c")" "${pkgs[@]}"
      done
      return 0 ;;
  esac
  mkdir -p "$CACHE_ROOT"
  local todo=()
  for c in "${list[@]}"; do
    local mv
    mv="$(comp_module "$c")"
    go_wrapper_check "$WRAPPERS/$c" "${mv%@*}" "${mv##*@}"
    if ((force)) || ! bin_ok "$c" "$(comp_dir "$c")"; then todo+=("$c"); else log "$c: cache hit $(comp_dir "$c")"; fi
  done
  if ((${#todo[@]})); then
    go_need "${todo[@]/#/$WRAPPERS/}"
    require_free_gib "$MIN_FREE_GIB" "a cold build of the cluster tier needs about ${MIN_FREE_GIB} GiB (module cache + build cache + binaries)" \
      "$CACHE_ROOT" "$(go env GOMODCACHE)" "$(go env GOCACHE)"
    local t0=$SECONDS pids=() names=() i
    # JOBS components at a time (default 2): one go command leaves a core idle while it links a big binary.
    for c in "${todo[@]}"; do
      while (($(jobs -pr | wc -l) >= JOBS)); do wait -n || true; done
      # (A subshell does not inherit the traps: set them again, so a stopped build still removes its temp dir.)
      (
        trap 'exit 130' INT
        trap 'exit 143' TERM
        BUILDING="$c" GO_FORCE=$force cached_build "$(comp_dir "$c")" "cluster-$c" ok_current build_current
      ) &
      pids+=("$!")
      names+=("$c")
    done
    local failed=()
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed+=("${names[$i]}"); done
    ((${#failed[@]} == 0)) || die "building ${failed[*]} failed (see above)"
    log "built ${todo[*]} in $((SECONDS - t0)) s"
  fi
  if [[ -z "$only" ]]; then
    mkdir -p "$res/bin"
    local p name
    for c in "${COMPONENTS[@]}"; do
      while IFS= read -r p; do
        name="${p%%=*}"
        ln -sfn "../../$(basename "$(comp_dir "$c")")/bin/$name" "$res/bin/$name"
      done < <(comp_mains "$c")
    done
    {
      echo "K8S_VERSION=$K8S_VERSION"
      echo "COREDNS_VERSION=$COREDNS_VERSION"
      echo "TRAINER_VERSION=$TRAINER_VERSION"
      echo "JOBSET_VERSION=$JOBSET_VERSION"
      echo "KUEUE_VERSION=$KUEUE_VERSION"
    } >"$res/versions.env"
  fi
  printf '%s\n' "$res"
}

main
