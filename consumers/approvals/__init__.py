"""The approvals service: pending requests materialised from the journal topic into
PostgreSQL, an authenticated HTTP API and gate metrics.

Run it with ``sagacity serve approvals``; see docs/operations/approvals.md.
"""

from sagacity.consumers._tools import load_tools
from sagacity.consumers.approvals._api import create_app
from sagacity.consumers.approvals._api_models import SAGA_ID_PATTERN
from sagacity.consumers.approvals._auth import (
    AuthConfig,
    AuthFile,
    Principal,
    Role,
    auth_entry,
    token_sha256,
)
from sagacity.consumers.approvals._consumer import RequestConsumer
from sagacity.consumers.approvals._extend import extend_deadline
from sagacity.consumers.approvals._routing import LiveRouting, Routing
from sagacity.consumers.approvals._server import ApprovalsServer
from sagacity.consumers.approvals._service import ApprovalService, Decided
from sagacity.consumers.approvals._settings import ApprovalsSettings
from sagacity.ports import GateStats, RequestRow, RowState

__all__ = [
    "SAGA_ID_PATTERN",
    "ApprovalService",
    "ApprovalsServer",
    "ApprovalsSettings",
    "AuthConfig",
    "AuthFile",
    "Decided",
    "GateStats",
    "LiveRouting",
    "Principal",
    "RequestConsumer",
    "RequestRow",
    "Role",
    "Routing",
    "RowState",
    "auth_entry",
    "create_app",
    "extend_deadline",
    "load_tools",
    "token_sha256",
]
