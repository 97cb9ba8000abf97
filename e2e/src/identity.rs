//! Controllers run as their ServiceAccounts, so the e2e scenarios test the shipped RBAC: a verb
//! missing from `config/rbac/` makes the controller fail its scenario.
//!
//! [`ServiceAccountIdentity::create`] renders `config/rbac/<binary>.yaml` with kubectl's
//! kustomize (a unique name suffix, the controller's namespace), points the `resourceNames` at
//! the names the process is started with (as `make deploy`'s name references do), applies it,
//! asks the TokenRequest API for a token of the ServiceAccount, and writes a kubeconfig with the
//! cluster's server and CA and that token. Cluster-scoped objects are owned by the namespace (the
//! garbage collector removes them if the test dies) and deleted when the identity is dropped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use crate::cluster::Cluster;

/// `E2E_AS_SERVICE_ACCOUNT=1`: [`crate::process::ControllerProcess`] runs binaries that have a
/// ServiceAccount in `config/rbac/` as that ServiceAccount.
pub const AS_SERVICE_ACCOUNT_ENV: &str = "E2E_AS_SERVICE_ACCOUNT";

/// Field manager of the RBAC objects the tests apply.
const FIELD_MANAGER: &str = "e2e-identity";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The cluster-scoped kinds of config/rbac: owned by the identity's namespace, deleted with it.
const CLUSTER_SCOPED: [&str; 4] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// The ServiceAccount of a binary: named as the binary, with its RBAC in
/// `config/rbac/<binary>.yaml`; none when the file does not exist.
pub fn service_account_for(binary: &str) -> Option<&str> {
    let rbac = repo_root().join(format!("config/rbac/{binary}.yaml"));
    rbac.is_file().then_some(binary)
}

/// Whether [`AS_SERVICE_ACCOUNT_ENV`] asks for ServiceAccount identities.
pub fn as_service_account() -> bool {
    matches!(
        std::env::var(AS_SERVICE_ACCOUNT_ENV).as_deref(),
        Ok("1" | "true")
    )
}

/// A `resourceNames` entry of the shipped RBAC and the flag that renames the object at run time.
struct NamedResource<'a> {
    resource: &'static str,
    shipped: &'a str,
    flag: &'static str,
}

fn named_resources(binary: &str) -> Vec<NamedResource<'_>> {
    vec![
        // Each binary's Lease is named as the binary.
        NamedResource {
            resource: "leases",
            shipped: binary,
            flag: "--lease-name",
        },
        NamedResource {
            resource: "validatingwebhookconfigurations",
            shipped: "zone-aware-eviction-webhook",
            flag: "--webhook-config-name",
        },
        NamedResource {
            resource: "secrets",
            shipped: "zdb-webhook-tls",
            flag: "--tls-secret-name",
        },
        NamedResource {
            resource: "secrets",
            shipped: "rules-federator-tls",
            flag: "--tls-self-signed-secret",
        },
    ]
}

/// The value of `flag` in `args` (`--flag value` or `--flag=value`), or of the env fallback.
pub fn flag_value(args: &[&str], env: &[(&str, String)], flag: &str) -> Option<String> {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if *arg == flag {
            return iter.next().map(|v| (*v).to_string());
        }
        if let Some(value) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return Some(value.to_string());
        }
    }
    let env_name = match flag {
        "--lease-namespace" => "POD_NAMESPACE",
        "--lease-name" => "ZAC_LEASE_NAME",
        _ => return None,
    };
    env.iter()
        .find(|(name, _)| *name == env_name)
        .map(|(_, value)| value.clone())
}

/// `kubectl` of the cluster under test: the local zonal cluster's env file puts its directory
/// first on PATH; elsewhere kubectl must be on PATH.
pub fn kubectl(cluster: &Cluster) -> Command {
    let mut command = Command::new("kubectl");
    command.env("PATH", path_with_cluster_tools(cluster));
    command.arg("--kubeconfig").arg(&cluster.kubeconfig);
    command
}

/// PATH with the cluster's tool directory (kubectl) in front.
pub fn path_with_cluster_tools(cluster: &Cluster) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    match cluster
        .env
        .get("PATH")
        .and_then(|p| p.split(':').next())
        .filter(|dir| Path::new(dir).join("kubectl").exists())
    {
        Some(dir) => format!("{dir}:{path}"),
        None => path,
    }
}

/// Runs `command` (with `stdin` fed) and returns its stdout; panics with stderr on failure.
pub fn run(mut command: Command, stdin: Option<&[u8]>) -> String {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    {
        let mut pipe = child.stdin.take().expect("stdin");
        if let Some(input) = stdin {
            pipe.write_all(input).expect("writing stdin");
        }
    }
    let output = child.wait_with_output().expect("waiting for command");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn repo_root() -> PathBuf {
    crate::cluster::e2e_dir().join("..")
}

/// Renders `config/rbac/<service_account>.yaml` into `namespace` with `suffix` on every name, as
/// a list of JSON objects.
pub fn render_rbac(
    cluster: &Cluster,
    service_account: &str,
    namespace: &str,
    suffix: &str,
) -> Vec<Value> {
    let dir = std::env::temp_dir().join(format!(
        "e2e-rbac-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp overlay dir");
    let file = repo_root()
        .join("config/rbac")
        .join(format!("{service_account}.yaml"));
    let file = file.canonicalize().expect("config/rbac file");
    // kustomize takes only relative paths; the file lies outside the overlay's root, hence
    // --load-restrictor below.
    let relative = relative_path(&dir, &file);
    // config/rbac's name references (a policy binding names its policy).
    let configuration = relative_path(
        &dir,
        &repo_root()
            .join("config/rbac/kustomizeconfig.yaml")
            .canonicalize()
            .expect("config/rbac/kustomizeconfig.yaml"),
    );
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: {namespace}\nnameSuffix: {suffix}\nresources:\n- {relative}\nconfigurations:\n- {configuration}\n"
        ),
    )
    .expect("writing overlay");
    let mut command = kubectl(cluster);
    command
        .args(["kustomize", "--load-restrictor", "LoadRestrictionsNone"])
        .arg(&dir);
    let yaml = run(command, None);
    let _ = std::fs::remove_dir_all(&dir);
    yaml_to_json(&yaml)
}

/// The objects of a multi-document YAML stream (kustomize output) as JSON values.
pub fn yaml_to_json(yaml: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(yaml)
        .map(|document| Value::deserialize(document).expect("YAML document"))
        .filter(|value| !value.is_null())
        .collect()
}

fn relative_path(from_dir: &Path, to: &Path) -> String {
    let depth = from_dir.components().count().saturating_sub(1);
    let up = "../".repeat(depth);
    format!(
        "{up}{}",
        to.strip_prefix("/").unwrap_or(to).to_string_lossy()
    )
}

/// Rewrites the shipped `resourceNames` to the names the process uses.
fn bind_resource_names(objects: &mut [Value], binary: &str, args: &[&str], env: &[(&str, String)]) {
    let renames: Vec<(&str, &str, String)> = named_resources(binary)
        .into_iter()
        .filter_map(|named| {
            flag_value(args, env, named.flag).map(|value| (named.resource, named.shipped, value))
        })
        .collect();
    for object in objects.iter_mut() {
        let Some(rules) = object.get_mut("rules").and_then(Value::as_array_mut) else {
            continue;
        };
        for rule in rules {
            let resources: Vec<String> = rule["resources"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let Some(names) = rule.get_mut("resourceNames").and_then(Value::as_array_mut) else {
                continue;
            };
            for name in names.iter_mut() {
                for (resource, shipped, actual) in &renames {
                    if resources.iter().any(|r| r == resource) && name.as_str() == Some(shipped) {
                        *name = json!(actual);
                    }
                }
            }
        }
    }
}

/// A ServiceAccount with the shipped RBAC of one binary, and a kubeconfig that authenticates as
/// it. Dropping it deletes the cluster-scoped objects (the namespaced ones go with the namespace).
pub struct ServiceAccountIdentity {
    pub namespace: String,
    pub service_account: String,
    pub kubeconfig: PathBuf,
    /// `kind/name` of the ClusterRoles and ClusterRoleBindings it created.
    cluster_objects: Vec<String>,
    cluster_kubeconfig: PathBuf,
    path: String,
    /// A namespace made for this identity (when the process named none), deleted on drop.
    owned_namespace: Option<String>,
    /// What the rendering appended to every name of the shipped RBAC.
    suffix: String,
}

impl ServiceAccountIdentity {
    /// The identity a controller process runs as: `binary`'s RBAC in `namespace`, resourceNames
    /// bound from `args`/`env`. `edit` may change the rendered objects (negative tests remove a
    /// rule).
    pub fn create(
        cluster: &Cluster,
        binary: &str,
        namespace: &str,
        args: &[&str],
        env: &[(&str, String)],
        edit: impl FnOnce(&mut Vec<Value>),
    ) -> ServiceAccountIdentity {
        let service_account = service_account_for(binary)
            .unwrap_or_else(|| panic!("{binary} has no ServiceAccount in config/rbac"));
        let suffix = format!(
            "-{}x{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut objects = render_rbac(cluster, service_account, namespace, &suffix);
        bind_resource_names(&mut objects, binary, args, env);
        edit(&mut objects);

        // Cluster-scoped objects are owned by the namespace: if the test is killed before the
        // drop, deleting its namespace still removes them.
        let mut command = kubectl(cluster);
        command.args([
            "get",
            "namespace",
            namespace,
            "-o",
            "jsonpath={.metadata.uid}",
        ]);
        let uid = run(command, None);
        let mut cluster_objects = Vec::new();
        for object in &mut objects {
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            if CLUSTER_SCOPED.contains(&kind.as_str()) {
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                cluster_objects.push(format!("{}/{name}", kind.to_lowercase()));
                object["metadata"]["ownerReferences"] = json!([{
                    "apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": uid,
                }]);
            }
        }
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let mut command = kubectl(cluster);
        command.args([
            "apply",
            "--server-side",
            "--field-manager",
            FIELD_MANAGER,
            "-f",
            "-",
        ]);
        run(command, Some(list.to_string().as_bytes()));

        let service_account = format!("{service_account}{suffix}");
        let kubeconfig = write_token_kubeconfig(cluster, namespace, &service_account);
        ServiceAccountIdentity {
            namespace: namespace.to_string(),
            service_account,
            kubeconfig,
            cluster_objects,
            cluster_kubeconfig: cluster.kubeconfig.clone(),
            path: path_with_cluster_tools(cluster),
            owned_namespace: None,
            suffix,
        }
    }

    /// The identity [`crate::process::ControllerProcess`] gives `binary` when
    /// [`AS_SERVICE_ACCOUNT_ENV`] is set: its namespace is the process's Lease namespace
    /// (`--lease-namespace` / `POD_NAMESPACE`) or `--tls-secret-namespace`, else a namespace
    /// made for it.
    pub fn for_process(
        binary: &str,
        args: &[&str],
        env: &[(&str, String)],
    ) -> Option<ServiceAccountIdentity> {
        if !as_service_account() {
            return None;
        }
        service_account_for(binary)?;
        let cluster = Cluster::get();
        let named = flag_value(args, env, "--lease-namespace")
            .or_else(|| flag_value(args, env, "--tls-secret-namespace"));
        let (namespace, owned) = match named {
            Some(namespace) => (namespace, false),
            None => {
                let namespace = format!(
                    "e2e-sa-{}x{}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed)
                );
                let mut command = kubectl(&cluster);
                command.args(["create", "namespace", &namespace]);
                run(command, None);
                (namespace, true)
            }
        };
        let mut identity = Self::create(&cluster, binary, &namespace, args, env, |_| {});
        if owned {
            identity.owned_namespace = Some(namespace);
        }
        Some(identity)
    }

    /// The name an object of the shipped RBAC named `shipped` was given for this identity (e.g.
    /// a ClusterRole the docs tell users to bind themselves).
    pub fn rendered_name(&self, shipped: &str) -> String {
        format!("{shipped}{}", self.suffix)
    }

    /// `system:serviceaccount:<namespace>:<name>`, the user the API server sees.
    pub fn username(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }

    /// A kube client authenticated as the ServiceAccount.
    pub async fn client(&self) -> kube::Client {
        client_of(&self.kubeconfig).await
    }
}

/// The user the API server sees for `client` (a SelfSubjectReview).
pub async fn username(client: &kube::Client) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    let review = reviews
        .create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
        .expect("a SelfSubjectReview");
    review
        .status
        .and_then(|status| status.user_info)
        .and_then(|user| user.username)
        .expect("the reviewed user's name")
}

/// A client authenticated as ServiceAccount `namespace/service_account`, with a token from the
/// TokenRequest API: what a user holding that account's bindings can do, no more.
pub async fn service_account_client(
    cluster: &Cluster,
    namespace: &str,
    service_account: &str,
) -> kube::Client {
    let path = write_token_kubeconfig(cluster, namespace, service_account);
    let client = client_of(&path).await;
    let _ = std::fs::remove_file(&path);
    client
}

async fn client_of(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("kubeconfig");
    config.default_retry = false;
    kube::Client::try_from(config).expect("kube client")
}

/// A token from the TokenRequest API (`kubectl create token`) and a kubeconfig with the
/// cluster's server and CA.
pub fn write_token_kubeconfig(
    cluster: &Cluster,
    namespace: &str,
    service_account: &str,
) -> PathBuf {
    let mut command = kubectl(cluster);
    command.args([
        "create",
        "token",
        service_account,
        "-n",
        namespace,
        "--duration=2h",
    ]);
    let token = run(command, None).trim().to_string();
    let mut command = kubectl(cluster);
    command.args([
        "config",
        "view",
        "--raw",
        "--minify",
        "--flatten",
        "-o",
        "json",
    ]);
    let admin: Value = serde_json::from_str(&run(command, None)).expect("kubeconfig JSON");
    let server = admin["clusters"][0]["cluster"]["server"].clone();
    let ca = admin["clusters"][0]["cluster"]["certificate-authority-data"].clone();
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": service_account, "namespace": namespace}}],
        "current-context": "e2e",
    });
    let path = std::env::temp_dir().join(format!("e2e-kubeconfig-{namespace}-{service_account}"));
    std::fs::write(&path, kubeconfig.to_string()).expect("writing kubeconfig");
    path
}

impl Drop for ServiceAccountIdentity {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        let mut objects = self.cluster_objects.clone();
        if let Some(namespace) = &self.owned_namespace {
            objects.push(format!("namespace/{namespace}"));
        }
        if objects.is_empty() {
            return;
        }
        let _ = Command::new("kubectl")
            .env("PATH", &self.path)
            .arg("--kubeconfig")
            .arg(&self.cluster_kubeconfig)
            .args(["delete", "--ignore-not-found", "--wait=false"])
            .args(&objects)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether the ServiceAccount `account` (namespace, name) may `verb` the core-group `resource` in
/// `namespace`, asked through a SubjectAccessReview with the groups its tokens carry.
pub async fn service_account_may(
    client: &kube::Client,
    account: (&str, &str),
    verb: &str,
    resource: &str,
    namespace: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{}:{}", account.0, account.1)),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", account.0),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                namespace: Some(namespace.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    kube::Api::<SubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|status| status.allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_are_found_in_both_forms_and_env() {
        let env = [("POD_NAMESPACE", "ns-env".to_string())];
        assert_eq!(
            flag_value(&["--lease-name", "a"], &[], "--lease-name").as_deref(),
            Some("a")
        );
        assert_eq!(
            flag_value(&["--lease-name=b"], &[], "--lease-name").as_deref(),
            Some("b")
        );
        assert_eq!(
            flag_value(&[], &env, "--lease-namespace").as_deref(),
            Some("ns-env")
        );
        assert_eq!(flag_value(&["--x"], &[], "--tls-secret-name"), None);
    }

    #[test]
    fn resource_names_follow_the_process_flags() {
        let mut objects = vec![json!({
            "kind": "Role",
            "rules": [
                {"resources": ["leases"], "resourceNames": ["zdb-controller"], "verbs": ["get"]},
                {"resources": ["secrets"], "resourceNames": ["zdb-webhook-tls"], "verbs": ["get"]},
                {"resources": ["validatingwebhookconfigurations"], "resourceNames": ["zone-aware-eviction-webhook"], "verbs": ["patch"]},
            ],
        })];
        bind_resource_names(
            &mut objects,
            "zdb-controller",
            &[
                "--lease-name",
                "l1",
                "--tls-secret-name=s1",
                "--webhook-config-name",
                "w1",
            ],
            &[],
        );
        let names: Vec<&str> = objects[0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["resourceNames"][0].as_str().unwrap())
            .collect();
        assert_eq!(names, ["l1", "s1", "w1"]);
    }

    #[test]
    fn relative_paths_climb_to_the_root() {
        assert_eq!(
            relative_path(Path::new("/tmp/x"), Path::new("/work/a.yaml")),
            "../../work/a.yaml"
        );
    }
}
