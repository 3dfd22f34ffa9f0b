#!/usr/bin/env python3
"""Verify a Sagacity audit bundle with nothing but the Python standard library.

Usage::

    python3 verify_bundle.py [BUNDLE_DIR] [--public-key HEX] [--operator-public-key HEX]
                             [--allow-unsigned] [--allow-unopened]

Checks, in order (docs/adr/0017-audit-coverage.md), stopping at the first failure:

1. the bundle's format is one this verifier reads (otherwise exit 2);
2. every manifest field is either checked below or listed by the manifest as ``unsigned``
   (``bundle_altered``);
3. ``events.jsonl`` is the file the manifest describes: its SHA-256 and line count, and every
   event has only the fields its hash covers (``bundle_altered``);
4. the saga's hash chain (docs/adr/0002-hash-chain.md: canonical form ``SGC1``, SHA-256 links
   from the genesis hash or the retention anchor): ``foreign_saga``, ``edited``,
   ``wrong_genesis``, ``gap``, ``reordered``, ``broken_link``;
5. the manifest's head is the chain's head (``truncated`` when the manifest's is higher,
   ``head_mismatch`` otherwise);
5a. a retention anchor the chain starts from: only signed fields (``bundle_altered``), a
   retention record (``SGRT1``, docs/adr/0015-round-log.md) signed by the trusted key
   (``unknown_key``, ``forged_anchor``) whose anchors' Merkle root the anchor's inclusion proof
   leads to (``forged_anchor``; the root and every node 32 bytes);
6. every checkpoint, in seq order: only the fields its signature covers, and the values its
   round signed (``bundle_altered``); a valid Ed25519 signature (RFC 8032) by the trusted key
   (``unknown_key``, ``bad_signature``) — over the checkpoint's signing round (``SGCR2``,
   docs/adr/0015-round-log.md: the root of the log of every head signed so far, the leaf at
   the round's first leaf plus its index; or ``SGCR1``, docs/adr/0012-checkpoint-rounds.md),
   whose Merkle root the checkpoint's inclusion proof must lead to (RFC 9162 section
   2.1.3.2; the root and every node 64 hex characters, 32 bytes, or the proof fails), or
   over the checkpoint itself (``SGCP1``,
   docs/adr/0006-archive-and-checkpoints.md); a seq the chain reaches (``truncated``) and a
   hash equal to the chain's at that seq (``checkpoint_mismatch``);
6a. what the chain says (docs/adr/0005-saga-core-events.md): no event the saga's state machine
   rules out (``grammar:*``, e.g. ``grammar:executed_without_intent``: an ``EXECUTED`` with no
   ``INTENT``), no data withheld (``withheld``: a form-2 event's field present only as its
   commitment while the chain records no ``ERASED`` that counts) unless ``--allow-unopened``
   is given (a bundle exported from an archive that stores sealed events' commitments only),
   and no ``ERASED`` that does not count (``forged_erasure``): an ``ERASED`` counts when its
   operator signature (``SGCO1``, docs/adr/0027-operator-signatures.md) verifies under the key
   given with ``--operator-public-key`` (repeatable, or comma-separated); without that option
   one with a well-formed operator signature is counted unverified (the output says so) and
   one without never counts;
7. a checkpoint covers the head (``unsigned``), unless ``--allow-unsigned`` is given: then the
   events no checkpoint covers are named in the output, and the bundle is accepted.

Pass ``--public-key`` with the archive's published key: without it the key in the manifest is
used, which proves only that the bundle is self-consistent.  The manifest's ``unsigned``
fields (the export time, the archive's own verdict, the keys it lists) are shown for
information and prove nothing.

Exit status: 0 verified, 1 verification failed (the first failure is printed with its seq and
reason), 2 the bundle cannot be read.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path
from typing import Any

GENESIS_HASH = "0" * 64

FORMATS = ("sagacity-audit-bundle/2", "sagacity-audit-bundle/3")
"""Bundle formats this verifier reads.  Version 3 lists its unsigned fields (``unsigned``);
version 2 did not, and its unsigned fields were those of :data:`UNSIGNED_FIELDS`."""

CHECKED_FIELDS = frozenset(
    {
        "format",  # must be one of FORMATS
        "canonical_form",  # SGC1, or SGC2 (docs/adr/0019-erasure.md): each event names its form
        "checkpoint_form",  # a label: each checkpoint is checked by its own shape
        "saga_id",  # signed: in every checkpoint and every event's hash
        "events",  # the number of events in events.jsonl
        "events_sha256",  # the SHA-256 of events.jsonl (the events are signed by the chain)
        "head_seq",  # signed: a checkpoint must cover the head
        "head_hash",  # signed: idem
        "checkpoints",  # signed: each through its round or by its own signature
        "anchor",  # signed: through its retention record (docs/adr/0015-round-log.md)
        "unsigned",  # the list of the fields below
    }
)
"""Manifest fields this verifier checks against the events and the signatures."""

UNSIGNED_FIELDS = ("archive_verdict", "exported_at", "public_keys")
"""Manifest fields no signature covers, shown for information: the archive's own verdict, the
export time and the keys the archive lists (pin the published key instead)."""

EVENT_FIELDS = frozenset(
    {
        "form",
        "commitments",
        "salts",
        "saga_id",
        "seq",
        "event_type",
        "tool",
        "payload",
        "result",
        "error",
        "actor",
        "attributes",
        "recorded_at_us",
        "prev_hash",
        "hash",
    }
)
"""The fields of an event in events.jsonl: every one is covered by its hash."""

HEAD_CHECKPOINT_FIELDS = frozenset({"seq", "hash", "signed_at_us", "key_id", "signature"})
"""A per-head checkpoint (``SGCP1``): every field is signed (the signature itself aside)."""

ROUND_CHECKPOINT_FIELDS = frozenset(
    {"seq", "hash", "signed_at_us", "key_id", "round", "leaf_index", "proof"}
)
"""A checkpoint of a signing round: ``seq`` and ``hash`` are its signed leaf; ``leaf_index``
and ``proof`` lead it to the round's root; ``signed_at_us`` and ``key_id`` must be the
round's, which its signature covers."""

ROUND_FIELDS = frozenset(
    {
        "round_id",
        "format",
        "leaf_count",
        "tree_size",
        "root",
        "prev_root",
        "signed_at_us",
        "key_id",
        "signature",
    }
)
"""A signing round (``SGCR1``, or ``SGCR2`` with its ``tree_size``): every field is signed
(the format by the message's magic; the signature itself aside)."""

ANCHOR_FIELDS = frozenset({"seq", "hash", "record", "leaf_index", "proof"})
"""A retention anchor: ``seq`` and ``hash`` are its signed leaf; ``leaf_index`` and ``proof``
lead it to its record's anchors root."""

RECORD_FIELDS = frozenset(
    {
        "partition_name",
        "range_from_us",
        "range_to_us",
        "row_count",
        "export_sha256",
        "anchor_count",
        "anchors_root",
        "signed_at_us",
        "key_id",
        "signature",
    }
)
"""A retention record (``SGRT1``): every field is signed (the signature itself aside)."""

# --- the canonical form (docs/adr/0002-hash-chain.md) -----------------------------------------


def _field(value: bytes | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    return struct.pack(">I", len(value)) + value


def _text(value: Any, *, name: bool = False) -> bytes:
    # The text rules: Unicode scalar values (encode refuses a lone surrogate), no U+0000; a
    # name (saga id, event type) is not null and not empty.
    if value is None and not name:
        return _field(None)
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {type(value).__name__}")
    if "\x00" in value:
        raise ValueError("text must not contain U+0000")
    if name and not value:
        raise ValueError("a saga id or event type must not be empty")
    return _field(value.encode("utf-8"))


def _int(value: Any, *, low: int = -(2**63)) -> bytes:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("expected an integer")
    if not low <= value < 2**63:
        raise ValueError(f"{value} is out of range")
    return _field(struct.pack(">q", value))


DATA_ATTRIBUTES = ("note", "redaction", "undo_arguments")


def commitment(name: str, salt_hex: Any, value: str) -> bytes:
    """``K(name, value)`` = SHA-256(``"SGK1" || F(name) || F(salt) || F(utf8(value))``)."""
    if not isinstance(salt_hex, str):
        raise ValueError(f"the salt of {name} is not hex")
    salt = bytes.fromhex(salt_hex)
    if len(salt) != 32:
        raise ValueError(f"the salt of {name} must be 32 bytes")
    preimage = b"SGK1" + _field(name.encode("utf-8")) + _field(salt) + _text(value)
    return hashlib.sha256(preimage).digest()


def committed(name: str, value: Any, event: dict[str, Any]) -> bytes | None:
    """A form-2 data field as hashed (docs/adr/0019-erasure.md §1): the commitment its opening
    (value and salt) makes, which must equal a stored one; the stored one when the value was
    erased; ``None`` for a null field.  ``ValueError`` for a value without its salt, a salt
    without its value, or an opening that does not match its commitment."""
    commitments = event.get("commitments") or {}
    salts = event.get("salts") or {}
    if not isinstance(commitments, dict) or not isinstance(salts, dict):
        raise ValueError("commitments and salts must be objects")
    stored, salt = commitments.get(name), salts.get(name)
    if stored is not None and (not isinstance(stored, str) or len(bytes.fromhex(stored)) != 32):
        raise ValueError(f"the commitment of {name} must be 32 bytes of hex")
    if value is None:
        if salt is not None:
            raise ValueError(f"{name} has a salt but no value")
        return None if stored is None else bytes.fromhex(stored)
    if salt is None:
        raise ValueError(f"{name} has a value but no salt")
    computed = commitment(name, salt, value)
    if stored is not None and bytes.fromhex(stored) != computed:
        raise ValueError(f"the opening of {name} does not match its commitment")
    return computed


def canonical(event: dict[str, Any]) -> bytes:
    """``C(entry)``: magic ``SGC1`` then length-prefixed fields and the sorted attribute map
    (form 2, ``SGC2``: the data fields and data attributes as their commitments); ``ValueError``
    for an event that breaks a rule of the form (tests/vectors/negative-v1.json, -v2.json)."""
    form = event.get("form", 1)
    if form == 2:
        return canonical_v2(event)
    if form != 1 or "commitments" in event or "salts" in event:
        raise ValueError(f"unknown canonical form {form!r}")
    attributes = event.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise ValueError("attributes must be an object")
    items = []
    for key, value in attributes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError("attribute keys and values must be text")
        if "\x00" in key or "\x00" in value:
            raise ValueError("text must not contain U+0000")
        items.append((key.encode("utf-8"), value.encode("utf-8")))
    items.sort()
    out = [
        b"SGC1",
        _text(event["saga_id"], name=True),
        _int(event["seq"], low=1),
        _text(event["event_type"], name=True),
        _text(event.get("tool")),
        _text(event.get("payload")),
        _text(event.get("result")),
        _text(event.get("error")),
        _text(event.get("actor")),
        _int(event["recorded_at_us"]),
        struct.pack(">I", len(items)),
    ]
    for key, value in items:
        out.append(_field(key))
        out.append(_field(value))
    return b"".join(out)


def canonical_v2(event: dict[str, Any]) -> bytes:
    """``C2(entry)`` (docs/adr/0019-erasure.md §1)."""
    attributes = event.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise ValueError("attributes must be an object")
    commitments = event.get("commitments") or {}
    salts = event.get("salts") or {}
    if not isinstance(commitments, dict) or not isinstance(salts, dict):
        raise ValueError("commitments and salts must be objects")
    for name in (*commitments, *salts):
        if name not in ("payload", "result", "error", *DATA_ATTRIBUTES):
            raise ValueError(f"{name!r} is not a data field")
    items = []
    for key, value in attributes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError("attribute keys and values must be text")
        if "\x00" in key or "\x00" in value:
            raise ValueError("text must not contain U+0000")
        if key in DATA_ATTRIBUTES:
            items.append((key.encode("utf-8"), committed(key, value, event)))
        else:
            items.append((key.encode("utf-8"), value.encode("utf-8")))
    for key in DATA_ATTRIBUTES:
        if key not in attributes and (key in commitments or key in salts):
            items.append((key.encode("utf-8"), committed(key, None, event)))
    items.sort()
    out = [b"SGC2", _text(event["saga_id"], name=True), _int(event["seq"], low=1)]
    out.append(_text(event["event_type"], name=True))
    out.append(_text(event.get("tool")))
    for name in ("payload", "result", "error"):
        value = event.get(name)
        if value is not None:
            _text(value)  # the text rules hold for an opened value too
        out.append(_field(committed(name, value, event)))
    out += [_text(event.get("actor")), _int(event["recorded_at_us"]), struct.pack(">I", len(items))]
    for key, raw in items:
        out.append(_field(key))
        out.append(_field(raw))
    return b"".join(out)


def entry_hash(event: dict[str, Any]) -> str:
    """``SHA-256(bytes.fromhex(prev_hash) || C(entry))`` as lowercase hex."""
    prev = bytes.fromhex(event["prev_hash"])
    if len(prev) != 32:
        raise ValueError("previous hash must be 32 bytes")
    return hashlib.sha256(prev + canonical(event)).hexdigest()


# --- Ed25519 verification (RFC 8032, section 5.1), written out for auditability ----------------

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493  # the group order
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)

Point = tuple[int, int, int, int]  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z


def _add(a: Point, b: Point) -> Point:
    # RFC 8032 5.1.4, addition in extended homogeneous coordinates (a = -1 twisted Edwards).
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % _P
    bb = (y1 + x1) * (y2 + x2) % _P
    cc = 2 * t1 * t2 * _D % _P
    dd = 2 * z1 * z2 % _P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _scalar_mul(k: int, point: Point) -> Point:
    result: Point = (0, 1, 1, 0)  # the neutral element
    while k:
        if k & 1:
            result = _add(result, point)
        point = _add(point, point)
        k >>= 1
    return result


def _same(a: Point, b: Point) -> bool:
    # Projective equality: x1/z1 == x2/z2 and y1/z1 == y2/z2.
    return (a[0] * b[2] - b[0] * a[2]) % _P == 0 and (a[1] * b[2] - b[1] * a[2]) % _P == 0


def _recover_x(y: int, sign: int) -> int | None:
    # RFC 8032 5.1.3: x^2 = (y^2 - 1) / (d y^2 + 1); square root by exponentiation.
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P:
        return None
    if x & 1 != sign:
        x = _P - x
    return x


def _decode_point(data: bytes) -> Point | None:
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % _P)


_GY = 4 * pow(5, _P - 2, _P) % _P
_GX = _recover_x(_GY, 0)
assert _GX is not None
_BASE: Point = (_GX, _GY, 1, _GX * _GY % _P)


def ed25519_verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """RFC 8032 5.1.7: check ``[s]B == R + [SHA-512(R || A || M) mod L]A``."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decode_point(public_key)
    r = _decode_point(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little")
    return _same(_scalar_mul(s, _BASE), _add(r, _scalar_mul(k % _L, a)))


# --- checkpoints (docs/adr/0006-archive-and-checkpoints.md) ------------------------------------


def checkpoint_message(cp: dict[str, Any]) -> bytes:
    """The ``SGCP1`` bytes a checkpoint signature covers."""
    return b"".join(
        (
            b"SGCP1",
            _field(cp["saga_id"].encode("utf-8")),
            _field(struct.pack(">q", cp["seq"])),
            _field(cp["hash"].encode("ascii")),
            _field(struct.pack(">q", cp["signed_at_us"])),
            _field(cp["key_id"].encode("ascii")),
        )
    )


def leaf_hash(saga_id: str, seq: int, hash_hex: str) -> bytes:
    """The Merkle leaf of one signed head: ``SHA-256(0x00 || "SGCL1" || fields)``."""
    return hashlib.sha256(
        b"\x00"
        + b"SGCL1"
        + _field(saga_id.encode("utf-8"))
        + _field(struct.pack(">q", seq))
        + _field(hash_hex.encode("ascii"))
    ).digest()


def _digests(*hashes: object) -> bool:
    """Every one of ``hashes`` is a 32-byte SHA-256 digest (a leaf, node or root)."""
    return all(isinstance(h, bytes) and len(h) == 32 for h in hashes)


def digest_of(text: object) -> bytes | None:
    """The 32 bytes a hash in the bundle spells as 64 hex characters, or ``None``."""
    if not isinstance(text, str) or len(text) != 64:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def root_from_proof(leaf: bytes, index: int, size: int, path: list[bytes]) -> bytes | None:
    """RFC 9162 2.1.3.2: the root ``path`` leads ``leaf`` (at ``index`` of ``size``) to, or
    ``None`` when the path does not fit that position or the leaf or a node is not 32 bytes.
    Nodes: ``SHA-256(0x01 || l || r)``."""
    if not isinstance(index, int) or not 0 <= index < size or not _digests(leaf, *path):
        return None
    fn, sn, node = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            node = hashlib.sha256(b"\x01" + sibling + node).digest()
            while fn & 1 == 0 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            node = hashlib.sha256(b"\x01" + node + sibling).digest()
        fn >>= 1
        sn >>= 1
    return node if sn == 0 else None


def verify_inclusion(leaf: bytes, index: int, size: int, path: list[bytes], root: bytes) -> bool:
    """Whether ``path`` proves ``leaf`` at ``index`` of ``size`` leaves under ``root`` (every
    one of them 32 bytes)."""
    return _digests(root) and root_from_proof(leaf, index, size, path) == root


def proof_nodes(items: object) -> list[bytes] | None:
    """The nodes of a bundled proof (a list of 64-hex hashes), or ``None`` when it is not."""
    if not isinstance(items, list):
        return None
    nodes = [digest_of(item) for item in items]
    return None if any(n is None for n in nodes) else [n for n in nodes if n is not None]


def round_message(signed: dict[str, Any]) -> bytes:
    """The bytes a signing round's signature covers: ``SGCR2`` for a round of the log
    (docs/adr/0015-round-log.md), ``SGCR1`` for a round of the first format."""
    if signed.get("format") == "SGCR2":
        return b"".join(
            (
                b"SGCR2",
                _field(struct.pack(">q", signed["round_id"])),
                _field(struct.pack(">q", signed["tree_size"])),
                _field(struct.pack(">q", signed["leaf_count"])),
                _field(signed["root"].encode("ascii")),
                _field(signed["prev_root"].encode("ascii")),
                _field(struct.pack(">q", signed["signed_at_us"])),
                _field(signed["key_id"].encode("ascii")),
            )
        )
    if signed.get("format", "SGCR1") != "SGCR1":
        raise ValueError(f"unknown round format {signed.get('format')!r}")
    return b"".join(
        (
            b"SGCR1",
            _field(struct.pack(">q", signed["round_id"])),
            _field(struct.pack(">q", signed["leaf_count"])),
            _field(signed["root"].encode("ascii")),
            _field(signed["prev_root"].encode("ascii")),
            _field(struct.pack(">q", signed["signed_at_us"])),
            _field(signed["key_id"].encode("ascii")),
        )
    )


def check_signed(saga_id: str, cp: dict[str, Any], keys: dict[str, bytes]) -> None:
    """Raise unless ``cp`` is signed by a trusted key: through its round, or by itself."""
    seq = cp["seq"]
    signed = cp.get("round")
    if signed is None:
        message = checkpoint_message({**cp, "saga_id": saga_id})
        signer = cp["key_id"]
    else:
        if "signature" not in signed:
            raise VerificationError(
                seq, "bad_signature", f"signing round {signed.get('round_id')} is missing"
            )
        message, signer = round_message(signed), signed["key_id"]
    public = keys.get(signer)
    if public is None or key_id(public) != signer:
        raise VerificationError(seq, "unknown_key", f"signed by untrusted key {signer}")
    signature = bytes.fromhex((signed or cp)["signature"])
    if not ed25519_verify(public, message, signature):
        what = "checkpoint" if signed is None else f"round {signed['round_id']}"
        raise VerificationError(seq, "bad_signature", f"the {what} signature does not verify")
    if signed is not None:
        check_in_round(saga_id, cp, signed)


def check_in_round(saga_id: str, cp: dict[str, Any], signed: dict[str, Any]) -> None:
    """Raise unless ``cp`` is a leaf of its (signature-checked) round: its inclusion proof
    leads to the round's root — over the round's leaves (``SGCR1``), or over every leaf of the
    log up to the round (``SGCR2``: the leaf's place is the round's first plus its index)."""
    seq = cp["seq"]
    leaf = leaf_hash(saga_id, seq, cp["hash"])
    path = proof_nodes(cp.get("proof", []))
    root = digest_of(signed["root"])
    index, size = cp["leaf_index"], signed["leaf_count"]
    if signed.get("format") == "SGCR2":
        if not isinstance(index, int) or not 0 <= index < signed["leaf_count"]:
            index = -1
        else:
            index += signed["tree_size"] - signed["leaf_count"]
        size = signed["tree_size"]
    if path is None or root is None or not verify_inclusion(leaf, index, size, path, root):
        raise VerificationError(
            seq,
            "bad_signature",
            f"the checkpoint is not in round {signed['round_id']}: its inclusion proof "
            "does not lead to the signed root",
        )


def check_checkpoint_fields(cp: dict[str, Any]) -> None:
    """Raise ``bundle_altered`` unless ``cp`` shows only fields its signature covers, with the
    values its round signed."""
    seq = cp.get("seq")
    signed = cp.get("round")
    allowed = HEAD_CHECKPOINT_FIELDS if signed is None else ROUND_CHECKPOINT_FIELDS
    extra = sorted(set(cp) - allowed)
    if extra:
        raise VerificationError(
            seq, "bundle_altered", f"the checkpoint shows fields no signature covers: {extra}"
        )
    if signed is None:
        return
    if not isinstance(signed, dict) or set(signed) - ROUND_FIELDS:
        raise VerificationError(
            seq, "bundle_altered", "the checkpoint's round shows fields no signature covers"
        )
    for name in ("signed_at_us", "key_id"):
        if name in cp and name in signed and cp[name] != signed[name]:
            raise VerificationError(
                seq,
                "bundle_altered",
                f"the checkpoint shows {name} {cp[name]!r}; its round signed {signed[name]!r}",
            )


def retention_record_message(record: dict[str, Any]) -> bytes:
    """The ``SGRT1`` bytes a retention record's signature covers (docs/adr/0015-round-log.md)."""
    return b"".join(
        (
            b"SGRT1",
            _field(record["partition_name"].encode("utf-8")),
            _field(struct.pack(">q", record["range_from_us"])),
            _field(struct.pack(">q", record["range_to_us"])),
            _field(struct.pack(">q", record["row_count"])),
            _field(record["export_sha256"].encode("ascii")),
            _field(struct.pack(">q", record["anchor_count"])),
            _field(record["anchors_root"].encode("ascii")),
            _field(struct.pack(">q", record["signed_at_us"])),
            _field(record["key_id"].encode("ascii")),
        )
    )


def anchor_leaf(saga_id: str, seq: int, hash_hex: str) -> bytes:
    """The Merkle leaf of a retention anchor: ``SHA-256(0x00 || "SGRA1" || fields)``."""
    return hashlib.sha256(
        b"\x00"
        + b"SGRA1"
        + _field(saga_id.encode("utf-8"))
        + _field(struct.pack(">q", seq))
        + _field(hash_hex.encode("ascii"))
    ).digest()


def check_anchor(saga_id: str, anchor: dict[str, Any], keys: dict[str, bytes]) -> None:
    """Raise unless the retention anchor (where the bundle's chain starts, the months before
    having been dropped) is a leaf of a retention record signed by a trusted key."""
    seq = anchor["seq"]
    extra = sorted(set(anchor) - ANCHOR_FIELDS)
    record = anchor.get("record")
    if extra or (isinstance(record, dict) and set(record) - RECORD_FIELDS):
        raise VerificationError(
            seq, "bundle_altered", "the retention anchor shows fields no signature covers"
        )
    if record is None:
        raise VerificationError(
            seq, "forged_anchor", "the retention anchor is not covered by a signed record"
        )
    public = keys.get(record["key_id"])
    if public is None or key_id(public) != record["key_id"]:
        raise VerificationError(
            seq,
            "unknown_key",
            f"the retention record is signed by untrusted key {record['key_id']}",
        )
    signature = bytes.fromhex(record["signature"])
    if not ed25519_verify(public, retention_record_message(record), signature):
        raise VerificationError(seq, "forged_anchor", "the retention record's signature fails")
    leaf = anchor_leaf(saga_id, seq, anchor["hash"])
    path = proof_nodes(anchor.get("proof", []))
    root = digest_of(record["anchors_root"])
    index, size = anchor.get("leaf_index", -1), record["anchor_count"]
    if path is None or root is None or not verify_inclusion(leaf, index, size, path, root):
        raise VerificationError(
            seq,
            "forged_anchor",
            f"the anchor is not one the retention record of {record['partition_name']} signed",
        )


# --- what the chain says (docs/adr/0005-saga-core-events.md, docs/adr/0017-audit-coverage.md) --


GRAMMAR_RULES = (
    "grammar:ref_forward",
    "grammar:executed_without_intent",
    "grammar:gated_without_request",
    "grammar:resume_without_request",
    "grammar:resumed_without_approval",
    "grammar:decision_without_request",
    "grammar:compensation_without_request",
    "grammar:compensation_of_no_step",
    "grammar:settlement_without_suspect",
    "grammar:after_end",
    "grammar:erased_while_live",
    "grammar:replay_of_no_effect",
)
"""The impossible stories a chain may tell: a copy of ``sagacity.chain._grammar`` (this file
imports nothing of the product); the product's conformance suite runs both over the same
vectors (``tests/vectors/grammar-v1.json``)."""

_QUIET_ENDS = ("COMPLETED", "COMPENSATED", "REJECTED", "EXPIRED")
_CAUSE_KEEPING_ENDS = ("COMPENSATION_PENDING", "COMPENSATION_FAILED")
_LIVE_ENDS = ("AWAITING_APPROVAL", "COMPENSATION_PENDING")
_CALLS_AND_DECISIONS = (
    "INTENT",
    "EXECUTED",
    "FAILED",
    "AWAITING_APPROVAL",
    "APPROVED",
    "REJECTED",
    "EXPIRED",
    "RESUME_REFUSED",
    "CONSTRAINT_VIOLATED",
    "REPLAYED",
    "GRANTED",
    "GRANT_REVOKED",
)
_CAUSES = (
    "FAILED",
    "REJECTED",
    "EXPIRED",
    "RESUME_REFUSED",
    "COMPENSATION_REQUESTED",
    "SUSPECT",
    "SUSPECT_SETTLED",
)
_CLOSING = ("REJECTED", "EXPIRED", "RESUME_REFUSED", "CONSTRAINT_VIOLATED", "INTENT")
_KNOWN_TYPES = frozenset(
    {
        *_CALLS_AND_DECISIONS,
        *_CAUSES,
        "SAGA_OPENED",
        "SAGA_ENDED",
        "ERASED",
        "COMPENSATION_INTENT",
        "COMPENSATED",
        "COMPENSATION_FAILED",
        # The gate's notes: neutral in the grammar, known so a request stays known past them.
        "APPROVAL_REFUSED",
        "APPROVAL_ESCALATED",
        "DEADLINE_EXTENDED",
    }
)


def _ref(attributes: dict[str, Any]) -> int | None:
    raw = attributes.get("ref_seq")
    if raw is None:
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _grant_seq(raw: Any) -> int | None:
    """A ``grant_seq`` attribute's seq, saturated to 1 .. 2^63 - 1 (``None``: no integer)."""
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    negative = text.startswith("-")
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not (digits.isascii() and digits.isdigit()):
        return None
    value = 2**63 - 1 if len(digits) > 20 else int(digits)
    return 1 if negative else min(max(value, 1), 2**63 - 1)


def required_signatures(attributes: dict[str, Any]) -> int:
    """The approvers a request needs: 1 for ``IRREVERSIBLE``, 2 for ``PRIVILEGED``, raised,
    never lowered, by its journaled ``signatures_required`` (2 when unreadable)."""
    declared = {"IRREVERSIBLE": 1, "PRIVILEGED": 2}.get(attributes.get("reversibility", ""), 0)
    raw = attributes.get("signatures_required")
    try:
        journaled = int(raw) if raw is not None else 2
    except (TypeError, ValueError):
        journaled = 2
    return max(declared, max(1, journaled or 2))


class SagaGrammar:
    """The saga grammar's state over one chain (events in seq order): ``feed`` each event;
    ``findings`` lists (rule, seq, detail, writer)."""

    def __init__(self, after_seq: int = 0) -> None:
        self.after_seq = after_seq
        self.findings: list[tuple[str, int, str, str | None]] = []
        self.known = after_seq == 0
        self.cause = not self.known
        self.ended: str | None = None
        self.mode: str | None = None
        self.erased = False
        self.last: str | None = None
        self.intents: dict[int, list[Any]] = {}  # seq: [tool, outcome seq]
        self.requests: dict[int, dict[str, Any]] = {}
        self.steps: set[int] = set()
        self.undoing: set[int] = set()
        self.suspects: set[tuple[int, str]] = set()
        self.grants: dict[int, tuple[Any, Any]] = {}  # seq: (tool, grant id)
        self.revoked: set[str] = set()

    def find(self, event: dict[str, Any], rule: str, detail: str) -> None:
        writer = (event.get("attributes") or {}).get("writer") or None
        self.findings.append((rule, event["seq"], detail, writer))

    def unknown_ref(self, ref: int | None) -> bool:
        return ref is not None and ref <= self.after_seq

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("event_type")
        attributes = event.get("attributes") or {}
        if kind not in _KNOWN_TYPES:
            for request in self.requests.values():
                if request["state"] == "open":
                    request["state"] = "unknown"
            return
        seq = event["seq"]
        ref = _ref(attributes)
        if ref is not None and ref >= seq:
            self.find(event, "grammar:ref_forward", f"{kind} at seq {seq} refers to seq {ref}")
        elif not self.after_end(event, kind, attributes):
            self.handle(event, kind, attributes, ref)
        if kind not in ("SAGA_ENDED", "SAGA_OPENED"):
            resume_refusal = kind == "CONSTRAINT_VIOLATED" and ref is not None
            caused = kind in _CAUSES and "refused" not in attributes  # a refusal did nothing
            self.cause = self.cause or caused or resume_refusal
        self.last = kind

    def after_end(self, event: dict[str, Any], kind: str, attributes: dict[str, Any]) -> bool:
        ended = self.ended
        if not self.known or kind == "ERASED":
            return False
        why = None
        if self.erased and kind not in ("SAGA_ENDED", "ERASED"):
            why = "the saga's data was erased"
        elif ended is None:
            return False
        elif ended in _QUIET_ENDS and kind not in ("SAGA_ENDED", "ERASED"):
            why = f"the saga ended {ended}"
        elif ended == "COMPENSATION_FAILED" and kind in _CALLS_AND_DECISIONS:
            why = f"the saga ended {ended}: no call or decision follows"
        elif kind in ("AWAITING_APPROVAL", "REPLAYED") or (
            kind == "INTENT" and _ref(attributes) is None
        ):
            why = "a tool is called after the saga's run ended, with no SAGA_OPENED since"
        if why is None:
            return False
        self.find(event, "grammar:after_end", f"{kind} at seq {event['seq']}: {why}")
        return True

    def handle(
        self, event: dict[str, Any], kind: str, attributes: dict[str, Any], ref: int | None
    ) -> None:
        seq = event["seq"]
        if kind == "SAGA_OPENED":
            self.known, self.ended, self.mode = True, None, attributes.get("compensation")
        elif kind == "SAGA_ENDED":
            result = event.get("result") or ""
            self.known, self.ended = True, result
            self.cause = result in _CAUSE_KEEPING_ENDS or not result
            for request in self.requests.values():
                if request["state"] == "open" and result != "AWAITING_APPROVAL":
                    request["state"] = "unknown" if not result else "closed"
                    request["closed_by"] = f"the saga's end at seq {seq}"
        elif kind == "ERASED":
            live = self.ended is None or self.ended in _LIVE_ENDS
            if self.known and (live or self.last not in ("SAGA_ENDED", "ERASED")):
                self.find(
                    event,
                    "grammar:erased_while_live",
                    f"ERASED at seq {seq} does not follow a final SAGA_ENDED",
                )
            self.erased = True
        elif kind == "INTENT":
            self.intent(event, attributes, ref)
        elif kind in ("EXECUTED", "FAILED"):
            self.outcome(event, kind, ref)
        elif kind == "AWAITING_APPROVAL":
            self.requests[seq] = {
                "tool": event.get("tool"),
                "payload": event.get("payload"),
                "required": required_signatures(attributes),
                "approvers": set(),
                "state": "open",
                "closed_by": "",
            }
        elif kind in ("APPROVED", "REJECTED", "EXPIRED", "RESUME_REFUSED", "CONSTRAINT_VIOLATED"):
            self.decision(event, kind, ref)
        elif kind == "COMPENSATION_REQUESTED":
            for request in self.requests.values():
                if request["state"] == "open":
                    request["state"] = "closed"
                    request["closed_by"] = f"COMPENSATION_REQUESTED at seq {seq}"
        elif kind in ("COMPENSATION_INTENT", "COMPENSATED", "COMPENSATION_FAILED"):
            self.compensation(event, kind, ref)
        elif kind == "SUSPECT":
            self.suspect(event, attributes, ref)
        elif kind == "SUSPECT_SETTLED":
            self.settled(event, attributes, ref)
        elif kind == "REPLAYED":
            self.replayed(event, ref)
        elif kind == "GRANTED":
            self.grants[seq] = (event.get("tool"), attributes.get("grant_id"))
        elif kind == "GRANT_REVOKED" and attributes.get("grant_id"):
            self.revoked.add(attributes["grant_id"])

    def ungranted(self, event: dict[str, Any], attributes: dict[str, Any], declared: str) -> Any:
        """Why the grant a gated INTENT names does not cover it ("": it names none; None: it
        covers it, or refers before the chain held)."""
        raw = attributes.get("grant_seq")
        if raw is None:
            return ""
        grant_seq = _grant_seq(raw)
        if grant_seq is not None and self.unknown_ref(grant_seq):
            return None
        found = self.grants.get(grant_seq) if grant_seq is not None else None
        grant_id = attributes.get("grant_id")
        if found is None or grant_seq is None or grant_seq >= event["seq"]:
            return f" (grant_seq {raw} is no earlier GRANTED)"
        if found != (event.get("tool"), grant_id):
            return f" (GRANTED seq {grant_seq} grants another tool or id)"
        if grant_id in self.revoked:
            return f" (grant {grant_id} was revoked before it)"
        if declared == "PRIVILEGED":
            return " (a PRIVILEGED tool is never granted)"
        return None

    def replayed(self, event: dict[str, Any], ref: int | None) -> None:
        tool, request = event.get("tool"), self.requests.get(ref) if ref is not None else None
        if self.unknown_ref(ref) or (request is not None and request["tool"] == tool):
            return
        intent = self.intents.get(ref) if ref is not None else None
        if intent is not None and intent[0] == tool and intent[1] in self.steps:
            return
        where = "no ref_seq" if ref is None else f"seq {ref}"
        why = f"which is no executed call or request of tool {tool!r}"
        self.find(event, "grammar:replay_of_no_effect", f"REPLAYED at seq {event['seq']} "
                  f"replays {where}, {why}")  # fmt: skip

    def intent(self, event: dict[str, Any], attributes: dict[str, Any], ref: int | None) -> None:
        seq = event["seq"]
        self.intents[seq] = [event.get("tool"), None]
        if ref is None:
            declared = attributes.get("reversibility", "")
            why = self.ungranted(event, attributes, declared)
            if declared in ("IRREVERSIBLE", "PRIVILEGED") and why is not None:
                self.find(
                    event,
                    "grammar:gated_without_request",
                    f"INTENT at seq {seq} runs {declared} tool {event.get('tool')!r} with no "
                    f"approval request{why}",
                )
            return
        if self.unknown_ref(ref):
            return
        request = self.requests.get(ref)
        if request is None or request["state"] == "closed":
            why = (
                "is no approval request"
                if request is None
                else f"was closed by {request['closed_by']}"
            )
            self.find(
                event,
                "grammar:resume_without_request",
                f"INTENT at seq {seq} resumes seq {ref}, which {why}",
            )
            return
        if request["state"] == "open":
            approvers, required = request["approvers"], request["required"]
            problem: str | None = None
            if len(approvers) < required:
                who = ", ".join(sorted(approvers)) or "nobody"
                problem = f"{len(approvers)} of the {required} approver(s) it needs ({who})"
            elif event.get("tool") != request["tool"]:
                problem = f"tool {event.get('tool')!r}, the request is for {request['tool']!r}"
            elif (
                None not in (event.get("payload"), request["payload"])
                and event.get("payload") != request["payload"]
            ):
                problem = "another payload than the one requested"
            if problem is not None:
                self.find(
                    event,
                    "grammar:resumed_without_approval",
                    f"INTENT at seq {seq} resumes request seq {ref} with {problem}",
                )
        request["state"] = "closed"
        request["closed_by"] = f"its resume at seq {seq}"

    def outcome(self, event: dict[str, Any], kind: str, ref: int | None) -> None:
        if self.unknown_ref(ref):
            if kind == "EXECUTED":
                self.steps.add(event["seq"])  # its INTENT precedes the chain held
            return
        intent = self.intents.get(ref) if ref is not None else None
        if intent is None:
            why = "has no ref_seq" if ref is None else f"refers to seq {ref}, which is no INTENT"
        elif intent[1] is not None:
            why = f"follows INTENT seq {ref}, whose outcome is seq {intent[1]}"
        elif intent[0] != event.get("tool"):
            why = f"is for tool {event.get('tool')!r}, INTENT seq {ref} for {intent[0]!r}"
        else:
            intent[1] = event["seq"]
            if kind == "EXECUTED":
                self.steps.add(event["seq"])
            return
        self.find(event, "grammar:executed_without_intent", f"{kind} at seq {event['seq']} {why}")

    def decision(self, event: dict[str, Any], kind: str, ref: int | None) -> None:
        if kind == "CONSTRAINT_VIOLATED" and ref is None:
            return
        if self.unknown_ref(ref):
            return
        request = self.requests.get(ref) if ref is not None else None
        if request is None:
            where = "no ref_seq" if ref is None else f"seq {ref}, which is no approval request"
            self.find(
                event,
                "grammar:decision_without_request",
                f"{kind} at seq {event['seq']} decides on {where}",
            )
            return
        if request["state"] != "open":
            return
        if kind == "APPROVED":
            if event.get("actor"):
                request["approvers"].add(event["actor"])
        elif kind in _CLOSING:
            request["state"] = "closed"
            request["closed_by"] = f"{kind} at seq {event['seq']}"

    def compensation(self, event: dict[str, Any], kind: str, ref: int | None) -> None:
        seq = event["seq"]
        inline_run = self.ended is None and self.mode != "delegated"
        if not (self.cause or inline_run):
            self.find(
                event,
                "grammar:compensation_without_request",
                f"{kind} at seq {seq}: nothing asked for compensation",
            )
        if self.unknown_ref(ref):
            return
        if ref is None or ref not in self.steps:
            where = "no ref_seq" if ref is None else f"seq {ref}, which is no step that ran"
            self.find(
                event, "grammar:compensation_of_no_step", f"{kind} at seq {seq} undoes {where}"
            )
        elif kind == "COMPENSATION_INTENT":
            self.undoing.add(ref)
        elif kind == "COMPENSATED" and ref not in self.undoing:
            self.find(
                event,
                "grammar:compensation_of_no_step",
                f"COMPENSATED at seq {seq}: no COMPENSATION_INTENT for step seq {ref}",
            )

    def suspect(self, event: dict[str, Any], attributes: dict[str, Any], ref: int | None) -> None:
        phase = attributes.get("phase", "call")
        if ref is not None:
            self.suspects.add((ref, phase))
        if self.unknown_ref(ref):
            return
        known = self.intents if phase == "call" else self.steps
        if ref is None or ref not in known:
            what = "INTENT" if phase == "call" else "step that ran"
            where = "no ref_seq" if ref is None else f"seq {ref}, which is no {what}"
            self.find(
                event,
                "grammar:compensation_of_no_step",
                f"SUSPECT at seq {event['seq']} (phase {phase}) doubts {where}",
            )

    def settled(self, event: dict[str, Any], attributes: dict[str, Any], ref: int | None) -> None:
        phase = attributes.get("phase", "call")
        if self.unknown_ref(ref):
            return
        if ref is None or (ref, phase) not in self.suspects:
            where = "no ref_seq" if ref is None else f"step seq {ref} (phase {phase})"
            self.find(
                event,
                "grammar:settlement_without_suspect",
                f"SUSPECT_SETTLED at seq {event['seq']} settles {where}, which no SUSPECT doubts",
            )
            return
        if phase == "call" and attributes.get("outcome") == "executed":
            self.steps.add(ref)


def check_grammar(
    events: list[dict[str, Any]], after_seq: int = 0
) -> list[tuple[str, int, str, str | None]]:
    """Every impossible event of a verified chain: (rule, seq, detail, writer), in seq order."""
    grammar = SagaGrammar(after_seq)
    for event in events:
        grammar.feed(event)
    return grammar.findings


def withheld(
    events: list[dict[str, Any]], operator_keys: dict[str, bytes] | None = None
) -> tuple[int, list[str], int] | None:
    """The first form-2 event holding a data field only as its commitment (its opening
    missing), with its fields and how many events do, when the chain records no ``ERASED``
    that counts (docs/adr/0019-erasure.md, :func:`erasure_reason`); ``None`` otherwise."""
    if erasures(events, operator_keys)[0]:
        return None
    # The redaction salts never leave the service (docs/adr/0019-erasure.md §5): a copy
    # without them withholds nothing it should hold.
    found = [
        (seq, kept)
        for seq, names in erased_fields(events)
        if (kept := [n for n in names if n != "redaction"])
    ]
    if not found:
        return None
    seq, names = found[0]
    return seq, names, len(found)


# --- operator signatures (docs/adr/0027-operator-signatures.md) --------------------------------


def operator_message(event: dict[str, Any], key_id: str) -> bytes:
    """The ``SGCO1`` bytes an operator signature of ``event`` covers: a copy of
    ``sagacity.signing._operator_signature.operator_message`` (the conformance suite runs both)."""
    attributes = event.get("attributes") or {}
    return b"".join(
        (
            b"SGCO1",
            _text(key_id),
            _text(event["event_type"]),
            _text(event["saga_id"]),
            _int(event["seq"]),
            _text(event["prev_hash"]),
            _text(event.get("actor")),
            _int(event["recorded_at_us"]),
            _text(attributes.get("reason")),
            _text(attributes.get("journal")),
        )
    )


def erasure_reason(event: dict[str, Any], operator_keys: dict[str, bytes] | None) -> str | None:
    """``None`` when an ``ERASED`` counts, else why not (the product's reasons): signed by one
    of ``operator_keys`` at its place in the chain; without keys (``None``), carrying an
    operator signature of the right form (counted unverified)."""
    attributes = event.get("attributes") or {}
    raw = attributes.get("operator_signature") if isinstance(attributes, dict) else None
    if not isinstance(raw, str):
        return "unsigned_operator_event"
    parts = raw.split(":")
    if len(parts) != 3 or parts[0] != "SGCO1" or not parts[1] or len(parts[2]) != 128:
        return "malformed_operator_signature"
    try:
        signature = bytes.fromhex(parts[2])
    except ValueError:
        return "malformed_operator_signature"
    if operator_keys is None:
        return None
    public = operator_keys.get(parts[1])
    if public is None:
        return "unknown_operator_key"
    try:
        message = operator_message(event, parts[1])
    except (KeyError, ValueError, TypeError, struct.error):
        return "malformed_operator_signature"
    if not ed25519_verify(public, message, signature):
        return "bad_operator_signature"
    return None


def erasures(
    events: list[dict[str, Any]], operator_keys: dict[str, bytes] | None
) -> tuple[int, list[tuple[int, str, str | None]]]:
    """How many ``ERASED`` events count, and those that do not: (seq, why, writer)."""
    counted, forged = 0, []
    for event in events:
        if event.get("event_type") != "ERASED":
            continue
        why = erasure_reason(event, operator_keys)
        if why is None:
            counted += 1
        else:
            attributes = event.get("attributes") or {}
            forged.append((int(event["seq"]), why, attributes.get("writer") or None))
    return counted, forged


def key_id(public_key: bytes) -> str:
    """The short id of a raw public key: the first 16 hex characters of its SHA-256."""
    return hashlib.sha256(public_key).hexdigest()[:16]


# --- the bundle ---------------------------------------------------------------------------------


class VerificationError(Exception):
    """Verification failed at ``seq`` for ``reason``."""

    def __init__(self, seq: int | None, reason: str, detail: str) -> None:
        super().__init__(f"{reason} at seq {seq}: {detail}")
        self.seq, self.reason, self.detail = seq, reason, detail


def check_link(
    saga_id: str,
    expected: int,
    prev: str,
    event: dict[str, Any],
    later: list[Any],
    position: int,
) -> None:
    """Raise unless ``event`` continues the chain walked so far (``expected`` the seq due next,
    ``prev`` the last verified hash); ``later[position + 1:]`` are the seqs stored after it (a
    swap, not a gap).  A copy of ``sagacity.chain.link_break`` (this file imports nothing of
    the product); the product's conformance suite runs both over the same vectors."""
    seq = event.get("seq")
    if event.get("saga_id") != saga_id:
        raise VerificationError(
            expected, "foreign_saga", f"entry belongs to saga {event.get('saga_id')!r}"
        )
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise VerificationError(expected, "edited", "seq is not an integer")
    if expected == 1 and seq == 1 and event.get("prev_hash") != GENESIS_HASH:
        raise VerificationError(1, "wrong_genesis", "seq 1 does not start at the genesis hash")
    if seq > expected:
        if expected in later[position + 1 :]:
            raise VerificationError(
                expected, "reordered", f"seq {expected} is stored after seq {seq}"
            )
        raise VerificationError(expected, "gap", f"seq {expected} is missing (found {seq})")
    if seq < expected:
        raise VerificationError(
            expected, "reordered", f"seq {seq} found where {expected} was expected"
        )
    try:
        recomputed = entry_hash(event)
    except (KeyError, ValueError, TypeError, struct.error) as exc:
        raise VerificationError(expected, "edited", f"entry cannot be hashed: {exc}") from exc
    if recomputed != event.get("hash"):
        raise VerificationError(expected, "edited", "content does not match its recorded hash")
    if event.get("prev_hash") != prev:
        raise VerificationError(
            expected, "broken_link", "previous hash is not the preceding entry's"
        )


def verify_chain(
    saga_id: str, events: list[dict[str, Any]], after_seq: int, after_hash: str
) -> tuple[int, str]:
    """Walk ``events`` in file order; return the head (seq, hash); raise on the first failure."""
    expected, prev = after_seq + 1, after_hash
    seqs = [e.get("seq") for e in events]
    for position, event in enumerate(events):
        check_link(saga_id, expected, prev, event, seqs, position)
        prev = event["hash"]
        expected += 1
    return expected - 1, prev


def check_head(claimed_seq: Any, claimed_hash: Any, head_seq: int, head_hash: str) -> None:
    """Raise unless the manifest's head is the chain's: ``truncated`` when it claims more
    events than there are, ``head_mismatch`` when the events go past it or end elsewhere."""
    if (claimed_seq, claimed_hash) == (head_seq, head_hash):
        return
    shown = f"manifest head is seq {claimed_seq}, events end at seq {head_seq}"
    if not isinstance(claimed_seq, int) or isinstance(claimed_seq, bool):
        raise VerificationError(head_seq, "head_mismatch", shown)
    if claimed_seq > head_seq:
        raise VerificationError(head_seq + 1, "truncated", shown)
    if claimed_seq < head_seq:
        raise VerificationError(claimed_seq + 1, "head_mismatch", shown)
    raise VerificationError(
        head_seq, "head_mismatch", f"seq {head_seq} ends the events with another hash"
    )


def check_manifest_fields(manifest: dict[str, Any]) -> list[str]:
    """Return the manifest's unsigned fields; raise ``bundle_altered`` if it shows a field that
    is neither checked here nor listed as unsigned, or the bundle's format is unknown
    (``ValueError``: it cannot be read)."""
    if manifest.get("format") not in FORMATS:
        raise ValueError(f"unknown bundle format {manifest.get('format')!r}")
    if manifest.get("canonical_form", "SGC1") not in ("SGC1", "SGC2"):
        raise ValueError(f"unknown canonical form {manifest.get('canonical_form')!r}")
    unsigned = manifest.get("unsigned", list(UNSIGNED_FIELDS))
    if not isinstance(unsigned, list) or not all(isinstance(u, str) for u in unsigned):
        raise VerificationError(None, "bundle_altered", "the manifest's unsigned list is malformed")
    extra = sorted(set(manifest) - CHECKED_FIELDS - set(unsigned))
    if extra:
        raise VerificationError(
            None,
            "bundle_altered",
            f"the manifest shows fields neither signed nor marked unsigned: {extra}",
        )
    return sorted(f for f in set(unsigned) & set(manifest) if manifest[f] is not None)


def read_events(manifest: dict[str, Any], raw_events: bytes) -> list[dict[str, Any]]:
    """The events of ``events.jsonl``; raise ``bundle_altered`` unless the file is the one the
    manifest describes and each event shows only the fields its hash covers."""
    if hashlib.sha256(raw_events).hexdigest() != manifest["events_sha256"]:
        raise VerificationError(
            None, "bundle_altered", "events.jsonl does not match the manifest's digest"
        )
    events = [json.loads(line) for line in raw_events.decode("utf-8").splitlines() if line]
    if manifest.get("events", len(events)) != len(events):
        raise VerificationError(
            None,
            "bundle_altered",
            f"the manifest counts {manifest['events']} events, events.jsonl holds {len(events)}",
        )
    for number, event in enumerate(events, start=1):
        if not isinstance(event, dict):
            raise VerificationError(None, "bundle_altered", f"line {number} is not an object")
        extra = sorted(set(event) - EVENT_FIELDS)
        if extra:
            raise VerificationError(
                event.get("seq"),
                "bundle_altered",
                f"line {number} shows fields its hash does not cover: {extra}",
            )
    return events


def verify_bundle(
    directory: Path,
    pinned_key: bytes | None,
    *,
    allow_unsigned: bool = False,
    allow_unopened: bool = False,
    operator_keys: list[bytes] | None = None,
) -> str:
    """Verify the bundle in ``directory``; return a summary or raise :class:`VerificationError`.

    Raises:
        VerificationError: the evidence does not verify.
        OSError / ValueError / KeyError: the bundle cannot be read.
    """
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    if not isinstance(manifest, dict):
        raise ValueError("the manifest is not a JSON object")
    unsigned_fields = check_manifest_fields(manifest)
    events = read_events(manifest, (directory / "events.jsonl").read_bytes())
    saga_id = manifest["saga_id"]
    anchor = manifest.get("anchor")
    after_seq, after_hash = (anchor["seq"], anchor["hash"]) if anchor else (0, GENESIS_HASH)
    head_seq, head_hash = verify_chain(saga_id, events, after_seq, after_hash)
    check_head(manifest["head_seq"], manifest["head_hash"], head_seq, head_hash)
    keys = {k: bytes.fromhex(v) for k, v in manifest.get("public_keys", {}).items()}
    if pinned_key is not None:
        keys = {key_id(pinned_key): pinned_key}
    if anchor:
        check_anchor(saga_id, anchor, keys)
    by_seq = {e["seq"]: e["hash"] for e in events}
    checked, signed_seq = 0, None
    for cp in sorted(manifest.get("checkpoints", []), key=lambda c: (c["seq"], c["signed_at_us"])):
        seq = cp["seq"]
        check_checkpoint_fields(cp)
        check_signed(saga_id, cp, keys)
        checked += 1
        if seq < after_seq:
            continue
        if seq > head_seq:
            raise VerificationError(
                head_seq + 1, "truncated", f"seq {seq} was signed but events end at {head_seq}"
            )
        expected = after_hash if seq == after_seq else by_seq.get(seq)
        if expected != cp["hash"]:
            raise VerificationError(
                seq, "checkpoint_mismatch", f"seq {seq} was signed with another hash"
            )
        signed_seq = seq
    operators = None if operator_keys is None else {key_id(k): k for k in operator_keys}
    story = check_story(events, after_seq, allow_unopened=allow_unopened, operator_keys=operators)
    notes = coverage_notes(
        head_seq=head_seq,
        signed_seq=signed_seq,
        after_seq=after_seq,
        allow_unsigned=allow_unsigned,
    )
    if anchor:
        notes.append(
            f"the chain starts after seq {after_seq} (a retention anchor signed with the record"
            f" of {anchor['record']['partition_name']}: earlier events were exported and dropped)"
        )
    if unsigned_fields:
        notes.append("unsigned, shown for information: " + ", ".join(unsigned_fields))
    erased = erased_fields(events)
    if erased and not any(note.startswith("UNOPENED") for note in story):
        notes.append(
            "erased (verified by their commitments, the data withheld): "
            + "; ".join(f"seq {seq}: {', '.join(names)}" for seq, names in erased)
        )
    notes.extend(story)
    return (
        f"OK: saga {saga_id}: {len(events)} events, head seq {head_seq} ({head_hash[:16]}…), "
        f"{checked} signed checkpoint(s) verified"
        + ("" if pinned_key is not None else " (key taken from the manifest: pin it)")
        + "".join(f"\n  {n}" for n in notes)
    )


def check_story(
    events: list[dict[str, Any]],
    after_seq: int,
    *,
    allow_unopened: bool = False,
    operator_keys: dict[str, bytes] | None = None,
) -> list[str]:
    """Raise on the first impossible event of the saga grammar (``grammar:*``), then on data
    withheld (``withheld``: an opening missing with no ``ERASED`` that counts on the chain)
    unless ``allow_unopened``, then on an ``ERASED`` that does not count (``forged_erasure``);
    return the notes to show (what was accepted only because of an option, or unverified)."""
    findings = check_grammar(events, after_seq)
    if findings:
        rule, seq, detail, writer = findings[0]
        raise VerificationError(
            seq, rule, detail + (f" (written by writer {writer})" if writer else "")
        )
    counted, forged = erasures(events, operator_keys)
    notes = []
    found = withheld(events, operator_keys)
    if found is not None:
        seq, names, count = found
        what = (
            f"seq {seq} holds {', '.join(names)} only as a commitment (no opening) and the "
            "chain records no ERASED that counts"
            + (f" (the ERASED at seq {forged[0][0]} does not: {forged[0][1]})" if forged else "")
            + (f" ({count - 1} more event(s) likewise)" if count > 1 else "")
        )
        if not allow_unopened:
            raise VerificationError(
                seq,
                "withheld",
                f"{what}: its data was withheld, not erased; pass --allow-unopened for a "
                "bundle exported from an archive that stores sealed events' commitments only",
            )
        notes.append(f"UNOPENED: {what}: accepted only because of --allow-unopened")
    if forged:
        seq, why, writer = forged[0]
        raise VerificationError(
            seq,
            "forged_erasure",
            f"the ERASED at seq {seq} is not an operator's ({why}): it does not count as an "
            "erasure and names nobody as the eraser"
            + (f" ({len(forged) - 1} more likewise)" if len(forged) > 1 else "")
            + (f" (written by writer {writer})" if writer else ""),
        )
    if counted and operator_keys is None:
        notes.append(
            f"UNVERIFIED: {counted} ERASED event(s) counted without checking their operator "
            "signature: pass --operator-public-key with the operator's published key"
        )
    return notes


def erased_fields(events: list[dict[str, Any]]) -> list[tuple[int, list[str]]]:
    """The form-2 events' data fields present only as a commitment (docs/adr/0019-erasure.md):
    (seq, field names), in file order."""
    out = []
    for event in events:
        if event.get("form") != 2:
            continue
        salts = event.get("salts") or {}
        names = sorted(n for n in event.get("commitments") or {} if n not in salts)
        if names:
            out.append((event["seq"], names))
    return out


def coverage_notes(
    *, head_seq: int, signed_seq: int | None, after_seq: int, allow_unsigned: bool
) -> list[str]:
    """Raise ``unsigned`` unless a verified checkpoint covers the head (``signed_seq``, the
    highest seq a checkpoint matched); with ``allow_unsigned``, return the note saying which
    events no signature covers instead."""
    if signed_seq == head_seq:
        return []
    first = max(signed_seq or 0, after_seq) + 1
    what = (
        f"seqs {first}..{head_seq} follow the last checkpoint (seq {signed_seq})"
        if signed_seq is not None
        else (
            f"no checkpoint covers any of seqs {first}..{head_seq}"
            if head_seq >= first
            else "the bundle holds no signed checkpoint"
        )
    )
    if not allow_unsigned:
        raise VerificationError(
            min(first, head_seq),
            "unsigned",
            f"{what}; pass --allow-unsigned to accept unsigned events",
        )
    return [f"UNSIGNED: {what}: accepted only because of --allow-unsigned"]


def main(argv: list[str]) -> int:
    """Command-line entry point; returns the exit status."""
    args = list(argv)
    allow_unsigned = "--allow-unsigned" in args
    allow_unopened = "--allow-unopened" in args
    args = [a for a in args if a not in ("--allow-unsigned", "--allow-unopened")]
    operators: list[bytes] | None = None
    while "--operator-public-key" in args:
        i = args.index("--operator-public-key")
        try:
            values = [bytes.fromhex(v) for v in args[i + 1].split(",") if v.strip()]
        except (IndexError, ValueError):
            print("error: --operator-public-key needs 64 hex characters", file=sys.stderr)
            return 2
        if not values or any(len(v) != 32 for v in values):
            print("error: an Ed25519 public key is 32 bytes", file=sys.stderr)
            return 2
        operators = (operators or []) + values
        del args[i : i + 2]
    pinned: bytes | None = None
    if "--public-key" in args:
        i = args.index("--public-key")
        try:
            pinned = bytes.fromhex(args[i + 1])
        except (IndexError, ValueError):
            print("error: --public-key needs 64 hex characters", file=sys.stderr)
            return 2
        if len(pinned) != 32:
            print("error: an Ed25519 public key is 32 bytes", file=sys.stderr)
            return 2
        del args[i : i + 2]
    if any(a in ("-h", "--help") for a in args) or len(args) > 1:
        print(__doc__)
        return 0 if args and args[0] in ("-h", "--help") else 2
    directory = Path(args[0]) if args else Path(__file__).resolve().parent
    try:
        print(
            verify_bundle(
                directory,
                pinned,
                allow_unsigned=allow_unsigned,
                allow_unopened=allow_unopened,
                operator_keys=operators,
            )
        )
    except VerificationError as failure:
        print(f"FAILED: {failure}")
        return 1
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: cannot read the bundle in {directory}: {exc!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
