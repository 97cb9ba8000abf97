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
//! The controllers' own tokens are confined too: the writes their shipped RBAC allows and their
//! ValidatingAdmissionPolicies refuse are tested in `tenancy/shard_controller_token.rs` and
//! `tenancy/other_controller_tokens.rs`.
//!
//! Exclusive suite: its shard-controller watches every namespace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use e2e::cluster::DeleteOnDrop;
use e2e::localstack::free_port;
use e2e::operator::monitoring_resource;
use e2e::process::ControllerProcess;
use e2e::{Cluster, TestNamespace, identity, wait_for};
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

#[path = "tenancy/other_controller_tokens.rs"]
mod other_controller_tokens;
#[path = "tenancy/shard_controller_token.rs"]
mod shard_controller_token;

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
    let env = e2e::fixture::without_zau_controller();
    let mut controller = ControllerProcess::start("shard-controller", &args, &env);
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
