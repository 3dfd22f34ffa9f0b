"""One replica of the approvals service: core, working table, consumer, sweep and HTTP API."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from fastapi import FastAPI
from starlette.applications import Starlette

from sagacity.chain._acceptance import Tail
from sagacity.consumers._tools import register_tools
from sagacity.consumers.approvals._api import create_app
from sagacity.consumers.approvals._api_limits import INSECURE_VALUE
from sagacity.consumers.approvals._auth import AuthFile
from sagacity.consumers.approvals._consumer import RequestConsumer
from sagacity.consumers.approvals._metrics import GateCollector, exposition
from sagacity.consumers.approvals._routing import LiveRouting
from sagacity.consumers.approvals._service import ApprovalService
from sagacity.consumers.approvals._settings import ApprovalsSettings
from sagacity.consumers.approvals._store import approval_store
from sagacity.consumers.approvals.console import LoginLimiter, SessionStore, create_console
from sagacity.consumers.approvals.console._archive import ArchiveView
from sagacity.consumers.approvals.console._notify import Notifier
from sagacity.consumers.approvals.slack import SlackConfig, SlackIntegration, slack_config
from sagacity.entries._memory import InMemoryJournal
from sagacity.errors import ConfigurationError, SagacityError, SigningKeyError
from sagacity.journal import Journal
from sagacity.ports import Consumers, Dependencies
from sagacity.privacy._keys import KeyService
from sagacity.saga._saga import Sagacity
from sagacity.signing._decision_signature import DecisionSigner
from sagacity.signing._operator_signature import verifier_from_env as operator_verifier_from_env

log = logging.getLogger("sagacity.approvals")


def decision_signer(settings: ApprovalsSettings, journal: Journal) -> DecisionSigner | None:
    """The key the service signs its decisions with.

    Fails closed: on a shared journal (Kafka) decisions without a signature would be refused
    by every resumer, so a missing key is a configuration error, not a silent fallback.  Only
    an in-memory journal (tests, one process) runs without one; ``--insecure-dev`` without one
    signs with an ephemeral key (logged), valid for this process's own resumes.

    Raises:
        ConfigurationError: no key on a shared journal, or the key file is unusable.
    """
    if settings.signing_key is None:
        if isinstance(journal, InMemoryJournal):
            return None
        if settings.insecure_dev:
            # The demo mode: decisions are still signed, with a key that dies with the process,
            # so this service's own resume works and nothing else accepts them unless pinned.
            signer = DecisionSigner.ephemeral()
            log.warning(
                "INSECURE DEV: decisions are signed with an ephemeral approvals key %s; agents "
                "resume them only with SAGACITY_APPROVALS_PUBLIC_KEY=%s, and only until this "
                "process exits",
                signer.key_id,
                signer.public_hex,
            )
            return signer
        raise ConfigurationError(
            "the approvals service signs every decision it journals: set "
            "SAGACITY_APPROVALS_SIGNING_KEY to its Ed25519 key file (create one with "
            "`sagacity approvals keygen --out FILE`) and pin the printed public key in "
            "SAGACITY_APPROVALS_PUBLIC_KEY wherever approvals are resumed"
        )
    try:
        signer = DecisionSigner.from_file(settings.signing_key)
    except SigningKeyError as exc:
        raise ConfigurationError(f"SAGACITY_APPROVALS_SIGNING_KEY: {exc.message}") from exc
    log.info("decisions are signed with approvals key %s", signer.key_id)
    return signer


def placement(journal: Journal) -> Callable[[bytes | None, int], bool] | None:
    """Whether a message's key maps to the partition it is on (the journal's reader's
    :meth:`~sagacity.ports.PartitionMap.placed`: its partitioner over its topic's
    partitions); ``None`` for a journal that has no partitions."""
    placed = getattr(getattr(journal, "reader", None), "placed", None)
    if not callable(placed):
        return None
    return cast("Callable[[bytes | None, int], bool]", placed)


def prefix_reader(journal: Journal) -> Callable[[str, int], Tail | None] | None:
    """A saga's accepted tail before an offset, read through the journal's reader (with the
    read index where it has one); ``None`` for a journal without one."""
    reader = getattr(journal, "reader", None)
    read = getattr(reader, "read", None)
    if read is None:
        return None

    def prefix(saga_id: str, offset: int) -> Tail | None:
        if offset < 1:
            return None
        found = read(saga_id, until_offset=offset - 1)
        if not found.entries and found.base_seq == 0:
            return None
        seq, digest = found.tail
        return Tail(seq=seq, hash=digest)

    return prefix


def _check_handed(handed: Dependencies, settings: ApprovalsSettings, *, consume: bool) -> None:
    """Refuse a server handed no consumer runtime to consume with, or no archive bundles for
    the archive its settings name.

    Raises:
        ConfigurationError: naming what to hand and where it is built.
    """
    if consume and handed.consumers is None:
        raise ConfigurationError(
            "the approvals service's request consumer runs on the consumer runtime it is "
            "handed (Dependencies.consumers): build its dependencies with "
            "sagacity.compose.approvals"
        )
    if settings.archive_database_url and handed.archive_bundles is None:
        raise ConfigurationError(
            "the console reads the archive through the bundles it is handed "
            "(Dependencies.archive_bundles): build them with the serve approvals command"
        )


class ApprovalsServer:
    """Assembles one replica; :attr:`app` is the ASGI application.

    Args:
        settings: how to run.
        dependencies: what the server is handed (:func:`sagacity.compose.approvals` builds
            them from the settings; :func:`sagacity.compose.approvals_on` on a journal its
            caller made): the shared journal, its key service, the request store (the
            PostgreSQL one: the console, the notifier and Slack keep their rows in its
            database), the request consumer's client settings and its consumer runtime
            (``consumers``, needed with ``consume``); the server closes the journal and the
            key service handed.
        consume: run the consumer group (needs Kafka); off, requests are materialised from the
            chain on first access only.
        tools: tool objects to register in addition to ``settings.tools``.
    """

    def __init__(
        self,
        settings: ApprovalsSettings,
        *,
        dependencies: Dependencies,
        consume: bool = True,
        tools: Iterable[Any] = (),
    ) -> None:
        self.settings = settings
        slack = slack_config(settings)  # a broken Slack setting stops it before it connects
        handed = dependencies
        if (
            handed.journal is None
            or handed.requests is None
            or handed.decode is None
            or handed.console_sessions is None
            or handed.notice_claims is None
        ):
            raise ConfigurationError(
                "the approvals service is handed its journal, its request store, its console "
                "sessions, its notice claims and its decoder: build its dependencies with "
                "sagacity.compose.approvals"
            )
        _check_handed(handed, settings, consume=consume)
        self._decode = handed.decode
        self._notice_claims = handed.notice_claims
        self._slack_tables = handed.slack_tables
        self._archive_bundles = handed.archive_bundles
        self.journal = handed.journal
        self._client = dict(handed.client)
        # The key service handed is this server's to close (none is handed with a journal
        # its caller made: sagacity.compose.approvals_on).
        self._keys: KeyService | None = handed.keys
        self.auth = AuthFile(settings.auth_file) if settings.auth_file else None
        # Routes, groups and M of N: the principals file's, as it is now (routing.md).
        auth = self.auth
        self.routing = LiveRouting(lambda: auth.current().routing) if auth is not None else None
        self.sagacity = Sagacity(
            self.journal,
            compensation="delegated",
            approval_ttl=settings.approval_ttl_s,
            policy_version=settings.policy_version,
            decision_signer=decision_signer(settings, self.journal),
            approvals_public_key=settings.public_key,
            approver_groups=self.routing,
            # Only an extension a pinned operator key signed moves a deadline.
            operator_public_key=operator_verifier_from_env(),
        )
        # The rows count the approvals the resume counts and the extensions the expiry counts:
        # those the service's keys verify.
        self.store = approval_store(
            handed.requests(
                verifier=self.sagacity.decision_verifier,
                journal=self.sagacity.journal_identity,
                operator=self.sagacity.operator_verifier,
            )
        )
        register_tools(self.sagacity, settings.tools, required=False)
        for tool in tools:
            self.sagacity.wrap(tool)
        self.service = ApprovalService(
            self.sagacity, self.store, lock_timeout_s=settings.lock_timeout_s, routing=self.routing
        )
        self.consumer = (
            self._request_consumer(settings, handed.consumers)
            if consume and handed.consumers is not None
            else None
        )
        self.app: FastAPI = self._api(settings)
        self.sessions = SessionStore(handed.console_sessions, ttl_s=settings.console_session_ttl_s)
        self.login_limiter = LoginLimiter()
        if self.auth is not None:
            # The console needs signed-in principals; with --insecure-dev it is not served.
            self.app.mount("/ui", self._console(settings, self.auth))
        self.notifier = self._notifier(settings) if settings.notify else None
        self.slack = self._slack(settings, slack) if slack is not None else None
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self.app.router.on_startup.append(self.start)
        self.app.router.on_shutdown.append(self.stop)

    def _request_consumer(
        self, settings: ApprovalsSettings, consumers: Consumers
    ) -> RequestConsumer:
        """The consumer group materialising requests from the journal topic."""
        return RequestConsumer(
            self.store,
            consumers=consumers,
            bootstrap_servers=settings.bootstrap_servers or "",
            topic=settings.topic,
            group_id=settings.group_id,
            client=self._client,
            keys=getattr(self.journal, "keys", None),
            decode=self._decode,
            placed=placement(self.journal),
            prefix=prefix_reader(self.journal),
            # An erased saga's opened data leaves this replica as its ERASED is read.
            on_erased=getattr(self.journal, "forget", None),
        )

    def _api(self, settings: ApprovalsSettings) -> FastAPI:
        """The HTTP API, with its gate metrics and health."""
        consumer = self.consumer
        collector = GateCollector(
            lambda: self.store.stats(
                now_us=self.sagacity.now_us(), window_s=settings.stats_window_s
            ),
            (lambda: (consumer.applied, consumer.skipped, consumer.quarantined))
            if consumer is not None
            else None,
            self._auth_state if self.auth is not None else None,
        )
        return create_app(
            self.service,
            auth=self.auth,
            insecure_dev=settings.insecure_dev,
            max_body=settings.max_body_bytes,
            metrics=exposition(collector),
            health=self.health,
        )

    def _console(self, settings: ApprovalsSettings, auth: AuthFile) -> Starlette:
        """The operator console, for the principals of ``auth``."""
        return create_console(
            self.service,
            auth=auth,
            sessions=self.sessions,
            limiter=self.login_limiter,
            archive=ArchiveView(self._archive_bundles) if self._archive_bundles else None,
        )

    def _notifier(self, settings: ApprovalsSettings) -> Notifier:
        """What tells approvers of new requests and near expiries."""
        return Notifier(
            self.store,
            self.sagacity,
            claims=self._notice_claims,
            urls=settings.notify,
            fmt=settings.notify_format,
            public_url=settings.public_url or f"http://{settings.host}:{settings.port}",
            before_expiry_s=settings.notify_before_expiry_s,
            interval_s=settings.notify_interval_s,
            routing=self.routing,
        )

    def _slack(self, settings: ApprovalsSettings, config: SlackConfig) -> SlackIntegration:
        """Deciding in Slack (docs/operations/slack.md)."""
        assert self.auth is not None  # slack_config refuses a service without principals
        if self._slack_tables is None:
            raise ConfigurationError(
                "the approvals service's Slack integration is handed its tables: build its "
                "dependencies with sagacity.compose.approvals"
            )
        slack = SlackIntegration(
            config,
            service=self.service,
            requests=self.store,
            tables=self._slack_tables,
            auth=self.auth,
            public_url=settings.public_url or f"http://{settings.host}:{settings.port}",
        )
        self.app.mount("/slack", slack.app)
        return slack

    def _auth_state(self) -> tuple[int, int, bool]:
        assert self.auth is not None
        with contextlib.suppress(ConfigurationError):
            self.auth.current()
        return self.auth.reloads, self.auth.failures, self.auth.error is None

    def health(self) -> dict[str, Any]:
        """Details for ``/healthz``; raises when the database or the consumer is down."""
        self.store.ping()
        details: dict[str, Any] = {
            "policy_version": self.settings.policy_version,
            "tools": list(self.sagacity.registry.names()),
        }
        if self.consumer is not None:
            if not self.consumer.alive:
                raise RuntimeError("the consumer thread is not running")
            if self.consumer.error is not None:
                raise RuntimeError(f"the consumer is retrying: {self.consumer.error}")
            details["partitions"] = list(self.consumer.assigned)
            details["applied"] = self.consumer.applied
            # One bad message is its own fate, never the service's: reported, not failing.
            details["quarantined"] = self.consumer.quarantined
            details["skipped"] = self.consumer.skipped
        unheld = getattr(getattr(self.journal, "keys", None), "unheld", ())
        if unheld:
            # Stored keys this process cannot open: those sagas' events are quarantined.
            details["unheld_key_encryption_keys"] = list(unheld)
        if self.auth is not None:
            # Look at the file now (not only when a token is presented), so a broken edit shows.
            self.auth.current()
            details["auth_reloads"] = self.auth.reloads
        if self.slack is not None:
            details["slack"] = self.slack.health()
        return details

    def start(self) -> None:
        """Create the tables, start the consumer and the expiry sweep."""
        if self.settings.insecure_dev:
            banner = "!" * 78
            log.warning(
                "%s\nINSECURE DEV MODE: %s.\nNever run this outside a demo.\n%s",
                banner,
                INSECURE_VALUE,
                banner,
            )
        self.store.migrate()
        self.sessions.migrate()
        if self.notifier is not None:
            self.notifier.start()
        if self.slack is not None:
            self.slack.start()
        if self.consumer is not None:
            self.consumer.start()
        self._sweeper = threading.Thread(target=self._sweep, name="sagacity-approvals-sweep")
        self._sweeper.daemon = True
        self._sweeper.start()

    def stop(self) -> None:
        """Stop the sweep and the consumer, and close the journal (and the key service of a
        journal this server made)."""
        self._stop.set()
        if self.notifier is not None:
            self.notifier.stop()
        if self.slack is not None:
            self.slack.stop()
        if self._sweeper is not None:
            self._sweeper.join(10)
        if self.consumer is not None:
            self.consumer.stop()
        try:
            self.journal.close()
        except SagacityError as exc:
            log.warning("closing the journal: %s", exc)
        finally:
            if self._keys is not None:
                self._keys.close()

    def _sweep(self) -> None:
        while not self._stop.wait(self.settings.sweep_interval_s):
            try:
                self.service.sweep()
            except SagacityError as exc:
                log.warning("expiry sweep failed: %s", exc)
