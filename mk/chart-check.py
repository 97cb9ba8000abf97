#!/usr/bin/env python3
"""The Helm chart and config/ may not drift: `make chart-check`.

For each scenario, renders the chart (`helm template`) and what `make deploy` applies
(mk/render-deploy.sh: config/default through kustomize, with the same namespace, image and
components) and compares them object by object: kind/namespace/name -> the object, after removing
only the bookkeeping labels Helm and kustomize add. config/default's Namespace is left out (Helm
installs into the release namespace, which it does not own: docs/helm.md says how to label it).
Prints the first differing object and field, and exits 1.

Also checks that the chart's copies of generated files (crds/, files/prometheus-rule.yaml) are
byte for byte those of config/.
"""

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chart_yaml import yaml  # noqa: E402  (PyYAML, installed into the tools cache if missing)

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "zone-aware-controllers"
RELEASE = "zone-aware-controllers"
NAMESPACE = "zone-aware-system"

# Labels that say who rendered an object, not what it is.
BOOKKEEPING_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
}

# (name, helm --set values, config/ components, standalone kustomizations): the defaults, every
# optional component of `make deploy` against the chart values that stand for it, and the
# kustomizations applied on their own in another namespace (config/thanos, in the
# ShardedPrometheus's) against theirs.
SCENARIOS = [
    ("defaults", [], [], []),
    (
        "options (MONITORING=1 CERT_MANAGER=1 ZAU_POD_REMOVAL=delete)",
        [
            "monitoring.enabled=true",
            "webhook.certificate.mode=certManager",
            "zauController.podRemoval=delete",
        ],
        ["config/certmanager", "config/rbac/pod-delete", "config/monitoring"],
        [],
    ),
    ("thanos (config/thanos)", ["thanos.enabled=true"], [], ["config/thanos"]),
]

# The chart's copies of files generated into config/, and the target that writes both.
COPIES = [
    (f"crds/{path.name}", f"config/crd/{path.name}", "make crds")
    for path in sorted((ROOT / "config" / "crd").glob("zonecontrol.k8s.aws_*.yaml"))
] + [("files/prometheus-rule.yaml", "config/monitoring/prometheus-rule.yaml", "make mixin")]




def run(command, env=None):
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"chart-check: {' '.join(command)} failed:\n{result.stderr}")
    return result.stdout


def chart_image():
    """The image the chart renders by default: repository:v<appVersion>."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    image = values["image"]
    if image.get("digest"):
        return f"{image['repository']}@{image['digest']}"
    return f"{image['repository']}:{image.get('tag') or 'v' + str(chart['appVersion'])}"


def render_chart(helm, sets):
    """The release's objects (`helm test`'s hook objects left out: config/ has none)."""
    command = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--skip-tests"]
    for value in sets:
        command += ["--set", value]
    return run(command)


def refused(helm, sets, says):
    """Whether `helm template` with `sets` fails saying `says`."""
    command = [helm, "template", RELEASE, str(CHART)]
    for value in sets:
        command += ["--set", value]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    return result.returncode != 0 and says in result.stderr


def render_config(kubectl, components):
    env = dict(os.environ)
    env.update(
        NAMESPACE=NAMESPACE,
        IMG=chart_image(),
        DEPLOY_BASE="config/default",
        DEPLOY_COMPONENTS=" ".join(components),
        KUBECTL=kubectl,
    )
    return run(["bash", "mk/render-deploy.sh"], env=env)


# Cluster-scoped kinds that kustomize's built-in schema does not know: it gives them the
# namespace of the overlay, which the API server drops.
CLUSTER_SCOPED_UNKNOWN_TO_KUSTOMIZE = {
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def strip_bookkeeping(obj):
    if obj.get("kind") in CLUSTER_SCOPED_UNKNOWN_TO_KUSTOMIZE:
        obj.get("metadata", {}).pop("namespace", None)
    labels = obj.get("metadata", {}).get("labels")
    if isinstance(labels, dict):
        for label in BOOKKEEPING_LABELS:
            labels.pop(label, None)
        if not labels:
            del obj["metadata"]["labels"]
    return obj


def objects_by_key(text, side):
    objects = {}
    for obj in yaml.safe_load_all(text):
        if not obj:
            continue
        obj = strip_bookkeeping(obj)
        meta = obj.get("metadata", {})
        key = (obj.get("kind"), meta.get("namespace") or "", meta.get("name"))
        if key in objects:
            sys.exit(f"chart-check: {side} renders {format_key(key)} twice")
        objects[key] = obj
    return objects


def format_key(key):
    kind, namespace, name = key
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def first_difference(chart, config, path=""):
    """The path of the first field where the two differ, with both values; None if equal."""
    if isinstance(chart, dict) and isinstance(config, dict):
        for field in sorted(set(chart) | set(config)):
            here = f"{path}.{field}" if path else field
            if field not in chart:
                return here, "<absent>", config[field]
            if field not in config:
                return here, chart[field], "<absent>"
            found = first_difference(chart[field], config[field], here)
            if found:
                return found
        return None
    if isinstance(chart, list) and isinstance(config, list):
        for index, (a, b) in enumerate(zip(chart, config)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        if len(chart) != len(config):
            index = min(len(chart), len(config))
            return (
                f"{path}[{index}]",
                chart[index] if index < len(chart) else "<absent>",
                config[index] if index < len(config) else "<absent>",
            )
        return None
    if chart != config:
        return path, chart, config
    return None


def show(value):
    if isinstance(value, (dict, list)):
        return "\n" + yaml.safe_dump(value, sort_keys=True).rstrip()
    return repr(value)


def compare(name, chart_text, config_text):
    chart = objects_by_key(chart_text, "the chart")
    config = objects_by_key(config_text, "config/")
    namespaces = [key for key in config if key[0] == "Namespace"]
    if namespaces != [("Namespace", "", NAMESPACE)]:
        return f"config/ renders the Namespaces {namespaces}, expected only {NAMESPACE}"
    del config[namespaces[0]]
    for key in sorted(set(chart) | set(config), key=lambda k: tuple(map(str, k))):
        if key not in config:
            return f"{format_key(key)}: rendered by the chart only"
        if key not in chart:
            return f"{format_key(key)}: rendered by config/ only"
        found = first_difference(chart[key], config[key])
        if found:
            field, in_chart, in_config = found
            return (
                f"{format_key(key)}: field {field} differs\n"
                f"  chart:   {show(in_chart)}\n  config/: {show(in_config)}"
            )
    print(f"chart-check: {name}: the chart and config/ render the same {len(chart)} objects")
    return None


# rulesFederator.tls.mode -> (the federator's TLS flag, its port's name and probe scheme, the
# chart-only objects of that mode): modes config/ has no component for, checked on their own.
FEDERATOR_TLS_MODES = {
    "selfSigned": ("--tls-self-signed-secret=rules-federator-tls", "https", {"Role", "RoleBinding"}),
    "certManager": ("--tls-cert-dir=/etc/federator-serving", "https", {"Certificate", "Issuer"}),
    "none": (None, "http", set()),
}


def check_federator_tls_modes(helm):
    """Each rulesFederator.tls.mode renders its flag, port, probes and objects; another fails."""
    for mode, (flag, port, kinds) in FEDERATOR_TLS_MODES.items():
        objects = [o for o in yaml.safe_load_all(render_chart(helm, [f"rulesFederator.tls.mode={mode}"])) if o]
        federator = [o for o in objects if o["metadata"]["name"].startswith("rules-federator")]
        deployment = next(o for o in federator if o["kind"] == "Deployment")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        tls_flags = [a for a in container["args"] if a.startswith("--tls-")]
        probes = {container[p]["httpGet"]["scheme"] for p in ("livenessProbe", "readinessProbe")}
        found = {o["kind"] for o in federator} & {"Role", "RoleBinding", "Certificate", "Issuer"}
        if tls_flags != ([flag] if flag else []) or container["ports"][0]["name"] != port \
                or probes != {port.upper()} or found != kinds:
            sys.exit(f"chart-check: rulesFederator.tls.mode={mode}: flags {tls_flags}, port "
                     f"{container['ports'][0]['name']}, probes {probes}, objects {sorted(found)}")
    if not refused(helm, ["rulesFederator.tls.mode=plain"], "'selfSigned', 'certManager', 'none'"):
        sys.exit("chart-check: rulesFederator.tls.mode=plain was not refused with its reason")
    print(f"chart-check: rulesFederator.tls.mode {', '.join(FEDERATOR_TLS_MODES)} render as designed")


CONTROLLER_VALUES = {"zauController": "zau-controller", "zdbController": "zdb-controller",
                     "shardController": "shard-controller", "rulesFederator": "rules-federator"}


def budgets(helm, sets):
    """The controllers' PodDisruptionBudgets the chart renders with `sets`: name -> their limit."""
    objects = [o for o in yaml.safe_load_all(render_chart(helm, sets)) if o]
    return {o["metadata"]["name"]: {k: v for k, v in o["spec"].items() if k != "selector"}
            for o in objects if o["kind"] == "PodDisruptionBudget"
            and o["metadata"]["name"] in CONTROLLER_VALUES.values()}


def check_pod_disruption_budgets(helm):
    """A controller's PodDisruptionBudget is rendered with two replicas or more, none at one (a
    drain of its node could never finish); its limit is the values'; both limits are refused."""
    everywhere = budgets(helm, [])
    if set(everywhere) != set(CONTROLLER_VALUES.values()):
        sys.exit(f"chart-check: podDisruptionBudget: by default {sorted(everywhere)}, not every controller's")
    single = budgets(helm, [f"{values}.replicas=1" for values in CONTROLLER_VALUES])
    if single:
        sys.exit(f"chart-check: podDisruptionBudget: rendered at one replica: {single}")
    changed = budgets(helm, ["zdbController.podDisruptionBudget.maxUnavailable=1",
                             "rulesFederator.podDisruptionBudget.enabled=false"])
    if changed.get("zdb-controller") != {"maxUnavailable": 1} or "rules-federator" in changed:
        sys.exit(f"chart-check: podDisruptionBudget: the values' limit and enabled not followed: {changed}")
    both = ["zdbController.podDisruptionBudget.minAvailable=1", "zdbController.podDisruptionBudget.maxUnavailable=1"]
    if not refused(helm, both, "not both"):
        sys.exit("chart-check: podDisruptionBudget: minAvailable with maxUnavailable was not refused")
    print("chart-check: the controllers' PodDisruptionBudgets follow their values, none at one replica")


def check_values_schema(helm):
    """values.schema.json refuses a misspelled value, naming it, at the top and deep down."""
    for sets, named in [(["zauControler.enabled=false"], "'zauControler'"),
                        (["zdbController.replicaCount=3"], "'replicaCount'"),
                        (["rulesFederator.tls.issureRef.name=ca"], "'issureRef'"),
                        (["shardController.podDisruptionBudget.minAvailable=true"], "minAvailable")]:
        if not refused(helm, sets, named):
            sys.exit(f"chart-check: values.schema.json: {sets[0]} was not refused naming {named}")
    print("chart-check: values.schema.json refuses misspelled and mistyped values, naming them")


def chart_objects(helm, values):
    """The objects the chart renders with a values file of `values`."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(values, file)
        file.flush()
        text = run([helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", file.name])
    return [o for o in yaml.safe_load_all(text) if o]


def check_pod_values(helm):
    """A ServiceAccount of the user's (bound, matched by the admission policies, named in the
    zdb-controller's rollout user), extra volumes, security contexts and spread overridden, and
    extraObjects rendered as templates."""
    objects = chart_objects(helm, {
        "zauController": {"serviceAccount": {"create": False, "name": "platform-zau"},
                          "extraVolumes": [{"name": "creds", "secret": {"secretName": "aws"}}],
                          "extraVolumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
        "podSecurityContext": {"runAsUser": None, "runAsGroup": None},
        "securityContext": {"readOnlyRootFilesystem": True},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "DoNotSchedule"}],
        "extraObjects": [{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "extra", "namespace": "{{ .Release.Namespace }}"}}],
    })
    found = lambda kind, name: [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    deployment = found("Deployment", "zau-controller")[0]["spec"]["template"]["spec"]
    zdb = found("Deployment", "zdb-controller")[0]["spec"]["template"]["spec"]
    subjects = [s["name"] for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
                for s in o["subjects"] if "zau" in o["metadata"]["name"]]
    policy = found("ValidatingAdmissionPolicy", "zone-aware-zau-controller-writes")[0]["spec"]
    problems = {
        "a ServiceAccount zau-controller is still created": found("ServiceAccount", "zau-controller"),
        "the Deployment does not run as platform-zau": deployment["serviceAccountName"] != "platform-zau",
        f"bindings of {subjects}": set(subjects) != {"platform-zau"},
        "the admission policy does not match platform-zau": policy["matchConditions"][0]["expression"]
        != f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:platform-zau'",
        "the zdb-controller's rollout user is not platform-zau": not any(
            a.endswith(":platform-zau") for a in zdb["containers"][0]["args"] if a.startswith("--rollout-user")),
        "the extra volume is not mounted": deployment.get("volumes") != [{"name": "creds", "secret": {"secretName": "aws"}}]
        or deployment["containers"][0].get("volumeMounts") != [{"name": "creds", "mountPath": "/creds"}],
        "the pod security context keeps its user": "runAsUser" in deployment["securityContext"]
        or deployment["securityContext"].get("runAsNonRoot") is not True,
        "the container security context is not the values'": deployment["containers"][0]["securityContext"]
        != {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "the spread is not the values' with the binary's selector": deployment["topologySpreadConstraints"]
        != [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "zau-controller"}}}],
        "the extra object is missing or not templated": [o["metadata"].get("namespace")
                                                         for o in found("ConfigMap", "extra")] != [NAMESPACE],
    }
    failed = [problem for problem, present in problems.items() if present]
    if failed:
        sys.exit(f"chart-check: pod values: {'; '.join(failed)}")
    if not refused(helm, ["zdbController.serviceAccount.create=false"], "name the ServiceAccount"):
        sys.exit("chart-check: serviceAccount.create=false without a name was not refused")
    print("chart-check: a ServiceAccount of the user's, extra volumes and objects, security contexts "
          "and spread render from the values")


def check_test_hook(helm):
    """`helm test` runs `kubectl zone check` from the image in a namespace the webhook covers
    (watchNamespace, else default), and its ServiceAccount may evict only its own pod."""
    for sets, namespace in [([], "default"), ([f"watchNamespace={WATCH_NAMESPACE}"], WATCH_NAMESPACE)]:
        command = [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                   "--show-only", "templates/tests/check.yaml"]
        for value in sets:
            command += ["--set", value]
        objects = [o for o in yaml.safe_load_all(run(command)) if o]
        pod = next(o for o in objects if o["kind"] == "Pod")
        evict = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == namespace)
        container = pod["spec"]["containers"][0]
        problems = [
            pod["metadata"]["namespace"] != namespace and f"the pod runs in {pod['metadata']['namespace']}",
            container["command"] != ["/kubectl-zone"] and f"the pod runs {container['command']}",
            container["args"][:3] != ["check", "--namespace", NAMESPACE] and f"its arguments {container['args']}",
            any(o["metadata"]["annotations"].get("helm.sh/hook") != "test" for o in objects) and "an object is no test hook",
            evict["rules"] != [{"apiGroups": [""], "resources": ["pods/eviction"],
                                "resourceNames": [pod["metadata"]["name"]], "verbs": ["create"]}]
            and f"its eviction rights {evict['rules']}",
        ]
        failed = [p for p in problems if p]
        if failed:
            sys.exit(f"chart-check: helm test ({sets or 'defaults'}): {'; '.join(failed)}")
    print("chart-check: helm test runs `kubectl zone check` in a namespace the webhook covers")


# Cluster-scoped resources a controller's ClusterRole keeps with watchNamespace (events too: some
# concern cluster-scoped objects, whose Events live in `default`).
CLUSTER_RESOURCES = {"nodes", "namespaces", "subjectaccessreviews", "events",
                     "validatingwebhookconfigurations"}
WATCH_NAMESPACE = "team-a"


def rbac(objects, kind, name, namespace=None):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name
             and o["metadata"].get("namespace") == namespace]
    return found[0] if found else None


def check_watch_namespace_roles(helm):
    """With watchNamespace, each controller's namespaced rules move from its ClusterRole into a
    Role of that namespace (bound to its ServiceAccount); together they grant what the
    ClusterRole alone grants by default."""
    default = [o for o in yaml.safe_load_all(render_chart(helm, [])) if o]
    sets = [f"watchNamespace={WATCH_NAMESPACE}", "zauController.podRemoval=delete"]
    watched = [o for o in yaml.safe_load_all(render_chart(helm, sets)) if o]
    prefix = "zone-aware"  # the chart's prefix of cluster-scoped names for RELEASE
    for binary in ("zau-controller", "zdb-controller", "shard-controller"):
        name = f"{prefix}-{binary}"
        everything = rbac(default, "ClusterRole", name)["rules"]
        cluster = rbac(watched, "ClusterRole", name)["rules"]
        role = rbac(watched, "Role", name, WATCH_NAMESPACE)
        binding = rbac(watched, "RoleBinding", name, WATCH_NAMESPACE)
        wide = sorted({r for rule in cluster for r in rule["resources"]} - CLUSTER_RESOURCES)
        if role is None or binding is None or wide:
            sys.exit(f"chart-check: watchNamespace: {binary}: Role {role is not None}, RoleBinding "
                     f"{binding is not None}, namespaced resources left in its ClusterRole {wide}")
        if binding["subjects"][0]["name"] != binary or binding["roleRef"] != \
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}:
            sys.exit(f"chart-check: watchNamespace: {binary}: RoleBinding {binding}")
        key = lambda rule: yaml.safe_dump(rule, sort_keys=True)
        if sorted(map(key, role["rules"] + cluster)) != sorted(map(key, everything)):
            sys.exit(f"chart-check: watchNamespace: {binary}: the Role and ClusterRole do not "
                     "grant together what the ClusterRole grants without it")
    delete = rbac(watched, "RoleBinding", f"{prefix}-zau-pod-delete", WATCH_NAMESPACE)
    if delete is None or rbac(watched, "ClusterRoleBinding", f"{prefix}-zau-pod-delete"):
        sys.exit("chart-check: watchNamespace: podRemoval=delete is not bound in that namespace only")
    print("chart-check: watchNamespace: the controllers' namespaced rules are Roles of that namespace")


def check_show_crds(helm):
    """`helm show crds` of the packaged chart, which docs/helm.md pipes into `kubectl apply` on
    every upgrade, is every CRD of config/crd as its own document (Helm joins the files as they
    are: one without its `---` would merge into the one before and hide it)."""
    with tempfile.TemporaryDirectory() as out:
        run([helm, "package", str(CHART), "--destination", out])
        package = next(Path(out).glob("*.tgz"))
        shown = [o for o in yaml.safe_load_all(run([helm, "show", "crds", str(package)])) if o]
    names = sorted(o["metadata"]["name"] for o in shown)
    expected = sorted(yaml.safe_load(open(ROOT / original))["metadata"]["name"]
                      for copy, original, _ in COPIES if copy.startswith("crds/"))
    if names != expected:
        sys.exit(f"chart-check: `helm show crds` gives {names}, not every CRD {expected}")
    print(f"chart-check: `helm show crds` gives the {len(names)} CRDs, each its own document")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helm", required=True)
    parser.add_argument("--kubectl", required=True)
    args = parser.parse_args()

    for copy, original, target in COPIES:
        if not (CHART / copy).is_file() or not filecmp.cmp(CHART / copy, ROOT / original, shallow=False):
            sys.exit(f"chart-check: charts/zone-aware-controllers/{copy} is not {original}: run `{target}`")
    extra = {p.name for p in (CHART / "crds").iterdir()} - {Path(c).name for c, _, _ in COPIES if c.startswith("crds/")}
    if extra:
        sys.exit(f"chart-check: charts/zone-aware-controllers/crds/ holds {sorted(extra)}, not in config/crd/")

    check_show_crds(args.helm)
    check_federator_tls_modes(args.helm)
    check_watch_namespace_roles(args.helm)
    check_pod_disruption_budgets(args.helm)
    check_values_schema(args.helm)
    check_pod_values(args.helm)
    check_test_hook(args.helm)
    failed = False
    for name, sets, components, standalone in SCENARIOS:
        config = render_config(args.kubectl, components)
        for directory in standalone:
            config += "\n---\n" + run([args.kubectl, "kustomize", directory])
        difference = compare(name, render_chart(args.helm, sets), config)
        if difference:
            print(f"chart-check: {name}: the chart and config/ differ: {difference}", file=sys.stderr)
            failed = True
    if failed:
        print(
            "chart-check: change charts/zone-aware-controllers/templates and config/ together "
            "(docs/helm.md)",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
