"""Sagas whose data key the compensation service cannot have: each is that saga's fate
(dead-lettered with its reason), never the service's (docs/reliability.md, "Hostile inputs").

Before the fix, one data-key row wrapped under a key-encryption key the service does not hold
stopped it at start-up, and one sealed saga whose key is not in the key table put it in a
crash loop.  The service runs in its own process on real Kafka and PostgreSQL.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sagacity import Sagacity, SagaStatus
from sagacity.postgres import PostgresKeyStore
from sagacity.privacy._envelope import (
    KEK_SETTING,
    KeyEncryptionKey,
    KeyRing,
    write_key_encryption_key,
)
from sagacity.privacy._keys import KeyService
from sagacity.producer import KafkaJournal
from tests.compensation import svc_tools
from tests.compensation.conftest import Lane
from tests.compensation.test_service_e2e import fail_after

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


@pytest.fixture
def stray_dsn(postgres_dsn: str) -> Iterator[str]:
    """Another fresh schema: a key store the service never sees."""
    schema = f"stray_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params: dict[str, Any] = conninfo_to_dict(postgres_dsn)
    params["options"] = f"-c search_path={schema}"
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _sealed_agent(lane: Lane, store_dsn: str, kek: KeyEncryptionKey) -> tuple[Sagacity, KeyService]:
    keys = KeyService(PostgresKeyStore(store_dsn), KeyRing((kek,)))
    journal = KafkaJournal(lane.bootstrap, topic=lane.topic, keys=keys)
    lane.journals.append(journal)
    agent = Sagacity(journal, compensation="delegated")
    agent.wrap(svc_tools.Shop(lane.dsn))
    return agent, keys


def _dead_letter_reasons(bootstrap: str, topic: str, want: int) -> dict[str, str]:
    """``{key: reason}`` of the first ``want`` dead-lettered messages (waits up to 60 s)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"dlq-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    found: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 60
        while len(found) < want and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            headers = dict(message.headers() or [])
            key = (message.key() or b"").decode()
            found.setdefault(key, headers["sagacity.dlq.reason"].decode())
    finally:
        consumer.close()
    return found


@pytest.mark.parametrize(
    ("stray_saga", "reason"),
    [
        # Kafka only: sealed against another key store, so the service's has no row.
        ("key-elsewhere", "data key not found"),
        # A row in the service's own key table, wrapped under a KEK it does not hold.
        ("key-foreign", "key-encryption key not held"),
    ],
)
def test_a_saga_whose_key_cannot_be_had_is_dead_lettered_and_the_service_goes_on(
    make_lane: Callable[..., Lane], stray_dsn: str, tmp_path: Path, stray_saga: str, reason: str
) -> None:
    lane = make_lane(partitions=1)
    service_kek = tmp_path / "service.kek"
    mine = write_key_encryption_key(service_kek)
    foreign = write_key_encryption_key(tmp_path / "foreign.kek")
    store = stray_dsn if stray_saga == "key-elsewhere" else lane.dsn
    stray_agent, stray_keys = _sealed_agent(lane, store, foreign)
    fail_after(stray_agent, stray_saga, ("charge", {"order": stray_saga, "amount": 5}))
    # The service starts all the same (that row is another saga's data) and stays up.
    service = lane.start(**{KEK_SETTING: str(service_kek)})
    agent, keys = _sealed_agent(lane, lane.dsn, mine)
    saga = f"legit-{uuid.uuid4().hex[:8]}"
    fail_after(agent, saga, ("charge", {"order": saga, "amount": 7}))
    result = agent.wait_for_outcome(saga, timeout=60)
    assert result.status is SagaStatus.COMPENSATED, service.logs()[-3000:]
    assert _dead_letter_reasons(lane.bootstrap, f"{lane.topic}.dlq", want=1) == {stray_saga: reason}
    assert service.proc.poll() is None, service.logs()[-3000:]  # still running
    code, body = service.get("/healthz")
    assert code == 200
    assert "dead-lettered" in body
    assert reason in body
    assert service.metric("sagacity_compensation_dead_letters_total", reason=reason) >= 1
    stray_keys.close()
    keys.close()
