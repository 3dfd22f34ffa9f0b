"""One agent process of a fleet (for test_fleet_e2e): runs sagas on the shared journal topic,
every other one failing after its steps (compensation delegated to the service).

    python -m tests.compensation.fleet_agent BOOTSTRAP TOPIC DSN NAME COUNT

Prints ``{saga_id: status}`` as JSON.
"""

from __future__ import annotations

import json
import sys

from sagacity import Sagacity
from sagacity.producer import KafkaJournal
from tests.compensation import svc_tools


def main() -> None:
    bootstrap, topic, dsn, name, count = sys.argv[1:6]
    journal = KafkaJournal(bootstrap, topic=topic)
    agent = Sagacity(journal, compensation="delegated")
    agent.wrap(svc_tools.Shop(dsn))
    charge, reserve = agent.registry.get("charge"), agent.registry.get("reserve")
    assert charge is not None
    assert reserve is not None
    statuses: dict[str, str] = {}
    for n in range(int(count)):
        saga = f"{name}-{n}"

        def work(saga: str = saga, n: int = n) -> None:
            charge.wrapped(order=saga, amount=n + 1)
            reserve.wrapped(order=saga, item="chair")
            if n % 2:
                raise RuntimeError("card declined after the reservation")

        statuses[saga] = agent.saga(saga, work).status.value
    journal.close()
    print(json.dumps(statuses))


if __name__ == "__main__":
    main()
