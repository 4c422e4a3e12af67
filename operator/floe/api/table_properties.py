"""Iceberg table properties floe applies, read with errors that name the property.

A table property is the table owner's word on how the table is written (target file size,
Parquet options). A value floe cannot apply refuses the table, naming the property, until
the property or the manifest changes: floe never guesses past it.
"""

from __future__ import annotations

from collections.abc import Mapping


class InvalidTableProperty(ValueError):
    """A table property floe applies has a value it cannot use; the message names it and its value."""


def integer_property(properties: Mapping[str, str], name: str, minimum: int | None = 1) -> int | None:
    """The integer table property `name`, or None when the table does not set it; at least
    `minimum` when one is given."""
    text = properties.get(name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidTableProperty(f"table property {name}={text!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise InvalidTableProperty(f"table property {name}={text!r}: expected at least {minimum}")
    return value
