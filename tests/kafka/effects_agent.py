"""An agent process that charges an order in a conversation and is killed (a test's worker).

Usage: python effects_agent.py BOOTSTRAP TOPIC WRITER SAGA LEDGER STAGE

The conversation's tool ``charge`` is keyed by the order (docs/adr/0026-effects-and-refusals.md)
and appends each charge it makes to the file LEDGER (the world outside).  STAGE is where the
process stops, to be killed: ``intent`` (inside the tool, after its INTENT is durable and its
effect made, before it returns) or ``executed`` (after the call's EXECUTED is on the topic).
Prints one JSON line when it reaches the stage, then sleeps.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sagacity import CompensationContext, Sagacity, compensable, compensation
from sagacity.producer import KafkaJournal


class Payments:
    def __init__(self, ledger: Path, stage: str) -> None:
        self.ledger = ledger
        self.stage = stage

    @compensable(by="refund", effect_key=["order_id"])
    def charge(self, order_id: str, amount: int) -> str:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(f"charge {order_id} {amount}\n")
        if self.stage == "intent":
            print(json.dumps({"stage": "intent"}), flush=True)
            while True:  # the effect is made; the process dies before the call returns
                time.sleep(60)
        return f"charged {order_id}"

    @compensation
    def refund(self, context: CompensationContext) -> None:
        with self.ledger.open("a", encoding="utf-8") as out:
            out.write(f"refund {context.arguments['order_id']}\n")


def main() -> None:
    bootstrap, topic, writer, saga, ledger, stage = sys.argv[1:]
    journal = KafkaJournal(bootstrap, topic=topic, writer_id=writer, ack_timeout_s=5.0)
    sagacity = Sagacity(journal)
    tools = sagacity.wrap(Payments(Path(ledger), stage))
    conversation = sagacity.conversation(saga)
    conversation.call(lambda: tools.charge("o-1", 20))
    journal.flush()
    print(json.dumps({"stage": "executed"}), flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
