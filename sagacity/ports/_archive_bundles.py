"""The archive's audit bundles as the approvals console reads them: :class:`ArchiveBundles`.

The console shows the archive's verdict on a saga and serves its audit bundle; the bundle is
written by the archive (``sagacity audit export`` writes the same one), the console only reads
it through this port, built outside the services (the ``serve approvals`` command) and handed
through :class:`~sagacity.ports.Dependencies`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class ArchiveBundles(Protocol):
    """Writes a saga's audit bundle from the archive."""

    def export(self, saga_id: str, out: Path) -> tuple[bool, str]:
        """Write the audit bundle of ``saga_id`` into directory ``out``; returns the archive's
        audit of it: ``(ok, detail)``, the detail a sentence for a person.

        Raises:
            UnknownSagaError: the archive holds nothing of the saga.
            PersistenceError: the archive could not be read.
        """
        ...
