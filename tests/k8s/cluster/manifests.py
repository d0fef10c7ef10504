#!/usr/bin/env python3
"""Turn the upstream manifests of Kubeflow Trainer, JobSet and Kueue (read from their Go module sources) into
objects for a cluster whose controllers run on the host (tests/k8s/cluster.sh).

  manifests.py webhooks PROJECT URL CA_FILE MANIFEST   webhook configurations: `service:` -> `url: URL/path` +
                                                        caBundle, names prefixed with PROJECT (as each project's
                                                        kustomize namePrefix does), plus the selectors each
                                                        project's kustomize patches add (jobset, kueue)
  manifests.py crds [--convert URL CA_FILE NAME,...] FILE...
                                                        CRDs; --convert sets a conversion webhook on the named ones
                                                        (Kueue: what its config/components/crd patches do)
Prints one JSON List for `kubectl apply -f -`. Needs PyYAML (Debian python3-yaml).
"""
import base64
import json
import sys

import yaml


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def ca_bundle(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


NOT_SYSTEM = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                    "values": ["kube-system", "kueue-system"]}]}
JOBSET_PODS = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


def webhooks(project, url, ca_file, manifest):
    ca = ca_bundle(ca_file)
    out = []
    for d in load(manifest):
        d["metadata"]["name"] = f"{project}-{d['metadata']['name']}"
        for w in d["webhooks"]:
            path = w["clientConfig"]["service"].get("path", "/")
            w["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": ca}
            # sigs.k8s.io/jobset config/components/webhook/patches: pod webhooks only for JobSet pods.
            if project == "jobset" and w["name"] in ("mpod.kb.io", "vpod.kb.io"):
                w["objectSelector"] = JOBSET_PODS
            # sigs.k8s.io/kueue config/components/webhook/kustomization.yaml: not for kube-system / kueue-system.
            if project == "kueue" and w["name"][1:] in ("pod.kb.io", "deployment.kb.io", "statefulset.kb.io"):
                w["namespaceSelector"] = NOT_SYSTEM
        out.append(d)
    return out


def crds(args):
    convert = None
    if args and args[0] == "--convert":
        convert = (args[1], ca_bundle(args[2]), set(args[3].split(",")))
        args = args[4:]
    out = []
    for path in args:
        for d in load(path):
            if d.get("kind") != "CustomResourceDefinition":
                continue
            if convert and d["metadata"]["name"].split(".")[0] in convert[2]:
                d["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {"conversionReviewVersions": ["v1"],
                                "clientConfig": {"url": convert[0], "caBundle": convert[1]}},
                }
            out.append(d)
    return out


def main(argv):
    if len(argv) >= 5 and argv[0] == "webhooks":
        items = webhooks(*argv[1:5])
    elif len(argv) >= 2 and argv[0] == "crds":
        items = crds(argv[1:])
    else:
        sys.exit(__doc__)
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
