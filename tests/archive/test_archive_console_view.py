"""The console's view of the archive: a saga's audit verdict and its bundle as a download."""

from __future__ import annotations

import io
import zipfile

import psycopg
import pytest
from archive_helpers import as_raw, make_chain

from sagacity.consumers.approvals.console._archive import ArchiveView

pytestmark = pytest.mark.postgres


def test_verdict_and_bundle_of_an_archived_saga(archiver, archive_dsn) -> None:
    chain = make_chain("saga-v", 5)
    archiver.archive(as_raw(chain))
    view = ArchiveView(archive_dsn)
    ok, detail = view.verdict("saga-v") or (False, "none")
    assert ok, detail
    assert "archive verifies 5 events" in detail
    assert view.verdict("saga-unknown") is None
    names = zipfile.ZipFile(io.BytesIO(view.bundle("saga-v"))).namelist()
    assert "events.jsonl" in names
    assert "verify_bundle.py" in names
    # An edited row in the archive is what the verdict reports.
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # past the append-only guard
        conn.execute(
            "UPDATE side_effect_journal SET payload = 'edited' WHERE saga_id = %s AND seq = 2",
            ("saga-v",),
        )
    ok, detail = view.verdict("saga-v") or (True, "none")
    assert not ok
    assert "does NOT verify at seq 2" in detail
