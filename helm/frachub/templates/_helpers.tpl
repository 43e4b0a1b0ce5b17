{{/* Names and labels. */}}
{{- define "frachub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "frachub.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "frachub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "frachub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scheduler
{{- end -}}

{{- define "frachub.labels" -}}
{{ include "frachub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "frachub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "frachub.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Where notebooks and jobs run. */}}
{{- define "frachub.workloadNamespace" -}}
{{- default .Release.Namespace .Values.kubernetes.namespace -}}
{{- end -}}

{{/* The service's URL prefix behind the hub's proxy: <baseUrl>services/frachub/ */}}
{{- define "frachub.servicePrefix" -}}
{{- printf "/%s/services/frachub/" (trimAll "/" .Values.hub.baseUrl) | replace "//" "/" -}}
{{- end -}}

{{- define "frachub.priorityClassName" -}}
{{- printf "%s-%s" (include "frachub.fullname" .root) .key | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* SQLite on the volume unless a database URL is given. */}}
{{- define "frachub.externalDatabase" -}}
{{- if or .Values.database.url .Values.database.existingSecret.name -}}true{{- end -}}
{{- end -}}

{{/* The chart's own Secret is needed for a token it keeps, or a database URL. */}}
{{- define "frachub.ownSecret" -}}
{{- if or (not .Values.hubApiToken.existingSecret.name) .Values.database.url -}}true{{- end -}}
{{- end -}}

{{/* Refusals that the schema cannot express. */}}
{{- define "frachub.checks" -}}
{{- if and (gt (int .Values.replicas) 1) (not (include "frachub.externalDatabase" .)) -}}
{{- fail "replicas > 1 needs database.url or database.existingSecret (a shared PostgreSQL): SQLite on a ReadWriteOnce volume cannot be shared between replicas" -}}
{{- end -}}
{{- if and .Values.hubApiToken.value .Values.hubApiToken.existingSecret.name -}}
{{- fail "hubApiToken: set value or existingSecret, not both" -}}
{{- end -}}
{{- if and .Values.hubApiToken.existingSecret.name (not .Values.hubApiToken.existingSecret.key) -}}
{{- fail "hubApiToken.existingSecret.key: name the key that holds the token, e.g. hub.services.frachub.apiToken" -}}
{{- end -}}
{{- end -}}
