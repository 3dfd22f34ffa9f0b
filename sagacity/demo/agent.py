"""The demo's agent: a Pydantic AI agent with a scripted model, placing orders through Sagacity.

The model is scripted (no network, no API key) but goes through Pydantic AI's real tool
execution, every tool of the agent journaled by the agent-level hook
:func:`sagacity.adapters.pydantic_ai.journaled`.  Each scenario is one saga:

* ``confirmed``: reserve two widgets, create the order, send the confirmation: the
  confirmation is ``IRREVERSIBLE``, so the saga waits for approval;
* ``failed``: reserve a discontinued gadget, then ``create_order`` is refused: the saga fails
  and the reservation is released (inline, or by the compensation service when delegated);
* ``wire``: reserve a widget, then wire 100 to alice: ``IRREVERSIBLE``, waiting for approval
  (the stale-approval attack then tries to resume it with another payload; the refusal hands
  the reservation to compensation).

Run as a process: ``python -m sagacity.demo.agent SCENARIO SAGA_ID`` (Kafka journal from
``SAGACITY_*``, compensation delegated); it prints the saga result as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from sagacity.adapters.pydantic_ai import journaled
from sagacity.demo import tools
from sagacity.errors import InvalidArgumentError
from sagacity.saga._result import SagaResult
from sagacity.saga._saga import Sagacity

EMAIL = "customer@example.com"

# A scenario's turns: each builds the next tool call from the previous tool results.
Turn = Callable[[list[str]], tuple[str, dict[str, Any]] | str]

SCENARIOS: dict[str, tuple[str, list[Turn]]] = {
    "confirmed": (
        "Order 2 units of product p-1 and confirm to the customer.",
        [
            lambda _: ("reserve_inventory", {"product_id": "p-1", "quantity": 2}),
            lambda r: (
                "create_order",
                {"product_id": "p-1", "quantity": 2, "reservation_id": r[-1]},
            ),
            lambda r: ("send_confirmation", {"order_id": r[-1], "email": EMAIL}),
            lambda r: f"Order placed; {r[-1]}",
        ],
    ),
    "failed": (
        "Order 1 unit of product p-2.",
        [
            lambda _: ("reserve_inventory", {"product_id": "p-2", "quantity": 1}),
            lambda r: (
                "create_order",
                {"product_id": "p-2", "quantity": 1, "reservation_id": r[-1]},
            ),
            lambda r: f"Order placed; {r[-1]}",
        ],
    ),
    "wire": (
        "Reserve 1 unit of product p-1 and pay the supplier alice 100 for it.",
        [
            lambda _: ("reserve_inventory", {"product_id": "p-1", "quantity": 1}),
            lambda _: ("wire_payment", {"amount": "100", "to": "alice"}),
            lambda r: f"Payment: {r[-1]}",
        ],
    ),
}


def scripted_model(turns: list[Turn]) -> FunctionModel:
    """A model that plays ``turns``, one per request, fed the tool results so far."""
    results: list[str] = []
    pending = list(turns)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        last = messages[-1]
        if isinstance(last, ModelRequest):
            results.extend(str(p.content) for p in last.parts if isinstance(p, ToolReturnPart))
        step = pending.pop(0)(results)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        name, args = step
        return ModelResponse(parts=[ToolCallPart(tool_name=name, args=args)])

    return FunctionModel(respond)


def run_scenario(sagacity: Sagacity, scenario: str, saga_id: str) -> SagaResult:
    """Run ``scenario`` as saga ``saga_id`` with the demo tools wrapped into ``sagacity``.

    Raises:
        InvalidArgumentError: an unknown scenario.
    """
    if scenario not in SCENARIOS:
        raise InvalidArgumentError(
            f"unknown scenario {scenario!r}; one of {', '.join(sorted(SCENARIOS))}"
        )
    prompt, turns = SCENARIOS[scenario]
    # Every tool the agent can reach is journaled (each declared by its @compensable);
    # declaring the same functions again re-registers the same declarations: no clash.
    agent = journaled(Agent(scripted_model(turns), tools=tools.TOOLS), sagacity)

    async def work() -> str:
        return (await agent.run(prompt)).output

    # asyncio.run rather than run_sync: run_sync keeps the thread's event loop open after it.
    return asyncio.run(sagacity.saga_async(saga_id, work))


def main(argv: list[str] | None = None) -> int:
    """``python -m sagacity.demo.agent SCENARIO SAGA_ID``: run one scenario on the Kafka journal."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m sagacity.demo.agent SCENARIO SAGA_ID", file=sys.stderr)
        return 2
    scenario, saga_id = args
    sagacity = Sagacity.from_env()
    try:
        result = run_scenario(sagacity, scenario, saga_id)
    finally:
        sagacity.journal.close()
    print(
        json.dumps(
            {
                "saga_id": result.saga_id,
                "status": result.status.value,
                "awaiting_seq": result.awaiting_seq,
                "error": result.error,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
