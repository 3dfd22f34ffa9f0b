"""One ``--tools`` loader for every service: a class, an instance, a function or a list of
those, imported with the working directory on the path."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity import Sagacity
from sagacity.consumers._tools import load_tools, register_tools
from sagacity.errors import ToolLoadError

_MODULE = textwrap.dedent(
    """
    from sagacity import CompensationContext, Reversibility, compensable, compensation


    class Bank:
        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def wire(self, amount: str, to: str) -> str:
            return f"{amount} to {to}"


    class Shop:
        @compensable(by="release")
        def reserve(self, sku: str) -> str:
            return sku

        @compensation
        def release(self, context: CompensationContext) -> None:
            pass


    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_email(to: str) -> str:
        return to


    class Configured:
        def __init__(self, dsn: str) -> None:
            self.dsn = dsn


    shop = Shop()
    BOTH = [Bank, send_email]
    NOTHING = 42
    """
)


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory holding ``opshop_tools.py``, not otherwise importable."""
    (tmp_path / "opshop_tools.py").write_text(_MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    sys.modules.pop("opshop_tools", None)


def test_a_class_an_instance_a_function_and_a_list_load_from_the_working_directory(
    app_dir: Path,
) -> None:
    bank, shop, email, *both = load_tools(
        ["opshop_tools:Bank", "opshop_tools:shop", "opshop_tools:send_email", "opshop_tools:BOTH"]
    )
    assert type(bank).__name__ == "Bank"  # instantiated without arguments
    assert type(shop).__name__ == "Shop"
    assert email.__name__ == "send_email"
    assert [type(both[0]).__name__, both[1].__name__] == ["Bank", "send_email"]
    names = register_tools(Sagacity(), ["opshop_tools:Bank", "opshop_tools:shop"])
    assert names == ("reserve", "wire")


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("opshop_tools:Configured", "cannot be instantiated without arguments"),
        ("opshop_tools:NOTHING", "int has no @compensable methods"),
        ("opshop_tools:nope", "has no attribute 'nope'"),
        ("opshop_tools", "not of the form package.module:attr"),
        ("no_such_module:x", "cannot import 'no_such_module'"),
    ],
)
def test_a_bad_target_is_refused_naming_it(app_dir: Path, target: str, needle: str) -> None:
    with pytest.raises(ToolLoadError, match=needle) as info:
        register_tools(Sagacity(), [target])
    assert repr(target) in info.value.message


def test_every_service_loads_its_tools_with_the_same_loader() -> None:
    from sagacity.consumers import compensation
    from sagacity.consumers.approvals import _server

    assert compensation.register_tools is register_tools
    assert _server.register_tools is register_tools
