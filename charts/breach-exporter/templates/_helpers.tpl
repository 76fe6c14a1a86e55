{{/* The chart's name, at most 63 characters (a DNS label). */}}
{{- define "breach-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: the release name, followed by the chart's name unless
the release name already contains it.
*/}}
{{- define "breach-exporter.fullname" -}}
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

{{- define "breach-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "breach-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "breach-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "breach-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "breach-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "breach-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "breach-exporter.image" -}}
{{- $repo := .Values.image.repository }}
{{- with .Values.image.registry }}{{ $repo = printf "%s/%s" . $repo }}{{ end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (.Values.image.tag | default (printf "v%s" .Chart.AppVersion)) }}
{{- end }}
{{- end }}

{{/* The Secret holding the token and the webhook secrets. */}}
{{- define "breach-exporter.secretName" -}}
{{- if .Values.secret.create }}
{{- include "breach-exporter.fullname" . }}
{{- else if .Values.existingSecret }}
{{- .Values.existingSecret }}
{{- else }}
{{- fail "existingSecret is empty and secret.create is false: the exporter needs a Secret with the API token" }}
{{- end }}
{{- end }}

{{/* The namespace of the release's objects. */}}
{{- define "breach-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Where the files the chart mounts live in the pod. Each is a whole volume
(never subPath), so that a changed ConfigMap or Secret reaches the running
pod: the exporter re-reads the acknowledgements when they change, the
token on a reload or a 401, the web config files on every connection.
*/}}
{{- define "breach-exporter.acknowledgementsDir" -}}/etc/breach_exporter/acknowledgements{{- end }}
{{- define "breach-exporter.addressKeyDir" -}}/etc/breach_exporter/address-key{{- end }}
{{- define "breach-exporter.webConfigDir" -}}/etc/breach_exporter/web-config{{- end }}
{{- define "breach-exporter.webhookWebConfigDir" -}}/etc/breach_exporter/webhook-web-config{{- end }}

{{/* The ConfigMap of the acknowledgements: the chart's or an existing one. */}}
{{- define "breach-exporter.acknowledgementsConfigMap" -}}
{{- .Values.acknowledgements.existingConfigMap | default (printf "%s-acknowledgements" (include "breach-exporter.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{- define "breach-exporter.configDir" -}}/etc/breach_exporter/config{{- end }}
{{- define "breach-exporter.secretDir" -}}/etc/breach_exporter/secrets{{- end }}
{{- define "breach-exporter.storageDir" -}}/var/lib/breach_exporter{{- end }}

{{/*
The config file: .Values.config with api.token_file and
webhook.secret_files pointing at the mounted Secret's files, and
acknowledgements_file and labels.address_key_file at theirs when set.
*/}}
{{- define "breach-exporter.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- $dir := include "breach-exporter.secretDir" . }}
{{- $api := get $cfg "api" | default dict }}
{{- if hasKey $api "token_file" }}
{{- fail "config.api.token_file: the chart sets it to the Secret's secretKeys.apiToken file (see existingSecret); remove it" }}
{{- end }}
{{- if hasKey $cfg "acknowledgements_file" }}
{{- fail "config.acknowledgements_file: the chart sets it when acknowledgements.enabled is true (see acknowledgements); remove it" }}
{{- end }}
{{- $labels := get $cfg "labels" | default dict }}
{{- if hasKey $labels "address_key_file" }}
{{- fail "config.labels.address_key_file: the chart sets it to the Secret addressKey.existingSecret; remove it" }}
{{- end }}
{{- if hasKey (get $cfg "webhook" | default dict) "secret_files" }}
{{- fail "config.webhook.secret_files: the chart sets it to the Secret's secretKeys.webhookSecrets files (see existingSecret); remove it" }}
{{- end }}
{{- $_ := set $api "token_file" (printf "%s/%s" $dir .Values.secretKeys.apiToken) }}
{{- if .Values.acknowledgements.enabled }}
{{- $_ := set $cfg "acknowledgements_file" (printf "%s/%s" (include "breach-exporter.acknowledgementsDir" .) .Values.acknowledgements.key) }}
{{- end }}
{{- with .Values.addressKey.existingSecret }}
{{- $_ := set $labels "address_key_file" (printf "%s/%s" (include "breach-exporter.addressKeyDir" $) $.Values.addressKey.key) }}
{{- $_ := set $cfg "labels" $labels }}
{{- end }}
{{- $_ := set $cfg "api" $api }}
{{- if .Values.webhook.enabled }}
{{- $files := list }}
{{- range .Values.secretKeys.webhookSecrets }}
{{- $files = append $files (printf "%s/%s" $dir .) }}
{{- end }}
{{- $webhook := get $cfg "webhook" | default dict }}
{{- $_ := set $webhook "secret_files" $files }}
{{- $_ := set $cfg "webhook" $webhook }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{/*
GOMEMLIMIT: goMemLimit as given, nothing for "off", else 5/6 of
resources.limits.memory in MiB (the share the other examples use: the
measured worst case stays below it, see the README's sizing) (in Mi or Gi only: other units fail here
rather than guess).
*/}}
{{- define "breach-exporter.goMemLimit" -}}
{{- $set := .Values.goMemLimit | toString }}
{{- if eq $set "off" }}
{{- else if $set }}
{{- $set }}
{{- else }}
{{- $mem := "" }}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}{{ $mem = toString . }}{{ end }}{{ end }}{{ end }}
{{- if regexMatch "^[0-9]+Mi$" $mem }}
{{- printf "%dMiB" (div (mul (trimSuffix "Mi" $mem | atoi) 5) 6) }}
{{- else if regexMatch "^[0-9]+Gi$" $mem }}
{{- printf "%dMiB" (div (mul (trimSuffix "Gi" $mem | atoi) 5120) 6) }}
{{- else if $mem }}
{{- fail (printf "resources.limits.memory %q: give it in Mi or Gi so that GOMEMLIMIT can be derived from it, or set goMemLimit" $mem) }}
{{- end }}
{{- end }}
{{- end }}
