"""Deletes the chart's default OptimizerGroup before `helm uninstall` removes the operator.

OptimizerGroups carry kopf's finalizer, which only a running operator removes. `helm uninstall`
deletes the operator, its RBAC and the group at once, so the group would hang in Terminating. This
runs as a pre-delete hook instead, while the operator still runs: it deletes the group, waits for
the operator to let it go, and after TIMEOUT_SECONDS removes the finalizer itself (the group's
driver pod and the rest are then garbage-collected through their owner references).
"""

import os
import sys
import time

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

if os.environ.get("KUBERNETES_SERVICE_HOST"):
    config.load_incluster_config()  # type: ignore[no-untyped-call]
else:
    config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))  # type: ignore[no-untyped-call]
api = client.CustomObjectsApi()
namespace, name = os.environ["GROUP_NAMESPACE"], os.environ["GROUP_NAME"]
timeout = float(os.environ.get("TIMEOUT_SECONDS", "60"))
group = ("floe.dev", "v1alpha1", namespace, "optimizergroups", name)


def exists() -> bool:
    try:
        api.get_namespaced_custom_object(*group)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


try:
    api.delete_namespaced_custom_object(*group)
except ApiException as exc:
    if exc.status != 404:
        raise
deadline = time.monotonic() + timeout
while exists() and time.monotonic() < deadline:
    time.sleep(1.0)
if exists():
    print(f"OptimizerGroup {namespace}/{name}: not finalized within {timeout:.0f}s; removing its finalizers")
    api.patch_namespaced_custom_object(*group, {"metadata": {"finalizers": None}})
    while exists() and time.monotonic() < deadline + 30:
        time.sleep(1.0)
if exists():
    sys.exit(f"OptimizerGroup {namespace}/{name} is still there")
print(f"OptimizerGroup {namespace}/{name} deleted")
