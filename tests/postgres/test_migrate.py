"""The migrations runner: instances starting together apply each migration once, none fails."""

from __future__ import annotations

import threading

import psycopg
import pytest

from sagacity.errors import PersistenceError
from sagacity.postgres import applied_versions, connect, migrate

pytestmark = [pytest.mark.postgres]

WIDGETS = (
    (1, "CREATE TABLE IF NOT EXISTS widget (id integer PRIMARY KEY)"),
    (2, "ALTER TABLE widget ADD COLUMN IF NOT EXISTS name text"),
)
GADGETS = ((1, "CREATE TABLE IF NOT EXISTS gadget (id integer PRIMARY KEY)"),)


@pytest.mark.parametrize("round_", range(4))
def test_instances_starting_at_once_all_migrate(pg_dsn: str, round_: int) -> None:
    conns = [connect(pg_dsn, autocommit=n % 2 == 0) for n in range(8)]  # both modes
    barrier = threading.Barrier(len(conns))
    errors: list[BaseException] = []
    versions: list[int] = []

    def start(n: int, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        barrier.wait()
        try:
            # Two components of one schema, as the claims and the approvals' tables.
            versions.append(
                migrate(conn, "widgets" if n < 6 else "gadgets", WIDGETS if n < 6 else GADGETS)
            )
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(n, c)) for n, c in enumerate(conns)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for conn in conns:
        conn.close()
    assert errors == []
    assert sorted(versions) == [1, 1, 2, 2, 2, 2, 2, 2]
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM widgets_schema_version").fetchone() == (2,)
        assert conn.execute("SELECT count(*) FROM gadgets_schema_version").fetchone() == (1,)
        conn.execute("INSERT INTO widget (id, name) VALUES (1, 'w')")
        conn.execute("INSERT INTO gadget (id) VALUES (1)")


def test_a_failing_migration_leaves_nothing_and_says_why(pg_dsn: str) -> None:
    broken = (*WIDGETS, (3, "ALTER TABLE widget ADD COLUMN broken nonsense_type"))
    with connect(pg_dsn, autocommit=True) as conn:
        assert migrate(conn, "widgets", WIDGETS) == 2
        with pytest.raises(PersistenceError, match="migrate the widgets schema"):
            migrate(conn, "widgets", broken)
        assert applied_versions(conn, "widgets") == {1, 2}
        assert migrate(conn, "widgets", WIDGETS) == 2


def test_a_schema_newer_than_the_release_is_refused(pg_dsn: str) -> None:
    with connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, "widgets", WIDGETS)
        with pytest.raises(PersistenceError, match="newer than this release"):
            migrate(conn, "widgets", WIDGETS[:1])


def test_an_up_to_date_schema_is_only_read(pg_dsn: str) -> None:
    with connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, "widgets", WIDGETS)
        schema = conn.execute("SELECT current_schema()").fetchone()
        assert schema is not None
    # A role that may use the schema but not create in it starts against it.
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS sagacity_migrate_reader")
        admin.execute("CREATE ROLE sagacity_migrate_reader")
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema[0]}" TO sagacity_migrate_reader')
        admin.execute(
            f'GRANT SELECT ON "{schema[0]}".widgets_schema_version TO sagacity_migrate_reader'
        )
    try:
        with connect(pg_dsn) as conn:
            conn.execute("SET ROLE sagacity_migrate_reader")
            assert migrate(conn, "widgets", WIDGETS) == 2
            conn.rollback()
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("DROP OWNED BY sagacity_migrate_reader")
            admin.execute("DROP ROLE sagacity_migrate_reader")
