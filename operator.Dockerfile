# syntax=docker/dockerfile:1
# The floe operator image: `floe operator` (kopf handlers, the task service and the engine). It
# starts no Spark and needs no Java. Build from the repository root:
#   docker build -f operator.Dockerfile -t ghcr.io/floe-dev/floe-operator:0.1.0 .
# The Helm chart runs it as UID 10001 with a read-only root filesystem and /tmp as an emptyDir.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheels
WORKDIR /src
COPY pyproject.toml ./
COPY operator/ operator/
COPY optimizer_image/floe_optimizer/ optimizer_image/floe_optimizer/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 floe \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin floe
COPY --from=wheels /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-index /tmp/wheels/*.whl && rm -rf /tmp/wheels

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
EXPOSE 7070
ENTRYPOINT ["/usr/bin/tini", "--", "floe"]
CMD ["operator"]
