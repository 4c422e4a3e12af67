"""Tests against a real, local Kubernetes control plane (marker ``k8s``); see ``conftest.py``."""
