"""``sagacity compensation``: maintenance of the compensation service's claims database."""

from __future__ import annotations

import os

import click

from sagacity.cli._exit import FAILED, USAGE, CommandError
from sagacity.cli._options import (
    bootstrap_servers_option,
    database_url_option,
    parse_duration,
    topic_option,
)

_DAY_S = 86400


@click.group("compensation")
def compensation() -> None:
    """Maintain the compensation service's claims (docs/adr/0007-compensation-exactly-once.md)."""


@compensation.command("prune-claims")
@click.option(
    "--older-than",
    "older_than",
    default=None,
    help="Prune settled claims finished longer ago than this [default: the topics' retention].",
)
@click.option("--apply", is_flag=True, help="Delete them (the default only counts).")
@bootstrap_servers_option("COMPENSATION")
@database_url_option("COMPENSATION", help="libpq URL or conninfo of the claims database.")
@topic_option("COMPENSATION")
@click.option("--dlq-topic", envvar="SAGACITY_COMPENSATION_DLQ_TOPIC", default=None)
def prune_claims(
    older_than: str | None,
    apply: bool,
    bootstrap_servers: str,
    database_url: str,
    topic: str,
    dlq_topic: str | None,
) -> None:
    """Delete COMPENSATED and FAILED claims that no request can come back for.

    A claim stops a redelivered request from calling an undo twice, so it is only pruned once
    the journal topic and its dead-letter topic no longer retain anything that old: the age
    may not be shorter than the longer of their retentions, and nothing is pruned while a
    topic keeps events forever. CLAIMED and TIMED_OUT claims (a call in doubt) are never
    pruned. Only this journal's claims are pruned (the topic on this Kafka cluster), with the
    claims older than claims naming their journal; another journal sharing the database
    prunes its own. Exit status: 0 done, 1 refused, 2 usage, 3 Kafka or the database does
    not answer.
    """
    from confluent_kafka.admin import AdminClient

    from sagacity._env import claim_store, journal_identity
    from sagacity.errors import PersistenceError, SagacityError, TopicNotFoundError
    from sagacity.producer import describe_topic as describe
    from sagacity.producer import with_logger

    admin = AdminClient(with_logger({"bootstrap.servers": bootstrap_servers}))
    retentions: dict[str, int] = {}
    for name in (topic, dlq_topic or f"{topic}.dlq"):
        try:
            info = describe(admin, name, bootstrap=bootstrap_servers, timeout=10)
        except TopicNotFoundError:
            if name == topic:
                raise CommandError(f"topic {topic!r} does not exist", USAGE) from None
            continue  # no dead-letter topic: nothing was ever dead-lettered
        except SagacityError as exc:
            raise CommandError.of(exc) from exc
        retentions[name] = int(info.config.get("retention.ms", str(7 * _DAY_S * 1000)))
    forever = [name for name, ms in retentions.items() if ms < 0]
    if forever:
        raise CommandError(
            f"refused: {', '.join(forever)} keeps events forever, so a request can be delivered "
            "again at any time and no claim can be pruned safely",
            FAILED,
        )
    floor_s = max(retentions.values()) / 1000
    age_s = floor_s if older_than is None else parse_duration(older_than)
    if age_s < floor_s:
        raise CommandError(
            f"refused: {older_than} is shorter than the topics' retention "
            f"({floor_s / _DAY_S:g} days): a request still on a topic could be redelivered and "
            "find no claim",
            FAILED,
        )
    try:
        journal = journal_identity(
            topic=topic,
            kafka={"bootstrap.servers": bootstrap_servers},
            name=os.environ.get("SAGACITY_JOURNAL_NAME") or None,
        )
        store = claim_store(database_url, instance="prune-claims", journal=journal)
    except SagacityError as exc:
        raise CommandError.of(exc) from exc
    try:
        count = store.prune(older_than_s=age_s, apply=apply)
    except PersistenceError as exc:
        raise CommandError.of(exc) from exc
    finally:
        store.close()
    days = f"{age_s / _DAY_S:g} days"
    if apply:
        click.echo(f"pruned {count} settled claim(s) finished more than {days} ago")
    else:
        click.echo(
            f"{count} settled claim(s) finished more than {days} ago; pass --apply to delete them"
        )
