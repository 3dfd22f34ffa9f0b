"""The audit's compiled merge (``sagacity_native.ChainAuditor``) against the Python merge it
replaces: on random archives (chains intact or edited, continuing retention anchors or not,
checkpoints that agree, disagree, lie past the head, belong to failed rounds or were signed
on their own, recorded heads that agree or not, sagas with no rows) every saga's audit is the
one the Python path gives, whatever the block boundaries and fetch sizes; and the sagas it
judges itself are exactly those the Python path passes at once."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from test_fastverify import copy_binary

from sagacity.chain import _fastverify, link
from sagacity.chain._fastverify import batch_verdict, chain_verifier
from sagacity.consumers.archive import (
    RetentionAudit,
    SagaAudit,
    _auditstream,
    _judging,
)
from sagacity.consumers.archive._reasons import AuditReason
from sagacity.consumers.archive._roundaudit import RoundAudit
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry

pytestmark = pytest.mark.skipif(
    _fastverify.NATIVE_AUDITOR is None,
    reason="the compiled module is off (SAGACITY_NATIVE=0) or not installed",
)

FAILED_ROUND = 3
FORGED_PARTITION = "side_effect_journal_2026_01"


def row_of(entry: JournalEntry) -> list[Any]:
    return [
        *(entry.saga_id, entry.seq, entry.event_type.value, entry.tool, entry.payload),
        *(entry.result, entry.error, entry.actor, json.dumps(dict(entry.attributes))),
        *(entry.recorded_at_us, entry.prev_hash, entry.hash),
    ]


def chain_of(saga_id: str, length: int, rng: random.Random) -> list[JournalEntry]:
    out, prev = [], GENESIS_HASH
    for seq in range(1, length + 1):
        draft = EntryDraft(
            saga_id=saga_id,
            event_type=EventType.SAGA_OPENED if seq == 1 else EventType.INTENT,
            tool=None if seq == 1 else "refund",
            payload=None if seq == 1 else f'{{"n":{rng.randrange(1000)}}}',
            attributes={"ref_seq": str(seq - 1)} if seq > 1 else {},
            recorded_at_us=1_780_000_000_000_000 + seq,
        )
        entry = link(draft, seq=seq, prev_hash=prev)
        prev = entry.hash
        out.append(entry)
    return out


class Archive:
    """A random archive's four sources, as the audit's queries return them."""

    def __init__(self, seed: int, sagas: int = 60) -> None:
        rng = random.Random(seed)
        self.rows: list[list[Any]] = []
        self.checkpoints: list[tuple[Any, ...]] = []
        self.heads: list[tuple[Any, ...]] = []
        self.anchor_rows: dict[str, tuple[Any, ...]] = {}
        ids = [f"saga-{i:03d}" for i in range(sagas)] + ["é✓", "𝄞-saga", "Z"]
        for saga in sorted(ids, key=str.encode):
            chain = chain_of(saga, rng.randrange(1, 7), rng)
            start = 0
            if rng.random() < 0.2 and len(chain) > 1:  # retention removed the first links
                start = rng.randrange(1, len(chain))
                partition = FORGED_PARTITION if rng.random() < 0.2 else "side_effect_journal_ok"
                anchor = chain[start - 1]
                self.anchor_rows[saga] = (saga, anchor.seq, anchor.hash, partition)
            kept = chain[start:]
            shape = rng.random()
            rows = [row_of(e) for e in kept]
            if shape < 0.08:
                rows = []  # no rows: only checkpoints, a head or an anchor name the saga
            elif shape < 0.15:
                rows[rng.randrange(len(rows))][4] = "edited"
            self.rows += rows
            head_seq, head_hash = chain[-1].seq, chain[-1].hash
            for _ in range(rng.choice([0, 1, 1, 2, 3])):
                entry = rng.choice(chain)
                seq, hash_ = entry.seq, entry.hash
                round_id: int | None = rng.choice([1, 2, 2, 4])
                damage = rng.random()
                if damage < 0.05:
                    hash_ = "f" * 64
                elif damage < 0.1:
                    seq = head_seq + 1
                elif damage < 0.15:
                    round_id = FAILED_ROUND
                elif damage < 0.2:
                    round_id = None  # signed on its own (archives before rounds)
                elif damage < 0.25:
                    seq = 0 if start == 0 else start
                    hash_ = GENESIS_HASH if start == 0 else chain[start - 1].hash
                self.checkpoints.append(
                    (saga, seq, hash_, 1_780_000_000_000_000, "k", "sig", round_id, 0)
                )
            head = rng.random()
            if head < 0.05:
                continue  # no recorded head
            if head < 0.1:
                head_seq -= 1
            elif head < 0.15:
                head_hash = head_hash.upper()
            elif head < 0.2:
                head_hash = "0" * 64
            self.heads.append((saga, head_seq, head_hash))

    @property
    def anchors(self) -> dict[str, tuple[int, str]]:
        return {k: (int(r[1]), str(r[2])) for k, r in self.anchor_rows.items()}

    def judge_back(
        self,
        saga: str,
        verdict: _fastverify.BatchVerdict | None,
        rows: Sequence[Sequence[Any]],
        cps: Sequence[Sequence[Any]] | None,
        anchors: Sequence[Sequence[Any]] | None,
        heads: Sequence[Sequence[Any]] | None,
    ) -> SagaAudit:
        """The Python path's audit of one saga (``_judging.audit_one``)."""
        return _judging.audit_one(
            None,  # type: ignore[arg-type]  # no saga refers (every row is an entry)
            saga,
            verdict=verdict,
            rows=rows,
            cps=cps,
            anchors=anchors,
            heads=heads,
            keys={},
            rounds=RoundAudit(failed={FAILED_ROUND: (AuditReason.BAD_SIGNATURE, "round 3")}),
            records=RetentionAudit(failed={FORGED_PARTITION: "forged"}),
            reference=False,
        )

    def python_merge(self) -> list[SagaAudit]:
        """Every saga's audit by the Python merge (its verdicts from the Python twin)."""
        verifier = chain_verifier(anchors=self.anchors, native=False)
        verdicts = {v.saga_id: v for v in verifier.feed(copy_binary(self.rows))}
        verdicts.update((v.saga_id, v) for v in verifier.finish())
        cps: dict[str, list[tuple[Any, ...]]] = {}
        for c in self.checkpoints:
            cps.setdefault(c[0], []).append(c)
        heads = {h[0]: [h] for h in self.heads}
        sagas = {*verdicts, *cps, *heads, *self.anchor_rows}
        return [
            self.judge_back(
                saga,
                verdicts.get(saga),
                [],
                cps.get(saga),
                [self.anchor_rows[saga]] if saga in self.anchor_rows else None,
                heads.get(saga),
            )
            for saga in sorted(sagas, key=str.encode)
        ]

    def auditor(self) -> Any:
        assert _fastverify.NATIVE_AUDITOR is not None
        return _fastverify.NATIVE_AUDITOR(
            anchors=self.anchors,
            failed_rounds={FAILED_ROUND},
            refer={k for k, r in self.anchor_rows.items() if r[3] == FORGED_PARTITION},
        )


class Fetches:
    """A server cursor's ``fetchmany`` over rows in memory."""

    def __init__(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self._rows = list(rows)
        self.fetches = 0

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        self.fetches += 1
        out, self._rows = self._rows[:size], self._rows[size:]
        return out


def blocks_of(data: bytes, rng: random.Random) -> Iterator[bytes]:
    at = 0
    while at < len(data):
        step = rng.choice([1, 17, 300, 4096, 1 << 20])
        yield data[at : at + step]
        at += step


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("fetch", [1, 2, 7, 5_000])
def test_the_compiled_merge_gives_the_python_merges_audits(seed: int, fetch: int) -> None:
    archive = Archive(seed)
    expected = archive.python_merge()
    handed_back: list[str] = []

    def judge_back(saga: str, *rest: Any) -> SagaAudit:
        handed_back.append(saga)
        return archive.judge_back(saga, *rest)

    got = list(
        _auditstream.merged_audits(
            archive.auditor(),
            blocks_of(copy_binary(archive.rows), random.Random(seed)),
            checkpoints=Fetches(archive.checkpoints),  # type: ignore[arg-type]
            heads=Fetches(archive.heads),  # type: ignore[arg-type]
            fetch=fetch,
            anchors=archive.anchors,
            anchor_rows=archive.anchor_rows,
            judge_back=judge_back,
        )
    )
    assert got == expected
    # The compiled merge judges the sagas the Python path passes at once, and only those.
    for audit in expected:
        if audit.saga_id in handed_back:
            continue
        assert audit.ok
    judged = [a for a in expected if a.saga_id not in handed_back]
    assert len(judged) > len(expected) // 3
    assert {a.saga_id for a in expected if not a.ok} <= set(handed_back)


def test_every_kind_of_saga_is_met() -> None:
    """The random archives above hold every finding the merge must hand back."""
    reasons = {a.reason for seed in range(12) for a in Archive(seed).python_merge()}
    assert reasons >= {
        None,
        AuditReason.EDITED,
        AuditReason.CHECKPOINT_MISMATCH,
        AuditReason.TRUNCATED,
        AuditReason.BEYOND_HEAD,
        AuditReason.HEAD_MISMATCH,
        AuditReason.BAD_SIGNATURE,
        AuditReason.UNKNOWN_KEY,
        AuditReason.FORGED_ANCHOR,
    }


def test_memory_holds_a_fetch_not_the_archive() -> None:
    # Checkpoints and heads are fetched as the stream reaches them, not read ahead whole.
    archive = Archive(5, sagas=400)
    checkpoints, heads = Fetches(archive.checkpoints), Fetches(archive.heads)
    merged = _auditstream.merged_audits(
        archive.auditor(),
        iter([copy_binary(archive.rows)[:4096]]),  # the first few sagas' rows only
        checkpoints=checkpoints,  # type: ignore[arg-type]
        heads=heads,  # type: ignore[arg-type]
        fetch=10,
        anchors=archive.anchors,
        anchor_rows=archive.anchor_rows,
        judge_back=archive.judge_back,
    )
    next(merged)
    assert checkpoints.fetches <= 3
    assert heads.fetches <= 3
    merged.close()


def test_sources_out_of_saga_order_are_refused() -> None:
    archive = Archive(1)
    auditor = archive.auditor()
    with pytest.raises(ValueError, match="checkpoint rows are not in saga id order"):
        auditor.add_checkpoints(
            [("b", 1, "h", 0, "k", "s", 1, 0), ("a", 1, "h", 0, "k", "s", 1, 0)]
        )
    with pytest.raises(ValueError, match="head rows are not in saga id order"):
        auditor.add_heads([("b", 1, "h"), ("a", 1, "h")])
    with pytest.raises(TypeError, match="saga id is not text"):
        auditor.add_heads([(None, 1, "h")])
    with pytest.raises(ValueError, match="signature is missing"):
        auditor.feed(b"saga_id\tseq\n" * 3)
    unfinished = archive.auditor()
    unfinished.feed(copy_binary(archive.rows)[:-5])
    with pytest.raises(ValueError, match="ends before its trailer"):
        unfinished.finish()


def test_a_row_that_is_no_entry_is_handed_back() -> None:
    # The verifier cannot judge such a saga; the merge hands it back (the audit then reads its
    # rows again for the reference path), with its checkpoints and head.
    chain = chain_of("s", 2, random.Random(0))
    rows = [row_of(e) for e in chain]
    rows[1][8] = '{"k": 1}'  # an attribute that is not text
    assert _fastverify.NATIVE_AUDITOR is not None
    auditor = _fastverify.NATIVE_AUDITOR(anchors={}, failed_rounds=set(), refer=set())
    auditor.feed(copy_binary(rows))
    auditor.finish()
    auditor.add_checkpoints([("s", 1, chain[0].hash, 0, "k", "s", 1, 0)])
    auditor.add_checkpoints([])
    auditor.add_heads([("s", 2, chain[1].hash)])
    auditor.add_heads([])
    (out,), need_checkpoints, need_heads = auditor.take()
    assert (need_checkpoints, need_heads) == (False, False)
    saga, judged, verdict, cps, heads = out
    assert (saga, judged) == ("s", False)
    assert batch_verdict(verdict, {}).refer
    assert cps == [("s", 1, chain[0].hash, 0, "k", "s", 1, 0)]
    assert heads == [("s", 2, chain[1].hash)]
