"""Every service spells its port, listen address and consumer group the same way; the older
spellings still parse but are not listed."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.cli.serve_approvals import approvals
from sagacity.cli.serve_archive import archive
from sagacity.cli.serve_compensation import compensation

_REQUIRED = {
    "approvals": [],
    "compensation": ["--tools", "x:y", "--bootstrap-servers", "k", "--database-url", "pg"],
    "archive": ["--bootstrap-servers", "k", "--database-url", "pg"],
}
_COMMANDS = {"approvals": approvals, "compensation": compensation, "archive": archive}
_OLD = {
    "approvals": ("--group-id", None),
    "compensation": ("--group-id", "--http-port"),
    "archive": ("--group-id", "--metrics-port"),
}


@pytest.mark.parametrize("service", sorted(_COMMANDS))
def test_port_host_and_group_have_one_name_each_listed_with_its_variable(service: str) -> None:
    shown = CliRunner().invoke(main, ["serve", service, "--help"], terminal_width=200)
    assert shown.exit_code == 0
    for option, variable in (("--port", "PORT"), ("--host", "HOST"), ("--group", "GROUP")):
        assert f"  {option} " in shown.output
        assert f"SAGACITY_{service.upper()}_{variable}" in shown.output
    for old in ("--group-id", "--http-port", "--metrics-port", "--http-host", "_HTTP_PORT"):
        assert old not in shown.output


@pytest.mark.parametrize("service", sorted(_COMMANDS))
def test_the_old_spellings_still_parse(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    command: click.Command = _COMMANDS[service]
    old_group, old_port = _OLD[service]
    argv = [*_REQUIRED[service], old_group, "g1"]
    if old_port:
        argv += [old_port, "9999"]
    params = command.make_context(service, argv).params
    assert params["group"] == "g1"
    if old_port:
        assert params["port"] == 9999
        monkeypatch.setenv(f"SAGACITY_{service.upper()}_{old_port[2:-5].upper()}_PORT", "7777")
        assert command.make_context(service, list(_REQUIRED[service])).params["port"] == 7777
    monkeypatch.setenv(f"SAGACITY_{service.upper()}_PORT", "8888")
    assert command.make_context(service, list(_REQUIRED[service])).params["port"] == 8888
