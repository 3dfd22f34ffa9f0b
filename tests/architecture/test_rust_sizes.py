"""The Rust half keeps the same size budget: a source file under 600 lines, an ``fn`` under 80.

Every ``native/src/**/*.rs`` is measured (the crate's unit tests under ``native/src/tests/``
too: they are code a reader opens like any other).  A file's size is its line count; a
function's is its lines from its ``fn`` keyword to its closing brace (``_rust.py`` scans them;
the tests at the end hold the scan to small snippets).  The rule and the allow-lists' ceilings
are the Python half's (``_budget.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.architecture._budget import (
    FUNCTION_BUDGET,
    FUNCTION_SLACK,
    MODULE_BUDGET,
    MODULE_SLACK,
    Allowed,
    over,
    stale,
)
from tests.architecture._rust import blank_literals, functions

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native" / "src"

# Files allowed past the budget: path -> (ceiling in lines, why).
FILES_ALLOWED: Allowed = {}

# Functions allowed past the budget: "path::Type::name" -> (ceiling in lines, why).
FUNCTIONS_ALLOWED: Allowed = {}


def _measure() -> tuple[dict[str, int], dict[str, int]]:
    files: dict[str, int] = {}
    fns: dict[str, int] = {}
    for path in sorted(NATIVE.rglob("*.rs")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        files[rel] = len(text.splitlines())
        for name, lines in functions(text):
            key = f"{rel}::{name}"
            assert key not in fns, (
                f"{key}: two functions of one name; the scan must tell them apart"
            )
            fns[key] = lines
    return files, fns


FILES, FUNCTIONS = _measure()


def test_the_whole_native_tree_is_measured() -> None:
    assert "native/src/lib.rs" in FILES
    assert "native/src/tests/mod.rs" in FILES
    assert "native/src/lib.rs::sagacity_native" in FUNCTIONS
    assert "native/src/audit.rs::ChainAuditor::judge" in FUNCTIONS
    assert "native/src/verify/saga.rs::Saga::check" in FUNCTIONS  # module directories too
    assert "native/src/grammar/gate.rs::Grammar::intent" in FUNCTIONS
    assert len(FILES) >= 14
    assert len(FUNCTIONS) > 140


def test_no_rust_file_is_over_the_budget() -> None:
    assert over(FILES, MODULE_BUDGET, FILES_ALLOWED, "file") == []


def test_no_rust_function_is_over_the_budget() -> None:
    assert over(FUNCTIONS, FUNCTION_BUDGET, FUNCTIONS_ALLOWED, "function") == []


@pytest.mark.parametrize(
    ("sizes", "budget", "allowed", "slack"),
    [
        (FILES, MODULE_BUDGET, FILES_ALLOWED, MODULE_SLACK),
        (FUNCTIONS, FUNCTION_BUDGET, FUNCTIONS_ALLOWED, FUNCTION_SLACK),
    ],
    ids=["files", "functions"],
)
def test_every_rust_ceiling_is_needed_and_tight(
    sizes: dict[str, int], budget: int, allowed: Allowed, slack: int
) -> None:
    assert stale(sizes, budget, allowed, slack) == []


# The scan, on snippets: each would give other numbers if it miscounted.


def test_a_nested_block_does_not_end_its_function() -> None:
    source = (
        "fn outer(xs: &[u8]) -> usize {\n"  # 1
        "    let mut n = 0;\n"
        "    for x in xs {\n"
        "        if *x > 0 { n += 1; }\n"
        "    }\n"  # 5
        "    let f = |y: u8| { y + 1 };\n"
        "    fn inner() -> u8 {\n"
        "        { 1 }\n"
        "    }\n"  # 9
        "    n + f(inner()) as usize\n"
        "}\n"  # 11
        "fn next() {}\n"
    )
    assert dict(functions(source)) == {"outer::inner": 3, "outer": 11, "next": 1}


def test_a_brace_in_a_string_or_char_literal_is_not_counted() -> None:
    source = (
        "fn strings() -> usize {\n"
        '    let a = "}";\n'
        '    let b = "\\"}{";\n'
        '    let c = b"}}";\n'
        '    let d = r#"}" } "#;\n'
        "    let e = '}';\n"
        "    let f = '\\'';\n"
        "    let g = b'{';\n"
        "    a.len() + b.len() + c.len() + d.len()\n"
        "}\n"  # 10
        "fn lifetimes<'a>(x: &'a str, key: [u8; 32]) -> &'a str {\n"
        "    'outer: loop { break 'outer; }\n"
        "    x\n"
        "}\n"  # 4
    )
    assert dict(functions(source)) == {"strings": 10, "lifetimes": 4}


def test_a_brace_in_a_comment_is_not_counted() -> None:
    source = (
        "/// Opens with `{`.\n"
        "fn commented() {\n"  # 1
        "    // closes early: }\n"
        "    /* } and /* nested { */ still a comment } */\n"
        '    let s = "// not a comment {";\n'
        "}\n"  # 5
    )
    assert dict(functions(source)) == {"commented": 5}
    assert "}" not in blank_literals(source).splitlines()[2]


def test_a_method_is_named_after_its_impl_and_a_declaration_has_no_body() -> None:
    source = (
        "impl<T> Source<T> {\n"
        "    fn new() -> Self {\n"  # 1
        "        Source { items: Vec::new() }\n"
        "    }\n"  # 3
        "}\n"
        "impl From<StreamError> for PyErr {\n"
        "    fn from(error: StreamError) -> PyErr {\n"
        "        PyValueError::new_err(error.0)\n"
        "    }\n"
        "}\n"
        "trait Walk {\n"
        "    fn step(&mut self, f: fn(u8) -> u8);\n"
        "    fn twice(&mut self) { self.step(|x| x); self.step(|x| x); }\n"
        "}\n"
        "mod tests;\n"
        "mod inline {\n"
        "    #[test]\n"
        "    fn case() {\n"
        "    }\n"
        "}\n"
    )
    assert dict(functions(source)) == {
        "Source::new": 3,
        "From for PyErr::from": 3,
        "Walk::twice": 1,
        "inline::case": 2,
    }


def test_a_brace_the_scan_cannot_match_fails_the_measure() -> None:
    with pytest.raises(ValueError, match="without its opening one"):
        list(functions("fn f() {\n}\n}\n"))
    with pytest.raises(ValueError, match="left open"):
        list(functions("fn f() {\n    let s = '{';\n    {\n}\n"))
