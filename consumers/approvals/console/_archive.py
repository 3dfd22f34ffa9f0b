"""The archive's word on a saga for the console: its audit verdict and its audit bundle."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

from sagacity.errors import UnknownSagaError
from sagacity.postgres import connect, mapped_errors


class ArchiveView:
    """Reads one archive database (``SAGACITY_ARCHIVE_DATABASE_URL``).

    Args:
        dsn: the archive's PostgreSQL.
    """

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn

    def _export(self, saga_id: str, out: Path) -> tuple[bool, str]:
        from sagacity.consumers.archive._export import export_bundle

        with (
            connect(self._dsn, timeout=5, action="cannot read the archive") as conn,
            mapped_errors("cannot read the archive"),
        ):
            audit = export_bundle(conn, saga_id, out)
        if audit.ok:
            return True, f"archive verifies {audit.events} events ({audit.checkpoints} signed)"
        return False, f"archive does NOT verify at seq {audit.bad_seq}: {audit.detail}"

    def verdict(self, saga_id: str) -> tuple[bool, str] | None:
        """``(ok, detail)`` of the archive's audit, ``None`` when it holds nothing of the saga."""
        with tempfile.TemporaryDirectory() as tmp:
            try:
                return self._export(saga_id, Path(tmp))
            except UnknownSagaError:
                return None

    def bundle(self, saga_id: str) -> bytes:
        """The audit bundle (``sagacity audit verify-bundle`` checks it) as a zip archive.

        Raises:
            UnknownSagaError: the archive holds nothing of the saga.
        """
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            self._export(saga_id, root)
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(root.rglob("*")):
                    if path.is_file():
                        archive.write(path, path.relative_to(root).as_posix())
            return buffer.getvalue()
