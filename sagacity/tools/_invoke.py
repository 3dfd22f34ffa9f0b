"""Call user code that may be sync or async from either kind of caller."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _run(awaitable: Awaitable[T]) -> T:
    async def runner() -> T:
        return await awaitable

    return asyncio.run(runner())


def wait_blocking(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` to completion from synchronous code.

    With no event loop running in this thread it gets a loop of its own; inside a running loop
    (a sync API called from async code) it runs on a worker thread, because the running loop
    cannot be re-entered.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(awaitable)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, _run, awaitable).result()


def call_blocking(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, awaiting the result when ``fn`` is async."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return wait_blocking(result)
    return result


async def call_async(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` awaited when it is async, called directly when it is not."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result
