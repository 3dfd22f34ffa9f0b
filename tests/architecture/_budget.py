"""The size budget's rule, one for both halves (test_sizes.py: Python; test_rust_sizes.py: Rust).

A module under ``MODULE_BUDGET`` lines, a function under ``FUNCTION_BUDGET``; past it only what
an allow-list names, each entry ``name -> (ceiling in lines, why)``.  A ceiling only goes down:
a room that grows past it fails, an entry no longer needed fails until it is removed, and a
ceiling more than its slack above its room's size fails until it is lowered.
"""

from __future__ import annotations

MODULE_BUDGET = 600
FUNCTION_BUDGET = 80
MODULE_SLACK = 10
FUNCTION_SLACK = 5
"""How far above its room's size a ceiling may stay before it must be lowered."""

Allowed = dict[str, tuple[int, str]]


def over(sizes: dict[str, int], budget: int, allowed: Allowed, what: str) -> list[str]:
    """The rooms past ``budget`` that ``allowed`` does not cover, each said in a line."""
    out = []
    for name, size in sorted(sizes.items()):
        if size <= budget:
            continue
        if name not in allowed:
            out.append(f"{name}: {size} lines, over the {what} budget of {budget}")
        elif size > allowed[name][0]:
            out.append(f"{name}: {size} lines, past its ceiling of {allowed[name][0]}")
    return out


def stale(sizes: dict[str, int], budget: int, allowed: Allowed, slack: int) -> list[str]:
    """The entries of ``allowed`` no longer needed, or whose ceiling must come down."""
    out = []
    for name, (ceiling, why) in sorted(allowed.items()):
        assert why.strip(), f"{name}: say why it is allowed"
        size = sizes.get(name)
        if size is None:
            out.append(f"{name}: gone; remove its entry")
        elif size <= budget:
            out.append(f"{name}: {size} lines, within the budget; remove its entry")
        elif ceiling > size + slack:
            out.append(f"{name}: {size} lines; lower its ceiling from {ceiling} to {size}")
    return out
