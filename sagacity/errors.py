"""The error hierarchy: one root, a family per concern, structured attributes.

Every error Sagacity raises derives from :class:`SagacityError`.  Third-party errors (Kafka,
Postgres, HTTP) are mapped to one of these families once, at the adapter boundary, with the
original kept as ``__cause__``.
"""

from __future__ import annotations


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


# --- declarations --------------------------------------------------------------------------
class DeclarationError(SagacityError):
    """A tool's ``@compensable`` declaration is wrong (raised at ``wrap()`` time)."""


# --- saga scope ----------------------------------------------------------------------------
class SagaError(SagacityError):
    """Misuse of a saga scope: nesting, an unknown saga, a saga already ended."""


class NestedSagaError(SagaError):
    """A saga was opened while another one is active in the same context."""


class UnknownSagaError(SagaError):
    """No journal entries exist for the saga id."""


# --- journal and chain ---------------------------------------------------------------------
class JournalError(SagacityError):
    """The journal could not record or read an event."""


class JournalUnavailableError(JournalError):
    """The journal's backing store could not be reached or did not acknowledge in time.

    When raised for an ``INTENT``, the tool was not called.
    """


class ChainError(JournalError):
    """An event does not extend its saga's chain (wrong previous hash or seq: a fork)."""


class WriterConflictError(JournalError):
    """Another live writer owns the saga (see docs/adr/0004-single-writer.md)."""


class SerializationError(SagacityError):
    """A value cannot be encoded into, or decoded from, the journal's wire or canonical form."""


# --- approvals -----------------------------------------------------------------------------
class ApprovalError(SagacityError):
    """An approval-gate operation was refused."""


class ApprovalNotFound(ApprovalError):  # noqa: N818 - public name fixed by the API
    """No pending approval request exists for ``(saga_id, seq)``."""


class ApprovalMissingError(ApprovalError):
    """Resume was attempted with no human approval recorded in the journal."""


class PayloadMismatchError(ApprovalError):
    """The live payload's SHA-256 differs from the approved one."""


class AlreadyDecidedError(ApprovalError):
    """A decision was made on a request already decided (or signed by the same approver)."""


class ConstraintViolation(ApprovalError):  # noqa: N818 - reads as a policy outcome
    """A policy constraint refuses the call whatever the approvals."""


class ApprovalExpiredError(ApprovalError):
    """The approval request's time to live has passed."""


# --- compensation --------------------------------------------------------------------------
class CompensationError(SagacityError):
    """A compensation could not be run or failed."""


# --- persistence ---------------------------------------------------------------------------
class PersistenceError(SagacityError):
    """The database could not be reached or refused an operation."""
