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
{{- define "breach-exporter.storeDir" -}}/etc/breach_exporter/store{{- end }}

{{/*
"true" when the release runs several replicas. They need the store that
shares the key's budget, the work and the alerts between them, and each
its own state folder (the exporter locks it): the values.schema.json
says so too, this is for a chart rendered without it.
*/}}
{{- define "breach-exporter.replicated" -}}
{{- $n := int .Values.replicaCount }}
{{- if lt $n 1 }}
{{- fail (printf "replicaCount: %d, at least 1" $n) }}
{{- end }}
{{- if gt $n 1 }}
{{- if not .Values.store.url }}
{{- fail (printf "replicaCount: %d replicas need store.url: without the shared store each would spend the API key's whole budget and see only the alerts the Service sends it" $n) }}
{{- end }}
{{- if .Values.persistence.enabled }}
{{- fail (printf "persistence.enabled: not with replicaCount %d: each replica needs its own state folder, so the pods use an emptyDir each (see the chart's README)" $n) }}
{{- end }}
{{- end }}
{{- gt $n 1 }}
{{- end }}

{{/*
The accounts the chart mounts files for, as {"accounts": [...]} in YAML
(read it with fromYaml): the entries of .Values.accounts, or with none the
one account "default" of the single-account shape made of the top-level
existingSecret, secretKeys, secret and addressFiles. Each entry has its
name, path (where its values are, for error messages), the Secret
(secretName, secretCreate, secret, secretKeys) mounted as secretVolume at
secretDir, and, when it has address files, addressVolume (a volume source)
mounted as addressVolumeName at addressDir with the globs under it. The
single account keeps the volume names and paths it always had.
*/}}
{{- define "breach-exporter.accounts" -}}
{{- $accounts := list }}
{{- if .Values.accounts }}
{{- if .Values.secret.create }}
{{- fail "secret.create: not with accounts: each account has its own existingSecret or secret (accounts[].secret)" }}
{{- end }}
{{- $seen := dict }}
{{- range $i, $a := .Values.accounts }}
{{- if hasKey $seen $a.name }}
{{- fail (printf "accounts[%d].name: %q duplicates accounts[%s].name" $i $a.name (get $seen $a.name)) }}
{{- end }}
{{- $_ := set $seen $a.name (toString $i) }}
{{- $path := printf "accounts[%d]." $i }}
{{- $secret := $a.secret | default dict }}
{{- $secretName := $a.existingSecret | default "" }}
{{- if $secret.create }}
{{- $secretName = printf "%s-%s" (include "breach-exporter.fullname" $) $a.name }}
{{- if gt (len $secretName) 63 }}
{{- fail (printf "%ssecret.create: the Secret's name %s is longer than 63 characters: use existingSecret or a shorter fullnameOverride" $path $secretName) }}
{{- end }}
{{- else if not $secretName }}
{{- fail (printf "%sexistingSecret is empty and %ssecret.create is false: the account needs a Secret with its API token" $path $path) }}
{{- end }}
{{- $dir := printf "/etc/breach_exporter/accounts/%s" $a.name }}
{{- $accounts = append $accounts (dict "name" $a.name "path" $path "account" $a
      "secretName" $secretName "secretCreate" ($secret.create | default false) "secret" $secret
      "secretKeys" ($a.secretKeys | default $.Values.secretKeys)
      "secretVolume" (printf "account-%s-secrets" $a.name) "secretDir" (printf "%s/secrets" $dir)
      "addressFiles" ($a.addressFiles | default dict) "addressVolumeName" (printf "account-%s-addresses" $a.name) "defaultAddressDir" (printf "%s/addresses" $dir)) }}
{{- end }}
{{- else }}
{{- $accounts = list (dict "name" "default" "path" ""
      "secretName" (include "breach-exporter.secretName" .) "secretCreate" .Values.secret.create "secret" .Values.secret
      "secretKeys" .Values.secretKeys
      "secretVolume" "secrets" "secretDir" (include "breach-exporter.secretDir" .)
      "addressFiles" .Values.addressFiles "addressVolumeName" "addresses" "defaultAddressDir" "/etc/breach_exporter/addresses") }}
{{- end }}
{{- range $accounts }}
{{- $files := .addressFiles }}
{{- if and $files.existingConfigMap $files.existingVolume }}
{{- fail (printf "%saddressFiles: existingConfigMap or existingVolume, not both" .path) }}
{{- end }}
{{- if $files.existingConfigMap }}
{{- $_ := set . "addressVolume" (dict "configMap" (dict "name" $files.existingConfigMap)) }}
{{- else if $files.existingVolume }}
{{- $_ := set . "addressVolume" $files.existingVolume }}
{{- end }}
{{- $_ := set . "addressDir" ($files.mountPath | default .defaultAddressDir) }}
{{- end }}
{{- toYaml (dict "accounts" $accounts) }}
{{- end }}

{{/*
An account's addresses_files: its address directory joined with each of
addressFiles.globs; none without address files.
*/}}
{{- define "breach-exporter.addressesFiles" -}}
{{- $globs := list }}
{{- if .addressVolume }}
{{- range (.addressFiles.globs | default (list "*.txt" "*.yml" "*.yaml")) }}
{{- $globs = append $globs (printf "%s/%s" $.addressDir .) }}
{{- end }}
{{- end }}
{{- toJson $globs }}
{{- end }}

{{/*
The config file: .Values.config with api.token_file and
webhook.secret_files pointing at the mounted Secret's files, and
acknowledgements_file and labels.address_key_file at theirs when set,
and the store section from .Values.store. With accounts, the chart
writes config.accounts from them instead: each with its token and
secret files, and config.api's base_url and requests_per_minute as the
default of its baseURL and requestsPerMinute.
Address files (addressFiles, accounts[].addressFiles) add their mounted
globs to the account's addresses_files.
*/}}
{{- define "breach-exporter.config" -}}
{{- $cfg := deepCopy .Values.config }}
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
{{- if hasKey $cfg "accounts" }}
{{- fail "config.accounts: the chart writes it from accounts (with each account's Secret); move the entries there" }}
{{- end }}
{{- if hasKey $cfg "store" }}
{{- fail "config.store: the chart writes it from store (with the password's Secret); move the settings there" }}
{{- end }}
{{- with .Values.store.url }}
{{- $store := dict "url" . }}
{{- if $.Values.store.existingSecret }}
{{- $_ := set $store "password_file" (printf "%s/%s" (include "breach-exporter.storeDir" $) $.Values.store.passwordKey) }}
{{- end }}
{{- with $.Values.store.keyPrefix }}
{{- $_ := set $store "key_prefix" . }}
{{- end }}
{{- $_ := set $cfg "store" $store }}
{{- end }}
{{- if .Values.acknowledgements.enabled }}
{{- $_ := set $cfg "acknowledgements_file" (printf "%s/%s" (include "breach-exporter.acknowledgementsDir" .) .Values.acknowledgements.key) }}
{{- end }}
{{- with .Values.addressKey.existingSecret }}
{{- $_ := set $labels "address_key_file" (printf "%s/%s" (include "breach-exporter.addressKeyDir" $) $.Values.addressKey.key) }}
{{- $_ := set $cfg "labels" $labels }}
{{- end }}
{{- $accounts := (include "breach-exporter.accounts" . | fromYaml).accounts }}
{{- $entries := list }}
{{- range $accounts }}
{{- $entry := dict "api" (dict "token_file" (printf "%s/%s" .secretDir .secretKeys.apiToken)) }}
{{- if $.Values.webhook.enabled }}
{{- $files := list }}
{{- $dir := .secretDir }}
{{- range .secretKeys.webhookSecrets }}
{{- $files = append $files (printf "%s/%s" $dir .) }}
{{- end }}
{{- $_ := set $entry "webhook" (dict "secret_files" $files) }}
{{- end }}
{{- $globs := include "breach-exporter.addressesFiles" . | fromJsonArray }}
{{- if .account }}
{{- $_ := set $entry "name" .name }}
{{- $_ := set $entry.api "base_url" (.account.baseURL | default $api.base_url) }}
{{- with (.account.requestsPerMinute | default $api.requests_per_minute) }}
{{- $_ := set $entry.api "requests_per_minute" . }}
{{- end }}
{{- with .account.addresses }}
{{- $_ := set $entry "addresses" . }}
{{- end }}
{{- with $globs }}
{{- $_ := set $entry "addresses_files" . }}
{{- end }}
{{- else if $globs }}
{{- $_ := set $cfg "addresses_files" (concat (get $cfg "addresses_files" | default list) $globs) }}
{{- end }}
{{- $entries = append $entries $entry }}
{{- end }}
{{- if .Values.accounts }}
{{- range list "addresses" "addresses_files" }}
{{- if get $cfg . }}
{{- fail (printf "config.%s: not with accounts: each account has its own (accounts[].%s); set config.%s to []" . (ternary "addresses" "addressFiles" (eq . "addresses")) .) }}
{{- end }}
{{- $_ := unset $cfg . }}
{{- end }}
{{- $api = omit $api "base_url" "requests_per_minute" }}
{{- $_ := set $cfg "accounts" $entries }}
{{- else }}
{{- $_ := set $api "token_file" (index $entries 0).api.token_file }}
{{- with (index $entries 0).webhook }}
{{- $webhook := get $cfg "webhook" | default dict }}
{{- $_ := set $webhook "secret_files" .secret_files }}
{{- $_ := set $cfg "webhook" $webhook }}
{{- end }}
{{- end }}
{{- if $api }}
{{- $_ := set $cfg "api" $api }}
{{- else }}
{{- $_ := unset $cfg "api" }}
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

{{/*
--web.shutdown-delay in seconds: after SIGTERM the pod reads not ready and
both listeners keep answering this long, while the endpoints controller,
kube-proxy and an ingress controller stop sending here. "auto": 15 with
several replicas (another pod takes the webhooks); 0 with one, where the
Recreate rollout starts the new pod only once this one is gone, so a delay
would only lengthen the gap.
*/}}
{{- define "breach-exporter.shutdownDelaySeconds" -}}
{{- if eq (toString .Values.shutdownDelaySeconds) "auto" }}
{{- ternary 15 0 (eq (include "breach-exporter.replicated" .) "true") }}
{{- else }}
{{- int .Values.shutdownDelaySeconds }}
{{- end }}
{{- end }}

{{/*
The pod's terminationGracePeriodSeconds, which counts from the preStop hook
on: a preStop sleep, the shutdown delay, then closing, bounded at 15 s (the
listeners' graceful shutdown takes at most 5 s; the last state snapshot,
0.6 s at 10,000 addresses, and the store's checkpoint, each store operation
bounded at 2 s, take the rest). "auto" adds 15 s of margin to that; a
number below it is refused: the kubelet's SIGKILL would cut the last
snapshot short.
*/}}
{{- define "breach-exporter.terminationGracePeriodSeconds" -}}
{{- $delay := include "breach-exporter.shutdownDelaySeconds" . | int }}
{{- $preStop := dig "preStop" "sleep" "seconds" 0 (.Values.lifecycle | default dict) | int }}
{{- $least := add $preStop $delay 15 }}
{{- $v := .Values.terminationGracePeriodSeconds }}
{{- if eq (toString $v) "auto" }}
{{- add $least 15 }}
{{- else if lt (int $v) (int $least) }}
{{- fail (printf "terminationGracePeriodSeconds: %d is below %d, the preStop sleep (%d s) plus the shutdown delay (%d s) plus 15 s to close the listeners and write the last snapshot" (int $v) (int $least) $preStop $delay) }}
{{- else }}
{{- int $v }}
{{- end }}
{{- end }}

{{/*
--webhook.max-connections-per-client: "auto" is the exporter's default of 16
per client, or with the Ingress --webhook.max-connections: every
connection then comes from the ingress controller's few addresses, and the
controller limits per real client (docs/webhook.md#exposing-it).
*/}}
{{- define "breach-exporter.webhookMaxConnectionsPerClient" -}}
{{- $v := .Values.webhook.maxConnectionsPerClient }}
{{- if eq (toString $v) "auto" }}
{{- ternary (int .Values.webhook.maxConnections) 16 .Values.ingress.enabled }}
{{- else if gt (int $v) (int .Values.webhook.maxConnections) }}
{{- fail (printf "webhook.maxConnectionsPerClient: %d is above webhook.maxConnections (%d)" (int $v) (int .Values.webhook.maxConnections)) }}
{{- else }}
{{- int $v }}
{{- end }}
{{- end }}

{{/*
"true" when Prometheus gets the cluster's series once (docs/alerts.md,
"With several replicas"): replicas with a store and
serviceMonitor.clusterScrape. The ServiceMonitor then scrapes each pod for
its own health (scope=replica), and a ScrapeConfig the Service for the
cluster's series (scope=cluster).
*/}}
{{- define "breach-exporter.oneCopy" -}}
{{- and (eq (include "breach-exporter.replicated" .) "true") .Values.serviceMonitor.clusterScrape | toString }}
{{- end }}
