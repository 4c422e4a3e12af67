# syntax=docker/dockerfile:1
# The floe operator image: `floe operator` (kopf handlers, the task service and the engine) on
# Python 3.11. It starts no Spark and carries neither Java nor pyspark.
#
# Build from the repository root, with Docker:
#   docker build -f operator.Dockerfile -t ghcr.io/floe-dev/floe-operator:0.1.0 .
# scripts/images/build.sh builds the same image with podman from a locally made Debian base, and
# gives it the wheels it built on the host (`--build-context wheels=DIR`) instead of the stage below.
# The Helm chart runs it as UID 10001 with a read-only root filesystem and /tmp as an emptyDir.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS wheels
COPY scripts/images/install-floe.sh /usr/local/sbin/install-floe
COPY pyproject.toml /src/
COPY operator/ /src/operator/
COPY optimizer_image/floe_optimizer/ /src/optimizer_image/floe_optimizer/
RUN install-floe wheels /src /wheels operator

FROM ${BASE_IMAGE}
COPY scripts/images/install-floe.sh /usr/local/sbin/install-floe
RUN --mount=type=bind,from=wheels,source=/wheels,target=/tmp/wheels install-floe install operator /tmp/wheels

ENV PATH=/opt/floe/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
EXPOSE 7070
ENTRYPOINT ["/usr/bin/tini", "--", "floe"]
CMD ["operator"]
