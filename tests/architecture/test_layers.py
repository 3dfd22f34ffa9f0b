"""Imports run one way: core → ports → adapters → services → CLI (docs/adr/0001-layout.md).

Every module of the installed tree is read with ``ast`` — the ``sagacity/producer``,
``sagacity/consumers`` and ``sagacity/schemas`` links followed, so their modules carry the names
they are imported by — and every import is checked: at module level, inside functions (lazy),
under ``TYPE_CHECKING``, and ``importlib.import_module("literal")``.  The composition root,
``sagacity._env`` (the journal from ``SAGACITY_*``) and ``sagacity.compose`` (each service's
dependencies), is the one place allowed to import both the Kafka and the Postgres adapters,
and the core's ``Sagacity.from_env`` the one core function allowed to import it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sagacity"

CORE, PORTS, ADAPTERS, ROOT_LAYER, SERVICES, CLI = range(6)
LAYER_NAMES = ("core", "ports", "adapters", "composition root", "services", "CLI")
COMPOSITION_ROOT = "sagacity._env"
COMPOSE = "sagacity.compose"
ROOT_MODULES = (COMPOSITION_ROOT, COMPOSE)

# Edges that go against the order, each with the reason it is allowed (importer, imported).
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    # The named exception: Sagacity.from_env() delegates to the composition root (a lazy
    # import inside the method, so the core imports without the Kafka client).
    (
        "sagacity.saga._saga",
        COMPOSITION_ROOT,
    ): "Sagacity.from_env delegates to the composition root",
    # The key service seals and opens with the keys of the key store's port: the port is
    # declared with the others in sagacity.ports (its adapters below the services), and the
    # service, a core rule over it (one key per saga, erasure, rotation), reads its types.
    (
        "sagacity.privacy._keys",
        "sagacity.ports",
    ): "the key service is written against the KeyStore port",
}

# Private modules of other packages the CLI may import, each with its reason.
CLI_PRIVATE_ALLOWED: dict[str, str] = {
    # The composition root is where the CLI assembles journals from the environment.
    COMPOSITION_ROOT: "the CLI assembles journals through the composition root",
    # Shared names (topic, groups) of option defaults; not part of the user's API.
    "sagacity.config._defaults": "option defaults shared with the services",
    # Core helpers of operators' commands (key files, durations): the core's public API,
    # ``sagacity.__all__`` (pinned by tests/core/test_public_api.py), is the agent's and
    # does not carry them.
    "sagacity.signing._decision_signature": "`approvals keygen` and the resumer's pinned keys",
    "sagacity.signing._writer_signature": "`archive writer-keygen` writes writer key files",
    "sagacity.signing._operator_signature": "`keys operator-keygen`, the operator key of "
    "`saga compensate` and `erase`",
    "sagacity.config._duration": "one duration parser for every option",
    "sagacity.undo._undo_preview": "`saga undo` lists what an undo could reverse (the compensation "
    "runner's plan, read as the service would)",
    # The approvals package imports its HTTP API (FastAPI, the services extra) eagerly;
    # the token and principal commands and `serve mcp` need the auth file alone.
    "sagacity.consumers.approvals._auth": "usable without the services extra",
}

KAFKA = ("confluent_kafka", "sagacity.producer")
POSTGRES = ("psycopg", "psycopg_pool", "sagacity.postgres")


def layer_of(module: str) -> int:
    """The layer ``module`` (a dotted name under ``sagacity``) belongs to."""
    if module in ROOT_MODULES:
        return ROOT_LAYER
    parts = module.split(".")
    second = parts[1] if len(parts) > 1 else ""
    if second == "ports":
        return PORTS
    if second in ("producer", "schemas", "postgres", "adapters", "testing"):
        return ADAPTERS
    if second == "consumers":
        return SERVICES
    if second in ("cli", "dev", "demo"):
        return CLI
    return CORE


def _discover() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory, _dirs, files in os.walk(PACKAGE, followlinks=True):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = Path(directory) / name
            parts = ["sagacity", *path.relative_to(PACKAGE).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _discover()


@dataclass(frozen=True)
class Import:
    """One import of ``target`` (a dotted name, maybe of a module attribute) at ``line``."""

    target: str
    line: int
    names: tuple[str, ...] = ()


def _imports(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            names = tuple(alias.name for alias in node.names)
            yield Import(target, node.lineno, names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield Import(node.args[0].value, node.lineno)


def _resolve(target: str) -> str | None:
    """The module of ours ``target`` names (the longest known prefix), if any."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def _targets(imp: Import) -> Iterator[str]:
    """The modules of ours an import loads: its module and any submodules it names."""
    found = _resolve(imp.target)
    if found is not None:
        yield found
    for name in imp.names:
        sub = f"{imp.target}.{name}"
        if sub in MODULES:
            yield sub


EDGES = [
    (module, imp, target)
    for module, path in sorted(MODULES.items())
    for imp in _imports(module, path)
    for target in _targets(imp)
]


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_tree_is_read_through_the_links() -> None:
    for name in ("sagacity.producer._journal", "sagacity.consumers.archive._service"):
        assert name in MODULES
    assert "sagacity._env" in MODULES
    assert len(EDGES) > 500  # every module's imports, lazy ones included


def test_imports_point_inward() -> None:
    backward = [
        f"{module}:{imp.line} ({LAYER_NAMES[layer_of(module)]}) imports {target} "
        f"({LAYER_NAMES[layer_of(target)]})"
        for module, imp, target in EDGES
        if layer_of(target) > layer_of(module) and (module, target) not in ALLOWED_UPWARD
    ]
    assert backward == []


def test_every_allowed_upward_edge_still_exists() -> None:
    present = {(module, target) for module, _imp, target in EDGES}
    assert set(ALLOWED_UPWARD) <= present, "remove the entries no longer needed"


def test_the_composition_root_is_the_only_module_importing_kafka_and_postgres() -> None:
    both = []
    for module, path in sorted(MODULES.items()):
        if module in ROOT_MODULES or layer_of(module) > ADAPTERS:
            continue
        targets = {imp.target for imp in _imports(module, path)}
        kafka = any(_within(t, KAFKA) for t in targets)
        postgres = any(_within(t, POSTGRES) for t in targets)
        if kafka and postgres:
            both.append(module)
    assert both == []
    # Package by package, too: the Kafka adapter reaches no Postgres code and vice versa.
    for module, imp, target in EDGES:
        if _within(module, ("sagacity.producer",)):
            assert not _within(imp.target, POSTGRES), f"{module}:{imp.line} {imp.target}"
            assert not _within(target, POSTGRES), f"{module}:{imp.line} {target}"
        if _within(module, ("sagacity.postgres",)):
            assert not _within(imp.target, KAFKA), f"{module}:{imp.line} {imp.target}"


def test_no_service_imports_the_cli_and_no_adapter_a_service() -> None:
    assert not [(m, t) for m, _i, t in EDGES if layer_of(m) == SERVICES and layer_of(t) == CLI]
    assert not [
        (m, t)
        for m, _i, t in EDGES
        if layer_of(m) <= ADAPTERS and layer_of(t) == SERVICES and (m, t) not in ALLOWED_UPWARD
    ]


LINKED = ("producer", "consumers", "schemas")


def test_the_linked_packages_are_imported_under_sagacity_only() -> None:
    others = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts): path
        for folder in ("tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
    }
    stray = [
        f"{module}:{imp.line} {imp.target}"
        for module, path in sorted({**MODULES, **others}.items())
        for imp in _imports(module, path)
        if imp.target.split(".")[0] in LINKED
    ]
    assert stray == []


def test_ruff_bans_importing_the_linked_packages_at_the_top_level(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import producer\n"
        "from consumers.archive import connect\n"
        "\n\n"
        "def lazy() -> None:\n"
        "    from schemas import decode_entry\n"
    )
    done = subprocess.run(
        [
            *(sys.executable, "-m", "ruff", "check", "--no-cache"),
            *("--config", str(ROOT / "pyproject.toml"), "--select", "TID251"),
            *("--output-format", "concise", str(probe)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    banned = sorted(line.split("`")[1] for line in done.stdout.splitlines() if "TID251" in line)
    assert banned == sorted(LINKED), done.stdout + done.stderr


def _private(target: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in target.split("."))


def test_the_cli_imports_public_names_only() -> None:
    private = []
    for module, path in sorted(MODULES.items()):
        if not _within(module, ("sagacity.cli",)):
            continue
        for imp in _imports(module, path):
            if not _within(imp.target, ("sagacity",)) or _within(imp.target, ("sagacity.cli",)):
                continue
            named = [f"{imp.target}.{n}" for n in imp.names if _private(n)]
            if _private(imp.target) and imp.target not in CLI_PRIVATE_ALLOWED:
                private.append(f"{module}:{imp.line} {imp.target}")
            private += [f"{module}:{imp.line} {n}" for n in named]
    assert private == []


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("sagacity", CORE),
        ("sagacity.saga._saga", CORE),
        ("sagacity.chain", CORE),
        ("sagacity.chain._acceptance", CORE),
        ("sagacity.chain._fastverify", CORE),
        ("sagacity.ports", PORTS),
        ("sagacity.producer._journal", ADAPTERS),
        ("sagacity.postgres._index", ADAPTERS),
        ("sagacity.adapters.langchain", ADAPTERS),
        ("sagacity._env", ROOT_LAYER),
        ("sagacity.compose", ROOT_LAYER),
        ("sagacity.consumers.archive._service", SERVICES),
        ("sagacity.cli.serve", CLI),
        ("sagacity.demo", CLI),
    ],
)
def test_layers_are_named_as_documented(module: str, expected: int) -> None:
    assert layer_of(module) == expected


# --- services: handed their ports, never wiring themselves (issue 33) ----------------------
SHARED_RUNTIME = "sagacity.consumers"
"""The services' shared runtime (``consumers/_runtime.py`` and its helpers, ADR 0023): the
package root and its private modules, which every service runs on."""


def service_of(module: str) -> str:
    """The service package ``module`` belongs to (``sagacity.consumers.<name>``), or the
    shared runtime."""
    parts = module.split(".")
    if len(parts) > 2 and not parts[2].startswith("_"):
        return ".".join(parts[:3])
    return SHARED_RUNTIME


# A service that reads another service's data, each with its reason (importer, imported).
SERVICE_TO_SERVICE_ALLOWED: dict[tuple[str, str], str] = {}

# Adapter modules (a package or one private module) a service imports, each with its reason.
# The entries only go: a new edge fails, an edge no longer there fails until removed.
SERVICE_ADAPTERS_ALLOWED: dict[tuple[str, str], str] = {}

SERVICE_EDGES = [(m, i, t) for m, i, t in EDGES if layer_of(m) == SERVICES]


def test_no_service_imports_the_composition_root() -> None:
    """A service is handed its dependencies (sagacity.ports.Dependencies); it never builds
    them from the environment itself."""
    wired = [f"{m}:{i.line} {t}" for m, i, t in SERVICE_EDGES if layer_of(t) == ROOT_LAYER]
    assert wired == []


def test_no_service_imports_another_service() -> None:
    crossing = {
        (service_of(m), service_of(t)): f"{m}:{i.line} {t}"
        for m, i, t in SERVICE_EDGES
        if layer_of(t) == SERVICES and service_of(t) not in (service_of(m), SHARED_RUNTIME)
    }
    assert {k: v for k, v in crossing.items() if k not in SERVICE_TO_SERVICE_ALLOWED} == {}
    assert set(SERVICE_TO_SERVICE_ALLOWED) <= set(crossing), "remove the entries no longer needed"
    private = [
        f"{m}:{i.line} {t}"
        for m, i, t in SERVICE_EDGES
        if layer_of(t) == SERVICES
        and service_of(t) not in (service_of(m), SHARED_RUNTIME)
        and _private(t.removeprefix(service_of(t)))
    ]
    assert private == [], "a service reads another one through its public names only"


def test_services_import_no_adapter_beyond_the_named_ones() -> None:
    """Services take ports; the adapters they still import are named, each with its reason,
    and the list only shrinks."""
    found = {
        (service_of(m), t): f"{m}:{i.line}" for m, i, t in SERVICE_EDGES if layer_of(t) == ADAPTERS
    }
    assert {k: v for k, v in found.items() if k not in SERVICE_ADAPTERS_ALLOWED} == {}
    assert set(SERVICE_ADAPTERS_ALLOWED) <= set(found), "remove the entries no longer needed"


def test_services_import_public_names_of_the_ports_and_the_testing_fakes_only() -> None:
    """What a service takes from the ports layer it takes by the package's public names."""
    private = [
        f"{m}:{i.line} {t}" for m, i, t in SERVICE_EDGES if layer_of(t) == PORTS and _private(t)
    ]
    assert private == []


# Modules that open a PostgreSQL connection of their own, each with its reason; everything
# else reaches the database through sagacity.postgres.connect (its one error rule).
OWN_CONNECTIONS_ALLOWED: dict[str, str] = {
    "sagacity.postgres._connect": "the plumbing itself",
    "sagacity.dev.postgres": "the development stack's administrator, creating the database",
    "sagacity.demo.tools": "the demo's tools are an application's own code, shown as written",
    "sagacity.demo._scenarios": "the demo reads its own application's table, as a user would",
}


def _opens_a_connection(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "connect"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "psycopg"
    )


def test_postgres_is_reached_through_the_one_plumbing() -> None:
    found = {
        f"{module}:{node.lineno}"
        for module, path in sorted(MODULES.items())
        if module not in OWN_CONNECTIONS_ALLOWED
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _opens_a_connection(node)
    }
    assert found == set()
    used = {
        module
        for module, path in MODULES.items()
        if any(map(_opens_a_connection, ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
    }
    assert set(OWN_CONNECTIONS_ALLOWED) <= used, "remove the entries no longer needed"


# --- services: no database or broker driver of their own (issue 33) ------------------------
DRIVERS = ("confluent_kafka", "psycopg", "psycopg_pool")
"""The third-party clients of Kafka and PostgreSQL: the adapters' business, never a service's."""

# Modules of a service importing a driver, each with the drivers it imports and its reason.
# The entries only go: a new module or driver fails, one no longer imported fails until removed.
SERVICE_DRIVERS_ALLOWED: dict[str, tuple[tuple[str, ...], str]] = {}


def service_drivers() -> dict[str, tuple[str, ...]]:
    """The drivers each module of the services imports (lazy, ``TYPE_CHECKING`` and
    ``importlib`` imports included), by module."""
    found: dict[str, set[str]] = {}
    for module, path in sorted(MODULES.items()):
        if layer_of(module) != SERVICES:
            continue
        for imp in _imports(module, path):
            driver = imp.target.split(".")[0]
            if driver in DRIVERS:
                found.setdefault(module, set()).add(driver)
    return {module: tuple(sorted(drivers)) for module, drivers in found.items()}


def test_services_import_no_driver_beyond_the_named_ones() -> None:
    """A service reaches Kafka and PostgreSQL through the ports it is handed: no module of a
    service (the shared runtime included) imports ``confluent_kafka``, ``psycopg`` or
    ``psycopg_pool`` but the ones listed, each with its reason; the list only shrinks."""
    found = service_drivers()
    allowed = {module: drivers for module, (drivers, _reason) in SERVICE_DRIVERS_ALLOWED.items()}
    beyond = {
        module: drivers
        for module, drivers in found.items()
        if not set(drivers) <= set(allowed.get(module, ()))
    }
    assert beyond == {}
    assert {m: d for m, d in allowed.items() if found.get(m) != d} == {}, (
        "remove the entries (or drivers) no longer imported"
    )


def test_the_driver_rule_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Lazy, ``TYPE_CHECKING``, submodule and ``importlib`` imports of a driver all count."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from psycopg.rows import dict_row\n"
        "def lazy() -> None:\n"
        "    import confluent_kafka.admin\n"
        "    importlib.import_module('psycopg_pool')\n"
    )
    seen = {imp.target.split(".")[0] for imp in _imports("sagacity.consumers.probe", probe)}
    assert set(DRIVERS) <= seen
