# Developer and CI entry points. `make test` is what .ci/run runs.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3.11
VENV := .venv
VENV_PY := $(VENV)/bin/python

# Java 17 is the `java` on PATH; resolve its home once for pyspark's spark-submit.
ifndef JAVA_HOME
JAVA_HOME := $(shell java_bin=$$(command -v java 2>/dev/null) && dirname "$$(dirname "$$(readlink -f "$$java_bin")")")
endif
export JAVA_HOME

# The stamp is named after pyproject.toml's content, so a changed dependency list reinstalls
# and an unchanged one costs nothing, whatever the files' timestamps after a checkout.
PYPROJECT_HASH := $(shell sha256sum pyproject.toml | cut -c1-16)
VENV_STAMP := $(VENV)/.floe-installed-$(PYPROJECT_HASH)

LINT_DIRS := $(wildcard operator optimizer_image tests scripts)
# mypy fails on a directory without Python files, and optimizer_image may still be empty.
MYPY_DIRS := $(foreach dir,operator/floe optimizer_image,$(if $(shell find $(dir) -name '*.py' -print -quit 2>/dev/null),$(dir)))

.PHONY: venv jars test-envs k8s-env helm-env checkov-env moto-env rest-catalog-env flink-env prometheus-env grafana-board-env host-env kind-env images lint docs test demo cluster cluster-catalog cluster-down

venv: $(VENV_STAMP)

$(VENV_STAMP):
	$(VENV_PY) -c '' 2>/dev/null || $(PYTHON) -m venv --clear $(VENV)
	$(VENV_PY) -m pip install -q --disable-pip-version-check -e ".[dev,spark]"
	rm -f $(VENV)/.floe-installed-*
	touch $@

jars: venv
	$(VENV_PY) -c 'from floe.local.reference_jars import reference_jars; print(*reference_jars(), sep="\n")'

# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok for tests/k8s,
# built from the Go module proxy and cached by version (a cold build takes ~16 min).
k8s-env:
	scripts/k8s-test-env/build.sh >/dev/null

# helm for tests/k8s/test_chart.py, built from the Go module proxy and cached by version.
helm-env:
	scripts/helm/build.sh >/dev/null

# checkov for tests/k8s/test_chart_checkov.py (a scan of the rendered chart), in a virtualenv of its
# own: its exact pins clash with floe's dependencies (see the script).
checkov-env:
	scripts/checkov/build.sh >/dev/null

# moto's S3 server for tests/test_maintenance_s3.py, in a virtualenv of its own (see the script).
moto-env:
	scripts/moto/build.sh >/dev/null

# PyFlink and the Iceberg Flink runtime for the concurrency soak's Flink upsert writer
# (tests/soak), in a virtualenv of its own: PyFlink's pins clash with floe's (see the script).
flink-env:
	scripts/flink/build.sh >/dev/null

# Iceberg's REST catalog test server (JDBC on SQLite, S3FileIO) for tests/test_rest_catalog_s3.py
# and the end-to-end tests: its jars fetched with Maven and cached by recipe (see the script).
rest-catalog-env:
	scripts/rest-catalog/build.sh >/dev/null

# Debian's prometheus, unpacked from its .deb (not installed: no service starts), for
# tests/k8s/test_grafana_dashboard.py, which evaluates the chart's dashboard on what it scrapes.
prometheus-env:
	scripts/prometheus/build.sh >/dev/null

# The page that draws the chart's Grafana dashboard with Grafana's own panel components
# (@grafana/ui, Apache-2.0) for tests/test_dashboard_preview.py and docs/img/dashboard.png: npm
# packages from the lock in tests/grafana_board/, bundled by esbuild and cached by content.
grafana-board-env:
	scripts/grafana-board/build.sh >/dev/null

# podman (runc, the ulimits kind's nodes need), debootstrap, and Debian's headless chromium with its
# chromedriver (tests/test_ui_browser.py), installed and configured only where missing; the images
# are built with podman, and kind runs on it where no Docker engine answers.
host-env:
	scripts/host/podman.sh

# kind, its kubectl and the kind node image for tests/e2e, built here and cached by content. The
# node image needs the kube binaries: scripts/kind/build.sh builds them, or waits for the build
# under way, once its own parts are done.
kind-env: host-env
	scripts/kind/build.sh >/dev/null

# floe's operator and optimizer images, built with podman from this checkout, cached by content.
images: host-env
	scripts/images/build.sh >/dev/null

# A local kind cluster with floe installed: `kubectl apply -f examples/kind/`, `kubectl get ot -w`.
CLUSTER ?= floe
cluster: kind-env helm-env
	scripts/kind/cluster.sh up $(CLUSTER) >/dev/null
	scripts/kind/deploy-floe.sh $(CLUSTER)

# A demo REST catalog on S3 for that cluster, with tables a writer keeps adding small files to; runs
# until Ctrl-C. Its properties go into the Secret analytics/floe-demo-catalog (examples/kind/).
cluster-catalog: venv jars moto-env rest-catalog-env
	$(VENV_PY) scripts/kind/demo-catalog.py --cluster $(CLUSTER)

cluster-down:
	scripts/kind/cluster.sh down $(CLUSTER)

lint: venv
	$(VENV)/bin/ruff check $(LINT_DIRS)
	$(VENV)/bin/ruff format --check $(LINT_DIRS)
	$(VENV)/bin/mypy --strict $(MYPY_DIRS)
	$(VENV)/bin/lint-imports --no-cache

# The docs site (mkdocs.yml: docs/, and the reference pages scripts/docs/mkdocs_hooks.py generates
# from the code), built into build/site. Strict: a broken link, a missing page or a generator that
# fails stops the build.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Everything the tests use, in three chains at once: the kube binaries, etcd and kwok (the
# longest: about 9 minutes cold here), helm, and the rest (pip, Maven, Debian's prometheus,
# debootstrap, podman, then kind's own Go tools and images, which wait for the kube binaries only
# at the node image).
# Maven's builds stay in one chain: concurrent runs would write the same local repository. floe's
# images are not built here: the e2e tests' session fixture builds them (minutes when the sources
# changed) on its pytest worker while the other worker runs the rest.
test-envs: venv
	@$(MAKE) --no-print-directory k8s-env & k8s=$$!; \
	$(MAKE) --no-print-directory helm-env & helm=$$!; \
	rc=0; $(MAKE) --no-print-directory jars checkov-env moto-env rest-catalog-env flink-env prometheus-env grafana-board-env host-env kind-env || rc=$$?; \
	wait $$k8s || rc=$$?; \
	wait $$helm || rc=$$?; \
	exit $$rc

# The venv, the builds, lint and the docs build beside pytest on two workers, and each phase's time
# at the end.
test:
	scripts/test/run.sh

demo: venv jars
	$(VENV)/bin/floe demo
