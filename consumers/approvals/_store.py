"""The approvals service's request store: the PostgreSQL one (:class:`sagacity.postgres.
PostgresRequestStore`), handed to the server by the composition root.

The server decides through the :class:`~sagacity.ports.RequestStore` port, and its console
sessions, notifier and Slack integration keep their rows through ports of their own
(:class:`~sagacity.ports.ConsoleSessionTable`, :class:`~sagacity.ports.NoticeClaims`,
:class:`~sagacity.ports.SlackTables`).  Its request consumer still folds a batch of messages
and stores their positions in one transaction on the PostgreSQL store's connection (no port
of that unit of work yet), so the store handed must be that one.
"""

from __future__ import annotations

from sagacity.errors import ConfigurationError
from sagacity.ports import RequestStore
from sagacity.postgres import PostgresRequestStore as ApprovalStore

__all__ = ["ApprovalStore", "approval_store"]


def approval_store(store: RequestStore) -> ApprovalStore:
    """``store``, the PostgreSQL request store the service runs on.

    Raises:
        ConfigurationError: another store was handed (the request consumer folds in the
            PostgreSQL one's transactions).
    """
    if not isinstance(store, ApprovalStore):
        raise ConfigurationError(
            "the approvals service runs on the PostgreSQL request store (its request consumer "
            f"folds in its transactions), not on {type(store).__name__}: build its "
            "dependencies with sagacity.compose.approvals"
        )
    return store
