"""kopf's record of the last handled spec, with no credential in it.

kopf keeps the spec it last handled in an annotation (``floe.dev/last-handled-configuration``)
to tell what changed. Copied as it is, it would hold a table's inline catalog credentials
(``spec.catalog.properties``) in ``metadata.annotations``, where they outlive the spec's
(a spec that moves them into a Secret still leaves them in the annotation until kopf handles
it) and reach whatever shows annotations. Here every credential value in the spec, by the
rule of `floe.kit.redaction` (a secret-suggesting key, a ``header.`` property, or a name
in a catalog's ``secretProperties``), is kept as a keyed digest: a changed value still changes
the record, so kopf still calls the update handler, and the value itself is not there. The key
is the operator's own secret (its registration token) with the object's uid: whoever reads the
annotation cannot try guesses of a weak password against the digest.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Any, cast

import kopf

from floe.kit.redaction import is_credential_key

DIGEST_PREFIX = "hmac-sha256:"


class CredentialFreeDiffBase(kopf.AnnotationsDiffBaseStorage):
    """`kopf.AnnotationsDiffBaseStorage` whose essence has digests where the spec has credentials,
    keyed by `secret` (the same for every replica and restart, or each would see every spec with
    credentials as changed once) and the object's uid."""

    def __init__(self, *, prefix: str, secret: bytes) -> None:
        super().__init__(prefix=prefix)
        self._secret = secret

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        """The essence kopf compares and stores, credential values replaced by their digests."""
        essence = super().build(body=body, extra_fields=extra_fields)
        spec = essence.get("spec")
        if isinstance(spec, dict):
            # With the object's uid too: one password gives different digests in different objects.
            key = self._secret + b"/" + str(body.get("metadata", {}).get("uid", "")).encode()
            marked = frozenset(_marked_names(spec))
            cast(dict[str, Any], essence)["spec"] = _digested(spec, key, marked)
        return essence


def credential_digest(value: str, key: bytes) -> str:
    """What stands for a credential value in the record."""
    return DIGEST_PREFIX + hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


def _marked_names(node: Any) -> Iterable[str]:
    """Every property name any ``secretProperties`` list in the spec marks secret."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name == "secretProperties" and isinstance(value, list):
                yield from (str(item) for item in value)
            else:
                yield from _marked_names(value)
    elif isinstance(node, list):
        for item in node:
            yield from _marked_names(item)


def _digested(node: Any, key: bytes, marked: frozenset[str]) -> Any:
    if isinstance(node, dict):
        return {
            name: credential_digest(value, key)
            if isinstance(value, str) and is_credential_key(name, marked)
            else _digested(value, key, marked)
            for name, value in node.items()
        }
    if isinstance(node, list):
        return [_digested(item, key, marked) for item in node]
    return node
