"""``sagacity archive``: signing keys, checkpoints, schema and retention of the archive."""

from __future__ import annotations

from pathlib import Path

import click

from sagacity.cli._db_options import conninfo, database_options, fail


@click.group()
def archive() -> None:
    """Manage the Postgres archive of the journal."""


@archive.command()
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SAGACITY_ARCHIVE_SIGNING_KEY",
    required=True,
    help="Private key file to create (mode 0600).  Keep it outside the database host.",
)
def keygen(out: Path) -> None:
    """Create an Ed25519 checkpoint signing key; print its public key to publish."""
    from sagacity.consumers.archive._checkpoints import generate_key
    from sagacity.errors import SagacityError

    try:
        signer = generate_key(out)
    except SagacityError as exc:
        fail(exc.message)
    click.echo(f"private key: {out}")
    click.echo(f"key id:      {signer.key_id}")
    click.echo(f"public key:  {signer.public_hex}")


@archive.command()
@database_options
@click.option("--grant", "grant_role", default=None, help="Also grant the archiver role.")
def migrate(database_url: str, schema: str | None, grant_role: str | None) -> None:
    """Create or upgrade the archive schema (the archiver also does this at start)."""
    from sagacity.consumers.archive._db import connect, grant_archiver
    from sagacity.consumers.archive._db import migrate as run_migrations
    from sagacity.errors import SagacityError

    try:
        with connect(conninfo(database_url, schema)) as conn:
            version = run_migrations(conn)
            if grant_role:
                grant_archiver(conn, grant_role)
    except SagacityError as exc:
        fail(exc.message)
    click.echo(f"archive schema at version {version}")


@archive.command()
@database_options
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SAGACITY_ARCHIVE_SIGNING_KEY",
    required=True,
    help="Ed25519 private key file.",
)
def checkpoint(database_url: str, schema: str | None, signing_key: Path) -> None:
    """Sign every archived head that moved since its last checkpoint, now."""
    from sagacity.consumers.archive._checkpoints import Signer, sign_pending
    from sagacity.consumers.archive._db import check_schema, connect
    from sagacity.errors import SagacityError

    try:
        signer = Signer.from_file(signing_key)
        with connect(conninfo(database_url, schema)) as conn:
            check_schema(conn)
            signed = sign_pending(conn, signer)
    except SagacityError as exc:
        fail(exc.message)
    click.echo(f"signed {signed} head(s) with key {signer.key_id}")
