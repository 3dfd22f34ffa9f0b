"""wrap() resolves every declaration at start-up and registers each tool by name."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    EventType,
    Reversibility,
    Sagacity,
    compensable,
    compensation,
)
from sagacity.errors import DeclarationError

from .conftest import Ledger, OrderTools, kinds


def test_wrap_instance_registers_each_tool_by_name(
    sagacity: Sagacity, order_tools: OrderTools
) -> None:
    tools = sagacity.wrap(order_tools)
    assert sagacity.registry.names() == (
        "charge_card",
        "lookup_stock",
        "reserve_inventory",
        "send_confirmation",
    )
    reserve = sagacity.registry.get("reserve_inventory")
    assert reserve is not None
    assert reserve.compensation is not None
    assert reserve.compensation.__name__ == "release_inventory"
    assert reserve.wrapped is tools.reserve_inventory
    assert tools.helper() == "plain"
    assert tools.ledger is order_tools.ledger
    assert set(tools.__sagacity_tools__) == set(sagacity.registry.names())


def test_wrapped_methods_keep_their_signature_and_name(tools: Any) -> None:
    assert tools.reserve_inventory.__name__ == "reserve_inventory"
    assert list(inspect.signature(tools.reserve_inventory).parameters) == [
        "product_id",
        "quantity",
    ]


def test_wrap_time_typo_in_by_raises_at_wrap() -> None:
    class Typo:
        @compensable(by="relase_inventory")
        def reserve(self, sku: str) -> str:
            return sku

        @compensation
        def release_inventory(self, context: CompensationContext) -> None: ...

    with pytest.raises(DeclarationError, match="relase_inventory") as info:
        Sagacity().wrap(Typo())
    assert "release_inventory" in str(info.value)  # the message lists what exists


def test_by_naming_an_unmarked_method_is_refused() -> None:
    class Unmarked:
        @compensable(by="undo")
        def act(self) -> None: ...

        def undo(self, context: CompensationContext) -> None: ...

    with pytest.raises(DeclarationError, match="not marked @compensation"):
        Sagacity().wrap(Unmarked())


def test_compensation_with_wrong_signature_is_refused_at_wrap() -> None:
    class Wrong:
        @compensable(by="undo")
        def act(self) -> None: ...

        @compensation
        def undo(self) -> None: ...  # passes alone; bound, it takes no context

    with pytest.raises(DeclarationError, match="exactly one CompensationContext"):
        Sagacity().wrap(Wrong())


@pytest.mark.parametrize(
    "reversibility",
    [Reversibility.READ, Reversibility.IRREVERSIBLE, Reversibility.PRIVILEGED],
)
def test_by_on_a_tool_without_undo_is_refused_at_wrap(reversibility: Reversibility) -> None:
    class Gated:
        @compensable(by="undo", reversibility=reversibility)
        def act(self) -> None: ...

        @compensation
        def undo(self, context: CompensationContext) -> None: ...

    with pytest.raises(DeclarationError, match=reversibility.value):
        Sagacity().wrap(Gated())


def test_nothing_to_wrap_says_what_to_do() -> None:
    class Plain:
        def act(self) -> None: ...

    with pytest.raises(DeclarationError, match="decorate its tool methods"):
        Sagacity().wrap(Plain())

    def plain_function() -> None: ...

    with pytest.raises(DeclarationError, match="decorate it with @compensable"):
        Sagacity().wrap(plain_function)
    with pytest.raises(DeclarationError, match="wrap an instance"):
        Sagacity().wrap(OrderTools)


def test_wrapping_a_compensation_or_twice_is_refused(sagacity: Sagacity) -> None:
    @compensation
    def undo(context: CompensationContext) -> None: ...

    with pytest.raises(DeclarationError, match="is a @compensation, not a tool"):
        sagacity.wrap(undo)
    tools = sagacity.wrap(OrderTools(Ledger()))
    with pytest.raises(DeclarationError, match="already wrapped"):
        sagacity.wrap(tools)


undone: list[CompensationContext] = []


@compensation
def cancel_booking(context: CompensationContext) -> None:
    undone.append(context)


@compensable(by="cancel_booking")
def book_room(room: str, nights: int = 1) -> str:
    return f"booking-{room}-{nights}"


@compensable
def explode() -> None:
    raise ValueError("boom")


def test_plain_functions_wrap_and_compensate_by_module_function(sagacity: Sagacity) -> None:
    undone.clear()
    book = sagacity.wrap(book_room)
    boom = sagacity.wrap(explode)
    assert book("12") == "booking-12-1"  # outside a saga: straight through

    def work() -> None:
        book("12", nights=2)
        boom()

    result = sagacity.saga("trip", work)
    assert result.status.value == "COMPENSATED"
    assert [c.arguments for c in undone] == [{"room": "12", "nights": 2}]
    assert (EventType.COMPENSATED, "book_room") in kinds(sagacity.journal.entries("trip"))


def test_plain_function_by_typo_is_refused() -> None:
    @compensable(by="no_such_function")
    def act() -> None: ...

    with pytest.raises(DeclarationError, match="no_such_function"):
        Sagacity().wrap(act)


def test_two_different_tools_with_one_name_are_refused(sagacity: Sagacity) -> None:
    @compensable(name="dup", reversibility=Reversibility.READ)
    def first() -> None: ...

    @compensable(name="dup", reversibility=Reversibility.READ)
    def second() -> None: ...

    sagacity.wrap(first)
    with pytest.raises(DeclarationError, match="two different tools are named 'dup'"):
        sagacity.wrap(second)


def test_wrapping_a_second_instance_of_the_same_class_replaces_the_first(
    sagacity: Sagacity,
) -> None:
    first, second = OrderTools(Ledger()), OrderTools(Ledger())
    sagacity.wrap(first)
    sagacity.wrap(second)
    registered = sagacity.registry.get("reserve_inventory")
    assert registered is not None
    assert getattr(registered.function, "__self__", None) is second


def test_wrap_tool_declares_an_undecorated_callable_without_touching_it(
    sagacity: Sagacity,
) -> None:
    undone: list[CompensationContext] = []
    effects: list[str] = []

    def framework_tool(city: str, nights: int = 1) -> str:
        effects.append(city)
        return f"hotel-{city}"

    def cancel(context: CompensationContext) -> None:
        undone.append(context)

    wrapped = sagacity.wrap_tool(framework_tool, name="book_hotel", by=cancel)
    assert not hasattr(framework_tool, "__sagacity_tool__")
    assert list(inspect.signature(wrapped).parameters) == ["city", "nights"]
    assert sagacity.registry.get("book_hotel") is not None

    def work() -> None:
        wrapped("Oslo")
        raise RuntimeError("stop")

    result = sagacity.saga("framework", work)
    assert result.status.value == "COMPENSATED"
    assert [c.arguments for c in undone] == [{"city": "Oslo", "nights": 1}]
    assert [c.tool for c in undone] == ["book_hotel"]


def test_wrap_tool_gates_async_callables_and_validates(sagacity: Sagacity) -> None:
    import asyncio

    async def send(to: str) -> str:
        return f"sent {to}"

    gated = sagacity.wrap_tool(send, reversibility=Reversibility.IRREVERSIBLE)
    assert inspect.iscoroutinefunction(gated)

    async def work() -> str:
        return str(await gated("bob"))

    result = asyncio.run(sagacity.saga_async("fw-gate", work))
    assert result.value == "[AWAITING_APPROVAL] Tool 'send' requires human approval"
    with pytest.raises(DeclarationError, match="name="):
        sagacity.wrap_tool(lambda x: x)
    with pytest.raises(DeclarationError, match="READ"):
        sagacity.wrap_tool(
            lambda x: x, name="r", reversibility=Reversibility.READ, by=lambda c: None
        )
    with pytest.raises(DeclarationError, match="exactly one CompensationContext"):
        sagacity.wrap_tool(lambda x: x, name="w", by=lambda a, b: None)
    with pytest.raises(DeclarationError, match="already wrapped"):
        sagacity.wrap_tool(gated, name="again")
