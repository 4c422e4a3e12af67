"""Which names suggest a secret: one rule for property keys, query parameters and mapping keys.

A name is split into words (at ``.``, ``-``, ``_``, other punctuation and camelCase humps:
``X-Amz-Security-Token``, ``client_secret``, ``AWSAccessKeyId``). It suggests a secret when a
word does, unless a later word says it only describes one (``token-expires-in-ms``,
``rest.authorization-url``, ``secretRef``):

* a word that is, or ends in, a secret noun: token, secret, password, passphrase, credential,
  signature, cookie, session, authorization (``accesstoken``, ``clientsecret``,
  ``jsessionid`` too; not ``tokenizer``);
* one of the short forms, whole: ``sig``, ``pwd``, ``passwd``, ``auth``, ``cred``, ``creds``,
  ``code`` (an OAuth authorization code);
* ``key`` standing alone or after a word saying whose or what for: an access, API, account,
  private, secret, client, signing, master, shared, storage, encryption or SSE key (also run
  together: ``apikey``, ``accesskey``).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")
_SECRET_NOUNS = (
    "token",
    "tokens",
    "secret",
    "secrets",
    "password",
    "passwords",
    "passphrase",
    "credential",
    "credentials",
    "signature",
    "cookie",
    "session",
    "sessionid",
    "authorization",
)
_SHORT_FORMS = frozenset({"sig", "pwd", "passwd", "auth", "cred", "creds", "code"})
_KEY_OWNERS = (
    "access",
    "api",
    "account",
    "private",
    "secret",
    "client",
    "signing",
    "master",
    "shared",
    "storage",
    "encryption",
    "sse",
    "session",
    "subscription",
)
_KEY_WORDS = frozenset({"key", "keys"})
_COMPOUND_KEYS = tuple(f"{owner}{key}" for owner in _KEY_OWNERS for key in _KEY_WORDS)
_DESCRIBES = frozenset(
    {
        "url",
        "uri",
        "endpoint",
        "enabled",
        "type",
        "mode",
        "expires",
        "expiry",
        "expiration",
        "ttl",
        "ms",
        "file",
        "path",
        "dir",
        "ref",
        "name",
        "region",
        "scope",
        "properties",
    }
)
"""Words after a secret word that make the name one of a setting about the secret, not the secret."""


def name_words(name: str) -> list[str]:
    """The lower-cased words of a property or parameter name."""
    return [word.lower() for word in _WORD.findall(name)]


def _secret_word(words: list[str], index: int) -> bool:
    word = words[index]
    if word in _SHORT_FORMS or word.endswith(_SECRET_NOUNS) or word.endswith(_COMPOUND_KEYS):
        return True
    if word in _KEY_WORDS:
        return len(words) == 1 or (index > 0 and words[index - 1] in _KEY_OWNERS)
    return False


def suggests_secret(name: str) -> bool:
    """Whether a property, query parameter or mapping key of this name holds a secret."""
    words = name_words(name)
    for index in range(len(words)):
        if _secret_word(words, index):
            return not any(word in _DESCRIBES for word in words[index + 1 :])
    return False
