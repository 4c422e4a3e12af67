"""How ``floe operator`` runs: its `OperatorConfig`, from the command line and the environment."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from floe.api.table import CatalogRef
from floe.controller.external_metrics import ExternalMetricsConfig
from floe.controller.leader import CHECK_INTERVAL_S, random_priority
from floe.controller.objects import DRIVER_SERVICE_ACCOUNT
from floe.protocol.client import TOKEN_ENV

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "ghcr.io/floe-dev/floe-optimizer:0.1.0"
PEERING_NAME = "floe"


@dataclass(frozen=True)
class HistoryTableConfig:
    """The Iceberg table every run is appended to (`floe.tables.run_history_table`), and its catalog."""

    table: str
    catalog: CatalogRef


@dataclass
class OperatorConfig:
    """How ``floe operator`` runs; the environment fills what the command line does not."""

    namespaces: list[str] = field(default_factory=list)
    service_port: int = 7070
    service_url: str = ""
    default_image: str = ""
    driver_service_account: str = DRIVER_SERVICE_ACCOUNT
    """The ServiceAccount the driver pods run as, in every served namespace. The operator only
    names it: the chart renders it, with the Role Spark needs, in each watched namespace."""
    standalone: bool = False
    peering_name: str = PEERING_NAME
    priority: int = field(default_factory=random_priority)
    identity: str = ""
    tick_interval_s: float = 1.0
    status_interval_s: float = 5.0
    status_writes_per_s: float = 20.0
    """Table status patches a second, on average (`TableStatusFlusher`)."""
    refresh_interval_s: float = 10.0
    spread_first_maintenance: bool = True
    """Spread new tables' first maintenance runs over their interval (`spread_first_runs`)."""
    create_peering_objects: bool = True
    """Create the (Cluster)KopfPeering objects when missing; the Helm chart makes its own, and an
    operator creating them too could beat `helm install` to it, which then fails."""
    peering_lifetime_s: int = 60
    """How long a replica's peering record counts without renewal: a crashed leader's successor
    takes over after at most this long (a replica that stops cleanly removes its record at once)."""
    leader_check_interval_s: float = CHECK_INTERVAL_S
    secret_interval_s: float = 30.0
    """How often the leader re-reads the catalog Secrets tables refer to."""
    registration_token: str = ""
    """What optimizers must present to register; empty: ``$FLOE_REGISTRATION_TOKEN``, else a
    random one for this process (which then reaches the drivers through the namespaces'
    registration Secrets, but differs per replica: the chart gives every replica the same)."""
    notice_token: str | None = None
    """What change notices must present (`floe.service.change_notices`); None: notices are refused."""
    liveness_endpoint: str | None = None
    """Where kopf serves the liveness probe (e.g. ``http://0.0.0.0:8081/healthz``); None: nowhere."""
    engine_stall_s: float = 600.0
    """The liveness probe fails once the engine loop has not come round for this long."""
    ui_port: int = 0
    """Where the read-only web UI listens (`floe.ui`); 0: not served (``floe operator`` serves it
    on 8080 unless told otherwise)."""
    external_metrics: ExternalMetricsConfig | None = None
    """Serve ``external.metrics.k8s.io`` (each group's demand, for HPAs) here; None: not at all."""
    history: HistoryTableConfig | None = None
    """Append every run to this table too; None: runs are kept in status only."""

    def __post_init__(self) -> None:
        namespace = os.environ.get("POD_NAMESPACE", "default")
        self.service_url = self.service_url or os.environ.get(
            "FLOE_SERVICE_URL", f"http://floe-operator.{namespace}.svc:{self.service_port}"
        )
        self.default_image = self.default_image or os.environ.get("FLOE_OPTIMIZER_IMAGE", DEFAULT_IMAGE)
        self.identity = self.identity or os.environ.get("POD_NAME") or f"floe-{os.getpid()}-{self.priority}"
        self.registration_token = self.registration_token or os.environ.get(TOKEN_ENV, "").strip()
        if not self.registration_token:
            log.warning(
                "no registration token given (--registration-token-file or $%s): using a random one "
                "for this process; replicas of one install need the same token",
                TOKEN_ENV,
            )
            self.registration_token = secrets.token_urlsafe(32)


def operator_namespaces(values: Sequence[str] | None) -> list[str]:
    """``--namespace`` values, comma lists allowed; empty means the whole cluster."""
    return [ns for value in values or () for ns in value.split(",") if ns]
