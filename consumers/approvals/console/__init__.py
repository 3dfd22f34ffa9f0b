"""The operator console: approvers and operators work in the browser, under ``/ui/``.

Served by the approvals service in the same process, with the same principals file: sign in
with a bearer token (exchanged for a session cookie), the inbox of pending requests, a
request's exact payload and its saga so far, approve and reject, the attention queue (settle
a suspect step), a saga's timeline and gate metrics.  See docs/console.md.
"""

from sagacity.consumers.approvals.console._routes import create_console
from sagacity.consumers.approvals.console._security import CSP, LoginLimiter
from sagacity.consumers.approvals.console._sessions import COOKIE, SessionStore

__all__ = ["COOKIE", "CSP", "LoginLimiter", "SessionStore", "create_console"]
