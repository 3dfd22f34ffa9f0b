"""The journal's key service from ``SAGACITY_*`` variables (docs/adr/0019-erasure.md §3)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from sagacity._envelope import KEK_SETTING, KeyRing
from sagacity._keys import KeyService
from sagacity.errors import ConfigurationError

log = logging.getLogger("sagacity.journal")


def key_service_from_env(environ: Mapping[str, str] | None = None) -> KeyService | None:
    """The key service ``SAGACITY_KEY_ENCRYPTION_KEY_FILE`` configures (its keys stored in
    ``SAGACITY_DATABASE_URL``), checked against the stored keys; ``None`` when the variable is
    unset, which is logged once: the journal then writes its data in clear, as before.

    Raises:
        KeyEncryptionKeyError: the key file is missing or malformed, or does not open the
            stored keys (the message names the setting).
        ConfigurationError: ``SAGACITY_DATABASE_URL`` is not set.
        PersistenceError: the key store could not be reached.
    """
    env = os.environ if environ is None else environ
    value = env.get(KEK_SETTING, "").strip()
    if not value:
        log.warning(
            "journal data is not encrypted: %s is not set (payloads and results travel and are "
            "archived in clear; docs/adr/0019-erasure.md)",
            KEK_SETTING,
        )
        return None
    ring = KeyRing.from_setting(value)
    url = env.get("SAGACITY_DATABASE_URL", "").strip()
    if not url:
        raise ConfigurationError(
            f"{KEK_SETTING} is set: SAGACITY_DATABASE_URL must name the database holding the "
            "data keys"
        )
    from sagacity.keystore_postgres import PostgresKeyStore  # the Postgres driver, only here

    service = KeyService(PostgresKeyStore(url), ring)
    try:
        service.check()
    except BaseException:
        service.close()
        raise
    return service
