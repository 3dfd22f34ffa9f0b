"""The approvals service's request store: the PostgreSQL one (:class:`sagacity.postgres.
PostgresRequestStore`), handed to the server by the composition root.

The server decides through the :class:`~sagacity.ports.RequestStore` port; its request
consumer, console sessions, notifier and Slack integration keep their own rows in the same
database (positions with the requests, sessions, notifications), so the store handed must be
that one.
"""

from __future__ import annotations

from sagacity.errors import ConfigurationError
from sagacity.ports import RequestStore
from sagacity.postgres import PostgresRequestStore as ApprovalStore

__all__ = ["ApprovalStore", "approval_store"]


def approval_store(store: RequestStore) -> ApprovalStore:
    """``store``, the PostgreSQL request store the service runs on.

    Raises:
        ConfigurationError: another store was handed (the service's other tables live
            beside the PostgreSQL one's).
    """
    if not isinstance(store, ApprovalStore):
        raise ConfigurationError(
            "the approvals service runs on the PostgreSQL request store (its consumer, console "
            f"and notifier keep their rows beside it), not on {type(store).__name__}: build its "
            "dependencies with sagacity.compose.approvals"
        )
    return store
