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

{{/* The operator's user name, as the API server sees its token. */}}
{{- define "bloodraven.operatorUsername" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "bloodraven.serviceAccountName" . }}
{{- end -}}

{{/* The leader-election Lease (--leader-election-id), in the release namespace. */}}
{{- define "bloodraven.leaderElectionID" -}}
bloodraven-leader
{{- end -}}

{{- define "bloodraven.recordKeySecret" -}}
{{ include "bloodraven.fullname" . }}-lease-record-key
{{- end -}}

{{- define "bloodraven.leaseGuardName" -}}
{{ include "bloodraven.fullname" . }}-lease-guard
{{- end -}}

{{- define "bloodraven.fenceGuardName" -}}
{{ include "bloodraven.fullname" . }}-fence-guard
{{- end -}}

{{/*
A namespaceSelector on the namespaces of a list (kubernetes.io/metadata.name
In ...), sorted, each once.
*/}}
{{- define "bloodraven.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values: {{ . | uniq | sortAlpha | toJson }}
{{- end -}}

{{/*
Resources of the generated RBAC rules (files/clusterrole.yaml) that are not
namespaced: the namespaced mode grants them in its ClusterRole, everything
else in a Role per watched namespace. A chart test checks every generated
resource against the API server's discovery, so a new marker cannot slip
through unclassified.
*/}}
{{- define "bloodraven.clusterScopedResources" -}}
{{ toJson (list "tokenreviews" "subjectaccessreviews" "selfsubjectaccessreviews" "selfsubjectreviews" "selfsubjectrulesreviews" "customresourcedefinitions" "namespaces" "nodes" "persistentvolumes" "clusterroles" "clusterrolebindings" "validatingadmissionpolicies" "validatingadmissionpolicybindings" "validatingwebhookconfigurations" "mutatingwebhookconfigurations" "mutatingadmissionpolicies" "mutatingadmissionpolicybindings" "certificatesigningrequests" "flowschemas" "prioritylevelconfigurations" "priorityclasses" "storageclasses" "csidrivers" "csinodes" "volumeattachments" "runtimeclasses" "ingressclasses" "apiservices") }}
{{- end -}}

{{/*
The generated rules (files/clusterrole.yaml) of one scope, as a YAML list:
include with (dict "ctx" $ "scope" "namespaced") or "cluster". A rule that
names resources of both scopes is split; a rule without resources
(nonResourceURLs) is the cluster's.
*/}}
{{- define "bloodraven.generatedRules" -}}
{{- $role := .ctx.Files.Get "files/clusterrole.yaml" | fromYaml -}}
{{- $clusterScoped := include "bloodraven.clusterScopedResources" .ctx | fromJsonArray -}}
{{- $out := list -}}
{{- range $role.rules -}}
{{- $picked := list -}}
{{- range (.resources | default list) -}}
{{- $cluster := has (first (splitList "/" .)) $clusterScoped -}}
{{- if eq $cluster (eq $.scope "cluster") -}}
{{- $picked = append $picked . -}}
{{- end -}}
{{- end -}}
{{- if $picked -}}
{{- $out = append $out (merge (dict "resources" $picked) (omit . "resources")) -}}
{{- else if and (not .resources) (eq $.scope "cluster") -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Misconfigurations that must not render. */}}
{{- define "bloodraven.validate" -}}
{{- $a := .Values.auxiliary -}}
{{- range .Values.watchNamespaces -}}
{{- if not (and (kindIs "string" .) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) (le (len .) 63)) -}}
{{- fail (printf "watchNamespaces: %q is not a namespace name: a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit), e.g. --set 'watchNamespaces={team-a,team-b}'" (toString .)) -}}
{{- end -}}
{{- end -}}
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
{{- if and .Values.metrics.secure (not $a.escrowTLS.enabled) -}}
{{- fail "metrics.secure=true (the default) requires auxiliary.escrowTLS.enabled=true: the metrics endpoint serves HTTPS with the listener's certificate. Without the listener, set metrics.secure=false only if no one who may not see every tenant's group names can reach port 8080: the plain endpoint names them all" -}}
{{- end -}}
{{- if and .Values.certManager.enabled (not $a.escrowTLS.enabled) -}}
{{- fail "certManager.enabled=true requires auxiliary.escrowTLS.enabled=true: cert-manager writes the listener's Secret (auxiliary.escrowTLS.existingSecret)" -}}
{{- end -}}
{{- if and .Values.certManager.enabled .Values.webhooks.caBundle -}}
{{- fail "webhooks.caBundle is set and certManager.enabled=true: cert-manager's CA injector writes the bundle; leave webhooks.caBundle empty" -}}
{{- end -}}
{{- if and .Values.certManager.issuerRef.name (not .Values.certManager.enabled) -}}
{{- fail "certManager.issuerRef is set but certManager.enabled=false: enable it, or remove the issuerRef" -}}
{{- end -}}
{{- if and $a.deployAPI.enabled $a.deployAPI.networkPolicy.enabled (not $a.service.enabled) -}}
{{- fail "auxiliary.deployAPI.networkPolicy needs auxiliary.service.enabled=true: clients reach the API through the Service" -}}
{{- end -}}
{{- end -}}

{{/* Where the alerts' runbook_url points: docs/troubleshooting.md of this release. */}}
{{- define "bloodraven.runbookBaseURL" -}}
{{ .Values.monitoring.prometheusRule.runbookBaseURL | default (printf "https://github.com/shipstream/bloodraven/blob/v%s/docs/troubleshooting.md" .Chart.AppVersion) }}
{{- end -}}

{{/* The serving Certificate's name (cert-manager), also in inject-ca-from. */}}
{{- define "bloodraven.servingCertificate" -}}
{{ printf "%s-serving" (include "bloodraven.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end -}}
