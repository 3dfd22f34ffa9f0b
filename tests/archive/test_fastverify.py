"""The bulk chain verifier: compiled and Python twins agree, verdict for verdict, with the
reference (``sagacity.chain.verify``) on the shared vectors, whatever the block boundaries."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity.chain import _fastverify, link, verify
from sagacity.chain._fastverify import BatchVerdict, chain_verifier
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType
from sagacity.postgres.archive import entry_of_row

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests/vectors/verdicts-v1.json").read_text(encoding="utf-8"))
CASES = {case["name"]: case for case in VECTORS["cases"]}
IMPLEMENTATIONS = ["python", "native"]


def copy_binary(rows: list[list[Any]], *, header_extension: bytes = b"") -> bytes:
    """``rows`` as PostgreSQL's binary ``COPY`` of ``ROW_COLUMNS`` sends them."""
    out = [b"PGCOPY\n\xff\r\n\x00", struct.pack(">ii", 0, len(header_extension)), header_extension]
    for row in rows:
        out.append(struct.pack(">h", len(row)))
        for column, value in enumerate(row):
            if value is None:
                out.append(struct.pack(">i", -1))
            elif isinstance(value, bytes):
                out.append(struct.pack(">i", len(value)) + value)
            elif column in (1, 9):
                out.append(struct.pack(">iq", 8, value))
            else:
                data = value.encode("utf-8")
                out.append(struct.pack(">i", len(data)) + data)
    out.append(struct.pack(">h", -1))
    return b"".join(out)


def as_dict(verdict: BatchVerdict) -> dict[str, Any]:
    out: dict[str, Any] = {"saga_id": verdict.saga_id, "ok": verdict.ok, "refer": verdict.refer}
    out["events"] = verdict.events
    if not verdict.refer:
        out.update(
            length=verdict.length,
            head_seq=verdict.head_seq,
            head_hash=verdict.head_hash,
            bad_seq=verdict.bad_seq,
            reason=None if verdict.reason is None else verdict.reason.value,
            detail=verdict.detail,
        )
    return out


def verdicts_of(
    data: bytes, *, native: bool, chunk: int | None = None, **options: Any
) -> list[BatchVerdict]:
    verifier = chain_verifier(native=native, **options)
    verdicts: list[BatchVerdict] = []
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        verdicts += verifier.feed(data[i : i + step])
    return verdicts + verifier.finish()


def run(data: bytes, *, native: bool, chunk: int | None = None, **options: Any) -> list[dict]:
    return [as_dict(v) for v in verdicts_of(data, native=native, chunk=chunk, **options)]


def options_of(case: dict[str, Any]) -> dict[str, Any]:
    anchors = {saga: (seq, h) for saga, (seq, h) in case["anchors"].items()}
    return {"saga_id": case["saga_id"], "anchors": anchors}


def test_the_compiled_verifier_is_built_where_cargo_is() -> None:
    """Where cargo is (and ``SAGACITY_NATIVE`` is not 0) the compiled twin must be there, so
    that a test run never checks only the Python one by accident."""
    wanted = os.environ.get("SAGACITY_NATIVE", "1") != "0"
    cargo = shutil.which("cargo") or (Path.home() / ".cargo" / "bin" / "cargo").exists()
    if wanted and cargo:
        assert _fastverify.NATIVE, "cargo is here but sagacity-native (with the verifier) is not"
    if not wanted:
        assert not _fastverify.NATIVE


def _native_or_skip(implementation: str) -> bool:
    native = implementation == "native"
    if native and _fastverify._NATIVE_VERIFIER is None:
        # The test above fails where the module should be; elsewhere only Python is checked.
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not installed")
    return native


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_vectors(name: str, implementation: str) -> None:
    native = _native_or_skip(implementation)
    case = CASES[name]
    data = copy_binary(case["rows"])
    assert run(data, native=native, **options_of(case)) == case["verdicts"]
    # Block boundaries anywhere (inside the header, a length, a value) change nothing.
    for chunk in (1, 7, 64):
        assert run(data, native=native, chunk=chunk, **options_of(case)) == case["verdicts"]
    # The verified links' hashes, by seq, are the rows' (what checkpoints are compared with).
    for verdict in verdicts_of(data, native=native, **options_of(case)):
        if verdict.refer:
            continue
        hashes = verdict.hashes_by_seq()
        assert dict(hashes) == {
            row[1]: row[11]
            for row in case["rows"]
            if (case["saga_id"] or row[0]) == verdict.saga_id
            and verdict.first_seq <= row[1] <= verdict.head_seq
        }
        assert verdict.head_seq + 1 not in hashes
        assert verdict.first_seq - 1 not in hashes


@pytest.mark.parametrize("name", sorted(CASES))
def test_vectors_are_the_reference_verdicts(name: str) -> None:
    """Each vector's verdict is ``sagacity.chain.verify``'s on the entries its rows hold; a
    ``refer`` saga is one the reference does not pass either (or cannot even build)."""
    case = CASES[name]
    groups: dict[str, list[list[Any]]] = {}
    for row in case["rows"]:
        groups.setdefault(case["saga_id"] or row[0], []).append(row)
    expected = {v["saga_id"]: v for v in case["verdicts"]}
    for saga, rows in groups.items():
        after_seq, after_hash = case["anchors"].get(saga, (0, GENESIS_HASH))
        try:
            entries = [entry_of_row(r) for r in rows]
        except Exception:
            assert expected[saga]["refer"]
            continue
        verdict = verify(entries, saga_id=saga, after_seq=after_seq, after_hash=after_hash)
        if expected[saga]["refer"]:
            assert not verdict.ok
            continue
        assert expected[saga] == {
            "saga_id": saga,
            "ok": verdict.ok,
            "refer": False,
            "events": len(rows),
            "length": verdict.length,
            "head_seq": verdict.head_seq,
            "head_hash": verdict.head_hash,
            "bad_seq": verdict.bad_seq,
            "reason": None if verdict.reason is None else verdict.reason.value,
            "detail": verdict.detail,
        }


def test_vectors_cover_every_break_reason() -> None:
    reasons = {v.get("reason") for case in CASES.values() for v in case["verdicts"]}
    assert reasons >= {
        "gap",
        "reordered",
        "edited",
        "wrong_genesis",
        "broken_link",
        "foreign_saga",
        None,
    }


def test_twins_agree_on_random_damage() -> None:
    """Random deletions, swaps, duplicates and byte edits of a stream of valid rows: the
    compiled and the Python verifier give the same verdicts, and the reference agrees."""
    if _fastverify._NATIVE_VERIFIER is None:
        pytest.skip("the compiled module is off (SAGACITY_NATIVE=0) or not installed")
    rng = random.Random(22)
    intact = CASES["intact"]["rows"] + CASES["first_of_two_broken"]["rows"][3:]
    by_saga: dict[str, list[list[Any]]] = {}
    for row in intact:
        by_saga.setdefault(row[0], []).append(row)
    for _ in range(200):
        rows: list[list[Any]] = []
        for saga in sorted(by_saga, key=lambda s: s.encode()):
            chain = [list(r) for r in by_saga[saga]]
            damage = rng.randrange(5)
            i = rng.randrange(len(chain))
            if damage == 0 and len(chain) > 1:
                del chain[i]
            elif damage == 1 and len(chain) > 1:
                j = rng.randrange(len(chain))
                chain[i], chain[j] = chain[j], chain[i]
            elif damage == 2:
                chain.insert(i, list(chain[i]))
            elif damage == 3:
                column = rng.choice([2, 3, 4, 5, 7, 9, 10, 11])
                value = chain[i][column]
                if isinstance(value, int):
                    chain[i][column] = value + 1
                elif value:
                    chain[i][column] = value[:-1] + ("0" if value[-1] != "0" else "1")
                else:
                    chain[i][column] = "x"
            rows += chain
        data = copy_binary(rows)
        python = run(data, native=False)
        assert run(data, native=True, chunk=rng.randrange(1, 300)) == python
        assert [v.digests for v in verdicts_of(data, native=True)] == [
            v.digests for v in verdicts_of(data, native=False)
        ]
        for verdict in python:
            saga_rows = [r for r in rows if r[0] == verdict["saga_id"]]
            reference = verify([entry_of_row(r) for r in saga_rows], saga_id=verdict["saga_id"])
            assert not verdict["refer"]
            assert (verdict["ok"], verdict["reason"], verdict["bad_seq"], verdict["detail"]) == (
                reference.ok,
                None if reference.reason is None else reference.reason.value,
                reference.bad_seq,
                reference.detail,
            )


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_bad_streams_are_refused_with_a_reason(implementation: str) -> None:
    native = _native_or_skip(implementation)
    rows = CASES["intact"]["rows"]
    with pytest.raises(ValueError, match="signature is missing"):
        run(b"saga_id\tseq\n" * 3, native=native)
    with pytest.raises(ValueError, match="not in chain order"):
        run(copy_binary([rows[5], rows[0]]), native=native)
    with pytest.raises(ValueError, match="not in chain order"):
        run(copy_binary([rows[0], rows[5], rows[1]]), native=native)
    with pytest.raises(ValueError, match="ends before its trailer"):
        run(copy_binary(rows)[:-5], native=native)
    with pytest.raises(ValueError, match="3 columns, not 12"):
        run(copy_binary([rows[0][:3]]), native=native)
    with pytest.raises(ValueError, match="not a bigint"):
        run(copy_binary([[*rows[0][:9], b"1234", *rows[0][10:]]]), native=native)
    with pytest.raises(ValueError, match="after the trailer"):
        run(copy_binary(rows) + b"\x00", native=native)
    # A header extension is skipped, as the format says.
    assert run(copy_binary(rows, header_extension=b"ext"), native=native) == run(
        copy_binary(rows), native=native
    )


def test_native_off_is_refused_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fastverify, "_NATIVE_VERIFIER", None)
    with pytest.raises(RuntimeError, match="not installed"):
        chain_verifier(native=True)
    assert run(copy_binary(CASES["intact"]["rows"]), native=False)[0]["ok"]


_texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
_drafts = st.builds(
    EntryDraft,
    saga_id=st.just("s"),
    event_type=st.sampled_from(list(EventType)),
    tool=st.none() | _texts,
    payload=st.none() | _texts,
    result=st.none() | _texts,
    error=st.none() | _texts,
    actor=st.none() | _texts,
    attributes=st.dictionaries(_texts, _texts, max_size=4),
    recorded_at_us=st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(_drafts, min_size=1, max_size=5),
    ascii_only=st.booleans(),
    cut=st.integers(min_value=1, max_value=97),
)
def test_twins_rebuild_any_entry_from_its_row(
    items: list[EntryDraft], ascii_only: bool, cut: int
) -> None:
    """Any text in any field (attributes escaped as JSON either way, ``\\uXXXX`` pairs for
    4-byte characters included) is rebuilt to the bytes that were hashed: the chain passes."""
    prev, rows = GENESIS_HASH, []
    for seq, draft in enumerate(items, start=1):
        entry = link(draft, seq=seq, prev_hash=prev)
        prev = entry.hash
        attributes = json.dumps(dict(entry.attributes), ensure_ascii=ascii_only)
        rows.append(
            [
                *(entry.saga_id, entry.seq, entry.event_type.value, entry.tool, entry.payload),
                *(entry.result, entry.error, entry.actor, attributes, entry.recorded_at_us),
                *(entry.prev_hash, entry.hash),
            ]
        )
    data = copy_binary(rows)
    expected = [
        {
            "saga_id": "s",
            "ok": True,
            "refer": False,
            "events": len(items),
            "length": len(items),
            "head_seq": len(items),
            "head_hash": prev,
            "bad_seq": None,
            "reason": None,
            "detail": None,
        }
    ]
    assert run(data, native=False, chunk=cut) == expected
    if _fastverify._NATIVE_VERIFIER is not None:
        assert run(data, native=True, chunk=cut) == expected
