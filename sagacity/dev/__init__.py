"""Local development infrastructure without Docker: a real Kafka broker and PostgreSQL server.

``sagacity dev up | down | status`` drives :class:`Stack`; tests may run a private
:class:`KafkaBroker` of their own. See docs/adr/0009-dev-stack.md.
"""

from sagacity.dev._jars import KAFKA_VERSION, ensure_kafka_jars
from sagacity.dev._ports import pick_free_port
from sagacity.dev.kafka import KafkaBroker
from sagacity.dev.postgres import PostgresServer
from sagacity.dev.stack import BOOTSTRAP_VAR, DATABASE_VAR, Endpoints, ServiceStatus, Stack

__all__ = [
    "BOOTSTRAP_VAR",
    "DATABASE_VAR",
    "KAFKA_VERSION",
    "Endpoints",
    "KafkaBroker",
    "PostgresServer",
    "ServiceStatus",
    "Stack",
    "ensure_kafka_jars",
    "pick_free_port",
]
