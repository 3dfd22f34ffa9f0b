"""The demonstration: the Order / Product / Inventory example across separate processes.

:func:`run` does everything for real, on the Kafka broker and PostgreSQL database it is given:

1. creates the journal topic (if missing) and resets the shop's tables (:mod:`.tools`);
2. writes a fresh approver token into a principals file in the run directory and starts the
   approvals service (authenticated), the compensation service and the archive service as
   child processes, each logging to its own file in the run directory;
3. runs the agent process (:mod:`.agent`, a Pydantic AI agent with a scripted model, the
   Kafka journal, compensation delegated) for three sagas:

   * ``order-confirmed-<run>``: reserve, create the order, the confirmation email waits for
     approval; approved with ``sagacity approvals approve`` (or, with
     ``approve_in_console``, by a person in the console, whose address and a sign-in token
     the demo prints), resumed with
     ``sagacity approvals resume`` and the exact payload shown: ``COMPLETED``;
   * ``order-failed-<run>``: ``create_order`` refuses a discontinued product; the compensation
     service releases the reservation: ``COMPENSATED``, stock restored;
   * ``wire-attack-<run>``: a 100 wire to alice is approved, then resumed with 999999 to
     mallory: the CLI refuses it before sending; posted to the API past the CLI, 409
     "payload changed since approval", ``RESUME_REFUSED`` journaled, the
     reservation before it compensated by the service, the wire tool never called;

4. waits until the archive holds the three chains, runs ``sagacity verify --all`` and prints
   each chain as a table;
5. stops the services (also on failure: SIGTERM, then SIGKILL).

Every expectation is checked; the first one that fails raises :class:`DemoError` naming it,
with the tail of the log of the process concerned.

Here: the settings, the report and the run's steps; the scenarios are in :mod:`._scenarios`,
the run's services, commands and checks in :mod:`._run`, what it sets up in :mod:`._setup`.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sagacity.config._defaults import DEFAULT_TOPIC
from sagacity.demo._processes import tail
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import SagacityError

COMPENSATION_TOOLS = "sagacity.demo.tools:TOOLS"
"""What the compensation and approvals services load (``--tools``)."""
APPROVER = "manager@example.com"
ATTACK_PAYLOAD = '{"amount":"999999","to":"mallory"}'
"""What the attacker resumes the approved 100-to-alice wire with."""

E = EventType


class DemoError(SagacityError):
    """An expectation of the demonstration failed.

    Attributes:
        stage: the expectation's short name (``topic``, ``services``, ``confirmed``, ...).
        log: the log file of the process concerned, if any.
        log_tail: its last lines ("" when there is none).
    """

    def __init__(self, stage: str, message: str, *, log: Path | None = None):
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.log = log
        self.log_tail = tail(log) if log is not None else ""


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """Where and how the demonstration runs.

    ``run_id`` suffixes the saga ids (default: the UTC time and a random tag), so reruns on
    the same topic never collide; ``run_dir`` receives the logs and the principals file
    (default: a new temporary directory, its logs kept after the run; the secrets the run
    made there, the approvals signing key and the approver's token, are deleted at its end).
    ``key_encryption_key`` is the key-encryption key file every process of the run seals the
    journal's data under (``sagacity dev up`` makes the stack's); without one the run makes a
    key of its own in the run directory, deleted at its end with the other secrets.
    """

    bootstrap_servers: str
    database_url: str
    key_encryption_key: Path | None = None
    topic: str = DEFAULT_TOPIC
    run_id: str | None = None
    run_dir: Path | None = None
    compensation_tools: str = COMPENSATION_TOOLS
    timeout_s: float = 60.0
    approve_in_console: bool = False


@dataclass(frozen=True, kw_only=True)
class Saga:
    """One of the demo's sagas, as it ended."""

    name: str
    saga_id: str
    status: str
    entries: tuple[JournalEntry, ...]


@dataclass(kw_only=True)
class DemoReport:
    """What the demonstration did."""

    run_id: str
    run_dir: Path
    sagas: list[Saga] = field(default_factory=list)
    expectations: list[str] = field(default_factory=list)


def topic_from_env() -> str:
    """``SAGACITY_TOPIC`` or the default journal topic."""
    return os.environ.get("SAGACITY_TOPIC") or DEFAULT_TOPIC


def new_run_id() -> str:
    """A run id unique per run: the UTC time and a random tag (``20260102-153000-1a2b``)."""
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def abbreviate(text: str | None, width: int = 52) -> str:
    """``text`` on one line, cut to ``width`` characters with ``...``; ``-`` when empty."""
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def chain_table(entries: Sequence[JournalEntry]) -> list[str]:
    """A saga's chain as table lines: seq, event, tool, payload/result/error, actor."""
    rows = [
        [str(e.seq), e.event_type.value, e.tool or "-", _detail(e), e.actor or "-"] for e in entries
    ]
    header = ["SEQ", "EVENT", "TOOL", "PAYLOAD / RESULT", "ACTOR"]
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _detail(entry: JournalEntry) -> str:
    attributes = entry.attributes
    text = entry.payload or entry.result or entry.error
    if entry.event_type is E.COMPENSATION_REQUESTED:
        text = f"reason={attributes.get('reason', '?')}"
    elif not text and "ref_seq" in attributes:
        text = f"ref_seq={attributes['ref_seq']}"
    return abbreviate(text)


def run(settings: DemoSettings, *, echo: Callable[[str], None] = print) -> DemoReport:
    """Run the demonstration against the broker and database of ``settings``.

    Raises:
        DemoError: an expectation failed; ``stage`` names it, ``log_tail`` shows why.
    """
    from sagacity.demo._run import DemoRun
    from sagacity.demo._scenarios import archive_and_verify, attack, confirmed, failed
    from sagacity.demo._setup import ensure_topic, prepare_shop, sagacity_on_kafka

    started = time.monotonic()
    demo = DemoRun(settings, echo)
    echo(f"[stack]    kafka {settings.bootstrap_servers} | postgres {settings.database_url}")
    echo(f"[run]      {demo.run_id}, logs in {demo.dir}")
    partitions, created = ensure_topic(settings)
    verb = "created with the journal's settings" if created else "exists"
    echo(f"[topic]    {settings.topic} {verb} ({partitions} partitions)")
    prepare_shop(settings)
    echo("[shop]     tables reset: p-1 Widget (stock 10), p-2 Discontinued gadget (stock 5)")
    try:
        demo.announce_sealing()
        demo.start_services()
        with sagacity_on_kafka(demo.env, demo.approvals_public_key) as sagacity:
            confirmed(demo, sagacity)
            failed(demo, sagacity)
            attack(demo, sagacity)
            archive_and_verify(demo, sagacity)
    finally:
        demo.stop_services()
        demo.remove_secrets()
    echo(
        f"demo complete: all {len(demo.report.expectations)} expectations met "
        f"in {time.monotonic() - started:.1f}s"
    )
    return demo.report


__all__ = [
    "APPROVER",
    "ATTACK_PAYLOAD",
    "COMPENSATION_TOOLS",
    "DEFAULT_TOPIC",
    "DemoError",
    "DemoReport",
    "DemoSettings",
    "Saga",
    "abbreviate",
    "chain_table",
    "new_run_id",
    "run",
    "topic_from_env",
]
