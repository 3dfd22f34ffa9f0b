"""A continuous auditor of the log of signing rounds (``sagacity audit watch``).

The auditor keeps its own record of every round it has seen, outside the archive's database
(a JSON-lines file it alone writes).  Each pass it checks that the archive still holds the last
round it recorded, unchanged; then, for each newer round, its signature by a trusted key, its
link to the round before, and an RFC 9162 consistency proof from the last round of the log it
recorded, before recording it.  Other auditors' records (peers) and a witness are compared with
its own, so two different histories shown to two auditors are caught
(docs/adr/0015-round-log.md).  The sagas each newly recorded round signed are read against the
saga grammar (:mod:`sagacity.chain._grammar`): a round that signs an impossible story is an alert
named after the finding (``grammar:*``), as ``verify`` names it, and one holding an ``ERASED``
no pinned operator key signed is a ``forged_erasure`` alert; such an ``ERASED`` does not
record an erasure either (``erasure_unrecorded``, docs/adr/0027-operator-signatures.md).
"""

from __future__ import annotations

import enum
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sagacity.chain import BreakReason
from sagacity.chain._acceptance import ForkKind
from sagacity.chain._grammar import GrammarRule
from sagacity.consumers.archive._checkpoints import (
    FIRST_PREV_ROOT,
    LOG_ROUND_FORMAT,
    SignedRound,
    signature_valid,
)
from sagacity.consumers.archive._erasure import audit_erasures
from sagacity.consumers.archive._merkle import verify_consistency
from sagacity.consumers.archive._roundlog import (
    consistency_proof_between,
    round_by_id,
    round_from_dict,
    round_to_dict,
    rounds_after,
)
from sagacity.consumers.archive._story import impossible_signed
from sagacity.consumers.archive._witness import read as read_witness
from sagacity.errors import AuditorStateError, RoundLogError
from sagacity.ports import WatchedArchive
from sagacity.privacy._withheld import FORGED_ERASURE
from sagacity.signing._operator_signature import OperatorVerifier


class AlertReason(enum.StrEnum):
    """Why an auditor raises an alert."""

    FORK = ForkKind.FORK.value
    """A round differs from the one recorded (by this auditor, a peer or the witness)."""
    ROLLBACK = "rollback"
    """The archive no longer holds a round recorded earlier."""
    INCONSISTENT = "inconsistent"
    """A round's log does not extend the last one recorded (no consistency proof)."""
    BROKEN_LINK = BreakReason.BROKEN_LINK.value
    """A round's previous root is not the root of the round before it."""
    BAD_SIGNATURE = "bad_signature"
    """A round's signature does not verify."""
    UNKNOWN_KEY = "unknown_key"
    """A round is signed by a key that is not trusted."""
    ERASURE_UNRECORDED = "erasure_unrecorded"
    """A saga's data key was destroyed and, after a grace, its archived chain still holds no
    ``ERASED`` event that counts (docs/adr/0019-erasure.md §4)."""
    FORGED_ERASURE = FORGED_ERASURE
    """A round signed a saga whose chain holds an ``ERASED`` no pinned operator key signed
    (docs/adr/0027-operator-signatures.md)."""
    # A round signed a saga whose chain tells an impossible story (sagacity.chain._grammar).
    REF_FORWARD = GrammarRule.REF_FORWARD.value
    EXECUTED_WITHOUT_INTENT = GrammarRule.EXECUTED_WITHOUT_INTENT.value
    GATED_WITHOUT_REQUEST = GrammarRule.GATED_WITHOUT_REQUEST.value
    RESUME_WITHOUT_REQUEST = GrammarRule.RESUME_WITHOUT_REQUEST.value
    RESUMED_WITHOUT_APPROVAL = GrammarRule.RESUMED_WITHOUT_APPROVAL.value
    DECISION_WITHOUT_REQUEST = GrammarRule.DECISION_WITHOUT_REQUEST.value
    COMPENSATION_WITHOUT_REQUEST = GrammarRule.COMPENSATION_WITHOUT_REQUEST.value
    COMPENSATION_OF_NO_STEP = GrammarRule.COMPENSATION_OF_NO_STEP.value
    SETTLEMENT_WITHOUT_SUSPECT = GrammarRule.SETTLEMENT_WITHOUT_SUSPECT.value
    AFTER_END = GrammarRule.AFTER_END.value
    ERASED_WHILE_LIVE = GrammarRule.ERASED_WHILE_LIVE.value
    REPLAY_OF_NO_EFFECT = GrammarRule.REPLAY_OF_NO_EFFECT.value


@dataclass(frozen=True, kw_only=True)
class Alert:
    """One finding of the auditor."""

    reason: AlertReason
    round_id: int | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """The alert as JSON fields (a webhook's body)."""
        return {"alert": self.reason.value, "round_id": self.round_id, "detail": self.detail}


@dataclass(kw_only=True)
class WatchReport:
    """One pass of the auditor."""

    recorded: list[SignedRound] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    latest: SignedRound | None = None
    """The last round recorded, after this pass."""

    @property
    def ok(self) -> bool:
        """No alert."""
        return not self.alerts


class AuditorState:
    """An auditor's record: one JSON line per round seen, in round order, appended and synced.

    Keep it off the archive's host: it is what the archive is compared with.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def rounds(self) -> Iterator[SignedRound]:
        """Every round recorded, oldest first.

        Raises:
            AuditorStateError: the file cannot be read or a line is not a recorded round.
        """
        try:
            handle = self.path.open("r", encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as exc:
            raise AuditorStateError(f"cannot read {self.path}: {exc.strerror}") from exc
        with handle:
            previous = 0
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    signed = round_from_dict(json.loads(line))
                except ValueError as exc:
                    raise AuditorStateError(
                        f"{self.path}:{number} is not a recorded round: {exc}"
                    ) from exc
                if signed.round_id <= previous:
                    raise AuditorStateError(
                        f"{self.path}:{number}: round {signed.round_id} is out of order"
                    )
                previous = signed.round_id
                yield signed

    def last(self) -> tuple[SignedRound | None, SignedRound | None]:
        """The last round recorded, and the last round of the log recorded."""
        last = last_log = None
        for signed in self.rounds():
            last = signed
            if signed.format == LOG_ROUND_FORMAT:
                last_log = signed
        return last, last_log

    def append(self, signed: SignedRound) -> None:
        """Record one more round (synced before returning).

        Raises:
            AuditorStateError: the file cannot be written.
        """
        line = json.dumps(round_to_dict(signed), sort_keys=True) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise AuditorStateError(f"cannot write {self.path}: {exc.strerror}") from exc


def _same(a: SignedRound, b: SignedRound) -> bool:
    return (a.root.lower(), a.tree_size, a.prev_root.lower(), a.signature.lower()) == (
        b.root.lower(),
        b.tree_size,
        b.prev_root.lower(),
        b.signature.lower(),
    )


def _signature_alert(signed: SignedRound, keys: Mapping[str, bytes], where: str) -> Alert | None:
    public = keys.get(signed.key_id)
    if public is None:
        return Alert(
            reason=AlertReason.UNKNOWN_KEY,
            round_id=signed.round_id,
            detail=f"{where} round {signed.round_id} is signed by untrusted key {signed.key_id}",
        )
    if not signature_valid(public, signed):
        return Alert(
            reason=AlertReason.BAD_SIGNATURE,
            round_id=signed.round_id,
            detail=f"the signature of {where} round {signed.round_id} does not verify",
        )
    return None


def _consistency_alert(archive: WatchedArchive, old: SignedRound, new: SignedRound) -> Alert | None:
    """An alert unless the archive proves round ``new``'s log extends round ``old``'s."""
    assert old.tree_size is not None
    assert new.tree_size is not None
    try:
        proof = consistency_proof_between(archive, old, new)
    except RoundLogError as exc:
        proof, why = None, exc.message
    else:
        why = "the proof does not verify"
    if proof is not None and verify_consistency(
        old.tree_size, new.tree_size, bytes.fromhex(old.root), bytes.fromhex(new.root), proof
    ):
        return None
    return Alert(
        reason=AlertReason.INCONSISTENT,
        round_id=new.round_id,
        detail=(
            f"round {new.round_id} ({new.tree_size} heads) is not consistent with round "
            f"{old.round_id} ({old.tree_size} heads) recorded earlier: {why}; the log was "
            "rewritten"
        ),
    )


def watch_once(
    archive: WatchedArchive,
    state: AuditorState,
    *,
    keys: Mapping[str, bytes],
    peers: Sequence[AuditorState] = (),
    witness: str | None = None,
    limit: int = 10_000,
    erasure_grace_s: float | None = 900.0,
    operator: OperatorVerifier | None = None,
) -> WatchReport:
    """One pass: check the archive against ``state``, record its new rounds (up to ``limit``),
    compare with ``peers``' records and the ``witness``.  A round that raises an alert is not
    recorded, nor any after it.  Then each data key destroyed more than ``erasure_grace_s``
    ago whose saga's archived chain holds no ``ERASED`` event is an alert (an erasure in
    progress appends it within seconds); ``None``: not looked for.  ``operator``: the pinned
    operator keys an ``ERASED`` must be signed with to count (``None``: one with an operator
    signature counts unverified, :func:`sagacity.privacy._withheld.erasure_verdict`).

    Raises:
        AuditorStateError: a record cannot be read or written.
        WitnessError: the witness cannot be read.
        ArchiveSchemaError / PersistenceError: the database is not an archive or failed.
    """
    report = WatchReport()
    last, last_log = state.last()
    report.latest = last
    if last is not None:
        held = round_by_id(archive, last.round_id)
        if held is None:
            report.alerts.append(
                Alert(
                    reason=AlertReason.ROLLBACK,
                    round_id=last.round_id,
                    detail=f"the archive no longer holds round {last.round_id}, recorded "
                    f"earlier with root {last.root[:16]}…: signing rounds were removed",
                )
            )
        elif not _same(held, last):
            report.alerts.append(
                Alert(
                    reason=AlertReason.FORK,
                    round_id=last.round_id,
                    detail=f"round {last.round_id} was recorded with root {last.root[:16]}…; "
                    f"the archive now shows root {held.root[:16]}…",
                )
            )
    if not report.alerts:
        _record_new(archive, state, report, last, last_log, keys=keys, limit=limit)
        report.alerts.extend(_impossible_stories(archive, report.recorded, operator))
    for peer in peers:
        report.alerts.extend(_compare_peer(archive, state, peer))
    if witness is not None:
        report.alerts.extend(_check_witness(archive, state, witness, keys=keys))
    if erasure_grace_s is not None:
        report.alerts.extend(_unrecorded_erasures(archive, erasure_grace_s, operator))
    return report


def _impossible_stories(
    archive: WatchedArchive, recorded: Sequence[SignedRound], operator: OperatorVerifier | None
) -> list[Alert]:
    """An alert for each saga the newly recorded rounds signed whose chain tells an impossible
    story (its first finding), or holds an ``ERASED`` that does not count."""
    if not recorded:
        return []
    first, last = recorded[0].round_id, recorded[-1].round_id
    rounds = f"round {first}" if first == last else f"rounds {first}..{last}"
    alerts = []
    stories = impossible_signed(archive, [r.round_id for r in recorded], operator=operator)
    for story in stories:
        if story.findings:
            finding = story.findings[0]
            reason, seq, detail = AlertReason(finding.rule.value), finding.seq, finding.describe()
        else:
            forged = story.data.describe_forged()
            assert forged is not None
            withheld = story.data.describe_withheld()
            reason, seq = AlertReason.FORGED_ERASURE, story.data.forged[0][0]
            detail = forged + (f"; {withheld}" if withheld else "")
        alerts.append(
            Alert(
                reason=reason,
                round_id=last,
                detail=f"saga {story.saga_id!r}, signed in {rounds}: {reason.value} at "
                f"seq {seq}: {detail}",
            )
        )
    return alerts


def _unrecorded_erasures(
    archive: WatchedArchive, grace_s: float, operator: OperatorVerifier | None
) -> list[Alert]:
    erasures = audit_erasures(archive, operator=operator)
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
    return [
        Alert(
            reason=AlertReason.ERASURE_UNRECORDED,
            round_id=None,
            detail=f"saga {u.saga_id!r}: its data key was destroyed at {u.erased_at.isoformat()}"
            + (f" by {u.erased_by}" if u.erased_by else "")
            + " and its archived chain holds no ERASED event that counts",
        )
        for u in erasures.unrecorded
        if u.erased_at <= cutoff
    ]


def _record_new(
    archive: WatchedArchive,
    state: AuditorState,
    report: WatchReport,
    previous: SignedRound | None,
    last_log: SignedRound | None,
    *,
    keys: Mapping[str, bytes],
    limit: int,
) -> None:
    for signed in rounds_after(archive, previous.round_id if previous else 0, limit=limit):
        alert = _signature_alert(signed, keys, "the archive's")
        expected = previous.root if previous is not None else FIRST_PREV_ROOT
        if alert is None and signed.prev_root.lower() != expected.lower():
            alert = Alert(
                reason=AlertReason.BROKEN_LINK,
                round_id=signed.round_id,
                detail=f"round {signed.round_id} does not follow "
                + (f"round {previous.round_id}" if previous else "the start of the log")
                + " (its previous root differs)",
            )
        if alert is None and signed.format == LOG_ROUND_FORMAT and last_log is not None:
            alert = _consistency_alert(archive, last_log, signed)
        if alert is not None:
            report.alerts.append(alert)
            return
        state.append(signed)
        report.recorded.append(signed)
        report.latest = previous = signed
        if signed.format == LOG_ROUND_FORMAT:
            last_log = signed


def _compare_peer(archive: WatchedArchive, state: AuditorState, peer: AuditorState) -> list[Alert]:
    """Every round ``peer`` recorded must be the one this auditor recorded with that id, or
    (one it did not record) the one the archive holds: a peer shown another history differs,
    and a round a peer saw that the archive no longer holds was removed."""
    alerts: list[Alert] = []
    own = state.rounds()
    mine = next(own, None)
    for theirs in peer.rounds():
        while mine is not None and mine.round_id < theirs.round_id:
            mine = next(own, None)
        if mine is not None and mine.round_id == theirs.round_id:
            if not _same(mine, theirs):
                alerts.append(
                    Alert(
                        reason=AlertReason.FORK,
                        round_id=theirs.round_id,
                        detail=f"auditor record {peer.path} holds round {theirs.round_id} with "
                        f"root {theirs.root[:16]}…; this auditor recorded "
                        f"{mine.root[:16]}…: two histories were shown",
                    )
                )
                return alerts
            continue
        held = round_by_id(archive, theirs.round_id)
        if held is None:
            alerts.append(
                Alert(
                    reason=AlertReason.ROLLBACK,
                    round_id=theirs.round_id,
                    detail=f"auditor record {peer.path} holds round {theirs.round_id}, which "
                    "the archive does not hold: signing rounds were removed",
                )
            )
            return alerts
        if not _same(held, theirs):
            alerts.append(
                Alert(
                    reason=AlertReason.FORK,
                    round_id=theirs.round_id,
                    detail=f"auditor record {peer.path} holds round {theirs.round_id} with root "
                    f"{theirs.root[:16]}…; the archive holds {held.root[:16]}…: two histories "
                    "were shown",
                )
            )
            return alerts
    return alerts


def _check_witness(
    archive: WatchedArchive, state: AuditorState, witness: str, *, keys: Mapping[str, bytes]
) -> list[Alert]:
    witnessed = read_witness(witness)
    if witnessed is None:
        return []
    alert = _signature_alert(witnessed, keys, "the witnessed")
    if alert is not None:
        return [alert]
    held = round_by_id(archive, witnessed.round_id)
    if held is None:
        return [
            Alert(
                reason=AlertReason.ROLLBACK,
                round_id=witnessed.round_id,
                detail=f"the archive does not hold round {witnessed.round_id}, which the "
                f"witness {witness} published",
            )
        ]
    if not _same(held, witnessed):
        return [
            Alert(
                reason=AlertReason.FORK,
                round_id=witnessed.round_id,
                detail=f"the witness {witness} published round {witnessed.round_id} with root "
                f"{witnessed.root[:16]}…; the archive holds {held.root[:16]}…",
            )
        ]
    recorded = next((r for r in state.rounds() if r.round_id == witnessed.round_id), None)
    if recorded is not None and not _same(recorded, witnessed):
        return [
            Alert(
                reason=AlertReason.FORK,
                round_id=witnessed.round_id,
                detail=f"the witness {witness} published round {witnessed.round_id} with root "
                f"{witnessed.root[:16]}…; this auditor recorded {recorded.root[:16]}…",
            )
        ]
    return []


def post_alerts(url: str, alerts: Sequence[Alert], *, timeout: float = 10) -> str | None:
    """POST each alert as JSON to ``url``; the error text if one could not be delivered."""
    if not url.startswith(("http://", "https://")):
        return f"the webhook {url!r} is not an http(s) URL"
    for alert in alerts:
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
            url,
            data=json.dumps(alert.to_dict()).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
                answer.read()
        except (urllib.error.URLError, OSError) as exc:
            return f"the webhook {url} refused the alert: {exc}"
    return None
