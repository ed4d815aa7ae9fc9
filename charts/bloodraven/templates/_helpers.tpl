{{- define "bloodraven.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "bloodraven.selectorLabels" -}}
app.kubernetes.io/name: bloodraven
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bloodraven.labels" -}}
{{ include "bloodraven.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "bloodraven.serviceAccountName" -}}
{{ .Values.serviceAccount.name | default (include "bloodraven.fullname" .) }}
{{- end -}}

{{- define "bloodraven.serviceName" -}}
{{ .Values.auxiliary.service.name | default (include "bloodraven.fullname" .) }}
{{- end -}}

{{/* Misconfigurations that must not render. */}}
{{- define "bloodraven.validate" -}}
{{- $a := .Values.auxiliary -}}
{{- if and $a.deployAPI.enabled (not $a.escrowTLS.enabled) -}}
{{- fail "auxiliary.deployAPI.enabled=true requires auxiliary.escrowTLS.enabled=true: /deploy/v1 is served only on the TLS listener, never in plain HTTP" -}}
{{- end -}}
{{- if and $a.deployAPI.enabled (not .Values.leaderElection.enabled) -}}
{{- fail "auxiliary.deployAPI.enabled=true requires leaderElection.enabled=true: only the elected leader may answer /deploy/v1" -}}
{{- end -}}
{{- if and $a.escrowTLS.enabled (not $a.escrowTLS.existingSecret) -}}
{{- fail "auxiliary.escrowTLS.enabled=true requires auxiliary.escrowTLS.existingSecret: a Secret with tls.crt and tls.key in the release namespace" -}}
{{- end -}}
{{- if and .Values.webhooks.enabled (not $a.escrowTLS.enabled) -}}
{{- fail "webhooks.enabled=true requires auxiliary.escrowTLS.enabled=true: the webhooks are served on the TLS listener" -}}
{{- end -}}
{{- if and $a.deployAPI.enabled $a.deployAPI.networkPolicy.enabled (not $a.service.enabled) -}}
{{- fail "auxiliary.deployAPI.networkPolicy needs auxiliary.service.enabled=true: clients reach the API through the Service" -}}
{{- end -}}
{{- end -}}
