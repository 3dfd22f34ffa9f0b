"""Instances of the compensation service start together: each creates the claims table."""

from __future__ import annotations

import threading

import psycopg
import pytest

from sagacity.postgres._claims import TABLE
from sagacity.postgres._claims import PostgresClaimStore as ClaimStore

pytestmark = [pytest.mark.postgres]


@pytest.mark.parametrize("round_", range(4))
def test_instances_starting_at_once_all_create_the_claims_table(pg_dsn: str, round_: int) -> None:
    stores = [ClaimStore(pg_dsn, instance=f"i{n}", journal="kafka:c/t") for n in range(6)]
    for store in stores:  # connect first, so the barrier releases the DDL itself together
        store.ping()
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def start(store: ClaimStore) -> None:
        barrier.wait()
        try:
            store.ensure_schema()
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for store in stores:
        store.close()
    assert errors == []
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (0,)
