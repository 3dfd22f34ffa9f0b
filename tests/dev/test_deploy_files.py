"""The deploy files run: the compose file creates the topic before the services, restarts them,
runs the archive, validates as ``docker compose config`` does; the k8s Kafka keeps its data."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SAGACITY_SERVICES = ("approvals", "compensation", "archive")


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def test_the_topic_is_created_once_before_every_service() -> None:
    services = _compose()["services"]
    topic = services["topic"]
    assert topic["command"][:3] == ["topic", "create", "--exist-ok"]
    assert topic["depends_on"]["kafka"] == {"condition": "service_healthy"}
    for name in SAGACITY_SERVICES:
        assert services[name]["depends_on"]["topic"] == {
            "condition": "service_completed_successfully"
        }, name


def test_every_long_running_service_restarts_and_the_archive_runs() -> None:
    services = _compose()["services"]
    for name in ("kafka", "postgres", *SAGACITY_SERVICES):
        assert services[name]["restart"] == "unless-stopped", name
    archive = services["archive"]
    assert archive["command"][:2] == ["serve", "archive"]
    assert "healthz" in " ".join(archive["healthcheck"]["test"])


def test_the_build_context_leaves_out_what_the_image_does_not_need() -> None:
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    for entry in (".git", ".venv", ".sagacity", "**/__pycache__", "native/target"):
        assert entry in ignored


def test_the_k8s_kafka_keeps_its_log_on_a_volume() -> None:
    documents = list(yaml.safe_load_all((DEPLOY / "k8s" / "kafka.yaml").read_text()))
    (stateful,) = [d for d in documents if d["kind"] == "StatefulSet"]
    (claim,) = stateful["spec"]["volumeClaimTemplates"]
    (container,) = stateful["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert mounts[claim["metadata"]["name"]] == env["KAFKA_LOG_DIRS"]


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain (compose-go)")
def test_compose_config_validates_and_catches_a_broken_file(tmp_path: Path) -> None:
    binary = tmp_path / "compose-check"
    subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=DEPLOY / "compose-check",
        check=True,
        capture_output=True,
        timeout=600,
    )
    good = subprocess.run(
        [str(binary), str(DEPLOY / "compose.yaml")], capture_output=True, text=True
    )
    assert good.returncode == 0, good.stderr
    assert "services: approvals archive compensation kafka postgres topic" in good.stdout
    broken = _compose()
    broken["services"]["archive"]["depends_on"]["nowhere"] = {"condition": "service_healthy"}
    bad_file = DEPLOY / f".compose-broken-{tmp_path.name}.yaml"  # beside it: same relative paths
    try:
        bad_file.write_text(yaml.safe_dump(broken))
        bad = subprocess.run([str(binary), str(bad_file)], capture_output=True, text=True)
    finally:
        bad_file.unlink()
    assert bad.returncode == 1
    assert "nowhere" in bad.stderr


def test_the_cold_install_says_what_it_is_doing() -> None:
    """A first `deploy/local/demo` spends minutes in pip: it names the packages as it goes (pip
    without -q, its progress lines on stderr), rather than a silent minute and a half, while
    the whole verbose output goes to the log (the native build's cause of failure is read
    there)."""
    lib = (DEPLOY / "local" / "lib.sh").read_text(encoding="utf-8")
    install = lib[lib.index("pip install -v") : lib.index("_sagacity_pip_progress); then")]
    assert " -q " not in install, install  # pip names each package it collects …
    assert "--progress-bar off" in install  # (one line each, not a bar per download)
    assert '| tee "$log" |' in install  # … into the log, and …
    progress = lib[lib.index("_sagacity_pip_progress() {") :]
    assert "Collecting" in progress.split("}")[0]  # … the packages on stderr
    assert ">&2" in progress.split("}")[0]
