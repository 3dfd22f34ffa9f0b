"""The agent side on the bare install (``pip install sagacity``, no extras): the read index and
the Kafka journal import only base dependencies, and a saga runs through ``from_env()`` with
the database variable set (as on a host that also runs a service)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity import EventType, verify
from sagacity.producer import KafkaJournal
from tests.install._source import source_copy

HERE = Path(__file__).resolve().parent

# Imports of the services' extras fail in the child, as on an install without them.
_WITHOUT_EXTRAS = """
import sys
from importlib.abc import MetaPathFinder

EXTRAS = {"cryptography", "nacl", "fastapi", "starlette", "uvicorn", "prometheus_client"}

class WithoutExtras(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, WithoutExtras())
"""


def test_the_read_index_imports_only_what_it_uses() -> None:
    code = _WITHOUT_EXTRAS + (
        "from sagacity._env import kafka_settings_from_env, read_index\n"
        "settings = kafka_settings_from_env({'SAGACITY_BOOTSTRAP_SERVERS': '127.0.0.1:9',"
        " 'SAGACITY_DATABASE_URL': 'postgresql://nobody@127.0.0.1:9/none'})\n"
        "index = read_index(settings.read_index)\n"
        "print(type(index).__name__)\n"
        "print(sorted(m for m in sys.modules if m.startswith('sagacity.consumers.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    name, modules = done.stdout.splitlines()
    assert name == "PostgresSagaIndex"
    assert eval(modules) == []  # the index is the Postgres adapter's: no service module


def test_the_archive_package_still_exports_every_name() -> None:
    import sagacity.consumers.archive as archive

    assert archive.__all__ == sorted(archive.__all__)
    for name in archive.__all__:
        value = getattr(archive, name)
        home = getattr(value, "__module__", "") if not isinstance(value, str) else ""
        # The schema check and the error mapping are the Postgres adapter's, shared with the
        # read index; what an erasure asks of the archive is the port's (sagacity.ports), and
        # the archive's side of an erasure is the Postgres adapter's (it implements that port).
        assert (
            home.startswith("sagacity.consumers.archive._")
            or name == "ARCHIVER_ROLE"
            or (name in {"check_schema", "mapped_errors"} and home == "sagacity.postgres._archive")
            or (name == "ArchiveErasure" and home == "sagacity.ports._erasure")
            or (
                name in {"ArchiveEraser", "ErasureRecord", "erase_in_archive", "erasure_records"}
                and home == "sagacity.postgres._archive_erasure"
            )
        ), (name, home)
    assert set(archive.__all__) <= set(dir(archive))
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = archive.Nothing  # type: ignore[attr-defined]


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.slow
def test_an_agent_runs_a_saga_on_the_bare_install(
    tmp_path: Path, kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str
) -> None:
    venv = tmp_path / "venv"
    # Without a pip of its own (seeding one is the slow part); this pip installs into it.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    # With cargo's builds: where cargo is, the install compiles the module in (not measured here).
    source = source_copy(tmp_path / "src", cargo_target=True)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check"]
    install = subprocess.run(
        [*pip, "install", "-q", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(
        [*pip, "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "sagacity" in installed
    assert not installed & {"pynacl", "fastapi", "uvicorn", "prometheus-client"}
    # A base dependency: agents verify the approvals service's signature when they resume
    # (docs/adr/0014); the sagas below do not resume, so it is never imported.
    assert "cryptography" in installed

    topic = make_topic(partitions=2)
    prefix = f"bare-{uuid.uuid4().hex[:8]}"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SAGACITY_", "PYTHON", "VIRTUAL"))
    }
    env.update(
        SAGACITY_BOOTSTRAP_SERVERS=kafka_bootstrap,
        SAGACITY_TOPIC=topic,
        SAGACITY_DATABASE_URL=pg_dsn,  # a database without an archive schema
        # What the bare install imports is the subject, in clear (said explicitly): sealing
        # imports `cryptography` (tests/kafka/test_kafka_sealed.py seals on Kafka).
        SAGACITY_ALLOW_CLEAR_DATA="1",
    )
    run = subprocess.run(
        [str(python), "-I", str(HERE / "bare_agent.py"), prefix],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    outcome = json.loads(run.stdout.splitlines()[-1])
    assert outcome == {
        "statuses": ["COMPLETED", "AWAITING_APPROVAL", "COMPLETED"],
        "imported": [],
    }
    # No archive in that database: said once for the process, not once per saga.
    assert run.stderr.count("holds no archive") == 1, run.stderr

    journal = KafkaJournal(kafka_bootstrap, topic=topic)
    try:
        gated = journal.entries(f"{prefix}-gated")
    finally:
        journal.close()
    assert verify(gated, saga_id=f"{prefix}-gated").ok
    assert EventType.AWAITING_APPROVAL in [e.event_type for e in gated]
