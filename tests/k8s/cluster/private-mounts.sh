#!/usr/bin/env bash
# Run a command in a private mount namespace with a few paths replaced, so a controller that hard-codes host
# paths runs outside the cluster without touching those paths on the host (used by tests/k8s/cluster.sh):
#   --tmp DIR           DIR is /tmp (the Kubeflow Trainer hard-codes /tmp/k8s-webhook-server/serving-certs)
#   --service-account DIR
#                       a private tmpfs on /run holding DIR's files at /run/secrets/kubernetes.io/serviceaccount
#                       (the Trainer's status server reads the cluster's token issuer from the token there)
#   --etc-overlay DIR   a read-only overlay on /etc with DIR's files on top (Kueue hard-codes /etc/kueue/metrics/certs)
# Usage: private-mounts.sh [OPTIONS] -- CMD [ARGS...]   (root; the mounts vanish with the process)
set -euo pipefail
if [[ "${TRAINWARDEN_IN_PRIVATE_MOUNTS:-}" != 1 ]]; then
  TRAINWARDEN_IN_PRIVATE_MOUNTS=1 exec unshare --mount --propagation private "$0" "$@"
fi
unset TRAINWARDEN_IN_PRIVATE_MOUNTS
tmp="" sa="" etc=""
while (($#)); do
  case "$1" in
    --tmp) tmp="$2"; shift 2 ;;
    --service-account) sa="$2"; shift 2 ;;
    --etc-overlay) etc="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "private-mounts.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# Sources are read before anything is mounted over them.
if [[ -n "$sa" ]]; then
  files="$(tar -C "$sa" -cf - . | base64 -w0)"
  mount -t tmpfs -o size=4m,mode=0755 trainwarden-private-run /run
  mkdir -p /run/secrets/kubernetes.io/serviceaccount
  base64 -d <<<"$files" | tar -C /run/secrets/kubernetes.io/serviceaccount -xf -
fi
[[ -z "$etc" ]] || mount -t overlay trainwarden-private-etc -o "lowerdir=$etc:/etc" /etc
[[ -z "$tmp" ]] || mount --bind "$tmp" /tmp
exec "$@"
