"""``sagacity archive``: signing keys, checkpoints, schema and retention of the archive."""

from __future__ import annotations

from pathlib import Path

import click

from sagacity.cli._db_options import conninfo, database_options, fail
from sagacity.cli._options import (
    bootstrap_servers_option,
    group_option,
    topic_option,
)
from sagacity.config._defaults import DEFAULT_ARCHIVE_GROUP


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
    from sagacity.consumers.archive import generate_key
    from sagacity.errors import SagacityError

    try:
        signer = generate_key(out)
    except SagacityError as exc:
        fail(exc)
    click.echo(f"private key: {out.resolve()}")
    click.echo(f"key id:      {signer.key_id}")
    click.echo(f"public key:  {signer.public_hex}")


@archive.command("writer-keygen")
@click.option("--writer", "writer_id", required=True, help="The writer's id (SAGACITY_WRITER_ID).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The writer's key file (SAGACITY_WRITER_KEY; mode 0600, never overwritten).",
)
@click.option(
    "--hmac",
    "use_hmac",
    is_flag=True,
    help="An HMAC-SHA256 secret (the registry then holds the secret) instead of Ed25519.",
)
@click.option(
    "--role",
    type=click.Choice(["agent", "approvals", "compensation", "operator"]),
    default="agent",
    show_default=True,
    help="What the writer may write in sagas it does not own (docs/adr/0014 §5).",
)
def writer_keygen(writer_id: str, out: Path, use_hmac: bool, role: str) -> None:
    """Create a writer's signing key; print its entry for the archive's writer registry."""
    import os
    import secrets

    from sagacity.errors import SagacityError
    from sagacity.signing._writer_signature import HMAC_PREFIX, WriterKey, WriterRole

    if use_hmac:
        data = f"{HMAC_PREFIX}{secrets.token_hex(32)}\n".encode()
    else:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        data = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fail(f"{out} exists; refusing to overwrite a writer key")
    except OSError as exc:
        fail(f"cannot create {out}: {exc.strerror}")
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    try:
        key = WriterKey.from_file(out, writer_id)
    except SagacityError as exc:
        fail(str(exc))
    click.echo(f"# writer key: {out} (SAGACITY_WRITER_KEY, with SAGACITY_WRITER_ID={writer_id})")
    click.echo(key.registry_entry(WriterRole(role)), nl=False)


@archive.command()
@database_options
@click.option("--grant", "grant_role", default=None, help="Also grant the archiver role.")
def migrate(database_url: str, schema: str | None, grant_role: str | None) -> None:
    """Create or upgrade the archive schema (the archiver also does this at start)."""
    from sagacity.errors import SagacityError
    from sagacity.postgres.archive import connect, grant_archiver
    from sagacity.postgres.archive import migrate as run_migrations

    try:
        with connect(conninfo(database_url, schema)) as conn:
            version = run_migrations(conn)
            if grant_role:
                grant_archiver(conn, grant_role)
    except SagacityError as exc:
        fail(exc)
    click.echo(f"archive schema at version {version}")


@archive.command()
@bootstrap_servers_option("ARCHIVE")
@database_options
@topic_option("ARCHIVE")
@group_option("ARCHIVE", default=DEFAULT_ARCHIVE_GROUP)
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SAGACITY_ARCHIVE_SIGNING_KEY",
    required=True,
    help="Ed25519 private key file.",
)
@click.option(
    "--witness",
    envvar="SAGACITY_ARCHIVE_WITNESS",
    default=None,
    help="File path or http(s) URL (JSON POST) to publish the latest signed round to.",
)
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    help="Seconds to read the topic to its end before giving up (nothing is signed then).",
)
def checkpoint(
    bootstrap_servers: str,
    database_url: str,
    schema: str | None,
    topic: str,
    group: str,
    signing_key: Path,
    witness: str | None,
    timeout: float,
) -> None:
    """Sign now what the archive holds, read again from the topic.

    A signer signs only what its own process read from the topic (the database can be written
    by others): this reads each partition from where everything was last signed up to its end,
    re-verifying what was archived since and archiving anything new as the archiver does
    (same group, same checks), then signs it. A running archiver keeps its partitions.
    """
    import os

    from sagacity import compose
    from sagacity._env import client_settings, starting_keys
    from sagacity.consumers.archive import ArchiveSettings, SignedRound, Signer, catch_up_and_sign
    from sagacity.consumers.archive import publish_witness as publish
    from sagacity.errors import SagacityError
    from sagacity.postgres.archive import connect, ensure_schema

    rounds: list[SignedRound] = []
    kafka_config = client_settings(os.environ)
    url = conninfo(database_url, schema)
    try:
        signer = Signer.from_file(signing_key)
        with connect(url) as conn:
            ensure_schema(conn)
        with starting_keys({"SAGACITY_DATABASE_URL": database_url, **os.environ}) as keys:
            settings = ArchiveSettings(
                bootstrap_servers=bootstrap_servers,
                database_url=url,
                topic=topic,
                group_id=group,
                signing_key=signing_key,
                kafka_config=kafka_config,
            )
            try:
                done = catch_up_and_sign(
                    settings,
                    signer=signer,
                    dependencies=compose.archive(keys=keys),
                    on_round=rounds.append,
                    timeout_s=timeout,
                )
            finally:
                if keys is not None:
                    keys.close()
        if rounds and witness is not None:
            publish(witness, rounds[-1], public_hex=signer.public_hex)
    except SagacityError as exc:
        fail(exc)
    click.echo(
        f"read {done.read} message(s) ({done.again} again, {done.archived} newly archived); "
        f"signed {done.signed} head(s) in {len(rounds)} round(s) with key {signer.key_id}"
    )
    if rounds:
        click.echo(f"latest signing round: {rounds[-1].round_id}:{rounds[-1].root}")


def _day(us: int) -> str:
    """The UTC day of a time in microseconds, ``YYYY-MM-DD``."""
    import datetime

    return datetime.datetime.fromtimestamp(us / 1e6, datetime.UTC).strftime("%Y-%m-%d")


@archive.command()
@database_options
@click.option(
    "--keep",
    required=True,
    help="How long to keep events: 24mo, 2y or 730d (at least 6mo; m alone is refused).",
)
@click.option(
    "--export-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where expired months are exported (JSON lines) before they are dropped.",
)
@click.option("--apply", is_flag=True, help="Export and drop; without it, only report.")
@click.option("--force", is_flag=True, help="Allow a retention shorter than six months.")
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SAGACITY_ARCHIVE_SIGNING_KEY",
    default=None,
    help="The archive's Ed25519 key: each dropped month's record and anchors are signed "
    "(needed with --apply and --sign-records).",
)
@click.option(
    "--sign-records",
    is_flag=True,
    help="Sign the records of months dropped before records were signed, then exit.",
)
def retention(
    database_url: str,
    schema: str | None,
    keep: str,
    export_dir: Path | None,
    apply: bool,
    force: bool,
    signing_key: Path | None,
    sign_records: bool,
) -> None:
    """Export, then drop, whole months older than the retention (a dry run by default)."""
    from sagacity.consumers.archive import Signer, parse_keep, run_retention
    from sagacity.consumers.archive import sign_records as sign_existing
    from sagacity.errors import SagacityError
    from sagacity.postgres.archive import PostgresRetention, connect

    if sign_records and signing_key is None:
        fail("--sign-records needs --signing-key")
    try:
        months = parse_keep(keep)
        signer = Signer.from_file(signing_key) if signing_key is not None else None
        with connect(conninfo(database_url, schema)) as conn:
            store = PostgresRetention(conn)
            if sign_records:
                assert signer is not None
                click.echo(f"signed {sign_existing(store, signer)} retention record(s)")
                return
            actions = run_retention(
                store,
                keep_months=months,
                export_dir=export_dir,
                apply=apply,
                force=force,
                signer=signer,
            )
    except SagacityError as exc:
        fail(exc)
    if not actions:
        click.echo(f"nothing older than {months} months")
        return
    click.echo(f"{'partition':<30} {'from':<10}  {'to':<10}  {'rows':>10}  action")
    for a in actions:
        p = a.partition
        what = f"exported to {a.export_file} and dropped" if a.dropped else "would export and drop"
        click.echo(
            f"{p.name:<30} {_day(p.range_from_us)}  {_day(p.range_to_us)}  {a.rows:>10,}  {what}"
        )
    if not apply:
        click.echo("dry run: pass --apply --export-dir DIR to export and drop these months")


@archive.command()
@database_options
@click.option("--limit", default=50, show_default=True, help="Most recent entries shown.")
def quarantine(database_url: str, schema: str | None, limit: int) -> None:
    """List events refused on ingest (reason, position, saga); exit 1 if there are any."""
    from sagacity.errors import SagacityError
    from sagacity.postgres.archive import check_schema, connect, mapped_errors

    try:
        with connect(conninfo(database_url, schema)) as conn:
            check_schema(conn)
            with mapped_errors("read the quarantine"):
                total = conn.execute(
                    "SELECT reason, count(*) FROM archive_quarantine GROUP BY reason ORDER BY 1"
                ).fetchall()
                recent = conn.execute(
                    "SELECT quarantined_at, reason, topic, kafka_partition, kafka_offset,"
                    " saga_id, seq, detail, octet_length(raw_value) FROM archive_quarantine"
                    " ORDER BY id DESC LIMIT %s",
                    (limit,),
                ).fetchall()
    except SagacityError as exc:
        fail(exc)
    if not total:
        click.echo("quarantine is empty")
        return
    for at, reason, topic, partition, offset, saga, seq, detail, size in recent:
        where = f"{topic}[{partition}]@{offset}"
        who = f"{saga or '?'}#{seq if seq is not None else '?'}"
        click.echo(
            f"{at:%Y-%m-%d %H:%M:%S} {reason:<14} {where:<32} {who:<30} {size or 0}B {detail}"
        )
    click.echo("")
    for reason, count in total:
        click.echo(f"{reason:<14} {count:>10,}")
    raise click.exceptions.Exit(1)
