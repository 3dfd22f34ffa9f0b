"""The PostgreSQL server of the dev stack: restart keeps data, failures show the log."""

from __future__ import annotations

import socket
from pathlib import Path

import psycopg
import pytest

from sagacity.dev import PostgresServer
from sagacity.errors import PortInUseError, ProcessStartError


@pytest.mark.postgres
def test_a_private_server_keeps_data_across_restart_and_reports_a_broken_start(
    tmp_path: Path,
) -> None:
    server = PostgresServer(tmp_path / "pg")
    try:
        dsn = server.start()
        with psycopg.connect(dsn) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        assert server.stop() is True
        assert not server.is_running()

        dsn = server.start()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]
        assert server.stop() is True

        state = server.state()
        assert state is not None
        with (Path(state.root) / "data" / "postgresql.conf").open("a") as conf:
            conf.write("\nshared_buffers = 'not a size'\n")
        with pytest.raises(ProcessStartError) as info:
            server.start(timeout=30)
        assert "last lines of the log" in str(info.value)
        assert "shared_buffers" in info.value.log_tail
        assert not server.is_running()
    finally:
        server.purge()
    assert not (tmp_path / "pg" / "state.json").exists()


def test_a_server_asked_for_a_taken_port_refuses_to_start(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = PostgresServer(tmp_path / "pg", port=port)
        try:
            with pytest.raises(PortInUseError):
                server.start()
        finally:
            server.purge()
