"""Settling a SUSPECT step through the approvals service, on the real broker and Postgres.

The compensation service (its own process) leaves a call whose outcome nobody knows SUSPECT;
a person settles it through the approvals service's decision path; the compensation service
then undoes a step settled ``executed`` exactly once, and the saga ends ``COMPENSATED``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity import EntryDraft, EventType, Sagacity, SagaStatus, compose, verify
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings, Principal
from sagacity.errors import AlreadyDecidedError, PermissionDeniedError
from tests.compensation.conftest import Lane

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def suspect_saga(agent: Sagacity, saga: str) -> int:
    """A saga that reserved, then died between a charge's INTENT and its outcome."""

    def work() -> None:
        tool = agent.registry.get("reserve")
        assert tool is not None
        tool.wrapped(order=saga, item="lamp")
        # The writer's process died here: the charge's INTENT is durable, its outcome is not.
        agent.journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=E.INTENT,
                tool="charge",
                payload=f'{{"amount":30,"order":"{saga}"}}',
                actor=agent.writer_id,
                attributes={"reversibility": "REVERSIBLE"},
            ),
            durable=True,
        )
        raise RuntimeError("the agent lost its process")

    assert agent.saga(saga, work).status is SagaStatus.COMPENSATION_PENDING
    result = agent.wait_for_outcome(saga, timeout=30)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    (suspect,) = result.suspects
    assert suspect.tool == "charge"
    return suspect.seq


def test_a_suspect_settled_executed_is_undone_once_by_the_compensation_service(
    make_lane: Callable[..., Lane], tmp_path: Path
) -> None:
    from sagacity.signing._decision_signature import generate_key

    key = generate_key(tmp_path / "approvals.pem")
    lane = make_lane()
    # The compensation service acts only on settlements the approvals service signed.
    lane.start(SAGACITY_APPROVALS_PUBLIC_KEY=key.public_hex)
    agent = lane.agent()
    saga = f"suspect-{uuid.uuid4().hex[:8]}"
    seq = suspect_saga(agent, saga)
    assert [(s, t) for s, _q, t in lane.effects()] == [(saga, "reserve")]  # charge not undone

    settings = ApprovalsSettings(
        database_url=lane.dsn,
        bootstrap_servers=lane.bootstrap,
        topic=lane.topic,
        insecure_dev=True,
        signing_key=str(tmp_path / "approvals.pem"),
    )
    server = ApprovalsServer(settings, dependencies=compose.approvals_of(settings), consume=False)
    server.store.migrate()
    try:
        ops = Principal(name="ops@example.com", tools=frozenset({"charge"}))
        outsider = Principal(name="eve@example.com", tools=frozenset({"reserve"}))
        with pytest.raises(PermissionDeniedError):
            server.service.settle(outsider, saga, seq, outcome="executed", note="n")
        pending = server.service.settle(
            ops, saga, seq, outcome="executed", note="the bank shows the charge"
        )
        assert pending.status is SagaStatus.COMPENSATION_PENDING
        final = agent.wait_for_outcome(saga, timeout=30)
        assert final.status is SagaStatus.COMPENSATED
        assert final.suspects == ()
        undone = [(s, q, t) for s, q, t in lane.effects() if t == "charge"]
        assert undone == [(saga, seq, "charge")]  # exactly once, keyed on the INTENT's seq
        chain = list(agent.entries(saga))
        assert verify(chain, saga_id=saga).ok
        settled = [e for e in chain if e.event_type is E.SUSPECT_SETTLED]
        assert [(e.actor, e.ref_seq, e.attributes["outcome"]) for e in settled] == [
            ("ops@example.com", seq, "executed")
        ]
        assert settled[0].attributes["note"] == "the bank shows the charge"
        # A second settlement is refused, naming who settled it; nothing more is undone.
        with pytest.raises(AlreadyDecidedError, match=r"settled executed by ops@example\.com"):
            server.service.settle(ops, saga, seq, outcome="not-executed", note="n")
        assert len([1 for _s, _q, t in lane.effects() if t == "charge"]) == 1
    finally:
        server.journal.close()
