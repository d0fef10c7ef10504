#!/usr/bin/env bash
# Measures the test command as a brand-new machine runs it: a fresh clone of this checkout's HEAD in a temp
# dir, every cache the run fills pointed at empty temp dirs (trainwarden's binaries, images, venv and cluster state,
# Go's module and build caches, Cargo's registry, pip's cache), then `CI=true bash .ci/run`, each output line
# stamped with the seconds since the start. Prints the stage table and the total at the end. With --warm it then
# runs the command a second time in the same clone with the same caches (nothing changed) and prints that too.
# The machine's own caches (~/.cache/trainwarden, ~/go, ~/.cargo/registry) are neither read nor written.
#
#   tests/measure-cold-run.sh [--warm] [--keep] [--dir DIR]
#
#   --warm      also measure a warm run after the cold one
#   --keep      keep the clone, the caches and the logs (default: keep only the logs, in DIR/logs)
#   --dir DIR   where to put it all (default: a new dir under ${TMPDIR:-/tmp}); needs ~30 GiB free
#
# Not emptied, since they belong to the machine: Debian packages already installed (install-prereqs.sh and
# cluster-prereqs.sh skip those) and the Rust and Go toolchains. TRAINWARDEN_CLUSTER_LOCK passes through (the
# cluster tier waits for it). Run it on an otherwise idle machine: other work on the two cores shows in the figures.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
warm=0
keep=0
dir=""
while (($#)); do
  case "$1" in
    --warm) warm=1 ;;
    --keep) keep=1 ;;
    --dir) dir="$2"; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$dir" ]] || dir="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-measure.XXXXXX")"
mkdir -p "$dir/logs"
dir="$(cd "$dir" && pwd)"
logs="$dir/logs"

clone="$dir/clone"
rm -rf "$clone" "$dir/cache"
git clone -q --no-hardlinks "$REPO" "$clone"
git -C "$clone" checkout -q "$(git -C "$REPO" rev-parse HEAD)"
mkdir -p "$dir/cache"/{trainwarden,gopath,cargo,pip,tmp}

# Empty caches, and nothing else of this shell's environment that a fresh CI machine would not have.
export TRAINWARDEN_CACHE_DIR="$dir/cache/trainwarden"
export GOPATH="$dir/cache/gopath" GOMODCACHE="$dir/cache/gopath/pkg/mod" GOCACHE="$dir/cache/go-build"
export CARGO_HOME="$dir/cache/cargo" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
export PIP_CACHE_DIR="$dir/cache/pip"
unset CARGO_TARGET_DIR TRAINWARDEN_VENV TRAINWARDEN_K8S_CACHE TRAINWARDEN_CLUSTER_DIR TRAINWARDEN_DOCKER_DIR \
  TRAINWARDEN_TEST_KUBECONFIG KUBECONFIG TRAINWARDEN_RUN_LOGS
# cargo and rustc are rustup's proxies in ~/.cargo/bin: keep them on PATH with the empty CARGO_HOME.
export PATH="$PATH:$HOME/.cargo/bin"

# Free disk every 5 s, for the peak.
(while :; do df -Pk "$dir" | awk -v t="$(date +%s)" 'NR == 2 {print t, $3}'; sleep 5; done) >"$logs/disk.tsv" &
sampler=$!
# shellcheck disable=SC2317  # invoked via trap
cleanup() {
  kill "$sampler" 2>/dev/null || true
  ((keep)) && return 0
  # Never remove a tree something is still mounted in (a cluster tier that failed to come down).
  if awk -v d="$dir/" 'index($2, d) == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
    echo "mounts left under $dir: not removing it" >&2
  else
    rm -rf "$clone" "$dir/cache"
  fi
}
trap cleanup EXIT

run() {
  local name="$1" t0 rc=0
  t0="$(date +%s)"
  echo "== $name run: $clone (caches in $dir/cache), log $logs/$name.log"
  (cd "$clone" && TRAINWARDEN_RUN_LOGS="$logs/$name-stages" CI=true bash .ci/run </dev/null 2>&1) |
    while IFS= read -r line; do printf '%5d %s\n' "$(($(date +%s) - t0))" "$line"; done >"$logs/$name.log" || rc=$?
  local took=$(($(date +%s) - t0))
  echo "exit $rc after ${took}s" >>"$logs/$name.log"
  echo "== $name run: exit $rc after $((took / 60)) min $((took % 60)) s"
  sed 's/^ *[0-9]* //' "$logs/$name.log" | "$REPO/tests/stage-times.sh" || true
  return "$rc"
}

used0="$(df -Pk "$dir" | awk 'NR == 2 {print $3}')"
cold_rc=0
run cold || cold_rc=$?
warm_rc=0
if ((warm)); then run warm || warm_rc=$?; fi
kill "$sampler" 2>/dev/null || true
awk -v u0="$used0" '{ if ($2 - u0 > peak) peak = $2 - u0 } END { printf "disk: peak %.1f GiB above the start\n", peak / 1048576 }' "$logs/disk.tsv"
echo "logs: $logs"
((cold_rc == 0 && warm_rc == 0))
