"""A writer process that opens a saga, journals an INTENT and then hangs (to be killed).

Usage: python lease_writer.py BOOTSTRAP TOPIC SAGA LEASE_TTL_S
Prints one JSON line {"writer", "seq"} once the INTENT is acknowledged, then sleeps.
"""

from __future__ import annotations

import json
import sys
import time

from sagacity import EntryDraft, EventType
from sagacity.producer import KafkaJournal


def main() -> None:
    bootstrap, topic, saga, lease = sys.argv[1:]
    journal = KafkaJournal(bootstrap, topic=topic, ack_timeout_s=1.0, lease_ttl_s=float(lease))
    journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
    intent = journal.append(
        EntryDraft(saga_id=saga, event_type=EventType.INTENT, tool="t", payload='{"n":1}')
    )
    print(json.dumps({"writer": journal.writer_id, "seq": intent.seq}), flush=True)
    while True:  # the tool "runs" until the process is killed
        time.sleep(60)


if __name__ == "__main__":
    main()
