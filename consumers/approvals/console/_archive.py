"""The archive's word on a saga for the console: its audit verdict and its audit bundle."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
import zipfile
from pathlib import Path

from sagacity.errors import UnknownSagaError
from sagacity.ports import ArchiveBundles
from sagacity.privacy._disclosure import disclosed


class ArchiveView:
    """The archive's bundles as the console shows them.

    Args:
        bundles: the archive's audit bundles (:class:`~sagacity.ports.ArchiveBundles`).
    """

    def __init__(self, bundles: ArchiveBundles) -> None:
        self._bundles = bundles

    def _export(self, saga_id: str, out: Path) -> tuple[bool, str]:
        return self._bundles.export(saga_id, out)

    def verdict(self, saga_id: str) -> tuple[bool, str] | None:
        """``(ok, detail)`` of the archive's audit, ``None`` when it holds nothing of the saga."""
        with tempfile.TemporaryDirectory() as tmp:
            try:
                return self._export(saga_id, Path(tmp))
            except UnknownSagaError:
                return None

    def bundle(self, saga_id: str) -> bytes:
        """The audit bundle (``sagacity audit verify-bundle`` checks it) as a zip archive, with
        the redaction salts withheld (:func:`~sagacity.privacy._disclosure.disclosed`): the bundle
        still verifies, the ``redaction`` attribute reported withheld like an erased field.

        Raises:
            UnknownSagaError: the archive holds nothing of the saga.
        """
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            self._export(saga_id, root)
            _withhold_salts(root)
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(root.rglob("*")):
                    if path.is_file():
                        archive.write(path, path.relative_to(root).as_posix())
            return buffer.getvalue()


def _withhold_salts(root: Path) -> None:
    """Rewrite an exported bundle's events without what may not leave the service, and its
    manifest's ``events_sha256`` to match (the events are signed by the chain, not by it)."""
    events = root / "events.jsonl"
    manifest_path = root / "manifest.json"
    lines = events.read_text(encoding="utf-8").splitlines()
    shown = [
        json.dumps(disclosed(json.loads(line)), ensure_ascii=False, sort_keys=True)
        for line in lines
        if line
    ]
    data = ("\n".join(shown) + "\n").encode("utf-8") if shown else b""
    events.write_bytes(data)
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["events_sha256"] = hashlib.sha256(data).hexdigest()
    manifest_path.write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
