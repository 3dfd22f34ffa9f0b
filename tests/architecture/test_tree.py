"""The tree shows the layers: the core's modules live in rooms by concept, not side by side.

``sagacity/``'s root holds the public modules, the composition root (``compose.py``,
``_env.py``) and the compiled module's loader (``_native.py``); every other core module is in a
subpackage naming its concept, whose ``__init__.py`` is that name's docstring and nothing else.
docs/architecture.md maps each room.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sagacity

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sagacity"

PRIVATE_AT_ROOT = {
    "_env": "the composition root (tests/architecture/test_layers.py), beside compose.py",
    "_native": "the loader of sagacity._sagacity_native, whose import name the build fixes",
}
OTHER_LAYERS = {"ports", "producer", "schemas", "postgres", "adapters", "testing", "consumers"}
OTHER_LAYERS |= {"cli", "dev", "demo"}


def _rooms() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.iterdir()
        if path.is_dir()
        and not path.is_symlink()
        and (path / "__init__.py").exists()
        and path.name not in OTHER_LAYERS
    )


def test_the_root_holds_no_private_module_but_the_composition_root_and_the_loader() -> None:
    private = {p.stem for p in PACKAGE.glob("_*.py") if p.name != "__init__.py"}
    assert private == set(PRIVATE_AT_ROOT), "put a new core module in the room of its concept"


def test_each_room_opens_with_its_concept_and_nothing_else() -> None:
    rooms = _rooms()
    assert len(rooms) >= 10
    for room in rooms:
        if room.name == "chain":  # the evidence rules re-export their public names
            continue
        tree = ast.parse((room / "__init__.py").read_text(encoding="utf-8"))
        assert len(tree.body) == 1, f"{room.name}/__init__.py: a docstring only"
        assert ast.get_docstring(tree), f"{room.name}/__init__.py names no concept"


def test_no_room_shadows_a_public_name() -> None:
    # Once imported, a subpackage is an attribute of ``sagacity``: one named like an export
    # (``from sagacity import compensation``, the decorator) would replace it.
    public = set(sagacity.__all__) | {p.stem for p in PACKAGE.glob("[!_]*.py")}
    assert not {room.name for room in _rooms()} & public


def test_the_architecture_map_names_every_room() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [room.name for room in _rooms() if f"   {room.name}/" not in text]
    assert missing == []
