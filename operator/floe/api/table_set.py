"""``kind: OptimizedTableSet``: every catalog table that matches its patterns, kept optimized."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from floe.api.meta import (
    DNS1123_LABEL,
    MAX_CONDITIONS,
    MAX_GROUP_NAME_LENGTH,
    MAX_PATTERNS,
    MAX_TABLE_IDENTIFIER_LENGTH,
    TABLE_PATTERN,
    ObjectMeta,
    WireModel,
)
from floe.api.status import Condition, Message, Time
from floe.api.table import CatalogRef, OptimizedTableSpec, OptimizedTableTemplate
from floe.api.units import Duration

TABLE_SET_LABEL = "floe.dev/table-set"
"""The label on each OptimizedTable a set made: the set's name."""


TablePattern = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_TABLE_IDENTIFIER_LENGTH, pattern=TABLE_PATTERN)
]


class OptimizedTableSetSpec(WireModel):
    """Every table of a catalog whose ``namespace.table`` matches an include pattern and no exclude
    pattern, kept optimized: one OptimizedTable per table, made and removed by the operator."""

    catalog: CatalogRef
    include: list[TablePattern] = Field(
        min_length=1,
        max_length=MAX_PATTERNS,
        description="globs over namespace.table: * and ? within one dot-separated part, ** across "
        "parts (nested namespaces), [abc] and [!abc] classes; e.g. sales.*, raw.**, **",
    )
    exclude: list[TablePattern] = Field(
        default_factory=list, max_length=MAX_PATTERNS, description="globs of tables left out"
    )
    group: str = Field(
        default="default",
        max_length=MAX_GROUP_NAME_LENGTH,
        pattern=DNS1123_LABEL,
        description="the OptimizerGroup serving the tables, in the set's namespace",
    )
    template: OptimizedTableTemplate = Field(
        default_factory=OptimizedTableTemplate,
        description="OptimizedTable settings of every table of the set (quota, thresholds, maintenance)",
    )
    list_interval: Duration = Field(default=300.0, description="how often the catalog is listed again")

    @field_validator("list_interval")
    @classmethod
    def _interval_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("listInterval must be greater than 0")
        return value

    def table_spec(self, identifier: str) -> OptimizedTableSpec:
        """The spec of the set's OptimizedTable for `identifier`: the table, the set's catalog and
        group. The template is not copied into it: it is inherited (`floe.api.inheritance`), so that
        what the table's own manifest sets wins, and a changed template reaches every table."""
        catalog = self.catalog.model_dump(by_alias=True, exclude_defaults=True)
        return OptimizedTableSpec.model_validate(
            {"table": identifier, "catalog": catalog, "group": self.group}
        )


class OptimizedTableSetStatus(WireModel):
    """What the operator found at the set's last listing (written by the operator)."""

    observed_generation: int | None = None
    last_listed: Time | None = Field(
        default=None,
        description="when the operator last listed the catalog (RFC 3339)",
        json_schema_extra={"format": "date-time"},
    )
    matched_tables: int | None = Field(default=None, description="catalog tables the patterns match")
    managed_tables: int | None = Field(default=None, description="OptimizedTables the set owns")
    claimed_tables: int | None = Field(
        default=None,
        description="matching tables another OptimizedTable (hand-written, or another set's) serves",
    )
    message: Message | None = None
    conditions: list[Condition] = Field(default_factory=list, max_length=MAX_CONDITIONS)


class OptimizedTableSet(WireModel):
    """``kind: OptimizedTableSet``."""

    api_version: Literal["floe.dev/v1alpha1"]
    kind: Literal["OptimizedTableSet"]
    metadata: ObjectMeta
    spec: OptimizedTableSetSpec
    status: OptimizedTableSetStatus | None = None
