#!/usr/bin/env bash
# Install the Debian packages the cluster tier (tests/k8s/cluster.sh, tests/k8s/build-images.sh) uses, if missing.
# Idempotent; quick when all is there. Needs root and Debian/Ubuntu (apt-get).
#
#   containerd, runc, containernetworking-plugins  the container runtime the kubelet drives (our own instance,
#                                                  own socket and state dirs; the package's service is never started)
#   iptables, iproute2, conntrack                  kube-proxy, the CNI bridge plugin, cluster.sh's host setup
#   debootstrap                                    the base image of the test images (no registry is reachable)
#   python3-yaml, gcc, libc6-dev                   cluster/manifests.py; the static pause binary
#   docker.io                                      dockerd + the legacy builder for `docker build` of the Dockerfiles
#                                                  (started by build-images.sh with its own data-root and socket)
#
# Package maintainer scripts must not start containerd or dockerd as machine-wide services (dockerd would set the
# iptables FORWARD policy to DROP and listen on /var/run/docker.sock): during the install a policy-rc.d that denies
# every service start is in place (only if the machine has none; removed right after).
set -euo pipefail

PKGS=(containerd runc containernetworking-plugins iptables iproute2 conntrack debootstrap docker.io python3-yaml gcc libc6-dev)

log() { printf '[cluster-prereqs] %s\n' "$*" >&2; }
die() { printf '[cluster-prereqs] ERROR: %s\n' "$*" >&2; exit 1; }

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  log "all present: ${PKGS[*]}"
  exit 0
fi
[[ "$(id -u)" -eq 0 ]] || die "need root to apt-get install ${missing[*]}"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install ${missing[*]} by hand"

policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\n# temporary, from trainwarden tests/k8s/cluster-prereqs.sh: no service starts during the install\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  own_policy=1
fi
cleanup() { if ((own_policy)); then rm -f "$policy"; fi; }
trap cleanup EXIT

log "installing ${missing[*]} from Debian"
t0=$SECONDS
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed in $((SECONDS - t0)) s"
