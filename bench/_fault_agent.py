"""One agent process of the fault-injection run: sagas in a loop until a deadline.

    python -m bench._fault_agent NAME DEADLINE ACKS_FILE

``DEADLINE`` is a Unix time. Sagas cycle through three kinds: ``ok`` (two compensable steps,
completed), ``failing`` (the same steps, then an error: compensation is delegated to the
service) and ``gated`` (a step, then an ``IRREVERSIBLE`` wire: the saga waits, and this
process approves and resumes it through the approvals service, as a person would). After
each saga returns, one JSON line goes to ``ACKS_FILE``: the saga, its kind and status, and
every event the broker acknowledged to this process (seq and hash), which the checker then
looks for on the topic and in the archive. A saga whose run raised (the cluster was
unavailable past the ack timeout) is recorded with its error and no acknowledged events.

Settings from the environment: ``SAGACITY_BOOTSTRAP_SERVERS``, ``SAGACITY_TOPIC``,
``FAULT_TOOLS_DSN``, ``FAULT_APPROVALS_URL`` (the replicas, comma-separated),
``FAULT_APPROVER_TOKEN``, ``FAULT_PACE_S`` (pause between sagas) and
``SAGACITY_ACK_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from bench._fault_tools import Shop
from sagacity import EntryDraft, JournalEntry, Sagacity
from sagacity.journal import ApprovalRequest
from sagacity.producer import KafkaJournal

KINDS = ("ok", "failing", "gated")


class _Acked:
    """A journal remembering every entry an append returned, per saga."""

    def __init__(self, inner: KafkaJournal) -> None:
        self.inner = inner
        self.entries_by_saga: dict[str, list[JournalEntry]] = {}

    def _keep(self, entry: JournalEntry) -> JournalEntry:
        self.entries_by_saga.setdefault(entry.saga_id, []).append(entry)
        return entry

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        return self._keep(self.inner.append(draft, durable=durable))

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        return self._keep(await self.inner.append_async(draft, durable=durable))

    def append_after(
        self, draft: EntryDraft, *, after_seq: int, durable: bool = True
    ) -> JournalEntry:
        return self._keep(self.inner.append_after(draft, after_seq=after_seq, durable=durable))

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        return self.inner.entries(saga_id)

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        return self.inner.pending_approvals(saga_id)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _approve_and_resume(
    clients: list[httpx.Client], saga: str, seq: int, deadline: float, trace: list[str]
) -> str:
    """Read the request as the approvals service shows it, approve it and resume it with that
    payload, retrying through the replicas' restarts (the next replica after a failure), until
    the saga no longer waits; its status as the service then reports it (``AWAITING_APPROVAL``
    if the deadline passed). ``trace`` gets each answer, for the run's diagnostics."""
    payload: str | None = None
    shown: str | None = None
    approved = resumed = False
    status = "AWAITING_APPROVAL"
    turn = 0
    while time.monotonic() < deadline:
        client = clients[turn % len(clients)]
        try:
            if payload is None:
                r = client.get(f"/sagacity/approvals/{saga}/{seq}")
                if r.status_code == 200:  # 404 until the service has folded the request
                    payload = str(r.json()["payload"])
                    shown = r.json()["request_hash"]
            elif not approved:
                # Bound to the request as shown (the service refuses another).
                r = client.post(f"/sagacity/approve/{saga}/{seq}", json={"request_hash": shown})
                # 409: decided already (an earlier try got through before the service died).
                approved = r.status_code in (200, 409)
            elif not resumed:
                r = client.post(f"/sagacity/resume/{saga}/{seq}", json={"payload": payload})
                resumed = r.status_code in (200, 409)
            else:
                r = client.get(f"/sagacity/sagas/{saga}")
                if r.status_code == 200:
                    status = str(r.json().get("status", status))
                    if status not in ("AWAITING_APPROVAL", "RUNNING"):
                        return status
                    resumed = False  # the resume did not take: try it again
            trace.append(f"{r.request.method} {r.url.path.split('/')[2]} {r.status_code}")
            if r.status_code >= 500:
                turn += 1
            if r.status_code != 200:
                time.sleep(0.5)
        except httpx.HTTPError as exc:
            trace.append(f"{type(exc).__name__}")
            turn += 1
            time.sleep(0.5)
    return status


def main() -> None:
    name, deadline_at, acks_path = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
    pace = float(os.environ.get("FAULT_PACE_S", "0.2"))
    journal = KafkaJournal(
        os.environ["SAGACITY_BOOTSTRAP_SERVERS"],
        topic=os.environ["SAGACITY_TOPIC"],
        ack_timeout_s=float(os.environ.get("SAGACITY_ACK_TIMEOUT_S", "20")),
        startup_timeout_s=60.0,
        read_timeout_s=60.0,
    )
    acked = _Acked(journal)
    agent = Sagacity(acked, compensation="delegated")
    agent.wrap(Shop(os.environ["FAULT_TOOLS_DSN"]))
    charge, reserve, wire = (agent.registry.get(t) for t in ("charge", "reserve", "wire"))
    assert charge is not None
    assert reserve is not None
    assert wire is not None
    clients = [
        httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {os.environ['FAULT_APPROVER_TOKEN']}"},
            timeout=30.0,
        )
        for url in os.environ["FAULT_APPROVALS_URL"].split(",")
    ]
    n = 0
    with acks_path.open("a", encoding="utf-8") as acks:
        while time.time() < deadline_at:
            saga, kind = f"{name}-{n}", KINDS[n % len(KINDS)]

            def work(saga: str = saga, kind: str = kind, n: int = n) -> None:
                charge.wrapped(order=saga, amount=n + 1)
                if kind == "gated":
                    wire.wrapped(order=saga, amount=n + 1)
                    return
                reserve.wrapped(order=saga, item="chair")
                if kind == "failing":
                    raise RuntimeError("card declined after the reservation")

            record: dict[str, Any] = {"saga": saga, "kind": kind, "agent": name}
            try:
                result = agent.saga(saga, work)
                acked.flush()
                record["status"] = result.status.value
                record["events"] = [[e.seq, e.hash] for e in acked.entries_by_saga.pop(saga, [])]
                if kind == "gated" and result.awaiting_seq is not None:
                    trace: list[str] = []
                    # The approver keeps trying for two minutes, but not long past the run.
                    give_up = time.monotonic() + min(120.0, max(20.0, deadline_at - time.time()))
                    record["approved_status"] = _approve_and_resume(
                        clients, saga, result.awaiting_seq, give_up, trace
                    )
                    if record["approved_status"] != "COMPLETED":
                        record["approval_trace"] = trace[-12:]
            except Exception as exc:  # the run goes on: the checker counts what was acked
                acked.entries_by_saga.pop(saga, None)
                record["status"] = "ERROR"
                record["error"] = f"{type(exc).__name__}: {exc}"[:300]
                record["events"] = []
            acks.write(json.dumps(record) + "\n")
            acks.flush()
            n += 1
            time.sleep(pace)
    for client in clients:
        client.close()
    journal.close()


if __name__ == "__main__":
    main()
