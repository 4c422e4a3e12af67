"""Which replica is the leader: the live kopf peer with the highest priority.

How leadership works, end to end:

* Every replica runs kopf with peering on (``OperatorConfig.standalone`` false) under the
  same peering name. kopf keeps one record per replica in the ``status`` of a KopfPeering
  object per watched namespace (a ClusterKopfPeering when watching the whole cluster):
  identity → priority, ``lastseen``, ``lifetime``. A replica renews its record every few
  seconds and removes it when it stops cleanly. A record older than its lifetime
  (``OperatorConfig.peering_lifetime_s``, 60 s by default) counts as dead.
* kopf pauses every handler, timer and watch of a replica that sees a live peer with a
  higher priority (equal priorities pause everyone, so each replica draws a distinct random
  priority). A replica starts paused (peering is mandatory) and stays so until it has read
  the peering object. So only the leader reconciles OptimizerGroups and OptimizedTables:
  a follower's engine has no groups or tables registered at all.
* The engine's ticking and the status flush are not kopf handlers: they run in the
  controller's own thread and ask `Leadership.is_leader`, which reads the same peering
  object (at most every ``check_interval_s``) and answers yes only when this replica's own
  record is there and no live record has an equal or higher priority.
* Failover: when the leader stops cleanly its record goes at once; when it dies, its record
  expires after its lifetime. kopf then resumes the follower, whose resume handlers
  register every group and table with its engine (last optimizing times restored from
  status, see `floe.controller.tables`), and `is_leader` turns true within
  ``check_interval_s``, so its engine starts ticking. A process the old leader had in
  flight is never committed by the new one: the new engine has no record of it and plans
  afresh; commits are validated against concurrent ones, so even a few seconds of overlap
  with a dying leader cannot apply the same rewrite twice.
* The leader also labels its own pod ``floe.dev/leader=true``: the operator's Service
  selects that label, so drivers reach the task service of the replica that schedules.
* Standalone (``floe operator --standalone``), kopf runs without peering and this replica
  leads from the start, without reading any peering object (and labels its pod all the same).
  Only one standalone replica may run at a time: nothing stops a second one from reconciling too.
"""

from __future__ import annotations

import datetime
import logging
import os
import random
import time
from collections.abc import Sequence
from typing import Any, cast

from kubernetes.client.exceptions import ApiException

from floe.controller.kube import Kube

log = logging.getLogger(__name__)

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"
LEADER_LABEL = "floe.dev/leader"
CHECK_INTERVAL_S = 5.0
MAX_PRIORITY = 1_000_000


def random_priority() -> int:
    """A peering priority unlikely to equal another replica's (equal ones pause everyone)."""
    return random.randint(1, MAX_PRIORITY)


class Leadership:
    """Answers "am I the leader?", re-reading the peering object(s) every few seconds."""

    def __init__(
        self,
        kube: Kube | None,
        identity: str,
        priority: int,
        peering_name: str,
        namespaces: Sequence[str],
        check_interval_s: float = CHECK_INTERVAL_S,
        standalone: bool = False,
    ) -> None:
        """Standalone (or with ``kube=None``, in tests) this replica is always the leader."""
        self.check_interval_s = check_interval_s
        self.kube = kube
        self.identity = identity
        self.priority = priority
        self.peering_name = peering_name
        self.namespaces = list(namespaces)
        self.standalone = standalone or kube is None
        self._checked_at = float("-inf")
        self._leader = self.standalone
        self._labelled: bool | None = None

    def ensure_peering_objects(self) -> None:
        """Create the (Cluster)KopfPeering object(s) kopf keeps its peers in, if missing.

        Standalone, there are none to make: kopf runs without peering.
        """
        if self.kube is None or self.standalone:
            return
        custom = self.kube.custom
        body: dict[str, Any] = {"apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}", "metadata": {}}
        try:
            if self.namespaces:
                for namespace in self.namespaces:
                    body.update(
                        kind="KopfPeering", metadata={"name": self.peering_name, "namespace": namespace}
                    )
                    custom.create_namespaced_custom_object(
                        PEERING_GROUP, PEERING_VERSION, namespace, "kopfpeerings", body
                    )
            else:
                body.update(kind="ClusterKopfPeering", metadata={"name": self.peering_name})
                custom.create_cluster_custom_object(
                    PEERING_GROUP, PEERING_VERSION, "clusterkopfpeerings", body
                )
        except ApiException as exc:
            if exc.status != 409:
                raise

    def is_leader(self) -> bool:
        """Whether this replica leads now (cached for a few seconds; always, standalone)."""
        now = time.monotonic()
        if now - self._checked_at >= self.check_interval_s:
            self._checked_at = now
            leader = self._leader if self.standalone else self._read_or_keep()
            if leader != self._leader:
                log.info(
                    "this replica (%s) %s the leader", self.identity, "is now" if leader else "is no longer"
                )
            self._leader = leader
            self._label_own_pod(leader)
        return self._leader

    def _read_or_keep(self) -> bool:
        try:
            return self._read()
        except ApiException as exc:
            log.warning("cannot read the peering object, keeping leadership as it was: %s", exc.reason)
            return self._leader

    def _read(self) -> bool:
        assert self.kube is not None
        custom = self.kube.custom
        if self.namespaces:
            bodies = [
                custom.get_namespaced_custom_object(
                    PEERING_GROUP, PEERING_VERSION, ns, "kopfpeerings", self.peering_name
                )
                for ns in self.namespaces
            ]
        else:
            bodies = [
                custom.get_cluster_custom_object(
                    PEERING_GROUP, PEERING_VERSION, "clusterkopfpeerings", self.peering_name
                )
            ]
        return all(self._leads(cast(dict[str, Any], body).get("status") or {}) for body in bodies)

    def _leads(self, peers: dict[str, Any]) -> bool:
        if self.identity not in peers:
            return False  # kopf has not announced us yet: not leading anything
        now = datetime.datetime.now(datetime.UTC)
        for identity, info in peers.items():
            if identity == self.identity or not isinstance(info, dict):
                continue
            seen = datetime.datetime.fromisoformat(str(info.get("lastseen")))
            if seen.tzinfo is None:
                seen = seen.replace(tzinfo=datetime.UTC)
            alive = seen + datetime.timedelta(seconds=int(info.get("lifetime", 60))) > now
            if alive and int(info.get("priority", 0)) >= self.priority:
                return False
        return True

    def _label_own_pod(self, leader: bool) -> None:
        pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
        if self.kube is None or not pod or not namespace or self._labelled == leader:
            return
        patch = {"metadata": {"labels": {LEADER_LABEL: "true" if leader else None}}}
        try:
            self.kube.core.patch_namespaced_pod(pod, namespace, patch)
            self._labelled = leader
        except ApiException as exc:
            log.warning("cannot label pod %s/%s as %s: %s", namespace, pod, LEADER_LABEL, exc.reason)
