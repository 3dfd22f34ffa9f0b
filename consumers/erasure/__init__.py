"""Erasing a saga's data: ``sagacity erase`` (docs/adr/0019-erasure.md §4,
docs/operations/erasure.md)."""

from sagacity.consumers.erasure._erase import (
    ErasureOutcome,
    ErasurePlan,
    apply_erasure,
    plan_erasure,
)

__all__ = ["ErasureOutcome", "ErasurePlan", "apply_erasure", "plan_erasure"]
