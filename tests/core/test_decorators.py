"""Decorators validate at decoration time and return the function itself."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity import CompensationContext, Reversibility, compensable, compensation
from sagacity.errors import DeclarationError
from sagacity.tools._decorators import compensation_definition, tool_definition


def test_compensable_returns_the_function_itself_and_it_stays_callable() -> None:
    def charge(amount: int) -> str:
        return f"charged {amount}"

    decorated = compensable(reversibility=Reversibility.READ)(charge)
    assert decorated is charge
    assert charge(3) == "charged 3"
    definition = tool_definition(charge)
    assert definition is not None
    assert definition.name == "charge"
    assert definition.reversibility is Reversibility.READ
    assert definition.is_async is False


def test_compensable_defaults_to_compensatable_and_accepts_name() -> None:
    @compensable(name="custom")
    def tool(x: int) -> int:
        return x

    definition = tool_definition(tool)
    assert definition is not None
    assert definition.name == "custom"
    assert definition.reversibility is Reversibility.COMPENSATABLE


def test_compensable_bare_works() -> None:
    @compensable
    def tool(x: int) -> int:
        return x

    assert tool_definition(tool) is not None
    assert tool(2) == 2


def test_compensation_bare_and_with_options() -> None:
    @compensation
    def undo(context: CompensationContext) -> None: ...

    @compensation(idempotent=True)
    def undo2(context: CompensationContext) -> None: ...

    first, second = compensation_definition(undo), compensation_definition(undo2)
    assert first is not None
    assert first.idempotent is False
    assert second is not None
    assert second.idempotent is True


def test_async_tool_is_recognised() -> None:
    @compensable
    async def tool(x: int) -> int:
        return x

    definition = tool_definition(tool)
    assert definition is not None
    assert definition.is_async


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reversibility": "IRREVERSIBLE"}, "Reversibility member"),
        ({"by": 42}, "by= must be"),
        ({"by": ""}, "by= must be"),
        ({"name": " "}, "name= must be"),
        ({"constraint": "nope"}, "constraint= must be callable"),
    ],
)
def test_malformed_options_raise_at_decoration(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(DeclarationError, match=message):
        compensable(**kwargs)


def test_generators_and_varargs_are_refused() -> None:
    def gen(x: int) -> Any:
        yield x

    def varargs(*items: int) -> None: ...

    with pytest.raises(DeclarationError, match="generator"):
        compensable(gen)
    with pytest.raises(DeclarationError, match=r"\*items"):
        compensable(varargs)


def test_declaring_twice_is_refused() -> None:
    def f(context: CompensationContext) -> None: ...

    compensation(f)
    with pytest.raises(DeclarationError, match="already declared"):
        compensable(f)


def test_compensation_with_wrong_arity_is_refused_now() -> None:
    def none() -> None: ...

    def three(a: object, b: object, c: object) -> None: ...

    with pytest.raises(DeclarationError, match="exactly one CompensationContext"):
        compensation(none)
    with pytest.raises(DeclarationError, match="exactly one CompensationContext"):
        compensation(three)


def test_non_functions_are_refused() -> None:
    with pytest.raises(DeclarationError, match="decorates functions"):
        compensable(object())  # type: ignore[call-overload]
    with pytest.raises(DeclarationError, match="below @staticmethod"):
        compensable(staticmethod(lambda: None))  # type: ignore[call-overload]
    with pytest.raises(DeclarationError, match="idempotent= must be a bool"):
        compensation(idempotent="yes")  # type: ignore[call-overload]
