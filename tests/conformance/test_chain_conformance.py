"""The evidence format in one place: every writer of the canonical form and every walker of a
chain, run over every vector of ``tests/vectors/`` (docs/adr/0002-hash-chain.md).

Writers must reproduce each entry of ``chain-v1.json`` byte for byte and refuse each entry of
``negative-v1.json``; walkers must give the verdict of ``verdicts-v1.json`` (reason and seq)
and accept no chain holding a negative entry.  Form 2 (docs/adr/0019-erasure.md) has its own
three files (``chain-v2.json``, ``negative-v2.json``, ``verdicts-v2.json``) and its own
registries of the writers and walkers that read it.  The standalone bundle verifier runs in-process
and as the auditor runs it: ``python -I verify_bundle.py`` on bundles built from the vectors.

The registries below are checked against the code: a function that writes the form's magic or
names a chain break, anywhere in the product, fails this module until it is registered here
(and so run over the vectors).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sagacity import GENESIS_HASH, BreakReason, EntryDraft, JournalEntry, verify
from sagacity.chain import (
    _fastverify,
    canonical_bytes,
    canonical_bytes_of,
    canonical_bytes_v2_of,
    compute_hash,
    hash_of,
    link,
)
from sagacity.chain._acceptance import ForkKind
from sagacity.consumers.archive import _audit, _columncheck, _judging, verify_bundle
from sagacity.entries._events import event_type_of
from sagacity.errors import SerializationError
from sagacity.postgres.archive import entry_of_row
from sagacity.schemas import _hotpath, decode_entry

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors"
CHAINS = json.loads((VECTORS / "chain-v1.json").read_text(encoding="utf-8"))
VERDICTS = json.loads((VECTORS / "verdicts-v1.json").read_text(encoding="utf-8"))
NEGATIVE = json.loads((VECTORS / "negative-v1.json").read_text(encoding="utf-8"))

CHAINS_V2 = json.loads((VECTORS / "chain-v2.json").read_text(encoding="utf-8"))
VERDICTS_V2 = json.loads((VECTORS / "verdicts-v2.json").read_text(encoding="utf-8"))
NEGATIVE_V2 = json.loads((VECTORS / "negative-v2.json").read_text(encoding="utf-8"))

VECTOR_ENTRIES = [e for chain in CHAINS["chains"] for e in chain["entries"]]
VECTOR_ENTRIES_V2 = [e for chain in CHAINS_V2["chains"] for e in chain["entries"]]
NEGATIVE_CASES_V2 = {case["name"]: case for case in NEGATIVE_V2["cases"]}
VERDICT_CASES_V2 = {case["name"]: case for case in VERDICTS_V2["cases"]}
NEGATIVE_CASES = {case["name"]: case for case in NEGATIVE["cases"]}
VERDICT_CASES = {case["name"]: case for case in VERDICTS["cases"]}

try:
    from sagacity import _sagacity_native as sagacity_native  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - where cargo is, the test below fails instead
    sagacity_native = None  # type: ignore[assignment]

NATIVE_WANTED = os.environ.get("SAGACITY_NATIVE", "1") != "0"
NATIVE = sagacity_native is not None and NATIVE_WANTED


def test_the_native_writer_is_run_where_cargo_is() -> None:
    """Where cargo is (and ``SAGACITY_NATIVE`` is not 0) the compiled writer and walker must be
    importable: this module never checks only the Python ones by accident."""
    cargo = shutil.which("cargo") or (Path.home() / ".cargo" / "bin" / "cargo").exists()
    if NATIVE_WANTED and cargo:
        assert NATIVE, "cargo is here but sagacity-native is not installed"
        assert _hotpath.NATIVE
        assert _fastverify.NATIVE


# --- writers -------------------------------------------------------------------------------------


class RefusedError(Exception):
    """A writer refused its input, in the way its contract says it refuses."""


def _draft(e: dict[str, Any]) -> EntryDraft:
    if "form" in e or "commitments" in e or "salts" in e:
        return EntryDraft(
            saga_id=e["saga_id"],
            event_type=event_type_of(e["event_type"]),
            tool=e["tool"],
            payload=e["payload"],
            result=e["result"],
            error=e["error"],
            actor=e["actor"],
            attributes=e["attributes"] or {},
            recorded_at_us=e["recorded_at_us"],
            form=e["form"],
            commitments=e.get("commitments") or {},
            salts=e.get("salts") or {},
        )
    return EntryDraft(
        saga_id=e["saga_id"],
        event_type=event_type_of(e["event_type"]),
        tool=e["tool"],
        payload=e["payload"],
        result=e["result"],
        error=e["error"],
        actor=e["actor"],
        attributes=e["attributes"] or {},
        recorded_at_us=e["recorded_at_us"],
    )


def _prev_digest(prev_hash: Any) -> bytes:
    # For the writers that take the previous hash as its 32 raw bytes: not hex is refused here.
    try:
        return bytes.fromhex(prev_hash)
    except (ValueError, TypeError) as exc:
        raise RefusedError(str(exc)) from exc


def write_reference(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``canonical_bytes`` / ``compute_hash`` of the entry ``JournalEntry.from_dict`` makes."""
    try:
        entry = JournalEntry.from_dict(e)
        return canonical_bytes(entry, seq=entry.seq), compute_hash(
            entry.prev_hash, entry, seq=entry.seq
        )
    except SerializationError as exc:
        raise RefusedError(exc.message) from exc


def write_fields(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``canonical_bytes_of`` (the Python writer from field values) then ``hash_of``."""
    try:
        canonical = canonical_bytes_of(
            e["saga_id"],
            e["seq"],
            e["event_type"],
            e["tool"],
            e["payload"],
            e["result"],
            e["error"],
            e["actor"],
            e["recorded_at_us"],
            e["attributes"],
        )
        return canonical, hash_of(_prev_digest(e["prev_hash"]), canonical)
    except SerializationError as exc:
        raise RefusedError(exc.message) from exc
    except (UnicodeEncodeError, AttributeError) as exc:  # its documented "not text"
        raise RefusedError(str(exc)) from exc


def write_fields_v2(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``canonical_bytes_v2_of`` (the Python writer of form 2 from field values), ``hash_of``."""
    if e.get("form") != 2:
        raise RefusedError(f"not a form-2 entry: form {e.get('form')!r}")
    try:
        canonical = canonical_bytes_v2_of(
            e["saga_id"],
            e["seq"],
            e["event_type"],
            e["tool"],
            e["payload"],
            e["result"],
            e["error"],
            e["actor"],
            e["recorded_at_us"],
            e["attributes"],
            commitments=e.get("commitments") or {},
            salts=e.get("salts") or {},
        )
        return canonical, hash_of(_prev_digest(e["prev_hash"]), canonical)
    except SerializationError as exc:
        raise RefusedError(exc.message) from exc
    except (UnicodeEncodeError, AttributeError) as exc:
        raise RefusedError(str(exc)) from exc


def write_link(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``chain.link`` of the draft (what the in-memory journal appends)."""
    try:
        return None, link(_draft(e), seq=e["seq"], prev_hash=e["prev_hash"]).hash
    except SerializationError as exc:
        raise RefusedError(exc.message) from exc


def _link_encoded(e: dict[str, Any], native: Any, entry: Any = None) -> tuple[bytes | None, str]:
    saved = _hotpath._native_link_encode, _hotpath._native_link_entry
    _hotpath._native_link_encode, _hotpath._native_link_entry = native, entry
    try:
        entry, value = _hotpath.link_encoded(_draft(e), seq=e["seq"], prev_hash=e["prev_hash"])
    except SerializationError as exc:
        raise RefusedError(exc.message) from exc
    finally:
        _hotpath._native_link_encode, _hotpath._native_link_entry = saved
    # The Avro value carries the same entry (docs/adr/0003-wire-format.md).
    assert decode_entry(value) == entry
    return None, entry.hash


def write_codec_python(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``schemas.link_encoded`` on its Python path (the journal's hot path without cargo)."""
    return _link_encoded(e, None)


def write_codec_native(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``schemas.link_encoded`` on its compiled path, which must take every entry it accepts
    (a call that raises or declines falls back to Python, and would check that path twice)."""
    taken: list[bool] = []

    def compiled(*args: Any) -> Any:
        out = sagacity_native.link_encode(*args)
        taken.append(out is not None)
        return out

    written = _link_encoded(e, compiled)
    assert taken == [True], "the compiled path did not take an entry link_encoded accepted"
    return written


def write_codec_entry(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``schemas.link_encoded`` on its compiled path that makes the entry too
    (``sagacity_native.link_entry``), which must take every form-1 entry it accepts; it hands a
    form-2 draft on to ``link_encode``."""
    taken: list[bool] = []

    def compiled(*args: Any) -> Any:
        out = sagacity_native.link_entry(*args)
        taken.append(out is not None)
        return out

    written = _link_encoded(e, sagacity_native.link_encode, compiled)
    expected = [False] if e.get("form", 1) == 2 else [True]
    assert taken == expected, "the compiled path did not take an entry link_encoded accepted"
    return written


def write_native(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``sagacity_native.link_encode`` called directly: ``None`` (or a Python error) refuses."""
    attributes = e["attributes"]
    if isinstance(attributes, dict):
        # The caller hands over a draft's mapping, sorted by key.
        attributes = dict(sorted(attributes.items(), key=lambda kv: str(kv[0])))
    prev = _prev_digest(e["prev_hash"])
    try:
        out = sagacity_native.link_encode(
            b"",
            prev,
            e["prev_hash"],
            e["seq"],
            e["saga_id"],
            e["event_type"],
            e["tool"],
            e["payload"],
            e["result"],
            e["error"],
            e["actor"],
            e["recorded_at_us"],
            attributes,
            e.get("form", 1),
            e.get("commitments") or {},
            e.get("salts") or {},
        )
    except (AttributeError, OverflowError, TypeError, ValueError) as exc:
        raise RefusedError(str(exc)) from exc
    if out is None:
        raise RefusedError("the compiled writer hands the entry back")
    return None, out[0]


def write_standalone(e: dict[str, Any]) -> tuple[bytes | None, str]:
    """``verify_bundle.canonical`` / ``entry_hash``: the auditors' copy (standard library)."""
    try:
        return verify_bundle.canonical(e), verify_bundle.entry_hash(e)
    except (ValueError, KeyError, TypeError) as exc:
        raise RefusedError(str(exc)) from exc


WRITERS: dict[str, Callable[[dict[str, Any]], tuple[bytes | None, str]]] = {
    "reference": write_reference,
    "fields": write_fields,
    "link": write_link,
    "codec-python": write_codec_python,
    "codec-native": write_codec_native,
    "codec-entry": write_codec_entry,
    "native": write_native,
    "standalone": write_standalone,
}
NATIVE_WRITERS = {"codec-native", "codec-entry", "native"}

WRITERS_V2: dict[str, Callable[[dict[str, Any]], tuple[bytes | None, str]]] = {
    # The writers of form 2.
    "codec-python": write_codec_python,
    "codec-native": write_codec_native,
    "codec-entry": write_codec_entry,
    "native": write_native,
    "reference": write_reference,
    "fields": write_fields_v2,
    "link": write_link,
    "standalone": write_standalone,
}

WRITER_FUNCTIONS = {
    # Every function of the product that writes the form's magic, and the writer (or walker,
    # below) of this module that runs it over the vectors.
    # The one Python writer: canonical_bytes, canonical_bytes_of and the journal's encoder
    # (schemas._hotpath) all call it.
    "sagacity/chain/_form.py:canonical_layout": "fields",
    "sagacity/chain/_form.py:canonical_bytes_v2_of": "v2:fields",
    "consumers/archive/verify_bundle.py:canonical_v2": "v2:standalone",
    "consumers/archive/verify_bundle.py:canonical": "standalone",
    "native/src/lib.rs": "native",
}

THE_WRITERS = {
    # The three writers of the form (issue 33): the Python reference, the compiled one and the
    # standalone verifier's copy (one file an auditor runs on the standard library alone).
    # Every other path calls one of them: the column fast path and the journal's encoder the
    # reference, the compiled walker and codec the crate's ``canonical_into``.
    "sagacity/chain/_form.py",
    "native/src/lib.rs",
    "consumers/archive/verify_bundle.py",
}


def _native_or_skip(name: str) -> None:
    if name in NATIVE_WRITERS and not NATIVE:
        # test_the_native_writer_is_run_where_cargo_is fails where the module should be.
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not built here")


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_reproduces_every_vector(writer: str) -> None:
    _native_or_skip(writer)
    for e in VECTOR_ENTRIES:
        canonical, digest = WRITERS[writer](e)
        if canonical is not None:
            assert canonical.hex() == e["canonical_hex"], (writer, e["saga_id"], e["seq"])
        assert digest == e["hash"], (writer, e["saga_id"], e["seq"])


@pytest.mark.parametrize("case", sorted(NEGATIVE_CASES))
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_refuses_every_negative_vector(writer: str, case: str) -> None:
    _native_or_skip(writer)
    entry = NEGATIVE_CASES[case]["entry"]
    with pytest.raises(RefusedError):
        WRITERS[writer](entry)


def test_the_negative_vectors_name_their_reasons() -> None:
    reasons = set(NEGATIVE["reasons"])
    assert {case["reason"] for case in NEGATIVE["cases"]} == reasons
    # A writer that checks nothing would chain most of them: the vectors hold that hash.
    assert sum(case["entry"]["hash"] is not None for case in NEGATIVE["cases"]) >= 18


def _product_rust_files() -> list[Path]:
    """The crate's sources, without its unit tests (``native/src/tests/``: they run the crate's
    writer and walker over these vectors, and name what they expect)."""
    tests = ROOT / "native" / "src" / "tests"
    return [p for p in sorted((ROOT / "native" / "src").rglob("*.rs")) if tests not in p.parents]


def _magic_users() -> set[str]:
    """``file:function`` for every Python function of the product that uses the canonical
    form's magic (``b"SGC1"`` or ``CANONICAL_MAGIC``), and every Rust file that does."""
    found: set[str] = set()
    for top in ("sagacity", "producer", "consumers", "schemas"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if any(p.is_symlink() for p in [path, *path.parents] if ROOT in p.parents):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(ROOT).as_posix()
            for scope, function in _functions(tree):
                if _uses_magic(function):
                    found.add(f"{rel}:{scope}")
    for path in _product_rust_files():
        text = path.read_text(encoding="utf-8")
        if re.search(r'b"SGC[12]"', text):
            found.add(path.relative_to(ROOT).as_posix())
    return found


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node


def _uses_magic(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Constant) and node.value in (b"SGC1", b"SGC2"):
            return True
        if isinstance(node, ast.Name) and node.id in ("CANONICAL_MAGIC", "CANONICAL_MAGIC_V2"):
            return True
    return False


def test_the_form_has_three_writers() -> None:
    """A second writer in a language that has one calls it instead (the registry below is
    what the code holds: ``test_every_writer_of_the_form_is_registered``)."""
    assert {name.split(":")[0] for name in WRITER_FUNCTIONS} == THE_WRITERS


def test_every_writer_of_the_form_is_registered() -> None:
    """A new writer fails here until it is registered (and so run over every vector)."""
    assert _magic_users() == set(WRITER_FUNCTIONS)
    for runner in WRITER_FUNCTIONS.values():
        if runner.startswith("v2:"):
            assert runner.removeprefix("v2:") in WRITERS_V2
        else:
            assert runner in WRITERS or runner.removeprefix("walker:") in WALKERS


# --- walkers -------------------------------------------------------------------------------------


Verdict = dict[str, Any]
"""``{"ok": bool}`` plus, when a walker says why, ``reason`` and ``bad_seq``; ``refused`` when
the walker will not read the chain at all (a row that is not an entry)."""


def _rows_of(events: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            e["saga_id"],
            e["seq"],
            e["event_type"],
            e["tool"],
            e["payload"],
            e["result"],
            e["error"],
            e["actor"],
            json.dumps(e["attributes"] or {}),
            e["recorded_at_us"],
            e["prev_hash"],
            e["hash"],
        ]
        for e in events
    ]


_ROW_NAMES = (
    *("saga_id", "seq", "event_type", "tool", "payload", "result", "error", "actor"),
    *("attributes", "recorded_at_us", "prev_hash", "hash"),
)


def _event_of_row(row: Sequence[Any]) -> dict[str, Any]:
    event = dict(zip(_ROW_NAMES, row, strict=True))
    event["attributes"] = json.loads(row[8])
    return event


def _chain_verdict(ok: bool, reason: Any = None, bad_seq: Any = None) -> Verdict:
    if ok:
        return {"ok": True}
    return {"ok": False, "reason": None if reason is None else str(reason), "bad_seq": bad_seq}


def walk_reference(rows: list[list[Any]], saga_id: str, anchor: tuple[int, str]) -> Verdict:
    """``sagacity.chain.verify`` on the entries the rows hold."""
    try:
        entries = [entry_of_row(r) for r in rows]
    except SerializationError:
        return {"ok": False, "refused": True}
    v = verify(entries, saga_id=saga_id, after_seq=anchor[0], after_hash=anchor[1])
    return _chain_verdict(v.ok, v.reason and v.reason.value, v.bad_seq)


def walk_audit(rows: list[list[Any]], saga_id: str, anchor: tuple[int, str]) -> Verdict:
    """The archive audit's per-saga judgement (``_judging.judge``; no checkpoints), after its
    fast path over the columns (``_verified_head``), which must never pass a chain the
    reference does not."""
    head = _columncheck.verified_head(rows, after_seq=anchor[0], after_hash=anchor[1])
    try:
        entries = [entry_of_row(r) for r in rows]
    except SerializationError:
        assert head is None, "the audit's fast path passed rows that are not entries"
        return {"ok": False, "refused": True}
    audit = _judging.judge(
        saga_id,
        entries,
        anchor=anchor if anchor[0] else None,
        recorded_head=None,
        keys={},
    )
    if head is not None:
        assert (head[0], head[1]) == (audit.head_seq, audit.head_hash)
    if audit.reason is _audit.AuditReason.BEYOND_HEAD or audit.ok:
        # The chain verified; no head is recorded here, so rows past "none" are expected.
        return {"ok": True}
    return _chain_verdict(False, audit.reason and audit.reason.value, audit.bad_seq)


def _copy_binary(rows: list[list[Any]]) -> bytes:
    out = [b"PGCOPY\n\xff\r\n\x00", struct.pack(">ii", 0, 0)]
    for row in rows:
        out.append(struct.pack(">h", len(row)))
        for column, value in enumerate(row):
            if value is None:
                out.append(struct.pack(">i", -1))
            elif column in (1, 9):
                out.append(struct.pack(">iq", 8, value))
            else:
                data = value.encode("utf-8")
                out.append(struct.pack(">i", len(data)) + data)
    out.append(struct.pack(">h", -1))
    return b"".join(out)


def _walk_fast(rows: list[list[Any]], saga_id: str, anchor: tuple[int, str], *, native: bool):
    verifier = _fastverify.chain_verifier(
        saga_id=saga_id, anchors={saga_id: anchor} if anchor[0] else None, native=native
    )
    try:
        verdicts = verifier.feed(_copy_binary(rows)) + verifier.finish()
    except ValueError:
        return {"ok": False, "refused": True}  # not the archive's rows: refused whole
    assert [v.saga_id for v in verdicts] == [saga_id]
    v = verdicts[0]
    if v.refer:
        return {"ok": False, "refused": True}
    return _chain_verdict(v.ok, v.reason and v.reason.value, v.bad_seq)


def walk_fast_python(rows: list[list[Any]], saga_id: str, anchor: tuple[int, str]) -> Verdict:
    """The archive's bulk verifier, Python twin, over a binary ``COPY`` of the rows."""
    return _walk_fast(rows, saga_id, anchor, native=False)


def walk_fast_native(rows: list[list[Any]], saga_id: str, anchor: tuple[int, str]) -> Verdict:
    """The archive's bulk verifier, compiled."""
    return _walk_fast(rows, saga_id, anchor, native=True)


def walk_audit_native(rows: list[list[Any]], saga_id: str, anchor: tuple[int, str]) -> Verdict:
    """The audit's compiled merge (``sagacity_native.ChainAuditor``) over the rows, with the
    head the archiver would have recorded for them (the last row's seq and hash): a saga it
    judges passes; one it hands back gives the verdict it hands back with it.  A saga's rows
    as the audit streams them never hold another saga's (they are grouped by the column), so
    a walk holding foreign rows is the compiled verifier's alone."""
    if any(r[0] != saga_id for r in rows):
        return walk_fast_native(rows, saga_id, anchor)
    assert _fastverify.NATIVE_AUDITOR is not None
    auditor = _fastverify.NATIVE_AUDITOR(
        anchors={saga_id: anchor} if anchor[0] else {}, failed_rounds=set(), refer=set()
    )
    try:
        auditor.feed(_copy_binary(rows))
        auditor.finish()
    except ValueError:
        return {"ok": False, "refused": True}
    auditor.add_checkpoints([])
    auditor.add_heads([(saga_id, rows[-1][1], rows[-1][11])] if rows else [])
    auditor.add_heads([])
    out, need_checkpoints, need_heads = auditor.take()
    assert (need_checkpoints, need_heads) == (False, False)
    if not rows:
        assert out == ([] if not anchor[0] else [(saga_id, False, None, [], [])])
        return {"ok": True}  # nothing to walk (the Python path judges an anchor alone)
    assert [t[0] for t in out] == [saga_id]
    if out[0][1]:
        return {"ok": True}
    v = _fastverify.batch_verdict(out[0][2], {})
    if v.refer:
        return {"ok": False, "refused": True}
    return _chain_verdict(v.ok, v.reason and v.reason.value, v.bad_seq)


def walk_standalone(rows: list[list[Any]], saga_id: str, anchor: tuple[int, str]) -> Verdict:
    """``verify_bundle.verify_chain`` in-process, on the events a bundle would hold."""
    events = [_event_of_row(r) for r in rows]
    try:
        verify_bundle.verify_chain(saga_id, events, anchor[0], anchor[1])
    except verify_bundle.VerificationError as failure:
        return _chain_verdict(False, failure.reason, failure.seq)
    return {"ok": True}


WALKERS: dict[str, Callable[[list[list[Any]], str, tuple[int, str]], Verdict]] = {
    "reference": walk_reference,
    "audit": walk_audit,
    "fastverify-python": walk_fast_python,
    "fastverify-native": walk_fast_native,
    "audit-native": walk_audit_native,
    "standalone": walk_standalone,
}
NATIVE_WALKERS = {"fastverify-native", "audit-native"}

BREAK_NAMERS = {
    # Every function of the product that names a chain break ("broken_link"), and the walker
    # of this module that runs it (or why none needs to).  Three (issue 33): the reference,
    # the compiled walker and the standalone verifier's copy; the column fast path's Python
    # twin, the audit and replay call the reference, the compiled audit the compiled walker.
    "sagacity/chain/_walk.py:link_break": "reference",
    "consumers/archive/verify_bundle.py:check_link": "standalone",
    "native/src/verify/saga.rs": "fastverify-native",
}
THE_WALKERS = {
    "sagacity/chain/_walk.py",
    "native/src/verify/saga.rs",
    "consumers/archive/verify_bundle.py",
}
BREAK_NAMERS_ELSEWHERE = {
    # Walkers whose input is not a saga's chain, run by their own suites on a real stack.
    # (Ingest judges one event against the archived head with the reference's rule.)
    "consumers/archive/_watch.py:_record_new": (
        "the round log's links (prev_root), not a saga's chain (tests/archive/test_round_log*)"
    ),
}


def _segments(case: dict[str, Any]) -> list[tuple[str, list[list[Any]]]]:
    """The case's rows as each saga's walk: all of them for one saga when the case names it,
    else each run of one saga's rows in stream order."""
    if case["saga_id"] is not None:
        return [(case["saga_id"], case["rows"])]
    out: list[tuple[str, list[list[Any]]]] = []
    for row in case["rows"]:
        if out and out[-1][0] == row[0]:
            out[-1][1].append(row)
        else:
            out.append((row[0], [row]))
    return out


def _expected(verdict: dict[str, Any]) -> Verdict:
    if verdict["refer"]:
        return {"ok": False, "refused": True}
    return _chain_verdict(verdict["ok"], verdict["reason"], verdict["bad_seq"])


def _agrees(got: Verdict, expected: Verdict) -> bool:
    if expected.get("refused"):
        # A row that is not an entry: a walker refuses to read it, or fails the chain there or
        # before; it never passes the chain.
        return not got["ok"]
    return got == expected


@pytest.mark.parametrize("case", sorted(VERDICT_CASES))
@pytest.mark.parametrize("walker", sorted(WALKERS))
def test_every_walker_gives_every_verdict(walker: str, case: str) -> None:
    if walker in NATIVE_WALKERS and not NATIVE:
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not built here")
    spec = VERDICT_CASES[case]
    segments = _segments(spec) or [(spec["saga_id"], [])]
    assert len(segments) == len(spec["verdicts"])
    for (saga_id, rows), verdict in zip(segments, spec["verdicts"], strict=True):
        assert verdict["saga_id"] == saga_id
        seq, anchor_hash = spec["anchors"].get(saga_id, (0, GENESIS_HASH))
        got = WALKERS[walker](rows, saga_id, (seq, anchor_hash))
        assert _agrees(got, _expected(verdict)), (walker, saga_id, got, verdict)


def _negative_chain(case: dict[str, Any]) -> list[dict[str, Any]]:
    """Seq 1 of a valid chain, then the negative entry placed at seq 2 with the hash a writer
    that checks nothing computes: only the rule the entry breaks makes the chain invalid."""
    first = {**NEGATIVE_CASES["nul_in_saga_id"]["entry"]}
    first.update(saga_id="neg-1", event_type="SAGA_OPENED", tool=None, payload=None)
    first["hash"] = verify_bundle.entry_hash(first)
    return [first, case["entry"]]


@pytest.mark.parametrize("case", sorted(NEGATIVE_CASES))
@pytest.mark.parametrize("walker", sorted(WALKERS))
def test_no_walker_passes_a_chain_holding_a_negative_entry(walker: str, case: str) -> None:
    if walker in NATIVE_WALKERS and not NATIVE:
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not built here")
    spec = NEGATIVE_CASES[case]
    entry = spec["entry"]
    chains = [[entry]]
    if entry["hash"] is not None and entry["seq"] == 1 and entry["prev_hash"] == GENESIS_HASH:
        chains.append(_negative_chain(spec))
    for chain in chains:
        if walker != "standalone" and not _row_representable(chain):
            continue  # the archive's columns cannot hold it (a row is text and int64)
        got = WALKERS[walker](_rows_of(chain), "neg-1", (0, GENESIS_HASH))
        assert not got["ok"], (walker, case, got)
        if "reason" in got:
            assert got["reason"] in set(BreakReason), got


def _row_representable(chain: list[dict[str, Any]]) -> bool:
    for e in chain:
        for name in ("saga_id", "event_type", "tool", "payload", "result", "error", "actor"):
            value = e[name]
            if value is not None and not isinstance(value, str):
                return False
            if isinstance(value, str):
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        for name in ("seq", "recorded_at_us"):
            value = e[name]
            if type(value) is not int or not -(2**63) <= value < 2**63:
                return False
        if not isinstance(e["attributes"], dict | None) or not isinstance(e["hash"], str):
            return False
    return True


def test_a_chain_has_three_walkers() -> None:
    """A walker that names a break in a language that has one calls it instead (what the code
    holds is checked by ``test_every_break_namer_is_registered``)."""
    assert {name.split(":")[0] for name in BREAK_NAMERS} == THE_WALKERS


def test_every_break_namer_is_registered() -> None:
    """Every function naming a chain break is one of the walkers run here."""
    found: set[str] = set()
    for top in ("sagacity", "producer", "consumers", "schemas"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if any(p.is_symlink() for p in [path, *path.parents] if ROOT in p.parents):
                continue
            rel = path.relative_to(ROOT).as_posix()
            for scope, function in _functions(ast.parse(path.read_text(encoding="utf-8"))):
                if any(
                    (isinstance(n, ast.Constant) and n.value == "broken_link")
                    or (isinstance(n, ast.Attribute) and n.attr == "BROKEN_LINK")
                    for n in ast.walk(function)
                ):
                    found.add(f"{rel}:{scope}")
    for path in _product_rust_files():
        if '"broken_link"' in path.read_text(encoding="utf-8"):
            found.add(path.relative_to(ROOT).as_posix())
    assert found == set(BREAK_NAMERS) | set(BREAK_NAMERS_ELSEWHERE)
    assert set(BREAK_NAMERS.values()) <= set(WALKERS)


def test_one_set_of_reason_codes() -> None:
    """The chain-break names of every walker and report are the core's :class:`BreakReason`."""
    breaks = {r.value for r in BreakReason}
    assert breaks <= {r.value for r in _audit.AuditReason}
    from sagacity.consumers.archive._ingest import QuarantineReason

    # Ingest refuses one event at a time: its chain findings are the core's names.
    assert breaks - {"foreign_saga", "reordered"} <= {r.value for r in QuarantineReason}
    standalone = set(re.findall(r'"([a-z_]+)"', Path(verify_bundle.__file__).read_text()))
    assert breaks <= standalone
    # The compiled walker names every break; a word it gives that is not one fails where its
    # verdicts are read (``_fastverify.batch_verdict``: ``BreakReason(word)``) on the vectors.
    compiled = (ROOT / "native" / "src" / "verify" / "saga.rs").read_text(encoding="utf-8")
    assert breaks <= set(re.findall(r'"([a-z_]+)"', compiled))


def test_a_break_is_named_in_one_place() -> None:
    """The words of a chain break (:class:`BreakReason`) and of an event the chain refuses
    (:class:`ForkKind`, the acceptance rule's) are written once, in ``sagacity/chain/``: every
    other vocabulary that uses one (the audit's, ingest's quarantine, the auditor's alerts)
    takes its value from there, so the walkers cannot drift apart by a renamed word.  (The
    standalone verifier keeps its copy by design; the compiled walker's words are checked by
    the vectors, its verdicts read through ``BreakReason``.)"""
    words = {r.value for r in BreakReason} | {k.value for k in ForkKind}
    written: dict[str, list[str]] = {}
    for top in ("sagacity", "producer", "consumers", "schemas"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if any(p.is_symlink() for p in [path, *path.parents] if ROOT in p.parents):
                continue
            rel = path.relative_to(ROOT).as_posix()
            if rel == "consumers/archive/verify_bundle.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef):
                    continue
                for statement in node.body:
                    value = statement.value if isinstance(statement, ast.Assign) else None
                    if isinstance(value, ast.Constant) and value.value in words:
                        written.setdefault(value.value, []).append(f"{rel}:{node.name}")
    assert {word: places for word, places in written.items() if len(places) > 1} == {}
    assert {place.split(":")[0] for places in written.values() for place in places} == {
        "sagacity/chain/_walk.py",
        "sagacity/chain/_acceptance.py",
    }


# --- the standalone verifier as auditors run it ------------------------------------------------


def _bundle(directory: Path, saga_id: str, rows: list[list[Any]]) -> Path:
    """A bundle (format 3, no checkpoints) holding ``rows`` as its events."""
    directory.mkdir(parents=True)
    events = [_event_of_row(r) for r in rows]
    data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events).encode("utf-8")
    (directory / "events.jsonl").write_bytes(data)
    head_seq, head_hash = (rows[-1][1], rows[-1][11]) if rows else (0, GENESIS_HASH)
    manifest = {
        "format": "sagacity-audit-bundle/3",
        "saga_id": saga_id,
        "events": len(events),
        "events_sha256": hashlib.sha256(data).hexdigest(),
        "head_seq": head_seq,
        "head_hash": head_hash,
        "anchor": None,
        "canonical_form": "SGC1",
        "checkpoint_form": "SGCR2",
        "checkpoints": [],
        "unsigned": ["exported_at", "public_keys", "archive_verdict"],
    }
    (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    shutil.copy(verify_bundle.__file__, directory / "verify_bundle.py")
    return directory


def run_standalone(directory: Path) -> Verdict:
    """``python -I verify_bundle.py DIR --allow-unsigned`` (the chain alone is judged)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            str(directory / "verify_bundle.py"),
            str(directory),
            "--allow-unsigned",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=directory,
    )
    if proc.returncode == 0:
        return {"ok": True}
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = re.match(r"FAILED: ([a-z_:]+) at seq (\S+): ", proc.stdout)
    assert found is not None, proc.stdout
    if found.group(1).startswith("grammar:") or found.group(1) == "withheld":
        # What the chain says is judged after the chain passed: these vectors are chains, not
        # sagas (the saga grammar has its own, tests/conformance/test_grammar_conformance.py).
        return {"ok": True}
    bad_seq = None if found.group(2) == "None" else int(found.group(2))
    return _chain_verdict(False, found.group(1), bad_seq)


def test_the_standalone_verifier_run_as_auditors_run_it(tmp_path: Path) -> None:
    """Every verdict vector (without a retention anchor, which needs a signed record) and every
    negative entry, as bundles checked by ``python -I verify_bundle.py``."""
    count = 0
    for name, spec in sorted(VERDICT_CASES.items()):
        for (saga_id, rows), verdict in zip(_segments(spec), spec["verdicts"], strict=False):
            if saga_id in spec["anchors"] or not rows:
                continue
            got = run_standalone(_bundle(tmp_path / f"{name}-{saga_id}", saga_id, rows))
            assert _agrees(got, _expected(verdict)), (name, saga_id, got, verdict)
            count += 1
    for name, spec in sorted(NEGATIVE_CASES.items()):
        entry = spec["entry"]
        if entry["hash"] is None or entry["seq"] != 1 or entry["prev_hash"] != GENESIS_HASH:
            continue
        for i, chain in enumerate(([entry], _negative_chain(spec))):
            got = run_standalone(
                _bundle(tmp_path / f"negative-{name}-{i}", "neg-1", _rows_of(chain))
            )
            assert not got["ok"], (name, got)
            assert got["reason"] in set(BreakReason), (name, got)
            count += 1
    assert count >= 30


# --- form 2 (docs/adr/0019-erasure.md) -----------------------------------------------------------


@pytest.mark.parametrize("writer", sorted(WRITERS_V2))
def test_every_v2_writer_reproduces_every_v2_vector(writer: str) -> None:
    """Opened, erased and partly erased entries alike: an erased field hashes the same."""
    _native_or_skip(writer)
    for e in VECTOR_ENTRIES_V2:
        canonical, digest = WRITERS_V2[writer](e)
        if canonical is not None:
            assert canonical.hex() == e["canonical_hex"], (writer, e["saga_id"], e["seq"])
        assert digest == e["hash"], (writer, e["saga_id"], e["seq"])


def test_the_v2_vectors_erase_without_changing_a_hash() -> None:
    opened, erased = (c["entries"] for c in CHAINS_V2["chains"][:2])
    assert [e["hash"] for e in opened] == [e["hash"] for e in erased]
    assert all(e["payload"] is None and not e["salts"] for e in erased)
    data = ("payload", "result", "error")
    assert sum(any(e[n] is not None for n in data) for e in opened) == 5


def test_the_redaction_vectors_commit_to_the_salts_of_redacted_fields() -> None:
    """``redaction`` is a data attribute (docs/adr/0019-erasure.md §5): committed to, so its
    salts can be erased with the payload and every hash stays."""
    opened, erased = (c["entries"] for c in CHAINS_V2["chains"] if c["saga_id"] == "redact-me-4")
    assert [e["hash"] for e in opened] == [e["hash"] for e in erased]
    redacted = [e for e in opened if "redaction" in e["attributes"]]
    assert [e["event_type"] for e in redacted] == ["AWAITING_APPROVAL", "INTENT"]
    for e in redacted:
        assert "redaction" in e["commitments"]
        assert "redaction" in e["salts"]
        assert '"$redacted"' in e["payload"]
        # The commitment, not the salts, is in the canonical form.
        assert e["attributes"]["redaction"].encode().hex() not in e["canonical_hex"]
    assert all("redaction" not in e["attributes"] for e in erased)


@pytest.mark.parametrize("case", sorted(NEGATIVE_CASES_V2))
@pytest.mark.parametrize("writer", sorted(WRITERS_V2))
def test_every_v2_writer_refuses_every_negative_v2_vector(writer: str, case: str) -> None:
    _native_or_skip(writer)
    with pytest.raises(RefusedError):
        WRITERS_V2[writer](NEGATIVE_CASES_V2[case]["entry"])


def test_the_negative_v2_vectors_name_their_reasons() -> None:
    assert {case["reason"] for case in NEGATIVE_V2["cases"]} == set(NEGATIVE_V2["reasons"])


def walk_reference_events(events: list[dict[str, Any]], saga_id: str) -> Verdict:
    """``sagacity.chain.verify`` on the entries ``JournalEntry.from_dict`` makes of events."""
    try:
        entries = [JournalEntry.from_dict(e) for e in events]
    except SerializationError:
        return {"ok": False, "refused": True}
    v = verify(entries, saga_id=saga_id)
    return _chain_verdict(v.ok, v.reason and v.reason.value, v.bad_seq)


def walk_standalone_events(events: list[dict[str, Any]], saga_id: str) -> Verdict:
    """``verify_bundle.verify_chain`` in-process on a bundle's events."""
    try:
        verify_bundle.verify_chain(saga_id, events, 0, GENESIS_HASH)
    except verify_bundle.VerificationError as failure:
        return _chain_verdict(False, failure.reason, failure.seq)
    return {"ok": True}


def _form_rows_of(events: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """The archive's rows of ``events`` at schema 6 on: ``ROW_COLUMNS`` then ``FORM_COLUMNS``
    (form, commitments and salts as JSON text)."""
    return [
        [
            *row,
            e.get("form", 1),
            json.dumps(e.get("commitments") or {}),
            json.dumps(e.get("salts") or {}),
        ]
        for row, e in zip(_rows_of(events), events, strict=True)
    ]


def walk_audit_events(events: list[dict[str, Any]], saga_id: str) -> Verdict:
    """The archive audit's per-saga judgement on the rows of an archive holding chain forms,
    as ``iter_audits`` makes it: the column check for form 1 (it must never pass a chain the
    reference does not), every saga holding a form-2 row by the reference path."""
    rows = _form_rows_of(events)
    head = (
        None
        if any(r[12] != 1 for r in rows)
        else _columncheck.verified_head(
            [r[:12] for r in rows], after_seq=0, after_hash=GENESIS_HASH
        )
    )
    try:
        entries = [entry_of_row(r, forms=True) for r in rows]
    except SerializationError:
        assert head is None, "the audit's column check passed rows that are not entries"
        return {"ok": False, "refused": True}
    audit = _judging.judge(saga_id, entries, anchor=None, recorded_head=None, keys={})
    if head is not None:
        assert (head[0], head[1]) == (audit.head_seq, audit.head_hash)
    if audit.reason is _audit.AuditReason.BEYOND_HEAD or audit.ok:
        return {"ok": True}
    return _chain_verdict(False, audit.reason and audit.reason.value, audit.bad_seq)


def _streamed_rows_of(events: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """The rows the audit's binary ``COPY`` streams from an archive holding chain forms
    (``chain_rows(forms_only_first=True)``): a form-2 row's previous hash as NULL."""
    return [[*r[:10], r[10] if r[12] == 1 else None, r[11]] for r in _form_rows_of(events)]


WALKERS_V2: dict[str, Callable[[list[dict[str, Any]], str], Verdict]] = {
    # The walkers of form-2 chains, over events.  The archive's bulk verifier (_fastverify on
    # both paths) hashes form 1 only: it refers every form-2 chain to the audit's reference
    # path (test_the_bulk_verifier_refers_every_v2_chain).
    "reference": walk_reference_events,
    "audit": walk_audit_events,
    "standalone": walk_standalone_events,
}


@pytest.mark.parametrize("case", sorted(VERDICT_CASES_V2))
@pytest.mark.parametrize("walker", ["fastverify-native", "fastverify-python"])
def test_the_bulk_verifier_refers_every_v2_chain(walker: str, case: str) -> None:
    """Every form-2 verdict vector, as the audit streams it, is left to the reference path
    (which gives the vector's verdict: test_every_v2_walker_gives_every_v2_verdict)."""
    if walker in NATIVE_WALKERS and not NATIVE:
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not built here")
    spec = VERDICT_CASES_V2[case]
    rows = _streamed_rows_of(spec["events"])
    assert any(r[10] is None for r in rows)
    got = WALKERS[walker](rows, spec["saga_id"], (0, GENESIS_HASH))
    assert got == {"ok": False, "refused": True}, (walker, case, got)


@pytest.mark.parametrize("case", sorted(VERDICT_CASES_V2))
@pytest.mark.parametrize("walker", sorted(WALKERS_V2))
def test_every_v2_walker_gives_every_v2_verdict(walker: str, case: str) -> None:
    spec = VERDICT_CASES_V2[case]
    got = WALKERS_V2[walker](spec["events"], spec["saga_id"])
    assert got == _chain_verdict(**spec["verdict"]), (walker, case, got)


@pytest.mark.parametrize("case", sorted(NEGATIVE_CASES_V2))
@pytest.mark.parametrize("walker", sorted(WALKERS_V2))
def test_no_v2_walker_passes_a_chain_holding_a_negative_v2_entry(walker: str, case: str) -> None:
    """Seq 1 of the vectors' saga, then the negative entry where its unaltered twin was."""
    first = {k: v for k, v in VECTOR_ENTRIES_V2[0].items() if k != "canonical_hex"}
    entry = NEGATIVE_CASES_V2[case]["entry"]
    assert entry["seq"] == 2 or entry["seq"] == 3
    chain = [first] if entry["seq"] == 2 else [first, VECTOR_ENTRIES_V2[1]]
    chain = [{k: v for k, v in e.items() if k != "canonical_hex"} for e in chain]
    got = WALKERS_V2[walker]([*chain, entry], first["saga_id"])
    assert not got["ok"], (walker, case, got)
    if "reason" in got:
        assert got["reason"] == "edited", got


def test_the_standalone_verifier_run_as_auditors_run_it_on_v2(tmp_path: Path) -> None:
    """Every form-2 verdict vector as a bundle (canonical form SGC2) checked by
    ``python -I verify_bundle.py``."""
    for name, spec in sorted(VERDICT_CASES_V2.items()):
        directory = tmp_path / name
        events = spec["events"]
        rows = _rows_of(events)
        _bundle(directory, spec["saga_id"], rows)
        # The bundle holds the events as exported, form-2 fields included.
        data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events).encode("utf-8")
        (directory / "events.jsonl").write_bytes(data)
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
        manifest.update(
            events_sha256=hashlib.sha256(data).hexdigest(),
            canonical_form="SGC2",
            head_seq=events[-1]["seq"],
            head_hash=events[-1]["hash"],
        )
        (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        got = run_standalone(directory)
        assert got == _chain_verdict(**spec["verdict"]), (name, got)


def test_the_standalone_verifier_reports_the_erased_fields(tmp_path: Path) -> None:
    """An erased saga passes and the verifier names each seq's erased fields (the erased saga
    of the grammar vectors: the verdict vectors' chains are no sagas and record no ERASED, so
    their erased fields are listed in-process)."""
    grammar = json.loads((VECTORS / "grammar-v1.json").read_text(encoding="utf-8"))
    case = next(c for c in grammar["cases"] if c["name"] == "valid_erased")
    events = case["events"]
    directory = tmp_path / "erased"
    _bundle(directory, case["saga_id"], _rows_of(events))
    data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events).encode("utf-8")
    (directory / "events.jsonl").write_bytes(data)
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    manifest.update(events_sha256=hashlib.sha256(data).hexdigest(), canonical_form="SGC2")
    (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            str(directory / "verify_bundle.py"),
            str(directory),
            "--allow-unsigned",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=directory,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "erased (verified by their commitments, the data withheld): seq 2: payload; "
        "seq 3: result; seq 4: result"
    ) in proc.stdout
    partly = verify_bundle.erased_fields(VERDICT_CASES_V2["partly_erased"]["events"])
    assert partly[0] == (2, ["payload"])
    erased = verify_bundle.erased_fields(VERDICT_CASES_V2["erased"]["events"])
    assert erased[:2] == [(2, ["payload"]), (3, ["result", "undo_arguments"])]
    intact = VERDICT_CASES_V2["intact"]["events"]
    assert verify_bundle.erased_fields(intact) == []
