"""``grantable = false`` in a policy and a declaration; grants in a single process."""

from __future__ import annotations

import pytest

from sagacity import InMemoryJournal, Reversibility, Sagacity
from sagacity.errors import ConfigurationError, GrantRefusedError
from sagacity.policy import Policy, PolicyError
from sagacity.producer import KafkaJournal


def test_the_policy_reads_grantable() -> None:
    policy = Policy.loads(
        '[tools]\nclose_account = { reversibility = "IRREVERSIBLE", grantable = false }\n'
        'pay = "IRREVERSIBLE"\n'
    )
    closing = policy.resolve("close_account")
    paying = policy.resolve("pay")
    assert closing is not None
    assert paying is not None
    assert (closing.rule.grantable, paying.rule.grantable) == (False, True)
    with pytest.raises(PolicyError, match="grantable"):
        Policy.loads('[tools]\nx = { reversibility = "IRREVERSIBLE", grantable = "no" }\n')


def test_a_wrapped_tool_declared_not_grantable_is_never_granted() -> None:
    s = Sagacity(journal=InMemoryJournal())
    close = s.wrap_tool(
        lambda account: "closed",
        name="close_account",
        reversibility=Reversibility.IRREVERSIBLE,
        grantable=False,
    )
    talk = s.conversation("talk")
    assert str(talk.call(lambda: close(account="a"))).startswith("[AWAITING_APPROVAL]")
    with pytest.raises(GrantRefusedError, match="grantable = false"):
        s.grant(
            "talk",
            "close_account",
            ['account == "a"'],
            expires_at_us=s.now_us() + 10**8,
            grantor="a",
        )
    with pytest.raises(GrantRefusedError, match="not registered"):
        s.grant("talk", "nope", ["x == 1"], expires_at_us=s.now_us() + 10**8, grantor="a")


def test_a_shared_journal_without_a_signer_grants_nothing(
    kafka_bootstrap: str, make_topic: object
) -> None:
    assert callable(make_topic)
    journal = KafkaJournal(kafka_bootstrap, topic=make_topic(partitions=1))
    try:
        s = Sagacity(journal=journal)
        with pytest.raises(ConfigurationError, match="decision_signer"):
            s.grant("any", "pay", ["x == 1"], expires_at_us=s.now_us() + 10**8, grantor="a")
    finally:
        journal.close()


def test_an_async_tool_is_covered_and_its_chain_read_off_the_loop() -> None:
    """An async gated tool without an effect key: the grant is judged on a worker thread
    (the chain is read there), and the covered call runs."""
    import asyncio
    import threading

    journal = InMemoryJournal()
    s = Sagacity(journal=journal)
    loop_threads: set[int] = set()
    read_threads: set[int] = set()
    entries = journal.entries

    def watched(saga_id: str) -> object:
        read_threads.add(threading.get_ident())
        return entries(saga_id)

    journal.entries = watched  # type: ignore[method-assign]

    async def pay(amount: int) -> str:
        return f"paid {amount}"

    wrapped = s.wrap_tool(
        pay, name="pay", reversibility=Reversibility.IRREVERSIBLE, effect_key=None
    )
    talk = s.conversation("async")

    async def run() -> list[str]:
        loop_threads.add(threading.get_ident())
        first = await talk.call_async(lambda: wrapped(amount=1))
        s.grant("async", "pay", ["amount <= 10"], expires_at_us=s.now_us() + 10**8, grantor="a")
        read_threads.clear()
        second = await talk.call_async(lambda: wrapped(amount=2))
        return [str(first), str(second)]

    first, second = asyncio.run(run())
    assert first.startswith("[AWAITING_APPROVAL]")
    assert second == "paid 2"
    assert read_threads
    assert not read_threads & loop_threads
