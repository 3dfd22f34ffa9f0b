"""The operator public key the auditor's commands pin: an ``ERASED`` counts only when it signed
it (docs/adr/0027-operator-signatures.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from sagacity.signing._operator_signature import OperatorVerifier

F = TypeVar("F", bound=Callable[..., Any])


def operator_public_key_option(func: F) -> F:
    """``--operator-public-key`` ($SAGACITY_OPERATOR_PUBLIC_KEY): the operator key(s) an
    ``ERASED`` must be signed with to count."""
    return click.option(
        "--operator-public-key",
        "operator_public_keys",
        multiple=True,
        envvar="SAGACITY_OPERATOR_PUBLIC_KEY",
        help="The operator's public key (hex or file; repeatable, or comma-separated for a "
        "rotation): an ERASED counts only when it signed it; any other is a forged_erasure and "
        "the data it claims erased is withheld.  Without it an ERASED with an operator "
        "signature is counted unverified (and said so).",
    )(func)


def pinned_operator(values: tuple[str, ...]) -> OperatorVerifier | None:
    """The verifier of the pinned operator keys (``None``: none pinned).

    Raises:
        click.UsageError: a value is not an Ed25519 public key.
    """
    from sagacity.errors import ConfigurationError
    from sagacity.signing._operator_signature import OperatorVerifier

    text = " ".join(values).strip()
    if not text:
        return None
    try:
        return OperatorVerifier.parse(text)
    except ConfigurationError as exc:
        raise click.UsageError(f"--operator-public-key: {exc}") from exc


def unverified_note(unverified: int, *, pinned: bool) -> str | None:
    """The line saying erasures were counted without checking their operator signature."""
    if pinned or not unverified:
        return None
    return (
        f"note: {unverified} erasure(s) counted unverified: no operator key is pinned to "
        "check their signature; pass --operator-public-key (or SAGACITY_OPERATOR_PUBLIC_KEY)"
    )
