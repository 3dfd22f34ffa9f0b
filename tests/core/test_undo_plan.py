"""The undo a step gets comes from the runner's own declarations, never from the journal.

Every agent writes its own saga: a linked ``EXECUTED`` can claim any tool, any
reversibility and any ``undo_tool`` / ``undo_arguments``.  These tests journal such claims on
a valid chain and check that the runner calls only what its own registry declares.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sagacity import (
    CompensationRunner,
    EntryDraft,
    EventType,
    InMemoryJournal,
    Reversibility,
    Sagacity,
    SagaStatus,
    UndoCall,
    compensable,
    verify,
)
from sagacity.errors import DeclarationError, PolicyError
from sagacity.policy import Policy

from .conftest import only

E = EventType


class Bank:
    """Tools a compensation runner knows: gated ones that must never run as an undo."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, to: str, amount: int) -> str:
        self.calls.append(("send_wire", {"to": to, "amount": amount}))
        return "wired"

    @compensable(reversibility=Reversibility.PRIVILEGED)
    def grant_admin(self, user: str) -> str:
        self.calls.append(("grant_admin", {"user": user}))
        return "granted"

    @compensable
    def release_stock(self, hold_id: str) -> str:
        self.calls.append(("release_stock", {"hold_id": hold_id}))
        return "released"

    @compensable(undo_tools=("release_stock",))
    def hold_stock(self, sku: str) -> dict[str, Any]:
        self.calls.append(("hold_stock", {"sku": sku}))
        hold = f"hold-{sku}"
        return {"hold_id": hold, "undo": {"tool": "release_stock", "arguments": {"hold_id": hold}}}

    @compensable
    def note(self, text: str) -> str:
        self.calls.append(("note", {"text": text}))
        return "noted"


def _forged_saga(journal: InMemoryJournal, saga: str, *steps: dict[str, Any]) -> None:
    """An agent's own saga, linked and valid: each step an INTENT and an EXECUTED it wrote,
    then COMPENSATION_REQUESTED."""
    journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_OPENED, actor="agent-7"))
    for step in steps:
        intent = journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=E.INTENT,
                tool=step["tool"],
                payload=json.dumps(step.get("arguments", {}), separators=(",", ":")),
                actor="agent-7",
                attributes={"reversibility": step.get("reversibility", "COMPENSATABLE")},
            )
        )
        journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=E.EXECUTED,
                tool=step["tool"],
                result=step.get("result", "ok"),
                actor="agent-7",
                attributes={
                    "ref_seq": str(intent.seq),
                    "reversibility": step.get("reversibility", "COMPENSATABLE"),
                    "result_encoding": step.get("encoding", "text"),
                    **step.get("attributes", {}),
                },
            )
        )
    journal.append(EntryDraft(saga_id=saga, event_type=E.COMPENSATION_REQUESTED, actor="agent-7"))


def _runner(journal: InMemoryJournal, bank: Bank) -> CompensationRunner:
    service = Sagacity(journal=journal, writer_id="compensation-service")
    service.wrap(bank)
    return CompensationRunner(journal, service.registry, actor="compensation-service")


def _wire_undo(tool: str) -> dict[str, str]:
    return {
        "undo": "tool",
        "undo_tool": tool,
        "undo_arguments": json.dumps({"to": "attacker", "amount": 10_000_000})
        if tool == "send_wire"
        else json.dumps({"user": "attacker"}),
    }


@pytest.mark.parametrize("gated", ["send_wire", "grant_admin"])
def test_an_unknown_tool_naming_a_gated_undo_never_calls_it(gated: str) -> None:
    journal = InMemoryJournal()
    _forged_saga(journal, "attack", {"tool": "mystery", "attributes": _wire_undo(gated)})
    assert verify(list(journal.entries("attack")), saga_id="attack").ok
    bank = Bank()
    report = _runner(journal, bank).run("attack")
    assert bank.calls == []
    assert report.status is SagaStatus.COMPENSATION_FAILED
    (failed,) = only(journal.entries("attack"), E.COMPENSATION_FAILED)
    assert failed.attributes["cause"] == "unregistered"
    assert "'mystery' is not registered here" in (failed.error or "")
    assert not only(journal.entries("attack"), E.COMPENSATION_INTENT)


@pytest.mark.parametrize("gated", ["send_wire", "grant_admin"])
def test_a_known_tool_with_a_forged_undo_attribute_never_calls_it(gated: str) -> None:
    journal = InMemoryJournal()
    _forged_saga(journal, "forged", {"tool": "note", "attributes": _wire_undo(gated)})
    bank = Bank()
    report = _runner(journal, bank).run("forged")
    assert bank.calls == []
    (failed,) = only(journal.entries("forged"), E.COMPENSATION_FAILED)
    assert failed.attributes["cause"] == "undeclared_undo"
    assert f"names undo tool {gated!r}" in (failed.error or "")
    assert report.dirty[0].tool == "note"


def test_a_result_naming_an_undo_tool_it_does_not_declare_is_not_called() -> None:
    journal = InMemoryJournal()
    result = {"hold_id": "h1", "undo": {"tool": "grant_admin", "arguments": {"user": "eve"}}}
    _forged_saga(
        journal,
        "undeclared",
        {"tool": "hold_stock", "result": json.dumps(result), "encoding": "json"},
    )
    bank = Bank()
    _runner(journal, bank).run("undeclared")
    assert bank.calls == []
    (failed,) = only(journal.entries("undeclared"), E.COMPENSATION_FAILED)
    assert failed.attributes["cause"] == "undeclared_undo"
    assert "'grant_admin', which tool 'hold_stock' does not declare" in (failed.error or "")
    # Final: a second run reports it dirty again and journals nothing more.
    assert _runner(journal, bank).run("undeclared").dirty
    assert len(only(journal.entries("undeclared"), E.COMPENSATION_FAILED)) == 1


def test_journaled_reversibility_is_not_taken_from_the_writer() -> None:
    """A gated tool journaled as COMPENSATABLE stays gated; the mismatch is named."""
    journal = InMemoryJournal()
    _forged_saga(
        journal,
        "claims",
        {"tool": "send_wire", "reversibility": "REVERSIBLE", "attributes": _wire_undo("send_wire")},
    )
    bank = Bank()
    _runner(journal, bank).run("claims")
    assert bank.calls == []
    (failed,) = only(journal.entries("claims"), E.COMPENSATION_FAILED)
    assert failed.attributes["cause"] == "no_undo"
    assert "the journal says REVERSIBLE" in (failed.error or "")
    assert "IRREVERSIBLE, is what counts" in (failed.error or "")


def test_a_step_journaled_read_of_an_unknown_tool_is_not_skipped() -> None:
    journal = InMemoryJournal()
    _forged_saga(journal, "read", {"tool": "mystery", "reversibility": "READ"})
    report = _runner(journal, Bank()).run("read")
    assert report.status is SagaStatus.COMPENSATION_FAILED
    (failed,) = only(journal.entries("read"), E.COMPENSATION_FAILED)
    assert failed.attributes["cause"] == "unregistered"
    assert "the journal says READ" in (failed.error or "")


def test_a_returned_undo_is_read_again_from_the_result_not_the_attributes() -> None:
    journal = InMemoryJournal()
    result = {"hold_id": "h1", "undo": {"tool": "release_stock", "arguments": {"hold_id": "h1"}}}
    forged = {
        "undo": "tool",
        "undo_tool": "release_stock",
        "undo_arguments": json.dumps({"hold_id": "someone-elses"}),
    }
    _forged_saga(
        journal,
        "returned",
        {
            "tool": "hold_stock",
            "result": json.dumps(result),
            "encoding": "json",
            "attributes": forged,
        },
    )
    bank = Bank()
    report = _runner(journal, bank).run("returned")
    assert report.status is SagaStatus.COMPENSATED
    assert bank.calls == [("release_stock", {"hold_id": "h1"})]
    (intent,) = only(journal.entries("returned"), E.COMPENSATION_INTENT)
    assert intent.payload == '{"hold_id":"h1"}'


class Holds:
    """A tool whose undo is named by its declaration, with arguments from its result."""

    def __init__(self) -> None:
        self.released: list[str] = []

    def release(self, hold_id: str) -> str:
        self.released.append(hold_id)
        return "released"

    def hold(self, sku: str) -> dict[str, str]:
        return {"hold_id": f"hold-{sku}"}


def test_a_named_undo_takes_its_arguments_from_the_declared_mapping() -> None:
    journal = InMemoryJournal()
    agent = Sagacity(journal=journal)
    holds = Holds()
    agent.wrap_tool(holds.release, name="release")
    agent.wrap_tool(
        holds.hold,
        name="hold",
        undo=UndoCall(tool="release", arguments={"hold_id": "$result.hold_id"}),
    )
    # The writer journals its own step with the real result and a forged undo_arguments.
    _forged_saga(
        journal,
        "named-forged",
        {
            "tool": "hold",
            "arguments": {"sku": "lamp"},
            "result": '{"hold_id":"hold-lamp"}',
            "encoding": "json",
            "attributes": {
                "undo": "tool",
                "undo_tool": "release",
                "undo_arguments": '{"hold_id":"hold-of-the-victim"}',
            },
        },
    )
    report = CompensationRunner(journal, agent.registry).run("named-forged")
    assert report.status is SagaStatus.COMPENSATED
    assert holds.released == ["hold-lamp"]


def test_registering_a_gated_undo_tool_is_refused_in_either_order() -> None:
    class Declares:
        @compensable(undo_tools=("send_wire",))
        def pay_in(self, amount: int) -> str:
            return "in"

    sagacity = Sagacity()
    sagacity.wrap(Bank())
    with pytest.raises(DeclarationError, match="'send_wire' is IRREVERSIBLE"):
        sagacity.wrap(Declares())
    assert "pay_in" not in sagacity.registry

    class Wire:
        @compensable(reversibility=Reversibility.PRIVILEGED)
        def grant(self, user: str) -> str:
            return "granted"

    later = Sagacity()
    later.wrap_tool(lambda user: "in", name="invite", undo=UndoCall(tool="grant"))
    with pytest.raises(DeclarationError, match="'grant' is PRIVILEGED"):
        later.wrap(Wire())
    assert "grant" not in later.registry


def test_undo_tools_is_checked_at_decoration_time() -> None:
    with pytest.raises(DeclarationError, match="undo_tools= is a list of tool names"):
        compensable(undo_tools="release")
    with pytest.raises(DeclarationError, match="IRREVERSIBLE tool has no undo"):
        compensable(reversibility=Reversibility.IRREVERSIBLE, undo_tools=("release",))
    with pytest.raises(DeclarationError, match="not both"):
        compensable(by="release", undo_tools=("release",))
    with pytest.raises(DeclarationError, match="names tools by name"):
        compensable(undo_tools=("",))


def test_a_policy_returned_undo_names_its_undo_tools() -> None:
    with pytest.raises(PolicyError, match="needs undo_tools"):
        Policy.loads('[tools]\nupdate = { undo = "returned" }\n')
    policy = Policy.loads('[tools]\nupdate = { undo_tools = ["update"] }\n')
    resolution = policy.resolve("update")
    assert resolution is not None
    assert resolution.rule.undo == "returned"
    assert resolution.rule.undo_tools == ("update",)
    assert resolution.rule.reversibility is Reversibility.REVERSIBLE
    with pytest.raises(PolicyError, match="undo_tools must be a list"):
        Policy.loads('[tools]\nupdate = { undo_tools = "update" }\n')


def test_a_named_undo_is_declared_on_compensable_and_checked_there() -> None:
    release = UndoCall(tool="release", arguments={"hold_id": "$result.hold_id"})

    @compensable(undo=release)
    def hold(sku: str) -> dict[str, str]:
        return {"hold_id": sku}

    definition = getattr(hold, "__sagacity_tool__", None)
    assert definition is not None
    assert definition.undo_call is release
    with pytest.raises(DeclarationError, match="not both"):
        compensable(by="release", undo=release)
    with pytest.raises(DeclarationError, match="IRREVERSIBLE tool has no undo"):
        compensable(reversibility=Reversibility.IRREVERSIBLE, undo=release)
    with pytest.raises(DeclarationError, match="takes an UndoCall"):
        compensable(undo={"tool": "release"})  # type: ignore[arg-type]
