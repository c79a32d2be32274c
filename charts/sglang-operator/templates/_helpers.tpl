{{- define "sglang-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sglang-operator.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sglang-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sglang-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sglang-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Rules for the namespaced objects the operator manages; used by the ClusterRole (clusterwide) or by one Role per
watched namespace. Write verbs are exactly what the operator calls (tests/chart/test_chart.py NEEDED lists why):
- sglangservers: watched by kopf; patched by kopf (progress annotations, runner.configure).
- sglangservers/status: merge-patched by kopf and clients/kube.py patch_status.
- sglangservers/finalizers: update, needed to set ownerReferences with blockOwnerDeletion on the children
  where the OwnerReferencesPermissionEnforcement admission plugin is on.
- deployments, services: server-side apply (patch; create when the child does not exist yet); watched
  (kopf, handlers.child_event) so a child deleted behind the operator's back is re-applied; deployments and
  leaderworkersets deleted: a canary's workload once it is removed, the old stable one once a canary is promoted.
- pods: watched (kopf, handlers.pod_event) into the observer's pod cache, listed once per namespace to prime it.
- secrets: get, only to read spec.apiKeySecretRef's key for SGLang's /server_info (the API key protects it).
- events (core v1): created by kopf.event and clients/kube.py post_event.
- podmonitors (monitoring.coreos.com, only with podMonitor.enabled): server-side apply of each SGLangServer's
  PodMonitor (children.py); whether the API exists is read from its CRD (get customresourcedefinitions).
*/}}
{{- define "sglang-operator.namespacedRules" -}}
- apiGroups: ["sglang-operator.io"]
  resources: ["sglangservers"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["sglang-operator.io"]
  resources: ["sglangservers/status"]
  verbs: ["get", "patch"]
- apiGroups: ["sglang-operator.io"]
  resources: ["sglangservers/finalizers"]
  verbs: ["update"]
{{- /* SGLangTuning (issue 17): watched, its status written; its finalizers subresource because its Shadow trial
Deployments name it as owner with blockOwnerDeletion (OwnerReferencesPermissionEnforcement); those Deployments are
deleted when their trial ends (deployments: delete). A trial needs no Service: the operator reads its pods by IP. */}}
- apiGroups: ["sglang-operator.io"]
  resources: ["sglangtunings"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["sglang-operator.io"]
  resources: ["sglangtunings/status"]
  verbs: ["get", "patch"]
- apiGroups: ["sglang-operator.io"]
  resources: ["sglangtunings/finalizers"]
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["list", "create", "patch", "delete"]
{{- if .Values.podMonitor.enabled }}
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "create", "patch"]
{{- end }}
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["get", "create", "patch", "delete"]
{{- end -}}
