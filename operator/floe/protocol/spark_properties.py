"""The Spark properties file the operator writes for a group's driver, and the driver reads."""

from __future__ import annotations


def render_properties(properties: dict[str, str]) -> str:
    """Java properties text, one ``key=value`` a line, sorted (stable for change detection)."""
    return "".join(f"{key}={value}\n" for key, value in sorted(properties.items()))


def parse_properties(text: str) -> dict[str, str]:
    """Inverse of `render_properties` (blank lines and ``#`` comments ignored)."""
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties
