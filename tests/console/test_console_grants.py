"""A saga's standing grants in the console, in headless Chromium, on the real broker and database.

An agent's conversation asks once for ``wire``; alice grants ``wire`` for the saga in the
console (amount <= 100); the agent's next wire within the rule runs without a request, naming
the grant; the grant list shows it active; alice presses Revoke; the list shows it revoked,
and the agent's next wire goes to a request again (docs/operations/grants.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from sagacity import EventType
from sagacity.entries import _attributes as attr
from tests.console.conftest import World, saga_id, submit

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType
AWAITING = "[AWAITING_APPROVAL]"


def _grant_rows(driver: Any) -> list[tuple[str, str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, "table.grants tbody tr")
    return [(r.get_attribute("data-grant-id"), r.get_attribute("data-status")) for r in rows]


def test_a_grant_is_made_listed_used_and_revoked_in_the_console(world: World) -> None:
    saga = saga_id("talk")
    talk = world.agent.conversation(saga)
    wire = world.tool("wire")
    assert talk.call(lambda: wire(order=saga, amount=10)).startswith(AWAITING)
    world.agent.journal.flush()

    driver = world.sign_in("alice")
    driver.get(f"{world.url}/ui/sagas/{saga}")
    driver.find_element(By.CSS_SELECTOR, "a.grants-link").click()
    assert driver.current_url == f"{world.url}/ui/sagas/{saga}/grants"
    assert "No grants in this saga" in driver.page_source
    # Only the IRREVERSIBLE tools are offered, never the PRIVILEGED grant.
    tools = Select(driver.find_element(By.NAME, "tool"))
    offered = [o.get_attribute("value") for o in tools.options]
    assert "wire" in offered
    assert "grant" not in offered
    tools.select_by_value("wire")
    driver.find_element(By.NAME, "rules").send_keys("amount <= 100")
    submit(driver, driver.find_element(By.CSS_SELECTOR, "form.grant button"))
    assert "The grant is recorded, signed." in driver.page_source
    [(grant_id, status)] = _grant_rows(driver)
    assert status == "active"
    assert "amount <= 100" in driver.find_element(By.CSS_SELECTOR, "code.rules").text

    # The agent's wire within the rule runs without a request, naming the grant.
    assert talk.call(lambda: wire(order=saga, amount=50)) == "wired 50"
    world.agent.journal.flush()
    [intent] = [e for e in world.agent.entries(saga) if e.event_type is E.INTENT]
    assert intent.attributes[attr.GRANT_ID] == grant_id
    # One beyond it goes to a request.
    assert talk.call(lambda: wire(order=saga, amount=101)).startswith(AWAITING)

    submit(driver, driver.find_element(By.CSS_SELECTOR, "form.revoke button"))
    assert "The grant is revoked." in driver.page_source
    assert _grant_rows(driver) == [(grant_id, "revoked")]
    assert "by alice@example.com" in driver.find_element(By.CSS_SELECTOR, "td.status").text
    assert driver.find_elements(By.CSS_SELECTOR, "form.revoke") == []
    [revocation] = [e for e in world.agent.entries(saga) if e.event_type is E.GRANT_REVOKED]
    assert revocation.actor == "alice@example.com"
    assert revocation.attributes[attr.GRANT_SIGNATURE].startswith("SGCG1:")
    # After the revocation, the same call the grant covered goes to a request.
    assert talk.call(lambda: wire(order=saga, amount=49)).startswith(AWAITING)
    world.agent.journal.flush()
    intents = [e for e in world.agent.entries(saga) if e.event_type is E.INTENT]
    assert len(intents) == 1


def test_a_refused_grant_shows_why_and_journals_nothing(world: World) -> None:
    saga = saga_id("talk")
    talk = world.agent.conversation(saga)
    wire = world.tool("wire")
    assert talk.call(lambda: wire(order=saga, amount=10)).startswith(AWAITING)
    world.agent.journal.flush()
    before = len(world.agent.entries(saga))
    driver = world.sign_in("alice")
    driver.get(f"{world.url}/ui/sagas/{saga}/grants")
    driver.find_element(By.NAME, "rules").send_keys("amount <= __import__('os')")
    submit(driver, driver.find_element(By.CSS_SELECTOR, "form.grant button"))
    assert "not a JSON literal" in driver.page_source
    assert len(world.agent.entries(saga)) == before
