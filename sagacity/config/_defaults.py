"""Names every part agrees on unless told otherwise: the journal topic and the services'
consumer groups (one definition each; :mod:`sagacity._env` re-exports them)."""

from __future__ import annotations

DEFAULT_TOPIC = "sagacity.journal"
"""The journal topic (``SAGACITY_TOPIC``)."""

DEFAULT_ARCHIVE_GROUP = "sagacity-archive"
"""The archive's consumer group (``SAGACITY_ARCHIVE_GROUP``); readers' index trusts its offsets."""

DEFAULT_APPROVALS_GROUP = "sagacity-approvals"
"""The approvals service's consumer group (``SAGACITY_APPROVALS_GROUP``)."""

DEFAULT_COMPENSATION_GROUP = "sagacity-compensation"
"""The compensation service's consumer group (``SAGACITY_COMPENSATION_GROUP``)."""

ALLOW_CLEAR_DATA_SETTING = "SAGACITY_ALLOW_CLEAR_DATA"
"""``1``: a component may start without a key-encryption key, its journal data in clear
(``--allow-clear-data``; refused otherwise, :func:`sagacity._env.refuse_clear_data`)."""
