{{/* The release's resource name. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- .Values.secret.existingSecret | default (include "sluice.fullname" .) -}}
{{- end -}}

{{/*
The gateway's sluice.yaml: .Values.config with listen and shutdown_grace
set from .Values.port and .Values.shutdownGraceSeconds, the one source of
both (the Service, the probes and terminationGracePeriodSeconds use them
too), and, with several replicas, cluster.expected_nodes from
.Values.replicaCount unless the config sets it (a replica that starts
before the shared store answers then runs on 1/replicaCount of each quota,
not the whole).
*/}}
{{- define "sluice.config" -}}
{{- if hasKey .Values.config "listen" -}}
{{- fail "config.listen: set port instead (the chart listens on 0.0.0.0:<port>)" -}}
{{- end -}}
{{- if hasKey .Values.config "shutdown_grace" -}}
{{- fail "config.shutdown_grace: set shutdownGraceSeconds instead (terminationGracePeriodSeconds follows it)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (hasPrefix "sqlite:" (toString (.Values.config.store | default "sqlite:"))) -}}
{{- fail "replicaCount > 1 needs a shared store: SQLite is one file on one volume; set config.store to postgres://… (values-postgres.yaml)" -}}
{{- end -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.port)) -}}
{{- $_ = set $cfg "shutdown_grace" (printf "%ds" (int .Values.shutdownGraceSeconds)) -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- $cluster := default (dict) (get $cfg "cluster") -}}
{{- if not (hasKey $cluster "expected_nodes") -}}
{{- $_ = set $cluster "expected_nodes" (int .Values.replicaCount) -}}
{{- end -}}
{{- $_ = set $cfg "cluster" $cluster -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
