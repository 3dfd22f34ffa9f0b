"""Fixtures of the approvals service tests: principals, tokens and an auth file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity.consumers.approvals import auth_entry

TOKENS = {
    "alice": "tok-alice-0123456789abcdef",
    "bob": "tok-bob-0123456789abcdef",
    "carol": "tok-carol-0123456789abcdef",
    "eve": "tok-eve-0123456789abcdef",
}
TOOLS = {
    "alice": ["send_wire_transfer", "grant_agent_access"],
    "bob": ["*"],
    "carol": ["grant_agent_access"],
    "eve": ["reserve_inventory"],
}
ALICE = '{"amount":"100","to":"alice"}'
MALLORY = '{"amount":"999999","to":"mallory"}'


def bearer(name: str) -> dict[str, str]:
    """The Authorization header of ``name``'s token."""
    return {"Authorization": f"Bearer {TOKENS[name]}"}


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    """A TOML auth file listing every test principal's hashed token."""
    path = tmp_path / "auth.toml"
    path.write_text(
        "\n".join(auth_entry(f"{n}@example.com", TOKENS[n], TOOLS[n]) for n in TOKENS),
        encoding="utf-8",
    )
    return path
