{{/*
Names, labels and the few derived values every template needs, defined once.
*/}}

{{/* The chart name, "headroom" unless overridden: the app.kubernetes.io/name label. */}}
{{- define "headroom.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Prefix of every object name. A release called "headroom" (or one whose name contains it)
gives "headroom", so the objects carry the kustomize base's names.
*/}}
{{- define "headroom.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "headroom.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels that select pods: stable across upgrades (selectors are immutable). */}}
{{- define "headroom.selectorLabels" -}}
app.kubernetes.io/name: {{ include "headroom.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* Every object's labels: the selector labels plus helm's bookkeeping. Call with
(dict "ctx" $ "component" "scheduler"); component may be omitted. */}}
{{- define "headroom.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{ include "headroom.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end -}}

{{- define "headroom.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Service agents, Prometheus and the webhook reach the extender through. */}}
{{- define "headroom.extenderService" -}}
{{- printf "%s-extender" (include "headroom.fullname" .) -}}
{{- end -}}

{{/* With more than one replica every extender must get every report: the agents post
to each address of the headless peers Service. */}}
{{- define "headroom.ha" -}}
{{- if gt (int .Values.scheduler.replicas) 1 -}}true{{- end -}}
{{- end -}}

{{- define "headroom.webhookSecret" -}}
{{- default (printf "%s-webhook-tls" (include "headroom.fullname" .)) .Values.webhook.certificate.secretName -}}
{{- end -}}

{{- define "headroom.auditSecret" -}}
{{- default (printf "%s-audit-token" (include "headroom.fullname" .)) .Values.auditToken.secretName -}}
{{- end -}}

{{- define "headroom.postgresSecret" -}}
{{- default (printf "%s-postgres" (include "headroom.fullname" .)) .Values.ledger.postgres.existingSecret -}}
{{- end -}}

{{- define "headroom.ledgerClaim" -}}
{{- default (printf "%s-ledger" (include "headroom.fullname" .)) .Values.ledger.sqlite.existingClaim -}}
{{- end -}}

{{/*
The kube-scheduler configuration: manifests/scheduler/kube-scheduler-config.yaml (linked
into files/, one definition for both installs) with only what a release changes: the
profile name, the Lease (this namespace, this release's name; the leader-election Role
names it) and the sidecar's port.
*/}}
{{- define "headroom.schedulerConfig" -}}
{{- $cfg := .Files.Get "files/kube-scheduler-config.yaml" | fromYaml -}}
{{- $_ := set (index $cfg.profiles 0) "schedulerName" .Values.scheduler.profileName -}}
{{- $_ = set $cfg.leaderElection "resourceNamespace" .Release.Namespace -}}
{{- $_ = set $cfg.leaderElection "resourceName" (printf "%s-scheduler" (include "headroom.fullname" .)) -}}
{{- $_ = set (index $cfg.extenders 0) "urlPrefix" (printf "http://127.0.0.1:%d" (int .Values.extender.port)) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Refuse combinations that cannot work, with a message that says what to change. */}}
{{- define "headroom.validate" -}}
{{- if not (has .Values.ledger.type (list "sqlite" "postgres")) -}}
{{- fail (printf "ledger.type must be sqlite or postgres, not %q" .Values.ledger.type) -}}
{{- end -}}
{{- if and (eq .Values.ledger.type "sqlite") (gt (int .Values.scheduler.replicas) 1) -}}
{{- fail "scheduler.replicas > 1 needs ledger.type postgres: the SQLite ledger has one writer on a ReadWriteOnce volume (use -f values-postgres-ha.yaml)" -}}
{{- end -}}
{{- if lt (int .Values.scheduler.replicas) 1 -}}
{{- fail "scheduler.replicas must be at least 1" -}}
{{- end -}}
{{- if not (has .Values.webhook.certificate.source (list "generate" "secret" "certManager")) -}}
{{- fail (printf "webhook.certificate.source must be generate, secret or certManager, not %q" .Values.webhook.certificate.source) -}}
{{- end -}}
{{- end -}}
