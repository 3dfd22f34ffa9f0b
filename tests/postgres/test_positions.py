"""Consumer positions: stored with the effects, per consumer and topic, never moving back."""

from __future__ import annotations

import pytest

from sagacity.postgres import connect, ensure_positions, positions, store_positions, transaction

pytestmark = [pytest.mark.postgres]


def test_positions_round_trip_and_never_move_back(pg_dsn: str) -> None:
    with connect(pg_dsn, autocommit=True) as conn:
        ensure_positions(conn)
        ensure_positions(conn)  # repeatable
        assert positions(conn, "archive", "journal") == {}
    with transaction(pg_dsn) as conn:
        store_positions(conn, "archive", "journal", {0: 10, 2: 5})
        store_positions(conn, "approvals", "journal", {0: 3})
    with transaction(pg_dsn) as conn:
        store_positions(conn, "archive", "journal", {0: 7, 1: 1})  # a former owner's late batch
    with connect(pg_dsn, autocommit=True) as conn:
        assert positions(conn, "archive", "journal") == {0: 10, 1: 1, 2: 5}
        assert positions(conn, "approvals", "journal") == {0: 3}
        assert positions(conn, "archive", "other") == {}


def test_a_position_is_kept_only_if_the_effects_commit(pg_dsn: str) -> None:
    with connect(pg_dsn, autocommit=True) as conn:
        ensure_positions(conn)

    def fail_after_storing() -> None:
        with transaction(pg_dsn) as conn:
            store_positions(conn, "archive", "journal", {0: 99})
            raise RuntimeError("the batch's effects failed")

    with pytest.raises(RuntimeError, match="effects failed"):
        fail_after_storing()
    with connect(pg_dsn, autocommit=True) as conn:
        assert positions(conn, "archive", "journal") == {}


def test_a_negative_offset_is_refused(pg_dsn: str) -> None:
    with connect(pg_dsn, autocommit=True) as conn:
        ensure_positions(conn)
        with pytest.raises(ValueError, match="non-negative offset"):
            store_positions(conn, "archive", "journal", {0: 4, 1: -1})
        assert positions(conn, "archive", "journal") == {}
