"""The one rule mapping a refusal (a :class:`~sagacity.errors.SagacityError`) to its HTTP
status, used by the approvals API and the operator console."""

from __future__ import annotations

from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalMissingError,
    ApprovalNotFound,
    AuthenticationError,
    ChainIntegrityError,
    ConfigurationError,
    ConstraintViolation,
    DeclarationError,
    InvalidArgumentError,
    JournalError,
    PayloadMismatchError,
    PermissionDeniedError,
    PersistenceError,
    SagacityError,
    SerializationError,
    TailMovedError,
    UnknownSagaError,
    UnverifiableApprovalError,
    WriterConflictError,
)

__all__ = ["status_for"]


def status_for(exc: SagacityError) -> int:
    """The HTTP status a refusal answers, on the API and the console alike: 401 not
    authenticated, 403 not allowed, 404 unknown, 422 invalid input, 409 refused by the
    state of the request or the chain, 503 a dependency or the configuration unusable, 500
    anything else."""
    if isinstance(exc, AuthenticationError):
        return 401
    if isinstance(exc, PermissionDeniedError):
        return 403
    if isinstance(exc, UnknownSagaError | ApprovalNotFound):
        return 404
    if isinstance(exc, InvalidArgumentError | SerializationError):
        return 422
    if isinstance(exc, DeclarationError | ConfigurationError):
        return 503
    if isinstance(
        exc,
        AlreadyDecidedError
        | ApprovalMissingError
        | PayloadMismatchError
        | UnverifiableApprovalError
        | ConstraintViolation
        | ApprovalExpiredError
        | ChainIntegrityError
        | WriterConflictError
        | TailMovedError
        | ApprovalError,
    ):
        return 409
    if isinstance(exc, JournalError | PersistenceError):
        return 503
    return 500
