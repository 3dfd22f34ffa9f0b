"""The streams an archive audit merges, saga by saga, in saga id order.

Four streams ordered by saga id (the chains' rows or their bulk verdicts, checkpoints,
retention anchors, heads) are merged so memory holds one saga at a time however large the
archive.  The rows go in bulk blocks read on a second reader of the audit's snapshot (the
store's, ``ChainBlocks``) into the bulk verifier (:func:`bulk_verdicts`); with the compiled module
the merge itself runs there (:func:`merged_audits`), handing back every saga it does not pass
to the Python path.  Otherwise the Python merge (:func:`merged_by_saga`) runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from sagacity.chain._fastverify import BatchVerdict, batch_verdict, chain_verifier
from sagacity.consumers.archive._verdicts import SagaAudit
from sagacity.ports import RowBatches

_T = TypeVar("_T")


def fetched(cursor: RowBatches, size: int) -> Iterator[Sequence[Any]]:
    """The rows of a stream, ``size`` a fetch (one call per fetch, not per row)."""
    while rows := cursor.fetchmany(size):
        yield from rows


def grouped(cursor: Iterator[Sequence[Any]]) -> Iterator[tuple[str, list[Sequence[Any]]]]:
    current: str | None = None
    group: list[Sequence[Any]] = []
    for row in cursor:
        if row[0] != current:
            if current is not None:
                yield current, group
            current, group = row[0], []
        group.append(row)
    if current is not None:
        yield current, group


def merged_by_saga(
    streams: Sequence[Iterator[tuple[str, Any]]],
) -> Iterator[tuple[str, list[Any]]]:
    """Each saga id of ``streams`` (each ordered by saga id, one item per saga) with the item
    of every stream for it (``None`` where a stream has none), in saga id order."""
    current: list[tuple[str, Any] | None] = [next(s, None) for s in streams]
    while any(c is not None for c in current):
        saga = min(c[0] for c in current if c is not None)
        parts: list[Any] = []
        for i, c in enumerate(current):
            if c is not None and c[0] == saga:
                parts.append(c[1])
                current[i] = next(streams[i], None)
            else:
                parts.append(None)
        yield saga, parts


def merged_audits(
    auditor: Any,
    blocks: Iterable[bytes],
    *,
    checkpoints: RowBatches,
    heads: RowBatches,
    fetch: int,
    anchors: Mapping[str, tuple[int, str]],
    anchor_rows: Mapping[str, Sequence[Any]],
    judge_back: Callable[..., SagaAudit],
) -> Generator[SagaAudit]:
    """Every saga's audit from the compiled merge (``sagacity_native.ChainAuditor``): the rows
    streamed in ``blocks``, checkpoints and heads a fetch at a time.  The sagas it judges come back
    as a few fields; the others, with what was read for them, go to ``judge_back`` (the Python
    path, which explains every finding)."""
    merged = merged_told(
        auditor,
        blocks,
        checkpoints=checkpoints,
        heads=heads,
        fetch=fetch,
        anchors=anchors,
        anchor_rows=anchor_rows,
        judge_back=judge_back,
    )
    with contextlib.closing(merged):
        for audit, _clean in merged:
            yield audit


def merged_told(
    auditor: Any,
    blocks: Iterable[bytes],
    *,
    checkpoints: RowBatches,
    heads: RowBatches,
    fetch: int,
    anchors: Mapping[str, tuple[int, str]],
    anchor_rows: Mapping[str, Sequence[Any]],
    judge_back: Callable[..., _T],
) -> Generator[tuple[SagaAudit | _T, bool]]:
    """:func:`merged_audits`, each audit (a :class:`SagaAudit` judged by the compiled merge,
    or what ``judge_back`` gave) paired with whether its story is known clean: the auditor
    (made with ``stories=True``) read it on the same rows and found nothing, nor left anything
    to the Python grammar.  A saga the compiled merge judges has a clean story."""

    def drain() -> Iterator[tuple[SagaAudit | _T, bool]]:
        while True:
            out, need_checkpoints, need_heads = auditor.take()
            for t in out:
                if t[1]:
                    audit = SagaAudit(
                        saga_id=t[0],
                        ok=True,
                        events=t[2],
                        head_seq=t[3],
                        head_hash=t[4],
                        checkpoints=t[5],
                        signed_seq=t[6],
                        unsigned=t[7],
                    )
                    yield audit, True
                else:
                    saga, verdict, cps, head = t[0], t[2], t[3], t[4]
                    anchor = anchor_rows.get(saga)
                    back = judge_back(
                        saga,
                        None if verdict is None else batch_verdict(verdict, anchors),
                        [],
                        cps or None,
                        None if anchor is None else [anchor],
                        head or None,
                    )
                    yield back, len(t) > 5 and t[5]
            if not (need_checkpoints or need_heads):
                return
            if need_checkpoints:
                auditor.add_checkpoints(checkpoints.fetchmany(fetch))
            if need_heads:
                auditor.add_heads(heads.fetchmany(fetch))

    for block in blocks:
        auditor.feed(block)
        yield from drain()
    auditor.finish()
    yield from drain()


def bulk_verdicts(
    blocks: Iterable[bytes], *, anchors: Mapping[str, tuple[int, str]]
) -> Generator[tuple[str, BatchVerdict]]:
    """The bulk verifier's verdicts on the rows' bulk blocks, by saga id order."""
    verifier = chain_verifier(anchors=anchors)
    for block in blocks:
        for verdict in verifier.feed(block):
            yield verdict.saga_id, verdict
    for verdict in verifier.finish():
        yield verdict.saga_id, verdict
