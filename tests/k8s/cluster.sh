#!/usr/bin/env bash
# The cluster tier: a real single-node Kubernetes with the real Kubeflow stack on this machine.
#   etcd + kube-apiserver (control-plane.sh), kube-controller-manager, kube-scheduler, kubelet + containerd + runc +
#   CNI bridge, kube-proxy (iptables), CoreDNS, Kubeflow Trainer (TrainJobStatus gate, status server on), JobSet,
#   Kueue (TrainJob integration) with their webhooks served for real (url: + caBundle, certificates from our CA).
# The control plane, CoreDNS and the three Kubeflow controllers run as host processes (like the apiserver of the
# bare tier); pods run in containerd. Binaries: build-binaries.sh + build-cluster-binaries.sh (cached by version).
#
# Usage (root):
#   tests/k8s/cluster.sh up        start everything (runs `down` first if a previous run left state); prints the
#                                  env file to source: KUBECONFIG, PATH with kubectl/helm, TRAINWARDEN_CTR (ctr for
#                                  our containerd)
#   tests/k8s/cluster.sh down      stop everything by PID and undo every host change `up` made
#   tests/k8s/cluster.sh status    what runs, node and controller state
#   tests/k8s/cluster.sh import-image TAR...   import `docker save` archives into the cluster's containerd
#
# Host changes (all undone by `down`; README "Cluster tier" lists them):
#   - bridge twcni0 with the node address 10.217.0.1/24 (pods 10.217.0.0/24, Services 10.218.0.0/24)
#   - iptables: chains TW-CLUSTER-FWD (FORWARD: accept to/from twcni0) and TW-CLUSTER-IN (INPUT: only lo and twcni0
#     reach the node address and the Trainer's status-server port); kube-proxy's KUBE-* chains; the CNI bridge
#     plugin's masquerade rules for pod IPs
#   - net.ipv4.ip_forward=1 (the CNI bridge plugin needs it; the previous value is restored)
#   - the kernel sysctls the kubelet sets at start: vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
#     kernel.panic_on_oops=1, kernel.keys.root_maxkeys/root_maxbytes (the previous values are restored)
#   - cgroups /sys/fs/cgroup/*/kubepods (the kubelet's, cgroupfs driver)
#   - /var/log/containers/*.log symlinks (hard-coded in the kubelet; removed with their pods)
#   - /run/containerd/s/ shim sockets (hard-coded in containerd 1.6; removed when the shims exit)
#   - /var/lib/kubelet/device-plugins (hard-coded in the kubelet) and /var/lib/cni (the CNI result cache): removed
#     when `up` created them
# Everything else lives under TRAINWARDEN_CLUSTER_DIR (default ~/.cache/trainwarden/cluster): containerd's own
# config, socket, root (images are kept between runs) and state, the CNI config, the kubelet's root dir, logs.
# A containerd or dockerd already running on the machine is never touched.
#
# Environment:
#   TRAINWARDEN_CLUSTER_DIR        state dir (default $TRAINWARDEN_CACHE_DIR/cluster, ~/.cache/trainwarden/cluster)
#   TRAINWARDEN_CLUSTER_TIMEOUT    seconds to wait for each component in `up` (default 90)
#   TRAINWARDEN_CLUSTER_UP_MIN_FREE_GIB  free disk `up` insists on (default 4; the kubelet evicts below 1 %)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# spawn, stop_pidfile, pid_alive, pid_is_ours, free_ports, ...
# shellcheck source=control-plane.sh
. "$SCRIPT_DIR/control-plane.sh"
# require_free_gib
# shellcheck source=disk.sh
. "$SCRIPT_DIR/disk.sh"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

STATE="${TRAINWARDEN_CLUSTER_DIR:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/cluster}"
RUN="$STATE/run"
LOGS="$STATE/logs"
TIMEOUT="${TRAINWARDEN_CLUSTER_TIMEOUT:-90}"
UP_MIN_FREE_GIB="${TRAINWARDEN_CLUSTER_UP_MIN_FREE_GIB:-4}"

BRIDGE=twcni0
NODE_IP=10.217.0.1
POD_SUBNET=10.217.0.0/24
SVC_CIDR=10.218.0.0/24
KUBE_SVC_IP=10.218.0.1
DNS_IP=10.218.0.10
NODE_NAME=trainwarden-node
CLUSTER_DOMAIN=cluster.local
STATUS_PORT=10443
CNI_NET=trainwarden
PAUSE_IMAGE=registry.k8s.io/pause:3.10
TRAINER_NS=kubeflow-system
TRAINER_SVC=kubeflow-trainer-controller-manager

# Stop order (reverse of start).
COMPONENTS_STOP=(kueue jobset trainer kube-scheduler kube-controller-manager coredns kube-proxy kubelet)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; }

# --- helpers ------------------------------------------------------------------------------------------

kubectl_() { "$KUBECTL" --kubeconfig "$RUN/plane/kubeconfig" "$@"; }
ctr_() { ctr --address "$RUN/containerd.sock" -n k8s.io "$@"; }

# wait_for WHAT PIDFILE CMD...: poll CMD until it succeeds, the process dies or TIMEOUT passes.
wait_for() {
  local what="$1" pidfile="$2" deadline=$((SECONDS + TIMEOUT))
  shift 2
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    if [[ -n "$pidfile" ]] && ! pid_alive "$(cat "$pidfile" 2>/dev/null || echo 0)"; then
      tail -n 30 "$LOGS/$what.log" >&2 2>/dev/null || true
      die "$what exited during startup (log: $LOGS/$what.log)"
    fi
    sleep 0.3
  done
  tail -n 30 "$LOGS/$what.log" >&2 2>/dev/null || true
  die "$what was not ready after ${TIMEOUT}s (log: $LOGS/$what.log)"
}

start() {
  local name="$1"
  shift
  log "starting $name"
  spawn "$RUN/$name.pid" "$LOGS/$name.log" "$@"
}

http_ok() { curl -fsS --max-time 2 -o /dev/null "$1"; }
https_ok() { curl -fsS --max-time 2 --cacert "$RUN/pki/ca.crt" -o /dev/null "$1"; }
# Any TLS answer from a webhook server (a 404 on / is fine: it listens and its certificate verifies).
tls_listens() { curl -sS --max-time 2 --cacert "$RUN/pki/ca.crt" -o /dev/null "$1"; }

record() { printf '%s\n' "$*" >>"$RUN/host-changes"; }
recorded() { [[ -f "$RUN/host-changes" ]] && grep -qxF "$*" "$RUN/host-changes"; }

# Sign a serving/client cert with the cluster CA: sign NAME CN SANS [EXTRA_SUBJ] [EKU]
sign() {
  local name="$1" cn="$2" sans="$3" org="${4:-}" eku="${5:-serverAuth}"
  local subj="/CN=$cn"
  [[ -z "$org" ]] || subj="/O=$org$subj"
  (
    cd "$RUN/pki"
    openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$name.key" -out "$name.csr" 2>/dev/null
    {
      [[ -z "$sans" ]] || printf 'subjectAltName=%s\n' "$sans"
      printf 'extendedKeyUsage=%s\nkeyUsage=critical,digitalSignature,keyEncipherment\n' "$eku"
    } >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
      -extfile "$name.ext" -out "$name.crt" 2>/dev/null
    chmod 600 "$name.key"
  ) || die "openssl failed for $name"
}

# --- binaries ------------------------------------------------------------------------------------------

find_binaries() {
  local cache
  cache="$("$SCRIPT_DIR/build-binaries.sh" | tail -n1)" || die "build-binaries.sh failed"
  K8S_BIN="$cache/bin"
  cache="$("$SCRIPT_DIR/build-cluster-binaries.sh" | tail -n1)" || die "build-cluster-binaries.sh failed"
  CLUSTER_BIN="$cache/bin"
  CLUSTER_CACHE="$cache"
  local hcache
  hcache="$("$SCRIPT_DIR/build-helm.sh" | tail -n1)" || die "build-helm.sh failed"
  HELM_BIN="$hcache/bin"
  KUBECTL="$K8S_BIN/kubectl"
  # shellcheck source=/dev/null
  . "$CLUSTER_CACHE/versions.env"
  local root="${CLUSTER_CACHE%/*}"
  TRAINER_SRC="$root/trainer-$TRAINER_VERSION/src"
  JOBSET_SRC="$root/jobset-$JOBSET_VERSION/src"
  KUEUE_SRC="$root/kueue-$KUEUE_VERSION/src"
}

# --- host setup ----------------------------------------------------------------------------------------

ipt_chain_hook() {
  # ipt_chain_hook TABLE PARENT CHAIN: create CHAIN (empty) and jump to it first from PARENT, idempotently.
  local table="$1" parent="$2" chain="$3"
  iptables -t "$table" -N "$chain" 2>/dev/null || iptables -t "$table" -F "$chain"
  iptables -t "$table" -C "$parent" -j "$chain" -m comment --comment trainwarden-cluster 2>/dev/null ||
    iptables -t "$table" -I "$parent" 1 -j "$chain" -m comment --comment trainwarden-cluster
}

ipt_chain_unhook() {
  local table="$1" parent="$2" chain="$3"
  while iptables -t "$table" -D "$parent" -j "$chain" -m comment --comment trainwarden-cluster 2>/dev/null; do :; done
  iptables -t "$table" -F "$chain" 2>/dev/null || true
  iptables -t "$table" -X "$chain" 2>/dev/null || true
}

host_setup() {
  mkdir -p "$RUN" "$LOGS"
  : >"$RUN/host-changes"
  # Someone else's Kubernetes on this machine would share kube-proxy's global iptables chains.
  if iptables -t nat -S KUBE-SERVICES >/dev/null 2>&1; then
    die "iptables chain KUBE-SERVICES exists: another kube-proxy runs on this machine (or a previous run crashed: tests/k8s/cluster.sh down)"
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "interface $BRIDGE exists (a previous run? tests/k8s/cluster.sh down)"
  fi
  if ip -4 addr show | grep -q "inet ${NODE_IP%.*}\."; then
    die "the network ${POD_SUBNET} is in use on this machine; the cluster tier needs it"
  fi
  log "host: bridge $BRIDGE $NODE_IP/24, ip_forward, iptables TW-CLUSTER-FWD/TW-CLUSTER-IN"
  # The kubelet's and kube-proxy's KUBE-* chains (IPv4 and IPv6) are ours from here on: none existed.
  record "kube-iptables"
  [[ -d /run/containerd ]] || record "rmdir /run/containerd"
  [[ -d /run/containerd/s ]] || record "rmdir /run/containerd/s"
  # Paths the kubelet and the CNI library hard-code outside any configurable dir.
  [[ -e /var/lib/kubelet ]] || record "rmtree /var/lib/kubelet"
  [[ -e /var/lib/cni ]] || record "rmtree /var/lib/cni"
  [[ -e /var/log/containers ]] || record "rmdir /var/log/containers"
  ip link add "$BRIDGE" type bridge
  record "bridge $BRIDGE"
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  record "ip_forward $(cat /proc/sys/net/ipv4/ip_forward)"
  # The kubelet sets these to its defaults at start (protectKernelDefaults: false); the old values come back.
  local k
  for k in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
    record "sysctl $k $(cat "/proc/sys/$k")"
  done
  echo 1 >/proc/sys/net/ipv4/ip_forward
  # Pods' traffic is forwarded even when a dockerd set the FORWARD policy to DROP.
  ipt_chain_hook filter FORWARD TW-CLUSTER-FWD
  record "iptables filter FORWARD TW-CLUSTER-FWD"
  iptables -A TW-CLUSTER-FWD -i "$BRIDGE" -j ACCEPT
  iptables -A TW-CLUSTER-FWD -o "$BRIDGE" -j ACCEPT
  # The node address and the Trainer's status server (it binds every interface: ":10443") are for pods and the
  # host only.
  ipt_chain_hook filter INPUT TW-CLUSTER-IN
  record "iptables filter INPUT TW-CLUSTER-IN"
  iptables -A TW-CLUSTER-IN -i lo -j RETURN
  iptables -A TW-CLUSTER-IN -i "$BRIDGE" -j RETURN
  iptables -A TW-CLUSTER-IN -d "$NODE_IP" -j DROP
  iptables -A TW-CLUSTER-IN -p tcp --dport "$STATUS_PORT" -j DROP
  local c
  for c in /sys/fs/cgroup/*/; do
    [[ -d "$c/kubepods" ]] || record "cgroup $c/kubepods"
  done
}

host_undo() {
  [[ -f "$RUN/host-changes" ]] || return 0
  local line
  # Reverse order.
  while IFS= read -r line; do
    set -- $line
    case "$1" in
      bridge) ip link del "$2" 2>/dev/null || true ;;
      ip_forward) echo "$2" >/proc/sys/net/ipv4/ip_forward ;;
      sysctl) echo "$3" >"/proc/sys/$2" ;;
      iptables) ipt_chain_unhook "$2" "$3" "$4" ;;
      kube-iptables) kube_iptables_cleanup ;;
      rmdir) rmdir "$2" 2>/dev/null || true ;;
      rmtree) rm -rf "$2" ;;
      cgroup)
        if [[ -d "$2" ]]; then
          find "$2" -depth -type d -exec rmdir {} \; 2>/dev/null || log "WARNING: could not remove cgroup $2 (processes left in it?)"
        fi ;;
    esac
  done < <(tac "$RUN/host-changes")
  rm -f "$RUN/host-changes"
}

# Every KUBE-* chain and every jump to one, in both families: the kubelet's (KUBE-FIREWALL, canaries, the hint)
# and what kube-proxy --cleanup left.
kube_iptables_cleanup() {
  local ipt t parent rule ch
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null 2>&1 || continue
    for t in filter nat mangle; do
      for parent in INPUT OUTPUT FORWARD PREROUTING POSTROUTING; do
        while IFS= read -r rule; do
          # shellcheck disable=SC2086
          [[ -n "$rule" ]] && eval "$ipt -t $t ${rule/-A /-D }" 2>/dev/null || true
        done < <("$ipt" -t "$t" -S "$parent" 2>/dev/null | grep -E -- '-j KUBE-' || true)
      done
      for ch in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
        "$ipt" -t "$t" -F "$ch" 2>/dev/null || true
      done
      for ch in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
        "$ipt" -t "$t" -X "$ch" 2>/dev/null || true
      done
    done
  done
}

# Masquerade rules the CNI bridge plugin leaves behind when a sandbox was not torn down (a crash).
cni_iptables_cleanup() {
  local rule chain
  while IFS= read -r rule; do
    chain="$(sed -n 's/.* -j \(CNI-[0-9a-f]*\).*/\1/p' <<<"$rule")"
    # shellcheck disable=SC2086
    eval "iptables -t nat ${rule/-A /-D }" 2>/dev/null || true
    if [[ -n "$chain" ]]; then
      iptables -t nat -F "$chain" 2>/dev/null || true
      iptables -t nat -X "$chain" 2>/dev/null || true
    fi
  done < <(iptables -t nat -S POSTROUTING 2>/dev/null | grep -F "name: \"$CNI_NET\"" || true)
}

# --- containerd ------------------------------------------------------------------------------------------

write_containerd_config() {
  mkdir -p "$STATE/containerd/root" "$RUN/containerd-state" "$STATE/containerd/opt" "$RUN/cni/net.d" "$RUN/cni/ipam"
  cat >"$RUN/containerd.toml" <<EOF
# Written by tests/k8s/cluster.sh: the cluster tier's own containerd (never the machine's).
version = 2
root = "$STATE/containerd/root"
state = "$RUN/containerd-state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$RUN/containerd.sock"
[ttrpc]
  address = "$RUN/containerd.sock.ttrpc"
[debug]
  address = "$RUN/containerd-debug.sock"
[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$STATE/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    # No registry is reachable: the pause image is built locally and imported under this name.
    sandbox_image = "$PAUSE_IMAGE"
    # The machine lacks CAP_SYS_RESOURCE: the kubelet's negative oom_score_adj would fail every sandbox.
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$RUN/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUN/runc"
EOF
  cat >"$RUN/cni/net.d/10-$CNI_NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$RUN/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
}

# The sandbox image, built from tests/k8s/cluster/pause.c (static) and imported without a registry.
ensure_pause_image() {
  # Not `ctr | grep -q` under pipefail: grep stopping early makes the pipeline fail (SIGPIPE).
  if grep -qxF "$PAUSE_IMAGE" <<<"$(ctr_ images ls -q)"; then return 0; fi
  command -v gcc >/dev/null 2>&1 || die "gcc is needed to build the pause binary (apt-get install gcc libc6-dev)"
  local d="$RUN/pause-build"
  mkdir -p "$d"
  gcc -static -Os -o "$d/pause" "$SCRIPT_DIR/cluster/pause.c" || die "building pause.c failed"
  strip "$d/pause" 2>/dev/null || true
  python3 "$SCRIPT_DIR/cluster/image_archive.py" "$d/pause.tar" "$PAUSE_IMAGE" /pause "$d/pause=/pause"
  ctr_ images import "$d/pause.tar" >/dev/null || die "ctr images import of the pause image failed"
  rm -rf "$d"
  log "imported $PAUSE_IMAGE (built from tests/k8s/cluster/pause.c)"
}

# Images that build-images.sh saved but this containerd does not have (its root was removed, or the kubelet's
# image GC deleted them under disk pressure): the import mark alone is not trusted, the image must be there.
import_cached_images() {
  local f id mark tags tag missing
  local have
  have="$(ctr_ images ls -q)"
  for f in "$STATE"/images/*.tar; do
    [[ -f "$f" && -f "$f.id" ]] || continue
    id="$(cat "$f.id")"
    mark="$STATE/containerd/imported-$(basename "$f" .tar).id"
    # `docker save` lists the image's tags in manifest.json; containerd names them docker.io/<tag>, or
    # docker.io/library/<tag> for a tag without a repository path.
    tags="$(tar -xOf "$f" manifest.json | python3 -c 'import json, sys; print("\n".join(t for m in json.load(sys.stdin) for t in m.get("RepoTags") or []))')" ||
      die "cannot read the tags of $f"
    missing=0
    for tag in $tags; do
      [[ "$tag" == */* ]] || tag="library/$tag"
      grep -qxF "docker.io/$tag" <<<"$have" || missing=1
    done
    [[ "$(cat "$mark" 2>/dev/null)" == "$id" ]] && ((missing == 0)) && continue
    ctr_ images import "$f" >/dev/null || die "ctr images import $f failed"
    printf '%s\n' "$id" >"$mark"
    log "imported $(basename "$f")"
  done
}

# --- configs ---------------------------------------------------------------------------------------------

write_configs() {
  local kubelet_port kubelet_healthz proxy_healthz proxy_metrics kcm_port sched_port
  read -r kubelet_port <<<"$(free_ports 1 "$NODE_IP")"
  read -r kubelet_healthz proxy_healthz proxy_metrics kcm_port sched_port \
    DNS_PORT DNS_HEALTH DNS_READY TRAINER_WEBHOOK TRAINER_HEALTH JOBSET_WEBHOOK JOBSET_HEALTH KUEUE_WEBHOOK KUEUE_HEALTH \
    <<<"$(free_ports 14 127.0.0.1)"
  KCM_PORT=$kcm_port SCHED_PORT=$sched_port KUBELET_HEALTHZ=$kubelet_healthz PROXY_HEALTHZ=$proxy_healthz
  local kc="$RUN/plane/kubeconfig"
  mkdir -p "$STATE/kubelet" "$STATE/pod-logs"
  cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 (hybrid); 1.35 refuses it unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$RUN/containerd.sock
address: $NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $RUN/pki/ca.crt}
authorization:
  mode: Webhook
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$DNS_IP]
resolvConf: ""
failSwapOn: false
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/kubelet/volume-plugins
evictionHard:
  nodefs.available: "1%"
  imagefs.available: "1%"
  memory.available: "100Mi"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  cat >"$RUN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $kc
hostnameOverride: $NODE_NAME
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$proxy_healthz
metricsBindAddress: 127.0.0.1:$proxy_metrics
clusterCIDR: $POD_SUBNET
detectLocalMode: ClusterCIDR
nodePortAddresses: ["$NODE_IP/32"]
# Pod -> Service -> pod on the same bridge: without br_netfilter the reply would bypass the DNAT; masquerading
# every Service connection sends it back through the host.
iptables:
  masqueradeAll: true
  localhostNodePorts: false
# Leave the machine's conntrack sysctls alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
  cat >"$RUN/Corefile" <<EOF
.:$DNS_PORT {
    bind $NODE_IP
    errors
    health 127.0.0.1:$DNS_HEALTH
    ready 127.0.0.1:$DNS_READY
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $kc trainwarden-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
  mkdir -p "$RUN/trainer/tmp/k8s-webhook-server/serving-certs" "$RUN/trainer/sa" "$RUN/jobset/certs" \
    "$RUN/kueue/certs" "$RUN/kueue/etc/kueue/metrics/certs"
  cat >"$RUN/trainer/config.yaml" <<EOF
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:$TRAINER_HEALTH
  readinessEndpointName: readyz
  livenessEndpointName: healthz
metrics:
  bindAddress: "0"
webhook:
  port: $TRAINER_WEBHOOK
  host: 127.0.0.1
leaderElection:
  leaderElect: false
certManagement:
  enable: false
  webhookServiceName: $TRAINER_SVC
  webhookSecretName: kubeflow-trainer-webhook-cert
statusServer:
  port: $STATUS_PORT
EOF
  cat >"$RUN/jobset/config.yaml" <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  port: $JOBSET_WEBHOOK
  host: 127.0.0.1
  certDir: $RUN/jobset/certs
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:$JOBSET_HEALTH
EOF
  cat >"$RUN/kueue/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH
metrics:
  bindAddress: "0"
webhook:
  port: $KUEUE_WEBHOOK
  host: 127.0.0.1
  certDir: $RUN/kueue/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks:
  - batch/job
  - trainer.kubeflow.org/trainjob
EOF
}

write_pki() {
  mkdir -p "$STATE/pki" "$RUN/pki"
  # One CA for the whole cluster, kept between runs (a kubeconfig copied elsewhere keeps verifying).
  if [[ ! -s "$STATE/pki/ca.key" ]]; then
    (umask 077 && openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=trainwarden-cluster-ca" \
      -keyout "$STATE/pki/ca.key" -out "$STATE/pki/ca.crt" 2>/dev/null) || die "openssl failed to create the CA"
  fi
  cp "$STATE/pki/ca.key" "$STATE/pki/ca.crt" "$RUN/pki/"
  mkdir -p "$RUN/plane/pki"
  cp "$STATE/pki/ca.key" "$STATE/pki/ca.crt" "$RUN/plane/pki/"
  # kube-apiserver -> kubelet (logs, exec): a client cert in system:masters, checked by the kubelet's x509 authn.
  sign kubelet-client kube-apiserver-kubelet-client "" system:masters clientAuth
  # The Kubeflow webhooks on 127.0.0.1; the Trainer's certificate also serves its status server, which pods reach
  # at https://$TRAINER_SVC.$TRAINER_NS.svc:$STATUS_PORT (the URL the Trainer injects).
  sign trainer trainer "IP:127.0.0.1,DNS:$TRAINER_SVC.$TRAINER_NS.svc,DNS:$TRAINER_SVC.$TRAINER_NS.svc.$CLUSTER_DOMAIN"
  sign jobset jobset "IP:127.0.0.1"
  sign kueue kueue "IP:127.0.0.1"
  cp "$RUN/pki/trainer.crt" "$RUN/trainer/tmp/k8s-webhook-server/serving-certs/tls.crt"
  cp "$RUN/pki/trainer.key" "$RUN/trainer/tmp/k8s-webhook-server/serving-certs/tls.key"
  cp "$RUN/pki/jobset.crt" "$RUN/jobset/certs/tls.crt"
  cp "$RUN/pki/jobset.key" "$RUN/jobset/certs/tls.key"
  cp "$RUN/pki/kueue.crt" "$RUN/kueue/certs/tls.crt"
  cp "$RUN/pki/kueue.key" "$RUN/kueue/certs/tls.key"
  cp "$RUN/pki/kueue.crt" "$RUN/kueue/etc/kueue/metrics/certs/tls.crt"
  cp "$RUN/pki/kueue.key" "$RUN/kueue/etc/kueue/metrics/certs/tls.key"
}

# --- cluster objects ---------------------------------------------------------------------------------------

apply_json() { kubectl_ apply --server-side --force-conflicts --field-manager=trainwarden-cluster -f - >/dev/null; }

# Services whose endpoints are host processes: kube-dns (CoreDNS) and the Trainer's status server.
apply_host_services() {
  kubectl_ apply --server-side --field-manager=trainwarden-cluster -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: $DNS_PORT}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: $DNS_PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: trainwarden-cluster}
addressType: IPv4
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
ports:
- {name: dns, port: $DNS_PORT, protocol: UDP}
- {name: dns-tcp, port: $DNS_PORT, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: $TRAINER_SVC, namespace: $TRAINER_NS}
spec:
  ports:
  - {name: status-server, port: $STATUS_PORT, protocol: TCP, targetPort: $STATUS_PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $TRAINER_SVC-host
  namespace: $TRAINER_NS
  labels: {kubernetes.io/service-name: $TRAINER_SVC, endpointslice.kubernetes.io/managed-by: trainwarden-cluster}
addressType: IPv4
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
ports:
- {name: status-server, port: $STATUS_PORT, protocol: TCP}
EOF
}

install_kubeflow_objects() {
  local m="$SCRIPT_DIR/cluster/manifests.py"
  log "CRDs: Trainer $TRAINER_VERSION, JobSet $JOBSET_VERSION, Kueue $KUEUE_VERSION (from their module sources)"
  {
    python3 "$m" crds "$TRAINER_SRC"/manifests/base/crds/trainer.kubeflow.org_*.yaml
  } | apply_json
  python3 "$m" crds "$JOBSET_SRC"/config/components/crd/bases/*.yaml | apply_json
  # Kueue's served versions convert through its webhook (config/components/crd/patches in Kueue's source).
  python3 "$m" crds --convert "https://127.0.0.1:$KUEUE_WEBHOOK/convert" "$RUN/pki/ca.crt" \
    localqueues,clusterqueues,cohorts,workloads,multikueueclusters \
    "$KUEUE_SRC"/config/components/crd/bases/*.yaml | apply_json
  kubectl_ create namespace "$TRAINER_NS" >/dev/null 2>&1 || true
  kubectl_ create namespace kueue-system >/dev/null 2>&1 || true
  kubectl_ create namespace jobset-system >/dev/null 2>&1 || true
  # The Trainer copies ca.crt of this Secret into each TrainJob's <job>-tls-config ConfigMap (status server CA).
  kubectl_ -n "$TRAINER_NS" create secret generic kubeflow-trainer-webhook-cert \
    --from-file=ca.crt="$RUN/pki/ca.crt" --from-file=tls.crt="$RUN/pki/trainer.crt" \
    --from-file=tls.key="$RUN/pki/trainer.key" --dry-run=client -o yaml | apply_json
  kubectl_ -n "$TRAINER_NS" create serviceaccount "$TRAINER_SVC" --dry-run=client -o yaml | apply_json
  apply_host_services
  kubectl_ wait --for condition=established --timeout=60s crd --all >/dev/null || die "CRDs not Established"
}

register_webhooks() {
  local m="$SCRIPT_DIR/cluster/manifests.py" ca="$RUN/pki/ca.crt"
  {
    python3 "$m" webhooks kubeflow-trainer "https://127.0.0.1:$TRAINER_WEBHOOK" "$ca" "$TRAINER_SRC/manifests/base/webhook/manifests.yaml"
  } | apply_json
  python3 "$m" webhooks jobset "https://127.0.0.1:$JOBSET_WEBHOOK" "$ca" "$JOBSET_SRC/config/components/webhook/manifests.yaml" | apply_json
  python3 "$m" webhooks kueue "https://127.0.0.1:$KUEUE_WEBHOOK" "$ca" "$KUEUE_SRC/config/components/webhook/manifests.yaml" | apply_json
  log "webhooks registered (url: https://127.0.0.1:PORT/..., caBundle of the cluster CA)"
}

# --- up / down -----------------------------------------------------------------------------------------

running_pids() {
  local f
  for f in "$RUN"/*.pid "$RUN"/plane/*.pid; do
    [[ -f "$f" ]] || continue
    pid_alive "$(cat "$f")" && pid_is_ours "$(cat "$f")" "$f" && printf '%s ' "${f##*/}"
  done
  return 0
}

cmd_up() {
  [[ "$(id -u)" -eq 0 ]] || die "the cluster tier needs root (containerd, kubelet, iptables)"
  local t0=$SECONDS
  "$SCRIPT_DIR/cluster-prereqs.sh"
  find_binaries
  # The kubelet evicts pods and images below 1% free (its eviction thresholds here); a full disk would show up
  # only as pods that never start, so it is refused here with the reason.
  require_free_gib "$UP_MIN_FREE_GIB" "the cluster needs ${UP_MIN_FREE_GIB} GiB (TRAINWARDEN_CLUSTER_UP_MIN_FREE_GIB) so the kubelet does not evict pods and images under disk pressure" "$STATE"
  if [[ -d "$RUN" ]]; then
    log "state of a previous run in $RUN; cleaning it up first"
    cmd_down
  fi
  local tb=$SECONDS
  # A failed start leaves its state for a look at the logs; the next `up` (or `down`) cleans it.
  trap 'log "up failed; logs in $LOGS; clean up with: $0 down"' ERR
  mkdir -p "$RUN" "$LOGS"
  rm -f "$LOGS"/*.log
  host_setup
  write_containerd_config
  start containerd containerd --config "$RUN/containerd.toml"
  wait_for containerd "$RUN/containerd.pid" ctr --address "$RUN/containerd.sock" version
  { ensure_pause_image && import_cached_images; } &
  local pause_pid=$!

  write_configs
  write_pki
  log "starting etcd + kube-apiserver (control-plane.sh) on $NODE_IP"
  TRAINWARDEN_K8S_BIN_DIR="$K8S_BIN" TRAINWARDEN_K8S_ADDRESS="$NODE_IP" \
    TRAINWARDEN_K8S_EXTRA_SANS="IP:$KUBE_SVC_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN" \
    TRAINWARDEN_K8S_DISABLE_ADMISSION="" \
    TRAINWARDEN_K8S_APISERVER_ARGS="--service-cluster-ip-range=$SVC_CIDR --endpoint-reconciler-type=lease --kubelet-client-certificate=$RUN/pki/kubelet-client.crt --kubelet-client-key=$RUN/pki/kubelet-client.key --kubelet-preferred-address-types=InternalIP" \
    "$SCRIPT_DIR/control-plane.sh" start "$RUN/plane" >/dev/null
  local kc="$RUN/plane/kubeconfig"

  start kube-controller-manager "$CLUSTER_BIN/kube-controller-manager" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file="$RUN/plane/pki/sa.key" --root-ca-file="$RUN/plane/pki/ca.crt" \
    --use-service-account-credentials=false --service-cluster-ip-range="$SVC_CIDR" \
    --flex-volume-plugin-dir="$STATE/kube-controller-manager/volume-plugins" \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  start kube-scheduler "$CLUSTER_BIN/kube-scheduler" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false
  wait "$pause_pid" || die "the pause image could not be imported"
  start kubelet "$CLUSTER_BIN/kubelet" --config="$RUN/kubelet.yaml" --kubeconfig="$kc" \
    --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
  start kube-proxy "$CLUSTER_BIN/kube-proxy" --config="$RUN/kube-proxy.yaml"
  start coredns "$CLUSTER_BIN/coredns" -conf "$RUN/Corefile"

  install_kubeflow_objects
  # The Trainer's status server reads the token issuer from an in-cluster token file (pkg/statusserver/auth.go).
  kubectl_ -n "$TRAINER_NS" create token "$TRAINER_SVC" --duration=48h >"$RUN/trainer/sa/token"
  printf '%s' "$TRAINER_NS" >"$RUN/trainer/sa/namespace"
  cp "$RUN/pki/ca.crt" "$RUN/trainer/sa/ca.crt"
  start trainer env KUBECONFIG="$kc" "$SCRIPT_DIR/cluster/private-mounts.sh" \
    --tmp "$RUN/trainer/tmp" --service-account "$RUN/trainer/sa" -- \
    "$CLUSTER_BIN/trainer-controller-manager" --config="$RUN/trainer/config.yaml" --feature-gates=TrainJobStatus=true
  start jobset env KUBECONFIG="$kc" "$CLUSTER_BIN/jobset-controller" --config="$RUN/jobset/config.yaml"
  start kueue env KUBECONFIG="$kc" "$SCRIPT_DIR/cluster/private-mounts.sh" --etc-overlay "$RUN/kueue/etc" -- \
    "$CLUSTER_BIN/kueue" --config="$RUN/kueue/config.yaml" --feature-gates=VisibilityOnDemand=false
  register_webhooks

  wait_for kube-controller-manager "$RUN/kube-controller-manager.pid" https_ok_insecure "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for kube-scheduler "$RUN/kube-scheduler.pid" https_ok_insecure "https://127.0.0.1:$SCHED_PORT/healthz"
  wait_for kube-proxy "$RUN/kube-proxy.pid" http_ok "http://127.0.0.1:$PROXY_HEALTHZ/healthz"
  wait_for coredns "$RUN/coredns.pid" http_ok "http://127.0.0.1:$DNS_READY/ready"
  wait_for trainer "$RUN/trainer.pid" http_ok "http://127.0.0.1:$TRAINER_HEALTH/readyz"
  wait_for trainer "$RUN/trainer.pid" tls_listens "https://127.0.0.1:$TRAINER_WEBHOOK/"
  wait_for jobset "$RUN/jobset.pid" http_ok "http://127.0.0.1:$JOBSET_HEALTH/readyz"
  wait_for kueue "$RUN/kueue.pid" http_ok "http://127.0.0.1:$KUEUE_HEALTH/readyz"
  wait_for kubelet "$RUN/kubelet.pid" node_ready
  wait_for kube-controller-manager "$RUN/kube-controller-manager.pid" kubectl_ -n default get serviceaccount default

  write_env
  trap - ERR
  log "up in $((SECONDS - tb)) s ($((SECONDS - t0)) s with the build checks): node $NODE_NAME Ready, Trainer $TRAINER_VERSION, JobSet $JOBSET_VERSION, Kueue $KUEUE_VERSION"
  log "kubeconfig: $kc"
  log "try: . $RUN/env && kubectl get nodes"
  printf '%s\n' "$RUN/env"
}

https_ok_insecure() { curl -fsSk --max-time 2 -o /dev/null "$1"; }
node_ready() {
  [[ "$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

write_env() {
  {
    printf '# Source this file: . %q\n' "$RUN/env"
    printf 'export KUBECONFIG=%q\n' "$RUN/plane/kubeconfig"
    printf 'export TRAINWARDEN_TEST_KUBECONFIG=%q\n' "$RUN/plane/kubeconfig"
    printf 'export TRAINWARDEN_KUBECTL=%q\n' "$KUBECTL"
    printf 'export TRAINWARDEN_HELM=%q\n' "$HELM_BIN/helm"
    printf 'export KUBECACHEDIR=%q\n' "$RUN/kube-cache"
    printf 'export TRAINWARDEN_CLUSTER_RUN=%q\n' "$RUN"
    printf 'export TRAINWARDEN_CLUSTER_NODE_IP=%q\n' "$NODE_IP"
    printf 'export TRAINWARDEN_CTR=%q\n' "ctr --address $RUN/containerd.sock -n k8s.io"
    printf 'export PATH=%q:%q:"$PATH"\n' "$K8S_BIN" "$HELM_BIN"
  } >"$RUN/env"
}

# Delete every pod through the API (the kubelet kills them: SIGTERM, CNI teardown, volume unmounts), after the
# controllers that would recreate them are stopped.
drain_pods() {
  [[ -f "$RUN/plane/kubeconfig" && -n "${KUBECTL:-}" ]] || return 0
  kubectl_ get --raw /readyz >/dev/null 2>&1 || return 0
  pid_alive "$(cat "$RUN/kubelet.pid" 2>/dev/null || echo 0)" || return 0
  kubectl_ delete pods --all -A --grace-period=2 --wait=false >/dev/null 2>&1 || true
  # Job pods carry the Job controller's tracking finalizer, and that controller is stopped now: remove it, again
  # on every round (a pod can still be on its way out of the kubelet's status updates).
  local i p left
  for ((i = 0; i < 30; i++)); do
    left="$(kubectl_ get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}' 2>/dev/null)"
    [[ -z "$left" ]] && return 0
    for p in $left; do
      kubectl_ -n "${p%%/*}" patch pod "${p#*/}" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    done
    sleep 1
  done
  log "WARNING: pods still present after 30 s; removing their containers directly: $(kubectl_ get pods -A \
    -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}({.status.phase},finalizers={.metadata.finalizers}) {end}' 2>&1 | head -c 600)"
}

# Whatever is left in our containerd: kill and remove tasks and containers (their shims exit with them).
containerd_cleanup() {
  [[ -S "$RUN/containerd.sock" ]] || return 0
  pid_alive "$(cat "$RUN/containerd.pid" 2>/dev/null || echo 0)" || return 0
  local c
  for c in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
  done
  sleep 0.5
  for c in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true; done
  for c in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$c" >/dev/null 2>&1 || true; done
}

# Mounts left under our dirs (a crash): pod volumes, rootfs, netns.
unmount_leftovers() {
  local m
  # Only under our dirs (never dockerd's data-root, which build-images.sh keeps elsewhere).
  # The kubelet bind-mounts its root dir onto itself, so the dirs themselves count too.
  for m in $(awk -v a="$RUN" -v b="$STATE/kubelet" -v c="$STATE/containerd" \
    '{ for (i = 0; i < 3; i++) { d = (i == 0 ? a : i == 1 ? b : c); if ($2 == d || index($2, d "/") == 1) { print $2; break } } }' \
    /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || log "WARNING: could not unmount $m"
  done
}

cmd_down() {
  [[ "$(id -u)" -eq 0 ]] || die "the cluster tier needs root"
  local t0=$SECONDS
  if [[ -z "${KUBECTL:-}" ]]; then
    local cache
    cache="$("$SCRIPT_DIR/build-binaries.sh" --print-dir)"
    [[ -x "$cache/bin/kubectl" ]] && KUBECTL="$cache/bin/kubectl"
  fi
  # The webhooks first: with Kueue stopped, its pod webhook (failurePolicy Fail) would refuse the pod updates
  # that drain_pods makes.
  if [[ -f "$RUN/plane/kubeconfig" && -n "${KUBECTL:-}" ]] && kubectl_ get --raw /readyz >/dev/null 2>&1; then
    kubectl_ delete validatingwebhookconfigurations,mutatingwebhookconfigurations --all --wait=false >/dev/null 2>&1 || true
  fi
  local c
  # In parallel. The Trainer v2.2.0 hangs 30 s on SIGTERM (a channel in its status server's Start is never
  # closed), so it gets 5 s before SIGKILL.
  for c in kueue jobset trainer kube-scheduler kube-controller-manager; do
    if [[ "$c" == trainer ]]; then STOP_TIMEOUT=5 stop_pidfile "$RUN/$c.pid" "$c" & else stop_pidfile "$RUN/$c.pid" "$c" & fi
  done
  wait
  drain_pods
  for c in coredns kube-proxy; do stop_pidfile "$RUN/$c.pid" "$c" & done
  wait
  stop_pidfile "$RUN/kubelet.pid" kubelet
  containerd_cleanup
  stop_pidfile "$RUN/containerd.pid" containerd
  if [[ -d "$RUN/plane" ]]; then
    "$SCRIPT_DIR/control-plane.sh" stop "$RUN/plane"
  fi
  # kube-proxy's rules (KUBE-* chains in filter/nat), only when we ran one.
  if [[ -f "$RUN/kube-proxy.yaml" ]]; then
    local cache
    cache="$("$SCRIPT_DIR/build-cluster-binaries.sh" --print-dir)"
    if [[ -x "$cache/bin/kube-proxy" ]]; then
      "$cache/bin/kube-proxy" --cleanup --config="$RUN/kube-proxy.yaml" >"$LOGS/kube-proxy-cleanup.log" 2>&1 || true
    fi
  fi
  cni_iptables_cleanup
  unmount_leftovers
  host_undo
  # Symlinks the kubelet left in /var/log/containers pointing at our pod logs.
  local l
  for l in /var/log/containers/*.log; do
    [[ -L "$l" ]] || continue
    case "$(readlink "$l")" in "$STATE"/*) rm -f "$l" ;; esac
  done
  rm -rf "$RUN" "$STATE/kubelet" "$STATE/pod-logs"
  log "down in $((SECONDS - t0)) s; host changes undone (images stay in $STATE/containerd)"
}

cmd_status() {
  [[ -d "$RUN" ]] || { log "not up (no $RUN)"; return 1; }
  log "running: $(running_pids)"
  if [[ -f "$RUN/env" ]]; then
    # shellcheck source=/dev/null
    . "$RUN/env"
    kubectl get nodes -o wide >&2 || true
    kubectl get pods -A >&2 || true
  fi
}

cmd_import_image() {
  [[ -S "$RUN/containerd.sock" ]] || die "the cluster is not up"
  local f
  for f in "$@"; do
    ctr_ images import "$f" >&2 || die "ctr images import $f failed"
  done
}

cluster_main() {
  (($# >= 1)) || { usage; exit 2; }
  local cmd="$1"
  shift
  case "$cmd" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    import-image) cmd_import_image "$@" ;;
    -h | --help | help) usage ;;
    *) usage; die "unknown subcommand: $cmd" ;;
  esac
}

cluster_main "$@"
