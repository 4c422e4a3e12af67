{{/* The chart name, or nameOverride. */}}
{{- define "floe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
The base name of the release's objects: fullnameOverride, else the release name when it already
contains the chart name, else "RELEASE-floe".
*/}}
{{- define "floe.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "floe.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of cluster-scoped objects: unique per release namespace too. */}}
{{- define "floe.clusterName" -}}
{{- printf "%s-%s" (include "floe.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The operator's Deployment and Service (the task service): floe-operator for release "floe". */}}
{{- define "floe.operatorName" -}}
{{- printf "%s-operator" (include "floe.fullname" .) -}}
{{- end -}}

{{- define "floe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "floe.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "floe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Labels of every object the chart creates; `helm uninstall` leaves none of them behind. */}}
{{- define "floe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "floe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: floe
{{- end -}}

{{/*
An image reference from a values block (repository, tag, digest): by digest when one is given,
which pins the exact image; else by tag, the chart's appVersion when empty.
*/}}
{{- define "floe.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "floe.image" -}}
{{- include "floe.imageRef" (dict "image" .Values.image "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{- define "floe.optimizerImage" -}}
{{- include "floe.imageRef" (dict "image" .Values.optimizerImage "appVersion" .Chart.AppVersion) -}}
{{- end -}}

{{/* The task service's in-cluster URL, which the operator hands to the driver pods. */}}
{{- define "floe.serviceURL" -}}
{{- printf "http://%s.%s.svc:%d" (include "floe.operatorName" .) .Release.Namespace (int .Values.service.port) -}}
{{- end -}}

{{/* The Secret holding the registration token: the user's existingSecret, or the chart's own. */}}
{{- define "floe.registrationSecretName" -}}
{{- default (printf "%s-registration-token" (include "floe.fullname" .)) .Values.registrationToken.existingSecret -}}
{{- end -}}

{{- define "floe.registrationSecretKey" -}}
{{- if .Values.registrationToken.existingSecret -}}
{{- .Values.registrationToken.existingSecretKey -}}
{{- else -}}
token
{{- end -}}
{{- end -}}

{{/* The namespace of the default OptimizerGroup. */}}
{{- define "floe.defaultGroupNamespace" -}}
{{- default .Release.Namespace .Values.defaultGroup.namespace -}}
{{- end -}}

{{/*
The namespaces the operator serves, as a JSON list (read it with fromJsonArray): watchNamespaces,
or the release namespace alone when that is empty. There is no cluster-wide mode: the operator
gets Roles in these namespaces and nothing namespaced anywhere else.
*/}}
{{- define "floe.watchNamespaces" -}}
{{- toJson (default (list .Release.Namespace) .Values.watchNamespaces) -}}
{{- end -}}

{{/* The ServiceAccount the optimizer driver pods run as, in every watched namespace (floe-driver). */}}
{{- define "floe.driverServiceAccountName" -}}
{{- printf "%s-driver" (include "floe.fullname" .) -}}
{{- end -}}

{{/* The pods of the groups' Spark applications: drivers (made by the operator) and executors (by Spark). */}}
{{- define "floe.sparkPodSelector" -}}
matchExpressions:
  - key: floe.dev/group
    operator: Exists
  - key: floe.dev/role
    operator: In
    values: [driver, executor]
{{- end -}}

{{/*
What the operator does in a namespace it serves, as RBAC rules, each verb for a reason:
- floe.dev: kopf lists and watches OptimizerGroups, OptimizedTables and OptimizedTableSets and
  patches them (its finalizer and progress annotations); floe patches their status subresource,
  and creates, replaces (patch) and deletes the OptimizedTables of each OptimizedTableSet.
- pods: the driver pods (get, create, delete to replace one whose Spark settings changed); list and
  watch the groups' pods for their health (OOM kills, image pulls). No patch, update, exec, attach
  or port-forward: the operator never changes or enters a running pod.
- configmaps and services: the group's two ConfigMaps and its driver's headless Service (create, or
  patch when they exist; get, by name, reads the scale ConfigMap: no list).
- secrets: get, never list or watch, for the catalog Secret an OptimizedTable names; create, and
  patch on the one Secret floe-registration only (floe.controller.objects.REGISTRATION_SECRET): the
  registration token the driver pods mount, labelled app.kubernetes.io/managed-by=floe. RBAC cannot
  limit create by name; templates/admission-policy.yaml does (and what the pods it creates may be).
  No update or delete, and no patch of any other Secret.
- events: Events on the groups and tables.
- kopfpeerings: kopf's peering (which replica leads) lives in the object floe
  (floe.controller.config.PEERING_NAME), which the chart makes; only it may be patched.
Nothing on ServiceAccounts, Roles or RoleBindings: the chart renders the driver's
(templates/driver-rbac.yaml), so the operator neither writes RBAC nor holds what the driver's Role
grants (Kubernetes demands both of whoever creates or binds a Role).
*/}}
{{- define "floe.namespacedRules" -}}
- apiGroups: ["floe.dev"]
  resources: ["optimizergroups", "optimizedtables", "optimizedtablesets"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["floe.dev"]
  resources: ["optimizedtables"]
  verbs: ["create", "delete"]
- apiGroups: ["floe.dev"]
  resources: ["optimizergroups/status", "optimizedtables/status", "optimizedtablesets/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: ["floe-registration"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  resourceNames: ["floe"]
  verbs: ["patch"]
{{- end -}}
