#!/usr/bin/env python3
"""The chart's values.schema.json, generated from values.yaml: `make chart-schema` writes it,
`--check` (in `make chart-check`) fails when it is not what values.yaml generates.

Each key of values.yaml becomes a property whose type is its default's and whose description is
the comment above it; a mapping with keys is closed (additionalProperties: false), so Helm refuses
a misspelled value and names it. What a default cannot say (enums, free-form Kubernetes objects,
the limits a PodDisruptionBudget takes) is in OVERRIDES, by path (`*` for any key).
"""

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chart_yaml import yaml  # noqa: E402  (PyYAML, installed into the tools cache if missing)

CHART = Path(__file__).resolve().parent.parent / "charts" / "zone-aware-controllers"
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"

ANY_OBJECT = {"type": "object"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECTS = {"type": "array", "items": {"type": "object"}}
INT_OR_STRING = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+%$"}]}

# Path -> the schema that replaces (or, with "merge", extends) the generated one.
OVERRIDES = {
    "image.pullPolicy": {"enum": ["IfNotPresent", "Always", "Never"]},
    "image.digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
    "imagePullSecrets": OBJECTS,
    "commonLabels": STRING_MAP,
    "podAnnotations": STRING_MAP,
    "nodeSelector": STRING_MAP,
    "affinity": ANY_OBJECT,
    "tolerations": OBJECTS,
    "podSecurityContext": ANY_OBJECT,
    "securityContext": ANY_OBJECT,
    "topologySpreadConstraints": OBJECTS,
    "extraObjects": {"type": "array", "items": {"type": ["object", "string"]}},
    "webhook.certificate.mode": {"enum": ["selfSigned", "certManager"]},
    "webhook.certificate.issuerRef": ANY_OBJECT,
    "rulesFederator.tls.mode": {"enum": ["selfSigned", "certManager", "none"]},
    "rulesFederator.tls.issuerRef": ANY_OBJECT,
    "rulesFederator.grpc.port": {"type": "integer", "minimum": 1, "maximum": 65535},
    "zauController.podRemoval": {"enum": ["evict", "delete"]},
    "*.replicas": {"type": "integer", "minimum": 0},
    "*.resources": ANY_OBJECT,
    "thanos.*.resources": ANY_OBJECT,
    "*.extraArgs": {"type": "array", "items": {"type": "string"}},
    "*.extraEnv": OBJECTS,
    "*.extraVolumes": OBJECTS,
    "*.extraVolumeMounts": OBJECTS,
    "*.serviceAccount.annotations": STRING_MAP,
    "*.podDisruptionBudget": {
        "merge": True,
        "properties": {"minAvailable": INT_OR_STRING, "maxUnavailable": INT_OR_STRING},
    },
}


def comments(text):
    """Dotted path -> the comment lines right above its key (keys of mappings only)."""
    found, stack, pending = {}, [], []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = re.match(r"^( *)([A-Za-z][\w-]*):", line)
        if not match:
            pending = []
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        if pending:
            found[".".join(key for _, key in stack)] = " ".join(pending)
        pending = []
    return found


def override(path):
    """The override of `path`: an exact one, else the first whose `*` parts match."""
    if path in OVERRIDES:
        return OVERRIDES[path]
    parts = path.split(".")
    for pattern, schema in OVERRIDES.items():
        if "*" not in pattern:
            continue
        keys = pattern.split(".")
        if len(keys) == len(parts) and all(k in ("*", p) for k, p in zip(keys, parts)):
            return schema
    return None


def schema_of(value, path, described):
    schema = {}
    if path in described:
        schema["description"] = described[path]
    replacement = override(path)
    if replacement is not None and not replacement.get("merge"):
        return {**schema, **replacement}
    if isinstance(value, dict) and value:
        schema["type"] = "object"
        schema["properties"] = {
            key: schema_of(child, f"{path}.{key}" if path else key, described)
            for key, child in value.items()
        }
        if replacement is not None:
            schema["properties"].update(replacement["properties"])
        schema["additionalProperties"] = False
    elif isinstance(value, dict):
        schema["type"] = "object"
    elif isinstance(value, list):
        schema["type"] = "array"
    elif isinstance(value, bool):
        schema["type"] = "boolean"
    elif isinstance(value, int):
        schema["type"] = "integer"
    elif isinstance(value, str):
        schema["type"] = "string"
    return schema


def generate():
    text = VALUES.read_text()
    root = schema_of(yaml.safe_load(text), "", comments(text))
    # Helm passes `global` to every chart.
    root["properties"]["global"] = {"type": "object"}
    return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", **root}, indent=2) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if values.schema.json is stale")
    args = parser.parse_args()
    wanted = generate()
    if args.check:
        if not SCHEMA.is_file() or SCHEMA.read_text() != wanted:
            sys.exit("values-schema: charts/zone-aware-controllers/values.schema.json is not what "
                     "values.yaml generates: run `make chart-schema`")
        print("values-schema: values.schema.json is values.yaml's")
        return
    SCHEMA.write_text(wanted)
    print(f"values-schema: wrote {SCHEMA.relative_to(CHART.parent.parent)}")


if __name__ == "__main__":
    main()
