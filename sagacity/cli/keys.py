"""``sagacity keys``: the key-encryption key that wraps every saga's data key (see
docs/adr/0019-erasure.md), and the operator key (docs/adr/0027-operator-signatures.md).
"""

from __future__ import annotations

from pathlib import Path

import click

from sagacity.cli._exit import FAILED, USAGE, CommandError
from sagacity.cli._options import database_url_option

KEK_SETTING = "SAGACITY_KEY_ENCRYPTION_KEY_FILE"


@click.group()
def keys() -> None:
    """Manage the key-encryption key of the journal's sealed fields, and the operator key."""


@keys.command()
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Key file to create (mode 0600, never overwritten).  Keep it outside the database.",
)
def init(out: Path) -> None:
    """Create a key-encryption key; agents and services read it from
    SAGACITY_KEY_ENCRYPTION_KEY_FILE."""
    from sagacity.keys import write_key_encryption_key

    kek = write_key_encryption_key(out)
    path = out.resolve()  # the variable names it from wherever a process starts
    click.echo(f"key-encryption key: {path}")
    click.echo(f"key id:             {kek.key_id}")
    click.echo(f"{KEK_SETTING}={path}")


def _current_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--current",
        envvar=KEK_SETTING,
        required=True,
        help="The key-encryption key file(s) in use, comma-separated.",
    )(func)


@keys.command()
@click.option(
    "--new",
    "new_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The new key-encryption key (from `sagacity keys init`).",
)
@_current_option
@database_url_option("KEYS", help="libpq URL or conninfo of the database holding the keys.")
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Keys read per query.",
)
def rotate(new_path: Path, current: str, database_url: str, batch: int) -> None:
    """Rewrap every saga's data key under the key-encryption key NEW.

    Readers and writers keep running: each holds the old and the new key while the rotation
    runs (docs/operations/keys.md; docs/adr/0019-erasure.md §6).  Exits 1 while some keys
    remain under a key this command was not given.
    """
    from sagacity.keys import KeyEncryptionKey, KeyRing, KeyService
    from sagacity.postgres import PostgresKeyStore

    new = KeyEncryptionKey.from_file(new_path, setting="--new")
    olds = KeyRing.from_setting(current, setting=KEK_SETTING)
    ring = KeyRing((new, *(k for k in olds.keys if k.key_id != new.key_id)))
    store = PostgresKeyStore(database_url)
    service = KeyService(store, ring)
    try:
        done = service.rotate(batch=batch)
    finally:
        service.close()
    click.echo(f"rewrapped {done.rewrapped} data key(s) under {done.new_kek_id}")
    for kek_id, count in sorted(done.by_kek.items()):
        click.echo(f"  {kek_id}: {count} live key(s)")
    if not done.complete:
        unknown = sorted(k for k in done.by_kek if k != done.new_kek_id)
        raise CommandError(
            f"data keys remain under {', '.join(unknown)}: give that key in --current "
            "and run again",
            FAILED,
        )
    click.echo(
        f"every live data key is wrapped under {done.new_kek_id}; once every process holds "
        f"only the new key in {KEK_SETTING}, destroy the old one"
    )


@keys.command()
@database_url_option("KEYS", help="libpq URL or conninfo of the database holding the keys.")
def status(database_url: str) -> None:
    """How many live data keys each key-encryption key wraps."""
    from sagacity.postgres import PostgresKeyStore

    store = PostgresKeyStore(database_url)
    try:
        store.ensure_schema()
        counts = store.count_by_kek()
    finally:
        store.close()
    if not counts:
        click.echo("no live data keys")
    for kek_id, count in sorted(counts.items()):
        click.echo(f"{kek_id}: {count} live key(s)")


@keys.command("operator-keygen")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Private key file to create (PEM, mode 0600, never overwritten).  Keep it with the "
    "operators, off the agents' and the services' hosts.",
)
def operator_keygen(out: Path) -> None:
    """Create the operator key: it signs `sagacity saga compensate` and `sagacity erase`
    (docs/adr/0027-operator-signatures.md).  Commands read it from
    SAGACITY_OPERATOR_SIGNING_KEY; the services pin the public key it prints in
    SAGACITY_OPERATOR_PUBLIC_KEY."""
    from sagacity.errors import SigningKeyError
    from sagacity.signing._operator_signature import generate_key

    try:
        signer = generate_key(out)
    except SigningKeyError as exc:
        raise CommandError(str(exc), USAGE) from exc
    click.echo(f"operator key: {out.resolve()}")
    click.echo(f"key id:       {signer.key_id}")
    click.echo(f"SAGACITY_OPERATOR_SIGNING_KEY={out.resolve()}")
    click.echo(f"SAGACITY_OPERATOR_PUBLIC_KEY={signer.public_hex}")
