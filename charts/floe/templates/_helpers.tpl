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

{{- define "floe.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "floe.optimizerImage" -}}
{{- printf "%s:%s" .Values.optimizerImage.repository (default .Chart.AppVersion .Values.optimizerImage.tag) -}}
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
What the operator does in a namespace it serves, as RBAC rules. Kubernetes lets it create the
driver's Role only if it holds every permission that Role grants (see
floe.controller.objects.driver_rbac): pods, configmaps and persistentvolumeclaims in full, services
read. Secrets: get, the catalog Secret an OptimizedTable names; create and, on the one Secret
floe-registration (floe.controller.objects.REGISTRATION_SECRET) only, patch: the registration token
the driver pods mount. RBAC cannot limit create by name, but creating Secrets grants nothing that
creating pods (which may mount any Secret and run as any ServiceAccount of the namespace) does not
already; no update or delete, and no patch of any other Secret.
*/}}
{{- define "floe.namespacedRules" -}}
- apiGroups: ["floe.dev"]
  resources: ["optimizergroups", "optimizedtables"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["floe.dev"]
  resources: ["optimizergroups/status", "optimizedtables/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["pods", "configmaps", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "delete", "deletecollection", "patch", "update"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "patch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch"]
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
{{- end -}}
