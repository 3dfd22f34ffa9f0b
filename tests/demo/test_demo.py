"""``sagacity demo`` end to end: its own processes on the real broker and database."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sagacity.chain import link
from sagacity.demo import DemoError, abbreviate, chain_table
from sagacity.dev import pick_free_port
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType

ROOT = Path(__file__).resolve().parents[2]


def _env(bootstrap: str, dsn: str) -> dict[str, str]:
    """This process's environment with the demo pointed at the test's broker and database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_")}
    env.update(SAGACITY_BOOTSTRAP_SERVERS=bootstrap, SAGACITY_DATABASE_URL=dsn)
    return env


def _argv(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "sagacity.cli", "demo", "--run-dir", str(tmp_path), *args]


def _demo(
    *args: str, bootstrap: str, dsn: str, tmp_path: Path, timeout: float = 150
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _argv(tmp_path, *args),
        env=_env(bootstrap, dsn),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextmanager
def _demo_with_its_services_started(
    *args: str, bootstrap: str, dsn: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The demo as a running process, once it has printed the pids of its three services."""
    with subprocess.Popen(
        _argv(tmp_path, *args),
        env=_env(bootstrap, dsn),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as demo:
        assert demo.stdout is not None
        seen: list[str] = []
        while len(_service_pids("".join(seen))) < 3:
            line = demo.stdout.readline()
            assert line, "".join(seen)
            seen.append(line)
        yield demo, "".join(seen)


def _service_pids(stdout: str) -> list[int]:
    return [int(p) for p in re.findall(r"^\[start\] +\w+ service pid (\d+)", stdout, re.M)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.slow
def test_the_demo_runs_the_three_sagas_across_the_services(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> None:
    topic = make_topic()
    done = _demo(
        "--topic", topic, "--run-id", "t1", bootstrap=kafka_bootstrap, dsn=pg_dsn, tmp_path=tmp_path
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr

    for line in [
        "ok  `sagacity approvals resume` with the exact approved payload to complete the saga",
        "ok  the compensation service to compensate it: COMPENSATED",
        "ok  the reservation released and the p-2 stock back to 5 (demo_product)",
        "ok  the CLI to refuse the changed payload before sending it",
        'ok  the service to refuse the resume: 409 "payload changed since approval"',
        "ok  RESUME_REFUSED journaled for wire-attack-t1/4",
        "ok  the wire tool never called (demo_wire is empty)",
        "ok  the archive to hold the three chains exactly as on Kafka (same hashes)",
        "ok  `sagacity verify --all` to exit 0 (every archived chain verifies)",
        "order-confirmed-t1: COMPLETED (11 entries)",
        "order-failed-t1: COMPENSATED (11 entries)",
        "wire-attack-t1: COMPENSATED (13 entries)",
        "[verify]   sagas ok 3",
        "[verify]   sagas failed 0",
    ]:
        assert line in out, line
    # The chain tables: who decided, and what the attacker tried, are on them.
    assert re.search(r"^  6 +APPROVED +wire_payment +ref_seq=4 +manager@example\.com$", out, re.M)
    assert re.search(
        r"RESUME_REFUSED +wire_payment +\{\"amount\":\"999999\",\"to\":\"mallory\"\}", out
    )
    assert re.search(r"^demo complete: all \d+ expectations met in [\d.]+s$", out, re.M)
    # Each service logged to its own file, and every one was stopped.
    for name in ("approvals", "compensation", "archive"):
        assert (tmp_path / f"{name}.log").stat().st_size > 0
    # It ran sealed, and left no secret behind: the keys and the token it made are gone.
    assert "[keys]     journal data sealed under key-encryption key" in out
    assert (
        sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".pem", ".token", ".kek")) == []
    )
    assert "keys and token removed; logs kept in" in out
    pids = _service_pids(out)
    assert len(pids) == 3
    assert all(_gone(pid) for pid in pids)
    assert out.count("[stop]") == 3


@pytest.mark.kafka
@pytest.mark.postgres
def test_a_compensation_service_that_cannot_start_fails_the_demo_with_its_log(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> None:
    done = _demo(
        "--topic",
        make_topic(),
        "--compensation-tools",
        "sagacity.demo.no_such_module:TOOLS",
        bootstrap=kafka_bootstrap,
        dsn=pg_dsn,
        tmp_path=tmp_path,
    )
    assert done.returncode == 1
    assert "demo FAILED: services: expected the compensation service ready" in done.stderr
    assert "exited with status" in done.stderr
    # The tail of the service's own log says why.
    assert f"--- last lines of {tmp_path / 'compensation.log'} ---" in done.stderr
    assert "no_such_module" in done.stderr
    assert "demo complete" not in done.stdout
    # The services that did start were stopped.
    pids = _service_pids(done.stdout)
    assert len(pids) == 3
    assert all(_gone(pid) for pid in pids)


@pytest.mark.kafka
@pytest.mark.postgres
def test_sigterm_to_the_demo_stops_the_services_it_started(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> None:
    with _demo_with_its_services_started(
        "--topic", make_topic(), bootstrap=kafka_bootstrap, dsn=pg_dsn, tmp_path=tmp_path
    ) as (demo, seen):
        demo.send_signal(signal.SIGTERM)
        rest, _ = demo.communicate(timeout=60)
    assert demo.returncode == 143
    assert rest.count("[stop]") == 3
    assert "demo complete" not in rest
    assert all(_gone(pid) for pid in _service_pids(seen))


@pytest.mark.kafka
@pytest.mark.postgres
def test_a_closed_stdout_still_stops_the_services(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> None:
    # `sagacity demo | head`: the pipe closes while the demo runs.
    with _demo_with_its_services_started(
        "--topic", make_topic(), bootstrap=kafka_bootstrap, dsn=pg_dsn, tmp_path=tmp_path
    ) as (demo, seen):
        assert demo.stdout is not None
        demo.stdout.close()
        assert demo.wait(timeout=90) != 0
    assert all(_gone(pid) for pid in _service_pids(seen))


@pytest.mark.kafka
def test_an_unreachable_postgres_fails_the_demo_before_any_service_starts(
    kafka_bootstrap: str, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    dead = f"postgresql://postgres@127.0.0.1:{pick_free_port()}/sagacity?connect_timeout=3"
    done = _demo("--topic", make_topic(), bootstrap=kafka_bootstrap, dsn=dead, tmp_path=tmp_path)
    assert done.returncode == 1
    assert "[topic]" in done.stdout  # Kafka was reached
    assert "demo FAILED: shop: cannot prepare the shop's tables" in done.stderr
    assert "[start]" not in done.stdout


def test_a_bad_run_id_is_refused() -> None:
    from sagacity.demo import DemoSettings, run

    settings = DemoSettings(bootstrap_servers="-", database_url="-", run_id="../x")
    with pytest.raises(DemoError, match=re.escape("run id '../x' must match")):
        run(settings, echo=lambda _: None)


def test_demo_error_names_its_stage_and_carries_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "service.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)), encoding="utf-8")
    error = DemoError("wire", "expected no wire", log=log)
    assert error.stage == "wire"
    assert str(error) == "wire: expected no wire"
    assert error.log_tail.splitlines() == [f"line {i}" for i in range(75, 100)]
    assert DemoError("topic", "down").log_tail == ""


def test_chain_tables_abbreviate_long_payloads_and_show_references() -> None:
    assert abbreviate(None) == "-"
    assert abbreviate("a\n  b") == "a b"
    assert abbreviate("x" * 60, 10) == "xxxxxxx..."
    first = link(
        EntryDraft(saga_id="s", event_type=EventType.INTENT, tool="t", payload="p" * 80),
        seq=1,
        prev_hash=GENESIS_HASH,
    )
    second = link(
        EntryDraft(
            saga_id="s",
            event_type=EventType.APPROVED,
            tool="t",
            actor="ann",
            attributes={"ref_seq": "1"},
        ),
        seq=2,
        prev_hash=first.hash,
    )
    header, one, two = chain_table([first, second])
    assert header.split() == ["SEQ", "EVENT", "TOOL", "PAYLOAD", "/", "RESULT", "ACTOR"]
    assert one.split() == ["1", "INTENT", "t", "p" * 49 + "...", "-"]
    assert two.split() == ["2", "APPROVED", "t", "ref_seq=1", "ann"]


def test_the_demo_package_exports_its_settings_report_and_run() -> None:
    import sagacity.demo

    assert set(sagacity.demo.__all__) == {
        "APPROVER",
        "ATTACK_PAYLOAD",
        "COMPENSATION_TOOLS",
        "DEFAULT_TOPIC",
        "DemoError",
        "DemoReport",
        "DemoSettings",
        "Saga",
        "abbreviate",
        "chain_table",
        "new_run_id",
        "run",
        "topic_from_env",
    }
    for name in sagacity.demo.__all__:
        assert getattr(sagacity.demo, name) is not None
