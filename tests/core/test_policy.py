"""``sagacity.policy``: names, globs, MCP annotations, defaults, TOML and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import CompensationContext, Reversibility, Sagacity, SagaStatus, Undo
from sagacity.errors import DeclarationError, PolicyError, SerializationError
from sagacity.policy import Policy, PolicyWarning, Rule, ToolAnnotations, returned_undo

R = Reversibility


def release(context: CompensationContext) -> None:
    """A compensation named by ``module:function``."""


TOML = f"""
default = "COMPENSATABLE"

[tools]
refund_invoice = "IRREVERSIBLE"
"search_*" = "READ"
update_ticket_status = {{ undo = "returned", undo_tools = ["update_ticket_status"] }}
reserve = {{ by = "{__name__}:release" }}
grant_access = {{ reversibility = "privileged" }}
"""


def test_the_toml_policy_and_the_python_one_say_the_same() -> None:
    from_toml = Policy.loads(TOML)
    from_python = Policy(
        {
            "refund_invoice": "IRREVERSIBLE",
            "search_*": R.READ,
            "update_ticket_status": {"undo": "returned", "undo_tools": ["update_ticket_status"]},
            "reserve": {"by": release},
            "grant_access": Rule(reversibility=R.PRIVILEGED),
        },
        default="COMPENSATABLE",
    )
    for name in ("refund_invoice", "search_orders", "update_ticket_status", "reserve", "other"):
        a, b = from_toml.resolve(name), from_python.resolve(name)
        assert a is not None
        assert b is not None
        assert (a.rule.reversibility, a.rule.undo, a.rule.by, a.rule.undo_tools) == (
            b.rule.reversibility,
            b.rule.undo,
            b.rule.by,
            b.rule.undo_tools,
        )
    resolved = from_toml.resolve("update_ticket_status")
    assert resolved is not None
    assert resolved.rule.reversibility is R.REVERSIBLE
    reserve = from_toml.resolve("reserve")
    assert reserve is not None
    assert (reserve.rule.by, reserve.rule.reversibility) == (release, R.COMPENSATABLE)
    assert from_toml.resolve("other") is not None
    assert from_toml.resolve("other").source == "default"  # type: ignore[union-attr]


def test_an_exact_name_wins_over_a_glob_and_the_first_glob_wins() -> None:
    policy = Policy({"search_*": "READ", "search_a*": "IRREVERSIBLE", "search_all": "REVERSIBLE"})
    assert policy.resolve("search_all").rule.reversibility is R.REVERSIBLE  # type: ignore[union-attr]
    assert policy.resolve("search_any").pattern == "search_*"  # type: ignore[union-attr]
    assert policy.resolve("other") is None


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"readOnlyHint": True}, R.READ),
        ({"readOnlyHint": False, "destructiveHint": True}, R.IRREVERSIBLE),
        ({"readOnlyHint": False}, R.IRREVERSIBLE),  # MCP's default: may be destructive
        ({"destructiveHint": False}, None),
    ],
)
def test_mcp_annotations_give_defaults(annotations: dict[str, bool], expected: R | None) -> None:
    resolved = Policy().resolve("tool", ToolAnnotations.from_mcp(annotations))
    assert (resolved.rule.reversibility if resolved else None) is expected
    # A policy rule still wins over the annotations.
    ruled = Policy({"tool": "COMPENSATABLE"}).resolve("tool", ToolAnnotations.from_mcp(annotations))
    assert ruled is not None
    assert ruled.rule.reversibility is R.COMPENSATABLE


def test_the_returned_undo_convention_reads_mappings_and_json_text() -> None:
    written = {"undo": {"tool": "update_ticket_status", "arguments": {"status": "pending"}}}
    expected = Undo(tool="update_ticket_status", arguments={"status": "pending"})
    assert returned_undo(written) == expected
    assert (
        returned_undo(
            '{"status": "closed", "undo": {"tool": "update_ticket_status", '
            '"arguments": {"status": "pending"}}}'
        )
        == expected
    )
    assert returned_undo({"undo": None}) is None
    assert returned_undo("not json") is None


def test_unmatched_names_and_globs_are_listed() -> None:
    policy = Policy({"a": "READ", "b": "READ", "x_*": "READ", "y_*": "READ"})
    assert policy.unmatched(["a", "x_1"]) == ("b", "y_*")
    with pytest.warns(PolicyWarning, match=r"'b', 'y_\*'"):
        policy.warn_unmatched(["a", "x_1"], where="the agent")


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('[tools]\nok = "READ"\nbroken = \n', 3, "not valid TOML"),
        ('[tools]\nok = "READ"\nbad = "SOMETIMES"\n', 3, "tool 'bad': reversibility must be"),
        ('[tools]\n"g_*" = { undo = "kept" }\n', 2, 'undo must be "returned"'),
        ('[tools]\nr = { by = "no.such.module:f" }\n', 2, "module 'no.such.module' does not"),
        ('[tools]\nr = { by = "sagacity:nothing_here" }\n', 2, "has no 'nothing_here'"),
        ('[tools]\nr = { reversibility = "READ", by = "x:y" }\n', 2, "x"),
        ('[tools]\nr = { reversibility = "IRREVERSIBLE", undo = "returned" }\n', 2, "no undo"),
        ('[tools]\nr = { colour = "red" }\n', 2, "unknown key(s) colour"),
        ('refund_invoice = "IRREVERSIBLE"\n', 1, "go in the [tools] table"),
        ('default = "MAYBE"\n', 1, "default: reversibility must be"),
    ],
)
def test_a_malformed_toml_policy_names_the_line_and_the_reason(
    text: str, line: int, reason: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.loads(text, source="policy.toml")
    assert caught.value.line == line
    assert caught.value.source == "policy.toml"
    assert reason in str(caught.value)
    assert str(caught.value).startswith(f"policy.toml, line {line}: ")


def test_a_policy_file_is_read_and_a_missing_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(TOML, encoding="utf-8")
    assert Policy.from_toml(path).resolve("refund_invoice") is not None
    with pytest.raises(PolicyError, match="cannot read the policy"):
        Policy.from_toml(tmp_path / "missing.toml")


def test_an_undo_call_takes_its_arguments_from_the_call_and_its_result() -> None:
    from sagacity import UndoCall

    policy = Policy.loads(
        '[tools]\nhold = { undo = { tool = "release", arguments = '
        '{ id = "$result.hold.id", sku = "$arguments.sku", why = "compensation" } } }\n'
    )
    resolution = policy.resolve("hold")
    assert resolution is not None
    undo = resolution.rule.undo
    assert isinstance(undo, UndoCall)
    assert resolution.rule.reversibility is Reversibility.COMPENSATABLE
    rendered = undo.render(arguments={"sku": "A"}, result={"hold": {"id": "H-1"}})
    assert rendered.tool == "release"
    assert dict(rendered.arguments) == {"id": "H-1", "sku": "A", "why": "compensation"}
    with pytest.raises(SerializationError, match=r"'\$result.hold.id' is not in the call's result"):
        undo.render(arguments={"sku": "A"}, result={"other": 1})


def test_a_malformed_undo_call_is_refused_with_the_line() -> None:
    with pytest.raises(PolicyError, match="neither") as refused:
        Policy.loads('[tools]\nhold = { undo = { tool = "release", arguments = { id = "$x" } } }\n')
    assert refused.value.line == 2
    with pytest.raises(PolicyError, match="unknown key"):
        Policy.loads('[tools]\nhold = { undo = { tool = "release", args = {} } }\n')
    with pytest.raises(PolicyError, match="non-empty tool"):
        Policy.loads("[tools]\nhold = { undo = { arguments = {} } }\n")


def test_a_tool_with_an_undo_call_records_the_rendered_undo_and_is_undone_by_it() -> None:
    from sagacity import UndoCall

    released: list[dict[str, object]] = []
    sagacity = Sagacity()

    def hold(sku: str) -> dict[str, str]:
        return {"hold_id": f"H-{sku}"}

    def release(hold_id: str) -> None:
        released.append({"hold_id": hold_id})

    def fail() -> None:
        raise RuntimeError("boom")

    tools = {
        "hold": sagacity.wrap_tool(
            hold,
            undo=UndoCall(tool="release", arguments={"hold_id": "$result.hold_id"}),
        ),
        "release": sagacity.wrap_tool(release),
        "fail": sagacity.wrap_tool(fail),
    }

    def work() -> None:
        tools["hold"](sku="A")
        tools["fail"]()

    result = sagacity.saga("undo-call", work)
    assert result.status is SagaStatus.COMPENSATED
    assert released == [{"hold_id": "H-A"}]
    with pytest.raises(DeclarationError, match="not both"):
        sagacity.wrap_tool(hold, name="hold2", by=release, undo=UndoCall(tool="release"))
