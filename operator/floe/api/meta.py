"""What every resource of ``floe.dev/v1alpha1`` shares: the bounds on its strings, lists and maps,
the constrained types built from them, the wire-format base model, and Kubernetes object metadata.
"""

from __future__ import annotations

import datetime
import functools
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from floe.api.units import whole_number

# Bounds. Every string, list and map of both kinds has one, so that the API server refuses a
# runaway value (a pasted file, a newline in an image) at `kubectl apply`, with the field named,
# instead of the operator failing on it later. The patterns use only what Go's RE2 (the API
# server) and Rust's regex (pydantic) read alike: explicit ASCII classes and \p{..} categories,
# never \s, \w or \d, whose meaning differs between the two (Unicode in Rust, ASCII in Go).

#: A DNS-1123 subdomain: what the name of a Kubernetes object (a Secret, an OptimizedTable) must be.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MAX_SUBDOMAIN_LENGTH = 253
#: A DNS-1123 label: a namespace, or an OptimizerGroup (its name goes into Service names).
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_LABEL_LENGTH = 63
#: An OptimizerGroup's driver Service is ``floe-NAME-driver``, and a Service name is a DNS-1035
#: label of at most 63 characters: so a group name has at most 63 - len("floe--driver") = 51.
MAX_GROUP_NAME_LENGTH = MAX_LABEL_LENGTH - len("floe--driver")
#: A label or annotation key: an optional DNS subdomain prefix and a name of at most 63 characters.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
MAX_QUALIFIED_NAME_LENGTH = MAX_SUBDOMAIN_LENGTH + 1 + MAX_LABEL_LENGTH
#: A label value: empty, or up to 63 alphanumerics, '-', '_' and '.' that start and end alphanumeric.
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
#: Annotations of one object may hold 256 KiB in all (the API server's limit).
MAX_ANNOTATION_LENGTH = 256 * 1024
#: The keys a Secret may hold; inline catalog properties follow the same rule, so that either
#: source can hold any property.
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
#: Catalog properties are short (URIs, regions, keys); a token or a credentials blob fits in 8 KiB.
MAX_PROPERTY_LENGTH = 8 * 1024
MAX_PROPERTIES = 128
#: Iceberg names have no limit of their own, but the catalogs do: the SQL and JDBC catalogs store a
#: namespace and a table name in VARCHAR(255) columns each, Glue and the Hive Metastore cap names
#: (and columns) at 255 characters. An identifier is ``namespace.table``, namespaces nested by '.'.
MAX_NAME_LENGTH = 255
MAX_TABLE_IDENTIFIER_LENGTH = 2 * MAX_NAME_LENGTH + 1
#: ``namespace.table``: at least two non-empty parts, without whitespace or control characters.
TABLE_IDENTIFIER = r"^[^.\p{Z}\p{Cc}]+(\.[^.\p{Z}\p{Cc}]+)+$"
#: A glob over ``namespace.table`` identifiers: dot-separated parts of any characters but dots,
#: brackets, whitespace and control characters, or ``[...]``/``[!...]`` classes of such characters;
#: ``*``, ``**`` and ``?`` are characters like others here (`floe.tables.selection` gives their meaning).
_GLOB_PART = r"([^.\[\]\p{Z}\p{Cc}]|\[!?[^.\[\]\p{Z}\p{Cc}]+\])+"
TABLE_PATTERN = rf"^{_GLOB_PART}(\.{_GLOB_PART})*$"
MAX_PATTERNS = 256
#: A name as a catalog knows it: no whitespace or control characters.
CATALOG_NAME = r"^[^\p{Z}\p{Cc}]+$"
#: A column name (or a dotted path to a nested one): spaces are legal in Iceberg, control characters
#: never are in anything a person typed.
COLUMN_NAME = r"^[^\p{Cc}]+$"

#: An OCI image reference, as the distribution/reference grammar has it:
#: ``[registry[:port]/]path[:tag][@algorithm:hex]``. No whitespace or control characters anywhere.
_DOMAIN_COMPONENT = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = rf"({_DOMAIN_COMPONENT}(\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(:[0-9]+)?/"
_PATH_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = rf"^({_REGISTRY})?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*(:{_TAG})?(@{_DIGEST})?$"
#: distribution caps a repository name (registry included) at 255 characters and a tag at 128; the
#: longest digest in use is sha512's 128 hex digits.
MAX_IMAGE_LENGTH = 255 + len(":") + 128 + len("@sha512:") + 128
#: Tolerations and affinity are passed to the pods as they are (the pod API validates them); these
#: bound only their size. A Toleration has 5 fields, an Affinity 3.
MAX_TOLERATIONS = 64
MAX_OBJECT_FIELDS = 16
MAX_NODE_SELECTOR = 64
#: Integers that are counts without a natural ceiling stay within int32, which every Kubernetes
#: client reads without loss (the scale subresource even requires it of spec.executors).
INT32_MAX = 2**31 - 1
#: A group beyond a thousand executor pods, or executors beyond 256 cores, is a typo or a second group.
MAX_EXECUTORS = 1000
MAX_EXECUTOR_CORES = 256
#: A retry reruns the whole task; past a hundred, retrying does not help.
MAX_RETRIES = 100
#: Status text: as metav1.Condition bounds a condition's message, its type and its reason.
MAX_MESSAGE_LENGTH = 32 * 1024
MAX_CONDITION_TYPE_LENGTH = 316
MAX_REASON_LENGTH = 1024
MAX_TIME_LENGTH = 64
MAX_CONDITIONS = 16
#: Spark refuses an executor whose memory is below 1.5 x its 300 MiB reserved memory.
SPARK_MIN_EXECUTOR_MEMORY = 450 * 1024 * 1024


def _without_nulls(value: Any) -> Any:
    """A map with its null values left out, as the API server prunes them (see `WireModel`)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    return value


Integer = Annotated[int, BeforeValidator(whole_number)]
"""An integer field: an int, or a float with an integral value (``fragmentRatio: 8.0``), which
``kubectl apply`` sends as the integer it is."""
LabelKey = Annotated[str, StringConstraints(max_length=MAX_QUALIFIED_NAME_LENGTH, pattern=QUALIFIED_NAME)]
LabelValue = Annotated[str, StringConstraints(max_length=MAX_LABEL_LENGTH, pattern=LABEL_VALUE)]
LabelMap = Annotated[dict[LabelKey, LabelValue], BeforeValidator(_without_nulls)]
"""Labels (and a nodeSelector): qualified-name keys, label values; null values are dropped."""
AnnotationValue = Annotated[str, StringConstraints(max_length=MAX_ANNOTATION_LENGTH)]
AnnotationMap = Annotated[dict[LabelKey, AnnotationValue], BeforeValidator(_without_nulls)]
PropertyKey = Annotated[str, StringConstraints(max_length=MAX_SUBDOMAIN_LENGTH, pattern=SECRET_KEY)]
PropertyValue = Annotated[str, StringConstraints(max_length=MAX_PROPERTY_LENGTH)]
PropertyMap = Annotated[dict[PropertyKey, PropertyValue], BeforeValidator(_without_nulls)]
ColumnName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_LENGTH, pattern=COLUMN_NAME)]


def _admits_none(annotation: Any) -> bool:
    """Whether a field of this type may hold null (``X | None``, ``Any``)."""
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_admits_none(arg) for arg in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _admits_none(typing.get_args(annotation)[0])
    return False


@functools.cache
def _non_nullable(model: type[BaseModel]) -> frozenset[str]:
    """The names and aliases of the model's fields that cannot hold null."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if not _admits_none(info.annotation):
            keys.update({name, info.alias or name})
    return frozenset(keys)


def clip(text: str, limit: int = MAX_MESSAGE_LENGTH) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut): the CRD bounds status text,
    and a status patch with a longer value would be refused whole."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def rfc3339(seconds: float) -> str:
    """An epoch time as RFC 3339 UTC, as Kubernetes writes times."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WireModel(BaseModel):
    """Wire-format models, validated as the API server validates the CRD.

    * ``strict``: no coercion (``"2"`` is not an integer, ``1`` not a boolean, ``60`` not a
      duration), because the API server's schema allows none; enums opt back out of strictness,
      since strict pydantic would want enum instances rather than their strings.
    * No infinities or NaN: JSON has none, so no manifest that `kubectl apply` takes can hold one.
    * A null value of a field that cannot be null counts as absent (its default applies): the
      API server prunes such nulls before defaulting and validation.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", strict=True, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _prune_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            dropped = _non_nullable(cls)
            return {k: v for k, v in data.items() if v is not None or k not in dropped}
        return data


class ObjectMeta(WireModel):
    """Kubernetes metadata: what floe reads, bounded as the API server bounds it, and the fields the
    API server writes (a manifest from ``kubectl get -o yaml`` loads), passed over unchecked.

    Any other field is refused, as ``kubectl apply`` refuses it: a misspelt ``namespace`` must not
    go unnoticed in `floe run` either.
    """

    name: str = Field(min_length=1, max_length=MAX_SUBDOMAIN_LENGTH, pattern=DNS1123_SUBDOMAIN)
    namespace: str = Field(default="default", max_length=MAX_LABEL_LENGTH, pattern=DNS1123_LABEL)
    labels: LabelMap = Field(default_factory=dict)
    annotations: AnnotationMap = Field(default_factory=dict)
    generate_name: Any = None
    uid: Any = None
    resource_version: Any = None
    generation: Any = None
    creation_timestamp: Any = None
    deletion_timestamp: Any = None
    deletion_grace_period_seconds: Any = None
    owner_references: Any = None
    finalizers: Any = None
    managed_fields: Any = None
    self_link: Any = None


class GroupMeta(ObjectMeta):
    """An OptimizerGroup's metadata: its name is a DNS-1123 label short enough for its Service's."""

    name: str = Field(
        min_length=1,
        max_length=MAX_GROUP_NAME_LENGTH,
        pattern=DNS1123_LABEL,
        description=f"at most {MAX_GROUP_NAME_LENGTH} characters: the driver's Service is floe-NAME-driver",
    )
