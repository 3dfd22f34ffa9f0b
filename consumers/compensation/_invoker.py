"""The service's ``invoke`` hook for the core's runner: claim, call with a timeout, record.

The runner journals ``COMPENSATION_INTENT`` durably and then hands each undo to
:class:`ClaimingInvoker`, which

1. claims the step in Postgres before any call, keyed by the journal and the step (its saga
   id, ``EXECUTED`` seq and entry hash): no other journal's claim, nor another entry's at the
   same seq, is ever taken as this step's;
2. if an earlier attempt recorded a result, returns it without calling again;
3. if an earlier attempt may have acted (claimed, or timed out; or an unbound claim written
   before claims named their journal and step, unless it failed) and the compensation is not
   idempotent, refuses (``CompensationInDoubtError``: a person checks), unless a person
   settled that attempt as not executed (``SUSPECT_SETTLED``);
4. otherwise calls the undo in a worker thread, waiting at most the configured timeout (a hang
   becomes ``CompensationTimeoutError``, journaled ``COMPENSATION_FAILED``);
5. records the outcome on the claim before the runner journals it.

When the claim cannot be written (the database is unreachable) nothing was called: it raises
:class:`~sagacity.errors.CompensationInterruptedError`, which the runner does not journal as
the step's outcome, and the job retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sagacity.consumers.compensation import _failpoints
from sagacity.errors import (
    CompensationInDoubtError,
    CompensationInterruptedError,
    CompensationTimeoutError,
    PersistenceError,
)
from sagacity.ports import Claim, ClaimStatus, ClaimStore
from sagacity.tools._codec import decode_result, describe_error, encode_result
from sagacity.undo._compensation import CompensationCall

log = logging.getLogger("sagacity.compensation")

MAX_RESULT_CHARS = 65_536
"""A longer undo result is journaled truncated (the undo ran; its result must fit an event)."""


def sanitize_result(value: object) -> object:
    """A value the journal can always record, whatever the undo returned.

    An undo that returned garbage (an object whose ``repr`` raises, a huge value) has still
    run: its outcome is ``COMPENSATED`` with a description in place of the value.
    """
    try:
        text, _ = encode_result(value)
    except Exception as exc:
        return f"<unrepresentable result of type {type(value).__name__}: {describe_error(exc)}>"
    if len(text) > MAX_RESULT_CHARS:
        return f"<result of type {type(value).__name__} truncated>{text[:MAX_RESULT_CHARS]}"
    return value


def _interrupted(call: CompensationCall, exc: PersistenceError) -> CompensationInterruptedError:
    return CompensationInterruptedError(
        f"{call.target} for step {call.seq} was not called: its claim could not be written "
        f"({exc.message}); the step is taken up again",
        saga_id=call.saga_id,
        seq=call.seq,
    )


def _in_doubt(claim: Claim) -> bool:
    """The claim's undo may have taken effect: claimed or timed out; for an unbound claim
    (perhaps this step's, perhaps another journal's) anything but a failure."""
    if claim.unbound:
        return claim.status is not ClaimStatus.FAILED
    return claim.status in (ClaimStatus.CLAIMED, ClaimStatus.TIMED_OUT)


def _describe(claim: Claim) -> str:
    said = f"{claim.status.value.lower()}, attempt {claim.attempts}"
    if claim.unbound:
        return f"{said}, claimed before claims named their journal and step"
    return said


class ClaimingInvoker:
    """Makes one undo call for the runner: claimed first, bounded in time, recorded.

    Args:
        claims: the claim store.
        timeout_s: the longest an undo may run.
        on_call: told ``(call, seconds, outcome)`` after each call (for metrics).
        on_start: told when an undo call is about to start (for the latency metric).
    """

    def __init__(
        self,
        claims: ClaimStore,
        *,
        timeout_s: float,
        on_call: Callable[[CompensationCall, float, str], None] | None = None,
        on_start: Callable[[CompensationCall], None] | None = None,
    ) -> None:
        self._claims = claims
        self._timeout = timeout_s
        self._on_call = on_call
        self._on_start = on_start

    def __call__(self, call: CompensationCall) -> Any:
        _failpoints.reach("after_intent")
        try:
            claim = self._claims.claim(
                call.saga_id,
                call.seq,
                step_hash=call.step.hash,
                target=call.target,
                key=call.idempotency_key,
            )
        except PersistenceError as exc:
            raise _interrupted(call, exc) from exc
        if claim.status is ClaimStatus.COMPENSATED and not claim.unbound:
            log.info(
                "step already compensated by an earlier attempt; not called again",
                extra={"saga_id": call.saga_id, "seq": call.seq},
            )
            return decode_result(claim.result, claim.result_encoding)
        if not claim.fresh:
            if _in_doubt(claim) and not call.idempotent and not call.retry_after_settlement:
                raise CompensationInDoubtError(
                    f"an earlier attempt of {call.target} for step {call.seq} "
                    f"({_describe(claim)}) may have taken effect and the compensation is not "
                    "declared idempotent; needs a person",
                    saga_id=call.saga_id,
                    seq=call.seq,
                )
            try:
                self._claims.restart(call.saga_id, call.seq, step_hash=call.step.hash)
            except PersistenceError as exc:
                raise _interrupted(call, exc) from exc
        _failpoints.reach("after_claim")
        if self._on_start is not None:
            self._on_start(call)
        started = time.monotonic()
        try:
            value = self._call(call)
        except CompensationTimeoutError as exc:
            self._record(call, ClaimStatus.TIMED_OUT, error=describe_error(exc))
            self._report(call, started, "timeout")
            raise
        except BaseException as exc:
            self._record(call, ClaimStatus.FAILED, error=describe_error(exc))
            self._report(call, started, "error")
            raise
        _failpoints.reach("after_call")
        value = sanitize_result(value)
        text, encoding = encode_result(value)
        self._record(call, ClaimStatus.COMPENSATED, result=text, result_encoding=encoding)
        self._report(call, started, "compensated")
        _failpoints.reach("after_record")
        return value

    def _record(self, call: CompensationCall, status: ClaimStatus, **outcome: str) -> None:
        """Record the call's outcome on its claim; the journal records it whatever happens.

        The undo was called: its outcome (or its own error) is what the runner journals.  If
        the claim cannot be updated it stays ``CLAIMED``, which a later run reads as "may have
        run" only when the journal lacks the outcome too.
        """
        try:
            self._claims.record(call.saga_id, call.seq, status, step_hash=call.step.hash, **outcome)
        except PersistenceError as exc:
            log.warning(
                "the undo's outcome (%s) could not be recorded on its claim: %s",
                status.value,
                exc,
                extra={"saga_id": call.saga_id, "seq": call.seq},
            )

    def _report(self, call: CompensationCall, started: float, outcome: str) -> None:
        if self._on_call is not None:
            self._on_call(call, time.monotonic() - started, outcome)

    def _call(self, call: CompensationCall) -> Any:
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = call.invoke()
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        # A daemon thread: a hung undo cannot be stopped, only stopped waiting for.
        worker = threading.Thread(target=run, name=f"undo-{call.idempotency_key}", daemon=True)
        worker.start()
        if not done.wait(self._timeout):
            raise CompensationTimeoutError(
                f"{call.target} for step {call.seq} did not return within {self._timeout:g}s",
                saga_id=call.saga_id,
                seq=call.seq,
            )
        if "error" in box:
            raise box["error"]
        return box.get("value")
