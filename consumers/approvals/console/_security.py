"""The console's defences: security headers, cross-site request checks, sign-in rate limit.

Payloads and results are written by a model, so every page treats them as hostile: templates
escape everything (Jinja2 autoescape) and the Content-Security-Policy allows no script at all,
inline or not, so even a bug in escaping cannot run one.  Every POST must come from a page of
the console: the browser's ``Origin`` (or ``Sec-Fetch-Site``) must say same-origin, and the
form must carry the session's CSRF token (sign-in: a double-submit cookie).
"""

from __future__ import annotations

import hmac
import threading
import time
from collections import deque
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
"""No script from anywhere; styles and images only from the console itself."""

HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware adding :data:`HEADERS` to every console response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode("latin-1").lower() not in HEADERS
                ]
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def same_origin(request: Request) -> bool:
    """Whether the browser says the request comes from the console's own origin.

    ``Sec-Fetch-Site`` (every current browser sends it) must be ``same-origin`` when present;
    ``Origin`` must equal the request's own scheme and host when present.  A request with
    neither is not from a browser form (a script with a session cookie it stole is out of
    scope; it would still need the CSRF token).
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is not None:
        own = f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"
        if origin.rstrip("/") != own:
            return False
    return True


def tokens_match(expected: str | None, given: object) -> bool:
    """Constant-time comparison of a CSRF token."""
    if not expected or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


class LoginLimiter:
    """At most ``attempts`` sign-in failures per client address in ``window_s`` seconds.

    Args:
        attempts: failures allowed in the window.
        window_s: the sliding window.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        attempts: int = 5,
        window_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.attempts = attempts
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, client: str) -> deque[float]:
        now = self._clock()
        failures = self._failures.setdefault(client, deque())
        while failures and now - failures[0] > self.window_s:
            failures.popleft()
        return failures

    def blocked(self, client: str) -> float | None:
        """Seconds until ``client`` may try again, or ``None`` when it may now."""
        with self._lock:
            failures = self._recent(client)
            if len(failures) < self.attempts:
                return None
            return max(1.0, self.window_s - (self._clock() - failures[0]))

    def failed(self, client: str) -> None:
        """Count a failed sign-in."""
        with self._lock:
            self._recent(client).append(self._clock())
            if len(self._failures) > 10_000:  # bounded memory under a spray of addresses
                for key in list(self._failures)[:5_000]:
                    del self._failures[key]

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s failures."""
        with self._lock:
            self._failures.pop(client, None)
