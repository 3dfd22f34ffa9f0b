"""M of N from groups: a request counts only the approvals of the groups its tool names.

A deployment may declare that a tool's requests need ``count`` approvals by distinct
approvers, each a member of one of ``groups`` ("two of finance").  The declaration and the
membership are the decider's own (the approvals service reads them from its principals file,
docs/operations/routing.md), never a fact read from the request: a request may raise the
signatures it needs, never lower them, and an approver counts toward the rule only when the
decider's own membership puts it in one of the groups at the time the signatures are counted
(at approve and again at resume).

:func:`~sagacity.gate._approval_verify.requirement` raises a request's need to the rule's count
and :func:`~sagacity.gate._approval_verify.counted_signers` /
:func:`~sagacity.gate._approval_verify.authentic_signers` keep only the members: the one rule
the approve and the resume both reach.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sagacity.errors import ConfigurationError


@dataclass(frozen=True, kw_only=True)
class GroupRule:
    """``count`` distinct approvers drawn from ``groups``.

    Raises:
        ConfigurationError: ``count`` is not an int >= 1, or no group is named.
    """

    count: int
    groups: frozenset[str]

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 1:
            raise ConfigurationError(
                f"an approver rule's count must be an int >= 1: {self.count!r}"
            )
        if not self.groups or not all(isinstance(g, str) and g for g in self.groups):
            raise ConfigurationError("an approver rule names at least one group")

    def describe(self) -> str:
        """``2 of finance`` (``2 of finance or treasury``)."""
        return f"{self.count} of {' or '.join(sorted(self.groups))}"


@runtime_checkable
class ApproverGroups(Protocol):
    """The decider's declaration: which tools need approvers of which groups, and who is in
    which group (the approvals service's principals file)."""

    def group_rule(self, tool: str) -> GroupRule | None:
        """The rule ``tool``'s requests are counted by (``None``: any approver counts)."""
        ...

    def groups_of(self, approver: str) -> frozenset[str]:
        """The groups ``approver`` is a member of now."""
        ...


def rule_for(groups: ApproverGroups | None, tool: str) -> GroupRule | None:
    """``tool``'s rule under ``groups`` (``None`` without a declaration)."""
    return None if groups is None else groups.group_rule(tool)


def members(groups: ApproverGroups | None, tool: str, approvers: Iterable[str]) -> set[str]:
    """The ``approvers`` who count toward ``tool``'s rule: all of them without one."""
    found = set(approvers)
    rule = rule_for(groups, tool)
    if rule is None or groups is None:
        return found
    return {a for a in found if groups.groups_of(a) & rule.groups}


def counts_toward(groups: ApproverGroups | None, tool: str, approver: str) -> str | None:
    """``None`` when ``approver``'s signature would count toward ``tool``'s rule, else why
    not (a line for the refusal)."""
    rule = rule_for(groups, tool)
    if rule is None or groups is None or groups.groups_of(approver) & rule.groups:
        return None
    return (
        f"{approver} is in none of the groups whose approvals count for tool {tool!r}: its "
        f"requests need {rule.describe()}"
    )
