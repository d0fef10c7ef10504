#!/usr/bin/env bash
# Build (or reuse from the cache) promtool and prometheus from the Go module proxy only, the same way
# build-helm.sh builds helm. promtool checks and unit-tests the chart's rules and the dashboard's queries
# (engine/controller/tests/monitoring.rs); prometheus is built in the same step for the tests that scrape
# the controller.
#
# The wrapper module tests/k8s/wrappers/prometheus/ pins github.com/prometheus/prometheus and every
# dependency (go.mod + go.sum); `--regenerate` rewrites it from the proxy for PROMETHEUS_MODULE_VERSION
# below. Prometheus 3.x is published to the proxy as v0.3MM.P (3.16.0 = v0.316.0).
#
# Usage:
#   tests/k8s/build-prometheus.sh               build or reuse; last stdout line = cache dir
#                                               (DIR/bin/promtool and DIR/bin/prometheus)
#   tests/k8s/build-prometheus.sh --print-dir   only print the cache dir (no go needed)
#   tests/k8s/build-prometheus.sh --regenerate  rewrite the wrapper go.mod/go.sum, then build
#   tests/k8s/build-prometheus.sh --force       rebuild even if the cache looks fine
#
# Environment:
#   TRAINWARDEN_K8S_CACHE                 cache root (default ~/.cache/trainwarden/k8s-bins), shared with build-binaries.sh
#   TRAINWARDEN_PROMETHEUS_MIN_FREE_GIB   free disk needed for a cold build (default 5)
#
# Everything except the cache dir goes to stderr, so callers can do
#   PROMTOOL="$(tests/k8s/build-prometheus.sh | tail -n1)/bin/promtool"
set -euo pipefail

# Prometheus 3.16.0, the newest release the module proxy serves (checked with `go list -m -versions`).
PROMETHEUS_MODULE_VERSION=v0.316.0
PROMETHEUS_MODULE=github.com/prometheus/prometheus

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# free_kib, require_free_gib
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"
WRAPPER="$SCRIPT_DIR/wrappers/prometheus"
CACHE_ROOT="${TRAINWARDEN_K8S_CACHE:-$HOME/.cache/trainwarden/k8s-bins}"
MIN_FREE_GIB="${TRAINWARDEN_PROMETHEUS_MIN_FREE_GIB:-5}"

log() { printf '[build-prometheus] %s\n' "$*" >&2; }
die() { printf '[build-prometheus] ERROR: %s\n' "$*" >&2; exit 1; }

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
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown argument: $arg" ;;
  esac
done

need_go() {
  command -v go >/dev/null 2>&1 || die "go is not installed or not on PATH; install Go >= 1.26.7 (what prometheus $PROMETHEUS_MODULE_VERSION's go.mod requires)"
  local v
  v="$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null)" || die "'go env GOVERSION' failed; is the Go installation broken?"
  log "using $v ($(command -v go))"
  # GOTOOLCHAIN=local: no toolchain download, so the wrapper's `go` line must be met by this go.
  local want
  want="$(sed -n 's/^go[[:space:]][[:space:]]*\([0-9][0-9.]*\)[[:space:]]*$/\1/p' "$WRAPPER/go.mod" 2>/dev/null | head -n1)"
  if [[ -n "$want" && "$(printf '%s\n%s\n' "$want" "${v#go}" | sort -V | head -n1)" != "$want" ]]; then
    die "$v is older than go $want, which prometheus $PROMETHEUS_MODULE_VERSION requires; install a newer Go"
  fi
}

# The module version is whatever the committed wrapper pins.
version_from_wrapper() {
  local f="$WRAPPER/go.mod"
  [[ -f "$f" && -f "$WRAPPER/go.sum" ]] || die "$WRAPPER/go.{mod,sum} missing; run $0 --regenerate"
  local v
  v="$(grep -Eo "${PROMETHEUS_MODULE//./\\.} v0\.[0-9]+\.[0-9]+" "$f" | awk '{print $2}' | head -n1)"
  [[ -n "$v" ]] || die "cannot find $PROMETHEUS_MODULE in $f; run $0 --regenerate"
  printf '%s\n' "$v"
}

# v0.316.0 -> 3.16.0 (the release the binaries report).
release_of() {
  local v="${1#v0.}" minor patch
  minor="${v%%.*}"
  patch="${v#*.}"
  [[ "$minor" =~ ^3[0-9][0-9]$ && "$patch" =~ ^[0-9]+$ ]] || die "unexpected module version $1 (want v0.3MM.P)"
  printf '3.%d.%s\n' "$((10#${minor#3}))" "$patch"
}

regenerate_wrapper() {
  need_go
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-promgen.XXXXXX")"
  # shellcheck disable=SC2064  # expand $work now: it is local
  trap "rm -rf '$work'" EXIT
  export GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=mod"

  log "fetching $PROMETHEUS_MODULE@$PROMETHEUS_MODULE_VERSION from the module proxy"
  local pmod godir
  pmod="$(cd "$work" && go mod download -json "$PROMETHEUS_MODULE@$PROMETHEUS_MODULE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$pmod" ]] || die "go mod download did not give a go.mod for $PROMETHEUS_MODULE@$PROMETHEUS_MODULE_VERSION"
  # replace and exclude directives of a dependency's go.mod are ignored; prometheus has none (checked
  # here, so a future version cannot slip by).
  if grep -Eq '^[[:space:]]*(replace|exclude)([[:space:]]|\()' "$pmod"; then
    die "$PROMETHEUS_MODULE@$PROMETHEUS_MODULE_VERSION's go.mod has replace/exclude directives; copy them into the wrapper before building"
  fi
  godir="$(sed -n 's/^go[[:space:]][[:space:]]*\([0-9][0-9.]*\)[[:space:]]*$/\1/p' "$pmod" | head -n1)"

  local dir="$work/prometheus"
  mkdir -p "$dir"
  cat >"$dir/go.mod" <<GOMOD
// Generated by tests/k8s/build-prometheus.sh --regenerate. Do not edit by hand.
// Throw-away module that only exists to build promtool and prometheus from the Go module proxy
// (like tests/k8s/wrappers/helm). It contains no Go code.
module trainwarden.local/k8s-test-bins/prometheus

go $godir
GOMOD
  (cd "$dir" && go get -tool "$PROMETHEUS_MODULE/cmd/promtool@$PROMETHEUS_MODULE_VERSION" \
    "$PROMETHEUS_MODULE/cmd/prometheus@$PROMETHEUS_MODULE_VERSION")

  mkdir -p "$WRAPPER"
  cp "$dir/go.mod" "$dir/go.sum" "$WRAPPER/"
  rm -rf "$work"
  trap - EXIT
  log "wrote $WRAPPER/go.{mod,sum}"
}

# Usable if both run and report the expected release.
bin_ok() {
  local dir="$1" release="$2" bin out
  [[ -f "$dir/BUILD-INFO" ]] || return 1
  for bin in promtool prometheus; do
    [[ -x "$dir/bin/$bin" ]] || return 1
    out="$("$dir/bin/$bin" --version 2>&1)" || return 1
    [[ "$out" == "$bin, version $release "* ]] || return 1
  done
}

check_disk() {
  require_free_gib "$MIN_FREE_GIB" "a cold promtool + prometheus build needs about ${MIN_FREE_GIB} GiB (module cache + build cache). Free some space, or point TRAINWARDEN_K8S_CACHE / GOMODCACHE / GOCACHE somewhere bigger." \
    "$CACHE_ROOT" "$(go env GOMODCACHE)" "$(go env GOCACHE)"
}

build_prometheus() {
  local mv="$1" release="$2" final="$3"
  need_go
  check_disk

  # What .promu.yml sets for a release (the module zip carries no git commit). Tags: `netgo` as the
  # release; not `builtinassets`, whose web UI files are built by npm and are not in the module zip (the
  # HTTP API and the rule engine work without them; the UI pages answer 404).
  local pkg=github.com/prometheus/common/version
  local ldflags="-s -w -X $pkg.Version=$release -X $pkg.Revision=$mv -X $pkg.Branch=module-proxy -X $pkg.BuildUser=trainwarden -X $pkg.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"

  # Build next to the final dir (same filesystem) so the last step is one rename. Not ".build-*":
  # build-binaries.sh removes those as leftovers while it holds its own lock.
  local tmp
  tmp="$(mktemp -d "$CACHE_ROOT/.prometheus-build-XXXXXX")"
  # shellcheck disable=SC2064  # expand $tmp now
  trap "rm -rf '$tmp'" EXIT
  mkdir -p "$tmp/out/bin"
  # Build from a copy: -mod=readonly never writes, but a copy also works from a read-only checkout.
  cp -r "$WRAPPER" "$tmp/src"

  export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off
  local common=(build -mod=readonly -trimpath -buildvcs=false -tags netgo)
  local t0=$SECONDS
  log "building promtool and prometheus $release (cold: 15-25 min on 2 cores, about 17 min of CPU)"
  # One go command for both: the shared packages are compiled once.
  (cd "$tmp/src" && go "${common[@]}" -ldflags "$ldflags" -o "$tmp/out/bin/" \
    "$PROMETHEUS_MODULE/cmd/promtool" "$PROMETHEUS_MODULE/cmd/prometheus") ||
    die "the build failed (see the go output above)"
  log "promtool and prometheus built in $((SECONDS - t0)) s"
  {
    printf 'prometheus %s (%s %s)\n' "$release" "$PROMETHEUS_MODULE" "$mv"
    printf 'built %s with %s on %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(go env GOVERSION)" "$(uname -m)"
    printf 'go %s CGO_ENABLED=0 GOTOOLCHAIN=local -ldflags "%s"\n' "${common[*]}" "$ldflags"
    printf 'build: %s s\n' "$((SECONDS - t0))"
  } >"$tmp/out/BUILD-INFO"
  cp "$WRAPPER/go.mod" "$tmp/out/prometheus.go.mod"
  bin_ok "$tmp/out" "$release" || die "the freshly built binaries do not run or do not report $release"

  # Atomic publish: the cache dir either does not exist or is complete.
  rm -rf "$final"
  mv -T "$tmp/out" "$final"
  rm -rf "$tmp"
  trap - EXIT
}

# Turn signals into a normal exit so EXIT traps remove temp dirs.
trap 'exit 130' INT
trap 'exit 143' TERM

main() {
  if ((regenerate)); then
    [[ "$mode" == build ]] || die "--regenerate and --print-dir do not mix"
    regenerate_wrapper
  fi

  local mv release final
  mv="$(version_from_wrapper)"
  release="$(release_of "$mv")"
  final="$CACHE_ROOT/prometheus-v$release"

  if [[ "$mode" == print ]]; then
    printf '%s\n' "$final"
    return 0
  fi

  mkdir -p "$CACHE_ROOT" || die "cannot create cache root $CACHE_ROOT"
  if ((!force)) && bin_ok "$final" "$release"; then
    log "cache hit: $final"
    printf '%s\n' "$final"
    return 0
  fi

  # One builder at a time per cache root; its own lock, so it does not wait for a kube-apiserver build.
  exec 9>"$CACHE_ROOT/.prometheus.lock"
  if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
    log "another build holds $CACHE_ROOT/.prometheus.lock; waiting for it"
    flock 9
  fi
  if ((!force)) && bin_ok "$final" "$release"; then
    log "cache hit (built by another process): $final"
  else
    # Leftovers of builds that were killed (we hold the lock, so none is running).
    rm -rf "$CACHE_ROOT"/.prometheus-build-*
    if ((force)); then
      log "--force: rebuilding $final"
    elif [[ -e "$final" ]]; then
      log "cache dir $final is incomplete or broken; rebuilding"
    fi
    build_prometheus "$mv" "$release" "$final"
  fi
  printf '%s\n' "$final"
}

main
