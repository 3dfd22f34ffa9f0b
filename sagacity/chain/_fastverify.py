"""Verifying archived chains in bulk: a binary ``COPY`` stream of rows in, a verdict per saga out.

The audit's chain check without one Python object per row: the rows ``verify`` reads
(:data:`sagacity.postgres.archive.ROW_COLUMNS`, in chain order, as
:func:`sagacity.postgres.archive.chain_rows` streams them) go in as the bytes
PostgreSQL sends (``COPY ... TO STDOUT (FORMAT BINARY)``), and each saga's verdict comes out
when its last row has been read: memory holds one saga's state (a few hashes), never its rows.

Each verdict is the one :func:`sagacity.chain.verify` gives for the entries the saga's rows
hold (the same reason, bad seq, head, length and detail; docs/adr/0002-hash-chain.md). A row
that is not a valid entry (an attribute that is not text, a previous hash that is not 64 hex
digits, an empty event type) makes the verdict ``refer``: the reference path, which explains
such rows, must judge that saga.

The work runs in the compiled module (``native/``, docs/adr/0013-compiled-hot-path.md) when it
is installed and not turned off with ``SAGACITY_NATIVE=0`` (:data:`NATIVE`); otherwise in
:class:`PyCopyChainVerifier`, the Python twin with the same contract (tests run both on the
same bytes).

How ``verify`` uses it (:func:`sagacity.consumers.archive._audit.iter_audits`, every saga):
:func:`~sagacity.postgres.archive.chain_rows`, on a second connection reading
the audit's REPEATABLE READ snapshot, into ``chain_verifier(anchors=...)`` (the retention
anchors, read before), its verdicts merged by saga id with the checkpoints and heads.  An
``ok`` verdict's head and :meth:`BatchVerdict.hashes_by_seq` go to the checkpoint check; a
broken one is the audit's finding as it is; a ``refer`` verdict sends the saga's rows,
selected again, to the column check and the reference path.  With the compiled module that
merge runs compiled too (:data:`NATIVE_AUDITOR`): only the sagas whose chain, checkpoints and
head do not simply agree come back to Python, with their verdict (:func:`batch_verdict`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sagacity._native import native
from sagacity.chain._form import canonical_layout
from sagacity.chain._walk import BreakReason, link_break
from sagacity.entries._events import GENESIS_HASH

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
"""The first bytes of every binary ``COPY`` stream."""

_COLUMNS = 12
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


@dataclass(frozen=True, kw_only=True)
class BatchVerdict:
    """One saga's verdict.

    Attributes:
        saga_id: the saga.
        ok: its whole chain verifies.
        refer: a row is not a valid entry: judge the saga by the reference path (the other
            fields but ``events`` are then meaningless).
        events: the saga's rows.
        length / head_seq / head_hash / bad_seq / reason / detail: as
            :class:`sagacity.chain.ChainVerdict`.
        first_seq: the seq of the first link verified (the anchor's plus one).
        digests: the 32-byte hashes of the links verified, ``first_seq`` onwards
            (:meth:`hashes_by_seq` reads them as text).
    """

    saga_id: str
    ok: bool
    refer: bool
    events: int
    length: int
    head_seq: int
    head_hash: str
    bad_seq: int | None = None
    reason: BreakReason | None = None
    detail: str | None = None
    first_seq: int = 1
    digests: bytes = b""

    def hashes_by_seq(self) -> Mapping[int, str]:
        """The verified links' hashes by seq, as lowercase hex (what a checkpoint signed)."""
        return _HashesBySeq(self.first_seq, self.digests)


class _HashesBySeq(Mapping[int, str]):
    __slots__ = ("_digests", "_first")

    def __init__(self, first: int, digests: bytes) -> None:
        self._first = first
        self._digests = digests

    def __getitem__(self, seq: int) -> str:
        i = seq - self._first
        if not 0 <= i < len(self._digests) // 32:
            raise KeyError(seq)
        return self._digests[32 * i : 32 * i + 32].hex()

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._first, self._first + len(self._digests) // 32))

    def __len__(self) -> int:
        return len(self._digests) // 32


VerdictTuple = tuple[str, bool, bool, int, int, int, str, int | None, str | None, str | None, bytes]


class _Verifier(Protocol):
    def feed(self, chunk: bytes) -> list[VerdictTuple]: ...

    def finish(self) -> list[VerdictTuple]: ...


def _load_native() -> Callable[..., _Verifier] | None:
    function: Callable[..., _Verifier] | None = native("CopyChainVerifier")
    return function


_NATIVE_VERIFIER = _load_native()
NATIVE = _NATIVE_VERIFIER is not None
"""Whether :func:`chain_verifier` runs compiled (docs/adr/0013-compiled-hot-path.md)."""
NATIVE_AUDITOR: Callable[..., Any] | None = native("ChainAuditor") if NATIVE else None
"""The compiled merge of the verifier's verdicts with each saga's checkpoints and head
(``sagacity_native.ChainAuditor``, used by :func:`sagacity.consumers.archive._audit.iter_audits`
when every saga is audited), or ``None``."""


class ChainVerifier:
    """Feed it a binary ``COPY`` stream of archived rows, block by block; get verdicts.

    Made by :func:`chain_verifier`.  ``feed`` returns the verdicts of the sagas a block
    completed, ``finish`` the rest; a stream that is not the archive's rows in chain order
    raises ``ValueError`` naming what is wrong.
    """

    def __init__(
        self, inner: _Verifier, anchors: Mapping[str, tuple[int, str]] | None = None
    ) -> None:
        self._inner = inner
        self._anchors = anchors or {}

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[BatchVerdict]:
        """Read the next bytes of the stream.

        Raises:
            ValueError: the bytes are not a binary ``COPY`` of the archive's rows in chain
                order (sagas ascending by their UTF-8 bytes, each saga's rows together).
        """
        return [self._verdict(t) for t in self._inner.feed(bytes(chunk))]

    def finish(self) -> list[BatchVerdict]:
        """The stream has ended: the remaining verdicts.

        Raises:
            ValueError: the stream stopped before its trailer.
        """
        return [self._verdict(t) for t in self._inner.finish()]

    def _verdict(self, t: VerdictTuple) -> BatchVerdict:
        return batch_verdict(t, self._anchors)


def batch_verdict(t: VerdictTuple, anchors: Mapping[str, tuple[int, str]]) -> BatchVerdict:
    """The :class:`BatchVerdict` of a verifier's verdict tuple (``anchors``: as the verifier's)."""
    anchor = anchors.get(t[0])
    return BatchVerdict(
        saga_id=t[0],
        ok=t[1],
        refer=t[2],
        events=t[3],
        length=t[4],
        head_seq=t[5],
        head_hash=t[6],
        bad_seq=t[7],
        reason=None if t[8] is None else BreakReason(t[8]),
        detail=t[9],
        first_seq=1 if anchor is None else anchor[0] + 1,
        digests=t[10],
    )


def chain_verifier(
    *,
    saga_id: str | None = None,
    anchors: Mapping[str, tuple[int, str]] | None = None,
    native: bool | None = None,
) -> ChainVerifier:
    """A verifier for the rows of every saga in a stream, or of one saga.

    Args:
        saga_id: verify this saga only: a row of another saga is ``foreign_saga`` (as
            :func:`sagacity.chain.verify` with ``saga_id``), and a stream without rows still
            gives its (empty, ok) verdict.
        anchors: saga id -> (seq, hash) a saga's rows continue from (the link retention
            removed last); a saga not named starts at seq 1 from the genesis hash.
        native: ``True`` the compiled module (``RuntimeError`` when it is not installed),
            ``False`` the Python twin; by default the compiled one where it is (:data:`NATIVE`).
    """
    held = dict(anchors) if anchors else None
    if native is None:
        native = NATIVE
    if native:
        if _NATIVE_VERIFIER is None:
            raise RuntimeError("the compiled module (sagacity-native) is not installed or off")
        return ChainVerifier(_NATIVE_VERIFIER(saga_id=saga_id, anchors=held), held)
    return ChainVerifier(PyCopyChainVerifier(saga_id=saga_id, anchors=held), held)


def _bad(message: str) -> ValueError:
    return ValueError(f"not a binary COPY of the archive's rows: {message}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate attribute key")
    return out


_loads = json.JSONDecoder(object_pairs_hook=_no_duplicates).decode


def _text_ok(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _attribute_items(data: bytes | None) -> list[tuple[bytes, bytes]] | None:
    """The attribute pairs of jsonb's text, sorted by key as the canonical form takes them, or
    ``None`` when they are not an entry's."""
    if data is None:
        return None
    if data == b"{}":
        return []
    try:
        value = _loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if type(value) is not dict:
        return None
    items: list[tuple[bytes, bytes]] = []
    for key, text in value.items():
        if type(text) is not str or "\x00" in key or "\x00" in text:
            return None
        try:
            items.append((key.encode("utf-8"), text.encode("utf-8")))
        except UnicodeEncodeError:  # a lone surrogate
            return None
    items.sort()
    return items


def _prev_ok(prev_hash: bytes | None) -> bool:
    return prev_hash is not None and len(prev_hash) == 64 and _HEX_DIGITS.issuperset(prev_hash)


def _not_yet_read(seq: int) -> bool:
    """A stream's walker has not read what is stored later: a higher seq than expected is a
    gap until the expected seq turns up (then it was a swap)."""
    return False


def _read_later(seq: int) -> bool:
    return True


# (reason, bad_seq, length, head_seq, head_hash, detail)
_Break = tuple[str, int, int, int, str, str]


class _Saga:
    __slots__ = (
        "broken",
        "count",
        "digests",
        "events",
        "expected",
        "id",
        "id_bytes",
        "pending",
        "prev",
        "prev_hex",
        "refer",
    )

    def __init__(self, saga_id: str, after_seq: int, after_hash: str) -> None:
        self.id = saga_id
        self.id_bytes = saga_id.encode("utf-8")
        self.expected = after_seq + 1
        self.prev_hex = after_hash
        self.count = 0
        self.events = 0
        self.refer = not _prev_ok(after_hash.encode("utf-8", "surrogatepass"))
        self.prev = b"" if self.refer else bytes.fromhex(after_hash)
        self.broken: _Break | None = None
        # A higher seq than expected: (the expected seq, the gap it is, the swap it would be).
        self.pending: tuple[int, _Break, _Break] | None = None
        self.digests = bytearray()

    def verdict(self) -> VerdictTuple:
        broken = self.broken if self.pending is None else self.pending[1]
        if self.refer:
            return (self.id, False, True, self.events, 0, 0, "", None, None, None, b"")
        if broken is None:
            return (
                self.id,
                True,
                False,
                self.events,
                self.count,
                self.expected - 1,
                self.prev_hex,
                None,
                None,
                None,
                bytes(self.digests),
            )
        reason, bad_seq, length, head_seq, head_hash, detail = broken
        return (
            self.id,
            False,
            False,
            self.events,
            length,
            head_seq,
            head_hash,
            bad_seq,
            reason,
            detail,
            bytes(self.digests),
        )

    def _break(self, found: tuple[BreakReason, str]) -> _Break:
        e = self.expected
        return (found[0].value, e, self.count, e - 1, self.prev_hex, found[1])

    def check(self, row: list[bytes | None], seq: int, recorded_at_us: int) -> None:
        """Walk one row: the reference's rule (:func:`sagacity.chain.link_break`) over the
        reference's canonical form (:func:`sagacity.chain.canonical_layout`), from the
        columns; a row that is not a valid entry refers the saga to the reference path."""
        self.events += 1
        saga, _, kind, tool, payload, result, error, actor, attributes, _, prev_hash, digest = row
        texts = (tool, payload, result, error, actor)
        if self.refer:
            return
        if not (
            saga
            and _text_ok(saga)
            and seq >= 1
            and kind
            and _text_ok(kind)
            and all(t is None or _text_ok(t) for t in texts)
            and prev_hash
            and _prev_ok(prev_hash)
            and digest is not None
        ):
            self.refer = True
            return
        items = _attribute_items(attributes)
        try:
            digest_text = digest.decode("utf-8")
        except UnicodeDecodeError:
            items = None
        if items is None:
            self.refer = True  # not an entry's, wherever it stands in the chain
            return
        if self.pending is not None and seq == self.pending[0]:
            self.broken, self.pending = self.pending[2], None  # a swap, not a gap
        if self.broken is not None or self.pending is not None:
            return  # past the first break only malformed rows matter
        self.count += 1
        if saga != self.id_bytes and not all(0x20 <= b < 0x7F for b in saga):
            self.refer = True  # Python's repr of such an id is the reference's to write
            return
        prev_text = prev_hash.decode()
        digests: list[bytes] = []

        def recompute() -> str:
            hashed = canonical_layout(
                saga, seq, kind, *texts, recorded_at_us, items, bytes.fromhex(prev_text)
            )
            digests.append(hashlib.sha256(hashed).digest())
            return digests[-1].hex()

        found = link_break(
            saga_id=self.id,
            expected_seq=self.expected,
            prev_hash=self.prev_hex,
            entry_saga_id=saga.decode(),
            entry_seq=seq,
            entry_prev_hash=prev_text,
            entry_hash=digest_text,
            recompute=recompute,
            stored_later=_not_yet_read,
        )
        if found is None:
            self.prev = digests[-1]
            self.digests += self.prev
            self.prev_hex = digest_text
            self.expected += 1
        elif found[0] is BreakReason.GAP:
            swap = link_break(
                saga_id=self.id,
                expected_seq=self.expected,
                prev_hash=self.prev_hex,
                entry_saga_id=saga.decode(),
                entry_seq=seq,
                entry_prev_hash=prev_text,
                entry_hash=digest_text,
                recompute=recompute,
                stored_later=_read_later,
            )
            assert swap is not None
            self.pending = (self.expected, self._break(found), self._break(swap))
        else:
            self.broken = self._break(found)


class PyCopyChainVerifier:
    """The Python twin of the compiled ``sagacity_native.CopyChainVerifier`` (same contract:
    :func:`chain_verifier`); tests compare the two on the same bytes."""

    def __init__(
        self,
        *,
        saga_id: str | None = None,
        anchors: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        self._buf = b""
        self._started = False
        self._ended = False
        self._scope = saga_id
        self._anchors = dict(anchors or {})
        self._current: _Saga | None = None
        self._last: bytes | None = None

    def _open(self, saga_id: str) -> _Saga:
        after_seq, after_hash = self._anchors.get(saga_id, (0, GENESIS_HASH))
        return _Saga(saga_id, after_seq, after_hash)

    def feed(self, chunk: bytes) -> list[VerdictTuple]:
        if self._ended:
            if not chunk:
                return []
            raise _bad("bytes after the trailer")
        data = self._buf + chunk
        at = 0
        out: list[VerdictTuple] = []
        if not self._started:
            if len(data) < 19:
                self._buf = data
                return out
            if data[:11] != SIGNATURE:
                raise _bad("the signature is missing")
            (extension,) = _I32(data, 15)
            if extension < 0:
                raise _bad("negative header extension")
            if len(data) < 19 + extension:
                self._buf = data
                return out
            at = 19 + extension
            self._started = True
        size = len(data)
        while size >= at + 2:
            (count,) = _I16(data, at)
            if count == -1:
                self._ended = True
                at += 2
                if at != size:
                    raise _bad("bytes after the trailer")
                break
            if count != _COLUMNS:
                raise _bad(f"a row has {count} columns, not {_COLUMNS}")
            p = at + 2
            row: list[bytes | None] = []
            for _ in range(_COLUMNS):
                if size < p + 4:
                    break
                (length,) = _I32(data, p)
                p += 4
                if length < -1:
                    raise _bad("negative field length")
                if length == -1:
                    row.append(None)
                    continue
                if size < p + length:
                    break
                row.append(data[p : p + length])
                p += length
            if len(row) < _COLUMNS:
                break
            at = p
            self._row(row, out)
        self._buf = data[at:]
        return out

    def _row(self, row: list[bytes | None], out: list[VerdictTuple]) -> None:
        saga = row[0]
        if saga is None:
            raise _bad("a saga id is null")
        seq_raw, at_raw = row[1], row[9]
        if seq_raw is None or len(seq_raw) != 8:
            raise _bad("column 2 is not a bigint")
        if at_raw is None or len(at_raw) != 8:
            raise _bad("column 10 is not a bigint")
        key = saga if self._scope is None else self._scope.encode("utf-8")
        current = self._current
        if current is None or current.id_bytes != key:
            try:
                saga_id = key.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _bad("a saga id is not UTF-8") from exc
            if self._last is not None and self._last >= key:
                raise ValueError(
                    f"rows are not in chain order: saga {saga_id!r} after {self._last.decode()!r}"
                )
            if current is not None:
                out.append(current.verdict())
            self._last = key
            current = self._current = self._open(saga_id)
        current.check(row, _I64(seq_raw)[0], _I64(at_raw)[0])

    def finish(self) -> list[VerdictTuple]:
        if not self._ended and (self._started or self._buf):
            raise _bad("the stream ends before its trailer")
        if self._current is not None:
            done, self._current = self._current, None
            return [done.verdict()]
        if self._scope is not None:
            scope, self._scope = self._scope, None
            return [self._open(scope).verdict()]
        return []
