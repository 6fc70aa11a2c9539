#!/usr/bin/env python3
"""Regenerates the two tables `sim serve` reads for the built-in Kubernetes types (v1.33):

- openapi-extensions.json: the `x-kubernetes-*` extensions of every definition of the
  Kubernetes 1.33 OpenAPI document (group-version-kind, patch strategy and merge key, list
  type and map keys, map type, unions), per definition ("" for the definition itself) and
  property. k8s-openapi's schemas (the `schemars` feature) carry the rest of each schema but
  not these.
- protobuf-fields.json: for each protobuf message of the served built-in kinds, its fields as
  (tag, JSON name, type, cardinality), read from the prost bindings of the `k8s-pb` crate (the
  generated.proto files of Kubernetes); JSON names are matched to the OpenAPI properties.

Inputs (both from package registries):
  DEFS: kubernetes_validate/kubernetes-json-schema/v1.33.0-local/_definitions.json from the
        PyPI wheel `kubernetes-validate` (1.37.0), the 1.33 OpenAPI definitions with their
        extensions;
  PB:   the `src` folder of the crate `k8s-pb` 0.9.0 (`cargo info k8s-pb` downloads it into
        ~/.cargo/registry/src/*/k8s-pb-0.9.0).

Usage: python3 generate.py DEFS PB   (writes both files beside this script)
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The top-level kinds whose protobuf bodies the server decodes (and what they embed).
PROTOBUF_ROOTS = [
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.policy.v1.Eviction",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.events.v1.Event",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.apps.v1.ReplicaSet",
    "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
]

# Messages the decoder renders itself (their JSON form is not their fields).
SPECIAL = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Duration",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
}

TOP = {
    "api": "io.k8s.api",
    "apimachinery": "io.k8s.apimachinery",
    "apiextensions_apiserver": "io.k8s.apiextensions-apiserver",
    "kube_aggregator": "io.k8s.kube-aggregator",
}


def extensions(defs):
    out = {}
    for name in sorted(defs):
        d = defs[name]
        entry = {}
        top = {k: v for k, v in d.items() if k.startswith("x-kubernetes-")}
        if top:
            entry[""] = top
        for prop, schema in sorted(d.get("properties", {}).items()):
            ext = {k: v for k, v in schema.items() if k.startswith("x-kubernetes-")}
            if ext:
                entry[prop] = ext
        if entry:
            out[name] = entry
    return out


def parse_pb(src):
    """{definition: [(tag, rust name, kind, cardinality, type)]} for every prost message."""
    messages = {}
    for root, _, files in os.walk(src):
        for f in files:
            if f != "mod.rs":
                continue
            rel = os.path.relpath(root, src).split(os.sep)
            if rel[0] not in TOP:
                continue
            package = ".".join([TOP[rel[0]]] + rel[1:])
            text = open(os.path.join(root, f)).read()
            for m in re.finditer(r"pub struct (\w+) \{(.*?)\n\}", text, re.S):
                fields = []
                for chunk in m.group(2).split("#[prost(")[1:]:
                    attrs, rest = chunk.split(")]", 1)
                    fm = re.search(r"pub ((?:r#)?\w+):(.*)", rest, re.S)
                    name = fm.group(1).replace("r#", "")
                    ty = re.sub(r"\s+", "", fm.group(2))
                    tag = int(re.search(r'tag = "(\d+)"', attrs).group(1))
                    mm = re.match(r'(?:btree_|hash_)?map = "(\w+), (\w+)"', attrs)
                    if mm:
                        key, value = mm.groups()
                        if value.startswith("message"):
                            inner = re.search(r",([\w:]+),?>", ty).group(1)
                            value = "m:" + resolve(rel, inner)
                        fields.append((tag, name, value, "map", key))
                        continue
                    kind, card = [a.strip() for a in attrs.split(",")[:2]]
                    if kind == "message":
                        inner = re.search(r"<([\w:]+),?>", ty).group(1)
                        kind = "m:" + resolve(rel, inner)
                    fields.append((tag, name, kind, card, ""))
                messages[package + "." + m.group(1)] = fields
    return messages


def resolve(module, path):
    parts = path.split("::")
    here = list(module)
    while parts and parts[0] == "super":
        parts.pop(0)
        here.pop()
    full = here + parts
    if full[0] in TOP:
        return ".".join([TOP[full[0]]] + full[1:])
    return ".".join([TOP[module[0]]] + module[1:] + parts)


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def protobuf_table(defs, messages):
    """Fields per definition: [tag, JSON name, type, cardinality(, map key type)]. prost
    renames messages (`PodIP` is `PodIp`), so names are matched to the definitions without
    case; an embedded Go struct (a message field whose own fields are inlined in the JSON
    form, as `ProbeHandler` in `Probe`) has the JSON name ""."""
    by_lower = {n.lower(): n for n in defs}
    canonical = {m: by_lower.get(m.lower(), m) for m in messages}
    messages = {canonical[m]: [
        (t, n, "m:" + canonical.get(k[2:], k[2:]) if k.startswith("m:") else k, c, key)
        for t, n, k, c, key in fields] for m, fields in messages.items()}
    out = {}
    todo = list(PROTOBUF_ROOTS)
    while todo:
        name = todo.pop()
        if name in out or name in SPECIAL:
            continue
        if name not in messages:
            raise SystemExit(f"no protobuf message {name}")
        props = list(defs.get(name, {}).get("properties", {}))
        by_key = {p.lower().replace("_", ""): p for p in props}
        rows = []
        for tag, rust, kind, card, key in messages[name]:
            json_name = by_key.get(rust.lower().replace("_", ""))
            if json_name is None and kind.startswith("m:"):
                embedded = [f[1].lower().replace("_", "") for f in messages.get(kind[2:], [])]
                known = [e for e in embedded if e in by_key]
                if embedded and 2 * len(known) > len(embedded):
                    json_name = ""
            if json_name is None:
                json_name = camel(rust)
            rows.append([tag, json_name, kind, card] + ([key] if key else []))
            if kind.startswith("m:"):
                todo.append(kind[2:])
        out[name] = rows
    return dict(sorted(out.items()))


def main():
    defs = json.load(open(sys.argv[1]))["$defs"]
    messages = parse_pb(sys.argv[2])
    with open(os.path.join(HERE, "openapi-extensions.json"), "w") as f:
        json.dump(extensions(defs), f, indent=0, sort_keys=True)
        f.write("\n")
    with open(os.path.join(HERE, "protobuf-fields.json"), "w") as f:
        json.dump(protobuf_table(defs, messages), f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
