"""``sagacity topic``: create and check the journal topic."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from sagacity.cli._exit import FAILED, UNAVAILABLE, CommandError
from sagacity.cli._kafka_env import kafka_env
from sagacity.config._defaults import DEFAULT_TOPIC as _DEFAULT_TOPIC
from sagacity.errors import (
    JournalError,
    JournalUnavailableError,
    TopicNotFoundError,
)


def _connection(bootstrap: str | None) -> tuple[str, dict[str, str | int | float | bool]]:
    """The brokers and client settings, once the brokers answer.

    Raises:
        click.UsageError: no bootstrap servers.
        CommandError: the brokers do not answer within the services' start-up budget: one
            line, exit 3 (:func:`sagacity.producer.check_reachable`).
    """
    from sagacity.producer import check_reachable, startup_timeout

    _, settings = kafka_env(bootstrap)
    config: dict[str, str | int | float | bool] = {
        "bootstrap.servers": settings.bootstrap_servers,
        **settings.client,
    }
    try:
        check_reachable(config, timeout=startup_timeout())
    except JournalError as exc:
        raise CommandError.of(exc) from exc
    return settings.bootstrap_servers, config


def _bootstrap_option(f: Any) -> Any:
    return click.option(
        "--bootstrap-servers",
        "bootstrap",
        metavar="HOST:PORT[,…]",
        help="Kafka bootstrap servers [default: $SAGACITY_BOOTSTRAP_SERVERS].",
    )(f)


def _topic_option(f: Any) -> Any:
    return click.option(
        "--topic",
        default=lambda: os.environ.get("SAGACITY_TOPIC") or _DEFAULT_TOPIC,
        show_default="$SAGACITY_TOPIC or sagacity.journal",
        help="The journal topic.",
    )(f)


@click.group("topic")
def topic() -> None:
    """Create and check the journal topic (cleanup.policy=delete, audit retention)."""


@topic.command("create")
@_bootstrap_option
@_topic_option
@click.option(
    "--partitions",
    type=click.IntRange(1, 10_000),
    default=12,
    show_default=True,
    help="Partitions; fixed for the topic's life (a saga stays in one partition).",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(1, 32),
    default=None,
    help="Copies of each partition [default: min(3, brokers)].",
)
@click.option(
    "--min-insync-replicas",
    type=click.IntRange(1, 32),
    default=None,
    help="Copies written before an event is acknowledged [default: replicas - 1, ≥ 1].",
)
@click.option(
    "--retention",
    default="400d",
    show_default=True,
    help="How long events stay: 400d, 13mo, 2y, or infinite (m alone is minutes: refused).",
)
@click.option(
    "--force-short-retention",
    is_flag=True,
    help="Allow a retention shorter than six months (not for production).",
)
@click.option(
    "--exist-ok",
    is_flag=True,
    help="Succeed when the topic exists already (a deployment's init step); `topic check` "
    "reviews its settings.",
)
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")
def create_cmd(
    bootstrap: str | None,
    topic: str,
    partitions: int,
    replication_factor: int | None,
    min_insync_replicas: int | None,
    retention: str,
    force_short_retention: bool,
    exist_ok: bool,
    timeout: float,
) -> None:
    """Create the journal topic with settings that keep evidence."""
    from confluent_kafka.admin import AdminClient

    from sagacity.producer import MIN_RETENTION_MS, TopicSpec, parse_retention, with_logger
    from sagacity.producer import create_topic as create
    from sagacity.producer import describe_topic as describe

    try:
        retention_ms = parse_retention(retention)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--retention") from exc
    if retention_ms != -1 and retention_ms < MIN_RETENTION_MS and not force_short_retention:
        raise click.BadParameter(
            f"{retention} is shorter than six months, the least the EU AI Act (Art. 19) asks "
            "logs to be kept; pass --force-short-retention for a test topic",
            param_hint="--retention",
        )
    servers, config = _connection(bootstrap)
    if exist_ok:
        try:
            found = describe(
                AdminClient(with_logger(config)), topic, bootstrap=servers, timeout=timeout
            )
        except TopicNotFoundError:
            pass
        except JournalError as exc:
            code = UNAVAILABLE if isinstance(exc, JournalUnavailableError) else FAILED
            raise CommandError(str(exc), code) from exc
        else:
            click.echo(f"{found.name} exists already ({found.partitions} partitions)")
            return
    spec = TopicSpec(
        partitions=partitions,
        replication_factor=replication_factor,
        min_insync_replicas=min_insync_replicas,
        retention_ms=retention_ms,
    )
    try:
        info = create(
            AdminClient(with_logger(config)), topic, spec, bootstrap=servers, timeout=timeout
        )
    except JournalError as exc:
        code = UNAVAILABLE if isinstance(exc, JournalUnavailableError) else FAILED
        raise CommandError(str(exc), code) from exc
    click.echo(
        f"created {info.name}: {info.partitions} partitions, replication factor "
        f"{info.replication_factor}, min.insync.replicas {info.config.get('min.insync.replicas')}, "
        f"retention.ms {info.config.get('retention.ms')}, cleanup.policy "
        f"{info.config.get('cleanup.policy')}"
    )


@topic.command("check")
@_bootstrap_option
@_topic_option
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")
def check_cmd(bootstrap: str | None, topic: str, as_json: bool, timeout: float) -> None:
    """Check the journal topic's settings; exit 1 when one would lose evidence.

    Exit status: 0 all safe, 1 a finding is unsafe, 2 usage or no such topic, 3 the cluster
    does not answer.
    """
    from confluent_kafka.admin import AdminClient

    from sagacity.producer import check_topic as check
    from sagacity.producer import describe_topic as describe
    from sagacity.producer import with_logger

    servers, config = _connection(bootstrap)
    try:
        info = describe(AdminClient(with_logger(config)), topic, bootstrap=servers, timeout=timeout)
    except JournalError as exc:  # unreachable: 3; no such topic, or refused its ACL: 2
        raise CommandError.of(exc) from exc
    findings = check(info)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "topic": info.name,
                    "partitions": info.partitions,
                    "replication_factor": info.replication_factor,
                    "ok": all(f.ok for f in findings),
                    "findings": [
                        {
                            "setting": f.setting,
                            "value": f.value,
                            "ok": f.ok,
                            "fatal": f.fatal,
                            "detail": f.detail,
                        }
                        for f in findings
                    ],
                },
                indent=2,
            )
        )
    else:
        click.echo(f"{info.name}: {info.partitions} partitions, {info.brokers} broker(s)")
        width = max(len(f.setting) for f in findings)
        for f in findings:
            mark = "ok  " if f.ok else ("FATAL" if f.fatal else "BAD ")
            click.echo(f"  {mark} {f.setting:<{width}}  {f.value:<14} {f.detail}")
    if not all(f.ok for f in findings):
        raise SystemExit(1)
