"""The claims of the approvals console's notices: :class:`NoticeClaims`.

The notifier (``sagacity.consumers.approvals.console``) claims each notice once before it
sends it, so replicas and restarts do not repeat it; the claim is kept by the notice's kind
(or the kind it is claimed under), saga and sequence number.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class NoticeClaims(Protocol):
    """Where the notifier claims its notices."""

    def migrate(self) -> None:
        """Create the table if it does not exist (safe on every start)."""
        ...

    def claim(self, kind: str, saga_id: str, seq: int, *, now_us: int) -> bool:
        """Claim the notice ``kind`` of ``saga_id``'s step ``seq`` at ``now_us``: ``True`` for
        the first claimer only, ``False`` for every claim after it (any replica's)."""
        ...
