//! The zdb-controller's, rules-federator's and zau-controller's tokens under their shipped RBAC and
//! policies: TLS Secrets only, the webhook configuration's caBundle and failurePolicy only, the
//! update revision and the pods of a StatefulSet only.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;

use super::*;

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
    let service = "/webhooks/0/clientConfig/service/name";
    let shipped_service = before.webhooks.as_ref().unwrap()[0]
        .client_config
        .service
        .as_ref()
        .unwrap()
        .name
        .clone();
    let message = wait_for(
        "the zdb-controller's webhook policy in force",
        TIMEOUT,
        || async {
            let elsewhere = json!({"op": "replace", "path": service, "value": "elsewhere"});
            let result = token
                .patch(&name, &PatchParams::default(), &json_patch(elsewhere))
                .await;
            if result.is_ok() {
                // Made before the API server had the policy: put back as it was, so that the next
                // attempt is a change again (the policy lets a patch that changes nothing through).
                let back = json!({"op": "replace", "path": service, "value": shipped_service});
                admin
                    .patch(&name, &PatchParams::default(), &json_patch(back))
                    .await
                    .unwrap();
            }
            denied_by(&policy, result)
        },
    )
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
