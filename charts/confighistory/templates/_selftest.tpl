{{- /*
The objects of a selftest hook, shared by `helm test` (tests/pins.yaml) and the
post-install/post-upgrade check (install-check.yaml): a ServiceAccount that may
create and delete ConfigMaps and create Deployments (a dry-run create needs the
create permission too) in helmTest.namespace only, and a Pod spec running the
server image's `confighistory selftest`: it creates a ConfigMap, asks the API
server for a dry run of a Deployment mounting it, checks that the answer names
the ConfigMap's snapshot, and deletes the ConfigMap.
Arguments: dict "root" ., "name" the objects' name, "hook" the hook events,
"wait" seconds the selftest keeps trying.
*/}}
{{- define "confighistory.selftestRBAC" -}}
{{- $root := .root }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "confighistory.labels" $root | nindent 4 }}
  annotations:
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-weight: "-5"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}
  namespace: {{ $root.Values.helmTest.namespace }}
  labels:
    {{- include "confighistory.labels" $root | nindent 4 }}
  annotations:
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-weight: "-5"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["create", "delete"]
  - apiGroups: ["apps"]
    resources: ["deployments"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  namespace: {{ $root.Values.helmTest.namespace }}
  labels:
    {{- include "confighistory.labels" $root | nindent 4 }}
  annotations:
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-weight: "-5"
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}

{{- define "confighistory.selftestPodSpec" -}}
{{- $root := .root }}
serviceAccountName: {{ .name }}
restartPolicy: Never
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
containers:
  - name: selftest
    image: {{ include "confighistory.image" $root | quote }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    args: ["selftest", "--in-namespace", {{ $root.Values.helmTest.namespace | quote }}{{ if .wait }}, "--wait-seconds", {{ .wait | quote }}{{ end }}]
    resources:
      requests:
        cpu: 10m
        memory: 16Mi
      limits:
        memory: 64Mi
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
