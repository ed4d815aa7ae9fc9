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

{{- define "bloodraven.webhookServiceName" -}}
{{ printf "%s-webhooks" (include "bloodraven.serviceName" .) | trunc 63 | trimSuffix "-" }}
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
{{- if and $a.deployAPI.enabled $a.deployAPI.networkPolicy.enabled .Values.webhooks.enabled (not $a.deployAPI.networkPolicy.apiServerSources) -}}
{{- fail (printf "auxiliary.deployAPI.networkPolicy.apiServerSources is empty: the NetworkPolicy would block the Kubernetes API server's calls to the validating webhooks on port %v, and with failurePolicy: Fail every status write (the operator's own included) would be refused. List where the API server connects from as NetworkPolicy peers, for example --set 'auxiliary.deployAPI.networkPolicy.apiServerSources[0].ipBlock.cidr=10.0.0.10/32'. Find the addresses with: kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[*].endpoints[*].addresses[*]}' (on a managed cluster, the control plane's CIDR from your provider; some CNIs see the nodes' addresses instead). Nothing is admitted by default." $a.escrowTLS.port) -}}
{{- end -}}
{{- if and $a.deployAPI.enabled $a.deployAPI.networkPolicy.enabled (not $a.service.enabled) -}}
{{- fail "auxiliary.deployAPI.networkPolicy needs auxiliary.service.enabled=true: clients reach the API through the Service" -}}
{{- end -}}
{{- end -}}
