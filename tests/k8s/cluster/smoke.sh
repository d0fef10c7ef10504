#!/usr/bin/env bash
# First end-to-end smoke of the cluster tier: trainwarden from its image and chart against the real Trainer.
#   1. helm install charts/trainwarden with the image built from the project's Dockerfile (trainwarden:dev);
#   2. a TrainingRuntime + TrainJob running the training image (train.py: the real Kubeflow SDK reports the
#      loss to the Trainer's status server, so status.trainerStatus changes);
#   3. an Enforce ProgressPolicy (plateau of the loss) makes trainwarden suspend the TrainJob;
#   4. asserts what the real controllers did: the Trainer suspends the JobSet, the Job is suspended, the pod gets
#      SIGTERM and writes its checkpoint, Events on the TrainJob, the policy's status.
# Needs: tests/k8s/cluster.sh up, tests/k8s/build-images.sh (trainwarden:dev, trainwarden-test/training:dev).
# Usage: tests/k8s/cluster/smoke.sh   (exit 0 = passed; evidence printed; artifacts in $TRAINWARDEN_CLUSTER_RUN/smoke)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../../.." && pwd)"
STATE="${TRAINWARDEN_CLUSTER_DIR:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/cluster}"
[[ -f "$STATE/run/env" ]] || { echo "smoke: the cluster is not up (tests/k8s/cluster.sh up)" >&2; exit 1; }
# shellcheck source=/dev/null
. "$STATE/run/env"
OUT="$TRAINWARDEN_CLUSTER_RUN/smoke"
rm -rf "$OUT"
mkdir -p "$OUT"
NS=tw-smoke
JOB=smoke-plateau
T0=$SECONDS

log() { printf '[smoke %4ds] %s\n' "$((SECONDS - T0))" "$*" >&2; }
fail() {
  printf '[smoke] FAILED: %s\n' "$*" >&2
  {
    kubectl get trainjob,jobset,job,pod -n "$NS" -o wide
    kubectl get nodes -o custom-columns='NODE:.metadata.name,CONDITIONS:.status.conditions[?(@.status=="True")].type,TAINTS:.spec.taints[*].key'
    kubectl get pods -n trainwarden-system -o wide
    kubectl get events -n trainwarden-system --sort-by=.lastTimestamp | tail -n 20
    kubectl get events -n "$NS" --sort-by=.lastTimestamp
    kubectl logs -n trainwarden-system deploy/trainwarden --tail=60
  } >"$OUT/failure.txt" 2>&1 || true
  tail -n 80 "$OUT/failure.txt" >&2
  exit 1
}
# until TIMEOUT CMD...: poll
until_() {
  local timeout="$1" deadline
  shift
  deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 1
  done
  return 1
}
jp() { kubectl get "$@" 2>/dev/null; }

# --- images ----------------------------------------------------------------------------------------------
# The list first, then grep: `ctr ... | grep -q` under pipefail fails when grep stops reading early (SIGPIPE),
# which depends on where the image sorts in the list (seen once after a re-import).
images="$($TRAINWARDEN_CTR images ls -q)"
for img in trainwarden:dev trainwarden-test/training:dev; do
  grep -qx "docker.io/$([[ "$img" == */* ]] || printf library/)$img" <<<"$images" ||
    fail "image $img is not in the cluster's containerd (run tests/k8s/build-images.sh)"
done

# --- trainwarden from its chart ----------------------------------------------------------------------------
log "helm install trainwarden (charts/trainwarden, image trainwarden:dev)"
helm uninstall trainwarden -n trainwarden-system --wait >/dev/null 2>&1 || true
kubectl delete namespace "$NS" --wait=true >/dev/null 2>&1 || true
helm install trainwarden "$REPO/charts/trainwarden" -n trainwarden-system --create-namespace \
  --set image.repository=trainwarden --set image.tag=dev --set image.pullPolicy=Never \
  --set replicas=1 --set evalInterval=5s --set logFormat=text \
  --wait --timeout 180s >"$OUT/helm.txt" 2>&1 || { cat "$OUT/helm.txt" >&2; fail "helm install"; }
pod_sa="$(jp pods -n trainwarden-system -l app.kubernetes.io/name=trainwarden -o jsonpath='{.items[0].spec.serviceAccountName}')"
log "trainwarden runs as a pod with ServiceAccount $pod_sa"

# --- the training job ----------------------------------------------------------------------------------------
ckpt="$TRAINWARDEN_CLUSTER_RUN/volumes/$NS-$JOB"
rm -rf "$ckpt"
mkdir -p "$ckpt"
chmod 0777 "$ckpt"
kubectl create namespace "$NS" >/dev/null
kubectl apply -f - >/dev/null <<EOF
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: smoke-runtime, namespace: $NS}
spec:
  mlPolicy: {numNodes: 1}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            template:
              spec:
                terminationGracePeriodSeconds: 20
                containers:
                - name: node
                  image: trainwarden-test/training:dev
                  imagePullPolicy: Never
                  env:
                  - {name: STEP_SECONDS, value: "0.5"}
                  - {name: TOTAL_STEPS, value: "100000"}
                  - {name: CHECKPOINT_DIR, value: /checkpoint}
                  volumeMounts: [{name: checkpoint, mountPath: /checkpoint}]
                volumes:
                - name: checkpoint
                  hostPath: {path: $ckpt, type: Directory}
---
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: smoke-plateau, namespace: $NS}
spec:
  selector:
    matchLabels: {trainwarden.dev/smoke: "true"}
  mode: Enforce
  # The Kubeflow SDK sends at most one report per 5 s.
  samplingInterval: 5s
  assumeGpus: 1
  gpuHourCost: 2.5
  rules:
  - name: loss-plateau
    uses: plateau
    with: {metric: loss, window: 20s, minDelta: 0.01}
    actions:
    - suspend: {message: "smoke: loss plateaued"}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: $JOB
  namespace: $NS
  labels: {trainwarden.dev/smoke: "true"}
spec:
  runtimeRef: {name: smoke-runtime, apiGroup: trainer.kubeflow.org, kind: TrainingRuntime}
EOF
log "TrainJob $NS/$JOB created"
until_ 30 bash -c "kubectl get progresspolicy -n $NS smoke-plateau -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" ||
  fail "the ProgressPolicy is not Ready: $(jp progresspolicy -n "$NS" smoke-plateau -o jsonpath='{.status}')"

until_ 90 bash -c "[[ \"\$(kubectl get pods -n $NS -o jsonpath='{.items[0].status.phase}')\" == Running ]]" ||
  fail "no training pod Running within 90 s"
pod="$(jp pods -n "$NS" -o jsonpath='{.items[0].metadata.name}')"
log "pod $pod Running (JobSet $(jp jobset -n "$NS" -o jsonpath='{.items[0].metadata.name}'))"
# Follow the pod's log until it ends: the SIGTERM and checkpoint lines are written during termination.
kubectl logs -n "$NS" -f "$pod" >"$OUT/pod.log" 2>&1 &
logs_pid=$!

until_ 60 bash -c "kubectl get trainjob -n $NS $JOB -o jsonpath='{.status.trainerStatus.metrics}' | grep -q loss" ||
  fail "status.trainerStatus never got a loss (the status server path from the pod did not work)"
log "status.trainerStatus: $(jp trainjob -n "$NS" "$JOB" -o jsonpath='{.status.trainerStatus}')"

until_ 150 bash -c "[[ \"\$(kubectl get trainjob -n $NS $JOB -o jsonpath='{.spec.suspend}')\" == true ]]" ||
  fail "trainwarden did not suspend the TrainJob within 150 s"
t_suspend=$SECONDS
log "TrainJob suspended by trainwarden (managedFields: $(jp trainjob -n "$NS" "$JOB" -o json --show-managed-fields | python3 -c 'import json,sys; print(sorted({m["manager"] for m in json.load(sys.stdin)["metadata"]["managedFields"] if "f:suspend" in json.dumps(m.get("fieldsV1",{}))}))'))"

until_ 30 bash -c "[[ \"\$(kubectl get jobset -n $NS -o jsonpath='{.items[0].spec.suspend}')\" == true ]]" ||
  fail "the Trainer did not suspend the JobSet"
log "JobSet spec.suspend=true ($((SECONDS - t_suspend)) s after the TrainJob)"
until_ 30 bash -c "[[ \"\$(kubectl get jobs -n $NS -o jsonpath='{.items[0].spec.suspend}')\" == true ]]" ||
  fail "JobSet did not suspend its Job"
log "Job spec.suspend=true"
until_ 60 bash -c "[[ -z \"\$(kubectl get pods -n $NS -o name)\" ]]" || fail "the training pod was not deleted"
log "training pod gone ($((SECONDS - t_suspend)) s after the suspend)"
wait "$logs_pid" 2>/dev/null || true

grep -q 'train: SIGTERM at step' "$OUT/pod.log" || { cat "$OUT/pod.log" >&2; fail "the pod's log shows no SIGTERM"; }
grep -q 'train: checkpoint written' "$OUT/pod.log" || fail "the pod did not write its checkpoint"
[[ -s "$ckpt/checkpoint.json" ]] || fail "no checkpoint file at $ckpt"
log "pod: $(grep -E 'SIGTERM|checkpoint written' "$OUT/pod.log" | tr '\n' ' ')"
log "checkpoint on the volume: $(cat "$ckpt/checkpoint.json")"

cond="$(jp trainjob -n "$NS" "$JOB" -o jsonpath='{range .status.conditions[*]}{.type}={.status}/{.reason} {end}')"
log "TrainJob conditions: $cond"
[[ "$cond" == *"Suspended=True"* ]] || fail "TrainJob has no Suspended=True condition"
kubectl get events -n "$NS" --field-selector "involvedObject.kind=TrainJob,involvedObject.name=$JOB" \
  -o custom-columns=REASON:.reason,REPORTER:.reportingComponent,MESSAGE:.message >"$OUT/events.txt"
log "Events on the TrainJob:"
sed 's/^/    /' "$OUT/events.txt" >&2
grep -Eq '^Suspended +trainwarden ' "$OUT/events.txt" || fail "no Event from trainwarden on the TrainJob"
kubectl get progresspolicy -n "$NS" smoke-plateau -o jsonpath='{.status}' >"$OUT/policy-status.json"
log "ProgressPolicy status: $(head -c 600 "$OUT/policy-status.json")"
log "PASSED in $((SECONDS - T0)) s (artifacts: $OUT)"
