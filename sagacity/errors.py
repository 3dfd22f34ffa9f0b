"""The error hierarchy: one root, a family per concern, structured attributes.

Every error Sagacity raises derives from :class:`SagacityError`.  Third-party errors (Kafka,
Postgres, HTTP) are mapped to one of these families once, at the adapter boundary, with the
original kept as ``__cause__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sagacity.saga._result import SagaResult


class SagacityError(Exception):
    """Root of every error Sagacity raises.

    Attributes:
        saga_id: the saga concerned, when there is one.
        seq: the journal sequence number concerned, when there is one.
    """

    def __init__(self, message: str, *, saga_id: str | None = None, seq: int | None = None):
        super().__init__(message)
        self.message = message
        self.saga_id = saga_id
        self.seq = seq


class ConfigurationError(SagacityError):
    """Sagacity was configured with an invalid option or a missing component."""


class DurationError(ConfigurationError, ValueError):
    """A duration (``15m``, ``400d``, ``13mo``) does not parse, or its unit is ambiguous."""


class InvalidArgumentError(SagacityError):
    """A caller passed a value of the wrong type or an empty one (an approver, a payload …)."""


# --- declarations --------------------------------------------------------------------------
class DeclarationError(SagacityError):
    """A tool's ``@compensable`` declaration is wrong (raised at ``wrap()`` time)."""


class PolicyError(DeclarationError):
    """A tool policy is malformed (raised when it is loaded).

    Attributes:
        source: where the policy came from (a file path, or ``<policy>``).
        line: the line of the TOML text at fault, when known.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        where = source or "<policy>"
        super().__init__(f"{where}{f', line {line}' if line else ''}: {message}")
        self.source = source
        self.line = line


# --- saga scope ----------------------------------------------------------------------------
class SagaError(SagacityError):
    """Misuse of a saga scope: nesting, an unknown saga, a saga already ended."""


class NestedSagaError(SagaError):
    """A saga was opened while another one is active in the same context."""


class UnknownSagaError(SagaError):
    """No journal entries exist for the saga id."""


class SagaExistsError(SagaError):
    """A saga was opened with an id whose chain already exists."""


class SagaClosedError(SagaError):
    """A wrapped tool was called in the context of a saga that has already ended."""


class OutcomeTimeoutError(SagaError, TimeoutError):
    """A saga's final outcome was not journaled within the time allowed."""


class SagaFailedError(SagaError):
    """A wrapped tool was called after a step of the same saga failed; the tool was not called.

    New side effects after a failure would only be undone again by the compensation that the
    saga runs on exit unless the failure is recovered, so they are refused (a retry of the
    failed tool, and reads, still run).
    """


class SagaCancelledError(SagaError):
    """The run was cancelled (the agent's cancellation, a kill switch): what ended its work.

    Its completed steps are compensated, once; the cancellation itself is re-raised.
    """


# --- journal and chain ---------------------------------------------------------------------
class JournalError(SagacityError):
    """The journal could not record or read an event."""


class JournalUnavailableError(JournalError):
    """The journal's backing store could not be reached or did not acknowledge in time.

    When raised for an ``INTENT``, the tool was not called.
    """


class KafkaAccessDeniedError(JournalError):
    """Kafka refused the principal this process connects as: its credentials, or an ACL it
    lacks (a topic, a consumer group, the cluster's ``IdempotentWrite``).  A configuration
    error, never retried.

    Attributes:
        principal: the SASL user refused (``None`` without SASL).
        code: librdkafka's error name (``TOPIC_AUTHORIZATION_FAILED`` …).
    """

    def __init__(self, message: str, *, principal: str | None = None, code: str = "") -> None:
        super().__init__(message)
        self.principal = principal
        self.code = code


class ChainError(JournalError):
    """An event does not extend its saga's chain (wrong previous hash or seq: a fork)."""


class TailMovedError(ChainError):
    """A conditional append found the saga's chain longer than the caller read it.

    Nothing was appended; re-read the chain and decide again.
    """


class ChainIntegrityError(JournalError):
    """A saga's stored chain does not verify; gate decisions on it are refused."""


class WriterConflictError(JournalError):
    """Another live writer owns the saga (see docs/adr/0004-single-writer.md)."""


class LeaseHeldError(WriterConflictError):
    """A takeover was refused: the saga's writer may still be alive (its lease has not
    expired, or it recorded none); see docs/adr/0011-writer-lease.md."""


class SagaNotLiveError(JournalError):
    """A takeover was refused: no writer owns the saga (unknown, handed off or ended)."""


class TopicError(JournalError):
    """The journal topic is missing or configured in a way that would lose evidence.

    Attributes:
        topic: the topic concerned.
    """

    def __init__(self, message: str, *, topic: str):
        super().__init__(message)
        self.topic = topic


class TopicNotFoundError(TopicError):
    """The journal topic does not exist (create it with ``sagacity topic create``)."""


class TopicConfigError(TopicError):
    """The journal topic's configuration is unsafe for evidence (e.g. log compaction)."""


class EventTooLargeError(JournalError):
    """An event exceeds the broker's or producer's message size limit; nothing was written.

    Attributes:
        size: the event's encoded size in bytes.
        limit: the largest size the topic and producer accept.
    """

    def __init__(self, message: str, *, size: int, limit: int, saga_id: str | None = None) -> None:
        super().__init__(message, saga_id=saga_id)
        self.size = size
        self.limit = limit


class SerializationError(SagacityError):
    """A value cannot be encoded into, or decoded from, the journal's wire or canonical form."""


# --- approvals -----------------------------------------------------------------------------
class ApprovalError(SagacityError):
    """An approval-gate operation was refused.

    Attributes:
        result: when the refusal ended the saga (a changed payload, an expired request, a
            constraint), the :class:`~sagacity.SagaResult` of the compensation that followed.
        detail: why, beyond the message, when there is more to say (an approval whose
            signature does not verify, no key pinned to verify it).
    """

    def __init__(
        self,
        message: str,
        *,
        saga_id: str | None = None,
        seq: int | None = None,
        result: SagaResult | None = None,
        detail: str | None = None,
    ):
        super().__init__(message, saga_id=saga_id, seq=seq)
        self.result = result
        self.detail = detail

    def __str__(self) -> str:
        """The message, and its reason where there is one (``detail``): an error printed says
        why, not only what."""
        return self.message if not self.detail else f"{self.message}: {self.detail}"


class ApprovalNotFound(ApprovalError):  # noqa: N818 - public name fixed by the API
    """No pending approval request exists for ``(saga_id, seq)``."""


class ApprovalMissingError(ApprovalError):
    """Resume was attempted with no human approval recorded in the journal."""


class PayloadMismatchError(ApprovalError):
    """The live payload's SHA-256 differs from the approved one."""


class UnverifiableApprovalError(ApprovalError):
    """The approval request records no payload hash (or one its own payload does not match).

    An approval that never recorded what it approved cannot be shown to match, so it is refused.
    """


class RequestChangedError(ApprovalError):
    """The request a decision was made on (the hash the approver was shown) is not the chain's
    request at that seq: nothing is signed; the refusal is journaled and the request stays
    pending."""


class UnderDeclaredRequestError(ApprovalError):
    """The request claims fewer signatures than the deciding component declares for its tool
    (a requester cannot lower the bar): nothing is signed or run, and the refusal is
    journaled."""


class GrantRefusedError(ApprovalError):
    """A standing grant was refused when it was asked for (nothing journaled): a tool that can
    never be granted here, a rule that does not parse, a deadline out of range, an ended saga
    (docs/operations/grants.md)."""


class AlreadyDecidedError(ApprovalError):
    """A decision was made on a request already decided (or signed by the same approver)."""


class ConstraintViolation(ApprovalError):  # noqa: N818 - reads as a policy outcome
    """A policy constraint refuses the call whatever the approvals."""


class ApprovalExpiredError(ApprovalError):
    """The approval request's time to live has passed."""


class StepInDoubtError(ApprovalError):
    """A resume found the approved call already started by an earlier resume that never
    recorded its outcome: the call may have taken effect, so it is not made again.

    The step is journaled ``SUSPECT`` for a person to settle, and the saga handed to
    compensation (:attr:`result`).
    """


class AuthenticationError(SagacityError):
    """A request to the approvals service carried no credentials, or unknown ones."""


class PermissionDeniedError(ApprovalError):
    """The authenticated principal may not decide for the request's tool."""


class SelfApprovalError(PermissionDeniedError):
    """The principal deciding a request is the one that made it, or one of its agents: nobody
    decides their own request (docs/operations/approvals.md, "Principals")."""


class DecisionInProgressError(AlreadyDecidedError):
    """Another decision on the same request holds its lock; retry shortly."""


# --- compensation --------------------------------------------------------------------------
class CompensationError(SagacityError):
    """A compensation could not be run or failed."""


class CompensationConflictError(CompensationError):
    """Another run is compensating the same saga; this one stopped before acting."""


class CompensationTimeoutError(CompensationError, TimeoutError):
    """A compensation did not return within the time allowed; its effect is in doubt."""


class CompensationInDoubtError(CompensationError):
    """An earlier attempt of a compensation that is not idempotent may have taken effect.

    It is not called again: a person checks the step (its claim records what is known).
    """


class CompensationRefusedError(CompensationError):
    """An operator's request to compensate a saga was refused and nothing was journaled: the
    saga is unknown, live, has not ended, was erased, or a compensation of it is pending."""


class CompensationInterruptedError(CompensationError):
    """The bookkeeping around an undo call failed before the call (the service could not
    claim the step: its database is unreachable), so the undo was not called.

    Raised by an ``invoke`` hook, it is no outcome of the step: the runner journals nothing
    for it and stops, leaving its ``COMPENSATION_INTENT`` open; a later run takes the step up
    again (the service retries).
    """


class ToolLoadError(ConfigurationError):
    """A ``package.module:attr`` tools target cannot be imported or declares no tool."""


# --- persistence ---------------------------------------------------------------------------
class PersistenceError(SagacityError):
    """The database could not be reached or refused an operation."""


class PersistenceUnavailableError(PersistenceError):
    """The database could not be reached, the connection was lost, or a concurrent transaction
    won (serialization failure, deadlock): retrying may succeed (the one retry rule of
    :mod:`sagacity.postgres`)."""


class ArchiveSchemaError(PersistenceError):
    """The database (or schema) reached is not a Sagacity archive, or not a compatible one."""


# --- archive and audit ---------------------------------------------------------------------
class SigningKeyError(SagacityError):
    """A checkpoint signing key or public key cannot be read or is not an Ed25519 key."""


class RetentionError(SagacityError):
    """A retention run was refused (too short a retention, or an export that failed)."""


class RoundLogError(SagacityError):
    """The log of signing rounds cannot be extended or proven from the archive: its leaves no
    longer hash to a signed root, or a round asked for is not there."""


class WitnessError(SagacityError):
    """A witness location (a file or an HTTP endpoint outside the archive) cannot be read or
    written, or holds something that is not a signed round."""


class AuditorStateError(SagacityError):
    """An auditor's own record of the rounds it saw cannot be read or written."""


# --- local development stack ---------------------------------------------------------------
class DevStackError(SagacityError):
    """The local development stack (Kafka broker, PostgreSQL server) could not be run."""


class MissingToolError(DevStackError):
    """A program the local stack needs (Java, Maven, PostgreSQL) is not installed.

    Attributes:
        tool: the program looked for (``java``, ``mvn``, ``postgres``).
        install_hint: how to install it (Debian package names).
    """

    def __init__(self, tool: str, install_hint: str):
        super().__init__(f"{tool} is not installed or not on PATH; install it with: {install_hint}")
        self.tool = tool
        self.install_hint = install_hint


class PortInUseError(DevStackError):
    """A port the stack was asked to use is already taken by another process."""

    def __init__(self, port: int):
        super().__init__(f"port {port} on 127.0.0.1 is already in use")
        self.port = port


class ProcessStartError(DevStackError):
    """A server process exited or did not become ready; ``log_tail`` holds its last log lines."""

    def __init__(self, message: str, *, log_tail: str = ""):
        full = f"{message}\n--- last lines of the log ---\n{log_tail}" if log_tail else message
        super().__init__(full)
        self.log_tail = log_tail


# --- encryption and erasure ----------------------------------------------------------------
class EncryptionError(SagacityError):
    """A journal field could not be sealed or opened with its saga's data key."""


class KeyEncryptionKeyError(EncryptionError, ConfigurationError):
    """The key-encryption key is not configured, cannot be read, is not one, or is not the one
    the stored data keys are wrapped under.

    Attributes:
        setting: the setting that names the key file (``SAGACITY_KEY_ENCRYPTION_KEY_FILE``).
    """

    def __init__(self, message: str, *, setting: str, saga_id: str | None = None):
        super().__init__(f"{setting}: {message}", saga_id=saga_id)
        self.setting = setting


class UnopenableError(EncryptionError):
    """One saga's sealed data cannot be opened, for a reason that is that saga's, not the
    process's: its data key is missing, wrapped under a key-encryption key this process does
    not hold, or does not authenticate.  A service makes it the fate of the message concerned
    (quarantined or dead-lettered with :attr:`reason`), never of the service.

    Attributes:
        reason: the short name a service files the message under.
    """

    reason = "unopenable"


class CiphertextAuthenticationError(UnopenableError):
    """A sealed field or a wrapped data key failed AEAD authentication: it was altered, or it
    is opened with another key or for another place (saga, seq, field) than it was sealed for.

    Attributes:
        field: the journal field concerned (``payload``, ``result``), when there is one.
    """

    reason = "authentication failed"

    def __init__(
        self,
        message: str,
        *,
        saga_id: str | None = None,
        seq: int | None = None,
        field: str | None = None,
    ):
        super().__init__(message, saga_id=saga_id, seq=seq)
        self.field = field


class SagaErasedError(EncryptionError):
    """The saga's data key was destroyed (an erasure): nothing of it can be opened or sealed.

    Attributes:
        erased_at: when the key was destroyed (ISO 8601, UTC).
    """

    def __init__(self, message: str, *, saga_id: str, erased_at: str | None = None):
        super().__init__(message, saga_id=saga_id)
        self.erased_at = erased_at


class DataKeyNotFoundError(UnopenableError):
    """No data key exists for the saga: nothing of it was ever sealed."""

    reason = "data key not found"


class DataKeyNotHeldError(UnopenableError):
    """The saga's data key is wrapped under a key-encryption key this process does not hold:
    that saga's fields cannot be opened or sealed here (other sagas' can).

    Attributes:
        kek_id: the key-encryption key the data key is wrapped under.
        setting: the setting that names the key files held (``SAGACITY_KEY_ENCRYPTION_KEY_FILE``).
    """

    reason = "key-encryption key not held"

    def __init__(self, message: str, *, saga_id: str, kek_id: str, setting: str):
        super().__init__(f"{setting}: {message}", saga_id=saga_id)
        self.kek_id = kek_id
        self.setting = setting


class ErasureRefusedError(SagacityError):
    """An erasure was refused and nothing was erased: the saga is unknown, still live, or in
    chain form 1, whose hashes are over its data (docs/adr/0019-erasure.md §4)."""
