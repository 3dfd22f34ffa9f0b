"""The canonical form: vectors, an independent re-implementation from the ADR, the ADR example."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from sagacity import GENESIS_HASH, JournalEntry, verify
from sagacity.chain import canonical_bytes, compute_hash

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests/vectors/chain-v1.json").read_text(encoding="utf-8"))
ADR = (ROOT / "docs/adr/0002-hash-chain.md").read_text(encoding="utf-8")


def adr_canonical(entry: dict[str, Any]) -> bytes:
    """C(entry) written from the ADR's text alone, as another language's verifier would."""

    def f(value: bytes | None) -> bytes:
        return b"\xff\xff\xff\xff" if value is None else struct.pack(">I", len(value)) + value

    def text(value: str | None) -> bytes:
        return f(None if value is None else value.encode("utf-8"))

    attributes = sorted((k.encode(), v.encode()) for k, v in entry["attributes"].items())
    return b"".join(
        [
            b"SGC1",
            text(entry["saga_id"]),
            f(struct.pack(">q", entry["seq"])),
            text(entry["event_type"]),
            text(entry["tool"]),
            text(entry["payload"]),
            text(entry["result"]),
            text(entry["error"]),
            text(entry["actor"]),
            f(struct.pack(">q", entry["recorded_at_us"])),
            struct.pack(">I", len(attributes)),
            *(f(k) + f(v) for k, v in attributes),
        ]
    )


ENTRIES = [
    pytest.param(entry, id=f"{chain['saga_id']}#{entry['seq']}")
    for chain in VECTORS["chains"]
    for entry in chain["entries"]
]


def _fields(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "canonical_hex"}


def test_vectors_cover_every_field_kind() -> None:
    entries = [e for chain in VECTORS["chains"] for e in chain["entries"]]
    for name in ("tool", "payload", "result", "error", "actor"):
        assert any(e[name] is None for e in entries), f"no null {name}"
        assert any(e[name] == "" for e in entries), f"no empty {name}"
    assert any(not e["attributes"] for e in entries)
    assert any(len(e["attributes"]) > 3 for e in entries)
    assert any(any(ord(c) > 0xFFFF for c in e["saga_id"]) for e in entries)
    assert any(e["recorded_at_us"] < 0 for e in entries)
    assert VECTORS["genesis_hash"] == GENESIS_HASH


@pytest.mark.parametrize("entry", ENTRIES)
def test_code_reproduces_each_vector(entry: dict[str, Any]) -> None:
    parsed = JournalEntry.from_dict(_fields(entry))
    assert canonical_bytes(parsed, seq=parsed.seq).hex() == entry["canonical_hex"]
    assert compute_hash(entry["prev_hash"], parsed, seq=parsed.seq) == entry["hash"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_implementation_from_the_adr_reproduces_each_vector(entry: dict[str, Any]) -> None:
    canonical = adr_canonical(entry)
    assert canonical.hex() == entry["canonical_hex"]
    digest = hashlib.sha256(bytes.fromhex(entry["prev_hash"]) + canonical).hexdigest()
    assert digest == entry["hash"]


@pytest.mark.parametrize("chain", VECTORS["chains"], ids=lambda c: c["saga_id"])
def test_each_vector_chain_verifies(chain: dict[str, Any]) -> None:
    entries = [JournalEntry.from_dict(_fields(e)) for e in chain["entries"]]
    assert entries[0].prev_hash == GENESIS_HASH
    verdict = verify(entries)
    assert verdict.ok
    assert verdict.head_hash == chain["entries"][-1]["hash"]


def test_the_adr_worked_example_matches_the_code() -> None:
    section = ADR.split("## Worked example", 1)[1]
    block = section.split("```", 2)[1]
    # Each line: hex tokens, then (after a wide gap) what they are.
    hex_text = "".join(
        re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].replace(" ", "")
        for line in block.strip().splitlines()
    )
    assert re.fullmatch(r"[0-9a-f]+", hex_text)
    expected_hash = re.search(r"hash_1 = .*?= ([0-9a-f]{64})", section)
    assert expected_hash is not None
    example = {
        "saga_id": "s-1",
        "seq": 1,
        "event_type": "APPROVED",
        "tool": None,
        "payload": "",
        "result": None,
        "error": None,
        "actor": "é",
        "attributes": {"ref_seq": "2"},
        "recorded_at_us": 1,
        "prev_hash": GENESIS_HASH,
        "hash": expected_hash.group(1),
    }
    entry = JournalEntry.from_dict(example)
    assert canonical_bytes(entry, seq=1).hex() == hex_text
    assert compute_hash(GENESIS_HASH, entry, seq=1) == expected_hash.group(1)
    assert adr_canonical(example).hex() == hex_text
