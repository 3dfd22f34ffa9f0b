"""The contract every :class:`~sagacity.ports.Journal` adapter meets; subclass it per adapter.

A subclass provides :meth:`JournalContract.create_journal`: a fresh journal on a fresh store
for each call (fixtures the store needs can be taken by an autouse fixture of the subclass)::

    class TestKafkaJournal(JournalContract):
        @pytest.fixture(autouse=True)
        def _broker(self, kafka_bootstrap, make_topic):
            self.bootstrap, self.make_topic = kafka_bootstrap, make_topic

        def create_journal(self):
            return KafkaJournal(self.bootstrap, topic=self.make_topic())

Journals it creates are closed after the test.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import threading
import uuid
from collections.abc import Iterator

import pytest

from sagacity import GENESIS_HASH, EntryDraft, EventType, Journal, verify
from sagacity.chain import payload_sha256
from sagacity.errors import SerializationError

E = EventType

NOT_JSON = (
    "",
    " ",
    "not json",
    "{",
    "{'amount': 1}",
    '{"amount": 1} trailing',
    '{"amount": 1,}',
    "[1, 2,]",
    "NaN",
    "Infinity",
    "-Infinity",
    '{"amount": NaN}',
    '{"amount": -Infinity}',
    "undefined",
)
"""Tool payloads every journal refuses (as ``INTENT`` and ``AWAITING_APPROVAL``)."""

JSON = (
    "{}",
    '{"amount":"100","to":"ålice"}',
    ' { "amount" : 1.5e3 }\n',
    '"text"',
    "0",
    "-1.25",
    "true",
    "null",
    "[1,[2,{}]]",
    '{"nested":{"list":[null,false,"\\u00e9"]}}',
)
"""Tool payloads every journal accepts."""


def _saga() -> str:
    return f"contract-{uuid.uuid4().hex}"


class JournalContract(abc.ABC):
    """Append, read a chain, derive pending approvals: the port's guarantees."""

    @abc.abstractmethod
    def create_journal(self) -> Journal:
        """A journal on a fresh store."""

    @pytest.fixture
    def journal(self) -> Iterator[Journal]:
        """A journal from :meth:`create_journal`, closed after the test."""
        journal = self.create_journal()
        try:
            yield journal
        finally:
            journal.close()

    # -- append and read ------------------------------------------------------------------
    def test_it_implements_the_protocol(self, journal: Journal) -> None:
        assert isinstance(journal, Journal)

    def test_first_append_starts_at_seq_1_on_the_genesis_hash(self, journal: Journal) -> None:
        saga = _saga()
        entry = journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_OPENED, actor="w"))
        assert entry.seq == 1
        assert entry.prev_hash == GENESIS_HASH
        assert list(journal.entries(saga)) == [entry]

    def test_appends_link_into_a_chain_that_verifies(self, journal: Journal) -> None:
        saga = _saga()
        appended = [
            journal.append(EntryDraft(saga_id=saga, event_type=E.INTENT, tool="t", payload=str(i)))
            for i in range(5)
        ]
        entries = list(journal.entries(saga))
        assert entries == appended
        assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
        for before, after in itertools.pairwise(entries):
            assert after.prev_hash == before.hash
        assert verify(entries).ok

    def test_unknown_saga_reads_empty(self, journal: Journal) -> None:
        assert list(journal.entries(_saga())) == []
        assert list(journal.pending_approvals(_saga())) == []

    def test_every_field_round_trips_exactly(self, journal: Journal) -> None:
        saga = _saga()
        draft = EntryDraft(
            saga_id=saga,
            event_type=E.EXECUTED,
            tool="tööl",
            payload='{ "amount": "100", "to": "ålice" }',
            result="",
            error=None,
            actor="manager@company.com",
            attributes={"ref_seq": "1", "z": "", "é": "ü"},
            recorded_at_us=1_700_000_000_123_456,
        )
        written = journal.append(draft)
        (read,) = journal.entries(saga)
        assert read == written
        assert read.payload == draft.payload
        assert read.result == ""
        assert read.error is None
        attributes = dict(read.attributes)
        # A journal may name its writer on every event; it keeps the others as given.
        assert attributes.pop("writer", None) in (None, getattr(journal, "writer_id", None))
        assert attributes == {"ref_seq": "1", "z": "", "é": "ü"}
        assert read.recorded_at_us == 1_700_000_000_123_456
        assert verify([read]).ok

    def test_sagas_have_independent_chains(self, journal: Journal) -> None:
        first, second = _saga(), _saga()
        journal.append(EntryDraft(saga_id=first, event_type=E.SAGA_OPENED))
        journal.append(EntryDraft(saga_id=second, event_type=E.SAGA_OPENED))
        journal.append(EntryDraft(saga_id=first, event_type=E.SAGA_ENDED))
        assert [e.seq for e in journal.entries(first)] == [1, 2]
        assert [e.seq for e in journal.entries(second)] == [1]
        assert journal.entries(second)[0].prev_hash == GENESIS_HASH

    def test_buffered_appends_are_readable_after_flush(self, journal: Journal) -> None:
        saga = _saga()
        for i in range(10):
            journal.append(
                EntryDraft(saga_id=saga, event_type=E.EXECUTED, result=str(i)), durable=False
            )
        journal.flush(timeout=30)
        entries = list(journal.entries(saga))
        assert [e.result for e in entries] == [str(i) for i in range(10)]
        assert verify(entries).ok

    def test_concurrent_appends_from_threads_lose_nothing(self, journal: Journal) -> None:
        sagas = [_saga() for _ in range(3)]
        threads_per_saga, appends = 4, 25
        errors: list[BaseException] = []
        start = threading.Barrier(len(sagas) * threads_per_saga)

        def writer(saga: str, n: int) -> None:
            try:
                start.wait()
                for i in range(appends):
                    journal.append(
                        # Tool payloads are JSON; every journal refuses others (NOT_JSON).
                        EntryDraft(saga_id=saga, event_type=E.INTENT, payload=f'"{n}:{i}"')
                    )
            except BaseException as exc:  # reported below, never swallowed
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, args=(saga, n))
            for saga in sagas
            for n in range(threads_per_saga)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        journal.flush(timeout=30)
        for saga in sagas:
            entries = list(journal.entries(saga))
            assert len(entries) == threads_per_saga * appends
            assert sorted(e.payload or "" for e in entries) == sorted(
                f'"{n}:{i}"' for n in range(threads_per_saga) for i in range(appends)
            )
            assert verify(entries).ok

    def test_eight_threads_times_ten_appends_to_one_saga_lose_nothing(
        self, journal: Journal
    ) -> None:
        # The case an earlier system lost 70 of 80 appends on: first appends racing included.
        saga = _saga()
        start = threading.Barrier(8)
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                start.wait()
                for i in range(10):
                    journal.append(
                        EntryDraft(saga_id=saga, event_type=E.INTENT, payload=f"{n}.{i}")
                    )
            except BaseException as exc:  # reported below, never swallowed
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        entries = list(journal.entries(saga))
        assert len(entries) == 80
        assert len({e.payload for e in entries}) == 80
        assert verify(entries).ok

    def test_concurrent_async_appends_lose_nothing(self, journal: Journal) -> None:
        saga = _saga()

        async def main() -> None:
            await asyncio.gather(
                *(
                    journal.append_async(
                        EntryDraft(saga_id=saga, event_type=E.INTENT, payload=str(i))
                    )
                    for i in range(50)
                )
            )

        asyncio.run(main())
        journal.flush(timeout=30)
        entries = list(journal.entries(saga))
        assert sorted(int(e.payload or "-1") for e in entries) == list(range(50))
        assert verify(entries).ok

    # -- tool payloads are JSON -------------------------------------------------------------
    @pytest.mark.parametrize("event_type", [E.INTENT, E.AWAITING_APPROVAL])
    def test_a_tool_payload_that_is_not_json_is_refused_and_nothing_appended(
        self, journal: Journal, event_type: EventType
    ) -> None:
        saga = _saga()
        for payload in NOT_JSON:
            draft = EntryDraft(saga_id=saga, event_type=event_type, tool="pay", payload=payload)
            with pytest.raises(SerializationError, match="payload of tool 'pay' is not JSON"):
                journal.append(draft)
            assert list(journal.entries(saga)) == [], payload
        # Nothing was taken by the refusals: the next append is the saga's first.
        entry = journal.append(EntryDraft(saga_id=saga, event_type=event_type, payload="{}"))
        assert entry.seq == 1

    @pytest.mark.parametrize("event_type", [E.INTENT, E.AWAITING_APPROVAL])
    def test_a_json_tool_payload_is_accepted_exactly_as_given(
        self, journal: Journal, event_type: EventType
    ) -> None:
        saga = _saga()
        for payload in JSON:
            journal.append(EntryDraft(saga_id=saga, event_type=event_type, payload=payload))
        assert [e.payload for e in journal.entries(saga)] == list(JSON)

    def test_payloads_of_other_events_are_not_checked(self, journal: Journal) -> None:
        saga = _saga()
        others = [E.SAGA_OPENED, E.EXECUTED, E.FAILED, E.SAGA_ENDED]
        for event_type in others:
            journal.append(EntryDraft(saga_id=saga, event_type=event_type, payload="not json"))
        assert [e.event_type for e in journal.entries(saga)] == others

    # -- pending approvals ----------------------------------------------------------------
    def _request(self, journal: Journal, saga: str, signatures: int = 1) -> int:
        payload = '{"amount":"100","to":"alice"}'
        entry = journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=E.AWAITING_APPROVAL,
                tool="wire",
                payload=payload,
                attributes={
                    "payload_sha256": payload_sha256(payload),
                    "signatures_required": str(signatures),
                    "policy_version": "7",
                    "reversibility": "IRREVERSIBLE",
                },
            )
        )
        return entry.seq

    def test_a_request_is_pending_until_decided(self, journal: Journal) -> None:
        saga = _saga()
        journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_OPENED))
        seq = self._request(journal, saga, signatures=2)
        journal.append(
            EntryDraft(saga_id=saga, event_type=E.SAGA_ENDED, result="AWAITING_APPROVAL")
        )
        (request,) = journal.pending_approvals(saga)
        assert (request.saga_id, request.seq, request.tool) == (saga, seq, "wire")
        assert request.payload == '{"amount":"100","to":"alice"}'
        assert request.payload_sha256 == payload_sha256(request.payload)
        assert request.signatures_required == 2
        assert request.policy_version == "7"
        assert request.signed_by == ()
        journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=E.APPROVED,
                actor="nadia",
                attributes={"ref_seq": str(seq)},
            )
        )
        (request,) = journal.pending_approvals(saga)
        assert request.signed_by == ("nadia",)  # approval leaves the request in place
        assert not request.approved
        journal.append(
            EntryDraft(
                saga_id=saga, event_type=E.REJECTED, actor="omar", attributes={"ref_seq": str(seq)}
            )
        )
        assert list(journal.pending_approvals(saga)) == []

    def test_resumed_and_ended_requests_are_not_pending(self, journal: Journal) -> None:
        resumed, ended = _saga(), _saga()
        seq = self._request(journal, resumed)
        journal.append(
            EntryDraft(
                saga_id=resumed, event_type=E.INTENT, tool="wire", attributes={"ref_seq": str(seq)}
            )
        )
        self._request(journal, ended)
        journal.append(EntryDraft(saga_id=ended, event_type=E.SAGA_ENDED, result="COMPENSATED"))
        assert list(journal.pending_approvals(resumed)) == []
        assert list(journal.pending_approvals(ended)) == []

    def test_pending_approvals_across_sagas(self, journal: Journal) -> None:
        first, second = _saga(), _saga()
        self._request(journal, first)
        self._request(journal, second)
        mine = {(r.saga_id, r.seq) for r in journal.pending_approvals()}
        assert {(first, 1), (second, 1)} <= mine
