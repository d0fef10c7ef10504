#!/usr/bin/env python3
"""Write a `docker save`-format image archive (what `ctr images import` reads) from files on disk, without a daemon.

  image_archive.py OUT.tar NAME:TAG ENTRYPOINT SRC=DEST[:MODE] ...

One layer holding each SRC file at DEST (mode default 0755), owned by root; the config sets Entrypoint.
Used for the pause image of the cluster tier (tests/k8s/cluster.sh).
"""
import hashlib
import io
import json
import sys
import tarfile


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    out, name, entrypoint, files = argv[0], argv[1], argv[2], argv[3:]
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as t:
        for spec in files:
            src, dest = spec.split("=", 1)
            mode = 0o755
            if ":" in dest:
                dest, m = dest.rsplit(":", 1)
                mode = int(m, 8)
            data = open(src, "rb").read()
            info = tarfile.TarInfo(dest.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, 0
            t.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": [entrypoint]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "tests/k8s/cluster/image_archive.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [name], "Layers": ["layer.tar"]}]
    with tarfile.open(out, mode="w") as t:
        for fname, data in ((config_name, config_bytes), ("layer.tar", layer_bytes),
                            ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(fname)
            info.size, info.mtime = len(data), 0
            t.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main(sys.argv[1:])
