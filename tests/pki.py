"""Throwaway certificates for tests, made with the openssl CLI (``cryptography`` is not a project
dependency): certificate authorities and the leaves they sign, as files in one directory."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "3650"]


class Pki:
    """Makes ``NAME.crt``/``NAME.key`` in `directory`; RuntimeError when openssl fails or is missing."""

    def __init__(self, directory: Path) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            raise RuntimeError("openssl is not on PATH; it generates the tests' certificates")
        self.openssl = openssl
        self.directory = directory

    def run(self, *args: str) -> None:
        """One openssl command, in the directory."""
        result = subprocess.run(
            [self.openssl, *args], cwd=self.directory, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed:\n{result.stderr}")

    def ca(self, name: str, subject: str | None = None) -> Path:
        """A self-signed certificate authority; returns its certificate."""
        self.run(
            "req", "-x509", *_NEW_KEY, "-keyout", f"{name}.key", "-out", f"{name}.crt",
            "-subj", subject or f"/CN=floe-test-{name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )  # fmt: skip
        return self.directory / f"{name}.crt"

    def leaf(self, name: str, ca_name: str, subject: str, usage: str, *extensions: str) -> Path:
        """A certificate signed by the CA `ca_name` for `usage` (serverAuth, clientAuth); returns it."""
        self.run(
            "req", "-x509", *_NEW_KEY, "-CA", f"{ca_name}.crt", "-CAkey", f"{ca_name}.key",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", subject,
            "-addext", "basicConstraints=critical,CA:FALSE",
            "-addext", "keyUsage=critical,digitalSignature,keyEncipherment",
            "-addext", f"extendedKeyUsage={usage}",
            *extensions,
        )  # fmt: skip
        return self.directory / f"{name}.crt"


def get_json(url: str, ca_file: Path, client: tuple[Path, Path] | None) -> tuple[int, Any]:
    """GET `url` over TLS trusting `ca_file`, presenting the `client` certificate and key if given:
    the status and the JSON body (of an error status too)."""
    context = ssl.create_default_context(cafile=ca_file)
    if client is not None:
        context.load_cert_chain(*client)
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
