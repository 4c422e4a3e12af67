"""A demo Iceberg REST catalog on S3 for the local cluster of `make cluster` (`make cluster-catalog`).

Runs Iceberg Java's REST catalog server (JDBC on SQLite behind it) and moto's S3 server on this
host, bound to its address on the kind network so that the cluster's pods reach them; creates
two tables, ``demo.orders`` (CDC upserts: small files and equality deletes) and ``demo.clicks``
(appends: small files); writes their catalog properties into the Secret ``floe-demo-catalog``
of namespace ``analytics``, which ``examples/kind/`` names; then keeps writing a batch to each
table every ``--interval`` seconds, as a streaming writer would, until Ctrl-C stops it all.

The servers come from the test suite's helpers (tests/rest_s3.py); their state lives under
``${FLOE_CACHE_DIR:-~/.cache/floe}/kind/<cluster>-catalog`` and starts anew each run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from rest_s3 import kind_network_gateway, rest_s3_stack  # noqa: E402

from floe.local.reference_jars import cache_dir  # noqa: E402
from floe.local.workload import ClickStream, OrderCdcStream  # noqa: E402

NAMESPACE = "analytics"
SECRET = "floe-demo-catalog"


def main() -> int:
    """Serve the demo catalog until interrupted."""
    parser = argparse.ArgumentParser(prog="demo-catalog.py", description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="floe", help="the kind cluster (default floe)")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between writer batches")
    args = parser.parse_args()
    kubeconfig = cache_dir() / "kind" / f"{args.cluster}.kubeconfig"
    if not kubeconfig.is_file():
        parser.error(f"no cluster {args.cluster!r} ({kubeconfig} is missing): run `make cluster` first")
    if not shutil.which("docker") or subprocess.run(["docker", "info"], capture_output=True).returncode:
        os.environ.setdefault("KIND_EXPERIMENTAL_PROVIDER", "podman")
    built = _run(str(REPO / "scripts" / "kind" / "build.sh"), "--check")
    kubectl = dict(line.split("=", 1) for line in built.splitlines())["FLOE_KIND_KUBECTL"]
    state = cache_dir() / "kind" / f"{args.cluster}-catalog"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)

    with rest_s3_stack(kind_network_gateway(), state) as stack:
        catalog = stack.client("demo")
        catalog.create_namespace("demo")
        orders = OrderCdcStream(catalog, "demo.orders")
        clicks = ClickStream(catalog, "demo.clicks")
        for _ in range(6):
            orders.upsert_batch(inserts=2000, updates=400)
            clicks.append_batch(3000)
        secret = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": SECRET, "namespace": NAMESPACE},
                    "stringData": stack.properties,
                },
            ],
        }
        _run(kubectl, "--kubeconfig", str(kubeconfig), "apply", "-f", "-", stdin=json.dumps(secret))
        print(f"REST catalog {stack.catalog.uri}, S3 {stack.moto.endpoint}; Secret {NAMESPACE}/{SECRET} set.")
        print("Now: kubectl apply -f examples/kind/ && kubectl get ot -n analytics -w   (Ctrl-C here stops)")
        try:
            while True:
                time.sleep(args.interval)
                orders.upsert_batch(inserts=500, updates=200)
                clicks.append_batch(1000)
                print(f"{time.strftime('%H:%M:%S')} wrote a batch to demo.orders and demo.clicks", flush=True)
        except KeyboardInterrupt:
            print("stopping the demo catalog")
    return 0


def _run(*command: str, stdin: str | None = None) -> str:
    return subprocess.run(command, input=stdin, capture_output=True, text=True, check=True).stdout


if __name__ == "__main__":
    raise SystemExit(main())
