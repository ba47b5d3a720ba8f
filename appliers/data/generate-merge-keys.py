#!/usr/bin/env python3
"""Writes merge-keys.json, the strategic-merge schema of Kubernetes' built-in kinds, from the
API server's OpenAPI (swagger.json in the Kubernetes source tree that e2e/cluster/install.sh
unpacks under ~/.cache/skewer/src). For each kind: the type of each field that leads to more
structure, and the patch strategy and merge key of each list that has them; and which kinds are
cluster-scoped (served by no path with a {namespace}). Only what kustomize builds need is kept.

    python3 appliers/data/generate-merge-keys.py [path/to/swagger.json] > appliers/data/merge-keys.json
"""
import glob
import json
import os
import sys


def short(name):
    for prefix in ("io.k8s.api.", "io.k8s.apimachinery.pkg.apis.", "io.k8s."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def ref_of(schema):
    ref = schema.get("$ref")
    return short(ref.split("/")[-1]) if ref else None


def main():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        cache = os.environ.get("SKEWER_CACHE", os.path.expanduser("~/.cache/skewer"))
        found = glob.glob(os.path.join(cache, "src/kubernetes-*/api/openapi-spec/swagger.json"))
        if not found:
            sys.exit("no swagger.json: run e2e/cluster/install.sh, or pass its path")
        path = found[0]
    spec = json.load(open(path))
    definitions = spec["definitions"]

    kinds = {}
    for name, d in definitions.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            # Objects only: not a kind listed by many definitions (DeleteOptions, WatchEvent),
            # nor a list of objects (DeploymentList), which skewer flattens before anything else.
            props = d.get("properties", {})
            if "metadata" in props and "items" not in props:
                kinds[f"{api_version}/{gvk['kind']}"] = short(name)

    types = {}
    todo = list(set(kinds.values()))
    while todo:
        name = todo.pop()
        if name in types:
            continue
        full = next((n for n in definitions if short(n) == name), None)
        fields = {}
        for field, schema in definitions.get(full, {}).get("properties", {}).items():
            target = ref_of(schema) or ref_of(schema.get("items", {}))
            strategy = schema.get("x-kubernetes-patch-strategy", "")
            key = schema.get("x-kubernetes-patch-merge-key", "")
            if not target and not strategy:
                continue
            entry = [target]
            if strategy or key:
                entry += [strategy, key]
            fields[field] = entry
            if target and target not in types:
                todo.append(target)
        types[name] = fields
    namespaced = set()
    for route, item in spec["paths"].items():
        for op in item.values():
            gvk = op.get("x-kubernetes-group-version-kind") if isinstance(op, dict) else None
            if gvk and "{namespace}" in route:
                api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
                namespaced.add(f"{api_version}/{gvk['kind']}")
    cluster = sorted(k for k in kinds if k not in namespaced)

    # Types that lead nowhere are left out: a field of such a type merges as a plain map.
    types = {k: v for k, v in types.items() if v}
    json.dump({"kinds": dict(sorted(kinds.items())), "types": dict(sorted(types.items())),
               "cluster": cluster},
              sys.stdout, separators=(",", ":"), sort_keys=False)
    sys.stdout.write("\n")


main()
