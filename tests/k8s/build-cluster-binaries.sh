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
#
# Environment:
#   TRAINWARDEN_K8S_CACHE                  cache root (default ~/.cache/trainwarden/k8s-bins), shared with build-binaries.sh
#   TRAINWARDEN_CLUSTER_MIN_FREE_GIB       free disk needed for a cold build (default 8)
#
# The controllers' manifests (CRDs, webhook configurations) are copied from the module source into the
# cache dir (<component dir>/src/...), so cluster.sh needs neither go nor GOMODCACHE.
# Everything except the result dir goes to stderr.
set -euo pipefail

K8S_VERSION=v1.35.4
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
COREDNS_VERSION=v1.15.0
TRAINER_VERSION=v2.2.0
JOBSET_VERSION=v0.11.1
KUEUE_VERSION=v0.17.0

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# free_kib, require_free_gib
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"
WRAPPERS="$SCRIPT_DIR/wrappers"
CACHE_ROOT="${TRAINWARDEN_K8S_CACHE:-$HOME/.cache/trainwarden/k8s-bins}"
MIN_FREE_GIB="${TRAINWARDEN_CLUSTER_MIN_FREE_GIB:-8}"
COMPONENTS=(kube-node coredns trainer jobset kueue)

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

need_go() {
  command -v go >/dev/null 2>&1 || die "go is not installed or not on PATH; install Go >= 1.26"
  log "using $(GOTOOLCHAIN=local go env GOVERSION) ($(command -v go))"
}

# --- wrapper modules --------------------------------------------------------------------------------

regenerate_one() {
  local c="$1" work="$2" mv mod ver gomod godir godebug
  mv="$(comp_module "$c")"
  mod="${mv%@*}"
  ver="${mv##*@}"
  log "$c: fetching $mv from the module proxy"
  gomod="$(cd "$work" && go mod download -json "$mv" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || die "go mod download did not give a go.mod for $mv"
  godir="$(sed -n 's/^go[[:space:]][[:space:]]*\([0-9][0-9.]*\)[[:space:]]*$/\1/p' "$gomod" | head -n1)"
  godebug="$(sed -n 's/^godebug[[:space:]][[:space:]]*default=\([^[:space:]]*\).*/\1/p' "$gomod" | head -n1)"
  local dir="$work/$c"
  mkdir -p "$dir"
  cat >"$dir/go.mod" <<EOF
// Generated by tests/k8s/build-cluster-binaries.sh --regenerate. Do not edit by hand.
// Throw-away module that only exists to build $mod $ver from the Go module proxy
// (like tests/k8s/wrappers/kube). It contains no Go code.
module trainwarden.local/k8s-test-bins/$c

go $godir
EOF
  (
    cd "$dir"
    [[ -z "$godebug" ]] || go mod edit -godebug="default=$godebug"
    if [[ "$c" == kube-node ]]; then
      # kubernetes requires its staging modules at v0.0.0 with local replaces; use the published copies.
      local staging m args=()
      staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod" | sort -u)"
      [[ -n "$staging" ]] || die "no staging replace lines in $gomod"
      for m in $staging; do args+=("-replace=$m=$m@$STAGING_VERSION"); done
      go mod edit "${args[@]}"
    elif grep -Eq '^[[:space:]]*replace([[:space:]]|\()' "$gomod"; then
      # A dependency's replace directives are ignored; copy them if a future version has any.
      die "$mv has replace directives in its go.mod; copy them into the wrapper by hand first"
    fi
    local p tools=()
    while IFS= read -r p; do tools+=("${p#*=}@$ver"); done < <(comp_mains "$c")
    go get -tool "${tools[@]}"
  )
  mkdir -p "$WRAPPERS/$c"
  cp "$dir/go.mod" "$dir/go.sum" "$WRAPPERS/$c/"
  log "$c: wrote $WRAPPERS/$c/go.{mod,sum}"
}

check_wrapper() {
  local c="$1" mv f
  mv="$(comp_module "$c")"
  f="$WRAPPERS/$c/go.mod"
  [[ -f "$f" && -f "$WRAPPERS/$c/go.sum" ]] || die "$WRAPPERS/$c/go.{mod,sum} missing; run $0 --regenerate"
  grep -Eq "${mv%@*} ${mv##*@}( |$)" "$f" || die "$f does not pin $mv; run $0 --regenerate"
}

# --- cache ------------------------------------------------------------------------------------------

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

check_disk() {
  require_free_gib "$MIN_FREE_GIB" "a cold build of the cluster tier needs about ${MIN_FREE_GIB} GiB (module cache + build cache + binaries)" \
    "$CACHE_ROOT" "$(go env GOMODCACHE)" "$(go env GOCACHE)"
}

build_one() {
  local c="$1" final="$2" tmp ldflags tags p
  tmp="$(mktemp -d "$CACHE_ROOT/.cluster-build-XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  mkdir -p "$tmp/out/bin"
  cp -r "$WRAPPERS/$c" "$tmp/src"
  ldflags="$(comp_ldflags "$c")"
  tags="$(comp_tags "$c")"
  local args=(build -mod=readonly -trimpath -buildvcs=false)
  [[ -z "$tags" ]] || args+=(-tags "$tags")
  local t0=$SECONDS pkgs=()
  while IFS= read -r p; do pkgs+=("${p#*=}"); done < <(comp_mains "$c")
  log "$c: building ${pkgs[*]} ($(comp_version "$c"))"
  # One go build for all mains of a component shares the package graph; -o DIR/ names them by package,
  # then they are renamed to their output names.
  (cd "$tmp/src" && CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off go "${args[@]}" -ldflags "$ldflags" -o "$tmp/build/" "${pkgs[@]}") ||
    die "$c build failed (see the go output above)"
  while IFS= read -r p; do
    local name="${p%%=*}" base="${p#*=}"
    base="${base##*/}"
    mv "$tmp/build/$base" "$tmp/out/bin/$name"
  done < <(comp_mains "$c")
  {
    printf '%s %s\n' "$(comp_module "$c")" "${pkgs[*]}"
    printf 'built %s with %s on %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go env GOVERSION)" "$(uname -m)"
    printf 'go %s CGO_ENABLED=0 GOTOOLCHAIN=local -ldflags "%s"\n' "${args[*]}" "$ldflags"
    printf 'build: %s s\n' "$((SECONDS - t0))"
  } >"$tmp/out/BUILD-INFO"
  cp "$WRAPPERS/$c/go.mod" "$tmp/out/$c.go.mod"
  local sub srcdir
  srcdir="$(cd "$tmp/src" && GOTOOLCHAIN=local GOWORK=off go list -mod=readonly -m -f '{{.Dir}}' "$(comp_module "$c" | sed 's/@.*//')")"
  for sub in $(comp_manifests "$c"); do
    mkdir -p "$tmp/out/src/$(dirname "$sub")"
    cp -r "$srcdir/$sub" "$tmp/out/src/$sub"
    chmod -R u+w "$tmp/out/src"
  done
  bin_ok "$c" "$tmp/out" || die "$c: the freshly built binaries do not run or report the wrong version"
  rm -rf "$final"
  mv -T "$tmp/out" "$final"
  rm -rf "$tmp"
  trap - EXIT
  log "$c: built in $((SECONDS - t0)) s -> $final ($(du -sh "$final" | cut -f1))"
}

trap 'exit 130' INT
trap 'exit 143' TERM

# The result: one dir whose bin/ links every component's binaries (and the sources' dirs in GOMODCACHE).
result_dir() {
  echo "$CACHE_ROOT/cluster-k8s-$K8S_VERSION-coredns-$COREDNS_VERSION-trainer-$TRAINER_VERSION-jobset-$JOBSET_VERSION-kueue-$KUEUE_VERSION"
}

main() {
  local list=("${COMPONENTS[@]}")
  [[ -z "$only" ]] || list=("$only")
  if ((regenerate)); then
    [[ "$mode" == build ]] || die "--regenerate and --print-dir do not mix"
    need_go
    local work c
    work="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-wrapgen.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    export GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=mod"
    for c in "${list[@]}"; do regenerate_one "$c" "$work"; done
    rm -rf "$work"
    trap - EXIT
    unset GOFLAGS
  fi
  local res
  res="$(result_dir)"
  if [[ "$mode" == print ]]; then
    printf '%s\n' "$res"
    return 0
  fi
  mkdir -p "$CACHE_ROOT"
  local c todo=()
  for c in "${list[@]}"; do
    check_wrapper "$c"
    if ((force)) || ! bin_ok "$c" "$(comp_dir "$c")"; then todo+=("$c"); else log "$c: cache hit $(comp_dir "$c")"; fi
  done
  if ((${#todo[@]})); then
    need_go
    exec 9>"$CACHE_ROOT/.cluster.lock"
    if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
      log "another build holds $CACHE_ROOT/.cluster.lock; waiting for it"
      flock 9
    fi
    rm -rf "$CACHE_ROOT"/.cluster-build-*
    check_disk
    local t0=$SECONDS
    for c in "${todo[@]}"; do
      if ((!force)) && bin_ok "$c" "$(comp_dir "$c")"; then log "$c: built by another process"; continue; fi
      build_one "$c" "$(comp_dir "$c")"
    done
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
