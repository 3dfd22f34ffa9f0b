"""Hostile input: well-formed but hostile events on a real topic, with every service running.

Run ``python -m bench.hostile`` (about ten minutes) or ``python -m bench.hostile --quick``
(about a minute). It needs a Kafka broker and a PostgreSQL server (``SAGACITY_BOOTSTRAP_SERVERS``
and ``SAGACITY_DATABASE_URL``, as ``sagacity dev up`` exports them), makes a fresh topic and
schema, and starts the approvals, compensation and archive services as processes. Then, round
after round, Hypothesis draws a batch of hostile messages — garbage bytes; entries with extreme
integers and times (seqs past 2^31 and at 2^63-1, counts of three billion, deadlines past 64
bits, times at the ends of int64), unknown event types and attribute keys, missing keys and keys
naming another saga, huge and empty fields, messages on another partition than their key's,
forks, duplicates and decoys of sagas already on the topic — and produces it; after each batch a
legitimate saga must still be approved and resumed through the approvals service, another
compensated by the compensation service, both archived, each within a bound, and every service
must answer its health check. Any round that misses is a failure (exit 1), named with the
service's log.

The short form runs in the test suite (``tests/services/test_hostile_inputs.py``); this module
holds the generator and the deployment both use. docs/reliability.md lists what each service
did with each kind of input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench import _fault_tools
from bench.faults import Service
from sagacity import EntryDraft, JournalEntry, Sagacity, SagaStatus
from sagacity.chain import link, payload_sha256
from sagacity.dev import pick_free_port
from sagacity.entries._events import event_type_of
from sagacity.producer import KafkaJournal, partition_for
from sagacity.producer._topic import TopicSpec, create
from sagacity.schemas import encode_entry

ROOT = Path(__file__).resolve().parents[1]
TOOLS = "bench._fault_tools:tools"
PARTITIONS = 3
ROUND_BOUND_S = 60.0
"""How long a legitimate saga may take to be decided, compensated and archived after a batch."""

INT64_MAX = 2**63 - 1
EXTREME_INTS = (0, 1, 2**31 - 1, 2**31, 2**32, 3_000_000_000, INT64_MAX, 10**30, -1, -(2**63))
EVENT_NAMES = (
    "SAGA_OPENED",
    "INTENT",
    "EXECUTED",
    "FAILED",
    "AWAITING_APPROVAL",
    "APPROVED",
    "REJECTED",
    "EXPIRED",
    "RESUME_REFUSED",
    "COMPENSATION_REQUESTED",
    "COMPENSATION_INTENT",
    "COMPENSATED",
    "SUSPECT",
    "SUSPECT_SETTLED",
    "SAGA_ENDED",
    "ERASED",
    "APPROVAL_REFUSED",
    "NOT_A_KNOWN_TYPE",
)
ATTRIBUTE_KEYS = (
    "ref_seq",
    "signatures_required",
    "expires_at_us",
    "payload_sha256",
    "reversibility",
    "policy_version",
    "decision_signature",
    "operator_signature",
    "request_hash",
    "journal",
    "redaction",
    "erased",
    "undo_tool",
    "undo_arguments",
    "writer",
    "caller",
    "an_attribute_nobody_knows",
)


@dataclass(frozen=True, kw_only=True)
class Hostile:
    """One message: its key (``None``: none), whether it goes to its key's partition, bytes."""

    kind: str
    key: bytes | None
    placed: bool
    value: bytes


@dataclass(frozen=True, kw_only=True)
class Target:
    """A saga already on the topic: its id and its accepted tail."""

    saga_id: str
    seq: int
    hash: str


def _text(draw: Callable[[st.SearchStrategy[Any]], Any]) -> str | None:
    size: int = draw(st.sampled_from((0, 1, 64, 4096, 200_000)))
    absent = draw(st.booleans())
    unit: str = draw(st.sampled_from(("x", "{", '{"a":1}', "\u202e\u200b", "é")))
    return None if absent else unit * max(1, size)


def _attributes(draw: Callable[[st.SearchStrategy[Any]], Any]) -> dict[str, str]:
    keys = draw(st.lists(st.sampled_from(ATTRIBUTE_KEYS), max_size=6, unique=True))
    values = st.one_of(
        st.sampled_from([str(n) for n in EXTREME_INTS]),
        st.sampled_from(("", "x" * 10_000, "IRREVERSIBLE", "READ", "SGCD2:00:" + "0" * 128)),
        st.text(max_size=40).filter(lambda t: "\x00" not in t),
    )
    return {key: draw(values) for key in keys}


_NOW_US = time.time_ns() // 1000


def _times() -> st.SearchStrategy[int]:
    """Times a writer chose: the ends of int64, and any month of the next three centuries (from
    the run's start: the strategy is the same in every round)."""
    return st.one_of(
        st.sampled_from((0, 1, 2**62, INT64_MAX, -(2**63), _NOW_US)),
        st.integers(min_value=_NOW_US, max_value=_NOW_US + 10**16),
    )


def _request_story(draw: Callable[[st.SearchStrategy[Any]], Any]) -> list[JournalEntry]:
    """A new saga, well linked, whose approval request carries extreme claims: counts,
    deadlines and times out of every column's range, a reversibility nobody declares."""
    saga_id = f"hostile-{draw(st.integers(0, 2**48)):x}"
    at = draw(_times())
    opened = link(
        EntryDraft(saga_id=saga_id, event_type=event_type_of("SAGA_OPENED"), recorded_at_us=at),
        seq=1,
        prev_hash="0" * 64,
    )
    payload = draw(
        st.sampled_from(('{"order":"x","amount":1}', "{}", '{"a":"' + "z" * 5000 + '"}'))
    )
    claims = {
        "payload_sha256": payload_sha256(payload),
        "signatures_required": draw(st.sampled_from([str(n) for n in EXTREME_INTS] + ["two"])),
        "expires_at_us": draw(st.sampled_from([str(n) for n in EXTREME_INTS] + ["soon"])),
        "reversibility": draw(st.sampled_from(("IRREVERSIBLE", "PRIVILEGED", "READ", "?"))),
        "policy_version": "1",
    }
    request = link(
        EntryDraft(
            saga_id=saga_id,
            event_type=event_type_of("AWAITING_APPROVAL"),
            tool=draw(st.sampled_from(("wire", "reserve", "unknown_tool"))),
            payload=payload,
            attributes=claims,
            recorded_at_us=draw(_times()),
        ),
        seq=2,
        prev_hash=opened.hash,
    )
    return [opened, request]


def _entry(
    draw: Callable[[st.SearchStrategy[Any]], Any], targets: list[Target]
) -> tuple[str, JournalEntry] | None:
    """A hostile entry (and what it is): ``None`` when the draw cannot be made an entry.

    The draws never depend on ``targets`` (which grow from round to round): an index is drawn
    and taken modulo their number."""
    aimed = draw(st.booleans())
    pick = draw(st.integers(0, 2**16))
    fresh = f"hostile-{draw(st.integers(0, 2**48)):x}"
    how = draw(st.sampled_from(("linked", "decoy", "fork", "extreme")))
    extreme = draw(st.sampled_from([n for n in EXTREME_INTS if 1 <= n <= INT64_MAX]))
    wrong_prev = draw(st.sampled_from(("ab" * 32, "0" * 64)))
    fields = {
        "event_type": draw(st.sampled_from(EVENT_NAMES)),
        "tool": _text(draw),
        "payload": draw(st.sampled_from((None, "", "{}", '{"amount":1}', "not json"))),
        "result": _text(draw),
        "error": _text(draw),
        "actor": draw(st.sampled_from((None, "", "mallory", "alice@example.com"))),
        "attributes": _attributes(draw),
        "recorded_at_us": draw(_times()),
    }
    if aimed and targets:
        target = targets[pick % len(targets)]
    else:
        target = Target(saga_id=fresh, seq=0, hash="0" * 64)
        how = "decoy" if how == "fork" else how
    seq = {"linked": target.seq + 1, "decoy": target.seq + 1, "fork": max(1, target.seq)}.get(
        how, extreme
    )
    prev = target.hash if how == "linked" else wrong_prev
    try:
        draft = EntryDraft(
            saga_id=target.saga_id,
            event_type=event_type_of(fields.pop("event_type")),
            **fields,
        )
        return f"entry:{how}", link(draft, seq=seq, prev_hash=prev)
    except Exception:
        return None


@st.composite
def hostile_messages(
    draw: Callable[[st.SearchStrategy[Any]], Any], targets: list[Target]
) -> list[Hostile]:
    """One hostile message, or a short well-linked story, aimed at ``targets`` (sagas on the
    topic) or at new sagas."""
    if draw(st.integers(0, 4)) == 0:
        story = _request_story(draw)
        return [
            Hostile(kind="request", key=e.saga_id.encode(), placed=True, value=encode_entry(e))
            for e in story
        ]
    return [draw(hostile_message(targets))]


@st.composite
def hostile_message(
    draw: Callable[[st.SearchStrategy[Any]], Any], targets: list[Target]
) -> Hostile:
    """One hostile message, aimed at ``targets`` (sagas on the topic) or at new sagas."""
    if draw(st.integers(0, 9)) == 0:
        value = draw(st.binary(min_size=0, max_size=2048))
        return Hostile(
            kind="garbage", key=draw(st.sampled_from((None, b"g"))), placed=True, value=value
        )
    made = _entry(draw, targets)
    if made is None:
        return Hostile(kind="garbage", key=b"unmade", placed=True, value=b"\x00\x01")
    kind, entry = made
    try:
        value = encode_entry(entry)
    except Exception:
        return Hostile(kind="garbage", key=entry.saga_id.encode(), placed=True, value=b"\xff")
    keyed = draw(st.sampled_from(("own", "own", "own", "none", "other")))
    key = {"own": entry.saga_id.encode(), "none": None, "other": b"someone-else"}[keyed]
    placed = draw(st.sampled_from((True, True, True, False)))
    return Hostile(
        kind=f"{kind}/{keyed}/{'placed' if placed else 'misplaced'}",
        key=key,
        placed=placed,
        value=value,
    )


def hostile_batch(targets: list[Target], *, size: int) -> st.SearchStrategy[list[Hostile]]:
    """A batch of hostile messages (stories kept in order)."""
    stories = st.lists(hostile_messages(targets), min_size=max(1, size // 2), max_size=size)
    return stories.map(lambda groups: [message for group in groups for message in group])


@dataclass
class Deployment:
    """A fresh topic and schema, the three services as processes, and an agent beside them."""

    bootstrap: str
    dsn: str
    home: Path
    topic: str = field(default_factory=lambda: f"hostile-{uuid.uuid4().hex[:10]}")
    services: list[Service] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    rounds: int = 0
    targets: list[Target] = field(default_factory=list)
    last_batch: list[Hostile] = field(default_factory=list)

    def start(self) -> None:
        """Make the topic, the keys and the services; wait until every service is healthy."""
        from sagacity.consumers.approvals._auth import auth_entry, new_token
        from sagacity.consumers.archive import generate_key as archive_key
        from sagacity.signing._decision_signature import generate_key as decision_key

        self.home.mkdir(parents=True, exist_ok=True)
        # A schema of its own: the archive keeps one topic per schema.
        schema = self.topic.replace("-", "_")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        self.dsn = make_conninfo(self.dsn, options=f"-c search_path={schema}")
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        spec = TopicSpec(partitions=PARTITIONS, replication_factor=1, min_insync_replicas=1)
        create(admin, self.topic, spec, bootstrap=self.bootstrap, timeout=30)
        _fault_tools.create_schema(self.dsn)
        self.token = new_token()
        auth = self.home / "auth.toml"
        auth.write_text(auth_entry("hostile-approver", self.token, ["*"]), encoding="utf-8")
        self.approvals_public = decision_key(self.home / "approvals.key").public_hex
        archive_key(self.home / "archive.key")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
        env.update(
            SAGACITY_BOOTSTRAP_SERVERS=self.bootstrap,
            SAGACITY_DATABASE_URL=self.dsn,
            SAGACITY_TOPIC=self.topic,
            # Clear data, said explicitly (the services refuse it otherwise): the hostile
            # events are written in clear by the rounds themselves.
            SAGACITY_ALLOW_CLEAR_DATA="1",
            SAGACITY_APPROVALS_SIGNING_KEY=str(self.home / "approvals.key"),
            SAGACITY_APPROVALS_PUBLIC_KEY=self.approvals_public,
            FAULT_TOOLS_DSN=self.dsn,
            PYTHONPATH=str(ROOT),
        )
        cli = [sys.executable, "-m", "sagacity.cli"]
        group = self.topic
        for kind in ("approvals", "compensation", "archive"):
            port = self.ports[kind] = pick_free_port()
            argv = {
                "approvals": [*cli, "serve", "approvals", "--auth", str(auth), "--tools", TOOLS,
                              "--port", str(port), "--group", f"{group}-approvals",
                              "--log-level", "warning"],
                "compensation": [*cli, "serve", "compensation", "--tools", TOOLS,
                                 "--group", f"{group}-compensation", "--port", str(port),
                                 "--handoff-grace", "1"],
                "archive": [*cli, "serve", "archive", "--group", f"{group}-archive",
                            "--signing-key", str(self.home / "archive.key"),
                            "--checkpoint-interval", "5", "--port", str(port)],
            }[kind]  # fmt: skip
            service = Service(
                kind=kind,
                index=1,
                argv=argv,
                env=env,
                log=self.home / f"{kind}.log",
                ready_url=f"http://127.0.0.1:{port}/healthz",
            )
            service.start()
            self.services.append(service)
        self._wait(lambda: all(s.ready() for s in self.services), 120, "the services to start")
        self.journal = KafkaJournal(self.bootstrap, topic=self.topic)
        self.agent = Sagacity(
            self.journal, compensation="delegated", approvals_public_key=self.approvals_public
        )
        self.shop = self.agent.wrap(_fault_tools.Shop(self.dsn))

    def stop(self) -> None:
        """Stop the services and the agent's journal."""
        for service in self.services:
            service.stop(30)
        with contextlib.suppress(Exception):
            self.journal.close()

    def _wait(self, check: Callable[[], Any], bound: float, what: str) -> Any:
        deadline = time.monotonic() + bound
        while True:
            for service in self.services:
                if not service.alive():
                    raise RoundFailedError(f"{service.name} exited", service)
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise RoundFailedError(f"timed out after {bound:g} s waiting for {what}", None)
            time.sleep(0.2)

    # -- hostile messages ------------------------------------------------------------------
    def produce(self, batch: list[Hostile]) -> None:
        """Produce ``batch`` to the topic, each message where its placement says."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "message.max.bytes": 2_000_000})
        for message in batch:
            home = partition_for(message.key, PARTITIONS) if message.key else 0
            partition = home if message.placed else (home + 1) % PARTITIONS
            producer.produce(self.topic, key=message.key, value=message.value, partition=partition)
            self.produced[message.kind.split("/")[0]] = (
                self.produced.get(message.kind.split("/")[0], 0) + 1
            )
        assert producer.flush(30) == 0, "the hostile batch was not acknowledged"

    # -- what must keep working ------------------------------------------------------------
    def _http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.ports['approvals']}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")

    def legitimate_round(self) -> float:
        """A gated saga approved and resumed through the service, a failed one compensated by
        the service, both archived, every service healthy; the seconds it took.

        Raises:
            RoundFailedError: a step missed its bound, or a service died.
        """
        started = time.monotonic()
        self.rounds += 1
        gated, failing = f"gated-{self.topic}-{self.rounds}", f"failing-{self.topic}-{self.rounds}"

        def gated_work() -> None:
            self.shop.reserve(gated, "lamp")
            self.shop.wire(gated, 100)

        result = self.agent.saga(gated, gated_work)
        if result.status is not SagaStatus.AWAITING_APPROVAL or result.awaiting_seq is None:
            raise RoundFailedError(f"the gated saga ended {result.status.value}", None)
        seq = result.awaiting_seq

        def failing_work() -> None:
            self.shop.reserve(failing, "lamp")
            raise RuntimeError("the order was refused")

        self.agent.saga(failing, failing_work)
        path = f"/sagacity/approvals/{gated}/{seq}"
        shown = self._wait(
            lambda: (lambda r: r[1] if r[0] == 200 else None)(self._http("GET", path)),
            ROUND_BOUND_S,
            "the approvals service to list the request",
        )
        status, answer = self._http(
            "POST", f"/sagacity/approve/{gated}/{seq}", {"request_hash": shown["request_hash"]}
        )
        if status != 200:
            raise RoundFailedError(f"approve answered {status}: {answer}", self.services[0])
        status, answer = self._http(
            "POST", f"/sagacity/resume/{gated}/{seq}", {"payload": shown["payload"]}
        )
        if status != 200 or answer.get("saga_status") != "COMPLETED":
            raise RoundFailedError(f"resume answered {status}: {answer}", self.services[0])
        outcome = self.agent.wait_for_outcome(failing, timeout=ROUND_BOUND_S)
        if outcome.status is not SagaStatus.COMPENSATED:
            raise RoundFailedError(
                f"the failed saga ended {outcome.status.value}", self.services[1]
            )
        for saga in (gated, failing):
            tail = self.journal.entries(saga)[-1]
            self._wait(
                lambda s=saga, t=tail: self._archived(s) == (t.seq, t.hash),  # type: ignore[misc]
                ROUND_BOUND_S,
                f"the archive to hold {saga}",
            )
            self.targets.append(Target(saga_id=saga, seq=tail.seq, hash=tail.hash))
        unhealthy = [s for s in self.services if not s.ready()]
        if unhealthy:
            details = self.health()
            named = "; ".join(f"{s.name}: {details.get(s.name)}" for s in unhealthy)
            raise RoundFailedError(f"unhealthy: {named}", unhealthy[0])
        return time.monotonic() - started

    def _archived(self, saga: str) -> tuple[int, str] | None:
        with psycopg.connect(self.dsn) as conn:
            row = conn.execute(
                """SELECT seq, hash FROM side_effect_journal WHERE topic = %s AND saga_id = %s
                   ORDER BY seq DESC LIMIT 1""",
                (self.topic, saga),
            ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def health(self) -> dict[str, Any]:
        """Each service's health details (quarantined / dead-lettered counts among them)."""
        found: dict[str, Any] = {}
        for service in self.services:
            try:
                with urllib.request.urlopen(service.ready_url, timeout=5) as answer:
                    found[service.name] = json.loads(answer.read() or b"{}")
            except urllib.error.HTTPError as exc:
                found[service.name] = f"HTTP {exc.code}: {exc.read().decode(errors='replace')}"
            except (OSError, ValueError) as exc:
                found[service.name] = f"unreachable: {exc}"
        return found


class RoundFailedError(Exception):
    """A legitimate saga missed its bound after a hostile batch."""

    def __init__(self, why: str, service: Service | None) -> None:
        tail = ""
        if service is not None and service.log.exists():
            tail = "\n" + "\n".join(service.log.read_text(errors="replace").splitlines()[-25:])
        super().__init__(f"{why}{tail}")


def run(*, rounds: int, batch: int, home: Path, seed: int | None = None) -> Deployment:
    """Deploy, then ``rounds`` times: a hostile batch, a legitimate round.

    Raises:
        RoundFailedError: a round missed its bound.
    """
    from hypothesis import HealthCheck, Phase, given, settings

    bootstrap = os.environ.get("SAGACITY_BOOTSTRAP_SERVERS", "")
    dsn = os.environ.get("SAGACITY_DATABASE_URL", "")
    if not bootstrap or not dsn:
        raise SystemExit(
            "set SAGACITY_BOOTSTRAP_SERVERS and SAGACITY_DATABASE_URL (sagacity dev up)"
        )
    deployment = Deployment(bootstrap=bootstrap, dsn=dsn, home=home)
    deployment.start()
    try:
        deployment.legitimate_round()

        failures: list[RoundFailedError] = []

        @settings(
            max_examples=rounds,
            deadline=None,
            database=None,
            derandomize=seed is None,
            # Each round changes the topic: no replaying or shrinking of earlier batches.
            phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def one_round(data: st.DataObject) -> None:
            messages = data.draw(hostile_batch(list(deployment.targets), size=batch))
            if failures:
                return  # the first failure ends the run (it is reported, not replayed)
            deployment.produce(messages)
            try:
                deployment.legitimate_round()
            except RoundFailedError as exc:
                deployment.last_batch = messages
                failures.append(exc)

        one_round()
        if failures:
            raise failures[0]
    finally:
        deployment.stop()
    return deployment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (4 if args.quick else 60)
    batch = args.batch or (20 if args.quick else 200)
    home = ROOT / ".sagacity" / "hostile" / uuid.uuid4().hex[:8]
    started = time.monotonic()
    try:
        deployment = run(rounds=rounds, batch=batch, home=home)
    except RoundFailedError as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    print(f"hostile input: {deployment.rounds} legitimate rounds passed after "
          f"{sum(deployment.produced.values())} hostile messages "
          f"({', '.join(f'{k} {v}' for k, v in sorted(deployment.produced.items()))}) "
          f"in {time.monotonic() - started:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
