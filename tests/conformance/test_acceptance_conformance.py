"""The acceptance rule in one place: every reader of a saga, run over the same messages.

``tests/vectors/acceptance-v1.json`` holds partitions' messages (decoys that do not link,
edited events, bodies of another saga, messages on another partition than their key's,
duplicates, forks, messages out of order, a saga first seen past its start) and the chain every
reader must accept from them.  The readers: the journal's reader (``SagaRead.feed``, which the
resumers, the compensation service, replay and the read index use), the core's rule for a
projection (``admit``), the in-memory request store and the approvals projection on PostgreSQL
(its consumer's path).  A reader with its own rule is how a decoy got shown as a request
(docs/adr/0025-trust-model.md).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sagacity.chain._acceptance import REGISTRY_KINDS, ForkKind, Tail, admit
from sagacity.entries._events import JournalEntry
from sagacity.postgres import PostgresRequestStore
from sagacity.producer import SagaRead
from sagacity.testing import InMemoryRequestStore

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "acceptance-v1.json"
CASES = json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]
NAMES = [case["name"] for case in CASES]

Outcome = tuple[str, list[tuple[int, str]]]
"""What a reader did with each message ("accepted" or a refusal kind), and its chain."""


def _messages(case: dict[str, Any]) -> list[tuple[str, bool, JournalEntry]]:
    return [(m["key"], m["placed"], JournalEntry.from_dict(m["entry"])) for m in case["messages"]]


def _accepted(case: dict[str, Any]) -> list[tuple[int, str]]:
    return [(seq, digest) for seq, digest in case["accepted"]]


def _reader(case: dict[str, Any]) -> tuple[list[str], list[tuple[int, str]]]:
    """The journal's reader: one ``SagaRead`` per key, fed its partition in offset order (a
    message on another partition is never read by it)."""
    reads: dict[str, SagaRead] = {}
    seen: list[str] = []
    for offset, (key, placed, entry) in enumerate(_messages(case)):
        if not placed:
            seen.append(ForkKind.WRONG_PARTITION.value)  # not on the partition it reads
            continue
        read = reads.setdefault(key, SagaRead(saga_id=key, partition=0))
        before = len(read.entries)
        read.feed(0, offset, entry)
        seen.append("accepted" if len(read.entries) > before else read.rejected[-1].kind.value)
    chain = [(e.seq, e.hash) for read in reads.values() for e in read.entries]
    return seen, chain


def _projection(
    apply: Callable[[str, bool, JournalEntry], Any],
) -> Callable[[dict[str, Any]], tuple[list[str], list[tuple[int, str]]]]:
    def run(case: dict[str, Any]) -> tuple[list[str], list[tuple[int, str]]]:
        seen: list[str] = []
        chain: list[tuple[int, str]] = []
        for key, placed, entry in _messages(case):
            refusal = apply(key, placed, entry)
            if refusal is None:
                seen.append("accepted")
                chain.append((entry.seq, entry.hash))
            else:
                seen.append(refusal.kind.value)
        return seen, chain

    return run


def _core_rule(case: dict[str, Any]) -> tuple[list[str], list[tuple[int, str]]]:
    tails: dict[str, Tail] = {}

    def apply(key: str, placed: bool, entry: JournalEntry) -> Any:
        refusal = admit(tails.get(key), key, entry, placed=placed)
        if refusal is None:
            tails[key] = Tail(seq=entry.seq, hash=entry.hash)
        return refusal

    return _projection(apply)(case)


def _memory_store(case: dict[str, Any]) -> tuple[list[str], list[tuple[int, str]]]:
    store = InMemoryRequestStore()
    return _projection(lambda k, p, e: store.apply_message(e, key=k, placed=p))(case)


def _expected(case: dict[str, Any], *, projection: bool) -> list[str]:
    return [
        (m.get("projection_expect") if projection else None) or m["expect"]
        for m in case["messages"]
    ]


READERS = {"journal reader": (_reader, False), "core rule": (_core_rule, True)}
READERS["in-memory request store"] = (_memory_store, True)


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("name", NAMES)
def test_every_reader_accepts_the_same_chain(name: str, reader: str) -> None:
    case = CASES[NAMES.index(name)]
    run, projection = READERS[reader]
    seen, chain = run(case)
    assert chain == _accepted(case)
    assert seen == _expected(case, projection=projection)


@pytest.mark.postgres
@pytest.mark.parametrize("name", NAMES)
def test_the_approvals_projection_accepts_the_same_chain(name: str, pg_dsn: str) -> None:
    case = CASES[NAMES.index(name)]
    store = PostgresRequestStore(pg_dsn, topic=f"conformance-{name}")
    store.migrate()
    seen: list[str] = []
    chain: list[tuple[int, str]] = []
    with store.connect() as conn:
        tails = store.tails(conn)
        for offset, (key, placed, entry) in enumerate(_messages(case)):
            refusal = store.apply_in(
                conn, entry, tails=tails, saga_id=key, placed=placed, position=(0, offset)
            )
            seen.append("accepted" if refusal is None else refusal.kind.value)
            if refusal is None:
                chain.append((entry.seq, entry.hash))
        tails.flush()
    assert chain == _accepted(case)
    assert seen == _expected(case, projection=True)
    quarantined = [(q.seq, q.kind) for q in store.quarantined()]
    refused = [
        (JournalEntry.from_dict(m["entry"]).seq, kind)
        for m, kind in zip(case["messages"], seen, strict=True)
        if kind not in ("accepted", "duplicate", "stale")
    ]
    assert quarantined == refused


ROOT = Path(__file__).resolve().parents[2]
RULE = "sagacity/chain/_acceptance.py"
RULE_NAMES = {"judge", "admit", "attributed", "screen"}
"""The rule's functions a reader calls (:mod:`sagacity.chain._acceptance`)."""

RULE_CALLERS = {
    # Every function of the product that takes a saga's events through the acceptance rule,
    # and the reader of this module that runs it over the vectors.  Replay, the resumers, the
    # compensation service and the read index read through the journal reader.
    "sagacity/ports/_reads.py:SagaRead.feed": "journal reader",
    "sagacity/testing/_requests.py:InMemoryRequestStore.apply_message": "in-memory request store",
    "sagacity/postgres/_request_fold.py:apply_entry": "approvals projection (PostgreSQL)",
}


def _product_functions() -> list[tuple[str, ast.AST, set[str]]]:
    """``file:function``, the function, and the names its module imports from the rule."""
    out: list[tuple[str, ast.AST, set[str]]] = []
    for top in ("sagacity", "producer", "consumers", "schemas"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if any(p.is_symlink() for p in [path, *path.parents] if ROOT in p.parents):
                continue
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            imported = {
                alias.asname or alias.name
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "sagacity.chain._acceptance"
                for alias in node.names
                if alias.name in RULE_NAMES
            }
            out += [(f"{rel}:{scope}", f, imported) for scope, f in _functions(tree)]
    return out


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, ast.AST]]:
    out: list[tuple[str, ast.AST]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            out += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append((f"{prefix}{node.name}", node))
    return out


def test_every_caller_of_the_rule_is_run_here() -> None:
    """A reader that takes a saga's events through the rule is one of the readers run over the
    vectors; one that refuses an event with a kind of its own keeps a second rule, which is
    how a decoy gets in (docs/adr/0025-trust-model.md): it fails here."""
    callers: set[str] = set()
    own_rules: set[str] = set()
    for name, function, imported in _product_functions():
        if name.startswith(f"{RULE}:"):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id in imported:
                callers.add(name)
            for keyword in node.keywords:
                value = keyword.value
                if (
                    keyword.arg == "kind"
                    and isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id == "ForkKind"
                ):
                    own_rules.add(name)
    assert callers == set(RULE_CALLERS)
    assert own_rules == set()
    runners = {"journal reader", "in-memory request store", "approvals projection (PostgreSQL)"}
    assert set(RULE_CALLERS.values()) == runners
    assert {"journal reader", "in-memory request store"} <= set(READERS)


def test_the_vectors_cover_every_refusal_kind() -> None:
    """Every kind but those only a reader with a writer registry gives (they need writers'
    keys: tests/compensation/test_writer_rule_e2e.py and the reader's unit tests)."""
    kinds = {m["expect"] for c in CASES for m in c["messages"]} | {
        m["projection_expect"] for c in CASES for m in c["messages"] if "projection_expect" in m
    }
    assert kinds == {"accepted"} | {kind.value for kind in ForkKind if kind not in REGISTRY_KINDS}


def test_with_a_writer_registry_the_reader_refuses_what_a_writer_may_not_write(
    tmp_path: Path,
) -> None:
    from sagacity import EntryDraft, EventType
    from sagacity.chain import link
    from sagacity.signing._writer_signature import WriterKey, WriterRegistry

    keys = {}
    for writer in ("agent-1", "agent-2"):
        path = tmp_path / f"{writer}.key"
        path.write_text("hmac-sha256:" + "ab" * 16 + writer.encode().hex() + "\n")
        keys[writer] = WriterKey.from_file(path, writer)
    registry_file = tmp_path / "writers.toml"
    registry_file.write_text("".join(k.registry_entry() for k in keys.values()))
    registry = WriterRegistry.from_file(registry_file)

    def event(kind: EventType, writer: str, seq: int, prev: str) -> JournalEntry:
        draft = EntryDraft(saga_id="s", event_type=kind, attributes={"writer": writer})
        return link(draft, seq=seq, prev_hash=prev)

    def sig(entry: JournalEntry, writer: str) -> bytes:
        return keys[writer].sign(saga_id="s", seq=entry.seq, hash=entry.hash)

    read = SagaRead(saga_id="s", partition=0, registry=registry)
    opened = event(EventType.SAGA_OPENED, "agent-1", 1, "0" * 64)
    read.feed(0, 0, opened, sig(opened, "agent-1"))
    unsigned = event(EventType.INTENT, "agent-1", 2, opened.hash)
    read.feed(0, 1, unsigned, None)
    foreign = event(EventType.INTENT, "agent-2", 2, opened.hash)
    read.feed(0, 2, foreign, sig(foreign, "agent-2"))
    own = event(EventType.INTENT, "agent-1", 2, opened.hash)
    read.feed(0, 3, own, sig(own, "agent-1"))
    assert [e.hash for e in read.entries] == [opened.hash, own.hash]
    assert [r.kind for r in read.rejected] == [ForkKind.UNATTRIBUTED, ForkKind.WRITER_NOT_OWNER]
