#!/usr/bin/env bash
# Provide (or reuse from the cache) promtool and prometheus from Debian's `prometheus` package: promtool checks and
# unit-tests the chart's rules and the dashboard's queries (engine/controller/tests/monitoring.rs); prometheus
# scrapes the DCGM exporter of the GPU tests (engine/controller/tests/gpu.rs).
#
# The package is fetched with `apt-get download` and unpacked into the cache dir with `dpkg-deb -x`: nothing is
# installed on the machine, no service, user or file outside the cache is created. It is Debian's build of the
# upstream release (Go, from the release's source), so no compile: seconds instead of the 15-25 min (17 min of
# CPU) that building prometheus 3.x from the Go module proxy took on 2 cores.
#
# Usage:
#   tests/k8s/build-prometheus.sh               fetch or reuse; last stdout line = cache dir
#                                               (DIR/bin/promtool and DIR/bin/prometheus)
#   tests/k8s/build-prometheus.sh --print-dir   only print the cache dir
#   tests/k8s/build-prometheus.sh --force       fetch again even if the cache looks fine
#
# Environment:
#   TRAINWARDEN_K8S_CACHE   cache root (default $TRAINWARDEN_CACHE_DIR/k8s-bins), shared with build-binaries.sh
#
# Everything except the cache dir goes to stderr, so callers can do
#   PROMTOOL="$(tests/k8s/build-prometheus.sh | tail -n1)/bin/promtool"
set -euo pipefail

# The release the tests run against: Debian 12's (bookworm, 2.42.0+ds-5+deb12u1 when this was written). Any
# Debian revision of this upstream release is taken; BUILD-INFO records which.
PROMETHEUS_VERSION=2.42.0

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=go-build.sh
. "$SCRIPT_DIR/go-build.sh"
CACHE_ROOT="${TRAINWARDEN_K8S_CACHE:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/k8s-bins}"

log() { printf '[build-prometheus] %s\n' "$*" >&2; }
die() { printf '[build-prometheus] ERROR: %s\n' "$*" >&2; exit 1; }

# Prints the header comment of this file.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; }

mode=build
force=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) mode=print ;;
    --force) force=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; die "unknown argument: $arg" ;;
  esac
done

# Usable if both run and report the expected release.
bin_ok() {
  local dir="$1" bin out
  [[ -f "$dir/BUILD-INFO" ]] || return 1
  for bin in promtool prometheus; do
    [[ -x "$dir/bin/$bin" ]] || return 1
    out="$("$dir/bin/$bin" --version 2>&1)" || return 1
    [[ "$out" == "$bin, version $PROMETHEUS_VERSION"[+\ ]* ]] || return 1
  done
}

# The newest Debian version of the package for PROMETHEUS_VERSION that apt knows.
candidate() {
  apt-cache madison prometheus 2>/dev/null | awk -F' *[|] *' -v v="$PROMETHEUS_VERSION" \
    'index($2, v "+") == 1 || $2 == v || index($2, v "-") == 1 {print $2; exit}'
}

fetch_prometheus() {
  local out="$1" deb_version
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    die "apt-get and dpkg-deb are needed (Debian's prometheus $PROMETHEUS_VERSION package)"
  fi
  deb_version="$(candidate)"
  if [[ -z "$deb_version" && "$(id -u)" -eq 0 ]]; then
    log "apt knows no prometheus $PROMETHEUS_VERSION yet: apt-get update"
    apt-get update -qq || die "apt-get update failed"
    deb_version="$(candidate)"
  fi
  [[ -n "$deb_version" ]] ||
    die "no Debian package prometheus $PROMETHEUS_VERSION in the apt sources (apt-cache madison prometheus; the tests were written against Debian 12's)"
  local work t0=$SECONDS
  work="$(mktemp -d "$out/../.deb-XXXXXX")"
  # apt's download sandbox user may not write here: the download then runs as the caller (a warning, not an error).
  (cd "$work" && apt-get download -q "prometheus=$deb_version" 2>&1 | { grep -v '^W: Download is performed unsandboxed' || true; } >&2) ||
    die "apt-get download prometheus=$deb_version failed"
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root" || die "dpkg-deb -x failed"
  mkdir -p "$out/bin"
  cp "$work/root/usr/bin/promtool" "$work/root/usr/bin/prometheus" "$out/bin/"
  {
    printf 'prometheus %s: Debian package prometheus=%s (%s), unpacked with dpkg-deb -x\n' "$PROMETHEUS_VERSION" "$deb_version" \
      "$(sha256sum "$work"/prometheus_*.deb | cut -d' ' -f1)"
    printf 'fetched %s in %d s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((SECONDS - t0))"
  } >"$out/BUILD-INFO"
  rm -rf "$work"
}

# Turn signals into a normal exit so EXIT traps remove temp dirs.
trap 'exit 130' INT
trap 'exit 143' TERM

final="$CACHE_ROOT/prometheus-v$PROMETHEUS_VERSION"
if [[ "$mode" == print ]]; then
  printf '%s\n' "$final"
  exit 0
fi
GO_FORCE=$force cached_build "$final" prometheus bin_ok fetch_prometheus
printf '%s\n' "$final"
