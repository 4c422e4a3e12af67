"""The effective permissions the chart gives floe's identities, on a real API server.

``helm template`` renders the chart; its ServiceAccounts, Roles, RoleBindings, ClusterRoles and
ClusterRoleBindings are applied to the test API server (RBAC authorization), and ``kubectl auth
can-i --list --as=system:serviceaccount:NS:NAME -n NAMESPACE`` says what each identity may do in
each namespace. That must be exactly:

* the operator, in a watched namespace: what it does there (`OPERATOR`), the read-only discovery
  (`DISCOVERY`) and what every ServiceAccount may do anyway (the baseline: discovery URLs, self
  reviews), which a ServiceAccount bound to nothing shows;
* the operator, in the release namespace: patch pods (its leader label) on top, and nothing else;
* the operator, in a namespace it does not serve: the discovery and the baseline, nothing more;
* the drivers' ServiceAccount: what Spark does with executors (`DRIVER`) in its own namespace, the
  baseline elsewhere.

The expected lists are written out here, not read from the chart: a verb added to or dropped from
a template fails the test. Nowhere may the operator write RBAC or ServiceAccounts, list or watch
Secrets, or enter pods (exec, attach, port-forward, ephemeral containers).

What RBAC cannot say, the chart's ValidatingAdmissionPolicies do: server-side dry runs as the
operator show it may create no Secret but its own ``floe-registration`` and no pod but a driver pod
running as the drivers' ServiceAccount, while others' requests are left alone.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pytest

from .conftest import K8sCluster
from .helm import Helm, Manifest

pytestmark = pytest.mark.k8s

RBAC_KINDS = {
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
SETTLE_TIMEOUT_S = 20.0
"""How long the RBAC authorizer's caches may take to see what was just applied."""

Grant = tuple[str, str, str]
"""(resource as ``kubectl auth can-i --list`` prints it, or ``url:PATH``; resource name or ""; verb)."""


def grants(resource: str, verbs: str, name: str = "") -> set[Grant]:
    """One grant per verb of the space-separated ``verbs``."""
    return {(resource, name, verb) for verb in verbs.split()}


OPERATOR: set[Grant] = (
    grants("optimizergroups.floe.dev", "get list watch patch")
    | grants("optimizedtables.floe.dev", "get list watch patch create delete")
    | grants("optimizedtablesets.floe.dev", "get list watch patch")
    | grants("optimizergroups.floe.dev/status", "get patch")
    | grants("optimizedtables.floe.dev/status", "get patch")
    | grants("optimizedtablesets.floe.dev/status", "get patch")
    | grants("pods", "get list watch create delete")
    | grants("configmaps", "get create patch")
    | grants("services", "create patch")
    | grants("secrets", "get create")
    | grants("secrets", "patch", name="floe-registration")
    | grants("events", "create")
    | grants("kopfpeerings.kopf.dev", "get list watch")
    | grants("kopfpeerings.kopf.dev", "patch", name="floe")
)
"""The operator in a namespace it serves (charts/floe/templates/_helpers.tpl, floe.namespacedRules)."""

LEADER: set[Grant] = grants("pods", "patch")
"""The operator in the release namespace: the leader labels its own pod."""

DISCOVERY: set[Grant] = grants("customresourcedefinitions.apiextensions.k8s.io", "list watch") | grants(
    "namespaces", "list watch"
)
"""The operator everywhere, with rbac.discovery (the default): read-only, no data."""

DRIVER: set[Grant] = (
    grants("pods", "get list watch create delete deletecollection")
    | grants("pods/resize", "patch")
    | grants("configmaps", "create deletecollection")
)
"""The drivers' ServiceAccount in its namespace (charts/floe/templates/driver-rbac.yaml)."""

WRITE_VERBS = {
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "escalate",
    "bind",
    "impersonate",
    "*",
}
RBAC_RESOURCES = {
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "serviceaccounts",
    "serviceaccounts/token",
}
POD_ENTRY = {"pods/exec", "pods/attach", "pods/portforward", "pods/ephemeralcontainers", "pods/eviction"}

_ROW = re.compile(
    r"^(?P<resource>\S*)\s+\[(?P<urls>[^\]]*)\]\s+\[(?P<names>[^\]]*)\]\s+\[(?P<verbs>[^\]]*)\]\s*$"
)


def parse_can_i_list(output: str) -> set[Grant]:
    """The rows of ``kubectl auth can-i --list`` as grants, one per verb and resource name."""
    lines = output.strip().splitlines()
    assert lines and lines[0].split() == [
        "Resources",
        "Non-Resource",
        "URLs",
        "Resource",
        "Names",
        "Verbs",
    ], output
    found: set[Grant] = set()
    for line in lines[1:]:
        row = _ROW.match(line)
        assert row is not None, f"unexpected row of kubectl auth can-i --list: {line!r}"
        verbs, names, urls = (row[key].split() for key in ("verbs", "names", "urls"))
        targets = [row["resource"]] if row["resource"] else [f"url:{url}" for url in urls]
        found |= {(target, name, verb) for target in targets for name in names or [""] for verb in verbs}
    return found


def test_parse_can_i_list_reads_every_kind_of_row() -> None:
    output = (
        "Resources                        Non-Resource URLs   Resource Names        Verbs\n"
        "secrets                          []                  [floe-registration]   [patch]\n"
        "pods                             []                  []                    [get list]\n"
        "optimizergroups.floe.dev/status  []                  []                    [patch]\n"
        "                                 [/api/*]            []                    [get]\n"
    )
    assert parse_can_i_list(output) == {
        ("secrets", "floe-registration", "patch"),
        ("pods", "", "get"),
        ("pods", "", "list"),
        ("optimizergroups.floe.dev/status", "", "patch"),
        ("url:/api/*", "", "get"),
    }
    with pytest.raises(AssertionError):
        parse_can_i_list("Resources Non-Resource URLs Resource Names Verbs\npods [] [] get\n")


@dataclass(frozen=True)
class Layout:
    """Namespaces of one rendering of the chart."""

    release: str
    watched: tuple[str, ...]
    unwatched: str

    @property
    def operator(self) -> str:
        """The operator's ServiceAccount, as a subject to impersonate."""
        return f"system:serviceaccount:{self.release}:floe"


def _namespace(k8s: K8sCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    k8s.kubectl("create", "namespace", name)
    return name


def can_i_list(k8s: K8sCluster, subject: str, namespace: str) -> set[Grant]:
    """What ``subject`` may do in ``namespace``, according to the API server."""
    out = k8s.kubectl("auth", "can-i", "--list", f"--as={subject}", "-n", namespace).stdout
    return parse_can_i_list(out)


def baseline(k8s: K8sCluster, namespace: str) -> set[Grant]:
    """What any ServiceAccount of ``namespace`` may do: one bound to nothing (it need not exist)."""
    return can_i_list(k8s, f"system:serviceaccount:{namespace}:nobody-{uuid.uuid4().hex[:5]}", namespace)


def assert_grants(k8s: K8sCluster, subject: str, namespace: str, expected: set[Grant]) -> set[Grant]:
    """``subject``'s grants in ``namespace`` are exactly ``expected`` (waiting for RBAC's caches)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while (actual := can_i_list(k8s, subject, namespace)) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    extra, missing = sorted(actual - expected), sorted(expected - actual)
    assert not extra and not missing, (
        f"{subject} in {namespace}:\n  more than expected: {extra}\n  missing: {missing}"
    )
    return actual


def _apply(k8s: K8sCluster, docs: Iterable[Manifest]) -> list[Manifest]:
    items = [doc for doc in docs if doc["kind"] in RBAC_KINDS]
    k8s.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return items


@pytest.fixture(scope="module")
def helm_offline(helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm for ``helm template``."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="module")
def installed(k8s: K8sCluster, helm_offline: Helm) -> Iterator[dict[str, Layout]]:
    """The chart's RBAC objects applied for three renderings, each in namespaces of its own:
    two watched namespaces (not the release's); the defaults (the release namespace alone);
    the defaults without rbac.discovery."""
    layouts = {}
    applied: list[Manifest] = []
    for name, values in [
        (
            "two-namespaces",
            {"watchNamespaces": ["@a", "@b"], "defaultGroup": {"enabled": True, "namespace": "@a"}},
        ),
        ("defaults", {}),
        ("no-discovery", {"rbac": {"discovery": False}}),
    ]:
        release = _namespace(k8s, "rbac-rel")
        watched = (
            (_namespace(k8s, "rbac-a"), _namespace(k8s, "rbac-b"))
            if "watchNamespaces" in values
            else (release,)
        )
        layouts[name] = Layout(release, watched, unwatched=_namespace(k8s, "rbac-x"))
        rendered = json.loads(json.dumps(values).replace("@a", watched[0]).replace("@b", watched[-1]))
        applied += _apply(k8s, helm_offline.render(release, rendered))
    yield layouts
    k8s.kubectl(
        "delete",
        "--ignore-not-found",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": applied}),
    )


def test_operator_may_do_exactly_its_work_where_it_serves_and_nothing_elsewhere(
    k8s: K8sCluster, installed: dict[str, Layout]
) -> None:
    layout = installed["two-namespaces"]
    seen: set[Grant] = set()
    for namespace in layout.watched:
        seen |= assert_grants(
            k8s, layout.operator, namespace, baseline(k8s, namespace) | DISCOVERY | OPERATOR
        )
    seen |= assert_grants(
        k8s, layout.operator, layout.release, baseline(k8s, layout.release) | DISCOVERY | LEADER
    )
    seen |= assert_grants(k8s, layout.operator, layout.unwatched, baseline(k8s, layout.unwatched) | DISCOVERY)
    # What the exact lists imply, said outright: nowhere does it write RBAC or ServiceAccounts, list
    # or watch Secrets, or enter a pod; and it holds no wildcard.
    assert not [g for g in seen if g[0] in RBAC_RESOURCES and g[2] in WRITE_VERBS]
    assert not [g for g in seen if g[0] == "secrets" and g[2] in {"list", "watch", "*"}]
    assert not [g for g in seen if g[0] in POD_ENTRY]
    assert not [g for g in seen if "*" in (g[0], g[2]) and not g[0].startswith("url:")]


def test_by_default_the_operator_serves_the_release_namespace_only(
    k8s: K8sCluster, installed: dict[str, Layout]
) -> None:
    layout = installed["defaults"]
    assert layout.watched == (layout.release,)
    release, other = layout.release, layout.unwatched
    assert_grants(k8s, layout.operator, release, baseline(k8s, release) | DISCOVERY | OPERATOR | LEADER)
    assert_grants(k8s, layout.operator, other, baseline(k8s, other) | DISCOVERY)
    # Without the discovery ClusterRole, nothing at all outside the namespaces it serves.
    bare = installed["no-discovery"]
    assert_grants(k8s, bare.operator, bare.unwatched, baseline(k8s, bare.unwatched))
    assert_grants(k8s, bare.operator, bare.release, baseline(k8s, bare.release) | OPERATOR | LEADER)


def test_drivers_may_run_executors_in_their_namespace_only(
    k8s: K8sCluster, installed: dict[str, Layout]
) -> None:
    layout = installed["two-namespaces"]
    first, second = layout.watched
    driver = f"system:serviceaccount:{first}:floe-driver"
    assert_grants(k8s, driver, first, baseline(k8s, first) | DRIVER)
    for namespace in (second, layout.release, layout.unwatched):
        assert_grants(k8s, driver, namespace, baseline(k8s, namespace))
    defaults = installed["defaults"]
    assert_grants(
        k8s,
        f"system:serviceaccount:{defaults.release}:floe-driver",
        defaults.release,
        baseline(k8s, defaults.release) | DRIVER,
    )


def test_the_baseline_is_what_every_service_account_has(
    k8s: K8sCluster, installed: dict[str, Layout]
) -> None:
    """The comparisons above add to the baseline; it must hold nothing of what they check."""
    namespace = installed["two-namespaces"].unwatched
    base = baseline(k8s, namespace)
    assert base, "a ServiceAccount bound to nothing still has the discovery URLs and self reviews"
    assert not {g[0] for g in base} & {g[0] for g in OPERATOR | DRIVER | DISCOVERY | LEADER}


def _dry_run_create(k8s: K8sCluster, subject: str, manifest: Manifest) -> subprocess.CompletedProcess[str]:
    """``kubectl create --dry-run=server`` of ``manifest`` as ``subject``: RBAC and admission, no object."""
    return k8s.kubectl(
        "create", "--dry-run=server", "-f", "-", f"--as={subject}", input=json.dumps(manifest), check=False
    )


def _secret(namespace: str, name: str, labels: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    }


def _pod(namespace: str, account: str = "floe-driver", **spec: object) -> Manifest:
    labels = {"app.kubernetes.io/managed-by": "floe", "floe.dev/role": "driver", "floe.dev/group": "g"}
    container = {"name": "driver", "image": "floe-optimizer:test"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "floe-g-driver", "namespace": namespace, "labels": labels},
        "spec": {"serviceAccountName": account, "containers": [container], **spec},
    }


def test_admission_policies_hold_the_operator_to_floes_own_objects(
    k8s: K8sCluster, installed: dict[str, Layout]
) -> None:
    layout = installed["two-namespaces"]
    namespace = layout.watched[0]
    ours = {"app.kubernetes.io/managed-by": "floe"}
    refused = {
        "another Secret": (_secret(namespace, "catalog-copy", ours), "only the Secret floe-registration"),
        "an unlabelled registration Secret": (
            _secret(namespace, "floe-registration", {}),
            "labelled app.kubernetes.io/managed-by=floe",
        ),
        "a pod as another account": (_pod(namespace, account="default"), "only pods running as floe-driver"),
        "a pod without floe's labels": (
            {**_pod(namespace), "metadata": {"name": "x", "namespace": namespace}},
            "only driver pods",
        ),
        "a pod on the host network": (_pod(namespace, hostNetwork=True), "no host namespace"),
        "a pod with a hostPath": (
            _pod(namespace, volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
            "no hostPath volume",
        ),
        "a privileged pod": (
            _pod(
                namespace, containers=[{"name": "c", "image": "i", "securityContext": {"privileged": True}}]
            ),
            "no privileged container",
        ),
    }
    first_manifest, first_message = refused["another Secret"]
    # The policies take effect once the API server has loaded them.
    k8s.wait_for(
        "the admission policies in force",
        lambda: first_message in _dry_run_create(k8s, layout.operator, first_manifest).stderr,
        timeout=SETTLE_TIMEOUT_S,
    )
    for what, (manifest, message) in refused.items():
        result = _dry_run_create(k8s, layout.operator, manifest)
        assert result.returncode != 0 and message in result.stderr, f"{what}: {result.stdout}{result.stderr}"
    # What floe does make passes: its registration Secret and a driver pod.
    for manifest in (_secret(namespace, "floe-registration", ours), _pod(namespace)):
        result = _dry_run_create(k8s, layout.operator, manifest)
        assert result.returncode == 0, result.stderr
    # Nobody else is held to floe's rules: an admin may still make any Secret there.
    admin = k8s.kubectl(
        "create",
        "--dry-run=server",
        "-f",
        "-",
        input=json.dumps(_secret(namespace, "catalog-copy", {})),
        check=False,
    )
    assert admin.returncode == 0, admin.stderr
