"""Finding the programs the local stack runs: Java, Maven and the PostgreSQL server."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from sagacity.errors import MissingToolError

JAVA_HINT = "apt-get install openjdk-17-jre-headless (any Java >= 17 on PATH or in JAVA_HOME)"
MAVEN_HINT = "apt-get install maven"
POSTGRES_HINT = "apt-get install postgresql (or set SAGACITY_PG_BIN to its bin directory)"

_PG_ROOT = Path("/usr/lib/postgresql")


def find_java() -> str:
    """Path of the ``java`` launcher: ``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH.

    Raises:
        MissingToolError: no Java found.
    """
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise MissingToolError("java", JAVA_HINT)
    return found


def find_maven() -> str:
    """Path of ``mvn`` on PATH.

    Raises:
        MissingToolError: Maven is not installed.
    """
    found = shutil.which("mvn")
    if found is None:
        raise MissingToolError("mvn", MAVEN_HINT)
    return found


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name)) or (0,)


def find_postgres_bin(*, search_root: Path = _PG_ROOT) -> Path:
    """Directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Looked up in order: ``SAGACITY_PG_BIN``; the newest ``/usr/lib/postgresql/<ver>/bin``
    (Debian's layout, where the server programs are not on PATH); ``pg_ctl`` on PATH.

    Raises:
        MissingToolError: no PostgreSQL server programs found.
    """
    candidates: list[Path] = []
    explicit = os.environ.get("SAGACITY_PG_BIN")
    if explicit:
        candidates.append(Path(explicit))
    if search_root.is_dir():
        versions = sorted((p for p in search_root.iterdir() if p.is_dir()), key=_version_key)
        candidates.extend(v / "bin" for v in reversed(versions))
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        if all((candidate / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return candidate
    raise MissingToolError("postgres", POSTGRES_HINT)
