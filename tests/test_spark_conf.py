"""The Spark properties of a group's driver: the executor pods' CPU request and limits."""

from __future__ import annotations

from typing import Any

from floe.api.group import OptimizerGroupSpec
from floe.controller.spark_conf import spark_properties


def _properties(**spec: Any) -> dict[str, str]:
    return spark_properties(
        "g", "ns", OptimizerGroupSpec.model_validate(spec), "img", "driver-pod", "driver-host"
    )


def test_executor_pods_are_limited_to_their_cores() -> None:
    properties = _properties(executorCores=2)
    assert properties["spark.kubernetes.executor.request.cores"] == "2"
    assert properties["spark.kubernetes.executor.limit.cores"] == "2"


def test_executor_pods_start_with_the_startup_cpu_limit() -> None:
    # The driver resizes each pod to executorCores once its executor registers.
    properties = _properties(executorCores=1, executorCpuRequest="250m", executorStartupCpuLimit="2")
    assert properties["spark.kubernetes.executor.request.cores"] == "250m"
    assert properties["spark.kubernetes.executor.limit.cores"] == "2"
