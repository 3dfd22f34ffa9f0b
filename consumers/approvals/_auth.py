"""Who is asking: bearer tokens mapped to principals, their role and their tools.

The approver recorded on the chain is the authenticated principal, never a name from a request
body.  Tokens are stored as SHA-256 hashes (hex) in a TOML or JSON file, one entry per token::

    [[principals]]
    name = "alice@example.com"
    role = "approver"                # decides requests for its tools in the approvals service
    token_sha256 = "3b1f…"           # sagacity approvals token-hash
    tools = ["send_wire_transfer"]   # or ["*"] for every tool
    agents = ["claude@alice"]        # agent identities acting for alice: she decides none of
                                     # their requests
    slack_user = "U024BE7LH"         # her Slack user id: she decides in Slack as herself
    groups = ["finance"]             # the groups routes name (docs/operations/routing.md)

    [[principals]]
    name = "claude@alice"
    role = "agent"                   # calls tools over MCP; never decides, never reads
    token_sha256 = "…"
    tools = ["send_wire_transfer"]   # the tools it may list and call

    [[principals]]
    name = "audit@example.com"
    role = "auditor"                 # reads every request and saga; decides nothing
    token_sha256 = "…"

Roles (docs/operations/approvals.md, "Principals"): an **approver** decides, resumes and settles
for its tools and reads the sagas of those tools; an **agent** is accepted only by the MCP
server, which serves it its tools; an **auditor** reads everything and decides nothing.  An
entry without ``role`` is an approver (files written before roles keep working in the approvals
service, ``tools`` defaulting to every tool) and is refused by the MCP server: an agent is
always named as one.  An entry with a role names its ``tools`` (an auditor none): no entry
gets every tool by omission.  A name holds one role (listed under two, the file is refused).

Tokens are random secrets (``sagacity approvals token-hash --generate``), not passwords, so an
unsalted SHA-256 is enough: the file leaks nothing usable if it is read.

The service watches the file (:class:`AuthFile`): an edit — a new approver, a revoked token —
takes effect within seconds, without a restart.  An edit that does not parse fails closed: every
decision is refused with the file's error until the file is fixed, so a botched revocation never
leaves the revoked token working.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sagacity.errors import ConfigurationError, PermissionDeniedError

log = logging.getLogger("sagacity.approvals")

ANY_TOOL = "*"
CHECK_INTERVAL_S = 2.0
"""How often the service looks at the auth file's modification stamp."""
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,20}$")
"""A Slack user id (``U…``, or ``W…`` on an Enterprise Grid)."""


def token_sha256(token: str) -> str:
    """The hex SHA-256 of a token's UTF-8 bytes (what the auth file stores)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


class Role(enum.StrEnum):
    """What a principal of the file is for."""

    APPROVER = "approver"
    """Decides (approve, reject, resume, settle) requests of its tools; reads their sagas."""
    AGENT = "agent"
    """Calls its tools over MCP; never decides and reads nothing in the approvals service."""
    AUDITOR = "auditor"
    """Reads every request and saga; decides nothing."""


def auth_entry(
    name: str,
    token: str,
    tools: Iterable[str] = (),
    *,
    role: Role | str = Role.APPROVER,
    agents: Iterable[str] = (),
    groups: Iterable[str] = (),
    slack_user: str | None = None,
) -> str:
    """A TOML ``[[principals]]`` entry for ``name`` holding ``token``'s hash.

    Args:
        tools: the tools an approver decides or an agent calls (``["*"]``: every tool); an
            auditor has none.
        role: ``approver``, ``agent`` or ``auditor``.
        agents: for an approver, the agent identities acting for it (it decides none of
            their requests).
        groups: for an approver, the groups it is in (routes name them).
        slack_user: for an approver, the Slack user id that decides as it in Slack.

    Raises:
        ConfigurationError: the entry would not load (see :meth:`AuthConfig.from_mapping`).
    """
    kind = _role(role, "auth_entry")
    listed = list(tools)
    lines = [
        "[[principals]]",
        f"name = {json.dumps(name)}",
        f"role = {json.dumps(kind.value)}",
        f'token_sha256 = "{token_sha256(token)}"',
    ]
    if kind is not Role.AUDITOR or listed:
        lines.append(f"tools = [{', '.join(json.dumps(t) for t in listed)}]")
    for key, values in (("agents", list(agents)), ("groups", list(groups))):
        if values:
            lines.append(f"{key} = [{', '.join(json.dumps(v) for v in values)}]")
    if slack_user is not None:
        lines.append(f"slack_user = {json.dumps(slack_user)}")
    text = "\n".join(lines) + "\n"
    AuthConfig.from_mapping(tomllib.loads(text), source="auth_entry")  # refuse what won't load
    return text


def _role(value: object, where: str) -> Role:
    for role in Role:
        if value == role.value:
            return role
    raise ConfigurationError(
        f"{where}: 'role' must be one of {', '.join(r.value for r in Role)}, got {value!r}"
    )


@dataclass(frozen=True, kw_only=True)
class Principal:
    """An authenticated principal of the file.

    Attributes:
        name: the identity journaled as a decision's actor or a call's ``caller``.
        tools: the tools an approver decides or an agent calls (``"*"``: all).
        role: what the principal is for (:class:`Role`).
        agents: for an approver, the agent identities acting for it.
        groups: for an approver, the groups the file's routes name it by.
        authenticated: ``False`` only in ``--insecure-dev`` mode (a name taken from the body).
        slack_user: the Slack user id that decides as this principal in Slack (``None``: none).
    """

    name: str
    tools: frozenset[str]
    role: Role = Role.APPROVER
    agents: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    authenticated: bool = True
    slack_user: str | None = None

    def _covers(self, tool: str) -> bool:
        return ANY_TOOL in self.tools or tool in self.tools

    def may_decide(self, tool: str) -> bool:
        """Whether this principal may approve, reject, resume or settle for ``tool``."""
        return self.role is Role.APPROVER and self._covers(tool)

    def may_call(self, tool: str) -> bool:
        """Whether this principal may list and call ``tool`` over MCP."""
        return self.role is Role.AGENT and self._covers(tool)

    def may_read(self, tools: Iterable[str]) -> bool:
        """Whether this principal sees a saga (or request) whose tools are ``tools``: an
        auditor sees all, an approver those with a tool it decides, an agent none."""
        if self.role is Role.AUDITOR:
            return True
        return any(self.may_decide(tool) for tool in tools)

    def visible_tools(self) -> list[str] | None:
        """The tools whose requests this principal sees (``None``: all)."""
        if self.role is Role.AUDITOR:
            return None
        if self.role is Role.AGENT:
            return []
        return None if ANY_TOOL in self.tools else sorted(self.tools)

    @property
    def identities(self) -> frozenset[str]:
        """The names this principal acts under: its own and its agents'."""
        return self.agents | {self.name}

    def check_person(self) -> None:
        """Refuse an agent principal where people decide or read (the approvals service).

        Raises:
            PermissionDeniedError: this principal is an agent.
        """
        if self.role is Role.AGENT:
            raise PermissionDeniedError(
                f"{self.name} is an agent principal: agents call tools over MCP and neither "
                "decide nor read in the approvals service"
            )


class AuthConfig:
    """Principals by token hash, loaded from a TOML or JSON file.

    Raises:
        ConfigurationError: the file is missing, unparsable, or an entry is malformed
            (missing name, a hash that is not 64 lowercase hex digits, a hash used twice, an
            unknown role, a role without its tools, one name under two roles).
    """

    def __init__(
        self, principals: Iterable[tuple[str, Principal]], *, routes: object = None
    ) -> None:
        self._by_hash: dict[str, Principal] = {}
        self._by_slack: dict[str, Principal] = {}
        roles: dict[str, Role] = {}
        for digest, principal in principals:
            if digest in self._by_hash:
                raise ConfigurationError(
                    f"token hash {digest[:12]}… is listed twice in the auth file"
                )
            if principal.slack_user is not None:
                other = self._by_slack.setdefault(principal.slack_user, principal)
                if other != principal:  # two entries of one approver (a rotation) are one
                    raise ConfigurationError(
                        f"slack_user {principal.slack_user} is listed for {other.name!r} and "
                        f"for {principal.name!r}: one Slack user decides as one principal"
                    )
            held = roles.setdefault(principal.name, principal.role)
            if held is not principal.role:
                raise ConfigurationError(
                    f"{principal.name!r} is listed as {held.value} and as "
                    f"{principal.role.value}: a name holds one role (an agent gets its own name)"
                )
            self._by_hash[digest] = principal
        from sagacity.consumers.approvals._routing import routing_from

        self.routing = routing_from(routes, self.principals(), source="routes")
        """The file's routes and groups (docs/operations/routing.md)."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "auth config") -> AuthConfig:
        """Parse the ``principals`` list of an already-decoded file."""
        raw = data.get("principals")
        if not isinstance(raw, list) or not raw:
            raise ConfigurationError(f"{source}: expected a non-empty 'principals' list")
        entries: list[tuple[str, Principal]] = []
        for index, item in enumerate(raw):
            where = f"{source}: principals[{index}]"
            if not isinstance(item, Mapping):
                raise ConfigurationError(f"{where} is not a table")
            entries.append(_entry(item, where))
        return cls(entries, routes=data.get("routes"))

    @classmethod
    def load(cls, path: str | Path) -> AuthConfig:
        """Read ``path`` (``.json`` as JSON, anything else as TOML)."""
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read auth file {file}: {exc}") from exc
        try:
            data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"auth file {file} does not parse: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"auth file {file}: expected a table at the top level")
        return cls.from_mapping(data, source=str(file))

    def authenticate(self, token: str) -> Principal | None:
        """The principal holding ``token``, or ``None``."""
        digest = token_sha256(token)
        for known, principal in self._by_hash.items():
            # Compare every entry in constant time so timing says nothing about near misses.
            if hmac.compare_digest(known, digest):
                return principal
        return None

    def by_digest(self, digest: str) -> Principal | None:
        """The principal whose token hashes to ``digest`` (a signed-in console session)."""
        for known, principal in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return principal
        return None

    def by_slack_user(self, user_id: str) -> Principal | None:
        """The principal whose ``slack_user`` is ``user_id`` (a click in Slack), or ``None``."""
        return self._by_slack.get(user_id)

    def principals(self) -> list[Principal]:
        """Every principal of the file, in file order."""
        return list(self._by_hash.values())

    def __len__(self) -> int:
        return len(self._by_hash)


def agent_only(principal: Principal | None) -> Principal | None:
    """``principal`` if it is an agent (what the MCP server accepts), ``None`` for no principal.

    Raises:
        PermissionDeniedError: a known token that is not an agent's, with the one line that says
            what to do.
    """
    if principal is None or principal.role is Role.AGENT:
        return principal
    raise PermissionDeniedError(
        f"{principal.name} is an {principal.role.value}, not an agent: the MCP server serves "
        'agent principals only (role = "agent" in the principals file; an entry without a '
        "role is an approver); give the agent an entry of its own "
        "(sagacity approvals token-hash --role agent)"
    )


class Authenticator(Protocol):
    """What the API asks of its principals source."""

    def authenticate(self, token: str) -> Principal | None:
        """The principal holding ``token``, or ``None``.

        Raises:
            ConfigurationError: the principals cannot be known (refuse the request).
        """
        ...


class AuthFile:
    """The auth file, re-read when it changes; thread-safe.

    At most every ``check_interval_s`` an authentication reads the file and loads it again when
    its content changed (in place or by an atomic rename).  A file
    that no longer reads or parses fails closed: :meth:`authenticate` raises the file's
    :class:`~sagacity.errors.ConfigurationError` (the API answers 503) until a later edit
    parses; the previous principals are not kept, so a revoked token never outlives its removal.

    Args:
        path: the TOML or JSON file.
        check_interval_s: the longest an edit goes unnoticed (default :data:`CHECK_INTERVAL_S`).
        clock: monotonic seconds (tests pass their own).

    Raises:
        ConfigurationError: the file does not load at start-up.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        check_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._interval = CHECK_INTERVAL_S if check_interval_s is None else check_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = self._read_stamp()
        self._config: AuthConfig | None = AuthConfig.load(self.path)
        self._error: ConfigurationError | None = None
        self._checked = clock()
        self.reloads = 0
        """Edits loaded since start-up."""
        self.failures = 0
        """Edits that did not load (each refused decisions until fixed)."""

    @property
    def error(self) -> str | None:
        """Why the current file does not load, if it does not."""
        return None if self._error is None else self._error.message

    def authenticate(self, token: str) -> Principal | None:
        """The principal holding ``token`` in the current file, or ``None``.

        Raises:
            ConfigurationError: the file as it is now does not load.
        """
        config = self.current()
        return config.authenticate(token)

    def agent(self, token: str) -> Principal | None:
        """The agent principal holding ``token`` in the current file, or ``None``.

        Raises:
            ConfigurationError: the file as it is now does not load.
            PermissionDeniedError: the token is a principal's that is not an agent.
        """
        return agent_only(self.authenticate(token))

    def by_digest(self, digest: str) -> Principal | None:
        """The principal whose token hashes to ``digest``, as the file stands now.

        Raises:
            ConfigurationError: the file is broken (fail closed).
        """
        return self.current().by_digest(digest)

    def by_slack_user(self, user_id: str) -> Principal | None:
        """The principal whose ``slack_user`` is ``user_id``, as the file stands now.

        Raises:
            ConfigurationError: the file is broken (fail closed).
        """
        return self.current().by_slack_user(user_id)

    def current(self) -> AuthConfig:
        """The principals of the file as it is now (re-read if its stamp moved).

        Raises:
            ConfigurationError: the file as it is now does not load.
        """
        now = self._clock()
        with self._lock:
            if now - self._checked >= self._interval:
                self._checked = now
                self._refresh()
            if self._config is None:
                assert self._error is not None
                raise ConfigurationError(
                    f"decisions are refused until the auth file loads again: {self._error.message}"
                )
            return self._config

    def _read_stamp(self) -> bytes | None:
        # The content's digest, not the modification time: file times are coarse (a jiffy), so
        # two same-size edits in quick succession could share one.  The file is small.
        try:
            return hashlib.sha256(self.path.read_bytes()).digest()
        except OSError:
            return None

    def _refresh(self) -> None:
        stamp = self._read_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            config = AuthConfig.load(self.path)
        except ConfigurationError as exc:
            self._config, self._error = None, exc
            self.failures += 1
            log.error(
                "auth file %s changed and does not load; refusing decisions: %s", self.path, exc
            )
            return
        self._config, self._error = config, None
        self.reloads += 1
        log.info("auth file %s reloaded: %d principal(s)", self.path, len(config))


def _names(item: Mapping[str, Any], key: str, where: str) -> frozenset[str] | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigurationError(f"{where}: '{key}' must be a list of names")
    return frozenset(value)


def _entry(item: Mapping[str, Any], where: str) -> tuple[str, Principal]:
    """One ``[[principals]]`` entry: its token hash and principal."""
    name = item.get("name")
    digest = item.get("token_sha256")
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"{where}: 'name' must be a non-empty string")
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise ConfigurationError(
            f"{where}: 'token_sha256' must be 64 lowercase hex digits "
            "(sagacity approvals token-hash prints one)"
        )
    if "tools" in item and not isinstance(item["tools"], list):
        raise ConfigurationError(f"{where}: 'tools' must be a list of tool names")
    tools = _names(item, "tools", where)
    agents = _names(item, "agents", where) or frozenset()
    if "role" not in item:
        # Written before roles: an approver, of every tool unless it says which.
        role = Role.APPROVER
        tools = frozenset({ANY_TOOL}) if tools is None else tools
    else:
        role = _role(item["role"], where)
        if role is Role.AUDITOR and tools is not None:
            raise ConfigurationError(
                f"{where}: an auditor reads every saga and decides none: remove 'tools'"
            )
        if role is not Role.AUDITOR and not tools:
            raise ConfigurationError(
                f"{where}: an {role.value} names its 'tools' (['*'] for every tool)"
            )
    if agents and role is not Role.APPROVER:
        raise ConfigurationError(f"{where}: only an approver lists 'agents'")
    slack_user = _slack_user(item, role, where)
    groups = _names(item, "groups", where) or frozenset()
    if groups and role is not Role.APPROVER:
        raise ConfigurationError(f"{where}: only an approver is in 'groups' (routes name them)")
    principal = Principal(
        name=name,
        tools=tools or frozenset(),
        role=role,
        agents=agents,
        groups=groups,
        slack_user=slack_user,
    )
    return digest, principal


def _slack_user(item: Mapping[str, Any], role: Role, where: str) -> str | None:
    """The entry's ``slack_user``: a Slack user id, on an approver only (it decides in Slack)."""
    value = item.get("slack_user")
    if value is None:
        return None
    if not isinstance(value, str) or not _SLACK_USER.fullmatch(value):
        raise ConfigurationError(
            f"{where}: 'slack_user' must be a Slack user id (U… or W…, as Slack's profile "
            f"menu 'Copy member ID' gives it), got {value!r}"
        )
    if role is not Role.APPROVER:
        raise ConfigurationError(
            f"{where}: only an approver has a 'slack_user' (a {role.value} decides nothing)"
        )
    return value
