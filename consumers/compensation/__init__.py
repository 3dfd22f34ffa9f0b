"""The compensation service: ``COMPENSATION_REQUESTED`` on the journal drives compensation.

Run it with ``sagacity serve compensation --tools package.module:attr``; see
docs/operations/compensation.md and docs/adr/0007-compensation-exactly-once.md.
"""

from sagacity.consumers._tools import register_tools, resolve
from sagacity.consumers.compensation._invoker import ClaimingInvoker, sanitize_result
from sagacity.consumers.compensation._operator import request_compensation
from sagacity.consumers.compensation._service import CompensationService
from sagacity.consumers.compensation._settings import CompensationSettings
from sagacity.ports import Claim, ClaimStatus, ClaimStore
from sagacity.undo._standing import pending_request

__all__ = [
    "Claim",
    "ClaimStatus",
    "ClaimStore",
    "ClaimingInvoker",
    "CompensationService",
    "CompensationSettings",
    "pending_request",
    "register_tools",
    "request_compensation",
    "resolve",
    "sanitize_result",
]
