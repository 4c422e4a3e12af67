"""Kubernetes-style quantities (``128Mi``) and durations (``1h30m``) as validated pydantic types."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|K|M|G|T)?$")
_QUANTITY_FACTORS = {
    None: 1,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
    "k": 1000,
    "K": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
}
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|K|M|G|T)?$"

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_DURATION_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
DURATION_PATTERN = r"^(-1|([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+)$"


def parse_quantity(value: Any) -> int:
    """Parse ``128Mi``, ``1G``, ``1048576`` or an int into a number of bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected a quantity such as 128Mi, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"quantity must not be negative, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a quantity such as 128Mi, got {value!r}")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(
            f"invalid quantity {value!r}: expected a number with an optional unit, e.g. 128Mi, 1G"
        )
    number, unit = match.groups()
    return int(float(number) * _QUANTITY_FACTORS[unit])


def format_quantity(num_bytes: int) -> str:
    """Shortest exact binary form: 134217728 -> ``128Mi``."""
    for unit in ("Ti", "Gi", "Mi", "Ki"):
        factor = _QUANTITY_FACTORS[unit]
        if num_bytes >= factor and num_bytes % factor == 0:
            return f"{num_bytes // factor}{unit}"
    return str(num_bytes)


def parse_duration(value: Any) -> float:
    """Parse ``1h``, ``90s``, ``1h30m``, a number of seconds, or ``-1`` (off) into seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 1h, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as 1h, got {value!r}")
    text = value.strip()
    if text == "-1":
        return -1.0
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration {value!r}: expected e.g. 30s, 5m, 1h30m, or -1 for off")
    return sum(float(n) * _DURATION_FACTORS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Compact form: 3600 -> ``1h``, 90 -> ``1m30s``, negative -> ``-1``."""
    if seconds < 0:
        return "-1"
    whole = int(seconds)
    if whole != seconds:
        return f"{int(seconds * 1000)}ms"
    out = ""
    for unit, factor in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= factor:
            out += f"{whole // factor}{unit}"
            whole %= factor
    return out or "0s"


Quantity = Annotated[
    int,
    BeforeValidator(parse_quantity),
    PlainSerializer(format_quantity, return_type=str),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": QUANTITY_PATTERN}],
        }
    ),
]
"""Bytes; accepts ``128Mi``-style strings or integers, serialises back to the string form."""

Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN}),
]
"""Seconds; accepts ``1h30m``-style strings (``-1`` = off), serialises back to the string form."""
