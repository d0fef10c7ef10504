#!/usr/bin/env bash
# Build the images of the cluster tier without any registry, and import them into the cluster's containerd:
#   trainwarden-test/debian-base:bookworm   debootstrap --variant=minbase bookworm (+ ca-certificates and the host's
#                                            locally added CAs from /usr/local/share/ca-certificates)
#   trainwarden-test/rust:<ver>-bookworm    LOCAL stand-in for docker.io/library/rust: that base + gcc + the host's
#                                            Rust toolchain (rustup cannot download here)
#   trainwarden-test/training:dev           Python + the real Kubeflow SDK from PyPI + sdk/python + train.py (images/training)
#   trainwarden:dev                         the project's own Dockerfile, with BUILDER_IMAGE/RUNTIME_IMAGE pointed
#                                            at the two local bases above (their defaults stay the public images)
# with dockerd from Debian's docker.io (legacy builder), started here with its own data-root, exec-root and socket
# under TRAINWARDEN_DOCKER_DIR, no iptables/bridge/ip-forward changes (builds use --network host), and stopped
# again at the end. A dockerd already running on the machine is not used or touched. The builds run at this
# script's CPU priority (dockerd and its containers inherit it: tests/run-all.sh runs it at nice 19).
#
# Usage (root):
#   tests/k8s/build-images.sh [--only base|rust|training|trainwarden]... [--no-import]
# Images are cached in dockerd's data-root (layers) and as archives in $STATE/images/*.tar; the import into
# containerd runs when the cluster is up (tests/k8s/cluster.sh up) and the image there differs.
#
# Environment:
#   TRAINWARDEN_CLUSTER_DIR     state dir shared with cluster.sh (default $TRAINWARDEN_CACHE_DIR/cluster; that
#                               defaults to ~/.cache/trainwarden)
#   TRAINWARDEN_DOCKER_DIR      dockerd's data-root and run dir (default $TRAINWARDEN_CACHE_DIR/docker)
#   TRAINWARDEN_DEBIAN_MIRROR   mirror for debootstrap (default http://deb.debian.org/debian)
#   TRAINWARDEN_DOCKER_LOCK     one image build per machine (default /run/lock/trainwarden-dockerd.lock)
#   TRAINWARDEN_IMAGES_MIN_FREE_GIB  free disk checked before the trainwarden image build (default 6). Measured
#                               from that point on a cold data-root (2026-12-06, 5 s samples of df): the release
#                               build's layers 2.0 GiB, the image archives 0.9 GiB, then cluster.sh's import into
#                               containerd 1.3 GiB: 4.2 GiB. A full disk makes the linker die of SIGBUS on its
#                               mmap'd output, so this fails first, with the figure.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../.." && pwd)"
STATE="${TRAINWARDEN_CLUSTER_DIR:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/cluster}"
RUN="$STATE/run"
IMAGES="$STATE/images"
# dockerd's own dirs, apart from the cluster's (cluster.sh down unmounts leftovers under the cluster's dirs).
DOCKER_DIR="${TRAINWARDEN_DOCKER_DIR:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/docker}"
DRUN="$DOCKER_DIR/run"
MIRROR="${TRAINWARDEN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DOCKER=/usr/bin/docker
MIN_FREE_GIB="${TRAINWARDEN_IMAGES_MIN_FREE_GIB:-6}"

BASE_IMAGE=trainwarden-test/debian-base:bookworm
TRAINING_IMAGE=trainwarden-test/training:dev
TRAINWARDEN_IMAGE=trainwarden:dev
# The Dockerfile's builder stage, tagged so its cached dependency layer is never pruned.
TRAINWARDEN_BUILDER_IMAGE=trainwarden-test/trainwarden-builder:dev

log() { printf '[build-images] %s\n' "$*" >&2; }
die() { printf '[build-images] ERROR: %s\n' "$*" >&2; exit 1; }
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"

args=("$@")
only=()
import=1
while (($#)); do
  case "$1" in
    --only) only+=("$2"); shift 2 ;;
    --no-import) import=0; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
done
want() { ((${#only[@]} == 0)) || [[ " ${only[*]} " == *" $1 "* ]]; }

[[ "$(id -u)" -eq 0 ]] || die "needs root (dockerd, debootstrap)"
# dockerd 20.10 and its containerd use fixed host paths (/etc/docker/key.json, /opt/containerd, /run/containerd/s)
# that this script creates and removes: one image build per machine at a time (a second run waits). The lock is
# held by a `flock` process around this script; --close: dockerd does not inherit it.
DOCKER_LOCK="${TRAINWARDEN_DOCKER_LOCK:-/run/lock/trainwarden-dockerd.lock}"
if [[ "${TRAINWARDEN_DOCKER_LOCKED:-}" != "$DOCKER_LOCK" ]]; then
  mkdir -p "$(dirname "$DOCKER_LOCK")"
  flock -n "$DOCKER_LOCK" true || log "another image build holds $DOCKER_LOCK; waiting for it"
  TRAINWARDEN_DOCKER_LOCKED="$DOCKER_LOCK" exec flock --close "$DOCKER_LOCK" bash "$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")" ${args[@]+"${args[@]}"}
fi
"$SCRIPT_DIR/cluster-prereqs.sh"

# --- our dockerd -------------------------------------------------------------------------------------------

export DOCKER_HOST="unix://$DRUN/docker.sock" DOCKER_BUILDKIT=0
own_dockerd=0
created=()
start_dockerd() {
  if "$DOCKER" version >/dev/null 2>&1; then return 0; fi
  # dockerd 20.10 hard-codes /etc/docker/key.json and its managed containerd /opt/containerd: removed again in
  # stop_dockerd when this script created them.
  [[ -e /etc/docker/key.json ]] || created+=(/etc/docker/key.json)
  [[ -e /opt/containerd ]] || created+=(/opt/containerd)
  # Its shims' sockets go to /run/containerd/s (hard-coded in containerd 1.6): the dirs, when empty.
  [[ -e /run/containerd ]] || created+=(/run/containerd)
  mkdir -p "$DRUN" "$DOCKER_DIR/data"
  printf '{}\n' >"$DRUN/daemon.json"
  log "starting dockerd (data-root $DOCKER_DIR/data, socket $DRUN/docker.sock)"
  # No network changes on the host: no bridge, no iptables rules, no ip_forward; builds run with --network host.
  setsid dockerd --config-file "$DRUN/daemon.json" --data-root "$DOCKER_DIR/data" --exec-root "$DRUN/exec" \
    --pidfile "$DRUN/dockerd.pid" -H "$DOCKER_HOST" --bridge=none --iptables=false --ip-forward=false \
    --ip-masq=false --userland-proxy=false --log-level=warn </dev/null >"$DRUN/dockerd.log" 2>&1 &
  own_dockerd=1
  local i
  for ((i = 0; i < 120; i++)); do
    "$DOCKER" version >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  tail -n 20 "$DRUN/dockerd.log" >&2
  die "dockerd did not come up"
}
stop_dockerd() {
  ((own_dockerd)) || return 0
  local pid
  pid="$(cat "$DRUN/dockerd.pid" 2>/dev/null)" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  log "stopped dockerd (PID $pid)"
  # dockerd leaves its default network namespace bind-mounted in its exec-root.
  local m
  for m in $(awk -v d="$DRUN/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
  local p
  for p in ${created[@]+"${created[@]}"}; do
    if [[ "$p" == /run/containerd ]]; then
      rmdir /run/containerd/s /run/containerd 2>/dev/null || true
    else
      rm -rf "$p"
    fi
  done
}
trap stop_dockerd EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

# --- images --------------------------------------------------------------------------------------------------

build_base() {
  if have_image "$BASE_IMAGE"; then log "cached: $BASE_IMAGE"; return 0; fi
  local t0=$SECONDS root="$IMAGES/rootfs"
  rm -rf "$root"
  mkdir -p "$IMAGES"
  log "debootstrap bookworm ($MIRROR) -> $BASE_IMAGE"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$MIRROR" >"$IMAGES/debootstrap.log" 2>&1 ||
    { tail -n 20 "$IMAGES/debootstrap.log" >&2; die "debootstrap failed"; }
  # CAs this machine trusts beyond Debian's (e.g. a TLS-intercepting egress proxy), so apt/pip/cargo work in builds.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates in the rootfs failed"
  fi
  printf 'deb %s bookworm main\n' "$MIRROR" >"$root/etc/apt/sources.list"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log
  tar -C "$root" -c . | "$DOCKER" import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$BASE_IMAGE" >/dev/null
  rm -rf "$root"
  log "$BASE_IMAGE built in $((SECONDS - t0)) s"
}

RUST_VERSION="$(rustc --version | awk '{print $2}')"
RUST_IMAGE="trainwarden-test/rust:$RUST_VERSION-bookworm"
build_rust() {
  if have_image "$RUST_IMAGE"; then log "cached: $RUST_IMAGE"; return 0; fi
  local t0=$SECONDS ctx="$IMAGES/rust-ctx" sysroot
  sysroot="$(rustc --print sysroot)"
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp "$SCRIPT_DIR/images/rust-builder/Dockerfile" "$ctx/"
  # Hard links where the filesystem allows (same as a copy for the build context); docs left out.
  cp -al "$sysroot" "$ctx/toolchain" 2>/dev/null || cp -a "$sysroot" "$ctx/toolchain"
  rm -rf "$ctx/toolchain/share/doc"
  log "building $RUST_IMAGE from the host toolchain ($sysroot)"
  "$DOCKER" build --network host -q --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$RUST_IMAGE" "$ctx" >/dev/null ||
    die "building $RUST_IMAGE failed"
  rm -rf "$ctx"
  log "$RUST_IMAGE built in $((SECONDS - t0)) s"
}

build_training() {
  local t0=$SECONDS ctx="$IMAGES/training-ctx"
  log "building $TRAINING_IMAGE (tests/k8s/images/training + sdk/python)"
  # The context: the image's directory and the companion package (sources only, no caches or test leftovers).
  rm -rf "$ctx"
  mkdir -p "$ctx/sdk-python"
  cp -a "$SCRIPT_DIR/images/training/." "$ctx/"
  cp -a "$REPO/sdk/python/pyproject.toml" "$REPO/sdk/python/README.md" "$REPO/sdk/python/src" "$ctx/sdk-python/"
  find "$ctx/sdk-python" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
  "$DOCKER" build --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$TRAINING_IMAGE" \
    "$ctx" >"$IMAGES/training-build.log" 2>&1 ||
    { tail -n 30 "$IMAGES/training-build.log" >&2; die "building $TRAINING_IMAGE failed"; }
  rm -rf "$ctx"
  log "$TRAINING_IMAGE built in $((SECONDS - t0)) s"
}

build_trainwarden() {
  local t0=$SECONDS
  log "building $TRAINWARDEN_IMAGE from $REPO/Dockerfile (builder $RUST_IMAGE, runtime $BASE_IMAGE)"
  # The builder stage gets a tag of its own first, so that its layers (the cached dependency build) are not
  # dangling and survive the prune below; the full build then reuses them.
  local stage
  : >"$IMAGES/trainwarden-build.log"
  # Leftovers of an earlier, interrupted build go first; then the disk must hold a release build.
  "$DOCKER" image prune -f >/dev/null || log "WARNING: docker image prune failed"
  require_free_gib "$MIN_FREE_GIB" "building $TRAINWARDEN_IMAGE needs ${MIN_FREE_GIB} GiB (TRAINWARDEN_IMAGES_MIN_FREE_GIB); a full disk kills the linker with SIGBUS" "$DOCKER_DIR"
  for stage in builder final; do
    local target=() tag="$TRAINWARDEN_IMAGE"
    [[ "$stage" == builder ]] && target=(--target builder) && tag="$TRAINWARDEN_BUILDER_IMAGE"
    "$DOCKER" build --network host --build-arg "BUILDER_IMAGE=$RUST_IMAGE" --build-arg "RUNTIME_IMAGE=$BASE_IMAGE" \
      "${target[@]}" -t "$tag" "$REPO" >>"$IMAGES/trainwarden-build.log" 2>&1 ||
      { tail -n 40 "$IMAGES/trainwarden-build.log" >&2; die "building $tag failed (log: $IMAGES/trainwarden-build.log)"; }
  done
  # Earlier builds' layers (each source change leaves a workspace build of 1-2 GB behind) are dangling now.
  "$DOCKER" image prune -f >/dev/null || log "WARNING: docker image prune failed"
  log "$TRAINWARDEN_IMAGE built in $((SECONDS - t0)) s"
}

# Save IMAGE to $IMAGES/<name>.tar when its ID changed; import it into the cluster's containerd when up.
export_image() {
  local img="$1" id file
  id="$("$DOCKER" image inspect -f '{{.Id}}' "$img")"
  file="$IMAGES/$(tr '/:' '__' <<<"$img").tar"
  if [[ ! -f "$file" || "$(cat "$file.id" 2>/dev/null)" != "$id" ]]; then
    "$DOCKER" save -o "$file.tmp" "$img"
    mv "$file.tmp" "$file"
    printf '%s\n' "$id" >"$file.id"
  fi
  # Imported IDs are remembered next to containerd's root (it keeps images between cluster runs).
  local mark="$STATE/containerd/imported-$(tr '/:' '__' <<<"$img").id"
  if ((import)) && [[ -S "$RUN/containerd.sock" ]] && [[ "$(cat "$mark" 2>/dev/null)" != "$id" ]]; then
    ctr --address "$RUN/containerd.sock" -n k8s.io images import "$file" >/dev/null || die "ctr import of $img failed"
    printf '%s\n' "$id" >"$mark"
    log "imported $img into the cluster's containerd"
  fi
}

t0=$SECONDS
start_dockerd
want base && build_base
want rust && { have_image "$BASE_IMAGE" || build_base; build_rust; }
want training && { have_image "$BASE_IMAGE" || build_base; build_training; export_image "$TRAINING_IMAGE"; }
want trainwarden && { have_image "$RUST_IMAGE" || { have_image "$BASE_IMAGE" || build_base; build_rust; }; build_trainwarden; export_image "$TRAINWARDEN_IMAGE"; }
log "done in $((SECONDS - t0)) s; docker data-root $(du -sh "$DOCKER_DIR/data" 2>/dev/null | cut -f1)"
