"""An agent process on the bare install (``pip install sagacity``, no extras): three sagas on
the Kafka journal through ``Sagacity.from_env()``, then the modules it imported.

Prints one JSON line: ``{"statuses": [...], "imported": [...]}``.
"""

from __future__ import annotations

import json
import logging
import sys

from sagacity import CompensationContext, Reversibility, Sagacity, compensable, compensation

SERVICE_MODULES = ("cryptography", "nacl", "fastapi", "starlette", "uvicorn", "prometheus_client")


class Shop:
    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        return f"reserved {sku}"

    @compensation
    def release(self, context: CompensationContext) -> None:
        pass

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire(self, amount: str, to: str) -> str:
        return f"sent {amount} to {to}"


def main(prefix: str) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    agent = Sagacity.from_env()
    tools = agent.wrap(Shop())
    statuses = [
        agent.saga(f"{prefix}-plain", lambda: tools.reserve("SKU-1")).status.value,
        agent.saga(
            f"{prefix}-gated", lambda: (tools.reserve("SKU-2"), tools.send_wire("100", "alice"))
        ).status.value,
        agent.saga(f"{prefix}-again", lambda: tools.reserve("SKU-3")).status.value,
    ]
    agent.journal.close()
    imported = sorted({m.split(".")[0] for m in sys.modules} & set(SERVICE_MODULES))
    print(json.dumps({"statuses": statuses, "imported": imported}))


if __name__ == "__main__":
    main(sys.argv[1])
