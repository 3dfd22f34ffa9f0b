"""Routing: which principals and groups a tool's requests go to, when they escalate, what
happens at the deadline, and how many of which groups must sign.

The rules are the approvals service's own declaration, in its principals file beside the
principals and their ``groups`` (re-read with it, failing closed with it)::

    [[principals]]
    name = "ann@example.com"
    role = "approver"
    token_sha256 = "…"
    tools = ["send_wire_transfer"]
    groups = ["finance"]

    [[routes]]
    tools = ["send_wire_transfer"]           # names or fnmatch globs; the first route wins
    groups = ["finance"]                     # who is told and may decide from the start
    principals = []                          # … and named principals
    notify = []                              # webhooks of this tier (default: --notify)
    fallback = "reject"                      # at the deadline: "expire" (default) or "reject"
    approvers = { count = 2, groups = ["finance"] }   # M of N: two of finance

    [[routes.escalate]]                      # later tiers, each adding deciders
    after = "2h"                             # from when the service first saw the request
    groups = ["treasury"]

A routed request is decided only by a principal that may decide its tool *and* is named by a
tier reached: tier 0 from the start, each later tier ``after`` the later of the service's
first sight of the request (``seen_at_us``) and the request's own time, on the service's
clock (:func:`age_us`).  Nothing in a
request chooses its route (docs/adr/0025-trust-model.md).  ``fallback = "approve"`` is refused
when the file loads: only ``IRREVERSIBLE`` and ``PRIVILEGED`` tools make requests, and those
never run without a person's signature.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sagacity.config._duration import parse_seconds
from sagacity.errors import ConfigurationError
from sagacity.gate._approver_groups import GroupRule

if TYPE_CHECKING:
    from sagacity.consumers.approvals._auth import Principal
    from sagacity.ports import RequestRow

Fallback = Literal["expire", "reject"]
FALLBACKS: tuple[Fallback, ...] = ("expire", "reject")
FALLBACK_ACTOR = "sagacity:fallback"
"""The actor of a ``REJECTED`` the service journals as a route's fallback at the deadline."""

_ROUTE_KEYS = frozenset(
    {"tools", "groups", "principals", "notify", "fallback", "approvers", "escalate"}
)
_TIER_KEYS = frozenset({"after", "groups", "principals", "notify"})


@dataclass(frozen=True, kw_only=True)
class Tier:
    """Who a routed request reaches from ``after_us`` after the service first saw it."""

    after_us: int
    groups: frozenset[str]
    principals: frozenset[str]
    notify: tuple[str, ...] = ()

    def reaches(self, principal: Principal) -> bool:
        """Whether ``principal`` is named by this tier (by name or by a group)."""
        return principal.name in self.principals or bool(principal.groups & self.groups)

    def names(self) -> list[str]:
        """``group:finance``, ``bob@example.com``: who this tier names, for people."""
        return [f"group:{g}" for g in sorted(self.groups)] + sorted(self.principals)


@dataclass(frozen=True, kw_only=True)
class Route:
    """One ``[[routes]]`` entry."""

    tools: tuple[str, ...]
    tiers: tuple[Tier, ...]
    fallback: Fallback = "expire"
    approvers: GroupRule | None = None

    def matches(self, tool: str) -> bool:
        """Whether this route covers ``tool`` (its exact name or a glob)."""
        return any(tool == t or fnmatch.fnmatchcase(tool, t) for t in self.tools)

    def reached(self, age_us: int) -> int:
        """The last tier reached ``age_us`` after the first sight (0: the first)."""
        return max(i for i, tier in enumerate(self.tiers) if age_us >= tier.after_us)

    def reaches(self, principal: Principal, age_us: int) -> bool:
        """Whether ``principal`` is named by a tier reached at ``age_us``."""
        return any(t.reaches(principal) for t in self.tiers[: self.reached(age_us) + 1])


@dataclass(frozen=True, kw_only=True)
class Routing:
    """The routes of the principals file and who is in which group; the service's
    :class:`~sagacity.gate._approver_groups.ApproverGroups`."""

    routes: tuple[Route, ...] = ()
    membership: Mapping[str, frozenset[str]] | None = None

    def route(self, tool: str) -> Route | None:
        """The first route covering ``tool`` (``None``: unrouted)."""
        return next((r for r in self.routes if r.matches(tool)), None)

    def group_rule(self, tool: str) -> GroupRule | None:
        """``tool``'s M-of-N rule, if its route declares one."""
        route = self.route(tool)
        return route.approvers if route is not None else None

    def groups_of(self, approver: str) -> frozenset[str]:
        """The groups ``approver`` is in, as the file says now."""
        return (self.membership or {}).get(approver, frozenset())

    def may_decide(self, principal: Principal, tool: str, age_us: int) -> bool:
        """Whether the routing lets ``principal`` decide a request of ``tool`` now (an
        unrouted tool: every approver of it, as before)."""
        route = self.route(tool)
        return route is None or route.reaches(principal, age_us)


class LiveRouting:
    """The routing of the principals file as it is now (re-read with it; a file that does
    not load fails every call closed, with its error)."""

    def __init__(self, current: Callable[[], Routing]) -> None:
        self._current = current

    def __call__(self) -> Routing:
        return self._current()

    def group_rule(self, tool: str) -> GroupRule | None:
        """See :meth:`Routing.group_rule`."""
        return self._current().group_rule(tool)

    def groups_of(self, approver: str) -> frozenset[str]:
        """See :meth:`Routing.groups_of`."""
        return self._current().groups_of(approver)


def age_us(now_us: int, row: RequestRow) -> int:
    """How long a request has waited, for its escalation: from the later of the service's own
    first sight of it (``seen_at_us``) and its own ``requested_at_us``.  Neither alone can
    hurry an escalation: an early date a writer chose does not precede the service's sight, a
    ``seen_at_us`` a database operator moved back does not precede the request's own time."""
    if row.seen_at_us is None:
        return 0
    return max(0, now_us - max(row.seen_at_us, row.requested_at_us))


def _names(value: object, where: str, key: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigurationError(f"{where}: '{key}' must be a list of names")
    return frozenset(value)


def _seconds(value: object, where: str) -> int:
    if isinstance(value, str):
        try:
            return int(parse_seconds(value, what="an escalation delay") * 1_000_000)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from exc
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value * 1_000_000)
    raise ConfigurationError(f"{where}: 'after' must be a duration such as \"2h\" or seconds > 0")


def _tier(
    item: Mapping[str, Any], where: str, groups: frozenset[str], names: frozenset[str]
) -> Tier:
    unknown = set(item) - _TIER_KEYS - (_ROUTE_KEYS if "tools" in item else set())
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    tier = Tier(
        after_us=_seconds(item["after"], where) if "after" in item else 0,
        groups=_names(item.get("groups"), where, "groups"),
        principals=_names(item.get("principals"), where, "principals"),
        notify=tuple(sorted(_names(item.get("notify"), where, "notify"))),
    )
    if not tier.groups and not tier.principals:
        raise ConfigurationError(f"{where}: name the 'groups' or 'principals' it goes to")
    missing = sorted(tier.groups - groups) + sorted(tier.principals - names)
    if missing:
        raise ConfigurationError(
            f"{where}: {', '.join(missing)} is no group or principal of the file: nobody "
            "could decide (a typo?)"
        )
    return tier


def _fallback(value: object, where: str) -> Fallback:
    if value is None or value == "expire":
        return "expire"
    if value == "reject":
        return "reject"
    if value == "approve":
        raise ConfigurationError(
            f'{where}: fallback = "approve" is refused: only IRREVERSIBLE and PRIVILEGED '
            "tools make requests, and their requests never run without a person's signature "
            '(use "expire" or "reject")'
        )
    raise ConfigurationError(f'{where}: fallback must be "expire" or "reject", got {value!r}')


def _approvers(value: object, where: str, groups: frozenset[str]) -> GroupRule | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"count", "groups"}:
        raise ConfigurationError(f"{where}: approvers = {{ count = N, groups = [...] }}")
    named = _names(value["groups"], where, "approvers.groups")
    missing = sorted(named - groups)
    if missing:
        raise ConfigurationError(f"{where}: approvers names unknown group(s) {', '.join(missing)}")
    return GroupRule(count=value["count"], groups=named)


def _route(
    item: Mapping[str, Any], where: str, groups: frozenset[str], names: frozenset[str]
) -> Route:
    unknown = set(item) - _ROUTE_KEYS
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    tools = item.get("tools")
    if not isinstance(tools, list) or not tools or not all(isinstance(t, str) for t in tools):
        raise ConfigurationError(f"{where}: 'tools' must be a non-empty list of tool names")
    if "after" in item:
        raise ConfigurationError(f"{where}: the first tier starts at once: 'after' is for escalate")
    tiers = [_tier(item, where, groups, names)]
    escalate = item.get("escalate", [])
    if not isinstance(escalate, list):
        raise ConfigurationError(f"{where}: 'escalate' must be a list of tiers")
    for index, step in enumerate(escalate):
        here = f"{where}.escalate[{index}]"
        if not isinstance(step, Mapping) or "after" not in step:
            raise ConfigurationError(f"{here}: a tier with 'after' and who it goes to")
        tier = _tier(step, here, groups, names)
        if tier.after_us <= tiers[-1].after_us:
            raise ConfigurationError(f"{here}: 'after' must be later than the tier before")
        tiers.append(tier)
    return Route(
        tools=tuple(tools),
        tiers=tuple(tiers),
        fallback=_fallback(item.get("fallback"), where),
        approvers=_approvers(item.get("approvers"), where, groups),
    )


def routing_from(raw: object, principals: Sequence[Principal], *, source: str) -> Routing:
    """The ``routes`` of a principals file, checked against its principals.

    Raises:
        ConfigurationError: a malformed route, a group or principal the file does not have,
            a fallback other than ``expire`` / ``reject``.
    """
    membership: dict[str, frozenset[str]] = {}
    for p in principals:
        if p.groups:
            membership[p.name] = membership.get(p.name, frozenset()) | p.groups
    if raw is None:
        return Routing(membership=membership)
    if not isinstance(raw, list):
        raise ConfigurationError(f"{source}: 'routes' must be a list of tables ([[routes]])")
    groups = frozenset(g for p in principals for g in p.groups)
    names = frozenset(p.name for p in principals)
    routes = []
    for index, item in enumerate(raw):
        where = f"{source}: routes[{index}]"
        if not isinstance(item, Mapping):
            raise ConfigurationError(f"{where} is not a table")
        routes.append(_route(item, where, groups, names))
    return Routing(routes=tuple(routes), membership=membership)


def describe(route: Route, age: int) -> str:
    """Who may decide now, for a refusal: ``group:finance (then group:treasury after 2h)``."""
    reached = route.reached(age)
    now = ", ".join(n for t in route.tiers[: reached + 1] for n in t.names())
    later: Iterable[str] = (
        f"{', '.join(t.names())} after {t.after_us // 1_000_000}s"
        for t in route.tiers[reached + 1 :]
    )
    rest = "; ".join(later)
    return now + (f" (then {rest})" if rest else "")
