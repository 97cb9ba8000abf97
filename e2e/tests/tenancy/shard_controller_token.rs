//! The shard-controller's token under its shipped RBAC and ValidatingAdmissionPolicies: the writes
//! its RBAC allows but that are not the controller's (foreign or token Secrets, namespaces without
//! a ShardedPrometheus, pods beyond Pod Security baseline, a pod's image, a disruption budget of
//! other pods, a rollout of other StatefulSets) refused by name.

use super::*;

/// Whether `result` is the API server's refusal by the shard-controller's policy.
fn denied_by_policy<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Result<String, String> {
    denied_by("zone-aware-shard-controller-writes", result)
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
    budgets_only_of_its_pods(&token, &other.name, &owner).await;
    rollout_only_of_its_statefulsets(&token, &other.name, &owner).await;
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

/// The shard-controller's disruption budgets (dry runs, judged as real writes): a
/// PodDisruptionBudget selecting the shards' pods is written; one selecting anyone else's pods
/// (which would hold up their evictions), or selecting by matchExpressions only, is refused
/// naming the policy.
async fn budgets_only_of_its_pods(token: &Client, namespace: &str, owner: &Value) {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let budgets = Api::<PodDisruptionBudget>::namespaced(token.clone(), namespace);
    let budget = |name: &str, selector: Value| -> PodDisruptionBudget {
        let mut metadata = child_metadata(owner);
        metadata["name"] = json!(name);
        serde_json::from_value(json!({"metadata": metadata,
            "spec": {"maxUnavailable": 0, "selector": selector}}))
        .unwrap()
    };
    let shards = json!({"matchLabels": {"app.kubernetes.io/managed-by": "shard-controller",
                                        "app.kubernetes.io/instance": NAME}});
    budgets
        .create(&dry_run(), &budget("shards", shards))
        .await
        .unwrap();
    for (name, selector) in [
        ("theirs", json!({"matchLabels": {"app": "web"}})),
        (
            "expressions",
            json!({"matchExpressions": [{"key": "app.kubernetes.io/managed-by",
            "operator": "In", "values": ["shard-controller"]}]}),
        ),
    ] {
        let refused = budgets.create(&dry_run(), &budget(name, selector)).await;
        let message = denied_by_policy(refused).unwrap();
        assert!(
            message.contains("only disruption budgets that select the shards' pods"),
            "{name}: {message}"
        );
    }
}

/// The shard-controller's rollout (dry runs, judged as real writes): a ZoneAwareUpdate over its
/// owner's StatefulSets is written; one naming a StatefulSet, selecting anyone else's (the
/// zau-controller would replace their pods), another ShardedPrometheus's, or adding
/// matchExpressions, is refused naming the policy.
async fn rollout_only_of_its_statefulsets(token: &Client, namespace: &str, owner: &Value) {
    use zone_api::ZoneAwareUpdate;
    let rollouts = Api::<ZoneAwareUpdate>::namespaced(token.clone(), namespace);
    let rollout = |name: &str, spec: Value| -> ZoneAwareUpdate {
        let mut metadata = child_metadata(owner);
        metadata["name"] = json!(name);
        serde_json::from_value(json!({"apiVersion": "zonecontrol.k8s.aws/v1",
            "kind": "ZoneAwareUpdate", "metadata": metadata, "spec": spec}))
        .unwrap()
    };
    let shards = |instance: &str| {
        json!({"app.kubernetes.io/managed-by": "shard-controller",
               "app.kubernetes.io/instance": instance})
    };
    rollouts
        .create(
            &dry_run(),
            &rollout("shards", json!({"selector": {"matchLabels": shards(NAME)}})),
        )
        .await
        .unwrap();
    for (name, spec) in [
        (
            "theirs",
            json!({"selector": {"matchLabels": {"app": "web"}}}),
        ),
        ("named", json!({"statefulset": "web"})),
        (
            "another",
            json!({"selector": {"matchLabels": shards("another")}}),
        ),
        (
            "expressions",
            json!({"selector": {"matchLabels": shards(NAME), "matchExpressions": [
                {"key": "app", "operator": "In", "values": ["web"]}]}}),
        ),
    ] {
        let refused = rollouts.create(&dry_run(), &rollout(name, spec)).await;
        let message = denied_by_policy(refused).unwrap();
        assert!(
            message.contains("only a ZoneAwareUpdate that rolls the StatefulSets"),
            "{name}: {message}"
        );
    }
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
