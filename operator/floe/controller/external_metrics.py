"""Each group's demand as a Kubernetes external metric, for HorizontalPodAutoscalers.

An HPA reads external metrics from whatever serves ``external.metrics.k8s.io`` behind the
API server's aggregation layer; usually a Prometheus adapter. The operator can serve that API
itself (the chart's ``externalMetrics.enabled``): the HPA controller then reads
``floe_group_demand_tasks`` straight from the engine, at the moment it asks, with no scrape
interval or adapter between them. One metric, in every served namespace, one value per
OptimizerGroup there, labelled ``group=<name>``.

Only the API server may call: it authenticates and authorizes the user (the HPA controller
holds ``list`` on ``external.metrics.k8s.io``), then proxies with its front-proxy client
certificate. The server requires that certificate, checked against the request-header CA and
allowed names the cluster publishes in ``kube-system/extension-apiserver-authentication``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from floe.api.meta import rfc3339
from floe.kit.background import BackgroundServer

log = logging.getLogger(__name__)

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
DEMAND_METRIC = "floe_group_demand_tasks"
"""The one metric served: `OptimizingEngine.group_demand` of each group, in tasks."""
GROUP_LABEL = "group"
AUTHENTICATION_CONFIG_MAP = ("extension-apiserver-authentication", "kube-system")
"""Where a cluster publishes the CA and names of the aggregation layer's client certificate."""

DemandSource = Callable[[str], Sequence[tuple[str, int]]]
"""Per namespace: each OptimizerGroup's name and demand (tasks)."""
Clock = Callable[[], float]


class SelectorError(ValueError):
    """A label selector this server cannot read."""


@dataclass(frozen=True)
class Requirement:
    """One requirement of a label selector: `key` `operator` `values`."""

    key: str
    operator: str
    """One of ``in``, ``notin``, ``exists``, ``!``."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` meet the requirement, as Kubernetes label selectors define it."""
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!":
            return self.key not in labels
        if self.operator == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


_KEY = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?)"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")


def parse_selector(text: str) -> tuple[Requirement, ...]:
    """The requirements of a label selector in Kubernetes' string form (what an HPA sends as
    ``labelSelector``: ``group=etl``, ``group in (etl,nightly)``, ``!team``, ...); all must hold."""
    requirements = []
    for part in _split_top_level(text):
        if not part.strip():
            if text.strip():
                raise SelectorError(f"empty requirement in label selector {text!r}")
            continue
        if match := _SET.fullmatch(part):
            values = [v.strip() for v in match.group(3).split(",")]
            if not all(re.fullmatch(_VALUE, v) for v in values):
                raise SelectorError(f"invalid value in {part.strip()!r} of label selector {text!r}")
            requirements.append(Requirement(match.group(1), match.group(2), frozenset(values)))
        elif match := _EQUALITY.fullmatch(part):
            operator = "notin" if match.group(2) == "!=" else "in"
            requirements.append(Requirement(match.group(1), operator, frozenset([match.group(3)])))
        elif match := _EXISTS.fullmatch(part):
            requirements.append(Requirement(match.group(2), "!" if match.group(1) else "exists"))
        else:
            raise SelectorError(f"cannot read {part.strip()!r} in label selector {text!r}")
    return tuple(requirements)


def _split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside parentheses (those inside separate an ``in`` set's values)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


@dataclass(frozen=True)
class ClientAuthentication:
    """Who may call: client certificates signed by `ca_pem`, with a common name in `allowed_names`
    (any name when empty), as the API server's ``--requestheader-*`` flags say."""

    ca_pem: str
    allowed_names: frozenset[str] = frozenset()

    @classmethod
    def from_config_map(cls, data: Mapping[str, str]) -> ClientAuthentication:
        """From the data of ``kube-system/extension-apiserver-authentication``; ValueError when the
        cluster publishes no request-header CA (its aggregation layer is not configured)."""
        ca_pem = data.get("requestheader-client-ca-file", "").strip()
        if not ca_pem:
            raise ValueError(
                "kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: "
                "the API server's aggregation layer (--requestheader-client-ca-file) is not configured"
            )
        names = json.loads(data.get("requestheader-allowed-names") or "[]")
        return cls(ca_pem=ca_pem, allowed_names=frozenset(str(n) for n in names))


def server_ssl_context(cert_file: Path, key_file: Path, clients: ClientAuthentication) -> ssl.SSLContext:
    """TLS that serves `cert_file` and requires a client certificate signed by the clients' CA;
    ValueError naming the files when they cannot be loaded."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=clients.ca_pem)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        # ssl names neither file: say which, so a Secret that is not mounted shows as such.
        raise ValueError(
            f"cannot load the serving certificate {cert_file} and key {key_file}: {exc}"
        ) from exc
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def create_external_metrics_app(
    demand: DemandSource, clients: ClientAuthentication, clock: Clock
) -> web.Application:
    """The ``external.metrics.k8s.io/v1beta1`` API over `demand` (discovery and metric values)."""
    api = _ExternalMetricsApi(demand, clock)
    app = web.Application(middlewares=[_allowed_names_only(clients.allowed_names), _status_errors])
    base = f"/apis/{GROUP}"
    app.router.add_get("/apis", api.group_list)
    app.router.add_get(base, api.group)
    app.router.add_get(f"{base}/{VERSION}", api.resources)
    app.router.add_get(f"{base}/{VERSION}/namespaces/{{namespace}}/{{metric}}", api.values)
    for probe in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(probe, api.ok)
    return app


class _ExternalMetricsApi:
    def __init__(self, demand: DemandSource, clock: Clock) -> None:
        self._demand = demand
        self._clock = clock

    async def group_list(self, _: web.Request) -> web.Response:
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [_api_group()]})

    async def group(self, _: web.Request) -> web.Response:
        return web.json_response({"kind": "APIGroup", "apiVersion": "v1", **_api_group()})

    async def resources(self, _: web.Request) -> web.Response:
        resource = {
            "name": DEMAND_METRIC,
            "singularName": "",
            "namespaced": True,
            "kind": "ExternalMetricValueList",
            "verbs": ["get"],
        }
        return web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": GROUP_VERSION,
                "resources": [resource],
            }
        )

    async def values(self, request: web.Request) -> web.Response:
        metric = request.match_info["metric"]
        if metric != DEMAND_METRIC:
            raise _StatusError(404, "NotFound", f"no external metric {metric!r}: floe serves {DEMAND_METRIC}")
        try:
            selector = parse_selector(request.query.get("labelSelector", ""))
        except SelectorError as exc:
            raise _StatusError(400, "BadRequest", str(exc)) from exc
        namespace = request.match_info["namespace"]
        # The engine's lock may be held by a tick: wait for it off the event loop.
        groups = await asyncio.get_running_loop().run_in_executor(None, self._demand, namespace)
        stamp = rfc3339(self._clock())
        items = [
            {
                "metricName": DEMAND_METRIC,
                "metricLabels": {GROUP_LABEL: name},
                "timestamp": stamp,
                "value": str(tasks),
            }
            for name, tasks in sorted(groups)
            if all(r.matches({GROUP_LABEL: name}) for r in selector)
        ]
        return web.json_response(
            {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
        )

    async def ok(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")


def _api_group() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [version], "preferredVersion": version}


class _StatusError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(body, status=code)


@web.middleware
async def _status_errors(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """Errors as Kubernetes ``Status`` objects, which the API server relays to the caller."""
    try:
        response: web.StreamResponse = await handler(request)
    except _StatusError as exc:
        return _status(exc.code, exc.reason, str(exc))
    except web.HTTPNotFound:
        return _status(404, "NotFound", f"no such path: {request.path}")
    except web.HTTPMethodNotAllowed:
        return _status(405, "MethodNotAllowed", f"{request.method} is not served: this API is read-only")
    return response


def _allowed_names_only(allowed: frozenset[str]) -> Callable[..., Any]:
    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if allowed:
            name = _common_name(request.transport.get_extra_info("peercert") if request.transport else None)
            if name not in allowed:
                return _status(
                    403,
                    "Forbidden",
                    f"client certificate {name!r} is not among the aggregation layer's names",
                )
        response: web.StreamResponse = await handler(request)
        return response

    return check


def _common_name(peer: Any) -> str | None:
    """The subject's common name of a peer certificate as `ssl` decodes it (None without one)."""
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


@dataclasses.dataclass
class ExternalMetricsConfig:
    """Where the API is served, and the serving certificate (``tls.crt``/``tls.key`` in `cert_dir`)."""

    port: int
    cert_dir: Path


def external_metrics_server(
    config: ExternalMetricsConfig, demand: DemandSource, clients: ClientAuthentication, clock: Clock
) -> BackgroundServer:
    """The HTTPS server of the API, not yet started."""
    context = server_ssl_context(config.cert_dir / "tls.crt", config.cert_dir / "tls.key", clients)
    return BackgroundServer(
        lambda: create_external_metrics_app(demand, clients, clock),
        "external-metrics",
        host="0.0.0.0",
        port=config.port,
        ssl_context=context,
    )
