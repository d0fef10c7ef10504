#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install what is missing, build (or reuse) a real kube-apiserver +
# etcd, start them, run every Rust test (unit, CLI and real-API integration) and the policy catalog tests with
# `trainwarden test`, then stop the control plane; then the cluster tier's end-to-end tests against the real
# Kubeflow controllers. This is the README's test command; .ci/run calls it.
#
# Stages (tests/README.md has the table of a cold and a warm run; tests/stage-times.sh prints one from a log):
#
#   prereqs        Debian tools, the Python venv, the cluster tier's Debian packages (root)
#   go-modules     the Go modules of the builds below that are not cached yet          (background, network)
#   bare-tools     kube-apiserver, kubectl, etcd, helm (Go); promtool, prometheus (Debian); mdBook (crates.io) (background)
#   cargo-build    the workspace, every target
#   base-images    the images that need no compile: Debian base, Rust builder, training image (background, root)
#   image          trainwarden:dev, the project's Dockerfile (a release compile)         (background, root)
#   cluster-tools  kubelet, controller-manager, scheduler, kube-proxy, CoreDNS, Trainer, JobSet, Kueue (background, root)
#   bare-tier      cargo test --workspace (the book's build and link check too) and `trainwarden test` against a
#                  real kube-apiserver + etcd
#   cluster-tier   tests/k8s/cluster-tests.sh: a real node and the Kubeflow stack, smoke + end-to-end tests (root)
#
# Two cores do all of it, so a stage runs as soon as what it needs is there, and the builds nobody waits for
# yet run at the lowest CPU priority (nice 19) beside the tests: they take only the CPU the tests leave idle.
# The cluster tier starts as soon as its binaries and images are ready, beside whatever bare-tier tests remain
# (its tests wait up to 30-150 s for what the controllers do, and the bare tier passes with both cores busy:
# tests/repeat.sh --hog). Every Go build of the run shares one scratch GOCACHE.
#
# Environment: TRAINWARDEN_CACHE_DIR (default ~/.cache/trainwarden) holds every cache the run fills (Go-built
# binaries, images, the venv, the cluster's state); GOMODCACHE, CARGO_HOME and CARGO_TARGET_DIR are Go's and
# Cargo's own. TRAINWARDEN_RUN_LOGS keeps the background stages' logs there (default: a temp dir, removed).
set -euo pipefail
cd "$(dirname "$0")/.."

export TRAINWARDEN_CACHE_DIR="${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}"
export TRAINWARDEN_PYTHON="${TRAINWARDEN_VENV:-$TRAINWARDEN_CACHE_DIR/venv}/bin/python"
root=0
[[ "$(id -u)" == 0 ]] && root=1
ci=0
[[ "${CI:-}" == true || "${CI:-}" == 1 ]] && ci=1

if [[ -n "${TRAINWARDEN_RUN_LOGS:-}" ]]; then
  STAGE_DIR="$TRAINWARDEN_RUN_LOGS"
  rm -rf "$STAGE_DIR"
  mkdir -p "$STAGE_DIR"
else
  STAGE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-run.XXXXXX")"
fi
# shellcheck source=stages.sh
. tests/stages.sh

# Go's build cache serves only the cold builds of the test tools (kube-apiserver, helm, the cluster binaries...),
# whose binaries are then cached by version under $TRAINWARDEN_CACHE_DIR: a scratch cache for this run, shared by
# all those builds, then removed (after the last Go build, and at exit) instead of leaving ~8 GB in the machine's
# GOCACHE. Runs with warm binaries never write to it.
TRAINWARDEN_SCRATCH_GOCACHE="$(mktemp -d "${TMPDIR:-/tmp}/trainwarden-gocache.XXXXXX")"
export TRAINWARDEN_SCRATCH_GOCACHE GOCACHE="$TRAINWARDEN_SCRATCH_GOCACHE"

# shellcheck disable=SC2317  # invoked via trap
finish() {
  local rc=$?
  trap '' INT TERM
  bg_kill_all
  bg_print_failed
  rm -rf "$TRAINWARDEN_SCRATCH_GOCACHE"
  if [[ -s "$STAGE_DIR/marks.log" ]]; then
    echo "== stages (minutes:seconds since the start; tests/stage-times.sh) ==" >&2
    tests/stage-times.sh "$STAGE_DIR/marks.log" >&2 || true
  fi
  [[ -n "${TRAINWARDEN_RUN_LOGS:-}" ]] || rm -rf "$STAGE_DIR"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A clean CI checkout builds once: incremental compilation data (~2.5 GB) would only take disk.
if ((ci)); then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi

# --- builds ----------------------------------------------------------------------------------------------------

# apt and pip first in the background (cargo needs neither); everything that uses apt waits for it. A run that
# stops early waits for it rather than killing apt halfway.
BG_WAIT_ON_EXIT=prereqs
if ((root)); then
  bg_stage prereqs 0 - bash -c 'tests/install-prereqs.sh && tests/k8s/cluster-prereqs.sh'
else
  bg_stage prereqs 0 - tests/install-prereqs.sh
fi
# Module downloads are network-bound: all of them at once, before the builds ask for them (only for binaries
# that are not cached; a warm run skips this in a second). A failure here is a warning: the build says why. At
# normal priority: a build waits on Go's lock of a module this stage is unpacking.
go_modules='tests/k8s/build-binaries.sh --prefetch & tests/k8s/build-helm.sh --prefetch &'
((root)) && go_modules+=' tests/k8s/build-cluster-binaries.sh --prefetch &'
go_modules+=' wait'
bg_stage go-modules 0 - bash -c "$go_modules"
# What the bare tier needs besides the workspace, at normal priority beside cargo (both are on the critical path).
# mdBook (the book's build and link check, engine/cli/tests/book.rs) last: ~3 CPU-minutes once, then cached.
bg_stage bare-tools 0 prereqs bash -c \
  'tests/k8s/build-prometheus.sh >/dev/null && tests/k8s/build-binaries.sh >/dev/null && tests/k8s/build-helm.sh >/dev/null &&
   tests/install-mdbook.sh >/dev/null'
if ((root)); then
  # Not needed before the cluster tier: lowest priority, in the CPU the cargo build and the tests leave idle.
  bg_stage base-images 19 prereqs tests/k8s/build-images.sh --only base --only rust --only training --no-import
  bg_stage image 19 base-images tests/k8s/build-images.sh --only trainwarden --no-import
  # After bare-tools: kubelet & co. reuse kube-apiserver's compiled packages from the shared GOCACHE (built at the
  # same time, both would compile them). The last Go build of the run: its GOCACHE goes when it is done.
  # shellcheck disable=SC2016
  bg_stage cluster-tools 19 bare-tools bash -c \
    'tests/k8s/build-cluster-binaries.sh >/dev/null && echo "removing the scratch GOCACHE ($(du -sh "$GOCACHE" | cut -f1))" && rm -rf "$GOCACHE"'
  # The cluster tier as soon as its binaries, images and the workspace (kubectl-trainwarden) are there (the
  # builds it runs are cache hits by then).
  bg_stage cluster-tier 0 prereqs,cluster-tools,image,cargo-build tests/k8s/cluster-tests.sh
fi

# The Python companion package (sdk/python: ruff, mypy --strict, pytest, and its acknowledgement against
# `trainwarden watch`'s status endpoint), beside the bare tier: it needs the workspace's debug binary and network
# for its venv the first time, and seconds of CPU after that. Then the corpus converter's unit tests and its
# check that the committed streams are what it writes (standard library only, ~2 s); then the cohort detectors'
# decisions against the pinned Optuna and Ray Tune on generated sweeps (engine/bench/sweeps, ~7 s with the venv).
# shellcheck disable=SC2016
bg_stage python-tests 0 prereqs,cargo-build bash -c \
  'TRAINWARDEN_BIN="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/trainwarden" sdk/python/run-tests.sh &&
   python3 -m unittest -q examples/corpus/test_convert.py && python3 examples/corpus/convert.py --check &&
   engine/bench/sweeps/check.sh "$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/trainwarden"'

# The fault-injection suite (engine/e2e/tests/faults.rs) appends one row per scenario here.
fault_table="${CARGO_TARGET_DIR:-target}/tmp/fault-table.tsv"
rm -f "$fault_table"

# Build first, outside the control plane's lifetime, so a slow cold compile does not keep it running idle.
stage cargo-build cargo build --workspace --all-targets --locked
bg_wait prereqs bare-tools

# --- the bare tier ---------------------------------------------------------------------------------------------

# The policy catalog runs on the trainwarden binary the workspace build made: `cargo run -p trainwarden` would
# first rebuild its dependencies with the features of that one package (the workspace build unifies them with
# every member's dev-dependencies), ~3 min of silent compiling in a cold run.
bare_rc=0
# shellcheck disable=SC2016  # $1 is the inner bash's
stage bare-tier tests/k8s/with-control-plane.sh bash -c '
  set -euo pipefail
  cargo test --workspace --locked
  "$1" test policies/ examples/
' bare-tier "$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/trainwarden" || bare_rc=$?

if [[ -s "$fault_table" ]]; then
  echo "== fault injection (real kube-apiserver + etcd, controllers as processes): every action once =="
  { printf 'scenario\texpected\tperformed\tdoubled\tlost\trecovered in\n'; cat "$fault_table"; } |
    if command -v column >/dev/null; then column -t -s $'\t'; else cat; fi
fi

# --- the cluster tier ------------------------------------------------------------------------------------------

# A real node (kubelet + containerd), the real Kubeflow Trainer, JobSet and Kueue, and trainwarden installed by
# its chart from the image its Dockerfile builds (tests/k8s/README.md). It changes host state (undone by
# `cluster.sh down`, which it always runs), so it needs root; under CI=true nothing skips it.
python_rc=0
bg_wait python-tests || python_rc=$?

cluster_rc=0
if ((root)); then
  bg_wait go-modules base-images image cluster-tools cluster-tier || cluster_rc=$?
elif ((ci)); then
  echo "the cluster tier needs root (CI=true, so this fails)" >&2
  cluster_rc=1
else
  echo "SKIPPED: the cluster tier (tests/k8s/cluster-tests.sh) needs root" >&2
fi
((bare_rc == 0 && python_rc == 0 && cluster_rc == 0))
