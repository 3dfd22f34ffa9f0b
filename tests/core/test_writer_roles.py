"""The writer rule (docs/adr/0014 §5): who may write which event of a saga, from its chain."""

from __future__ import annotations

import pytest

from sagacity import EntryDraft, EventType
from sagacity.entries import _attributes as attr
from sagacity.signing._writer_roles import (
    HANDOFF_TAKEOVER,
    WRITER_NOT_OWNER,
    RegisteredWriter,
    SagaWriters,
    WriterRole,
    writer_refusal,
)

E = EventType
AGENT = RegisteredWriter(writer_id="agent-1")
OTHER = RegisteredWriter(writer_id="agent-2")
DESK = RegisteredWriter(writer_id="approvals-1", role=WriterRole.APPROVALS)
UNDO = RegisteredWriter(writer_id="compensation-1", role=WriterRole.COMPENSATION)
OPS = RegisteredWriter(writer_id="operator-1", role=WriterRole.OPERATOR)


def ev(kind: EventType, by: RegisteredWriter, **attributes: str) -> EntryDraft:
    return EntryDraft(
        saga_id="s", event_type=kind, attributes={attr.WRITER: by.writer_id, **attributes}
    )


def fold(*events: EntryDraft) -> SagaWriters:
    return SagaWriters.of(events)


OPENED = ev(E.SAGA_OPENED, AGENT)
GATED = (OPENED, ev(E.INTENT, AGENT), ev(E.AWAITING_APPROVAL, AGENT), ev(E.SAGA_ENDED, AGENT))
HANDED = (OPENED, ev(E.FAILED, AGENT), ev(E.COMPENSATION_REQUESTED, AGENT))


def allowed(by: RegisteredWriter, chain: tuple[EntryDraft, ...], event: EntryDraft) -> bool:
    refused = writer_refusal(by, fold(*chain), event)
    assert refused is None or refused[0] == WRITER_NOT_OWNER
    return refused is None


@pytest.mark.parametrize(
    ("by", "chain", "kind", "extra", "ok"),
    [
        # an agent: its own sagas, anything but the service-only events
        (AGENT, (), E.SAGA_OPENED, {}, True),
        (AGENT, (OPENED,), E.EXECUTED, {}, True),
        (AGENT, GATED, E.INTENT, {}, True),  # its resume after the approval
        (AGENT, GATED, E.EXPIRED, {}, True),
        (AGENT, GATED, E.APPROVED, {}, False),  # agents are not approvers
        (AGENT, HANDED, E.SAGA_ENDED, {}, True),
        # another agent: nothing in a saga it does not own
        (OTHER, (OPENED,), E.EXECUTED, {}, False),
        (OTHER, GATED, E.EXECUTED, {}, False),
        (OTHER, HANDED, E.COMPENSATED, {}, False),
        (OTHER, GATED, E.SAGA_OPENED, {}, False),
        # the approvals service: decisions and its resumes, once the saga is handed to it
        (DESK, GATED, E.APPROVED, {}, True),
        (DESK, GATED, E.REJECTED, {}, True),
        (DESK, GATED, E.INTENT, {}, True),
        (DESK, GATED, E.COMPENSATION_REQUESTED, {}, True),
        (DESK, (OPENED,), E.APPROVED, {}, False),  # the agent holds it
        (DESK, GATED, E.COMPENSATED, {}, False),
        # the compensation service: after a hand-off to compensation only
        (UNDO, HANDED, E.SAGA_OPENED, {}, True),
        (UNDO, HANDED, E.COMPENSATED, {}, True),
        (UNDO, GATED, E.COMPENSATED, {}, False),
        (UNDO, GATED, E.SAGA_OPENED, {}, False),
        (UNDO, HANDED, E.EXECUTED, {}, False),
        # the operator: erasure, and a takeover even while the writer holds the saga
        (OPS, (OPENED,), E.COMPENSATION_REQUESTED, {attr.HANDOFF: HANDOFF_TAKEOVER}, True),
        (OPS, (OPENED,), E.COMPENSATION_REQUESTED, {}, False),
        (AGENT, (OPENED,), E.ERASED, {}, False),
        (OPS, GATED, E.ERASED, {}, True),
    ],
)
def test_the_writer_table(
    by: RegisteredWriter,
    chain: tuple[EntryDraft, ...],
    kind: EventType,
    extra: dict[str, str],
    ok: bool,
) -> None:
    assert allowed(by, chain, ev(kind, by, **extra)) is ok


def test_the_compensation_service_holds_the_saga_it_opened() -> None:
    opened = (*HANDED, ev(E.SAGA_OPENED, UNDO))
    state = fold(*opened)
    assert (state.opener, state.live, state.to_compensation) == ("agent-1", "compensation-1", True)
    assert allowed(UNDO, opened, ev(E.COMPENSATION_INTENT, UNDO))
    assert not allowed(AGENT, opened, ev(E.EXECUTED, AGENT))  # held by the service now


def test_an_opener_taken_over_owns_its_saga_no_more() -> None:
    taken = (OPENED, ev(E.COMPENSATION_REQUESTED, OPS, **{attr.HANDOFF: HANDOFF_TAKEOVER}))
    assert fold(*taken).taken_over
    refused = writer_refusal(AGENT, fold(*taken), ev(E.EXECUTED, AGENT))
    assert refused is not None
    assert "taken over" in refused[1]
    assert allowed(UNDO, taken, ev(E.SAGA_OPENED, UNDO))


def test_a_saga_opened_before_writers_were_named_belongs_to_its_actor() -> None:
    legacy = EntryDraft(saga_id="s", event_type=E.SAGA_OPENED, actor="agent-1")
    assert SagaWriters.of([legacy]).opener == "agent-1"
