#!/usr/bin/env bash
# Run a real etcd + kube-apiserver on loopback for the integration tests, like
# controller-runtime's envtest: no kubelet, no controller-manager, no scheduler.
# Recipe: shared/research/real-apiserver.md sections 4 and 6.2-6.4.
#
# Usage:
#   tests/k8s/control-plane.sh start DIR              start etcd + kube-apiserver, state in DIR
#   tests/k8s/control-plane.sh stop DIR               stop both (by PID from DIR/*.pid)
#   tests/k8s/control-plane.sh install-crds KUBECONFIG
#                                                     server-side apply the Kubeflow Trainer CRDs
#                                                     (+ the repo's crds/*.yaml) and wait for Established
#   tests/k8s/control-plane.sh kill etcd|kube-apiserver DIR
#                                                     SIGKILL one of them (a fault for the fault-injection
#                                                     tests); its command line is kept in DIR/NAME.argv
#   tests/k8s/control-plane.sh revive etcd|kube-apiserver DIR
#                                                     start it again as it was (same ports, flags and data)
#                                                     and wait until it is ready
#
# After `start`, DIR holds: kubeconfig, env (shell-sourceable), etcd.pid,
# kube-apiserver.pid (plus *.pid.start: process start times, checked before
# any signal so a recycled PID is never hit), etcd.log, kube-apiserver.log,
# apiserver.port, etcd.port, pki/ (CA, serving cert, SA key, token), etcd-data/.
#
# Environment:
#   TRAINWARDEN_K8S_BIN_DIR        dir with kube-apiserver, etcd, kubectl
#                                  (default: build-or-reuse via build-binaries.sh)
#   TRAINWARDEN_KUBECTL            kubectl for install-crds (default: $TRAINWARDEN_K8S_BIN_DIR/kubectl)
#   TRAINWARDEN_SHARED_DIR         shared fixtures dir (default: <repo>/../shared)
#   TRAINWARDEN_K8S_START_TIMEOUT  seconds to wait for each of etcd and the apiserver (default 90)
#   TRAINWARDEN_K8S_STOP_TIMEOUT   seconds between SIGTERM and SIGKILL (default 20)
#   TRAINWARDEN_K8S_ADDRESS        IPv4 address kube-apiserver binds to and advertises (default 127.0.0.1);
#                                  the cluster tier (cluster.sh) uses the node address, which pods can reach
#   TRAINWARDEN_K8S_EXTRA_SANS     more subjectAltNames for the serving cert, e.g. "IP:10.218.0.1,DNS:kubernetes.default.svc"
#   TRAINWARDEN_K8S_APISERVER_ARGS more kube-apiserver flags (space-separated; later flags win)
#   TRAINWARDEN_K8S_DISABLE_ADMISSION  --disable-admission-plugins (default ServiceAccount: no controller-manager
#                                  creates ServiceAccounts here; the cluster tier sets it empty)
# A DIR/pki/ca.{crt,key} that exists before `start` is reused (cluster.sh signs other certs with it).
#
# Caveats of an envtest-style plane: namespaces never finish deleting, there is
# no garbage collection of ownerReferences, no default ServiceAccounts, Pods never run.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
START_TIMEOUT="${TRAINWARDEN_K8S_START_TIMEOUT:-90}"
ADDRESS="${TRAINWARDEN_K8S_ADDRESS:-127.0.0.1}"
STOP_TIMEOUT="${TRAINWARDEN_K8S_STOP_TIMEOUT:-20}"

log() { printf '[control-plane] %s\n' "$*" >&2; }
die() { printf '[control-plane] ERROR: %s\n' "$*" >&2; exit 1; }
# Prints the header comment of this file.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; }

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' is required but not on PATH ($2)"
}

bin_dir() {
  if [[ -n "${TRAINWARDEN_K8S_BIN_DIR:-}" ]]; then
    printf '%s\n' "$TRAINWARDEN_K8S_BIN_DIR"
  else
    local cache
    cache="$("$SCRIPT_DIR/build-binaries.sh" | tail -n1)" || die "build-binaries.sh failed"
    printf '%s\n' "$cache/bin"
  fi
}

# --- process helpers ---------------------------------------------------------

# True if PID is alive and not a zombie.
pid_alive() {
  local pid="$1" state
  kill -0 "$pid" 2>/dev/null || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [[ "$state" != Z ]]
}

# Start time of PID in clock ticks since boot (field 22 of /proc/PID/stat;
# parsed after the last ')' because the command name may contain spaces).
pid_starttime() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  awk '{print $20}' <<<"$stat"
}

# True if PID is still the process we started: same start time as recorded
# next to the PID file (guards against a recycled PID).
pid_is_ours() {
  local pid="$1" pidfile="$2" want got
  want="$(cat "$pidfile.start" 2>/dev/null)" || return 1
  got="$(pid_starttime "$pid")" || return 1
  [[ -n "$want" && "$want" == "$got" ]]
}

# Start a binary in its own session (so a Ctrl-C aimed at the caller's
# terminal does not kill it), logging to LOG and recording its PID in PIDFILE.
# The inner shell writes its own PID and then execs, so the PID is exact even
# if setsid has to fork.
spawn() {
  local pidfile="$1" logfile="$2"
  shift 2
  rm -f "$pidfile" "$pidfile.start"
  # shellcheck disable=SC2016  # $$, $0 and $@ are for the inner shell
  setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" \
    </dev/null >"$logfile" 2>&1 &
  local i
  for ((i = 0; i < 50; i++)); do
    if [[ -s "$pidfile" ]]; then
      # The start time survives the exec, so stop can verify the PID later.
      pid_starttime "$(cat "$pidfile")" >"$pidfile.start" || true
      return 0
    fi
    sleep 0.1
  done
  die "could not start $1 (no PID file $pidfile after 5 s)"
}

# SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL. Only ever by PID.
stop_pidfile() {
  local pidfile="$1" name="$2" pid i
  [[ -f "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  if [[ ! "$pid" =~ ^[0-9]+$ ]]; then
    log "ignoring $pidfile: not a PID"
    rm -f "$pidfile" "$pidfile.start"
    return 0
  fi
  if ! pid_alive "$pid"; then
    rm -f "$pidfile" "$pidfile.start"
    return 0
  fi
  if ! pid_is_ours "$pid" "$pidfile"; then
    log "PID $pid from $pidfile is no longer the $name we started; not touching it"
    rm -f "$pidfile" "$pidfile.start"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
    pid_alive "$pid" || break
    sleep 0.1
  done
  if pid_alive "$pid"; then
    log "$name (PID $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      pid_alive "$pid" || break
      sleep 0.1
    done
  fi
  pid_alive "$pid" && die "$name (PID $pid) is still running after SIGKILL"
  log "stopped $name (PID $pid)"
  rm -f "$pidfile" "$pidfile.start"
}

cmd_stop() {
  local dir="$1"
  if [[ ! -d "$dir" ]]; then
    log "stop: $dir does not exist; nothing to stop"
    return 0
  fi
  # The apiserver first: it would otherwise log etcd connection errors while stopping.
  stop_pidfile "$dir/kube-apiserver.pid" kube-apiserver
  stop_pidfile "$dir/etcd.pid" etcd
}

# --- start -------------------------------------------------------------------

# Three distinct free loopback ports. All sockets stay open until all are
# chosen, so they differ; the usual (small) race remains until our servers bind.
free_ports() {
  python3 - "$1" "${2:-127.0.0.1}" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((sys.argv[2], 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
}

make_pki() {
  local pki="$1"
  mkdir -p "$pki"
  (
    cd "$pki"
    if [[ ! -s ca.key || ! -s ca.crt ]]; then
      openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=trainwarden-test-ca" \
        -keyout ca.key -out ca.crt 2>/dev/null
    fi
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
      -keyout apiserver.key -out apiserver.csr 2>/dev/null
    # IP SAN: rustls (kube-rs) checks 127.0.0.1 against IP SANs, not the CN.
    local sans="IP:127.0.0.1,DNS:localhost"
    [[ "$ADDRESS" == 127.0.0.1 ]] || sans+=",IP:$ADDRESS"
    [[ -z "${TRAINWARDEN_K8S_EXTRA_SANS:-}" ]] || sans+=",$TRAINWARDEN_K8S_EXTRA_SANS"
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' "$sans" >san.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile san.ext -out apiserver.crt 2>/dev/null
    # One RSA key signs and verifies service-account tokens (as hack/local-up-cluster.sh does).
    openssl genrsa -out sa.key 2048 2>/dev/null
    chmod 600 ./*.key
  ) || die "openssl failed to create certificates in $pki"
}

write_kubeconfig() {
  local file="$1" port="$2" ca="$3" token="$4"
  local ca_data
  ca_data="$(base64 -w0 <"$ca")"
  (umask 077 && cat >"$file") <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trainwarden-test
  cluster:
    server: https://$ADDRESS:$port
    certificate-authority-data: $ca_data
users:
- name: trainwarden-test-admin
  user:
    token: $token
contexts:
- name: trainwarden-test
  context:
    cluster: trainwarden-test
    user: trainwarden-test-admin
    namespace: default
current-context: trainwarden-test
EOF
}

show_logs() {
  local dir="$1" f
  for f in "$dir/etcd.log" "$dir/kube-apiserver.log"; do
    [[ -f "$f" ]] || continue
    printf '\n===== last 40 lines of %s =====\n' "$f" >&2
    tail -n 40 "$f" >&2
  done
  printf '\n' >&2
}

# Did the process die because its port was taken between our probe and its bind?
bind_race() {
  grep -Eqi 'address already in use|bind: ' "$1" 2>/dev/null
}

# Returns 0 when ready, 1 on a timeout or crash, 2 on a port bind race.
wait_ready() {
  local what="$1" pidfile="$2" logfile="$3"
  shift 3
  local deadline=$((SECONDS + START_TIMEOUT)) pid
  pid="$(cat "$pidfile")"
  while ((SECONDS < deadline)); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    if ! pid_alive "$pid"; then
      if bind_race "$logfile"; then
        log "$what could not bind its port (race with another process)"
        return 2
      fi
      log "$what exited during startup"
      return 1
    fi
    sleep 0.5
  done
  log "$what was not ready after ${START_TIMEOUT}s"
  return 1
}

etcd_healthy() {
  curl -fsS --max-time 2 "http://127.0.0.1:$1/health" | grep -q '"health":"true"'
}

apiserver_ready() {
  local port="$1" dir="$2"
  # Token via a header file so it does not show up in `ps`.
  [[ "$(curl -fsS --max-time 5 --cacert "$dir/pki/ca.crt" -H "@$dir/pki/auth-header" \
    "https://$ADDRESS:$port/readyz")" == ok ]] || return 1
  # The default namespace is created by a post-start controller, shortly after /readyz.
  curl -fsS --max-time 5 --cacert "$dir/pki/ca.crt" -H "@$dir/pki/auth-header" \
    -o /dev/null "https://$ADDRESS:$port/api/v1/namespaces/default"
}

# One attempt; returns 0, 1 (fatal) or 2 (bind race: caller retries).
start_once() {
  local dir="$1" bin="$2" token="$3"
  local ports etcd_port peer_port api_port
  ports="$(free_ports 3 "$ADDRESS")" || die "python3 could not find free loopback ports"
  read -r etcd_port peer_port api_port <<<"$ports"

  rm -rf "$dir/etcd-data"
  log "starting etcd on 127.0.0.1:$etcd_port"
  spawn "$dir/etcd.pid" "$dir/etcd.log" "$bin/etcd" \
    --name trainwarden-test \
    --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "trainwarden-test=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync=true \
    --log-level warn
  local rc=0
  wait_ready etcd "$dir/etcd.pid" "$dir/etcd.log" etcd_healthy "$etcd_port" || rc=$?
  ((rc == 0)) || return "$rc"

  log "starting kube-apiserver on https://$ADDRESS:$api_port"
  local extra=()
  # shellcheck disable=SC2206  # word splitting is the documented format
  [[ -z "${TRAINWARDEN_K8S_APISERVER_ARGS:-}" ]] || extra=($TRAINWARDEN_K8S_APISERVER_ARGS)
  spawn "$dir/kube-apiserver.pid" "$dir/kube-apiserver.log" "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address="$ADDRESS" \
    --secure-port="$api_port" \
    --advertise-address="$ADDRESS" \
    --cert-dir="$dir/pki" \
    --tls-cert-file="$dir/pki/apiserver.crt" \
    --tls-private-key-file="$dir/pki/apiserver.key" \
    --token-auth-file="$dir/pki/tokens.csv" \
    --client-ca-file="$dir/pki/ca.crt" \
    --authorization-mode=RBAC \
    --service-account-issuer="https://$ADDRESS:$api_port/" \
    --service-account-key-file="$dir/pki/sa.key" \
    --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --allow-privileged=true \
    --disable-admission-plugins="${TRAINWARDEN_K8S_DISABLE_ADMISSION-ServiceAccount}" \
    --endpoint-reconciler-type=none \
    ${extra[@]+"${extra[@]}"}
  wait_ready kube-apiserver "$dir/kube-apiserver.pid" "$dir/kube-apiserver.log" \
    apiserver_ready "$api_port" "$dir" || rc=$?
  ((rc == 0)) || return "$rc"

  write_kubeconfig "$dir/kubeconfig" "$api_port" "$dir/pki/ca.crt" "$token"
  {
    printf '# Source this file: . %q\n' "$dir/env"
    printf 'export KUBECONFIG=%q\n' "$dir/kubeconfig"
    printf 'export TRAINWARDEN_TEST_KUBECONFIG=%q\n' "$dir/kubeconfig"
    printf 'export TRAINWARDEN_KUBECTL=%q\n' "$bin/kubectl"
    # kubectl's discovery cache, per plane: keeps ~/.kube/cache free of random ports.
    printf 'export KUBECACHEDIR=%q\n' "$dir/kube-cache"
  } >"$dir/env"
  printf '%s\n' "$api_port" >"$dir/apiserver.port"
  printf '%s\n' "$etcd_port" >"$dir/etcd.port"
  return 0
}

cmd_start() {
  local dir="$1"
  need python3 "used to pick free ports"
  need openssl "used to create the certificates"
  need curl "used for health checks"
  need setsid "util-linux"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  local f
  for f in etcd kube-apiserver; do
    if [[ -f "$dir/$f.pid" ]] && pid_alive "$(cat "$dir/$f.pid")" && pid_is_ours "$(cat "$dir/$f.pid")" "$dir/$f.pid"; then
      die "$dir already has a running $f (PID $(cat "$dir/$f.pid")); run: $0 stop $dir"
    fi
  done

  local bin
  bin="$(bin_dir)"
  for f in etcd kube-apiserver kubectl; do
    [[ -x "$bin/$f" ]] || die "$bin/$f is missing; run tests/k8s/build-binaries.sh"
  done

  local t0=$SECONDS token
  make_pki "$dir/pki"
  token="$(openssl rand -hex 24)"
  # token,user,uid,"group1,group2": system:masters bypasses RBAC.
  (umask 077 && printf '%s,trainwarden-test-admin,trainwarden-test-admin,"system:masters"\n' "$token" >"$dir/pki/tokens.csv")
  (umask 077 && printf 'Authorization: Bearer %s\n' "$token" >"$dir/pki/auth-header")

  local attempt rc
  for attempt in 1 2; do
    rc=0
    start_once "$dir" "$bin" "$token" || rc=$?
    if ((rc == 0)); then
      log "ready in $((SECONDS - t0)) s: $(sed -n 's/^ *server: //p' "$dir/kubeconfig")"
      log "kubeconfig: $dir/kubeconfig   env: . $dir/env"
      printf '%s\n' "$dir/env"
      return 0
    fi
    show_logs "$dir"
    cmd_stop "$dir"
    if ((rc == 2 && attempt == 1)); then
      log "retrying once with new ports"
      continue
    fi
    break
  done
  die "control plane did not start (logs above; full logs in $dir)"
}

# --- install-crds ------------------------------------------------------------

cmd_install_crds() {
  local kubeconfig="$1"
  [[ -f "$kubeconfig" ]] || die "install-crds: kubeconfig $kubeconfig not found"
  local kubectl="${TRAINWARDEN_KUBECTL:-}"
  if [[ -z "$kubectl" ]]; then
    kubectl="$(bin_dir)/kubectl"
  fi
  [[ -x "$kubectl" ]] || die "kubectl not found at $kubectl (set TRAINWARDEN_KUBECTL or run build-binaries.sh)"

  local repo shared
  repo="$(git -C "$SCRIPT_DIR" rev-parse --show-toplevel 2>/dev/null)" ||
    die "cannot find the repo root with git from $SCRIPT_DIR"
  shared="${TRAINWARDEN_SHARED_DIR:-$repo/../shared}"
  local upstream="$shared/fixtures/kubeflow/upstream-trainer/crds"
  [[ -d "$upstream" ]] || die "Kubeflow CRD fixtures not found at $upstream (set TRAINWARDEN_SHARED_DIR to the shared/ dir)"

  # The RHOAI TrainJob CRD has the same name (trainjobs.trainer.kubeflow.org),
  # so only the upstream one is installed here.
  local files=(
    "$upstream/trainer.kubeflow.org_trainjobs.yaml"
    "$upstream/trainer.kubeflow.org_trainingruntimes.yaml"
    "$upstream/trainer.kubeflow.org_clustertrainingruntimes.yaml"
  )
  for f in "${files[@]}"; do
    [[ -f "$f" ]] || die "missing CRD fixture $f"
  done
  # The project's own CRDs, once they exist.
  local f
  shopt -s nullglob
  for f in "$repo"/crds/*.yaml "$repo"/crds/*.yml; do files+=("$f"); done
  shopt -u nullglob

  local args=() names
  for f in "${files[@]}"; do args+=(-f "$f"); done
  log "applying ${#files[@]} CRD file(s) (server-side)"
  names="$("$kubectl" --kubeconfig "$kubeconfig" apply --server-side --force-conflicts \
    --field-manager=trainwarden-tests -o name "${args[@]}")" || die "kubectl apply of the CRDs failed"
  local crds=()
  while IFS= read -r f; do
    [[ "$f" == customresourcedefinition.apiextensions.k8s.io/* ]] && crds+=("$f")
  done <<<"$names"
  ((${#crds[@]} > 0)) || die "kubectl apply reported no CustomResourceDefinitions"
  "$kubectl" --kubeconfig "$kubeconfig" wait --for condition=established --timeout=60s "${crds[@]}" >&2 ||
    die "CRDs did not become Established within 60 s"
  log "installed and established: ${crds[*]#customresourcedefinition.apiextensions.k8s.io/}"
}

# --- faults ------------------------------------------------------------------

cmd_kill() {
  local name="$1" dir="$2" pid
  local pidfile="$dir/$name.pid"
  [[ -f "$pidfile" ]] || die "kill: no $pidfile"
  pid="$(cat "$pidfile")"
  pid_alive "$pid" && pid_is_ours "$pid" "$pidfile" || die "kill: $name (PID $pid) is not running"
  # NUL-separated, exactly as exec'd: revive re-runs it.
  cp "/proc/$pid/cmdline" "$dir/$name.argv"
  kill -KILL "$pid"
  local i
  for ((i = 0; i < 100; i++)); do
    pid_alive "$pid" || break
    sleep 0.1
  done
  pid_alive "$pid" && die "$name (PID $pid) survived SIGKILL"
  rm -f "$pidfile" "$pidfile.start"
  log "killed $name (PID $pid) with SIGKILL"
}

cmd_revive() {
  local name="$1" dir="$2" argv=() rc=0
  [[ -f "$dir/$name.argv" ]] || die "revive: no $dir/$name.argv (kill it first)"
  mapfile -d '' argv <"$dir/$name.argv"
  # A port just released can still be held by the kernel for a moment: retry the bind.
  local attempt
  for attempt in 1 2 3 4 5; do
    spawn "$dir/$name.pid" "$dir/$name.revived.log" "${argv[@]}"
    rc=0
    case "$name" in
      etcd) wait_ready etcd "$dir/$name.pid" "$dir/$name.revived.log" etcd_healthy "$(cat "$dir/etcd.port")" || rc=$? ;;
      kube-apiserver) wait_ready kube-apiserver "$dir/$name.pid" "$dir/$name.revived.log" \
        apiserver_ready "$(cat "$dir/apiserver.port")" "$dir" || rc=$? ;;
    esac
    ((rc == 2)) || break
    sleep 1
  done
  ((rc == 0)) || { tail -n 40 "$dir/$name.revived.log" >&2; die "revive: $name did not become ready"; }
  log "revived $name"
}

main() {
  (($# >= 1)) || { usage; exit 2; }
  local cmd="$1"
  shift
  case "$cmd" in
    start) (($# == 1)) || die "usage: $0 start DIR"; cmd_start "$1" ;;
    stop) (($# == 1)) || die "usage: $0 stop DIR"; cmd_stop "$1" ;;
    install-crds) (($# == 1)) || die "usage: $0 install-crds KUBECONFIG"; cmd_install_crds "$1" ;;
    kill | revive)
      (($# == 2)) && [[ "$1" == etcd || "$1" == kube-apiserver ]] ||
        die "usage: $0 $cmd etcd|kube-apiserver DIR"
      "cmd_$cmd" "$1" "$2" ;;
    -h | --help | help) usage ;;
    *) usage; die "unknown subcommand: $cmd" ;;
  esac
}

# cluster.sh sources this file for its process helpers (spawn, stop_pidfile, ...).
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
