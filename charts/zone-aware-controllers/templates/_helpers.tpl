{{/*
Prefix of the cluster-scoped names: clusterScopedPrefix, else the release name, except that the
release named after the chart gets `zone-aware`, the prefix `make deploy` uses (so the default
release renders config/default's names).
*/}}
{{- define "zac.prefix" -}}
{{- if .Values.clusterScopedPrefix -}}
{{- .Values.clusterScopedPrefix | trunc 40 | trimSuffix "-" -}}
{{- else if eq .Release.Name .Chart.Name -}}
zone-aware
{{- else -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The ValidatingWebhookConfiguration's name (zdb-controller patches it, by name). */}}
{{- define "zac.webhookConfigName" -}}
{{ include "zac.prefix" . }}-eviction-webhook
{{- end -}}

{{/*
Labels of every object: config/default's part-of, Helm's bookkeeping, commonLabels.
*/}}
{{- define "zac.labels" -}}
app.kubernetes.io/part-of: zone-aware-controllers
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The image, by digest when one is given; release images are tagged v<version>. */}}
{{- define "zac.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" .Chart.AppVersion) }}
{{- end -}}
{{- end -}}

{{/*
Pod template metadata of a binary: its name and component labels (the selector's and
config/manager's), commonLabels, podAnnotations. Call with (dict "root" $ "name" N "component" C).
*/}}
{{- define "zac.podMetadata" -}}
{{- $root := .root -}}
metadata:
  labels:
    app.kubernetes.io/name: {{ .name }}
    app.kubernetes.io/component: {{ .component }}
    {{- with $root.Values.commonLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $root.Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
What every pod shares: the pod's security context (podSecurityContext), no Service link
variables, the spread over zones (topologySpreadConstraints; a constraint without a
labelSelector gets the binary's) and the scheduling values. Call with (dict "root" $ "name" N).
*/}}
{{- define "zac.podScheduling" -}}
{{- $root := .root -}}
{{- with $root.Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
enableServiceLinks: false
{{- with $root.Values.topologySpreadConstraints }}
topologySpreadConstraints:
{{- range . }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" (dict "app.kubernetes.io/name" $.name)) }}
{{- end }}
- {{ toYaml $constraint | nindent 2 | trim }}
{{- end }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The container's security context (securityContext: read-only root, no capability). */}}
{{- define "zac.containerSecurity" -}}
{{- with .Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* POD_NAME and POD_NAMESPACE from the downward API (Lease holder identity and namespace). */}}
{{- define "zac.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- end -}}

{{/*
The ServiceAccount a binary runs as: its serviceAccount.name, else the binary's name. Call with
(dict "root" $ "name" N).
*/}}
{{- define "zac.serviceAccountName" -}}
{{- $keys := dict "zau-controller" "zauController" "zdb-controller" "zdbController" "shard-controller" "shardController" "rules-federator" "rulesFederator" -}}
{{- $values := get .root.Values (get $keys .name) | default dict -}}
{{- $account := $values.serviceAccount | default dict -}}
{{- $account.name | default .name -}}
{{- end -}}

{{/*
The API server's user of a binary's ServiceAccount, as a CEL condition of an admission policy.
The chart's own ServiceAccount is matched by name in any namespace, as config/default matches
it (kustomize may rename the namespace and prefix the name); a ServiceAccount named by
serviceAccount.name is matched exactly. Call with (dict "root" $ "name" N).
*/}}
{{- define "zac.userCondition" -}}
{{- $account := include "zac.serviceAccountName" . -}}
{{- if eq $account .name -}}
request.userInfo.username.matches('^system:serviceaccount:[^:]+:([a-z0-9.-]+-)?{{ .name }}(-[a-z0-9.-]+)?$')
{{- else -}}
request.userInfo.username == 'system:serviceaccount:{{ .root.Release.Namespace }}:{{ $account }}'
{{- end -}}
{{- end -}}

{{/*
A binary's ServiceAccount, unless serviceAccount.create is false (the user brings the one named
serviceAccount.name). Call with (dict "root" $ "name" N "values" V).
*/}}
{{- define "zac.serviceAccount" -}}
{{- $account := .values.serviceAccount | default dict -}}
{{- if ne (toString $account.create) "false" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "zac.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
  {{- with $account.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- else if not $account.name -}}
{{- fail (printf "%s serviceAccount: with create: false, name the ServiceAccount to run as" .name) -}}
{{- end -}}
{{- end -}}

{{/*
The headless `<binary>-metrics` Service of a binary. Call with
(dict "root" $ "name" N "port" P "targetPort" T).
*/}}
{{- define "zac.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}-metrics
  namespace: {{ .root.Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ .name }}
    app.kubernetes.io/component: metrics
    {{- include "zac.labels" .root | nindent 4 }}
spec:
  clusterIP: None
  selector:
    app.kubernetes.io/name: {{ .name }}
  ports:
  - name: metrics
    port: {{ .port }}
    targetPort: {{ .targetPort }}
    protocol: TCP
{{- end -}}

{{/*
The leader-election Role and RoleBinding of a controller (named `<binary>-leader-election`, or
`role` when given). Call with (dict "root" $ "name" N ["role" R] ["extraRules" YAML]).
*/}}
{{- define "zac.leaderRole" -}}
{{- $role := .role | default (printf "%s-leader-election" .name) -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $role }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [create]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  resourceNames: [{{ .name }}]
  verbs: [get, update]
{{- with .extraRules }}
{{ . }}
{{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $role }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $role }}
subjects:
- kind: ServiceAccount
  name: {{ include "zac.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
{{- end -}}

{{/*
A ClusterRoleBinding of a binary's ServiceAccount to the ClusterRole of the same name. Call with
(dict "root" $ "name" N "role" R).
*/}}
{{- define "zac.clusterRoleBinding" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .role }}
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .role }}
subjects:
- kind: ServiceAccount
  name: {{ include "zac.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
{{- end -}}

{{/*
What the API server holds a controller's token to, whatever its Role allows (`create` cannot be
limited by resourceNames): the only Secrets it creates or changes are of type kubernetes.io/tls,
its serving certificate; none deleted. Args: root, name (the ServiceAccount), what.
*/}}
{{- define "zac.tlsSecretWrites" -}}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ include "zac.prefix" .root }}-{{ .name }}-writes
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["*"]
      resources: [secrets]
      operations: [CREATE, UPDATE, DELETE]
  matchConditions:
  - name: the-{{ .name }}
    expression: >-
      {{ include "zac.userCondition" . }}
  validations:
  - expression: >-
      request.operation != 'DELETE' && has(object.type) && object.type == 'kubernetes.io/tls'
    message: >-
      the {{ .name }} may create and update only Secrets of type kubernetes.io/tls
      ({{ .what }})
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ include "zac.prefix" .root }}-{{ .name }}-writes
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
spec:
  policyName: {{ include "zac.prefix" .root }}-{{ .name }}-writes
  validationActions: [Deny]
{{- end -}}

{{/*
With watchNamespace, a controller's rules of namespaced resources are a Role of that namespace,
bound to its ServiceAccount, instead of lines of its ClusterRole: its token reads and writes
nothing namespaced anywhere else. Call with (dict "root" $ "name" N "role" R "rules" YAML).
*/}}
{{- define "zac.watchRole" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .role }}
  namespace: {{ .root.Values.watchNamespace }}
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
rules:
{{ .rules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .role }}
  namespace: {{ .root.Values.watchNamespace }}
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .role }}
subjects:
- kind: ServiceAccount
  name: {{ include "zac.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
{{- end -}}

{{/*
The PodDisruptionBudget of a controller's pods, from its `podDisruptionBudget` values: rendered
when enabled and with more than one replica (at one, a budget that keeps a pod up would block
the drain of its node for good); its minAvailable or maxUnavailable, else the chart's default
for that controller. Call with (dict "root" $ "name" N "values" V "default" (dict K 1)).
*/}}
{{- define "zac.podDisruptionBudget" -}}
{{- $pdb := .values.podDisruptionBudget | default dict -}}
{{- if and $pdb.enabled (gt (int .values.replicas) 1) -}}
{{- if and (hasKey $pdb "minAvailable") (hasKey $pdb "maxUnavailable") -}}
{{- fail (printf "%s podDisruptionBudget: set minAvailable or maxUnavailable, not both" .name) -}}
{{- end -}}
{{- $limit := .default -}}
{{- if hasKey $pdb "minAvailable" -}}
{{- $limit = dict "minAvailable" $pdb.minAvailable -}}
{{- else if hasKey $pdb "maxUnavailable" -}}
{{- $limit = dict "maxUnavailable" $pdb.maxUnavailable -}}
{{- end -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "zac.labels" .root | nindent 4 }}
spec:
  {{- toYaml $limit | nindent 2 }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
{{- end -}}
{{- end -}}
