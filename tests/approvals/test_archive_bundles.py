"""The console reads the archive through the bundles it is handed
(``Dependencies.archive_bundles``, :class:`~sagacity.ports.ArchiveBundles`), built by the
``serve approvals`` command; the service imports neither the archive service nor Postgres."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest

from sagacity.cli._archive_bundles import ArchiveExports, with_archive
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.consumers.approvals.console._archive import ArchiveView
from sagacity.entries._memory import InMemoryJournal
from sagacity.errors import ConfigurationError, UnknownSagaError
from sagacity.ports import ArchiveBundles, Dependencies
from sagacity.postgres import PostgresRequestStore
from sagacity.privacy._disclosure import WITHHELD
from sagacity.schemas import decode_entry
from sagacity.testing import InMemoryConsoleSessions, InMemoryNoticeClaims

NOWHERE = "postgresql://nobody@127.0.0.1:9/none"
SALTED = sorted(WITHHELD)[0]


class Bundles:
    """Writes a one-event bundle for saga ``s-1``; knows no other saga."""

    def export(self, saga_id: str, out: Path) -> tuple[bool, str]:
        if saga_id != "s-1":
            raise UnknownSagaError(f"no saga {saga_id}", saga_id=saga_id)
        line = json.dumps({"seq": 1, "salts": {SALTED: "aa", "tool": "bb"}}) + "\n"
        (out / "events.jsonl").write_text(line, encoding="utf-8")
        manifest = {"events_sha256": hashlib.sha256(line.encode()).hexdigest()}
        (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        return True, "archive verifies 1 events (0 signed)"


def test_the_view_takes_its_verdict_and_bundle_from_the_port_and_withholds_the_salts() -> None:
    view = ArchiveView(Bundles())
    assert view.verdict("s-1") == (True, "archive verifies 1 events (0 signed)")
    assert view.verdict("s-2") is None
    with zipfile.ZipFile(io.BytesIO(view.bundle("s-1"))) as bundle:
        events = bundle.read("events.jsonl")
        manifest = json.loads(bundle.read("manifest.json"))
    assert json.loads(events) == {"seq": 1, "salts": {"tool": "bb"}}
    assert manifest["events_sha256"] == hashlib.sha256(events).hexdigest()
    with pytest.raises(UnknownSagaError):
        view.bundle("s-2")


def _handed(**more: object) -> Dependencies:
    return Dependencies(
        journal=InMemoryJournal(),
        requests=lambda **given: PostgresRequestStore(NOWHERE, **given),
        console_sessions=InMemoryConsoleSessions(),
        notice_claims=InMemoryNoticeClaims(),
        decode=decode_entry,
        **more,  # type: ignore[arg-type]
    )


def test_the_serve_command_hands_the_archive_the_settings_name() -> None:
    assert with_archive(_handed(), None).archive_bundles is None
    bundles = with_archive(_handed(), NOWHERE).archive_bundles
    assert isinstance(bundles, ArchiveExports)
    assert isinstance(bundles, ArchiveBundles)


def test_an_archive_named_but_not_handed_is_refused() -> None:
    settings = ApprovalsSettings(
        database_url=NOWHERE, insecure_dev=True, archive_database_url=NOWHERE
    )
    with pytest.raises(ConfigurationError, match="archive_bundles"):
        ApprovalsServer(settings, dependencies=_handed(), consume=False)
    handed = with_archive(_handed(), NOWHERE)
    assert ApprovalsServer(settings, dependencies=handed, consume=False) is not None
