"""Tools of the console's tests: the compensation tests' shop plus a privileged grant.

Undos write to Postgres (``SVC_TOOLS_DSN``) as in :mod:`tests.compensation.svc_tools`, so tests
count side effects from the database.
"""

from __future__ import annotations

import os

from sagacity import Reversibility, compensable
from tests.compensation.svc_tools import Shop


class ConsoleShop(Shop):
    """The shop, and an access grant that needs two people's signatures."""

    @compensable(reversibility=Reversibility.PRIVILEGED)
    def grant(self, order: str, role: str) -> str:
        return f"granted {role} for {order}"


shop = ConsoleShop(os.environ.get("SVC_TOOLS_DSN"))
"""The instance ``--tools tests.console.tools:shop`` names."""
