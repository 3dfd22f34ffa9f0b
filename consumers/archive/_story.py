"""What each archived saga's chain says, checked beside its hashes: the saga grammar
(:mod:`sagacity.chain._grammar`) and the data it holds or withholds
(:mod:`sagacity.privacy._withheld`).

``verify`` judges a chain's links, checkpoints and head first (``_audit``); a saga that passes
them is then judged by its story, read from the same rows the chain walk read (one read of the
archive): with the compiled module the grammar's per-row step runs beside the chain check
(``native/src/grammar.rs``, the twin of ``_grammar.py`` held to it by the vectors) and a saga it
does not find clean is told here from its rows (:func:`story_rows`, :func:`storied`).  The
first finding of its story fails it: an impossible event (``grammar:*``), then data withheld
(``withheld``: a form-2 opening missing with no ``ERASED`` that counts on the chain), then an
``ERASED`` no operator signed (``forged_erasure``, docs/adr/0027-operator-signatures.md).
``audit watch`` reads the stories of what a signing round signed (:func:`impossible_signed`,
through the port ``SignedStories``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sagacity.chain._grammar import GrammarFinding, Row, SagaGrammar
from sagacity.consumers.archive._reasons import AuditReason
from sagacity.ports import SignedStories
from sagacity.privacy._withheld import ERASURE_EVENT, DataAccount
from sagacity.signing._operator_signature import OperatorVerifier

_NONE: Mapping[str, str] = MappingProxyType({})
_ERASED = ERASURE_EVENT.value


def impossible_signed(
    stories: SignedStories,
    round_ids: Sequence[int],
    *,
    operator: OperatorVerifier | None = None,
) -> list[SagaStory]:
    """The sagas the signing rounds ``round_ids`` signed whose chain, up to the highest seq
    they signed, tells an impossible story (each with its grammar's findings) or holds an
    ``ERASED`` that does not count (``operator``: the pinned operator keys).  Every row held
    up to that seq is read in seq order; a chain the rounds did not sign as held is
    ``verify``'s to report, not this."""
    with stories.signed_story_rows(round_ids) as rows:
        return [
            story
            for story in read_stories(rows, operator=operator)
            if story.findings or story.data.forged
        ]


@dataclass(kw_only=True)
class SagaStory:
    """One saga's story as read: its grammar's findings and its data account."""

    saga_id: str
    findings: list[GrammarFinding] = field(default_factory=list)
    data: DataAccount = field(default_factory=DataAccount)
    erased: bool = False
    """Its chain counts an erasure."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ErasureRow:
    """An archived ``ERASED`` row, as its operator signature covers it."""

    saga_id: str
    seq: int
    event_type: str
    prev_hash: str
    actor: str | None
    recorded_at_us: int
    attributes: Mapping[str, str]


def read_stories(
    rows: Iterable[Sequence[Any]], *, operator: OperatorVerifier | None = None
) -> Iterator[SagaStory]:
    """Each saga's story from the rows of the store's story query, in their order.

    A saga's chain is judged from its first row held (a retention anchor before it leaves
    what came earlier unjudged).  Rows that are not entries (a chain the audit fails anyway)
    are read as best they can be; the audit reports them, not this.  ``operator``: the pinned
    operator keys an ``ERASED`` must be signed with to count (:func:`sagacity.privacy._withheld.
    erasure_verdict`).
    """
    saga: str | None = None
    grammar = SagaGrammar()
    data = DataAccount(operator=operator)
    for row in rows:
        saga_id, seq, event_type, tool, actor, attributes_text, digest, ended = row[:8]
        prev_hash, recorded_at_us, c, s = row[8:12]
        if saga_id != saga:
            if saga is not None:
                yield _story(saga, grammar, data)
            saga = saga_id
            grammar = SagaGrammar(after_seq=max(int(seq) - 1, 0))
            data = DataAccount(operator=operator)
        attributes = _NONE if attributes_text == "{}" else json_map(attributes_text)
        grammar.feed(Row(seq, event_type, tool, actor, attributes, digest, ended))
        if event_type == _ERASED:
            data.erasure(
                ErasureRow(
                    saga_id=saga_id,
                    seq=int(seq),
                    event_type=event_type,
                    prev_hash=prev_hash or "",
                    actor=actor,
                    recorded_at_us=int(recorded_at_us or 0),
                    attributes=attributes,
                )
            )
        if c is not None:  # form 2: data to account
            data.feed(seq, event_type, attributes, json_map(c), json_map(s))
    if saga is not None:
        yield _story(saga, grammar, data)


def _story(saga: str, grammar: SagaGrammar, data: DataAccount) -> SagaStory:
    return SagaStory(saga_id=saga, findings=grammar.findings, data=data, erased=data.erasures > 0)


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def json_map(text: Any) -> Mapping[str, str]:
    """A jsonb column's text as a map of its text values (anything else: empty)."""
    if not text or text == "{}":
        return _NONE
    try:
        value, _end = _scan(text, 0)  # the server's own JSON: no surrounding whitespace
    except (StopIteration, ValueError, TypeError):
        return _NONE
    if type(value) is not dict:
        return _NONE
    return {k: v for k, v in value.items() if type(v) is str}


def story_failure(
    story: SagaStory, *, allow_unopened: bool = False
) -> tuple[AuditReason, int, str, str | None] | None:
    """The first finding of a saga's story: (reason, seq, detail, writer), or ``None``.

    ``allow_unopened``: the archive is known to store sealed events' commitments only (it
    ingests without the key-encryption key), so a missing opening is not reported withheld.
    """
    if story.findings:
        first = story.findings[0]
        return AuditReason(first.rule.value), first.seq, first.describe(), first.writer
    detail = story.data.describe_withheld()
    if detail is not None and not allow_unopened:
        withheld = story.data.withheld
        assert withheld is not None
        return AuditReason.WITHHELD, withheld[0], detail, None
    forged = story.data.describe_forged()
    if forged is not None:
        seq, _why, writer = story.data.forged[0]
        return AuditReason.FORGED_ERASURE, seq, forged, writer
    return None


def story_rows(rows: Iterable[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    """Rows of :data:`~sagacity.postgres.archive.ROW_COLUMNS` (with the form columns
    or without) as the store's story query selects them, for :func:`read_stories`.

    The grammar reads a payload only on a request and its resume, and a result only on an
    end, and compares payloads only for equality: each row's own travel here, not digests.
    """
    for r in rows:
        form2 = len(r) > 12 and r[12] == 2
        yield (
            *(r[0], r[1], r[2], r[3], r[7], r[8], r[4], r[5], r[10], r[9]),
            r[13] if form2 else None,
            r[14] if form2 else None,
        )


def storied(audit: Any, story: SagaStory | None, *, allow_unopened: bool = False) -> Any:
    """``audit`` (a ``SagaAudit`` whose chain passed) failed by its saga's ``story`` where the
    story has a finding; the story attached where it counts an erasure (erasures are counted
    from accepted chains)."""
    if story is None or not audit.ok:
        return audit
    failure = story_failure(story, allow_unopened=allow_unopened)
    if failure is not None:
        reason, seq, detail, writer = failure
        return dataclasses.replace(
            audit,
            ok=False,
            bad_seq=seq,
            reason=reason,
            detail=detail,
            writer=writer,
            unsigned=0,
            story=story,
        )
    if story.erased:
        return dataclasses.replace(audit, story=story)
    return audit
