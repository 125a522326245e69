{{/*
Names and labels.
*/}}
{{- define "confighistory.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "confighistory.fullname" -}}
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

{{- define "confighistory.selectorLabels" -}}
app.kubernetes.io/name: {{ include "confighistory.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels on every object. Note: app.kubernetes.io/managed-by is Helm here; the
snapshots the server creates carry app.kubernetes.io/managed-by=confighistory.
*/}}
{{- define "confighistory.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "confighistory.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: confighistory
{{- include "confighistory.commonLabels" . }}
{{- end }}

{{/*
Labels of the webhook configurations: the same from one chart version to the
next (no helm.sh/chart, no app.kubernetes.io/version). Helm 4 applies
server-side; after an admin re-created the configurations with kubectl
(kubectl-create then owns every field), a label that changed with each version
made the next `helm upgrade` fail on a conflict over it (docs/install.md
"Upgrading with Helm 4").
*/}}
{{- define "confighistory.stableLabels" -}}
{{ include "confighistory.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: confighistory
{{- include "confighistory.commonLabels" . }}
{{- end }}

{{/*
The admin's commonLabels, each on a line of its own after a newline (nothing
when there are none), for objects whose labels are not confighistory.labels:
the helm test and hook pods, which must not carry the server's selector labels.
The schema keeps the chart's own label keys out of commonLabels.
*/}}
{{- define "confighistory.commonLabels" -}}
{{- range $k, $v := .Values.commonLabels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end }}

{{- define "confighistory.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "confighistory.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "confighistory.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{- define "confighistory.leaseName" -}}
{{- default (include "confighistory.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- /* The ConfigMap the server publishes its effective configuration in (templates/effective-config.yaml). */}}
{{- define "confighistory.effectiveConfigName" -}}
{{- printf "%s-effective-config" (include "confighistory.fullname" .) }}
{{- end }}

{{- define "confighistory.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Namespaces confighistory never acts in: the system namespaces, its own, and
the admin's list. One comma-separated string, no duplicates.
*/}}
{{- define "confighistory.excludedNamespaces" -}}
{{- concat (list "kube-system" "kube-public" "kube-node-lease" .Release.Namespace) .Values.config.excludeNamespaces | uniq | join "," }}
{{- end }}

{{/*
namespaceSelector shared by all webhooks. Only the admin decides where
confighistory acts (docs/behaviour.md §3, §9a): no label a namespace owner can set on their
own namespace switches the webhooks off for it.
- by name, through the kubernetes.io/metadata.name label the API server puts on
  every namespace since 1.21 (on 1.20 the label is absent and NotIn matches, so
  this term excludes nothing there);
- on clusters older than 1.21 only, also by the confighistory.io/exclude label,
  which the chart applies to its own namespace there (no name label to select
  on). A namespace owner can set that label on such clusters: upgrade, or add a
  label only admins set to webhook.namespaceSelector. Snapshot protection never
  selects on it (confighistory.protectionNamespaceSelector).
The mode label (confighistory.io/mode) is deliberately not selected on: the
server interprets it against config.allowedModes.
webhook.namespaceSelector adds terms (ANDed with these) that limit
confighistory to some namespaces; the controller loops get the same limit
(confighistory.controllerNamespaceSelector).
Call with (dict "root" $ "protection" bool).
*/}}
{{- define "confighistory.namespaceSelector" -}}
{{- $root := .root -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- range splitList "," (include "confighistory.excludedNamespaces" $root) }}
      - {{ . | quote }}
      {{- end }}
  {{- if and (not .protection) (not (include "confighistory.hasNamespaceNameLabel" $root)) }}
  - key: confighistory.io/exclude
    operator: DoesNotExist
  {{- end }}
  {{- with $root.Values.webhook.namespaceSelector.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- if .secrets }}
  {{- with $root.Values.secrets.namespaceSelector.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- end }}
{{- $labels := $root.Values.webhook.namespaceSelector.matchLabels | default dict }}
{{- if .secrets }}{{ $labels = merge (deepCopy ($root.Values.secrets.namespaceSelector.matchLabels | default dict)) $labels }}{{ end }}
{{- with $labels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The Secret holding the cluster keys Secret snapshots are named under (made by
the server, docs/operations.md "Secrets' cluster key").
*/}}
{{- define "confighistory.keysSecretName" -}}
{{- printf "%s-keys" (include "confighistory.fullname" .) }}
{{- end }}

{{/*
webhook.namespaceSelector in the string form of a label selector
(`a=b,c in (x,y),!d`), for CONFIGHISTORY_CONTROLLER_NAMESPACE_SELECTOR: the
controller loops act in the namespaces the webhooks see, and no others. Empty
when no terms are set (all namespaces; the server excludes the same names).
*/}}
{{- define "confighistory.controllerNamespaceSelector" -}}
{{- include "confighistory.selectorString" .Values.webhook.namespaceSelector }}
{{- end }}

{{/*
A LabelSelector (matchLabels, matchExpressions) in the string form the server's
selector flags take (`a=b,c in (x,y),!d`); empty for no terms.
*/}}
{{- define "confighistory.selectorString" -}}
{{- $terms := list }}
{{- range $key, $value := .matchLabels }}
{{- $terms = append $terms (printf "%s=%s" $key $value) }}
{{- end }}
{{- range .matchExpressions }}
{{- if eq .operator "In" }}
{{- $terms = append $terms (printf "%s in (%s)" .key (join "," .values)) }}
{{- else if eq .operator "NotIn" }}
{{- $terms = append $terms (printf "%s notin (%s)" .key (join "," .values)) }}
{{- else if eq .operator "Exists" }}
{{- $terms = append $terms .key }}
{{- else }}
{{- $terms = append $terms (printf "!%s" .key) }}
{{- end }}
{{- end }}
{{- join "," $terms }}
{{- end }}

{{/*
Whether the cluster labels namespaces with kubernetes.io/metadata.name (>= 1.21).
*/}}
{{- define "confighistory.hasNamespaceNameLabel" -}}
{{- if semverCompare ">=1.21-0" .Capabilities.KubeVersion.Version }}true{{ end }}
{{- end }}

{{/*
TLS secret mounted by the server.
*/}}
{{- define "confighistory.tlsSecretName" -}}
{{- if eq .Values.tls.mode "secret" }}
{{- .Values.tls.existingSecret }}
{{- else if eq .Values.tls.mode "server" }}
{{- printf "%s-certs" (include "confighistory.fullname" .) }}
{{- else }}
{{- printf "%s-tls" (include "confighistory.fullname" .) }}
{{- end }}
{{- end }}

{{/*
DNS names of the webhook Service, for the serving certificate.
*/}}
{{- define "confighistory.serviceDNSNames" -}}
{{- $svc := include "confighistory.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson }}
{{- end }}

{{/*
Generated TLS material (tls.mode=generate), as JSON {ca, crt, key}, each
base64-encoded PEM. Reuses the existing Secret when it holds all three keys, so
the CA and certificate stay the same across upgrades. Computed once per render
and cached in .Values, because the Secret and both webhook configurations must
carry the same CA.
*/}}
{{- define "confighistory.generatedTLS" -}}
{{- if not (hasKey .Values "__confighistoryGeneratedTLS") }}
{{- $secretName := include "confighistory.tlsSecretName" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName }}
{{- $data := dict }}
{{- if $existing }}{{ $data = default dict $existing.data }}{{ end }}
{{- $tls := dict }}
{{- if and (index $data "ca.crt") (index $data "tls.crt") (index $data "tls.key") }}
{{- $tls = dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key") }}
{{- else }}
{{- $fullname := include "confighistory.fullname" . }}
{{- $days := int .Values.tls.generatedValidityDays }}
{{- $ca := genCA (printf "%s-ca" $fullname) $days }}
{{- $dnsNames := include "confighistory.serviceDNSNames" . | fromJsonArray }}
{{- $commonName := printf "%s.%s.svc" $fullname .Release.Namespace }}
{{- $cert := genSignedCert $commonName nil $dnsNames $days $ca }}
{{- $tls = dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "__confighistoryGeneratedTLS" $tls }}
{{- end }}
{{- index .Values "__confighistoryGeneratedTLS" | toJson }}
{{- end }}

{{/*
"true" when the server manages its certificates (tls.mode=server), unless the
webhooks are registered by URL with a CA bundle given (a server elsewhere,
serving its own certificate).
*/}}
{{- define "confighistory.serverManaged" -}}
{{- if and (eq .Values.tls.mode "server") (not (and .Values.webhook.url .Values.webhook.caBundle)) }}true{{ end -}}
{{- end }}

{{/*
caBundle for the webhook configurations. Empty in server mode (the server
writes it, under its own field manager, so a re-render never touches it) and in
certManager mode (the cert-manager CA injector fills it in).
*/}}
{{- define "confighistory.caBundle" -}}
{{- if .Values.webhook.url }}
{{- .Values.webhook.caBundle }}
{{- else if eq .Values.tls.mode "generate" }}
{{- (include "confighistory.generatedTLS" . | fromJson).ca }}
{{- else if eq .Values.tls.mode "secret" }}
{{- .Values.tls.caBundle }}
{{- end }}
{{- end }}

{{/*
Annotations of the webhook configurations.
*/}}
{{- define "confighistory.webhookAnnotations" -}}
{{- if and (not .Values.webhook.url) (eq .Values.tls.mode "certManager") }}
cert-manager.io/inject-ca-from: {{ printf "%s/%s" .Release.Namespace (include "confighistory.tlsSecretName" .) }}
{{- end }}
{{- end }}

{{/*
clientConfig for one webhook. Call with (dict "root" $ "path" "/mutate").
*/}}
{{- define "confighistory.clientConfig" -}}
{{- $root := .root }}
{{- $caBundle := include "confighistory.caBundle" $root }}
{{- if $root.Values.webhook.url -}}
url: {{ printf "%s%s" (trimSuffix "/" $root.Values.webhook.url) .path | quote }}
{{- else -}}
service:
  name: {{ include "confighistory.fullname" $root }}
  namespace: {{ $root.Release.Namespace }}
  path: {{ .path }}
  port: 443
{{- end }}
{{- with $caBundle }}
caBundle: {{ . }}
{{- end }}
{{- end }}

{{/*
Rules of the workload webhooks (mutating and validating): every kind of
.Values.workloadKinds and .Values.extraWorkloadKinds, one rule per API group (its kinds' versions and
resources). Main resources only (no "/*"): a scale or status write never changes
a pod template. batch/v1beta1 serves CronJobs on clusters before 1.21.
*/}}
{{- define "confighistory.workloadRules" -}}
{{- range $i, $r := include "confighistory.byGroup" (include "confighistory.allKinds" . | fromJsonArray) | fromJsonArray }}
{{- if $i }}{{ "\n" }}{{ end -}}
- apiGroups: [{{ $r.group | quote }}]
  apiVersions: [{{ include "confighistory.quoted" $r.versions }}]
  resources: [{{ include "confighistory.quoted" $r.resources }}]
  operations: ["CREATE", "UPDATE"]
  scope: Namespaced
{{- end }}
{{- end }}

{{/*
Entries of {group, resource, versions?} grouped by API group, in the order the
groups first appear, as JSON: [{group, versions, resources}], each list without
repeats.
*/}}
{{- define "confighistory.byGroup" -}}
{{- $groups := list }}
{{- range . }}{{ if not (has .group $groups) }}{{ $groups = append $groups .group }}{{ end }}{{ end }}
{{- $out := list }}
{{- range $g := $groups }}
{{- $versions := list }}
{{- $resources := list }}
{{- range $ }}{{ if eq .group $g }}
{{- range .versions }}{{ if not (has . $versions) }}{{ $versions = append $versions . }}{{ end }}{{ end }}
{{- if not (has .resource $resources) }}{{ $resources = append $resources .resource }}{{ end }}
{{- end }}{{ end }}
{{- $out = append $out (dict "group" $g "versions" $versions "resources" $resources) }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The workload kinds propagation moves (`propagates`), as JSON.
*/}}
{{- define "confighistory.movedKinds" -}}
{{- $moved := list }}
{{- range include "confighistory.allKinds" . | fromJsonArray }}{{ if .propagates }}{{ $moved = append $moved . }}{{ end }}{{ end }}
{{- toJson $moved }}
{{- end }}

{{/*
Every workload kind, built in and registered (.Values.workloadKinds, then
.Values.extraWorkloadKinds), as JSON.
*/}}
{{- define "confighistory.allKinds" -}}
{{- concat .Values.workloadKinds .Values.extraWorkloadKinds | toJson }}
{{- end }}

{{/*
A list as comma-separated quoted strings, the way the rules write them.
*/}}
{{- define "confighistory.quoted" -}}
{{- range $i, $v := . }}{{ if $i }}, {{ end }}{{ $v | quote }}{{ end }}
{{- end }}

{{/*
Cross-value checks that values.schema.json cannot express. Rendered from
every template that depends on them, so they fail early with a clear message.
*/}}
{{- define "confighistory.validate" -}}
{{- if eq (int .Values.deployment.port) (int .Values.deployment.healthPort) }}
{{- fail (printf "deployment.port and deployment.healthPort must differ (both %d)" (int .Values.deployment.port)) }}
{{- end }}
{{- if .Values.webhook.url }}
{{- if not (hasPrefix "https://" .Values.webhook.url) }}
{{- fail "webhook.url must start with https:// (the API server only calls webhooks over TLS)" }}
{{- end }}
{{- if and (not .Values.webhook.caBundle) (ne .Values.tls.mode "server") }}
{{- fail "webhook.url needs webhook.caBundle (the base64-encoded PEM CA that signed the certificate served at that URL), or tls.mode=server (the server at that URL writes it)" }}
{{- end }}
{{- else }}
{{- if not .Values.deployment.enabled }}
{{- fail "deployment.enabled=false needs webhook.url: without the in-cluster Deployment the webhooks must be registered by URL" }}
{{- end }}
{{- end }}
{{- $main := int .Values.webhook.timeoutSeconds }}
{{- $protect := int .Values.webhook.protectionTimeoutSeconds }}
{{- if and (ge $protect $main) (gt $protect 1) }}
{{- fail (printf "webhook.protectionTimeoutSeconds (%d) must be below webhook.timeoutSeconds (%d): snapshots are created from inside a workload admission, which must get their answer in time" $protect $main) }}
{{- end }}
{{- $stopping := add (int .Values.deployment.preStopSleepSeconds) (int .Values.server.shutdownDelaySeconds) }}
{{- if gt $stopping 25 }}
{{- fail (printf "deployment.preStopSleepSeconds + server.shutdownDelaySeconds (%d) must be at most 25: Kubernetes kills a stopping pod after 30 s, before it has answered the admissions in flight" $stopping) }}
{{- end }}
{{- if include "confighistory.clientAuth" . }}
{{- if not .Values.deployment.enabled }}
{{- fail "clientAuth needs deployment.enabled: for a server run outside the cluster pass --client-ca and --client-names to it" }}
{{- end }}
{{- $sources := 0 }}
{{- range (list (or .Values.clientAuth.caBundle .Values.tls.clientCA) .Values.clientAuth.existingConfigMap .Values.clientAuth.existingSecret) }}
{{- if . }}{{ $sources = add1 $sources }}{{ end }}
{{- end }}
{{- if ne $sources 1 }}
{{- fail "clientAuth.enabled needs exactly one of clientAuth.caBundle, clientAuth.existingConfigMap, clientAuth.existingSecret: the CA bundle that signs the API server's client certificate" }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled }}
{{- fail "metrics.serviceMonitor.enabled and metrics.podMonitor.enabled: choose one, or Prometheus scrapes every pod twice" }}
{{- end }}
{{- if eq .Values.tls.mode "secret" }}
{{- if and .Values.deployment.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.mode=secret needs tls.existingSecret: the name of a kubernetes.io/tls Secret in the release namespace" }}
{{- end }}
{{- if and (not .Values.webhook.url) (not .Values.tls.caBundle) }}
{{- fail "tls.mode=secret needs tls.caBundle: the base64-encoded PEM CA that signed tls.existingSecret" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Seconds the server gives one admission: one less than the main webhooks'
timeoutSeconds (half a second when that is 1), so the server's own answer
reaches the API server before the API server stops waiting.
*/}}
{{/*
The `job` label the monitors give their targets and the alerts select on.
*/}}
{{- define "confighistory.metricsJob" -}}
{{- default (include "confighistory.fullname" .) .Values.metrics.prometheusRule.job }}
{{- end }}

{{/*
One scrape endpoint of the ServiceMonitor or PodMonitor. Call with
(dict "root" $ "m" .Values.metrics.serviceMonitor "port" "metrics").
*/}}
{{- define "confighistory.scrapeEndpoint" -}}
{{- $m := .m -}}
- port: {{ .port }}
  path: /metrics
  scheme: {{ $m.scheme }}
  {{- with $m.interval }}
  interval: {{ . }}
  {{- end }}
  {{- with $m.scrapeTimeout }}
  scrapeTimeout: {{ . }}
  {{- end }}
  {{- with $m.tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  relabelings:
    # The job label the alerts select on (metrics.prometheusRule.job).
    - action: replace
      targetLabel: job
      replacement: {{ include "confighistory.metricsJob" .root | quote }}
    {{- with $m.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $m.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{- define "confighistory.admissionDeadline" -}}
{{- $t := int .Values.webhook.timeoutSeconds -}}
{{- if gt $t 1 -}}{{ sub $t 1 }}{{- else -}}0.5{{- end -}}
{{- end -}}

{{/*
"true" when the admission port requires the API server's client certificate
(clientAuth.enabled, or the deprecated tls.clientCA), else empty.
*/}}
{{- define "confighistory.clientAuth" -}}
{{- if or .Values.clientAuth.enabled .Values.tls.clientCA }}true{{ end -}}
{{- end -}}
