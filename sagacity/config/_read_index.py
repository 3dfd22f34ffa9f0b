"""Where readers find sagas' archived prefixes: the read index's settings (a value the
journal's adapter, the services' settings and the composition root share;
docs/adr/0010-saga-read-index.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sagacity.config._defaults import DEFAULT_ARCHIVE_GROUP


class ReadIndexSettings(BaseModel):
    """Where readers find sagas' archived prefixes (docs/adr/0010-saga-read-index.md).

    Attributes:
        database_url: the archive database (``SAGACITY_ARCHIVE_DATABASE_URL``, else
            ``SAGACITY_DATABASE_URL``); ``None``: no index, reads scan partitions.
        archive_schema: the schema holding the archive (``SAGACITY_ARCHIVE_SCHEMA``; default
            the connection's search_path).
        archive_group: the archiver's consumer group (``SAGACITY_ARCHIVE_GROUP``, as
            ``sagacity serve archive --group``).
        enabled: ``SAGACITY_READ_INDEX=off`` turns the index off.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str | None = None
    archive_schema: str | None = None
    archive_group: str = Field(default=DEFAULT_ARCHIVE_GROUP, min_length=1)
    enabled: bool = True
