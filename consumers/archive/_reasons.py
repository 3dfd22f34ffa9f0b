"""Why a saga, a signing round or a retention record fails the audit."""

from __future__ import annotations

import enum

from sagacity.chain import BreakReason
from sagacity.chain._grammar import GrammarRule
from sagacity.privacy._withheld import FORGED_ERASURE


class AuditReason(enum.StrEnum):
    """Why a saga fails the audit: a chain break (docs/adr/0002), a checkpoint or head finding,
    or what its chain says (docs/adr/0017): an impossible event of the saga grammar
    (:class:`~sagacity.chain._grammar.GrammarRule`, ``grammar:*``) or data withheld."""

    WRONG_GENESIS = BreakReason.WRONG_GENESIS.value
    GAP = BreakReason.GAP.value
    REORDERED = BreakReason.REORDERED.value
    BROKEN_LINK = BreakReason.BROKEN_LINK.value
    EDITED = BreakReason.EDITED.value
    FOREIGN_SAGA = BreakReason.FOREIGN_SAGA.value
    TRUNCATED = "truncated"
    """The archive ends below a signed checkpoint (or below its own recorded head)."""
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    """A signed checkpoint's hash differs from the archived entry at that seq: rewritten."""
    BAD_SIGNATURE = "bad_signature"
    """A checkpoint's signature does not verify: the checkpoint was altered or forged."""
    UNKNOWN_KEY = "unknown_key"
    """A checkpoint is signed by a key that is not trusted."""
    FORGED_ANCHOR = "forged_anchor"
    """The saga's retention anchor is not a leaf of a validly signed retention record."""
    BEYOND_HEAD = "beyond_head"
    """Archived rows go past the head the archiver recorded (or no head is recorded): they
    were written by something other than the archiver."""
    HEAD_MISMATCH = "head_mismatch"
    """The chain ends at the recorded head's seq with another hash than the one recorded."""
    UNSIGNED = "unsigned"
    """No checkpoint covers the saga's newest events: a failure only when signatures are
    required (``require_signed``); otherwise counted, not failed."""
    WITHHELD = "withheld"
    """A form-2 event holds a data field only as its commitment (its opening is missing) and
    the saga's chain records no ``ERASED`` that counts: the data was withheld, not erased."""
    FORGED_ERASURE = FORGED_ERASURE
    """An ``ERASED`` on the chain that no pinned operator key signed (or, with none pinned,
    that carries no operator signature): it does not count (docs/adr/0027)."""
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
