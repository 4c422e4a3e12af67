"""The Spark settings of an OptimizerGroup's optimizer: executors sized to their pod limit.

An executor pod's memory limit is ``spark.executor.memory`` (JVM heap) plus
``spark.executor.memoryOverhead``; floe's rewrite runs in the Python workers, which live in
the overhead, so the heap gets only a quarter of the limit and the rest stays outside it.
A heap sized to the whole limit is what gets executors OOM-killed.
"""

from __future__ import annotations

from dataclasses import dataclass

from floe.api.group import OptimizerGroupSpec

MiB = 1024 * 1024
MIN_HEAP = 512 * MiB
MIN_OVERHEAD = 384 * MiB
DRIVER_HEAP = "512m"
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
IN_CLUSTER_MASTER = "k8s://https://kubernetes.default.svc"
EXECUTOR_TEMPLATE_PATH = "/etc/floe/spark/executor-template.yaml"

GROUP_LABEL = "floe.dev/group"
ROLE_LABEL = "floe.dev/role"


@dataclass(frozen=True)
class ExecutorMemory:
    """How an executor pod's memory limit splits between JVM heap and overhead."""

    heap: int
    overhead: int

    @property
    def limit(self) -> int:
        """The pod's memory limit, which Spark sets to heap + overhead."""
        return self.heap + self.overhead


def executor_memory(limit: int) -> ExecutorMemory:
    """Split ``limit`` so the pod's limit is exactly ``limit`` and the heap stays below it."""
    heap = max(MIN_HEAP, limit // 4)
    overhead = max(MIN_OVERHEAD, limit - heap)
    return ExecutorMemory(heap=heap, overhead=overhead)


def executor_selector(group: str) -> str:
    """Label selector of a group's executor pods (the scale subresource's ``status.selector``)."""
    return f"{GROUP_LABEL}={group},{ROLE_LABEL}=executor"


def spark_properties(
    group: str,
    namespace: str,
    spec: OptimizerGroupSpec,
    image: str,
    driver_pod: str,
    driver_host: str,
) -> dict[str, str]:
    """The driver's ``spark.*`` properties, except the master (given on the command line).

    ``spark.kubernetes.driver.pod.name`` makes Spark set the driver pod as the owner of
    every executor pod, so deleting the driver (or its group) removes the executors.
    """
    memory = executor_memory(spec.executor_memory)
    return {
        "spark.app.name": f"floe-optimizer-{group}",
        "spark.submit.deployMode": "client",
        "spark.kubernetes.namespace": namespace,
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.driver.pod.name": driver_pod,
        "spark.kubernetes.executor.podNamePrefix": f"floe-{group}",
        f"spark.kubernetes.executor.label.{GROUP_LABEL}": group,
        f"spark.kubernetes.executor.label.{ROLE_LABEL}": "executor",
        "spark.kubernetes.executor.podTemplateFile": EXECUTOR_TEMPLATE_PATH,
        "spark.kubernetes.executor.deleteOnTermination": "true",
        # What Spark would otherwise do at start and stop with objects floe never has it make: list
        # persistent volume claims to reuse, delete its driver Service and claims by label. In
        # client mode the driver's Service is floe's (owned by the group) and executors mount no
        # claims; turned off, the driver's Role needs no permission on either.
        "spark.kubernetes.driver.service.deleteOnTermination": "false",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        "spark.executor.instances": str(spec.initial_executors),
        "spark.executor.cores": str(spec.executor_cores),
        "spark.kubernetes.executor.request.cores": spec.executor_cpu_request or str(spec.executor_cores),
        # A startup limit above the cores: the driver resizes each pod to the cores once its
        # executor registers (floe_optimizer.startup_cpu).
        "spark.kubernetes.executor.limit.cores": spec.executor_startup_cpu_limit or str(spec.executor_cores),
        "spark.executor.memory": f"{memory.heap // MiB}m",
        "spark.executor.memoryOverhead": f"{memory.overhead // MiB}m",
        "spark.dynamicAllocation.enabled": "false",
        # floe retries a failed task itself (execute.num-retries) and says so in status; Spark's
        # own retries would hide an executor lost to an OOM kill behind silent attempts.
        "spark.task.maxFailures": "1",
        # The driver JVM and the optimizer's Python share the driver pod's limit (DRIVER_MEMORY).
        "spark.driver.memory": DRIVER_HEAP,
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.blockManager.port": str(BLOCK_MANAGER_PORT),
    }
