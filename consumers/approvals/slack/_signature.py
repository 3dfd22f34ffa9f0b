"""Who sent an interactivity body: Slack's request signature, its timestamp, and replays.

Slack signs each request with the app's signing secret: ``X-Slack-Signature`` is ``v0=`` and
the hex HMAC-SHA256 of ``v0:{X-Slack-Request-Timestamp}:{body}``.  The body is accepted when
the signature verifies (Slack's SDK, ``slack_sdk.signature.SignatureVerifier``, over the exact
bytes received), its timestamp is within :data:`WINDOW_S` of the service's clock, and its
signature was not accepted before on any replica (:meth:`SlackStore.first_sight`).  Only then
is a byte of it parsed.

Why a table of seen signatures and not the decision's idempotence alone: a replayed click
whose first delivery was refused (an unmapped user, a principals file being edited) would act
once the refusal's cause is gone; a replayed rejection on a partially signed request would veto
it again after a later approval.  The table costs one insert per click and holds five minutes
of them.
"""

from __future__ import annotations

from collections.abc import Callable

from sagacity.consumers.approvals.slack._store import SlackStore
from sagacity.errors import AuthenticationError

WINDOW_S = 300
"""How far a body's timestamp may be from the service's clock, either way (Slack's five
minutes)."""
_MAX_HEADER = 200


class SlackSignature:
    """Checks an interactivity body before anything reads it.

    Args:
        secret: the app's signing secret (from its file).
        store: where accepted signatures are remembered (every replica shares it).
        now_us: the service's clock.
    """

    def __init__(self, secret: str, *, store: SlackStore, now_us: Callable[[], int]) -> None:
        from slack_sdk.signature import Clock, SignatureVerifier

        class _ServiceClock(Clock):
            def now(self) -> float:
                return now_us() / 1_000_000

        self._verifier = SignatureVerifier(secret, clock=_ServiceClock())
        self._store = store
        self._now_us = now_us

    def check(self, body: bytes, timestamp: str | None, signature: str | None) -> None:
        """Accept ``body`` once, or refuse it with the reason.

        Raises:
            AuthenticationError: no or malformed headers, a timestamp outside the window, a
                signature that does not verify, or a body already accepted (a replay).
        """
        if not timestamp or not signature:
            raise AuthenticationError("not signed by Slack: X-Slack-Signature headers missing")
        if len(timestamp) > _MAX_HEADER or len(signature) > _MAX_HEADER:
            raise AuthenticationError("not signed by Slack: malformed signature headers")
        if not timestamp.isascii() or not timestamp.isdigit():
            raise AuthenticationError("not signed by Slack: the timestamp is not a number")
        sent = int(timestamp)
        now_s = self._now_us() // 1_000_000
        if abs(now_s - sent) > WINDOW_S:
            raise AuthenticationError(
                f"refused: the request's timestamp is {abs(now_s - sent)} s from the service's "
                f"clock (more than {WINDOW_S} s): stale or replayed"
            )
        if not self._verifier.is_valid(body, timestamp, signature):
            raise AuthenticationError("refused: the Slack signature does not verify")
        if not self._store.first_sight(
            signature, request_ts=sent, now_us=self._now_us(), keep_s=2 * WINDOW_S
        ):
            raise AuthenticationError("refused: this signed request was already received (replay)")
