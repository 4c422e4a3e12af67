"""Credentials are found by their key, never by their value, and masked wherever floe writes."""

from __future__ import annotations

import logging

import pytest

from floe.kit.redaction import (
    MASK,
    RedactingFilter,
    Redactor,
    credential_values,
    is_credential_key,
    mask_credentials,
    without_catalog_credentials,
)


@pytest.mark.parametrize(
    "key",
    [
        "token",
        "credential",
        "s3.secret-access-key",
        "s3.access-key-id",
        "s3.session-token",
        "gcs.oauth2.token",
        "adls.account-key",
        "adls.sas-token.myaccount",
        "client.secret-token",
        "jdbc.password",
        "header.Authorization",
    ],
)
def test_credential_keys(key: str) -> None:
    assert is_credential_key(key)


@pytest.mark.parametrize(
    "key", ["type", "uri", "warehouse", "s3.endpoint", "s3.region", "py-io-impl", "tokenizer", "keyspace"]
)
def test_ordinary_keys(key: str) -> None:
    assert not is_credential_key(key)


def test_only_credentials_are_masked() -> None:
    properties = {
        "type": "rest",
        "uri": "https://alice:pa55word@catalog.example.com/api",
        "warehouse": "s3://lake/warehouse",
        "credential": "client:client-secret",
        "s3.secret-access-key": "AKIASECRETVALUE",
    }
    redact = Redactor()
    redact.add(properties)
    text = (
        "catalog 'prod' (type rest) at https://alice:pa55word@catalog.example.com/api failed for "
        "s3://lake/warehouse with client:client-secret and AKIASECRETVALUE"
    )
    masked = redact(text)
    assert "pa55word" not in masked and "client-secret" not in masked and "AKIASECRETVALUE" not in masked
    assert "type rest" in masked and "s3://lake/warehouse" in masked and "catalog.example.com" in masked
    assert credential_values(properties) == {"alice:pa55word", "client:client-secret", "AKIASECRETVALUE"}


def test_uri_userinfo_and_secret_query_parameters_are_masked_anywhere() -> None:
    text = "jdbc:postgresql://db:5432/x?user=u&password=hunter2 and https://u:p@h/ and postgresql://u:p2@db/x"
    assert mask_credentials(text) == (
        f"jdbc:postgresql://db:5432/x?user=u&password={MASK} and https://{MASK}@h/ and postgresql://{MASK}@db/x"
    )


def test_the_log_filter_masks_messages(caplog: pytest.LogCaptureFixture) -> None:
    redact = Redactor()
    redact.add({"token": "t0k3n-value"})
    logger = logging.getLogger("floe.test.credentials")
    handler = logging.Handler()
    handler.addFilter(RedactingFilter(redact))
    records: list[logging.LogRecord] = []
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        logger.warning("calling %s with %s", "https://a:b@h/", "t0k3n-value")
    finally:
        logger.removeHandler(handler)
    assert records[0].getMessage() == f"calling https://{MASK}@h/ with {MASK}"


def test_a_file_io_never_gets_the_catalogs_own_authentication() -> None:
    properties = {
        "type": "rest",
        "uri": "https://c",
        "token": "t",
        "credential": "c",
        "header.X-Api-Key": "k",
        "rest.sigv4-enabled": "true",
        "s3.endpoint": "http://s3",
        "s3.secret-access-key": "s",
    }
    assert without_catalog_credentials(properties) == {
        "type": "rest",
        "uri": "https://c",
        "s3.endpoint": "http://s3",
        "s3.secret-access-key": "s",
    }
