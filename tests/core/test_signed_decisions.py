"""Signed decisions: an approval counts at resume only with a pinned key's valid signature."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest

from sagacity import (
    EntryDraft,
    EventType,
    InMemoryJournal,
    JournalEntry,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
)
from sagacity.entries import _attributes as attr
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalMissingError,
    ConfigurationError,
    SigningKeyError,
)
from sagacity.journal import ApprovalRequest
from sagacity.signing._decision_signature import (
    DecisionSigner,
    DecisionVerifier,
    Reason,
    decision_message,
    generate_key,
)

E = EventType
ALICE = '{"amount":"100","to":"alice"}'


class Bank:
    def __init__(self) -> None:
        self.wires: list[tuple[str, str]] = []
        self.released: list[str] = []

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        return sku

    @compensation
    def release(self, context: object) -> None:
        self.released.append("released")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        self.wires.append((amount, to))
        return "ok"


@pytest.fixture(scope="module")
def service_key(tmp_path_factory: pytest.TempPathFactory) -> DecisionSigner:
    return generate_key(tmp_path_factory.mktemp("keys") / "approvals.pem")


@pytest.fixture(scope="module")
def rogue_key(tmp_path_factory: pytest.TempPathFactory) -> DecisionSigner:
    return generate_key(tmp_path_factory.mktemp("rogue") / "rogue.pem")


class SharedJournal:
    """Stands for a journal other processes write too (any journal but the in-memory one)."""

    def __init__(self) -> None:
        self._inner = InMemoryJournal()
        self.append = self._inner.append
        self.append_after = self._inner.append_after
        self.append_async = self._inner.append_async
        self.flush = self._inner.flush
        self.entries = self._inner.entries
        self.pending_approvals = self._inner.pending_approvals
        self.close = self._inner.close


def _gate(s: Sagacity, bank: Bank, saga_id: str = "wire-1") -> int:
    def work() -> None:
        bank.reserve("SKU-1")
        bank.send_wire_transfer("100", "alice")

    result = s.saga(saga_id, work)
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert result.awaiting_seq is not None
    return result.awaiting_seq


def _forge(journal: SharedJournal, request: ApprovalRequest, **attributes: str) -> JournalEntry:
    """What any writer of the journal can append: an APPROVED naming any approver."""
    return journal.append(
        EntryDraft(
            saga_id=request.saga_id,
            event_type=E.APPROVED,
            tool=request.tool,
            actor="cfo@company.com",
            attributes={
                attr.REF_SEQ: str(request.seq),
                attr.POLICY_VERSION: "1",
                attr.PAYLOAD_SHA256: request.payload_sha256 or "",
                **attributes,
            },
        )
    )


def _kinds(entries: Sequence[JournalEntry]) -> list[str]:
    return [e.event_type.value for e in entries]


def test_a_forged_approval_does_not_run_the_tool(service_key: DecisionSigner) -> None:
    journal = SharedJournal()
    agent = Sagacity(journal, approvals_public_key=service_key.public_hex)
    bank = Bank()
    seq = _gate(agent, agent.wrap(bank))
    [request] = agent.pending_approvals("wire-1")
    _forge(journal, request)
    with pytest.raises(ApprovalMissingError) as refused:
        agent.resume_saga("wire-1", seq, ALICE)
    assert refused.value.message == "no human approval recorded"
    assert refused.value.detail is not None
    assert Reason.UNSIGNED in refused.value.detail
    assert bank.wires == []
    assert bank.released == ["released"]  # the saga was compensated
    entries = agent.entries("wire-1")
    kinds = _kinds(entries)
    assert kinds[kinds.index("RESUME_REFUSED") :] == [
        "RESUME_REFUSED",
        "COMPENSATION_INTENT",
        "COMPENSATED",
        "SAGA_ENDED",
    ]
    refusal = next(e for e in entries if e.event_type is E.RESUME_REFUSED)
    assert refusal.error is not None
    assert refusal.error.startswith("no human approval recorded: the APPROVED at seq")


@pytest.mark.parametrize("how", ["rogue_key", "altered", "malformed"])
def test_a_wrongly_signed_approval_is_refused(
    service_key: DecisionSigner, rogue_key: DecisionSigner, how: str
) -> None:
    journal = SharedJournal()
    agent = Sagacity(journal, approvals_public_key=service_key.public_hex)
    bank = Bank()
    seq = _gate(agent, agent.wrap(bank))
    [request] = agent.pending_approvals("wire-1")
    draft = EntryDraft(
        saga_id="wire-1",
        event_type=E.APPROVED,
        tool=request.tool,
        actor="cfo@company.com",
        attributes={
            attr.REF_SEQ: str(seq),
            attr.POLICY_VERSION: "1",
            attr.PAYLOAD_SHA256: request.payload_sha256 or "",
        },
    )
    if how == "rogue_key":
        journal.append(rogue_key.sign(draft))
        reason = Reason.UNKNOWN_KEY
    elif how == "altered":
        # A real signature of the service, moved to another principal.
        signed = service_key.sign(draft)
        forged = dict(signed.attributes)
        journal.append(
            EntryDraft(
                saga_id="wire-1",
                event_type=E.APPROVED,
                tool=request.tool,
                actor="mallory@company.com",
                attributes=forged,
                recorded_at_us=signed.recorded_at_us,
            )
        )
        reason = Reason.BAD_SIGNATURE
    else:
        journal.append(
            EntryDraft(
                saga_id="wire-1",
                event_type=E.APPROVED,
                tool=request.tool,
                actor="cfo@company.com",
                attributes={**draft.attributes, attr.DECISION_SIGNATURE: "SGCD2:zz"},
            )
        )
        reason = Reason.MALFORMED
    with pytest.raises(ApprovalMissingError, match=r"^no human approval recorded") as refused:
        agent.resume_saga("wire-1", seq, ALICE)
    assert reason in (refused.value.detail or "")
    assert bank.wires == []
    assert "RESUME_REFUSED" in _kinds(agent.entries("wire-1"))


def test_signed_decisions_resume_and_cover_every_field(service_key: DecisionSigner) -> None:
    journal = SharedJournal()
    service = Sagacity(journal, decision_signer=service_key, policy_version="p7")
    agent = Sagacity(journal, approvals_public_key=service_key.public_hex)
    assert (service.approval_trust, agent.approval_trust) == ("signed", "signed")
    bank = Bank()
    seq = _gate(agent, agent.wrap(bank))
    service.approve("wire-1", seq, "manager@company.com")
    approval = agent.entries("wire-1")[-1]
    assert approval.attributes[attr.DECISION_SIGNATURE].startswith(f"SGCD3:{service_key.key_id}:")
    request = agent.entries("wire-1")[seq - 1]
    assert approval.attributes[attr.REQUEST_HASH] == request.hash
    assert approval.attributes[attr.JOURNAL] == service.journal_identity == agent.journal_identity
    verifier = DecisionVerifier([service_key.public_raw])
    assert verifier.check(approval) is None
    # Each covered field changes the message.
    fields = {
        "key_id": service_key.key_id,
        "event_type": "APPROVED",
        "saga_id": "wire-1",
        "ref_seq": seq,
        "payload_sha256": approval.attributes[attr.PAYLOAD_SHA256],
        "principal": "manager@company.com",
        "decided_at_us": approval.recorded_at_us,
        "policy_version": "p7",
        "outcome": None,
        "request_hash": request.hash,
        "journal": service.journal_identity,
        "signatures_required": "1",
    }
    assert approval.attributes[attr.SIGNATURES_REQUIRED] == "1"
    base = decision_message(**fields)  # type: ignore[arg-type]
    for name, other in [
        ("event_type", "REJECTED"),
        ("saga_id", "wire-2"),
        ("ref_seq", seq + 1),
        ("payload_sha256", "0" * 64),
        ("principal", "x"),
        ("decided_at_us", 1),
        ("policy_version", "1"),
        ("outcome", ""),
        ("request_hash", "0" * 64),
        ("journal", "another-journal"),
        ("signatures_required", "2"),
    ]:
        assert decision_message(**{**fields, name: other}) != base, name  # type: ignore[arg-type]
    # The count is covered: an approval whose count was lowered does not verify.
    lowered = dataclasses.replace(
        approval, attributes={**approval.attributes, attr.SIGNATURES_REQUIRED: "0"}
    )
    assert verifier.check(lowered) == "bad_decision_signature"
    assert agent.resume_saga("wire-1", seq, ALICE).status is SagaStatus.COMPLETED
    assert bank.wires == [("100", "alice")]


def test_rejections_and_expiries_are_signed(service_key: DecisionSigner) -> None:
    journal = SharedJournal()
    now = [1_000_000]
    service = Sagacity(journal, decision_signer=service_key, approval_ttl=10, clock=lambda: now[0])
    agent = Sagacity(journal, approvals_public_key=service_key.public_hex, clock=lambda: now[0])
    bank = agent.wrap(Bank())
    seq = _gate(agent, bank, "wire-1")
    service.reject("wire-1", seq, "manager@company.com", reason="no")
    other = _gate(agent, bank, "wire-2")
    now[0] += 11_000_000
    service.expire("wire-2", other)
    verifier = DecisionVerifier([service_key.public_raw])
    for saga, kind in (("wire-1", E.REJECTED), ("wire-2", E.EXPIRED)):
        [decision] = [e for e in journal.entries(saga) if e.event_type is kind]
        assert verifier.check(decision) is None
        assert verifier.required(decision) is None


def test_only_verified_approvals_count_for_a_second_signature(
    service_key: DecisionSigner,
) -> None:
    """A forged APPROVED cannot block the real approver (``already signed``)."""
    journal = SharedJournal()
    service = Sagacity(journal, decision_signer=service_key)
    agent = Sagacity(journal, approvals_public_key=service_key.public_hex)
    seq = _gate(agent, agent.wrap(Bank()))
    [request] = agent.pending_approvals("wire-1")
    forged = _forge(journal, request)
    assert forged.actor is not None
    service.approve("wire-1", seq, forged.actor)  # not refused as "already signed"
    with pytest.raises(AlreadyDecidedError, match="already signed"):
        service.approve("wire-1", seq, forged.actor)


def test_local_mode_trusts_the_in_memory_journal() -> None:
    s = Sagacity()
    assert s.approval_trust == "local"
    bank = Bank()
    seq = _gate(s, s.wrap(bank))
    s.approve("wire-1", seq, "manager@company.com")
    assert attr.DECISION_SIGNATURE not in s.entries("wire-1")[-1].attributes
    assert s.resume_saga("wire-1", seq, ALICE).status is SagaStatus.COMPLETED


def test_a_shared_journal_without_a_pinned_key_refuses_every_resume() -> None:
    agent = Sagacity(SharedJournal())
    assert agent.approval_trust == "unverifiable"
    bank = Bank()
    seq = _gate(agent, agent.wrap(bank))
    # Its own approve refuses at once: on a shared journal only the approvals service's
    # signed approvals count.
    with pytest.raises(ConfigurationError, match="given by the approvals service"):
        agent.approve("wire-1", seq, "manager@company.com")
    assert [e for e in agent.entries("wire-1") if e.event_type is E.APPROVED] == []
    # An approval journaled there anyway (by any writer) counts for nothing.
    [request] = agent.pending_approvals("wire-1")
    agent.journal.append(
        EntryDraft(
            saga_id="wire-1",
            event_type=E.APPROVED,
            tool=request.tool,
            actor="manager@company.com",
            attributes={attr.REF_SEQ: str(seq)},
        )
    )
    with pytest.raises(ApprovalMissingError, match=r"^no human approval recorded") as refused:
        agent.resume_saga("wire-1", seq, ALICE)
    assert "SAGACITY_APPROVALS_PUBLIC_KEY" in (refused.value.detail or "")
    assert "SAGACITY_APPROVALS_PUBLIC_KEY" in str(refused.value)  # printed with its reason
    assert bank.wires == []
    assert len(agent.pending_approvals("wire-1")) == 1  # pending until a key is pinned


def test_bad_keys_are_refused_clearly(tmp_path: Path, service_key: DecisionSigner) -> None:
    with pytest.raises(ConfigurationError, match="SAGACITY_APPROVALS_PUBLIC_KEY"):
        Sagacity(approvals_public_key="abc")
    with pytest.raises(ConfigurationError, match="at least one public key"):
        Sagacity(approvals_public_key=" , ")
    (tmp_path / "k.pem").write_text("not a key")
    with pytest.raises(SigningKeyError, match="not a PEM private key"):
        DecisionSigner.from_file(tmp_path / "k.pem")
    with pytest.raises(SigningKeyError, match="exists"):
        generate_key(tmp_path / "k.pem")
    hex_file = tmp_path / "approvals.pub"
    hex_file.write_text(service_key.public_hex + "\n")
    pinned = Sagacity(approvals_public_key=f"{hex_file}, {service_key.public_hex}")
    assert pinned.decision_verifier is not None
    assert pinned.decision_verifier.key_ids == (service_key.key_id,)


def test_a_signed_approval_of_another_payload_hash_is_refused(
    service_key: DecisionSigner,
) -> None:
    journal = SharedJournal()
    agent = Sagacity(journal, approvals_public_key=service_key.public_hex)
    bank = Bank()
    seq = _gate(agent, agent.wrap(bank))
    [request] = agent.pending_approvals("wire-1")
    journal.append(
        service_key.sign(
            EntryDraft(
                saga_id="wire-1",
                event_type=E.APPROVED,
                tool=request.tool,
                actor="cfo@company.com",
                attributes={
                    attr.REF_SEQ: str(seq),
                    attr.PAYLOAD_SHA256: "0" * 64,
                    attr.REQUEST_HASH: request.entry_hash or "",
                    attr.JOURNAL: agent.journal_identity,
                },
            )
        )
    )
    with pytest.raises(ApprovalMissingError) as refused:
        agent.resume_saga("wire-1", seq, ALICE)
    assert "another payload" in (refused.value.detail or "")
    assert bank.wires == []
