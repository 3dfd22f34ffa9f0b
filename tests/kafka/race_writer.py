"""A writer process for the two-writer race: opens each saga at an agreed instant.

Usage: python race_writer.py BOOTSTRAP TOPIC START_AT SAGA [SAGA ...]
Prints one JSON line per saga: {"saga", "status": "won"|"lost", "writer", "detail"}.
"""

from __future__ import annotations

import json
import sys
import time

from sagacity import EntryDraft, EventType
from sagacity.errors import WriterConflictError
from sagacity.producer import KafkaJournal


def main() -> None:
    bootstrap, topic, start_at, *sagas = sys.argv[1:]
    journal = KafkaJournal(bootstrap, topic=topic)
    # Warm the connections so both processes race on the appends, not on start-up.
    journal.reader.read("warm-up")
    for index, saga in enumerate(sagas):
        instant = float(start_at) + index * 0.25
        while time.time() < instant:
            pass
        try:
            journal.append(EntryDraft(saga_id=saga, event_type=EventType.SAGA_OPENED))
            for step in range(3):
                intent = journal.append(
                    EntryDraft(
                        saga_id=saga,
                        event_type=EventType.INTENT,
                        tool="t",
                        payload=json.dumps({"step": step}),
                    )
                )
                journal.append(
                    EntryDraft(
                        saga_id=saga,
                        event_type=EventType.EXECUTED,
                        tool="t",
                        result=journal.writer_id,
                        attributes={"ref_seq": str(intent.seq)},
                    ),
                    durable=False,
                )
            journal.flush()
            status, detail = "won", ""
        except WriterConflictError as exc:
            status, detail = "lost", exc.message
        print(
            json.dumps(
                {"saga": saga, "status": status, "writer": journal.writer_id, "detail": detail}
            ),
            flush=True,
        )
    journal.close()


if __name__ == "__main__":
    main()
