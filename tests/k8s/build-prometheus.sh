#!/usr/bin/env bash
# Provide (or reuse from the cache) promtool and prometheus 3.5 (the LTS line): promtool checks and unit-tests the
# chart's rules and the dashboard's queries (engine/e2e/tests/monitoring/); prometheus scrapes the DCGM
# exporter of the GPU tests (engine/e2e/tests/gpu.rs).
#
# From Debian's `prometheus` and `promtool` packages (Debian's build of the upstream release), fetched with
# `apt-get download` through an apt index of Debian testing and unstable kept in a temp dir (the machine's apt
# sources and state are not touched), and unpacked into the cache dir with `dpkg-deb -x`: nothing is installed, no
# service or user is created. Seconds, where building prometheus from source takes ~17 min of CPU (15-25 min on 2
# cores). Debian 12's own package (2.42) and Debian 13's (2.53) cannot run the monitoring tests: their promtool
# predates the `fuzzy_compare` field of rule unit-test files.
#
# When Debian no longer serves a 3.5.x (testing and unstable move on), the same release line is built from the Go
# module proxy instead (github.com/prometheus/prometheus PROMETHEUS_MODULE_VERSION, wrapper tests/k8s/wrappers/
# prometheus, tests/k8s/go-build.sh), with a warning that says so.
#
# Usage:
#   tests/k8s/build-prometheus.sh               fetch or reuse; last stdout line = cache dir
#                                               (DIR/bin/promtool and DIR/bin/prometheus)
#   tests/k8s/build-prometheus.sh --print-dir   only print the cache dir
#   tests/k8s/build-prometheus.sh --force       fetch again even if the cache looks fine
#   tests/k8s/build-prometheus.sh --regenerate  rewrite the fallback's wrapper go.mod/go.sum from the proxy
#
# Environment:
#   TRAINWARDEN_K8S_CACHE            cache root (default $TRAINWARDEN_CACHE_DIR/k8s-bins), shared with build-binaries.sh
#   TRAINWARDEN_DEBIAN_MIRROR        Debian mirror (default http://deb.debian.org/debian)
#   TRAINWARDEN_PROMETHEUS_FROM      debian or source: only that way (default: Debian, else source)
#   TRAINWARDEN_PROMETHEUS_MIN_FREE_GIB  free disk for the build from source (default 5)
#
# Everything except the cache dir goes to stderr, so callers can do
#   PROMTOOL="$(tests/k8s/build-prometheus.sh | tail -n1)/bin/promtool"
set -euo pipefail

# The release line the tests run against: Prometheus 3.5, its long-term-support line, the newest Debian packages
# (3.5.3+ds1-6 in testing and unstable when this was written). Any 3.5.x is taken; BUILD-INFO records which.
PROMETHEUS_LINE=3.5
DEBIAN_SUITES=(testing unstable)
# The fallback: the newest 3.5 on the module proxy (Prometheus 3.x is published as v0.3MM.P: 3.5.1 = v0.305.1).
PROMETHEUS_MODULE=github.com/prometheus/prometheus
PROMETHEUS_MODULE_VERSION=v0.305.1

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"
# shellcheck source=go-build.sh
. "$SCRIPT_DIR/go-build.sh"
WRAPPER="$SCRIPT_DIR/wrappers/prometheus"
CACHE_ROOT="${TRAINWARDEN_K8S_CACHE:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/k8s-bins}"
MIRROR="${TRAINWARDEN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
FROM="${TRAINWARDEN_PROMETHEUS_FROM:-}"
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
    --force) force=1 ;;
    --regenerate) regenerate=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown argument: $arg" ;;
  esac
done
[[ -z "$FROM" || "$FROM" == debian || "$FROM" == source ]] || die "TRAINWARDEN_PROMETHEUS_FROM must be debian or source"

# Usable if both run and report a release of the line.
bin_ok() {
  local dir="$1" bin out
  [[ -f "$dir/BUILD-INFO" ]] || return 1
  for bin in promtool prometheus; do
    [[ -x "$dir/bin/$bin" ]] || return 1
    out="$("$dir/bin/$bin" --version 2>&1)" || return 1
    [[ "$out" == "$bin, version $PROMETHEUS_LINE."* ]] || return 1
  done
}

# from_debian OUT: Debian's packages of the newest 3.5.x both suites' index lists for both packages; fails (without
# dying) when there is none.
from_debian() {
  local out="$1" apt_dir t0=$SECONDS
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    log "no apt-get/dpkg-deb"
    return 1
  fi
  apt_dir="$(mktemp -d "$out/../.apt-XXXXXX")"
  mkdir -p "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [[ -f "$keyring" ]] || { log "no $keyring to verify Debian's index with"; return 1; }
  # The download runs as the caller (apt's sandbox user may not write to the cache).
  local apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Debug::NoLocking=1
    -o APT::Sandbox::User=root)
  # One suite at a time (an index is ~20 MB): testing, then unstable. The newest version of the line that both
  # packages have in it.
  local suite version=""
  for suite in "${DEBIAN_SUITES[@]}"; do
    printf 'deb [signed-by=%s] %s %s main\n' "$keyring" "$MIRROR" "$suite" >"$apt_dir/sources.list"
    log "reading Debian $suite's package index ($MIRROR)"
    rm -rf "$apt_dir/lists" && mkdir -p "$apt_dir/lists/partial"
    apt-get "${apt_opts[@]}" update -qq >&2 2>&1 || { log "apt-get update of Debian $suite failed"; continue; }
    version="$(comm -12 \
      <(apt-cache "${apt_opts[@]}" madison promtool | awk -F' *[|] *' '{print $2}' | sort -u) \
      <(apt-cache "${apt_opts[@]}" madison prometheus | awk -F' *[|] *' '{print $2}' | sort -u) |
      awk -v line="$PROMETHEUS_LINE." 'index($0, line) == 1' | sort -V | tail -n1)" || true
    [[ -z "$version" ]] || break
    log "Debian $suite serves no prometheus + promtool $PROMETHEUS_LINE.x"
  done
  [[ -n "$version" ]] || return 1
  (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" download -q "prometheus=$version" "promtool=$version" >&2) ||
    { log "apt-get download failed"; return 1; }
  local deb
  for deb in "$apt_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$apt_dir/root" || return 1; done
  mkdir -p "$out/bin"
  cp "$apt_dir/root/usr/bin/promtool" "$apt_dir/root/usr/bin/prometheus" "$out/bin/"
  {
    printf 'prometheus and promtool %s: Debian packages from %s (%s), unpacked with dpkg-deb -x\n' "$version" \
      "$suite" "$MIRROR"
    (cd "$apt_dir/debs" && sha256sum ./*.deb)
    printf 'fetched %s in %d s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((SECONDS - t0))"
  } >"$out/BUILD-INFO"
  rm -rf "$apt_dir"
  log "Debian's prometheus and promtool $version in $((SECONDS - t0)) s"
}

# v0.305.1 -> 3.5.1 (the release the binaries report).
release_of() {
  local v="${1#v0.}" minor patch
  minor="${v%%.*}"
  patch="${v#*.}"
  [[ "$minor" =~ ^3[0-9][0-9]$ && "$patch" =~ ^[0-9]+$ ]] || die "unexpected module version $1 (want v0.3MM.P)"
  printf '3.%d.%s\n' "$((10#${minor#3}))" "$patch"
}

# from_source OUT: promtool and prometheus from the Go module proxy, in one go build. Tags as the release
# (.promu.yml: netgo); not `builtinassets`, whose web UI files npm builds and the module zip lacks: the HTTP API,
# rules and TSDB work, the UI pages answer 404.
from_source() {
  local out="$1" release pkg=github.com/prometheus/common/version
  release="$(release_of "$PROMETHEUS_MODULE_VERSION")"
  go_need "$WRAPPER"
  go_wrapper_check "$WRAPPER" "$PROMETHEUS_MODULE" "$PROMETHEUS_MODULE_VERSION"
  require_free_gib "$MIN_FREE_GIB" "a cold promtool + prometheus build needs about ${MIN_FREE_GIB} GiB (module cache + build cache)" \
    "$CACHE_ROOT" "$(go env GOMODCACHE)" "$(go env GOCACHE)"
  printf 'prometheus %s (%s %s), built %s on %s\n' "$release" "$PROMETHEUS_MODULE" "$PROMETHEUS_MODULE_VERSION" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(uname -m)" >"$out/BUILD-INFO"
  log "building promtool and prometheus $release from the module proxy (cold: 15-25 min on 2 cores, ~17 min of CPU)"
  go_build_mains "$WRAPPER" "$out" \
    "-s -w -X $pkg.Version=$release -X $pkg.Revision=$PROMETHEUS_MODULE_VERSION -X $pkg.Branch=module-proxy -X $pkg.BuildUser=trainwarden -X $pkg.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)" \
    netgo "promtool=$PROMETHEUS_MODULE/cmd/promtool" "prometheus=$PROMETHEUS_MODULE/cmd/prometheus"
}

provide() {
  local out="$1"
  if [[ "$FROM" != source ]]; then
    from_debian "$out" && return 0
    [[ "$FROM" != debian ]] || die "no prometheus $PROMETHEUS_LINE.x from Debian (TRAINWARDEN_PROMETHEUS_FROM=debian)"
    log "WARNING: Debian serves no prometheus $PROMETHEUS_LINE.x any more: building it from source instead (minutes)." \
      "Move PROMETHEUS_LINE in $0 to the release Debian testing has, if the tests pass with it."
    rm -rf "${out:?}"/*
  fi
  from_source "$out"
}

# Turn signals into a normal exit so EXIT traps remove temp dirs.
trap 'exit 130' INT
trap 'exit 143' TERM

if ((regenerate)); then
  [[ "$mode" == build ]] || die "--regenerate and --print-dir do not mix"
  go_need
  go_wrapper_generate "$WRAPPER" "$PROMETHEUS_MODULE" "$PROMETHEUS_MODULE_VERSION" tests/k8s/build-prometheus.sh \
    "$PROMETHEUS_MODULE/cmd/promtool" "$PROMETHEUS_MODULE/cmd/prometheus"
fi
final="$CACHE_ROOT/prometheus-$PROMETHEUS_LINE"
if [[ "$mode" == print ]]; then
  printf '%s\n' "$final"
  exit 0
fi
GO_FORCE=$force cached_build "$final" prometheus bin_ok provide
printf '%s\n' "$final"
