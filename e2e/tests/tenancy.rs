//! Tenancy e2e: a namespace's objects are hostile to every other namespace. A user with only
//! `edit` in namespace `tenant` (a ServiceAccount bound to the `edit` ClusterRole there, acting
//! with its own token) creates a ShardedPrometheus that selects monitors and rules in every
//! namespace, under a shard-controller watching every namespace (as the chart installs it), as
//! its ServiceAccount with `E2E_AS_SERVICE_ACCOUNT=1`.
//!
//! - Every object of namespace `victim` (ServiceMonitor, PodMonitor, ScrapeConfig,
//!   PrometheusRule), whose Secret holds a password, is refused, named with the permission the
//!   shards' ServiceAccount lacks; a ServiceMonitor of namespace `sharing`, whose monitors (not
//!   Secrets) that ServiceAccount may read, is refused for its Secret. remoteWrite and alerting
//!   references name Secrets of the tenant's own namespace only.
//! - Neither password appears in anything the editor can read (Secrets, ConfigMaps, Events and
//!   the ShardedPrometheus of its namespace); the tenant's own monitor is in the configuration.
//! - Once `sharing` grants the Secret too (a Role there: its consent), its monitor and password
//!   are in the configuration within the review cache's 30 s.
//!
//! Exclusive suite: its shard-controller watches every namespace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use e2e::cluster::DeleteOnDrop;
use e2e::localstack::free_port;
use e2e::operator::monitoring_resource;
use e2e::process::ControllerProcess;
use e2e::{Cluster, TestNamespace, identity, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use zone_api::ShardedPrometheus;
use zone_api::conditions::Conditions;
use zone_api::sprom::condition;

const TIMEOUT: Duration = Duration::from_secs(120);
const MANAGER: &str = "e2e-tenancy";
const NAME: &str = "prom";
const VICTIM_PASSWORD: &str = "victim-pa55word-7d1f";
const SHARED_PASSWORD: &str = "shared-pa55word-93ac";
/// Written into a ShardedPrometheus's remoteWrite where a Secret reference belongs.
const INLINE_PASSWORD: &str = "inline-pa55word-5e2b";
const OWN_PASSWORD: &str = "own-pa55word-51b0";

/// Server-side applies `object` (apiVersion, kind, metadata.name) in `namespace` as `client`.
async fn apply(client: &Client, namespace: &str, resource: &ApiResource, object: Value) {
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource)
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {} {namespace}/{name}: {e}", resource.kind));
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Secret `creds` of `namespace` (user and `password`), with a ServiceMonitor `sm` using it;
/// in the victim's namespace a PodMonitor, a ScrapeConfig and a PrometheusRule too.
async fn monitored_namespace(client: &Client, namespace: &str, password: &str, every_kind: bool) {
    let labels = json!({"tenancy": "selected"});
    let secret = resource("", "v1", "Secret", "secrets");
    let creds = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                       "stringData": {"user": "alice", "pass": password}});
    apply(client, namespace, &secret, creds).await;
    let basic_auth = json!({"username": {"name": "creds", "key": "user"},
                            "password": {"name": "creds", "key": "pass"}});
    let mut objects = vec![(
        monitoring_resource("ServiceMonitor", "servicemonitors"),
        json!({"metadata": {"name": "sm", "labels": labels}, "spec": {
            "selector": {"matchLabels": {"app": "api"}},
            "endpoints": [{"port": "metrics", "basicAuth": basic_auth}]}}),
    )];
    if every_kind {
        objects.extend([
            (
                monitoring_resource("PodMonitor", "podmonitors"),
                json!({"metadata": {"name": "pm", "labels": labels}, "spec": {
                    "selector": {"matchLabels": {"app": "api"}},
                    "podMetricsEndpoints": [{"port": "metrics", "basicAuth": basic_auth}]}}),
            ),
            (
                resource(
                    "monitoring.coreos.com",
                    "v1alpha1",
                    "ScrapeConfig",
                    "scrapeconfigs",
                ),
                json!({"metadata": {"name": "sc", "labels": labels}, "spec": {
                    "staticConfigs": [{"targets": ["api:8080"]}], "basicAuth": basic_auth}}),
            ),
            (
                monitoring_resource("PrometheusRule", "prometheusrules"),
                json!({"metadata": {"name": "rule", "labels": labels}, "spec": {"groups": [{
                    "name": "victim", "rules": [{"alert": "Leak", "expr": "up == 0",
                    "annotations": {"password": password}}]}]}}),
            ),
        ]);
    }
    for (resource, mut object) in objects {
        object["apiVersion"] = json!(resource.api_version);
        object["kind"] = json!(resource.kind);
        apply(client, namespace, &resource, object).await;
    }
}

/// The spec the editor applies: one shard on the kwok nodes, every kind selected by label in
/// every namespace.
fn spec(extra: Value) -> Value {
    let selected = json!({"matchLabels": {"tenancy": "selected"}});
    let mut spec = json!({
        "shards": 1, "replicas": 1, "nodeSelector": {"type": "kwok"},
        "shardingStrategy": {"topology": {"values": ["zone-a"]}},
        "serviceMonitorSelector": selected, "serviceMonitorNamespaceSelector": {},
        "podMonitorSelector": selected, "podMonitorNamespaceSelector": {},
        "scrapeConfigSelector": selected, "scrapeConfigNamespaceSelector": {},
        "ruleSelector": selected, "ruleNamespaceSelector": {},
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec
}

/// What the editor may read in `namespace` ([`readable_by`]), asserted to hold neither the
/// victim's nor the sharing namespace's password.
async fn no_foreign_password_readable(editor: &Client, namespace: &str) -> String {
    let readable = readable_by(editor, namespace).await;
    for password in [VICTIM_PASSWORD, SHARED_PASSWORD] {
        assert!(
            !readable.contains(password),
            "{password} readable by the editor"
        );
    }
    readable
}

/// Everything the editor may read in its namespace, as text: Secrets (data decoded),
/// ConfigMaps, Events and the ShardedPrometheus.
async fn readable_by(editor: &Client, namespace: &str) -> String {
    let params = ListParams::default();
    let mut text = String::new();
    for secret in Api::<Secret>::namespaced(editor.clone(), namespace)
        .list(&params)
        .await
        .unwrap()
    {
        for value in secret.data.unwrap_or_default().into_values() {
            text.push_str(&String::from_utf8_lossy(&value.0));
        }
    }
    let config_maps = Api::<ConfigMap>::namespaced(editor.clone(), namespace);
    let events = Api::<Event>::namespaced(editor.clone(), namespace);
    let sproms = Api::<ShardedPrometheus>::namespaced(editor.clone(), namespace);
    text.push_str(&serde_json::to_string(&config_maps.list(&params).await.unwrap().items).unwrap());
    text.push_str(&serde_json::to_string(&events.list(&params).await.unwrap().items).unwrap());
    text.push_str(&serde_json::to_string(&sproms.list(&params).await.unwrap().items).unwrap());
    text
}

/// The `prometheus.yml` of the shard's configuration Secret, as the editor reads it.
async fn shard_config(editor: &Client, namespace: &str) -> Result<String, String> {
    let secret = Api::<Secret>::namespaced(editor.clone(), namespace)
        .get(&format!("{NAME}-shard-0"))
        .await
        .map_err(|e| e.to_string())?;
    let data = secret.data.unwrap_or_default();
    let config = data.get("prometheus.yml").ok_or("no prometheus.yml")?;
    Ok(String::from_utf8_lossy(&config.0).into_owned())
}

/// The MonitoringObjectsAccepted message once it satisfies `check`.
async fn accepted_message(
    sproms: &Api<ShardedPrometheus>,
    what: &str,
    check: impl Fn(&str) -> Result<(), String>,
) -> String {
    wait_for(what, TIMEOUT, || async {
        let sprom = sproms.get(NAME).await.map_err(|e| e.to_string())?;
        let status = sprom.status.ok_or("no status")?;
        let accepted = status
            .condition(condition::MONITORING_OBJECTS_ACCEPTED)
            .ok_or("no MonitoringObjectsAccepted")?;
        check(&accepted.message)?;
        Ok(accepted.message.clone())
    })
    .await
}

/// An editor of `tenant`: a ServiceAccount bound to `edit` there, and a client with its token.
async fn editor_of(cluster: &Cluster, admin: &Client, tenant: &str) -> Client {
    let apply = PatchParams::apply(MANAGER).force();
    let account =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "editor"}});
    Api::<ServiceAccount>::namespaced(admin.clone(), tenant)
        .patch("editor", &apply, &Patch::Apply(&account))
        .await
        .unwrap();
    bind(
        admin,
        tenant,
        "editor",
        ("ClusterRole", "edit"),
        (tenant, "editor"),
    )
    .await;
    identity::service_account_client(cluster, tenant, "editor").await
}

/// In `sharing`, a Role letting the tenant's Prometheus ServiceAccount get its monitors and,
/// with `secrets`, the Secret `creds`, bound to that ServiceAccount.
async fn share(admin: &Client, sharing: &str, tenant: &str, secrets: bool) {
    let apply = PatchParams::apply(MANAGER).force();
    let mut rules = vec![json!({"apiGroups": ["monitoring.coreos.com"],
                                "resources": ["servicemonitors"], "verbs": ["get"]})];
    if secrets {
        rules.push(json!({"apiGroups": [""], "resources": ["secrets"],
                          "resourceNames": ["creds"], "verbs": ["get"]}));
    }
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": "shared-with-tenant"}, "rules": rules});
    Api::<Role>::namespaced(admin.clone(), sharing)
        .patch("shared-with-tenant", &apply, &Patch::Apply(&role))
        .await
        .unwrap();
    let role = ("Role", "shared-with-tenant");
    bind(
        admin,
        sharing,
        "shared-with-tenant",
        role,
        (tenant, "prometheus"),
    )
    .await;
}

/// Applies the RoleBinding `name` in `namespace` of `role` (its kind and name) to the
/// ServiceAccount `account` (its namespace and name).
async fn bind(
    admin: &Client,
    namespace: &str,
    name: &str,
    (role_kind, role): (&str, &str),
    (account_namespace, account): (&str, &str),
) {
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
    });
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&binding),
        )
        .await
        .unwrap();
}

#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn tenancy_an_editor_obtains_no_credential_of_another_namespace() {
    let cluster = Cluster::get();
    e2e::operator::install_crds(&cluster).await;
    let _aggregated = aggregated_roles(&cluster).await;
    let tenant = TestNamespace::create(&cluster, "tenant").await;
    let victim = TestNamespace::create(&cluster, "victim").await;
    let sharing = TestNamespace::create(&cluster, "sharing").await;
    let admin = tenant.client.clone();
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let args = [
        "--leader-elect=false",
        "--lease-namespace",
        &tenant.name,
        "--listen-address",
        &listen,
    ];
    let mut controller = ControllerProcess::start("shard-controller", &args, &[]);
    let pid = controller.pid();
    let _binding = e2e::prometheus::service_account(&tenant).await;
    monitored_namespace(&admin, &victim.name, VICTIM_PASSWORD, true).await;
    monitored_namespace(&admin, &sharing.name, SHARED_PASSWORD, false).await;
    monitored_namespace(&admin, &tenant.name, OWN_PASSWORD, false).await;
    share(&admin, &sharing.name, &tenant.name, false).await;

    let editor = editor_of(&cluster, &admin, &tenant.name).await;
    let forbidden = Api::<Secret>::namespaced(editor.clone(), &victim.name)
        .get("creds")
        .await;
    assert!(
        matches!(&forbidden, Err(kube::Error::Api(status)) if status.code == 403),
        "the editor may not read the victim's Secret itself: {forbidden:?}"
    );
    let sproms = Api::<ShardedPrometheus>::namespaced(editor.clone(), &tenant.name);
    e2e::apply::sprom(&sproms, NAME, MANAGER, spec(json!({}))).await;

    let (t, v, s) = (&tenant.name, &victim.name, &sharing.name);
    every_foreign_object_refused(&sproms, &editor, t, v, s).await;
    inline_password_is_quoted_nowhere(&sproms, &editor, t).await;

    references_name_the_tenants_own_secrets(&sproms, &editor, t, v).await;

    sharing_consents(&admin, &sproms, &editor, t, s).await;

    deep_rule_refused_by_name(&admin, &sproms, &editor, t).await;
    sharing_revokes(&admin, &editor, t, s).await;
    assert!(controller.is_running(), "the controller died");
    assert_eq!(controller.pid(), pid);
}

/// Every object of `v` (each monitor kind and a rule) is refused naming the permission the
/// shards' ServiceAccount lacks, and so is `s`'s monitor for its Secret; the tenant's own monitor
/// is configured with its credential, and neither foreign password is readable by the editor.
async fn every_foreign_object_refused(
    sproms: &Api<ShardedPrometheus>,
    editor: &Client,
    t: &str,
    v: &str,
    s: &str,
) {
    // Each kind of object of `v`, refused for the kind itself; `s`'s monitor, for its Secret.
    let mut expected: Vec<String> = [
        ("ServiceMonitor", "sm", "servicemonitors"),
        ("PodMonitor", "pm", "podmonitors"),
        ("ScrapeConfig", "sc", "scrapeconfigs"),
        ("PrometheusRule", "rule", "prometheusrules"),
    ]
    .iter()
    .map(|(kind, name, plural)| {
        format!(
            "{kind} {v}/{name}: ServiceAccount {t}/prometheus may not get {plural}.monitoring.coreos.com {v}/{name}"
        )
    })
    .collect();
    expected.push(format!(
        "ServiceMonitor {s}/sm: ServiceAccount {t}/prometheus may not get secrets {s}/creds"
    ));
    let message = accepted_message(
        sproms,
        "every foreign object refused",
        |message| match expected.iter().find(|e| !message.contains(e.as_str())) {
            Some(missing) => Err(format!("{missing:?} not in {message:?}")),
            None => Ok(()),
        },
    )
    .await;
    assert!(message.starts_with("5 selected object(s)"), "{message}");
    let config = wait_for("the tenant's own monitor configured", TIMEOUT, || async {
        let config = shard_config(editor, t).await?;
        match config.contains(&format!("serviceMonitor/{t}/sm/0")) {
            true => Ok(config),
            false => Err("not yet".to_string()),
        }
    })
    .await;
    assert!(
        config.contains(OWN_PASSWORD),
        "the tenant's own credential is used"
    );
    let readable = no_foreign_password_readable(editor, t).await;
    assert!(readable.contains(OWN_PASSWORD), "the reading itself works");
}

/// `s` consents (a Role granting its Secret too): within the review cache's 30 s its monitor and
/// password are configured, and only the victim's objects stay refused.
async fn sharing_consents(
    admin: &Client,
    sproms: &Api<ShardedPrometheus>,
    editor: &Client,
    t: &str,
    s: &str,
) {
    e2e::apply::sprom(sproms, NAME, MANAGER, spec(json!({}))).await;
    share(admin, s, t, true).await;
    wait_for("the shared monitor configured", TIMEOUT, || async {
        let config = shard_config(editor, t).await?;
        match config.contains(SHARED_PASSWORD)
            && config.contains(&format!("serviceMonitor/{s}/sm/0"))
        {
            true => Ok(()),
            false => Err("not yet".to_string()),
        }
    })
    .await;
    accepted_message(
        sproms,
        "only the victim's objects refused",
        |message| match message.starts_with("4 selected object(s)") && !message.contains(s) {
            true => Ok(()),
            false => Err(message.to_string()),
        },
    )
    .await;
    assert!(
        !shard_config(editor, t)
            .await
            .unwrap()
            .contains(VICTIM_PASSWORD)
    );
}

/// How long a revoked consent may still be in the configuration: the review's answer is
/// cached for 30 s, and a ShardedPrometheus using a consent is looked at again a second after
/// its answer expires; an answer refreshed just before the revocation, by a reconcile that
/// something else triggered, can take one more period.
const REVOCATION_BOUND: Duration = Duration::from_secs(2 * 30 + 5);

/// `s` revokes its consent (its RoleBinding deleted): within [`REVOCATION_BOUND`] its monitor
/// and password leave the configuration, though nothing watched tells the controller.
async fn sharing_revokes(admin: &Client, editor: &Client, t: &str, s: &str) {
    let revoked = std::time::Instant::now();
    Api::<RoleBinding>::namespaced(admin.clone(), s)
        .delete("shared-with-tenant", &Default::default())
        .await
        .unwrap();
    wait_for("the shared monitor taken out", REVOCATION_BOUND, || async {
        let config = shard_config(editor, t).await?;
        match config.contains(SHARED_PASSWORD)
            || config.contains(&format!("serviceMonitor/{s}/sm/0"))
        {
            true => Err("still configured".to_string()),
            false => Ok(()),
        }
    })
    .await;
    eprintln!(
        "a revoked consent left the configuration after {:.1} s",
        revoked.elapsed().as_secs_f64()
    );
}

/// Applies config/rbac/aggregate-to-roles.yaml (so `edit` may create ShardedPrometheuses);
/// the roles are removed when the guards drop: a later suite installing the project meets a
/// fresh cluster.
async fn aggregated_roles(cluster: &Cluster) -> Vec<DeleteOnDrop> {
    let aggregated = e2e::deploy::repo_root().join("config/rbac/aggregate-to-roles.yaml");
    let mut kubectl = identity::kubectl(cluster);
    kubectl
        .args(["apply", "--server-side", "--field-manager", MANAGER, "-f"])
        .arg(&aggregated);
    identity::run(kubectl, None);
    let config = cluster.config().await;
    let removed_at_end: Vec<DeleteOnDrop> =
        identity::yaml_to_json(&std::fs::read_to_string(&aggregated).unwrap())
            .iter()
            .filter_map(|role| role["metadata"]["name"].as_str())
            .map(|name| DeleteOnDrop::new::<ClusterRole>(config.clone(), name, Default::default()))
            .collect();
    assert_eq!(removed_at_end.len(), 2, "the edit and view aggregations");
    removed_at_end
}

/// A password written where a reference belongs: the spec is refused, and neither the
/// condition nor the Event quotes it. First of the spec's refusals: the events of one reason
/// about one object collapse into a series that keeps the first note.
async fn inline_password_is_quoted_nowhere(
    sproms: &Api<ShardedPrometheus>,
    editor: &Client,
    t: &str,
) {
    let generation = e2e::apply::sprom(
        sproms,
        NAME,
        MANAGER,
        spec(json!({
            "remoteWrite": [{"url": "http://writer.example:9090/api/v1/write",
                             "basicAuth": {"username": {"name": "creds", "key": "user"},
                                           "password": INLINE_PASSWORD}}],
        })),
    )
    .await;
    let message = wait_for("the inline password refused", TIMEOUT, || async {
        let sprom = sproms.get(NAME).await.map_err(|e| e.to_string())?;
        let status = sprom.status.ok_or("no status")?;
        let invalid = status.condition(condition::INVALID).ok_or("no Invalid")?;
        match status.observed_generation == generation && invalid.message.contains("remoteWrite") {
            true => Ok(invalid.message.clone()),
            false => Err(format!(
                "{}: {:?}",
                status.observed_generation, invalid.message
            )),
        }
    })
    .await;
    assert!(!message.contains(INLINE_PASSWORD), "{message}");
    let events = Api::<Event>::namespaced(editor.clone(), t);
    let notes = wait_for("the Event of the refusal", TIMEOUT, || async {
        let notes: Vec<String> = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        match notes.iter().any(|note| note.contains(message.as_str())) {
            true => Ok(notes),
            false => Err(format!("{notes:?}")),
        }
    })
    .await;
    assert!(
        notes.iter().all(|note| !note.contains(INLINE_PASSWORD)),
        "{notes:?}"
    );
}

/// remoteWrite and alerting name Secrets of the tenant's namespace only: the victim's
/// Secret name is looked up there, not found, and the spec refused (the shards keep the
/// configuration they had).
async fn references_name_the_tenants_own_secrets(
    sproms: &Api<ShardedPrometheus>,
    editor: &Client,
    t: &str,
    v: &str,
) {
    let creds = json!({"username": {"name": "creds", "key": "user"},
                       "password": {"name": "creds", "key": "pass"}});
    let generation = e2e::apply::sprom(
        sproms,
        NAME,
        MANAGER,
        spec(json!({
            "remoteWrite": [{"url": format!("http://writer.{v}.svc:9090/api/v1/write"),
                             "basicAuth": {"username": {"name": "victim-only", "key": "user"},
                                           "password": {"name": "victim-only", "key": "pass"}}}],
            "alerting": {"alertmanagers": [{"namespace": v, "name": "alertmanager", "port": "web",
                                             "basicAuth": creds}]},
        })),
    )
    .await;
    wait_for("the remoteWrite reference refused", TIMEOUT, || async {
        let sprom = sproms.get(NAME).await.map_err(|e| e.to_string())?;
        let status = sprom.status.ok_or("no status")?;
        let invalid = status.condition(condition::INVALID).ok_or("no Invalid")?;
        let named = format!("Secret {t}/victim-only");
        match status.observed_generation == generation && invalid.message.contains(&named) {
            true => Ok(()),
            false => Err(format!(
                "{}: {:?}",
                status.observed_generation, invalid.message
            )),
        }
    })
    .await;
    no_foreign_password_readable(editor, t).await;
}

/// A PrometheusRule whose expression nests 100,000 deep (200 KB; unchecked, it overflows the
/// controller's stack at every start): refused by name, the controller still running and
/// reconciling (the shared monitor stays configured).
async fn deep_rule_refused_by_name(
    admin: &Client,
    sproms: &Api<ShardedPrometheus>,
    editor: &Client,
    t: &str,
) {
    let rules = monitoring_resource("PrometheusRule", "prometheusrules");
    let deep = format!("{}up{}", "(".repeat(100_000), ")".repeat(100_000));
    let rule = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "deep", "labels": {"tenancy": "selected"}},
        "spec": {"groups": [{"name": "deep", "rules": [{"alert": "Deep", "expr": deep}]}]},
    });
    apply(admin, t, &rules, rule).await;
    let named = format!("PrometheusRule {t}/deep: ");
    let message = accepted_message(sproms, "the deep rule refused", |message| {
        match message.contains(&named) && message.contains("nests 100") {
            true => Ok(()),
            false => Err(message.to_string()),
        }
    })
    .await;
    assert!(message.len() < 4096, "{message}");
    assert!(
        shard_config(editor, t)
            .await
            .unwrap()
            .contains(SHARED_PASSWORD)
    );
}

/// Whether `result` is the API server's refusal by the shard-controller's policy.
fn denied_by_policy<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Result<String, String> {
    denied_by("zone-aware-shard-controller-writes", result)
}

/// Whether `result` is the API server's refusal by the shipped policy `policy` (its name carries
/// the identity's suffix).
fn denied_by<T: std::fmt::Debug>(
    policy: &str,
    result: Result<T, kube::Error>,
) -> Result<String, String> {
    refused(
        result,
        &[403],
        &format!("ValidatingAdmissionPolicy '{policy}"),
    )
}

/// Whether `result` is an API error with one of `codes` whose message contains `needle`: its
/// message, or what `result` was.
fn refused<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
    codes: &[u16],
    needle: &str,
) -> Result<String, String> {
    match result {
        Err(kube::Error::Api(status))
            if codes.contains(&status.code) && status.message.contains(needle) =>
        {
            Ok(status.message)
        }
        other => Err(format!("{other:?}")),
    }
}

/// As the shard-controller's ServiceAccount (its shipped RBAC and policies, rendered for this
/// test), the writes its RBAC allows but that are not the controller's are refused by the API
/// server, naming the policy: an unlabelled Secret created or deleted in another namespace, a
/// Secret given the controller's label, a child without a ShardedPrometheus as its controller, a
/// ServiceAccount token Secret (kube-system's included), any write in a namespace without a
/// ShardedPrometheus, a pod template beyond Pod Security baseline, a pod's image; its own kind of
/// write goes through.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn tenancy_the_shard_controller_token_writes_only_what_the_controller_owns() {
    let cluster = Cluster::get();
    let home = TestNamespace::create(&cluster, "policy-home").await;
    let other = TestNamespace::create(&cluster, "policy-other").await;
    let unmanaged = TestNamespace::create(&cluster, "policy-unmanaged").await;
    let identity = identity::ServiceAccountIdentity::create(
        &cluster,
        "shard-controller",
        &home.name,
        &[],
        &[],
        |_| {},
    );
    let token = identity.client().await;
    let admin = other.client.clone();
    // `other` is managed: it holds a ShardedPrometheus (no controller runs for it here).
    let owner = managed(&admin, &other.name).await;
    let as_controller = Api::<Secret>::namespaced(token.clone(), &other.name);
    let post = kube::api::PostParams::default();
    writes_policy_in_force(&admin, &as_controller, &other.name).await;

    // An unlabelled Secret of the namespace: not deleted, not taken over by labelling it.
    Api::<Secret>::namespaced(admin.clone(), &other.name)
        .create(&post, &secret("theirs", json!({})))
        .await
        .unwrap();
    denied_by_policy(as_controller.delete("theirs", &Default::default()).await).unwrap();
    let label = json!({"metadata": {"labels": managed_by()}});
    denied_by_policy(
        as_controller
            .patch("theirs", &PatchParams::default(), &Patch::Merge(&label))
            .await,
    )
    .unwrap();
    // Labelled but with no ShardedPrometheus as its controller: not a child.
    let orphan = secret("orphan", json!({"labels": managed_by()}));
    let message = denied_by_policy(as_controller.create(&post, &orphan).await).unwrap();
    assert!(
        message.contains("whose controlling owner is a ShardedPrometheus"),
        "{message}"
    );
    // Its own kind of object is written: the RBAC allows what the policies do not refuse (once
    // the API server has seen the namespace's ShardedPrometheus).
    let mine = secret("mine", child_metadata(&owner));
    wait_for("a child Secret created", TIMEOUT, || async {
        as_controller
            .create(&post, &mine)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    as_controller
        .delete("mine", &Default::default())
        .await
        .unwrap();

    no_service_account_token(&admin, &token, &other.name, &owner).await;
    nothing_where_no_sharded_prometheus(&token, &unmanaged.name, &owner).await;
    pod_templates_within_baseline(&admin, &token, &other.name, &owner).await;
    // A pod of a shard: its config-digest annotation may change, its image may not.
    pod_changed_only_in_its_digest(admin, token, &other.name).await;
}

/// Waits until the writes policy is in force (it is compiled after creation): its first denial
/// of an unlabelled Secret created in `namespace` as the controller (`as_controller`); one
/// created before is deleted as `admin`.
async fn writes_policy_in_force(admin: &Client, as_controller: &Api<Secret>, namespace: &str) {
    let post = kube::api::PostParams::default();
    let mut attempt = 0;
    let message = wait_for("the policy in force", TIMEOUT, || {
        attempt += 1;
        let name = format!("probe-{attempt}");
        let post = &post;
        let secret = secret(&name, json!({}));
        async move {
            let created = as_controller.create(post, &secret).await;
            if created.is_ok() {
                let _ = Api::<Secret>::namespaced(admin.clone(), namespace)
                    .delete(&name, &Default::default())
                    .await;
            }
            denied_by_policy(created)
        }
    })
    .await;
    assert!(
        message.contains("may create only secrets labelled"),
        "{message}"
    );
}

/// The label of the shard-controller's children.
fn managed_by() -> Value {
    json!({"app.kubernetes.io/managed-by": "shard-controller"})
}

/// A child's metadata: the controller's label and `owner` as the controlling owner.
fn child_metadata(owner: &Value) -> Value {
    json!({"labels": managed_by(), "ownerReferences": [owner]})
}

/// The Secret `name` with `metadata` (besides its name) and one key.
fn secret(name: &str, metadata: Value) -> Secret {
    let mut object = json!({"metadata": metadata, "stringData": {"a": "b"}});
    object["metadata"]["name"] = json!(name);
    serde_json::from_value(object).unwrap()
}

/// Creates the ShardedPrometheus `NAME` in `namespace` and returns a controlling owner
/// reference to it.
async fn managed(admin: &Client, namespace: &str) -> Value {
    let sprom: ShardedPrometheus = serde_json::from_value(json!({
        "apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus",
        "metadata": {"name": NAME}, "spec": spec(json!({})),
    }))
    .unwrap();
    let created = Api::<ShardedPrometheus>::namespaced(admin.clone(), namespace)
        .create(&Default::default(), &sprom)
        .await
        .unwrap();
    json!({"apiVersion": "zonecontrol.k8s.aws/v1", "kind": "ShardedPrometheus", "name": NAME,
           "uid": created.metadata.uid.unwrap(), "controller": true})
}

/// A ServiceAccount token Secret, by type or by annotation, labelled and owned as a child, is
/// refused: in a managed namespace, naming the token; in kube-system (where the token controller
/// would mint the token of a system ServiceAccount), by one of the controller's policies.
async fn no_service_account_token(admin: &Client, token: &Client, namespace: &str, owner: &Value) {
    let post = kube::api::PostParams::default();
    let token_secret = |name: &str, type_: &str| -> Secret {
        let mut metadata = child_metadata(owner);
        metadata["annotations"] = json!({"kubernetes.io/service-account.name": "default"});
        let mut secret = serde_json::to_value(secret(name, metadata)).unwrap();
        secret["type"] = json!(type_);
        serde_json::from_value(secret).unwrap()
    };
    let secrets = Api::<Secret>::namespaced(token.clone(), namespace);
    for type_ in ["kubernetes.io/service-account-token", "Opaque"] {
        let refused = secrets.create(&post, &token_secret("minted", type_)).await;
        let message = denied_by_policy(refused).unwrap();
        assert!(message.contains("ServiceAccount token Secret"), "{message}");
    }
    let system = Api::<Secret>::namespaced(token.clone(), "kube-system");
    let created = system
        .create(
            &post,
            &token_secret("zac-e2e-minted", "kubernetes.io/service-account-token"),
        )
        .await;
    if created.is_ok() {
        let admin = Api::<Secret>::namespaced(admin.clone(), "kube-system");
        let _ = admin.delete("zac-e2e-minted", &Default::default()).await;
    }
    denied_by_any_shard_controller_policy(created).unwrap();
}

/// Whether `result` is a refusal by either of the shard-controller's policies (a 403, or the
/// namespaces policy's 422).
fn denied_by_any_shard_controller_policy<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
) -> Result<String, String> {
    let needle = "ValidatingAdmissionPolicy 'zone-aware-shard-controller-";
    refused(result, &[403, 422], needle)
}

/// Whether `result` is the namespaces policy's refusal: its binding finds no ShardedPrometheus
/// in the namespace, which the API server answers 422 naming the policy.
fn denied_by_namespaces_policy<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
) -> Result<String, String> {
    let message = refused(
        result,
        &[422],
        "ValidatingAdmissionPolicy 'zone-aware-shard-controller-namespaces",
    )?;
    match message.contains("no params found") {
        true => Ok(message),
        false => Err(message),
    }
}

/// In a namespace without a ShardedPrometheus, a child (labelled, owned) is refused by the
/// namespaces policy: a Secret and a StatefulSet. The same Secret unlabelled is refused by the
/// writes policy (the token writes only labelled objects), so nothing gets through.
async fn nothing_where_no_sharded_prometheus(token: &Client, namespace: &str, owner: &Value) {
    let secrets = Api::<Secret>::namespaced(token.clone(), namespace);
    let post = kube::api::PostParams::default();
    let child = secret("child", child_metadata(owner));
    wait_for("the namespaces policy in force", TIMEOUT, || async {
        denied_by_namespaces_policy(secrets.create(&post, &child).await)
    })
    .await;
    let sets = Api::<StatefulSet>::namespaced(token.clone(), namespace);
    let set = shard_like_set("web", owner, json!({}));
    denied_by_namespaces_policy(sets.create(&dry_run(), &set).await).unwrap();
}

fn dry_run() -> kube::api::PostParams {
    kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// A StatefulSet labelled and owned as a shard's, its pod spec `pod` merged over one plain
/// container on the kwok nodes.
fn shard_like_set(name: &str, owner: &Value, pod: Value) -> StatefulSet {
    let mut spec = json!({"nodeSelector": {"type": "kwok"},
                          "containers": [{"name": "prometheus", "image": "registry.invalid/prometheus:1"}]});
    spec.as_object_mut()
        .unwrap()
        .extend(pod.as_object().unwrap().clone());
    let mut metadata = child_metadata(owner);
    metadata["name"] = json!(name);
    serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {"replicas": 0, "serviceName": name,
                 "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    }))
    .unwrap()
}

/// The shard-controller's StatefulSets (dry runs, judged as real writes): a plain one is
/// written; one without a ShardedPrometheus as its controller, or whose pods would be
/// privileged, share the host's PID namespace or mount a hostPath, is refused naming the
/// policy; once the namespace enforces the privileged profile, the privileged one is written.
async fn pod_templates_within_baseline(
    admin: &Client,
    token: &Client,
    namespace: &str,
    owner: &Value,
) {
    let sets = Api::<StatefulSet>::namespaced(token.clone(), namespace);
    sets.create(&dry_run(), &shard_like_set("plain", owner, json!({})))
        .await
        .unwrap();
    let mut orphan = shard_like_set("orphan", owner, json!({}));
    orphan.metadata.owner_references = None;
    let message = denied_by_policy(sets.create(&dry_run(), &orphan).await).unwrap();
    assert!(message.contains("controlling owner"), "{message}");
    let privileged = json!({"containers": [{"name": "prometheus", "image": "registry.invalid/prometheus:1",
                                           "securityContext": {"privileged": true}}]});
    let beyond_baseline = [
        ("privileged", privileged.clone()),
        ("host-pid", json!({"hostPID": true})),
        (
            "host-path",
            json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}),
        ),
    ];
    for (name, pod) in beyond_baseline {
        let refused = sets
            .create(&dry_run(), &shard_like_set(name, owner, pod))
            .await;
        let message = denied_by_policy(refused).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            message.contains("Pod Security baseline"),
            "{name}: {message}"
        );
    }
    let label =
        json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .patch(namespace, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    wait_for(
        "a privileged shard where the namespace allows it",
        TIMEOUT,
        || async {
            let set = shard_like_set("privileged", owner, privileged.clone());
            sets.create(&dry_run(), &set)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
}

/// As the shard-controller's token, on a pod labelled as a shard's: its config-digest
/// annotation may change, its image may not.
async fn pod_changed_only_in_its_digest(admin: Client, token: Client, namespace: &str) {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "shard-pod", "labels": {"app.kubernetes.io/managed-by": "shard-controller"}},
        "spec": {"nodeSelector": {"type": "kwok"},
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "prometheus", "image": "registry.invalid/prometheus:1"},
                                {"name": "thanos-sidecar", "image": "registry.invalid/thanos:1"}]},
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin, namespace)
        .create(&Default::default(), &pod)
        .await
        .unwrap();
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(token, namespace);
    let digest = json!({"metadata": {"annotations": {"zonecontrol.k8s.aws/config-digest": "abc"}}});
    pods.patch("shard-pod", &PatchParams::default(), &Patch::Merge(&digest))
        .await
        .unwrap();
    let image = json!({"spec": {"containers": [{"name": "prometheus", "image": "registry.invalid/evil:1"}]}});
    let message = denied_by_policy(
        pods.patch(
            "shard-pod",
            &PatchParams::default(),
            &Patch::Strategic(&image),
        )
        .await,
    )
    .unwrap();
    assert!(
        message.contains("only in its zonecontrol.k8s.aws/config-digest annotation"),
        "{message}"
    );
    ephemeral_containers_only_the_final_upload(&pods).await;
}

/// As the shard-controller's token: a debugging ephemeral container (another image, a shell) is
/// refused; the final upload's, the sidecar's image running upload-blocks, is added.
async fn ephemeral_containers_only_the_final_upload(pods: &Api<k8s_openapi::api::core::v1::Pod>) {
    let add = |container: serde_json::Value| {
        let patch = json!({"spec": {"ephemeralContainers": [container]}});
        async move {
            pods.patch_ephemeral_containers(
                "shard-pod",
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        }
    };
    let shell =
        add(json!({"name": "debug", "image": "registry.invalid/evil:1", "command": ["sh"]}));
    let message = denied_by_policy(shell.await).unwrap();
    assert!(message.contains("final upload's ephemeral"), "{message}");
    let other_image = add(
        json!({"name": "thanos-upload-1", "image": "registry.invalid/evil:1",
        "args": ["tools", "bucket", "upload-blocks", "--path=/prometheus/snapshots/s"]}),
    );
    denied_by_policy(other_image.await).unwrap();
    let upload = add(
        json!({"name": "thanos-upload-1", "image": "registry.invalid/thanos:1",
        "args": ["tools", "bucket", "upload-blocks", "--path=/prometheus/snapshots/s"]}),
    );
    upload.await.unwrap();
}

/// As the zdb-controller's, the rules-federator's and the zau-controller's ServiceAccounts (their
/// shipped RBAC and policies, rendered for this test), the writes their RBAC allows but that are
/// not theirs are refused by the API server naming the policy; their own writes go through.
#[tokio::test]
#[ignore = "needs the local zonal cluster (make e2e)"]
async fn tenancy_the_other_controller_tokens_write_only_their_own() {
    let cluster = Cluster::get();
    let home = TestNamespace::create(&cluster, "policy-tls").await;
    only_tls_secrets(&cluster, &home, "zdb-controller", "zdb-webhook-tls").await;
    zdb_changes_only_its_webhooks_ca_and_failure_policy(&cluster, &home).await;
    only_tls_secrets(&cluster, &home, "rules-federator", "rules-federator-tls").await;
    zau_marks_only_the_update_revision(&cluster).await;
}

/// The shipped webhook configuration as `name` (its cert-manager annotation set, never called:
/// no namespace opts in), deleted on drop.
async fn shipped_webhook_configuration(
    cluster: &Cluster,
    admin: &Api<ValidatingWebhookConfiguration>,
    name: &str,
) -> DeleteOnDrop {
    let mut shipped: Value = e2e::identity::yaml_to_json(
        &std::fs::read_to_string(
            e2e::deploy::repo_root().join("config/webhook/validating-webhook.yaml"),
        )
        .unwrap(),
    )
    .remove(0);
    shipped["metadata"]["name"] = json!(name);
    shipped["metadata"]["annotations"] =
        json!({"cert-manager.io/inject-ca-from": "zone-aware-system/zdb-webhook"});
    // Never called: no namespace opts in.
    shipped["webhooks"][0]["namespaceSelector"] = json!({"matchLabels": {"e2e-never": "true"}});
    admin
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(shipped).unwrap(),
        )
        .await
        .unwrap();
    DeleteOnDrop::new::<ValidatingWebhookConfiguration>(
        cluster.config().await,
        name,
        kube::api::DeleteParams::default(),
    )
}

/// The zdb-controller's token may patch its webhook configuration (RBAC, by name), and the policy
/// lets it change only what the controller changes: the caBundle, and the failurePolicy from
/// Ignore to Fail. Pointing the webhook elsewhere, narrowing its rules or namespaces, putting it
/// back to Ignore or dropping a label or annotation (cert-manager's injection) are refused,
/// naming the policy; the configuration is as it was.
async fn zdb_changes_only_its_webhooks_ca_and_failure_policy(
    cluster: &Cluster,
    home: &TestNamespace,
) {
    let name = format!("{}-webhook", home.name);
    let admin = Api::<ValidatingWebhookConfiguration>::all(home.client.clone());
    let _delete = shipped_webhook_configuration(cluster, &admin, &name).await;
    let identity = identity::ServiceAccountIdentity::create(
        cluster,
        "zdb-controller",
        &home.name,
        &["--webhook-config-name", &name],
        &[],
        |_| {},
    );
    let token = Api::<ValidatingWebhookConfiguration>::all(identity.client().await);
    let policy = identity.rendered_name("zone-aware-zdb-controller-webhook");
    let json_patch = |op: Value| Patch::<Value>::Json(serde_json::from_value(json!([op])).unwrap());
    let before = admin.get(&name).await.unwrap();
    let message = wait_for("the zdb-controller's webhook policy in force", TIMEOUT, || async {
        let elsewhere = json!({"op": "replace", "path": "/webhooks/0/clientConfig/service/name", "value": "elsewhere"});
        denied_by(&policy, token.patch(&name, &PatchParams::default(), &json_patch(elsewhere)).await)
    })
    .await;
    assert!(
        message.contains(
            "may change only its webhook configuration's caBundle, and its failurePolicy to Fail"
        ),
        "{message}"
    );
    for attack in [
        json!({"op": "replace", "path": "/webhooks/0/rules/0/resources/0", "value": "pods/nothing"}),
        json!({"op": "replace", "path": "/webhooks/0/namespaceSelector", "value": {"matchLabels": {"none": "none"}}}),
        json!({"op": "remove", "path": "/metadata/annotations/cert-manager.io~1inject-ca-from"}),
        json!({"op": "replace", "path": "/webhooks/0/timeoutSeconds", "value": 1}),
    ] {
        denied_by(
            &policy,
            token
                .patch(&name, &PatchParams::default(), &json_patch(attack.clone()))
                .await,
        )
        .unwrap_or_else(|e| panic!("{attack}: {e}"));
    }
    assert_eq!(
        admin.get(&name).await.unwrap().webhooks,
        before.webhooks,
        "unchanged"
    );

    // What the controller does: the caBundle, then Fail; and Fail is not undone.
    let ca = json!({"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Y2E="});
    token
        .patch(&name, &PatchParams::default(), &json_patch(ca))
        .await
        .unwrap();
    let fail = json!({"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Fail"});
    token
        .patch(&name, &PatchParams::default(), &json_patch(fail))
        .await
        .unwrap();
    let ignore = json!({"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"});
    denied_by(
        &policy,
        token
            .patch(&name, &PatchParams::default(), &json_patch(ignore))
            .await,
    )
    .unwrap();
    let after = admin.get(&name).await.unwrap();
    assert_eq!(
        after.webhooks.as_ref().unwrap()[0]
            .failure_policy
            .as_deref(),
        Some("Fail")
    );
}

/// `binary`'s Role may create any Secret of `home`: the policy lets it make only TLS Secrets (not
/// a ServiceAccount-token Secret, which the token controller would fill with the token of the
/// ServiceAccount it names, nor an Opaque one); its own certificate's Secret, `own`, is created
/// and updated.
async fn only_tls_secrets(cluster: &Cluster, home: &TestNamespace, binary: &str, own: &str) {
    let identity =
        identity::ServiceAccountIdentity::create(cluster, binary, &home.name, &[], &[], |_| {});
    let secrets = Api::<Secret>::namespaced(identity.client().await, &home.name);
    let policy = format!("zone-aware-{binary}-writes");
    let post = kube::api::PostParams::default();
    let secret = |name: &str, type_: &str, extra: Value| -> Secret {
        let mut secret = json!({"metadata": {"name": name}, "type": type_});
        if let (Some(secret), Some(extra)) = (secret.as_object_mut(), extra.as_object()) {
            secret.extend(extra.clone());
        }
        serde_json::from_value(secret).unwrap()
    };
    // In force once its first denial is seen (a policy is compiled after it is created).
    let mut attempt = 0;
    let message = wait_for(&format!("the {binary} policy in force"), TIMEOUT, || {
        attempt += 1;
        let token = secret(
            &format!("{binary}-token-{attempt}"),
            "kubernetes.io/service-account-token",
            json!({"metadata": {"name": format!("{binary}-token-{attempt}"),
                   "annotations": {"kubernetes.io/service-account.name": "default"}}}),
        );
        let (secrets, post, policy) = (&secrets, &post, &policy);
        async move { denied_by(policy, secrets.create(post, &token).await) }
    })
    .await;
    assert!(
        message.contains(&format!(
            "the {binary} may create and update only Secrets of type kubernetes.io/tls"
        )),
        "{message}"
    );
    let opaque = secret("opaque", "Opaque", json!({"stringData": {"a": "b"}}));
    denied_by(&policy, secrets.create(&post, &opaque).await).unwrap();

    let keys = json!({"stringData": {"tls.crt": "c", "tls.key": "k"}});
    secrets
        .create(&post, &secret(own, "kubernetes.io/tls", keys))
        .await
        .unwrap();
    let mut stored = secrets.get(own).await.unwrap();
    stored.string_data = Some([("tls.crt".to_string(), "renewed".to_string())].into());
    secrets.replace(own, &post, &stored).await.unwrap();
}

/// A StatefulSet of one pod on a kwok node: the zau-controller's token may mark its update
/// revision current (what it does when an OnDelete rollout completes) and delete its pod (with
/// the pod-delete role bound, as `podRemoval: delete` does), but not set another revision, change
/// a count, or delete a pod no StatefulSet controls.
async fn zau_marks_only_the_update_revision(cluster: &Cluster) {
    let ns = TestNamespace::create(cluster, "policy-zau").await;
    let identity = identity::ServiceAccountIdentity::create(
        cluster,
        "zau-controller",
        &ns.name,
        &[],
        &[],
        bind_pod_delete,
    );
    let token = identity.client().await;
    let policy = "zone-aware-zau-controller-writes";
    let pod = |metadata: Value| -> Value {
        json!({
            "metadata": metadata,
            "spec": {"nodeSelector": {"type": "kwok"},
                     "tolerations": [{"operator": "Exists"}],
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": "registry.invalid/app:1"}]},
        })
    };
    let sets = Api::<StatefulSet>::namespaced(ns.client.clone(), &ns.name);
    let set = json!({
        "metadata": {"name": "rolled"},
        "spec": {"replicas": 1, "serviceName": "rolled",
                 "updateStrategy": {"type": "OnDelete"},
                 "selector": {"matchLabels": {"app": "rolled"}},
                 "template": pod(json!({"labels": {"app": "rolled"}}))},
    });
    sets.create(&Default::default(), &serde_json::from_value(set).unwrap())
        .await
        .unwrap();
    let revision = e2e::workload::update_revision(&sets, "rolled", TIMEOUT).await;

    let as_zau = Api::<StatefulSet>::namespaced(token.clone(), &ns.name);
    let mut attempt = 0;
    let message = wait_for("the zau-controller policy in force", TIMEOUT, || {
        attempt += 1;
        let (as_zau, other) = (&as_zau, format!("rolled-other-{attempt}"));
        async move {
            let edit = |status: &mut k8s_openapi::api::apps::v1::StatefulSetStatus| {
                status.current_revision = Some(other.clone());
            };
            denied_by(policy, write_status(as_zau, edit).await)
        }
    })
    .await;
    assert!(
        message.contains("only by marking its update revision current"),
        "{message}"
    );
    // A count changed with the revision: refused; the revision alone: written (a conflict with
    // the StatefulSet controller's own status writes is retried).
    let counted = write_status(&as_zau, |status| {
        status.current_revision = Some(revision.clone());
        status.replicas += 5;
    })
    .await;
    denied_by(policy, counted).unwrap();
    write_status(&as_zau, |status| {
        status.current_revision = Some(revision.clone());
    })
    .await
    .unwrap();

    let loose = pod(json!({"name": "loose", "labels": {"app": "loose"}}));
    pods_deleted_only_of_a_statefulset(&ns, &token, policy, loose).await;
}

/// Reads the StatefulSet `rolled`, applies `edit` to its status and writes it as `sets`' client:
/// the answer, once it is not a conflict with the StatefulSet controller's own status writes.
async fn write_status(
    sets: &Api<StatefulSet>,
    edit: impl Fn(&mut k8s_openapi::api::apps::v1::StatefulSetStatus),
) -> Result<StatefulSet, kube::Error> {
    let edit = &edit;
    wait_for("a status write without conflict", TIMEOUT, || async move {
        let mut set = sets.get("rolled").await.map_err(|e| e.to_string())?;
        edit(set.status.get_or_insert_with(Default::default));
        match sets
            .replace_status("rolled", &Default::default(), &set)
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 409 => Err(status.message),
            answer => Ok(answer),
        }
    })
    .await
}

/// The pod no StatefulSet controls is not deleted by the zau-controller's token; the
/// StatefulSet's pod `rolled-0` is.
async fn pods_deleted_only_of_a_statefulset(
    ns: &TestNamespace,
    token: &Client,
    policy: &str,
    loose: Value,
) {
    use k8s_openapi::api::core::v1::Pod;
    let admin = Api::<Pod>::namespaced(ns.client.clone(), &ns.name);
    admin
        .create(&Default::default(), &serde_json::from_value(loose).unwrap())
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(token.clone(), &ns.name);
    let message = denied_by(policy, pods.delete("loose", &Default::default()).await).unwrap();
    assert!(
        message.contains("may delete only pods controlled by a StatefulSet"),
        "{message}"
    );
    wait_for("the StatefulSet's pod", TIMEOUT, || async {
        admin
            .get_opt("rolled-0")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    pods.delete("rolled-0", &Default::default()).await.unwrap();
}

/// Binds the rendered `zone-aware-zau-pod-delete` ClusterRole to the rendered ServiceAccount, as
/// the chart's `zauController.podRemoval: delete` does.
fn bind_pod_delete(objects: &mut Vec<Value>) {
    let named = |kind: &str, prefix: &str| {
        objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(prefix))
            })
            .map(|o| o["metadata"].clone())
            .unwrap_or_else(|| panic!("no {kind} {prefix}* in config/rbac/zau-controller.yaml"))
    };
    let role = named("ClusterRole", "zone-aware-zau-pod-delete");
    let account = named("ServiceAccount", "zau-controller");
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role["name"]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}],
    }));
}
