"""What the Slack integration keeps, shared by every replica: the tables it is handed
(:class:`~sagacity.ports.SlackTables`; in the service, PostgreSQL's ``sagacity_slack_message``
and ``sagacity_slack_seen``: :class:`sagacity.postgres.PostgresSlackTables`).

``SlackStore`` is the port's name as the integration's modules speak of it.
"""

from __future__ import annotations

from sagacity.ports import SlackTables

__all__ = ["SlackStore"]

SlackStore = SlackTables
