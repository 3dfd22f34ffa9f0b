"""What of a journal entry may leave a service: everything but the redaction salts.

A redacted field is journaled as its redaction key ``K_r`` (docs/adr/0019-erasure.md §5),
which hides the value only while its salt is secret: with the salt, a card number whose first
six and last four digits are known is found in a fraction of a second.  So the ``redaction``
attribute (the salts) and its commitment's opening never leave the approvals service — not in
the API's JSON, not on a console page, not in a bundle the console hands out.  The redaction
key itself stays: without its salt it is a hiding commitment, and it is part of the exact bytes
an approver is shown and signs.  A form-2 entry keeps the attribute's commitment, so the chain
still verifies, the attribute read as withheld (as an erased field is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sagacity.privacy._redaction import REDACTION_ATTRIBUTE

WITHHELD = (REDACTION_ATTRIBUTE,)
"""Data attributes never shown outside the service."""


def disclosed(data: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's JSON form (``JournalEntry.to_dict``, an archive bundle's line) without what
    :data:`WITHHELD` names: the attributes and their commitment openings (``salts``)."""
    out = dict(data)
    for key in ("attributes", "salts"):
        held = out.get(key)
        if isinstance(held, Mapping) and any(name in held for name in WITHHELD):
            out[key] = {k: v for k, v in held.items() if k not in WITHHELD}
    return out
