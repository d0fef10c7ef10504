#!/usr/bin/env bash
# End-to-end tests of issue 12 on the cluster tier: trainwarden from its image and chart, the real Kubeflow Trainer,
# JobSet and Kueue, real pods. Each test asserts what the real controllers did.
#   friday   Enforce weekend-safe-style policy (window open): plateau -> Slack message at a local sink + suspend;
#            the Trainer suspends the JobSet, the pod gets SIGTERM and writes its checkpoint; savings in the
#            policy status; Events on the TrainJob
#   resume   (after friday) un-suspend: a new pod resumes from the checkpoint; not re-suspended at once
#   stall    the loop hangs (keeps running, stops reporting): suspended at the deadline, pod SIGTERM
#   kueue    ClusterQueue quota for one job, two teams' TrainJobs; the first stalls: trainwarden deactivates its
#            Workload, Kueue evicts it and admits the second (time from the stall deadline to its pod Running)
#   reclaim  queue-aware reclaim (issue 17): a stalled job is left alone while nobody waits in its ClusterQueue;
#            a second team's job queues behind it -> trainwarden deactivates the stalled job's Workload, once, and
#            Kueue admits the waiting one (time from the queueing to its pod Running)
#   nan      loss NaN at once -> suspended
#   audit    the same in Audit mode: the pod keeps running, Events and status say what would have happened
#   rbac     the chart's ServiceAccount may not read another namespace's Secret nor write outside its rules
#   checkpoint  (issue 42) training pods that mount their annotations (downward API) and run the companion package
#            (sdk/python): a `checkpoint` action makes the running pod save and keep training (step still rising,
#            no restart); `suspend: {checkpointFirst}` on a job whose save (12 s) outlasts its grace (5 s)
#            suspends only once the save is acknowledged, and the resumed job continues from that step. Prints
#            the request -> acknowledgement latency and request -> the pod seeing it (kubelet refresh included).
#   rollout  `helm upgrade` of the running two-replica install (a new pod template) while two jobs report and a
#            stall rule fires during the rollout: no controller pod exits non-zero (each logs its clean stop), the
#            suspension performed once, its webhook notification delivered once to the sink, and no job's history
#            checkpoint older than its last report before the rollout (issue 48)
# Usage: tests/k8s/cluster/e2e.sh [TEST...]   (default: all, in that order; needs cluster.sh up + build-images.sh)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/../../.." && pwd)"
STATE="${TRAINWARDEN_CLUSTER_DIR:-${TRAINWARDEN_CACHE_DIR:-$HOME/.cache/trainwarden}/cluster}"
[[ -f "$STATE/run/env" ]] || { echo "e2e: the cluster is not up (tests/k8s/cluster.sh up)" >&2; exit 1; }
# shellcheck source=/dev/null
. "$STATE/run/env"
OUT="$TRAINWARDEN_CLUSTER_RUN/e2e"
mkdir -p "$OUT"
T0=$SECONDS
CURRENT=""
SA=system:serviceaccount:trainwarden-system:trainwarden

log() { printf '[e2e %-6s %4ds] %s\n' "$CURRENT" "$((SECONDS - T0))" "$*" >&2; }
fail() {
  printf '[e2e %s] FAILED: %s\n' "$CURRENT" "$*" >&2
  {
    kubectl get trainjob,jobset,job,pod,workloads.v1beta2.kueue.x-k8s.io -A -o wide
    kubectl get nodes -o custom-columns='NODE:.metadata.name,CONDITIONS:.status.conditions[?(@.status=="True")].type,TAINTS:.spec.taints[*].key'
    kubectl get pods -n trainwarden-system -o wide
    kubectl get events -n trainwarden-system --sort-by=.lastTimestamp | tail -n 20
    kubectl get events -A --sort-by=.lastTimestamp | tail -n 40
    kubectl logs -n trainwarden-system deploy/trainwarden --tail=60
  } >"$OUT/failure-$CURRENT.txt" 2>&1 || true
  tail -n 60 "$OUT/failure-$CURRENT.txt" >&2
  exit 1
}
until_() {
  local timeout="$1" deadline
  shift
  deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}
jp() { kubectl get "$@" 2>/dev/null; }
suspended() { [[ "$(jp trainjob -n "$1" "$2" -o jsonpath='{.spec.suspend}')" == true ]]; }
pod_running() { [[ "$(jp pods -n "$1" -l "jobset.sigs.k8s.io/jobset-name=$2" -o jsonpath='{.items[*].status.phase}')" == Running ]]; }
no_pods() { [[ -z "$(jp pods -n "$1" -l "jobset.sigs.k8s.io/jobset-name=$2" -o name)" ]]; }
has_savings() {
  python3 -c 'import json,sys; s=json.loads(sys.argv[1] or "{}"); sys.exit(0 if s.get("gpuHoursSaved",0)>0 and s.get("dollarsSaved",0)>0 else 1)' \
    "$(jp progresspolicy -n "$1" "$2" -o jsonpath='{.status}')"
}
pod_of() { jp pods -n "$1" -l "jobset.sigs.k8s.io/jobset-name=$2" -o jsonpath='{.items[0].metadata.name}'; }

fresh_ns() {
  kubectl delete namespace "$1" --wait=true --timeout=60s >/dev/null 2>&1 || true
  rm -rf "$TRAINWARDEN_CLUSTER_RUN/volumes/$1"
  kubectl create namespace "$1" >/dev/null
}

# runtime NS NAME ENV_JSON [CPU]: a TrainingRuntime running train.py with a hostPath checkpoint volume of its own.
runtime() {
  local ns="$1" name="$2" env="$3" cpu="${4:-100m}"
  local vol="$TRAINWARDEN_CLUSTER_RUN/volumes/$ns/$name"
  mkdir -p "$vol"
  chmod 0777 "$vol"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: $name, namespace: $ns}
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
                  env: $env
                  resources: {requests: {cpu: "$cpu"}}
                  volumeMounts: [{name: checkpoint, mountPath: /checkpoint}]
                volumes:
                - name: checkpoint
                  hostPath: {path: $vol, type: Directory}
EOF
}

# ckpt_runtime NS NAME ENV_JSON GRACE: runtime's pods plus the downward-API volume of their annotations at
# /etc/trainwarden (examples/checkpoint/trainingruntime.yaml), and the termination grace period GRACE.
ckpt_runtime() {
  local ns="$1" name="$2" env="$3" grace="$4"
  local vol="$TRAINWARDEN_CLUSTER_RUN/volumes/$ns/$name"
  mkdir -p "$vol"
  chmod 0777 "$vol"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: $name, namespace: $ns}
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
                terminationGracePeriodSeconds: $grace
                containers:
                - name: node
                  image: trainwarden-test/training:dev
                  imagePullPolicy: Never
                  env: $env
                  resources: {requests: {cpu: 100m}}
                  volumeMounts:
                  - {name: checkpoint, mountPath: /checkpoint}
                  - {name: trainwarden-podinfo, mountPath: /etc/trainwarden, readOnly: true}
                volumes:
                - name: checkpoint
                  hostPath: {path: $vol, type: Directory}
                - name: trainwarden-podinfo
                  downwardAPI:
                    items:
                    - {path: annotations, fieldRef: {fieldPath: metadata.annotations}}
EOF
}

# checkpoint_record NS JOB: the TrainJob's checkpoint-request record (JSON), or nothing.
checkpoint_record() { jp trainjob -n "$1" "$2" -o jsonpath='{.metadata.annotations.trainwarden\.dev/checkpoint}'; }
# status_step NS JOB: the step the job last reported.
status_step() { jp trainjob -n "$1" "$2" -o jsonpath='{.status.trainerStatus.metrics[?(@.name=="step")].value}'; }

# trainjob NS NAME RUNTIME LABELS_JSON
trainjob() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: $2, namespace: $1, labels: $4}
spec:
  runtimeRef: {name: $3, apiGroup: trainer.kubeflow.org, kind: TrainingRuntime}
EOF
}

policy_ready() {
  until_ 30 bash -c "kubectl get progresspolicy -n $1 $2 -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" ||
    fail "ProgressPolicy $1/$2 is not Ready: $(jp progresspolicy -n "$1" "$2" -o jsonpath='{.status}')"
}

# Follow a pod's log to a file until the pod ends (the SIGTERM/checkpoint lines come during termination).
follow_log() { kubectl logs -n "$1" -f "$2" >"$3" 2>&1 & }

assert_sigterm_checkpoint() {
  local file="$1"
  until_ 30 grep -q 'train: checkpoint written' "$file" || { tail -n 5 "$file" >&2; fail "no SIGTERM + checkpoint in the pod log ($file)"; }
  log "pod: $(grep -E 'SIGTERM|checkpoint written' "$file" | tr '\n' ' ')"
}

# --- trainwarden from its chart (once) -------------------------------------------------------------------
SINK_NS=tw-sink
FRIDAY_NS=team-friday
install_trainwarden() {
  # The namespaces whose Secrets notifications read must exist before the chart is installed.
  kubectl get namespace "$FRIDAY_NS" >/dev/null 2>&1 || kubectl create namespace "$FRIDAY_NS" >/dev/null
  # The imported image's ID as a pod annotation: a rebuilt trainwarden:dev rolls the pods, an unchanged one does not.
  local image_id
  image_id="$(cat "$STATE/containerd/imported-trainwarden_dev.id" 2>/dev/null || echo unknown)"
  log "helm upgrade --install trainwarden (image trainwarden:dev ${image_id:7:12}, secretNamespaces=[$FRIDAY_NS], evalInterval 5s)"
  helm upgrade --install trainwarden "$REPO/charts/trainwarden" -n trainwarden-system --create-namespace \
    --set image.repository=trainwarden --set image.tag=dev --set image.pullPolicy=Never \
    --set replicas=2 --set evalInterval=5s --set logFormat=text \
    --set-json "notifications.secretNamespaces=[\"$FRIDAY_NS\"]" \
    --set-string "podAnnotations.trainwarden-e2e/image-id=${image_id#sha256:}" \
    --wait --timeout 180s >"$OUT/helm.txt" 2>&1 || { cat "$OUT/helm.txt" >&2; fail "helm install"; }
  log "trainwarden: $(jp pods -n trainwarden-system -l app.kubernetes.io/name=trainwarden -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} sa={.spec.serviceAccountName} {end}')"
}

# A local Slack: an HTTP server in a pod that prints every POST body (Slack's incoming-webhook protocol: 200 "ok").
install_sink() {
  [[ "$(jp pods -n "$SINK_NS" -l app=slack-sink -o jsonpath='{.items[0].status.phase}')" == Running ]] && return 0
  fresh_ns "$SINK_NS"
  kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: slack-sink, namespace: tw-sink, labels: {app: slack-sink}}
spec:
  containers:
  - name: sink
    image: trainwarden-test/training:dev
    imagePullPolicy: Never
    command: [python3, -c]
    args:
    - |
      import http.server, sys
      class H(http.server.BaseHTTPRequestHandler):
          def do_POST(self):
              body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
              print("SLACK " + self.path + " " + body.decode(), flush=True)
              self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
      http.server.HTTPServer(("0.0.0.0", 8080), H).serve_forever()
    ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: slack-sink, namespace: tw-sink}
spec:
  selector: {app: slack-sink}
  ports: [{port: 80, targetPort: 8080}]
EOF
  until_ 60 bash -c "[[ \"\$(kubectl get pods -n $SINK_NS slack-sink -o jsonpath='{.status.phase}')\" == Running ]]" ||
    fail "the Slack sink pod did not start"
}

# --- tests -------------------------------------------------------------------------------------------------

TRAIN_ENV='[{name: STEP_SECONDS, value: "0.5"}, {name: TOTAL_STEPS, value: "4000"}]'

test_friday() {
  install_sink
  local ns="$FRIDAY_NS" job=friday-run
  kubectl delete trainjob,trainingruntime,progresspolicy,secret -n "$ns" --all --wait=true >/dev/null 2>&1 || true
  rm -rf "$TRAINWARDEN_CLUSTER_RUN/volumes/$ns"
  kubectl -n "$ns" create secret generic slack-webhook \
    --from-literal=url="http://slack-sink.$SINK_NS.svc.cluster.local/services/T000/B000/e2e" >/dev/null
  # weekend-safe's shape with its window open now (a window starting this minute, in UTC) and test-sized times.
  local start
  start="$(date -u +'%M %H')"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: weekend-safe, namespace: $ns}
spec:
  selector: {matchLabels: {trainwarden.dev/weekend-safe: "true"}}
  mode: Enforce
  timezone: UTC
  activeWindows:
  - {start: "$start * * *", duration: 2h}
  gpuHourCost: 6.875
  assumeGpus: 8
  samplingInterval: 5s
  receivers:
  - name: team
    groupWait: 1s
    slack: {urlSecret: {name: slack-webhook, key: url}}
  rules:
  - name: loss-plateau
    uses: plateau
    with: {metric: loss, window: 20s, minDelta: 0.01}
    actions:
    - notify: {to: team, message: "loss has stopped improving; the job was suspended for the weekend"}
    - suspend: {}
EOF
  policy_ready "$ns" weekend-safe
  runtime "$ns" friday-runtime "$TRAIN_ENV"
  trainjob "$ns" "$job" friday-runtime '{trainwarden.dev/weekend-safe: "true"}'
  until_ 90 pod_running "$ns" "$job" || fail "no training pod Running"
  local pod
  pod="$(pod_of "$ns" "$job")"
  follow_log "$ns" "$pod" "$OUT/friday-pod.log"
  log "pod $pod Running; waiting for the plateau"
  until_ 60 bash -c "kubectl get trainjob -n $ns $job -o jsonpath='{.status.trainerStatus.metrics}' | grep -q loss" ||
    fail "no loss in status.trainerStatus"
  until_ 150 suspended "$ns" "$job" || fail "not suspended within 150 s"
  local ts=$SECONDS
  log "TrainJob suspended; trainerStatus $(jp trainjob -n "$ns" "$job" -o jsonpath='{.status.trainerStatus}')"
  until_ 30 bash -c "[[ \"\$(kubectl get jobset -n $ns $job -o jsonpath='{.spec.suspend}')\" == true ]]" ||
    fail "the Trainer did not suspend the JobSet"
  until_ 60 no_pods "$ns" "$job" || fail "the pod was not deleted"
  log "JobSet suspended, pod gone $((SECONDS - ts)) s after the suspend"
  assert_sigterm_checkpoint "$OUT/friday-pod.log"
  [[ -s "$TRAINWARDEN_CLUSTER_RUN/volumes/$ns/friday-runtime/checkpoint.json" ]] || fail "no checkpoint file on the volume"
  # The status writer publishes after the action (at most once per evaluation), so the savings can trail the
  # suspend by a few seconds: wait for them rather than read once (a single read raced the writer in CI).
  local st
  until_ 30 has_savings "$ns" weekend-safe ||
    fail "no savings in the policy status within 30 s of the suspend: $(jp progresspolicy -n "$ns" weekend-safe -o jsonpath='{.status}')"
  st="$(jp progresspolicy -n "$ns" weekend-safe -o jsonpath='{.status}')"
  printf '%s\n' "$st" >"$OUT/friday-policy-status.json"
  log "savings in the policy status $((SECONDS - ts)) s after the suspend"
  log "savings: $(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print(s["gpuHoursSaved"], "GPU-hours,", "$", s["dollarsSaved"])' "$st")"
  until_ 30 bash -c "kubectl logs -n $SINK_NS slack-sink | grep -q '$job'" || fail "no Slack message at the sink"
  kubectl logs -n "$SINK_NS" slack-sink | grep "$job" | tail -n 1 >"$OUT/friday-slack.txt"
  log "Slack message: $(cut -c1-220 "$OUT/friday-slack.txt")"
  kubectl get events -n "$ns" --field-selector "involvedObject.kind=TrainJob,involvedObject.name=$job" \
    -o custom-columns=REASON:.reason,REPORTER:.reportingComponent,MESSAGE:.message >"$OUT/friday-events.txt"
  grep -Eq '^Suspended +trainwarden ' "$OUT/friday-events.txt" || fail "no Suspended Event from trainwarden"
  grep -Eq '^Notified|^Notification' "$OUT/friday-events.txt" || log "note: no notification Event (Events: $(awk 'NR>1{print $1}' "$OUT/friday-events.txt" | sort -u | tr '\n' ' '))"
  log "Events: $(awk 'NR>1{print $1"/"$2}' "$OUT/friday-events.txt" | tr '\n' ' ')"
}

test_resume() {
  local ns="$FRIDAY_NS" job=friday-run
  suspended "$ns" "$job" || fail "resume needs the suspended TrainJob of the friday test"
  local step
  step="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$TRAINWARDEN_CLUSTER_RUN/volumes/$ns/friday-runtime/checkpoint.json")"
  kubectl patch trainjob -n "$ns" "$job" --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
  local tr=$SECONDS
  until_ 60 pod_running "$ns" "$job" || fail "no pod Running after the resume"
  log "pod Running $((SECONDS - tr)) s after un-suspending"
  local pod
  pod="$(pod_of "$ns" "$job")"
  follow_log "$ns" "$pod" "$OUT/resume-pod.log"
  until_ 30 grep -q "train: resumed from checkpoint at step $step" "$OUT/resume-pod.log" ||
    { head -n 5 "$OUT/resume-pod.log" >&2; fail "the new pod did not resume from the checkpoint (step $step)"; }
  log "new pod: $(grep 'resumed from checkpoint' "$OUT/resume-pod.log")"
  # Judged afresh: the plateau needs a new 20 s window of reports, so it is not suspended right away.
  sleep 15
  suspended "$ns" "$job" && fail "re-suspended within 15 s of the resume"
  log "still running 15 s after the resume (spec.suspend=$(jp trainjob -n "$ns" "$job" -o jsonpath='{.spec.suspend}'))"
  # The reports continue from the checkpointed step.
  until_ 30 bash -c "kubectl get trainjob -n $ns $job -o jsonpath='{.status.trainerStatus.metrics[?(@.name==\"step\")].value}' | awk '\$1 > $step {ok=1} END {exit !ok}'" ||
    fail "status.trainerStatus step did not continue past $step"
  log "trainerStatus step now $(jp trainjob -n "$ns" "$job" -o jsonpath='{.status.trainerStatus.metrics[?(@.name=="step")].value}') (> $step)"
  kubectl patch trainjob -n "$ns" "$job" --type=merge -p '{"spec":{"suspend":true}}' >/dev/null
}

# stall_policy NS NAME MODE SELECTOR_LABEL
stall_policy() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: $2, namespace: $1}
spec:
  selector: {matchLabels: {$4: "true"}}
  mode: $3
  samplingInterval: 5s
  assumeGpus: 1
  rules:
  - name: stalled
    when: 'stalled("20s")'
    actions:
    - suspend: {message: "no progress report for 20 s"}
EOF
}

test_stall() {
  local ns=tw-stall job=hang
  fresh_ns "$ns"
  stall_policy "$ns" stall Enforce trainwarden.dev/stall
  policy_ready "$ns" stall
  runtime "$ns" hang-runtime '[{name: MODE, value: hang}, {name: HANG_AT_STEP, value: "12"}, {name: STEP_SECONDS, value: "0.5"}, {name: TOTAL_STEPS, value: "4000"}]'
  trainjob "$ns" "$job" hang-runtime '{trainwarden.dev/stall: "true"}'
  until_ 90 pod_running "$ns" "$job" || fail "no training pod Running"
  follow_log "$ns" "$(pod_of "$ns" "$job")" "$OUT/stall-pod.log"
  until_ 30 grep -q 'hanging at step' "$OUT/stall-pod.log" || fail "the loop did not hang"
  local th=$SECONDS
  log "the loop hangs (keeps running, no more reports)"
  until_ 90 suspended "$ns" "$job" || fail "not suspended within 90 s of the hang"
  log "suspended $((SECONDS - th)) s after the hang began (deadline 20 s after the last report)"
  until_ 60 no_pods "$ns" "$job" || fail "the pod was not deleted"
  assert_sigterm_checkpoint "$OUT/stall-pod.log"
}

# kueue_queues NS CQ QUOTA LOCALQUEUE...: a ResourceFlavor, a ClusterQueue with a CPU quota and LocalQueues on it.
kueue_queues() {
  local ns="$1" cq="$2" quota="$3" lq
  shift 3
  kubectl delete clusterqueue "$cq" --wait=true --timeout=60s >/dev/null 2>&1 || true
  {
    cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: e2e-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: $cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: e2e-flavor
      resources: [{name: cpu, nominalQuota: "$quota"}]
EOF
    for lq in "$@"; do
      printf -- '---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: %s, namespace: %s}\nspec: {clusterQueue: %s}\n' "$lq" "$ns" "$cq"
    done
  } | kubectl apply -f - >/dev/null
}

test_kueue() {
  local ns=tw-kueue
  fresh_ns "$ns"
  kueue_queues "$ns" e2e-cq 1 team-a team-b
  stall_policy "$ns" stall Enforce trainwarden.dev/stall
  policy_ready "$ns" stall
  runtime "$ns" hang-runtime '[{name: MODE, value: hang}, {name: HANG_AT_STEP, value: "12"}, {name: STEP_SECONDS, value: "0.5"}, {name: TOTAL_STEPS, value: "4000"}]' 1
  runtime "$ns" ok-runtime "$TRAIN_ENV" 1
  trainjob "$ns" a-hangs hang-runtime '{trainwarden.dev/stall: "true", kueue.x-k8s.io/queue-name: team-a}'
  until_ 60 pod_running "$ns" a-hangs || fail "team-a's job was not admitted and Running"
  trainjob "$ns" b-waits ok-runtime '{kueue.x-k8s.io/queue-name: team-b}'
  sleep 5
  pod_running "$ns" b-waits && fail "team-b's job runs although the quota is used"
  local wla wlb
  wla="$(jp workloads.v1beta2.kueue.x-k8s.io -n "$ns" -l "kueue.x-k8s.io/job-uid=$(jp trainjob -n "$ns" a-hangs -o jsonpath='{.metadata.uid}')" -o jsonpath='{.items[0].metadata.name}')"
  wlb="$(jp workloads.v1beta2.kueue.x-k8s.io -n "$ns" -l "kueue.x-k8s.io/job-uid=$(jp trainjob -n "$ns" b-waits -o jsonpath='{.metadata.uid}')" -o jsonpath='{.items[0].metadata.name}')"
  [[ -n "$wla" && -n "$wlb" ]] || fail "Workloads not found by label kueue.x-k8s.io/job-uid"
  log "Workloads (v1beta2, by job-uid label): $wla admitted=$(jp workloads.v1beta2.kueue.x-k8s.io -n "$ns" "$wla" -o jsonpath='{.status.conditions[?(@.type=="Admitted")].status}'), $wlb admitted=$(jp workloads.v1beta2.kueue.x-k8s.io -n "$ns" "$wlb" -o jsonpath='{.status.conditions[?(@.type=="Admitted")].status}')"
  follow_log "$ns" "$(pod_of "$ns" a-hangs)" "$OUT/kueue-a-pod.log"
  until_ 60 grep -q 'hanging at step' "$OUT/kueue-a-pod.log" || fail "team-a's loop did not hang"
  # The last report before the hang: the stall deadline is 20 s after it.
  local last deadline_epoch
  last="$(jp trainjob -n "$ns" a-hangs -o jsonpath='{.status.trainerStatus.lastUpdatedTime}')"
  deadline_epoch=$(($(date -u -d "$last" +%s) + 20))
  until_ 120 bash -c "[[ \"\$(kubectl get workloads.v1beta2.kueue.x-k8s.io -n $ns $wla -o jsonpath='{.spec.active}')\" == false ]]" ||
    fail "trainwarden did not deactivate team-a's Workload"
  log "trainwarden deactivated $wla ($(($(date +%s) - deadline_epoch)) s after the stall deadline)"
  until_ 60 pod_running "$ns" b-waits || fail "team-b's job was not admitted into the freed quota"
  local now_ms reclaim
  now_ms="$(date +%s%3N)"
  reclaim="$(python3 -c "print(round(($now_ms/1000) - $deadline_epoch, 1))")"
  log "Kueue evicted $wla ($(jp workloads.v1beta2.kueue.x-k8s.io -n "$ns" "$wla" -o jsonpath='{.status.conditions[?(@.type=="Evicted")].reason}')) and admitted $wlb: team-b's pod Running ${reclaim} s after the stall deadline"
  printf 'stall deadline -> second pod Running: %s s\n' "$reclaim" >"$OUT/kueue-reclaim.txt"
  assert_sigterm_checkpoint "$OUT/kueue-a-pod.log"
  sleep 10
  [[ "$(jp workloads.v1beta2.kueue.x-k8s.io -n "$ns" "$wla" -o jsonpath='{.spec.active}')" == false ]] || fail "Kueue undid the deactivation"
  pod_running "$ns" a-hangs && fail "team-a's job runs again"
  log "10 s later: $wla still inactive, team-a's job not running (Kueue did not undo the stop)"

  # kubectl trainwarden (issue 18): the verdict, and the way back through the Workload Kueue owns.
  local plugin="${CARGO_TARGET_DIR:-$REPO/target}/debug/kubectl-trainwarden"
  [[ -x "$plugin" ]] || fail "no $plugin (cargo build -p kubectl-trainwarden)"
  "$plugin" -n "$ns" get >"$OUT/kueue-get-stopped.txt" 2>&1 || fail "kubectl trainwarden get: $(cat "$OUT/kueue-get-stopped.txt")"
  grep -Eq '^a-hangs .* suspended by ' "$OUT/kueue-get-stopped.txt" ||
    fail "get does not show a-hangs suspended by its rule: $(cat "$OUT/kueue-get-stopped.txt")"
  "$plugin" -n "$ns" resume a-hangs >"$OUT/kueue-resume.txt" 2>&1 || fail "kubectl trainwarden resume: $(cat "$OUT/kueue-resume.txt")"
  grep -q "Kueue Workload $wla re-activated" "$OUT/kueue-resume.txt" || fail "resume said: $(cat "$OUT/kueue-resume.txt")"
  [[ "$(jp workloads.v1beta2.kueue.x-k8s.io -n "$ns" "$wla" -o jsonpath='{.spec.active}')" == true ]] ||
    fail "kubectl trainwarden resume did not re-activate $wla"
  # team-b holds the quota: Kueue keeps team-a's job suspended, waiting in its queue.
  until_ 30 bash -c "\"$plugin\" -n $ns get a-hangs | grep -q 'queued (Kueue team-a)'" ||
    fail "get does not show a-hangs queued after the resume: $("$plugin" -n "$ns" get a-hangs 2>&1)"
  log "kubectl trainwarden: a-hangs shown suspended by its rule, resumed through $wla (spec.active true), now queued behind team-b"
  kubectl delete namespace "$ns" --wait=false >/dev/null
}

workload_of() { jp workloads.v1beta2.kueue.x-k8s.io -n "$1" -l "kueue.x-k8s.io/job-uid=$(jp trainjob -n "$1" "$2" -o jsonpath='{.metadata.uid}')" -o jsonpath='{.items[0].metadata.name}'; }
workload_active() { jp workloads.v1beta2.kueue.x-k8s.io -n "$1" "$2" -o jsonpath='{.spec.active}'; }

# Queue-aware reclaim: the rule fires only while another Workload waits in the job's ClusterQueue (its cohort,
# had it one). trainwarden reads the demand from the Workloads' own conditions, as the real Kueue writes them;
# Kueue's `Pending` Event on the waiting Workload is the test's separate witness that it did wait.
test_reclaim() {
  local ns=tw-reclaim policy=reclaim-when-waited-for
  fresh_ns "$ns"
  kueue_queues "$ns" e2e-reclaim-cq 250m team-a team-b
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: $policy, namespace: $ns}
spec:
  selector: {matchLabels: {trainwarden.dev/reclaim: "true"}}
  mode: Enforce
  samplingInterval: 5s
  assumeGpus: 1
  rules:
  - name: stalled-while-others-wait
    when: 'stalled("20s") && queue_pending() >= 1.0'
    actions:
    - suspend: {message: "no progress report for 20 s while another Workload waits for its quota"}
EOF
  policy_ready "$ns" "$policy"
  until_ 30 bash -c "kubectl get progresspolicy -n $ns $policy -o jsonpath='{.status.conditions[?(@.type==\"KueueQueues\")].status}' | grep -qx True" ||
    fail "the policy's KueueQueues condition is not True: $(jp progresspolicy -n "$ns" "$policy" -o jsonpath='{.status.conditions}')"
  runtime "$ns" hang-runtime '[{name: MODE, value: hang}, {name: HANG_AT_STEP, value: "12"}, {name: STEP_SECONDS, value: "0.5"}, {name: TOTAL_STEPS, value: "4000"}]' 250m
  runtime "$ns" ok-runtime "$TRAIN_ENV" 250m
  trainjob "$ns" a-idle hang-runtime '{trainwarden.dev/reclaim: "true", kueue.x-k8s.io/queue-name: team-a}'
  until_ 90 pod_running "$ns" a-idle || fail "team-a's job was not admitted and Running"
  local wla
  wla="$(workload_of "$ns" a-idle)" || true
  [[ -n "$wla" ]] || fail "team-a's Workload not found by label kueue.x-k8s.io/job-uid"
  follow_log "$ns" "$(pod_of "$ns" a-idle)" "$OUT/reclaim-a-pod.log"
  until_ 60 grep -q 'hanging at step' "$OUT/reclaim-a-pod.log" || fail "team-a's loop did not hang"
  local last deadline_epoch
  last="$(jp trainjob -n "$ns" a-idle -o jsonpath='{.status.trainerStatus.lastUpdatedTime}')" || true
  local last_epoch
  last_epoch="$(date -u -d "$last" +%s 2>/dev/null)" && [[ "$last" == *T* ]] ||
    fail "no usable status.trainerStatus.lastUpdatedTime: '$last'"
  deadline_epoch=$((last_epoch + 20))
  # Nobody waits: stalled past its deadline (and three evaluation intervals more), the job is left alone.
  while (($(date +%s) < deadline_epoch + 15)); do sleep 1; done
  (($(date +%s) <= deadline_epoch + 25)) || fail "the 'left alone' check came late: $(($(date +%s) - deadline_epoch)) s past the deadline"
  [[ "$(workload_active "$ns" "$wla")" == true ]] || fail "trainwarden stopped team-a's job although nobody waited"
  pod_running "$ns" a-idle || fail "team-a's pod stopped although nobody waited"
  suspended "$ns" a-idle && fail "team-a's TrainJob was suspended although nobody waited"
  log "stalled $(($(date +%s) - deadline_epoch)) s past its deadline with an empty queue: left alone ($wla active, pod Running)"

  # A second team queues behind it: the same stall now costs someone else's run.
  trainjob "$ns" b-waits ok-runtime '{kueue.x-k8s.io/queue-name: team-b}'
  local tq=$SECONDS tq_ms wlb
  tq_ms="$(date +%s%3N)"
  until_ 30 bash -c "kubectl get workloads.v1beta2.kueue.x-k8s.io -n $ns -l kueue.x-k8s.io/job-uid=\$(kubectl get trainjob -n $ns b-waits -o jsonpath='{.metadata.uid}') -o name | grep -q ." ||
    fail "Kueue made no Workload for team-b's TrainJob"
  wlb="$(workload_of "$ns" b-waits)" || true
  [[ -n "$wlb" ]] || fail "team-b's Workload not found by label kueue.x-k8s.io/job-uid"
  log "Kueue: Workload $wlb for team-b ($((SECONDS - tq)) s after its TrainJob was created)"
  until_ 60 bash -c "[[ \"\$(kubectl get workloads.v1beta2.kueue.x-k8s.io -n $ns $wla -o jsonpath='{.spec.active}')\" == false ]]" ||
    fail "trainwarden did not deactivate team-a's Workload once team-b waited"
  local deact=$((SECONDS - tq))
  log "trainwarden deactivated $wla $deact s after team-b's TrainJob was created"
  until_ 90 pod_running "$ns" b-waits || fail "team-b's job was not admitted into the freed quota"
  local reclaim
  reclaim="$(python3 -c "print(round(($(date +%s%3N) - $tq_ms) / 1000, 1))")"
  log "Kueue admitted $wlb: team-b's pod Running $reclaim s after its TrainJob was created"
  printf 'second job queued -> first Workload deactivated: %s s; -> second pod Running: %s s\n' "$deact" "$reclaim" >"$OUT/reclaim-times.txt"
  assert_sigterm_checkpoint "$OUT/reclaim-a-pod.log"
  # Kueue's own word that team-b waited: its scheduler found no room (QuotaReserved False, reason Pending) and
  # said so in a Pending Event on the Workload, before the deactivation freed the quota.
  kubectl get events -n "$ns" --field-selector "involvedObject.kind=Workload,involvedObject.name=$wlb,reason=Pending" \
    -o custom-columns=REPORTER:.reportingComponent,MESSAGE:.message --no-headers >"$OUT/reclaim-b-pending.txt" 2>&1 || true
  grep -q . "$OUT/reclaim-b-pending.txt" || fail "no Pending Event from Kueue on $wlb: team-b never waited"
  log "Kueue on $wlb: $(head -n 1 "$OUT/reclaim-b-pending.txt" | cut -c1-160)"

  # Once: no second action for the same firing. (Kueue suspends team-a's job and team-b holds the quota, so
  # the rule soon stops holding; the policy's action counts would show a repeat, done or unchanged.)
  sleep 15
  [[ "$(workload_active "$ns" "$wla")" == false ]] || fail "Kueue undid the deactivation"
  kubectl get events -n "$ns" --field-selector "involvedObject.kind=TrainJob,involvedObject.name=a-idle" \
    -o custom-columns=REASON:.reason,REPORTER:.reportingComponent,COUNT:.series.count,MESSAGE:.message >"$OUT/reclaim-events.txt"
  local n
  n="$(awk '$2 == "trainwarden" && $1 == "WorkloadDeactivated" {c += ($3 == "<none>" ? 1 : $3)} END {print c + 0}' "$OUT/reclaim-events.txt")"
  [[ "$n" == 1 ]] || fail "WorkloadDeactivated Events for a-idle: $n, not 1 ($(cat "$OUT/reclaim-events.txt"))"
  grep -q 'another Workload waits' "$OUT/reclaim-events.txt" || fail "the Event does not give the rule's reason: $(cat "$OUT/reclaim-events.txt")"
  local st
  st="$(jp progresspolicy -n "$ns" "$policy" -o jsonpath='{.status}')"
  printf '%s\n' "$st" >"$OUT/reclaim-policy-status.json"
  python3 -c 'import json,sys; s=json.loads(sys.argv[1]); c=s.get("actionCounts",{}); assert sum(c.values()) == 1, c' "$st" ||
    fail "the policy status does not count exactly one action: $st"
  log "15 s later: one WorkloadDeactivated Event, one action in the policy status ($(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("actionCounts"))' "$st")), $wla inactive"
  kubectl delete namespace "$ns" --wait=false >/dev/null
  kubectl delete clusterqueue e2e-reclaim-cq --wait=false >/dev/null 2>&1 || true
}

nan_policy() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: non-finite, namespace: $1}
spec:
  selector: {matchLabels: {trainwarden.dev/nan: "true"}}
  mode: $2
  samplingInterval: 5s
  rules:
  - name: nan-loss
    uses: non_finite
    with: {metric: loss}
    actions:
    - suspend: {message: "loss is NaN"}
EOF
}

test_nan() {
  local ns=tw-nan job=nan
  fresh_ns "$ns"
  nan_policy "$ns" Enforce
  policy_ready "$ns" non-finite
  runtime "$ns" nan-runtime '[{name: MODE, value: nan}, {name: NAN_AT_STEP, value: "3"}, {name: STEP_SECONDS, value: "0.5"}]'
  trainjob "$ns" "$job" nan-runtime '{trainwarden.dev/nan: "true"}'
  until_ 90 pod_running "$ns" "$job" || fail "no training pod Running"
  follow_log "$ns" "$(pod_of "$ns" "$job")" "$OUT/nan-pod.log"
  until_ 60 bash -c "kubectl get trainjob -n $ns $job -o jsonpath='{.status.trainerStatus.metrics}' | grep -qi nan" ||
    fail "no NaN loss in status.trainerStatus"
  local tn=$SECONDS
  until_ 60 suspended "$ns" "$job" || fail "not suspended after a NaN loss"
  log "suspended $((SECONDS - tn)) s after the NaN reached status.trainerStatus"
  until_ 60 no_pods "$ns" "$job" || fail "the pod was not deleted"
  assert_sigterm_checkpoint "$OUT/nan-pod.log"
}

test_audit() {
  local ns=tw-audit job=nan-audit
  fresh_ns "$ns"
  nan_policy "$ns" Audit
  policy_ready "$ns" non-finite
  runtime "$ns" nan-runtime '[{name: MODE, value: nan}, {name: NAN_AT_STEP, value: "3"}, {name: STEP_SECONDS, value: "0.5"}]'
  trainjob "$ns" "$job" nan-runtime '{trainwarden.dev/nan: "true"}'
  until_ 90 pod_running "$ns" "$job" || fail "no training pod Running"
  local pod
  pod="$(pod_of "$ns" "$job")"
  until_ 60 bash -c "kubectl get events -n $ns --field-selector involvedObject.kind=TrainJob,involvedObject.name=$job -o jsonpath='{.items[*].reportingComponent}' | grep -q trainwarden" ||
    fail "no Event from trainwarden in Audit mode"
  sleep 10
  suspended "$ns" "$job" && fail "Audit mode suspended the TrainJob"
  [[ "$(pod_of "$ns" "$job")" == "$pod" ]] && pod_running "$ns" "$job" || fail "the pod did not keep running in Audit mode"
  kubectl get events -n "$ns" --field-selector "involvedObject.kind=TrainJob,involvedObject.name=$job" \
    -o custom-columns=REASON:.reason,REPORTER:.reportingComponent,MESSAGE:.message >"$OUT/audit-events.txt"
  log "Events: $(awk 'NR>1{print $1}' "$OUT/audit-events.txt" | sort -u | tr '\n' ' '); $(grep -m1 -i 'would\|audit' "$OUT/audit-events.txt" | cut -c1-200)"
  grep -qi 'audit\|would' "$OUT/audit-events.txt" || fail "the Events do not say what would have happened"
  local st
  st="$(jp progresspolicy -n "$ns" non-finite -o jsonpath='{.status}')"
  printf '%s\n' "$st" >"$OUT/audit-policy-status.json"
  grep -qi 'audit\|would' <<<"$st" || fail "the policy status does not say what would have happened: $st"
  log "pod $pod still Running; policy status: $(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print({k: s[k] for k in s if k in ("actionCounts","lastAction")})' "$st")"
  kubectl delete namespace "$ns" --wait=false >/dev/null
}

test_rbac() {
  local other=tw-rbac-other
  fresh_ns "$other"
  kubectl -n "$other" create secret generic private --from-literal=k=v >/dev/null
  local out
  # As the chart's ServiceAccount (impersonated: the API server evaluates its RBAC exactly as for its token).
  if out="$(kubectl --as="$SA" -n "$other" get secret private -o name 2>&1)"; then fail "the ServiceAccount read $other/private"; fi
  grep -qi forbidden <<<"$out" || fail "unexpected answer: $out"
  log "read of Secret $other/private: $(cut -c1-120 <<<"$out")"
  if out="$(kubectl --as="$SA" -n "$FRIDAY_NS" create secret generic x --from-literal=k=v 2>&1)"; then fail "the ServiceAccount created a Secret"; fi
  grep -qi forbidden <<<"$out" || fail "unexpected answer: $out"
  log "create Secret in $FRIDAY_NS (a secretNamespace: get only): forbidden"
  if out="$(kubectl --as="$SA" -n "$other" delete trainjob anything 2>&1)"; then fail "the ServiceAccount may delete TrainJobs"; fi
  grep -qi forbidden <<<"$out" || fail "unexpected answer: $out"
  log "delete TrainJob: forbidden; can-i: $(for v in 'get secrets -n kube-system' 'patch trainjobs.trainer.kubeflow.org -n default' 'patch workloads.kueue.x-k8s.io -n default' 'create pods -n default' 'patch jobsets.jobset.x-k8s.io -n default'; do printf '%s=%s; ' "$v" "$(kubectl auth can-i --as="$SA" $v 2>/dev/null)"; done)"
  [[ "$(kubectl auth can-i --as="$SA" create pods -n default 2>/dev/null)" == no ]] || fail "the ServiceAccount may create pods"
  # The token the pod really uses is the chart's ServiceAccount's, not an admin's.
  local user
  user="$(kubectl -n trainwarden-system exec deploy/trainwarden -- cat /var/run/secrets/kubernetes.io/serviceaccount/token 2>/dev/null |
    python3 -c 'import base64,json,sys; p=sys.stdin.read().split(".")[1]; print(json.loads(base64.urlsafe_b64decode(p+"==="))["sub"])' 2>/dev/null || true)"
  # The tier's runtime image (Debian) has `cat`; an unreadable token is a failure, not a pass.
  [[ "$user" == "$SA" ]] || fail "the controller pod's token subject is '${user:-unreadable}', not $SA"
  log "the controller pod's token subject: $user"
  kubectl delete namespace "$other" --wait=false >/dev/null
}

# pods_gone NS POD...: none of the pods exists any more.
pods_gone() {
  local ns="$1" p
  shift
  for p in "$@"; do kubectl get pod -n "$ns" "$p" >/dev/null 2>&1 && return 1; done
  return 0
}

# Seconds since the epoch of an RFC 3339 time (fractions kept), for comparing report and checkpoint times.
epoch() { python3 -c 'import datetime,sys; print(datetime.datetime.fromisoformat(sys.argv[1].replace("Z","+00:00")).timestamp())' "$1"; }

test_rollout() {
  install_sink
  local ns=tw-rollout sys=trainwarden-system
  fresh_ns "$ns"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: rollout, namespace: $ns}
spec:
  selector: {matchLabels: {trainwarden.dev/rollout: "true"}}
  mode: Enforce
  samplingInterval: 5s
  assumeGpus: 1
  receivers:
  - name: sink
    groupWait: 1s
    webhook: {url: "http://slack-sink.$SINK_NS.svc.cluster.local/rollout"}
  rules:
  - name: stalled
    when: 'stalled("15s")'
    actions:
    - notify: {to: sink}
    - suspend: {message: "no progress report for 15 s"}
EOF
  policy_ready "$ns" rollout
  runtime "$ns" steady-runtime "$TRAIN_ENV"
  runtime "$ns" hang-runtime '[{name: MODE, value: hang}, {name: HANG_AT_STEP, value: "24"}, {name: STEP_SECONDS, value: "0.5"}, {name: TOTAL_STEPS, value: "4000"}]'
  trainjob "$ns" steady steady-runtime '{trainwarden.dev/rollout: "true"}'
  trainjob "$ns" hang hang-runtime '{trainwarden.dev/rollout: "true"}'
  until_ 90 pod_running "$ns" steady || fail "no steady training pod Running"
  until_ 90 pod_running "$ns" hang || fail "no hanging training pod Running"
  follow_log "$ns" "$(pod_of "$ns" hang)" "$OUT/rollout-hang-pod.log"
  until_ 60 grep -q 'hanging at step' "$OUT/rollout-hang-pod.log" || fail "the loop did not hang"
  # The old controller pods: their logs to the end, and every container exit the API server shows.
  local old p
  old="$(jp pods -n "$sys" -l app.kubernetes.io/name=trainwarden -o jsonpath='{.items[*].metadata.name}')"
  [[ "$(wc -w <<<"$old")" -eq 2 ]] || fail "expected two controller pods, found: $old"
  for p in $old; do kubectl logs -n "$sys" -f "$p" >"$OUT/rollout-old-$p.log" 2>&1 & done
  kubectl get pods -n "$sys" -l app.kubernetes.io/name=trainwarden -w --output-watch-events \
    -o jsonpath='{.object.metadata.name} exit={.object.status.containerStatuses[0].state.terminated.exitCode} last={.object.status.containerStatuses[0].lastState.terminated.exitCode}{"\n"}' \
    >"$OUT/rollout-pods.txt" 2>&1 &
  local watcher=$!
  local before_steady before_hang
  before_steady="$(jp trainjob -n "$ns" steady -o jsonpath='{.status.trainerStatus.lastUpdatedTime}')"
  before_hang="$(jp trainjob -n "$ns" hang -o jsonpath='{.status.trainerStatus.lastUpdatedTime}')"
  [[ -n "$before_steady" && -n "$before_hang" ]] || fail "a job has not reported before the rollout"
  # A rollout takes a few seconds (measured: 4.7 s): start it 3 s before the stall's deadline, so the rule fires
  # while the old pods stop and the new ones start.
  local r0 r1 wait_s
  wait_s="$(python3 -c "import time; print(max(0.0, $(epoch "$before_hang") + 12 - time.time()))")"
  log "the hang job's last report $before_hang (the stall fires 15 s after it); helm upgrade (a new pod template) in ${wait_s%.*} s"
  sleep "$wait_s"
  r0="$(date -u +%s.%N)"
  helm upgrade trainwarden "$REPO/charts/trainwarden" -n "$sys" --reuse-values \
    --set-string "podAnnotations.trainwarden-e2e/rollout=$r0" --wait --timeout 180s >"$OUT/rollout-helm.txt" 2>&1 ||
    { cat "$OUT/rollout-helm.txt" >&2; fail "helm upgrade"; }
  # shellcheck disable=SC2086  # one pod name per word
  until_ 60 pods_gone "$sys" $old || fail "the old controller pods are still there"
  r1="$(date -u +%s.%N)"
  sleep 1
  kill "$watcher" 2>/dev/null || true
  log "rolled in $(python3 -c "print(round($r1 - $r0, 1))") s: $(jp pods -n "$sys" -l app.kubernetes.io/name=trainwarden -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}')"
  # 1. No controller pod exited non-zero; each old one logged its clean stop.
  if grep -Eq 'exit=[1-9]|last=[1-9]' "$OUT/rollout-pods.txt"; then
    fail "a controller container exited non-zero: $(grep -E 'exit=[1-9]|last=[1-9]' "$OUT/rollout-pods.txt" | head -n 3)"
  fi
  for p in $old; do
    grep -Eq "$p exit=0" "$OUT/rollout-pods.txt" || fail "no exit code 0 seen for $p: $(grep "$p" "$OUT/rollout-pods.txt" | tail -n 2)"
    grep -q 'controller stopped cleanly' "$OUT/rollout-old-$p.log" || fail "$p did not log a clean stop: $(tail -n 5 "$OUT/rollout-old-$p.log")"
    if grep -q ' ERROR ' "$OUT/rollout-old-$p.log"; then fail "$p logged an error: $(grep ' ERROR ' "$OUT/rollout-old-$p.log" | head -n 2)"; fi
    log "$p: exit 0, $(grep -c 'shutdown step' "$OUT/rollout-old-$p.log") shutdown steps logged, $(grep -o 'controller stopped cleanly.*' "$OUT/rollout-old-$p.log" | tr -s ' ')"
  done
  # 2. The stall fired during the rollout and was acted on once.
  until_ 90 suspended "$ns" hang || fail "the hanging job was not suspended"
  local at
  at="$(jp trainjob -n "$ns" hang -o jsonpath='{.metadata.annotations.trainwarden\.dev/last-action}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["at"])')"
  log "suspended at $at; the rollout ran from $(date -u -d "@${r0%.*}" +%T) to $(date -u -d "@${r1%.*}" +%T)"
  python3 -c "import sys; sys.exit(0 if $r0 - 1 <= $(epoch "$at") <= $r1 + 1 else 1)" ||
    fail "the rule did not fire during the rollout (suspended at $at)"
  # 3. The notification reached the sink once (and nothing more comes).
  local sink_lines='^SLACK /rollout .*"name":"hang"'
  until_ 60 bash -c "kubectl logs -n $SINK_NS slack-sink | grep -Eq '$sink_lines'" || fail "no notification at the sink"
  sleep 10
  local sent
  sent="$(kubectl logs -n "$SINK_NS" slack-sink | grep -Ec "$sink_lines" || true)"
  [[ "$sent" -eq 1 ]] || fail "the notification reached the sink $sent times"
  kubectl get events -n "$ns" --field-selector "involvedObject.kind=TrainJob,involvedObject.name=hang" \
    -o custom-columns=REASON:.reason,REPORTER:.reportingComponent,MESSAGE:.message >"$OUT/rollout-events.txt"
  local suspends
  suspends="$(grep -Ec '^Suspended +trainwarden ' "$OUT/rollout-events.txt" || true)"
  [[ "$suspends" -eq 1 ]] || fail "$suspends Suspended Events for one suspension"
  log "one suspension, one Suspended Event, one message at the sink ($(kubectl logs -n "$SINK_NS" slack-sink | grep -E "$sink_lines" | grep -o '"intentId":"[^"]*"' | head -n 1))"
  # 4. No checkpoint older than the job's last report before the rollout.
  local job before o
  for job in steady hang; do
    before="$before_steady"
    [[ "$job" == hang ]] && before="$before_hang"
    o="$(jp trainjob -n "$ns" "$job" -o jsonpath='{.metadata.annotations.trainwarden\.dev/history}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["o"])' 2>/dev/null || true)"
    [[ -n "$o" ]] || fail "no history checkpoint on $job"
    python3 -c "import sys; sys.exit(0 if $(epoch "$o") >= $(epoch "$before") else 1)" ||
      fail "$job's checkpoint (newest sample $o) is older than its last report before the rollout ($before)"
    log "$job: the checkpoint's newest sample $o >= the last report before the rollout $before"
  done
  kubectl delete namespace "$ns" --wait=false >/dev/null
}

test_checkpoint() {
  local ns=tw-checkpoint
  fresh_ns "$ns"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: save, namespace: $ns}
spec:
  selector: {matchLabels: {trainwarden.dev/e2e: checkpoint}}
  mode: Enforce
  samplingInterval: 5s
  rules:
  - name: save-at-30
    when: 'step() >= 30.0'
    actions: [{checkpoint: {timeout: 3m}}]
---
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: stop-safely, namespace: $ns}
spec:
  selector: {matchLabels: {trainwarden.dev/e2e: checkpoint-first}}
  mode: Enforce
  samplingInterval: 5s
  rules:
  - name: stop-at-30
    when: 'step() >= 30.0'
    actions: [{suspend: {checkpointFirst: {timeout: 3m}, message: "stopped once its checkpoint was safe"}}]
EOF
  policy_ready "$ns" save
  policy_ready "$ns" stop-safely
  local env='[{name: ON_REQUEST, value: "1"}, {name: SAVE_SECONDS, value: "12"}, {name: STEP_SECONDS, value: "0.5"}, {name: TOTAL_STEPS, value: "4000"}]'
  ckpt_runtime "$ns" keep-runtime "$env" 5
  ckpt_runtime "$ns" stop-runtime "$env" 5

  # 1. `checkpoint`: the pod saves on request and keeps training.
  trainjob "$ns" keep keep-runtime '{trainwarden.dev/e2e: checkpoint}'
  until_ 90 pod_running "$ns" keep || fail "no training pod Running"
  local pod
  pod="$(pod_of "$ns" keep)"
  follow_log "$ns" "$pod" "$OUT/checkpoint-keep-pod.log"
  until_ 120 bash -c "kubectl get trainjob -n $ns keep -o jsonpath='{.metadata.annotations.trainwarden\\.dev/checkpoint}' | grep -q acknowledged" ||
    fail "no acknowledged checkpoint request: record $(checkpoint_record "$ns" keep); pod log: $(tail -n 5 "$OUT/checkpoint-keep-pod.log")"
  local record
  record="$(checkpoint_record "$ns" keep)"
  printf '%s\n' "$record" >"$OUT/checkpoint-keep-record.json"
  local id step latency
  read -r id step latency < <(python3 -c '
import json, sys
from datetime import datetime
r = json.loads(sys.argv[1]); q = r["request"]; o = r["outcome"]
t = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
print(q["id"], o["step"], round(t(o["at"]) - t(q["requestedAt"]), 3))' "$record")
  until_ 10 grep -q "checkpoint written: step $step to /checkpoint/checkpoint.json (request $id)" "$OUT/checkpoint-keep-pod.log" ||
    fail "the pod log does not show the save of step $step for request $id"
  local seen
  seen="$(python3 -c '
import json, re, sys
from datetime import datetime
r = json.loads(sys.argv[1]); q = r["request"]
m = re.search(r"checkpoint request %d seen at step \d+ at ([0-9.]+)" % q["id"], open(sys.argv[2]).read())
req = datetime.fromisoformat(q["requestedAt"].replace("Z", "+00:00")).timestamp()
print(round(float(m.group(1)) - req, 3) if m else "?")' "$record" "$OUT/checkpoint-keep-pod.log")"
  log "MEASURED request -> acknowledgement observed by trainwarden: ${latency} s (request $id, step $step; includes the 12 s save)"
  log "MEASURED request -> the pod seeing it (patch, kubelet refresh of the downward-API file, the next step's check): ${seen} s"
  # Still training: no restart, the step keeps rising past the checkpoint, the annotation gone from the pod.
  until_ 60 bash -c "[[ \$(kubectl get trainjob -n $ns keep -o jsonpath='{.status.trainerStatus.metrics[?(@.name==\"step\")].value}') -gt $((step + 10)) ]]" ||
    fail "the step did not rise past $step after the checkpoint ($(status_step "$ns" keep))"
  [[ "$(jp pod -n "$ns" "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')" == 0 ]] || fail "the training container restarted"
  [[ "$(pod_of "$ns" keep)" == "$pod" ]] || fail "the pod was replaced"
  [[ -z "$(jp pod -n "$ns" "$pod" -o jsonpath='{.metadata.annotations.trainwarden\.dev/checkpoint-request}')" ]] ||
    fail "the answered request is still on the pod"
  if suspended "$ns" keep; then fail "a checkpoint suspended the job"; fi
  log "still training at step $(status_step "$ns" keep) (> $step), same pod, no restart; Events: $(kubectl get events -n "$ns" --field-selector involvedObject.name=keep -o jsonpath='{range .items[*]}{.reason} {end}')"
  kubectl delete trainjob -n "$ns" keep --wait=false >/dev/null

  # 2. `suspend: {checkpointFirst}`: a 12 s save and 5 s of grace; suspended only after the save is acknowledged.
  trainjob "$ns" stop stop-runtime '{trainwarden.dev/e2e: checkpoint-first}'
  until_ 90 pod_running "$ns" stop || fail "no training pod Running"
  pod="$(pod_of "$ns" stop)"
  follow_log "$ns" "$pod" "$OUT/checkpoint-stop-pod.log"
  until_ 90 grep -q 'checkpoint request [0-9]* seen at step' "$OUT/checkpoint-stop-pod.log" ||
    fail "the pod never saw the request: record $(checkpoint_record "$ns" stop)"
  local ts=$SECONDS
  # The save takes 12 s: the job must not be suspended meanwhile.
  sleep 6
  if suspended "$ns" stop; then fail "suspended during the save, before the acknowledgement"; fi
  until_ 60 suspended "$ns" stop || fail "not suspended after the acknowledgement: record $(checkpoint_record "$ns" stop)"
  log "suspended $((SECONDS - ts)) s after the pod saw the request (the save takes 12 s)"
  until_ 60 no_pods "$ns" stop || fail "the pod was not deleted"
  local saved
  saved="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$TRAINWARDEN_CLUSTER_RUN/volumes/$ns/stop-runtime/checkpoint.json")" ||
    fail "no complete checkpoint on the volume"
  grep -q "checkpoint written: step $saved to /checkpoint/checkpoint.json" "$OUT/checkpoint-stop-pod.log" || fail "the pod log does not show the save of step $saved"
  grep -q 'exiting without saving' "$OUT/checkpoint-stop-pod.log" || log "note: no SIGTERM line in the pod log"
  kubectl get events -n "$ns" --field-selector "involvedObject.kind=TrainJob,involvedObject.name=stop" \
    -o custom-columns=REASON:.reason,MESSAGE:.message >"$OUT/checkpoint-stop-events.txt"
  grep -Eq "^Suspended .*after its checkpoint at step $saved, acknowledged" "$OUT/checkpoint-stop-events.txt" ||
    fail "the Suspended Event does not name the checkpoint: $(cat "$OUT/checkpoint-stop-events.txt")"
  log "Suspended Event: $(grep -E '^Suspended' "$OUT/checkpoint-stop-events.txt" | cut -c1-220)"
  # Resumed: the new pod starts from the step the checkpoint holds.
  kubectl patch trainjob -n "$ns" stop --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
  until_ 60 pod_running "$ns" stop || fail "no pod Running after the resume"
  follow_log "$ns" "$(pod_of "$ns" stop)" "$OUT/checkpoint-resume-pod.log"
  until_ 30 grep -q "train: resumed from checkpoint at step $saved" "$OUT/checkpoint-resume-pod.log" ||
    { head -n 5 "$OUT/checkpoint-resume-pod.log" >&2; fail "the resumed pod did not continue from step $saved"; }
  log "resumed from the checkpoint at step $saved"
  kubectl delete namespace "$ns" --wait=false >/dev/null
}

tests=("$@")
((${#tests[@]})) || tests=(friday resume stall kueue reclaim nan audit rbac checkpoint rollout)
CURRENT=setup
install_trainwarden
for t in "${tests[@]}"; do
  CURRENT="$t"
  declare -F "test_$t" >/dev/null || fail "unknown test $t"
  t1=$SECONDS
  "test_$t"
  log "PASSED in $((SECONDS - t1)) s"
done
CURRENT=all
log "PASSED: ${tests[*]} in $((SECONDS - T0)) s (artifacts: $OUT)"
