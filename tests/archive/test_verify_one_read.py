"""``verify`` reads the archived events once, on real PostgreSQL: the chains are walked and
every saga's story is read on the same stream of rows (docs/adr/0017-audit-coverage.md, "The
saga grammar"), and the findings are those of the two reads it replaces (the chains, then a
select of every row's story) over the grammar's vectors: impossible stories, data withheld,
erasures that count and do not, the flows the product journals."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from archive_helpers import as_raw, make_chain

from sagacity.consumers.archive import BatchArchiver, iter_audits
from sagacity.consumers.archive._story import read_stories, story_failure
from sagacity.entries._events import JournalEntry
from sagacity.postgres.archive import PostgresArchiveAudits, story_query
from sagacity.signing._operator_signature import OperatorVerifier

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "grammar-v1.json").read_text(encoding="utf-8"))
PINNED = OperatorVerifier([bytes.fromhex(VECTORS["operator_public_key"])])


class Reads:
    """Every statement any connection of this process sends that reads the archived events."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.statements: list[str] = []
        self._lock = threading.Lock()
        for cls in (psycopg.Cursor, psycopg.ServerCursor):
            self._wrap(monkeypatch, cls, "execute")
        self._wrap(monkeypatch, psycopg.Cursor, "copy")

    def _wrap(self, monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> None:
        original = getattr(cls, name)
        reads = self

        def recorded(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            text = query if isinstance(query, str) else str(query)
            if "side_effect_journal" in text:
                with reads._lock:
                    reads.statements.append(text)
            return original(cursor, query, *args, **kwargs)

        monkeypatch.setattr(cls, name, recorded)


@pytest.fixture
def clean_archive(archiver: BatchArchiver) -> None:
    events = [e for n in range(40) for e in make_chain(f"saga-{n:03d}", 2 + n % 7)]
    assert archiver.archive(as_raw(events)).archived == len(events)


@pytest.mark.parametrize("bulk", [None, False])
def test_verify_reads_the_events_once(
    clean_archive: None, archive_dsn: str, monkeypatch: pytest.MonkeyPatch, bulk: bool | None
) -> None:
    """Every path (the default one, compiled where it is installed, and the column check) reads
    the events in one statement; before, a second select read every row's story."""
    reads = Reads(monkeypatch)
    with psycopg.connect(archive_dsn) as conn:
        audits = list(iter_audits(PostgresArchiveAudits(conn), bulk=bulk))
    assert len(audits) == 40
    assert all(a.ok for a in audits), [a for a in audits if not a.ok][:2]
    assert len(reads.statements) == 1, reads.statements


def _vector_events() -> Iterator[JournalEntry]:
    for case in VECTORS["cases"]:
        if case["after_seq"]:  # an anchored case needs a signed retention record
            continue
        yield from (JournalEntry.from_dict(e) for e in case["events"])


def _two_reads(
    conn: psycopg.Connection, *, operator: OperatorVerifier | None, allow_unopened: bool
) -> dict[str, tuple[str, int] | None]:
    """Each saga's first story finding as the select of every row's story gave it."""
    told = conn.execute(story_query(where="", forms=True)).fetchall()
    conn.rollback()
    out: dict[str, tuple[str, int] | None] = {}
    for story in read_stories(told, operator=operator):
        failure = story_failure(story, allow_unopened=allow_unopened)
        out[story.saga_id] = None if failure is None else (failure[0].value, failure[1])
    return out


@pytest.mark.parametrize("bulk", [None, True, False])
@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("allow_unopened", [False, True])
def test_one_read_finds_what_the_two_reads_found(
    archiver: BatchArchiver, archive_dsn: str, bulk: bool | None, pinned: bool, allow_unopened: bool
) -> None:
    events = list(_vector_events())
    assert archiver.archive(as_raw(events)).archived == len(events)
    operator = PINNED if pinned else None
    with psycopg.connect(archive_dsn) as conn:
        expected = _two_reads(conn, operator=operator, allow_unopened=allow_unopened)
        audits = list(
            iter_audits(
                PostgresArchiveAudits(conn),
                bulk=bulk,
                operator=operator,
                allow_unopened=allow_unopened,
            )
        )
    assert len(audits) == len(expected) >= 60
    got = {
        a.saga_id: None if a.ok else (a.reason.value if a.reason else "", a.bad_seq or 0)
        for a in audits
    }
    assert got == expected
    # The vectors' impossible stories are there to be found.
    assert sum(v is not None and v[0].startswith("grammar:") for v in got.values()) >= 30
