"""The approvals service's request store, handed to the server by the composition root
(:func:`sagacity.compose.approvals`: the PostgreSQL one; a test hands the in-memory one).

The server decides through the :class:`~sagacity.ports.RequestStore` port; its request
consumer folds the topic through :class:`~sagacity.ports.FoldingRequestStore` (a batch and its
positions in one transaction), and its console sessions, notifier and Slack integration keep
their rows through ports of their own (:class:`~sagacity.ports.ConsoleSessionTable`,
:class:`~sagacity.ports.NoticeClaims`, :class:`~sagacity.ports.SlackTables`).
"""

from __future__ import annotations

from sagacity.errors import ConfigurationError
from sagacity.ports import FoldingRequestStore, RequestStore

__all__ = ["approval_store"]


def approval_store(store: RequestStore) -> FoldingRequestStore:
    """``store``, a request store the service's request consumer can fold the topic into.

    Raises:
        ConfigurationError: another store was handed (one without the consumer's batches).
    """
    if not isinstance(store, FoldingRequestStore):
        raise ConfigurationError(
            "the approvals service runs on a request store its request consumer folds the topic "
            "into (FoldingRequestStore: the PostgreSQL request store, or sagacity.testing's "
            "in memory), not on "
            f"{type(store).__name__}: build its dependencies with sagacity.compose.approvals"
        )
    return store
