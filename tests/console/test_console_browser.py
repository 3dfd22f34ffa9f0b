"""The operator console in a real headless browser, on the real broker and database.

Each test drives Chromium against the approvals service with its console, while an agent and
the compensation service work on the same Kafka topic and PostgreSQL schema.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from sagacity import EventType, SagaStatus
from tests.console.conftest import World

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType


def saga_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def row_for(driver: Any, saga: str, seq: int) -> Any:
    found = driver.find_elements(By.CSS_SELECTOR, f'tr[data-saga-id="{saga}"][data-seq="{seq}"]')
    return found[0] if found else None


def open_request(world: World, who: str, saga: str, seq: int) -> Any:
    driver = world.browser(who)
    driver.get(f"{world.url}/ui/requests/{saga}/{seq}")
    return driver


def test_sign_in_see_the_exact_payload_approve_and_the_saga_completes(world: World) -> None:
    driver = world.sign_in("alice")
    assert driver.current_url == f"{world.url}/ui/", driver.page_source
    saga = saga_id("wire")
    seq = world.gate(
        saga,
        ("reserve", {"order": saga, "item": "lamp"}),
        ("wire", {"order": saga, "amount": 100}),
    )
    # The open inbox shows the new request by itself (it reloads every few seconds).
    row = world.wait_for(lambda: row_for(driver, saga, seq), timeout=12, what="inbox row")
    assert "wire" in row.text
    assert "IRREVERSIBLE" in row.text
    assert "0 of 1" in row.text
    assert "agent-7" in row.text
    row.find_element(By.LINK_TEXT, "wire").click()
    payload = driver.find_element(By.CSS_SELECTOR, ".payload").text
    stored = next(e for e in world.agent.entries(saga) if e.seq == seq).payload
    assert payload == stored
    assert json.loads(driver.find_element(By.CSS_SELECTOR, ".formatted").text) == json.loads(stored)
    assert "matches the request's recorded hash" in driver.page_source
    assert "reserve" in driver.find_element(By.CSS_SELECTOR, "table.chain").text
    driver.find_element(By.CSS_SELECTOR, 'button[name="decision"][value="approve"]').click()
    assert "Your approval is recorded" in driver.page_source
    decided = driver.find_element(By.CSS_SELECTOR, ".decided").text
    assert "approved by alice@example.com" in decided
    # The agent resumes with the payload it proposed, and the saga completes.
    result = world.agent.resume_saga(saga, seq, stored)
    assert result.status is SagaStatus.COMPLETED
    approved = [e for e in world.agent.entries(saga) if e.event_type is E.APPROVED]
    assert [e.actor for e in approved] == ["alice@example.com"]
    driver.get(f"{world.url}/ui/sagas/{saga}")
    assert "COMPLETED" in driver.find_element(By.TAG_NAME, "h1").text
    assert "verified" in driver.find_element(By.CSS_SELECTOR, ".verdict").text
