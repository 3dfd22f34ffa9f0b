"""The default event loop a synchronous agent entry point leaves behind."""

from __future__ import annotations

import asyncio
import warnings


def close_default_event_loop() -> None:
    """Close the main thread's default event loop, if one is set and not running.

    Some agent frameworks' synchronous entry points (``run_sync``) install a default loop and
    keep it; a later ``asyncio.run`` replaces it without closing it, and its collection is then
    reported as an unclosed socket (the loop's self-pipe).
    """
    policy = asyncio.get_event_loop_policy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = policy.get_event_loop()
    except RuntimeError:
        return
    if not loop.is_running():
        loop.close()
        policy.set_event_loop(None)
