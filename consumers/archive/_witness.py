"""The witness: the latest signed round, published where the archive's operator cannot rewrite it.

A witness location is a file path or an ``http(s)://`` URL.  The archive service writes each
round it signs there (a file is replaced atomically; a URL receives a JSON ``POST``), and
``sagacity verify`` / ``sagacity audit watch`` read it back (the file, or a ``GET`` of the URL)
to check the archive still holds that round, with that root, and has only grown since
(docs/adr/0015-round-log.md).  The document::

    {"format": "sagacity-witness/1", "public_key": "<hex>", "round": {<the signed round>}}
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from sagacity.consumers.archive._checkpoints import SignedRound
from sagacity.consumers.archive._roundlog import round_from_dict, round_to_dict
from sagacity.errors import WitnessError

WITNESS_FORMAT = "sagacity-witness/1"


def _is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def publish(location: str, signed: SignedRound, *, public_hex: str, timeout: float = 10) -> None:
    """Publish ``signed`` as the latest round at ``location``.

    A file is replaced atomically (written beside it, synced, renamed) and never moved back:
    a file already holding a later round is left alone.

    Raises:
        WitnessError: the location cannot be written, or the endpoint refused the round.
    """
    document = {
        "format": WITNESS_FORMAT,
        "public_key": public_hex,
        "round": round_to_dict(signed),
    }
    body = json.dumps(document, sort_keys=True).encode("utf-8")
    if _is_url(location):
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
            location, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
                answer.read()
        except (urllib.error.URLError, OSError) as exc:
            raise WitnessError(f"the witness at {location} refused the round: {exc}") from exc
        return
    path = Path(location)
    try:
        current = read(location)
    except WitnessError:
        current = None  # nothing (or nothing readable) yet: replaced below
    if current is not None and current.round_id > signed.round_id:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as out:
            out.write(body + b"\n")
            out.flush()
            os.fsync(out.fileno())
        Path(temporary).replace(path)
    except OSError as exc:
        raise WitnessError(f"cannot write the witness file {path}: {exc.strerror}") from exc


def read(location: str, *, timeout: float = 10) -> SignedRound | None:
    """The round witnessed at ``location`` (``None``: a file not written yet).

    Raises:
        WitnessError: the location cannot be read or does not hold a witnessed round.
    """
    try:
        if _is_url(location):
            with urllib.request.urlopen(location, timeout=timeout) as answer:  # noqa: S310
                raw = answer.read()
        else:
            path = Path(location)
            if not path.exists():
                return None
            raw = path.read_bytes()
    except (urllib.error.URLError, OSError) as exc:
        raise WitnessError(f"cannot read the witness at {location}: {exc}") from exc
    try:
        document = json.loads(raw)
        if not isinstance(document, dict) or document.get("format") != WITNESS_FORMAT:
            raise ValueError(f"not a {WITNESS_FORMAT} document")
        return round_from_dict(document.get("round"))
    except ValueError as exc:
        raise WitnessError(f"the witness at {location} holds no signed round: {exc}") from exc
