"""Shared fixtures for the framework adapter tests."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _close_the_default_event_loop() -> Iterator[None]:
    # The OpenAI Agents SDK's Runner.run_sync installs the thread's default event loop and keeps
    # it for later runs (a later asyncio.run replaces it without closing it); close it after
    # each test, or it is reported unclosed when the interpreter exits.
    yield
    policy = asyncio.get_event_loop_policy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = policy.get_event_loop()
    except RuntimeError:
        return
    loop.close()
    policy.set_event_loop(None)
