{{/*
Chart name, truncated to 63 characters (the DNS label limit of object names and label values).
*/}}
{{- define "trainwarden.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of every object: "<release>-<chart>", or the release name alone when it already contains the chart
name, truncated to 63 characters.
*/}}
{{- define "trainwarden.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"name-version" for the helm.sh/chart label.
*/}}
{{- define "trainwarden.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "trainwarden.labels" -}}
helm.sh/chart: {{ include "trainwarden.chart" . }}
{{ include "trainwarden.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: trainwarden
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the controller pods (Deployment, Service, PodDisruptionBudget). Immutable in a Deployment's
selector, so never add a label whose value changes between releases.
*/}}
{{- define "trainwarden.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainwarden.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the controller runs as.
*/}}
{{- define "trainwarden.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trainwarden.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container image reference.
*/}}
{{- define "trainwarden.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Fails the render on value combinations the schema cannot express.
*/}}
{{- define "trainwarden.validateValues" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 needs leaderElection.enabled: without a leader every replica would act on the same TrainJobs" }}
{{- end }}
{{- with .Values.record }}
{{- if and .enabled .persistence.enabled (not .persistence.existingClaim) (gt (int $.Values.replicas) 1) (not (has "ReadWriteMany" .persistence.accessModes)) }}
{{- fail "record.persistence with replicas > 1 needs accessModes [ReadWriteMany]: every replica records (into its own subdirectory) and mounts the claim, and pods on different nodes cannot share a ReadWriteOnce volume. Or set replicas: 1 (and leaderElection.enabled: false)." }}
{{- end }}
{{- end }}
{{- end }}

{{/* The claim the recorder writes to: an existing one, or the chart's. */}}
{{- define "trainwarden.recordClaim" -}}
{{- .Values.record.persistence.existingClaim | default (printf "%s-record" (include "trainwarden.fullname" .)) }}
{{- end }}

{{/* A byte size as the controller's flags read it: a string as is (16MiB), a number as a whole number. */}}
{{- define "trainwarden.byteSize" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ int64 . }}{{ end }}
{{- end }}
