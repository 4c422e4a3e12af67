"""Kubernetes-style quantities (``128Mi``) and durations (``1h30m``) as validated pydantic types.

The parsers read exactly what the CRD's patterns let through (and, through their CEL twins in
`floe.api.crd_rules`, compute the same values): no surrounding whitespace, nothing longer than
`MAX_UNIT_LENGTH`, integer quantities within int64. Python callers may also hand
`parse_duration` a number of seconds; a manifest may not (see `Duration`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, StringConstraints, WithJsonSchema

_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|K|M|G|T)?")
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
#: Longest quantity or duration string accepted (far beyond any real value); it also bounds the
#: cost of the CEL rules that parse them.
MAX_UNIT_LENGTH = 64
#: Integer quantities are int64 on the wire: the API server refuses larger JSON integers. (The
#: schema cannot say so with a ``maximum``: OpenAPI bounds are float64, 2**63 - 1 rounds to 2**63,
#: and the API server reads that back as -2**63.)
MAX_INT_QUANTITY = 2**63 - 1


#: kubectl reads a manifest's numbers as float64 and writes back those that are integral and below
#: 1e21 without a fraction or exponent (Go's shortest float formatting): ``8.0`` reaches the API
#: server as ``8``. Larger ones stay floats, which no integer field takes.
KUBECTL_INTEGRAL_FLOAT_LIMIT = 1e21


def whole_number(value: Any) -> Any:
    """An integral float (``8.0``, ``1e3``) as the integer ``kubectl apply`` would send for it; any other
    value as it is (left to the field's own validation)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < KUBECTL_INTEGRAL_FLOAT_LIMIT:
        return int(value)
    return value


def parse_quantity(value: Any) -> int:
    """Parse ``128Mi``, ``1G``, ``1048576`` (or ``1048576.0``) or an int into a number of bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected a quantity such as 128Mi, got {value!r}")
    value = whole_number(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"quantity must not be negative, got {value}")
        if value > MAX_INT_QUANTITY:
            raise ValueError(f"quantity must be at most {MAX_INT_QUANTITY} bytes, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a quantity such as 128Mi, got {value!r}")
    _check_length(value)
    # fullmatch, not `$`, which Python's re also matches before a final newline.
    match = _QUANTITY.fullmatch(value)
    if not match:
        raise ValueError(
            f"invalid quantity {value!r}: expected a number with an optional unit, e.g. 128Mi, 1G"
        )
    number, unit = match.groups()
    return int(float(number) * _QUANTITY_FACTORS[unit])


def cpu_cores(value: str) -> float:
    """Cores of a `CpuQuantity`: ``250m`` is 0.25, ``2`` is 2.0."""
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


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
    _check_length(value)
    if value == "-1":
        return -1.0
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"invalid duration {value!r}: expected e.g. 30s, 5m, 1h30m, or -1 for off")
    return sum(float(n) * _DURATION_FACTORS[u] for n, u in parts)


def _check_length(text: str) -> None:
    if len(text) > MAX_UNIT_LENGTH:
        raise ValueError(f"expected at most {MAX_UNIT_LENGTH} characters, got {len(text)}")


def parse_manifest_duration(value: Any) -> float:
    """A duration as a manifest must write it: a string (``60`` is refused, as the CRD refuses it)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a duration string such as 1h or 90s, got {value!r}")
    return parse_duration(value)


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
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "maxLength": MAX_UNIT_LENGTH, "pattern": QUANTITY_PATTERN},
            ],
        }
    ),
]
"""Bytes; accepts ``128Mi``-style strings or integers, serialises back to the string form."""

CpuQuantity = Annotated[
    str, StringConstraints(max_length=MAX_UNIT_LENGTH, pattern=r"^([0-9]+m|[0-9]+(\.[0-9]+)?)$")
]
"""CPU as Kubernetes writes it, whole or milli cores (``2``, ``0.5``, ``250m``); `cpu_cores` reads it."""

Duration = Annotated[
    float,
    BeforeValidator(parse_manifest_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "maxLength": MAX_UNIT_LENGTH, "pattern": DURATION_PATTERN}),
]
"""Seconds; accepts ``1h30m``-style strings (``-1`` = off), serialises back to the string form."""
