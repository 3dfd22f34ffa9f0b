"""Who is deciding: bearer tokens mapped to principals and the tools they may decide for.

The approver recorded on the chain is the authenticated principal, never a name from a request
body.  Tokens are stored as SHA-256 hashes (hex) in a TOML or JSON file::

    [[principals]]
    name = "alice@example.com"
    token_sha256 = "3b1f…"           # sagacity approvals token-hash
    tools = ["send_wire_transfer"]   # or ["*"] for every tool

Tokens are random secrets (``sagacity approvals token-hash --generate``), not passwords, so an
unsalted SHA-256 is enough: the file leaks nothing usable if it is read.

The service watches the file (:class:`AuthFile`): an edit — a new approver, a revoked token —
takes effect within seconds, without a restart.  An edit that does not parse fails closed: every
decision is refused with the file's error until the file is fixed, so a botched revocation never
leaves the revoked token working.
"""

from __future__ import annotations

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

from sagacity.errors import ConfigurationError

log = logging.getLogger("sagacity.approvals")

ANY_TOOL = "*"
CHECK_INTERVAL_S = 2.0
"""How often the service looks at the auth file's modification stamp."""
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def token_sha256(token: str) -> str:
    """The hex SHA-256 of a token's UTF-8 bytes (what the auth file stores)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def auth_entry(name: str, token: str, tools: Iterable[str]) -> str:
    """A TOML ``[[principals]]`` entry for ``name`` holding ``token``'s hash."""
    listed = ", ".join(json.dumps(t) for t in tools) or json.dumps(ANY_TOOL)
    return (
        "[[principals]]\n"
        f"name = {json.dumps(name)}\n"
        f'token_sha256 = "{token_sha256(token)}"\n'
        f"tools = [{listed}]\n"
    )


@dataclass(frozen=True, kw_only=True)
class Principal:
    """An authenticated approver.

    Attributes:
        name: the identity journaled as the decision's actor.
        tools: tool names this principal may decide for (``"*"``: all).
        authenticated: ``False`` only in ``--insecure-dev`` mode (a name taken from the body).
    """

    name: str
    tools: frozenset[str]
    authenticated: bool = True

    def may_decide(self, tool: str) -> bool:
        """Whether this principal may approve, reject or resume a request for ``tool``."""
        return ANY_TOOL in self.tools or tool in self.tools

    def visible_tools(self) -> list[str] | None:
        """The tools whose requests this principal sees (``None``: all)."""
        return None if ANY_TOOL in self.tools else sorted(self.tools)


class AuthConfig:
    """Principals by token hash, loaded from a TOML or JSON file.

    Raises:
        ConfigurationError: the file is missing, unparsable, or an entry is malformed
            (missing name, a hash that is not 64 lowercase hex digits, a hash used twice).
    """

    def __init__(self, principals: Iterable[tuple[str, Principal]]) -> None:
        self._by_hash: dict[str, Principal] = {}
        for digest, principal in principals:
            if digest in self._by_hash:
                raise ConfigurationError(
                    f"token hash {digest[:12]}… is listed twice in the auth file"
                )
            self._by_hash[digest] = principal

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
            name = item.get("name")
            digest = item.get("token_sha256")
            tools = item.get("tools", [ANY_TOOL])
            if not isinstance(name, str) or not name.strip():
                raise ConfigurationError(f"{where}: 'name' must be a non-empty string")
            if not isinstance(digest, str) or not _HEX64.match(digest):
                raise ConfigurationError(
                    f"{where}: 'token_sha256' must be 64 lowercase hex digits "
                    "(sagacity approvals token-hash prints one)"
                )
            if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
                raise ConfigurationError(f"{where}: 'tools' must be a list of tool names")
            entries.append((digest, Principal(name=name, tools=frozenset(tools))))
        return cls(entries)

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

    def __len__(self) -> int:
        return len(self._by_hash)


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

    def by_digest(self, digest: str) -> Principal | None:
        """The principal whose token hashes to ``digest``, as the file stands now.

        Raises:
            ConfigurationError: the file is broken (fail closed).
        """
        return self.current().by_digest(digest)

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
