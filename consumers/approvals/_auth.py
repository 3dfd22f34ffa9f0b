"""Who is deciding: bearer tokens mapped to principals and the tools they may decide for.

The approver recorded on the chain is the authenticated principal, never a name from a request
body.  Tokens are stored as SHA-256 hashes (hex) in a TOML or JSON file::

    [[principals]]
    name = "alice@example.com"
    token_sha256 = "3b1f…"           # sagacity approvals token-hash
    tools = ["send_wire_transfer"]   # or ["*"] for every tool

Tokens are random secrets (``sagacity approvals token-hash --generate``), not passwords, so an
unsalted SHA-256 is enough: the file leaks nothing usable if it is read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagacity.errors import ConfigurationError

ANY_TOOL = "*"
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

    def __len__(self) -> int:
        return len(self._by_hash)
