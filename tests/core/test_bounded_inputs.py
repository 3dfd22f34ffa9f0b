"""Values a writer chose, read within their domains: counts and expiries parsed fail-closed,
references that are not seqs refer to nothing, deadlines saturate and run on the deciding
process's clock (docs/reliability.md, "Hostile inputs")."""

from __future__ import annotations

import pytest

from sagacity import EntryDraft, EventType, InMemoryJournal, Sagacity
from sagacity.chain import link, payload_sha256
from sagacity.entries._bounds import INT32_MAX, INT64_MAX, INT64_MIN, parse_int, saturating_add
from sagacity.entries._events import JournalEntry
from sagacity.errors import SerializationError
from sagacity.gate._requests import deadline_us, expiry_of, signatures_of

E = EventType
PAYLOAD = '{"amount":"100","to":"alice"}'
YEAR_US = 365 * 86_400 * 1_000_000
TTL_US = 60_000_000


def _request(**attributes: str) -> JournalEntry:
    return link(
        EntryDraft(
            saga_id="s",
            event_type=E.AWAITING_APPROVAL,
            tool="wire",
            payload=PAYLOAD,
            attributes=attributes,
        ),
        seq=1,
        prev_hash="0" * 64,
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 2),
        ("1", 1),
        ("2", 2),
        ("7", 7),
        ("0", 2),
        ("-5", 2),
        ("two", 2),
        ("1.5", 2),
        ("", 2),
        ("1_000", 2),
        ("٣", 2),  # a digit, but not an ASCII one
        ("3000000000", INT32_MAX),
        ("9" * 4000, INT32_MAX),
    ],
)
def test_a_signature_count_never_lowers_the_bar_and_always_fits_its_column(
    raw: str | None, expected: int
) -> None:
    attributes = {} if raw is None else {"signatures_required": raw}
    assert signatures_of(_request(**attributes)) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("123", 123),
        ("soon", None),
        ("9" * 30, INT64_MAX),
        ("-" + "9" * 30, INT64_MIN),
        (str(INT64_MAX + 1), INT64_MAX),
    ],
)
def test_an_expiry_is_read_within_64_bits(raw: str | None, expected: int | None) -> None:
    attributes = {} if raw is None else {"expires_at_us": raw}
    assert expiry_of(_request(**attributes)) == expected


@pytest.mark.parametrize("raw", ["x", "", "0", "-1", str(INT64_MAX + 1), "9" * 100, "1e3"])
def test_a_damaged_reference_refers_to_nothing(raw: str) -> None:
    entry = link(
        EntryDraft(saga_id="s", event_type=E.EXECUTED, attributes={"ref_seq": raw}),
        seq=2,
        prev_hash="0" * 64,
    )
    assert entry.ref_seq is None


def test_seqs_times_and_saga_ids_outside_their_domain_are_not_entries() -> None:
    base = _request().to_dict()
    for field, value in (
        ("seq", INT64_MAX + 1),
        ("recorded_at_us", INT64_MAX + 1),
        ("recorded_at_us", INT64_MIN - 1),
        ("saga_id", "s" * 1025),
        ("saga_id", "é" * 513),
    ):
        with pytest.raises(SerializationError):
            JournalEntry.from_dict({**base, field: value})
    assert JournalEntry.from_dict({**base, "saga_id": "s" * 1024}).saga_id == "s" * 1024
    with pytest.raises(SerializationError, match="saga_id is longer than 1024 bytes"):
        EntryDraft(saga_id="x" * 2000, event_type=E.SAGA_OPENED)


def test_parsing_and_sums_saturate() -> None:
    assert parse_int("+12", low=0, high=10) == 10
    assert parse_int(" 12 ", low=0, high=100) == 12
    assert parse_int("-", low=0, high=10) is None
    assert saturating_add(INT64_MAX - 1, 10) == INT64_MAX
    assert saturating_add(INT64_MIN, -1) == INT64_MIN


def test_a_deadline_runs_from_the_earlier_of_the_requesters_time_and_the_first_sight() -> None:
    now = 1_700_000_000_000_000
    # A request dated in the future is bounded by when the service first saw it.
    assert deadline_us(now + YEAR_US, seen_at_us=now, expires_at_us=None, ttl_us=TTL_US) == (
        now + TTL_US
    )
    # One dated in the past keeps its own time (it only shortens its life).
    assert deadline_us(now - 5, seen_at_us=now, expires_at_us=None, ttl_us=TTL_US) == (
        now - 5 + TTL_US
    )
    # Its own expiry only shortens it; without a TTL it is the only deadline.
    assert deadline_us(now, seen_at_us=now, expires_at_us=now + 1, ttl_us=TTL_US) == now + 1
    assert deadline_us(now, seen_at_us=now, expires_at_us=INT64_MAX, ttl_us=TTL_US) == (
        now + TTL_US
    )
    assert deadline_us(now, seen_at_us=None, expires_at_us=None, ttl_us=None) is None
    # The end of time does not overflow.
    assert deadline_us(INT64_MAX, seen_at_us=None, expires_at_us=None, ttl_us=TTL_US) == INT64_MAX


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_the_core_measures_its_ttl_from_when_it_first_read_a_future_dated_request() -> None:
    clock = Clock(1_700_000_000_000_000)
    journal = InMemoryJournal()
    journal.append(
        EntryDraft(
            saga_id="ahead",
            event_type=E.AWAITING_APPROVAL,
            tool="wire",
            payload=PAYLOAD,
            attributes={"payload_sha256": payload_sha256(PAYLOAD), "signatures_required": "1"},
            recorded_at_us=clock.now + YEAR_US,
        )
    )
    desk = Sagacity(journal, compensation="delegated", approval_ttl=TTL_US / 1e6, clock=clock)
    [request] = journal.pending_approvals()
    assert desk.approval_deadline_us(request) == clock.now + TTL_US  # first read: now
    clock.now += TTL_US // 2
    assert desk.approval_deadline_us(request) == clock.now - TTL_US // 2 + TTL_US  # remembered
    assert desk.expire_overdue() == []
    clock.now += TTL_US
    [result] = desk.expire_overdue()
    assert result.saga_id == "ahead"
    assert [e.event_type for e in journal.entries("ahead")][-1] is E.SAGA_ENDED
    assert E.EXPIRED in [e.event_type for e in journal.entries("ahead")]
    # A store's record of its first sight wins over this process's memory.
    assert desk.approval_deadline_us(request, seen_at_us=5) == 5 + TTL_US
