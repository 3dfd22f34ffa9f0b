"""How a tool's effect can be put back, which decides gating and compensation."""

from __future__ import annotations

import enum


class Reversibility(enum.StrEnum):
    """Is there a call that puts the world back?

    ``READ``: nothing happened; journaled, never gated, never compensated.
    ``REVERSIBLE``: a perfect undo exists; compensated on failure.
    ``COMPENSATABLE`` (the default): an imperfect undo (a correction); compensated on failure.
    ``IRREVERSIBLE``: no undo; the call is gated behind one human signature.
    ``PRIVILEGED``: privilege escalation; gated behind two signatures from distinct approvers.
    """

    READ = "READ"
    REVERSIBLE = "REVERSIBLE"
    COMPENSATABLE = "COMPENSATABLE"
    IRREVERSIBLE = "IRREVERSIBLE"
    PRIVILEGED = "PRIVILEGED"

    @property
    def signatures_required(self) -> int:
        """Human signatures needed before the call runs (0 when it is not gated)."""
        return {Reversibility.IRREVERSIBLE: 1, Reversibility.PRIVILEGED: 2}.get(self, 0)

    @property
    def gated(self) -> bool:
        """The call waits for human approval instead of running."""
        return self.signatures_required > 0

    @property
    def undoable(self) -> bool:
        """A compensation may be declared for the tool (``by=`` or a returned undo)."""
        return self in (Reversibility.REVERSIBLE, Reversibility.COMPENSATABLE)
