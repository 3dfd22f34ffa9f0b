""" "Undo this saga" in the console, and the undo list on a request's page, against the real
approvals service process (real Kafka, PostgreSQL; docs/adr/0026-effects-and-refusals.md).

Before approving, the approver sees which of the saga's earlier steps an undo could reverse
(here the inventory hold, by its declared compensation) and which not; the saga's undo page
lists the same from the service's own declarations and shows the command an operator signs —
the console holds no operator key and journals nothing."""

from __future__ import annotations

import html
import re

import pytest

from .test_erasure_reaches_services import _console
from .test_processes import Deployment, deployment, listed, wait_for  # noqa: F401

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


def _rows(page: str, kind: str) -> list[str]:
    body = re.findall(rf'<tr class="undo-{kind}">(.*?)</tr>', page, flags=re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", b)).split()) for b in body]


def test_the_request_page_and_the_undo_page_say_what_an_undo_reverses(
    deployment: Deployment,  # noqa: F811 - the fixture of test_processes
) -> None:
    d = deployment
    replica = d.replica()
    replica.wait_ready()
    saga = "undo-console-1"

    def work() -> None:
        d.bank.reserve_inventory("SKU-1")
        d.bank.send_wire_transfer("100", "alice")

    gated = d.agent.saga(saga, work)
    assert gated.awaiting_seq is not None
    wait_for(lambda: listed(replica))
    journaled = len(d.agent.entries(saga))
    browser = _console(replica.url, "bob")

    request = browser.get(f"/ui/requests/{saga}/{gated.awaiting_seq}")
    assert request.status_code == 200, request.text
    assert "If this saga is undone" in request.text
    assert _rows(request.text, "reversed") == [
        "undone 3 reserve_inventory undone by release_inventory"
    ]
    assert _rows(request.text, "kept") == []

    saga_page = browser.get(f"/ui/sagas/{saga}")
    assert f'href="/ui/sagas/{saga}/undo"' in saga_page.text
    undo = browser.get(f"/ui/sagas/{saga}/undo")
    assert undo.status_code == 200, undo.text
    assert _rows(undo.text, "reversed") == [
        "undone 3 reserve_inventory undone by release_inventory"
    ]
    assert "sagacity saga undo --saga undo-console-1 --reason" in html.unescape(undo.text)
    assert "needs an operator" in undo.text
    assert len(d.agent.entries(saga)) == journaled  # the console journaled nothing
    # An approver of none of the saga's tools reads no undo page of it.
    narrow = _console(replica.url, "carol")
    assert narrow.get(f"/ui/sagas/{saga}/undo").status_code in (403, 404)
