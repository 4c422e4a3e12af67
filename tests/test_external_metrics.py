"""The external metrics API (`floe.controller.external_metrics`) over real TLS: what the
aggregation layer's client certificate may read, and what everyone else is refused."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pki import Pki, get_json

from floe.controller.external_metrics import (
    DEMAND_METRIC,
    ClientAuthentication,
    ExternalMetricsConfig,
    Requirement,
    SelectorError,
    external_metrics_server,
    parse_selector,
)

NOW = 1_764_000_000.0
DEMANDS = {"analytics": [("etl", 5), ("nightly", 0)], "other": [("etl", 2)]}
VALUES = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/analytics/{DEMAND_METRIC}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    tls = Pki(directory)
    tls.ca("serving-ca")
    tls.leaf("tls", "serving-ca", "/CN=floe-operator", "serverAuth", "-addext", "subjectAltName=IP:127.0.0.1")
    tls.ca("front-proxy-ca")
    tls.leaf("front-proxy-client", "front-proxy-ca", "/CN=front-proxy-client", "clientAuth")
    tls.leaf("stranger", "front-proxy-ca", "/CN=system:anonymous", "clientAuth")
    tls.ca("other-ca")
    tls.leaf("forged", "other-ca", "/CN=front-proxy-client", "clientAuth")
    return directory


@pytest.fixture(scope="module")
def server(pki: Path) -> Iterator[str]:
    clients = ClientAuthentication.from_config_map(
        {
            "requestheader-client-ca-file": (pki / "front-proxy-ca.crt").read_text(),
            "requestheader-allowed-names": '["front-proxy-client"]',
        }
    )
    calls: list[str] = []

    def demand(namespace: str) -> list[tuple[str, int]]:
        calls.append(namespace)
        return DEMANDS.get(namespace, [])

    metrics = external_metrics_server(ExternalMetricsConfig(0, pki), demand, clients, lambda: NOW)
    metrics.host = "127.0.0.1"
    metrics.start()
    try:
        yield metrics.url
    finally:
        metrics.stop()


def _get(pki: Path, url: str, client: str | None = "front-proxy-client") -> tuple[int, dict[str, Any]]:
    key_pair = (pki / f"{client}.crt", pki / f"{client}.key") if client is not None else None
    status, body = get_json(url, pki / "serving-ca.crt", key_pair)
    return status, dict(body)


def test_values_are_each_groups_demand_in_the_namespace_asked(server: str, pki: Path) -> None:
    status, body = _get(pki, f"{server}{VALUES}?labelSelector=group%3Detl")
    assert status == 200, body
    assert body["kind"] == "ExternalMetricValueList"
    assert body["items"] == [
        {
            "metricName": DEMAND_METRIC,
            "metricLabels": {"group": "etl"},
            "timestamp": "2025-11-24T16:00:00Z",
            "value": "5",
        }
    ]
    _, every = _get(pki, f"{server}{VALUES}")
    assert [(i["metricLabels"]["group"], i["value"]) for i in every["items"]] == [
        ("etl", "5"),
        ("nightly", "0"),
    ]
    _, elsewhere = _get(pki, f"{server}{VALUES.replace('analytics', 'other')}")
    assert [i["value"] for i in elsewhere["items"]] == ["2"]
    _, nothing = _get(pki, f"{server}{VALUES.replace('analytics', 'empty')}?labelSelector=group%3Detl")
    assert nothing["items"] == []


def test_set_based_and_negated_selectors_pick_groups(server: str, pki: Path) -> None:
    def groups(selector: str) -> list[str]:
        status, body = _get(pki, f"{server}{VALUES}?labelSelector={urllib.parse.quote(selector)}")
        assert status == 200, body
        return [i["metricLabels"]["group"] for i in body["items"]]

    assert groups("group in (nightly, weekly)") == ["nightly"]
    assert groups("group notin (nightly)") == ["etl"]
    assert groups("group!=etl") == ["nightly"]
    assert groups("group,!team") == ["etl", "nightly"]
    assert groups("team") == []


def test_discovery_lists_the_metric(server: str, pki: Path) -> None:
    status, body = _get(pki, f"{server}/apis/external.metrics.k8s.io/v1beta1")
    assert status == 200
    assert body["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    assert [r["name"] for r in body["resources"]] == [DEMAND_METRIC]
    _, groups = _get(pki, f"{server}/apis")
    assert groups["groups"][0]["preferredVersion"]["version"] == "v1beta1"


def test_bad_requests_are_statuses_that_say_what_is_wrong(server: str, pki: Path) -> None:
    status, body = _get(pki, f"{server}{VALUES.replace(DEMAND_METRIC, 'cpu_usage')}")
    assert (status, body["kind"], body["reason"]) == (404, "Status", "NotFound")
    assert "'cpu_usage'" in body["message"] and DEMAND_METRIC in body["message"]
    status, body = _get(pki, f"{server}{VALUES}?labelSelector=group%3E3")
    assert (status, body["reason"]) == (400, "BadRequest")
    assert "'group>3'" in body["message"]


def test_only_the_aggregation_layers_certificate_is_served(server: str, pki: Path) -> None:
    status, body = _get(pki, f"{server}{VALUES}", client="stranger")
    assert (status, body["reason"]) == (403, "Forbidden")
    assert "system:anonymous" in body["message"]
    for client in (None, "forged"):  # no certificate, or one the cluster's CA did not sign
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _get(pki, f"{server}{VALUES}", client=client)


def test_a_cluster_without_an_aggregation_layer_is_named() -> None:
    with pytest.raises(ValueError, match="requestheader-client-ca-file"):
        ClientAuthentication.from_config_map({"client-ca-file": "..."})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("group=etl", (Requirement("group", "in", frozenset({"etl"})),)),
        ("group==etl", (Requirement("group", "in", frozenset({"etl"})),)),
        (
            "group in (a,b),team!=x",
            (
                Requirement("group", "in", frozenset({"a", "b"})),
                Requirement("team", "notin", frozenset({"x"})),
            ),
        ),
        ("!team", (Requirement("team", "!"),)),
    ],
)
def test_selectors_parse_as_kubernetes_writes_them(text: str, expected: tuple[Requirement, ...]) -> None:
    assert parse_selector(text) == expected


@pytest.mark.parametrize("text", ["group>3", "group in a", "group=etl,", "group=a b", "group in (a b)"])
def test_selectors_kubernetes_would_not_write_are_refused(text: str) -> None:
    with pytest.raises(SelectorError, match="label selector"):
        parse_selector(text)
