"""The saga grammar in one place: every reader of what a chain says, run over every case of
``tests/vectors/grammar-v1.json`` (docs/adr/0005-saga-core-events.md, docs/adr/0017).

The core module (:mod:`sagacity.chain._grammar`, which ``verify``, ``replay`` and ``audit watch``
call), the archive's reading of it from rows as ``verify`` selects them (payload digests, an
end's status only), and the standalone bundle verifier's copy (in-process, and as
``python -I verify_bundle.py`` on bundles built from the vectors) must give every case's
findings: none for the flows the product journals, the named rule at the named seq for each
impossible story, data withheld where an opening is missing with no ``ERASED`` that counts, and
the ``ERASED`` events that do not count (``forged_erasure``: no operator signed them), with the
vectors' operator key pinned and without a key (docs/adr/0027-operator-signatures.md).

The registry below is checked against the code: a function that names a grammar rule,
anywhere in the product, fails this module until its file is registered here.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sagacity import JournalEntry
from sagacity.chain._grammar import GrammarRule, check
from sagacity.consumers.archive import AuditReason, verify_bundle
from sagacity.consumers.archive._story import read_stories
from sagacity.consumers.archive._watch import AlertReason
from sagacity.privacy._withheld import DataAccount
from sagacity.signing._operator_signature import OperatorVerifier

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "tests" / "vectors" / "grammar-v1.json").read_text(encoding="utf-8"))
CASES = {case["name"]: case for case in VECTORS["cases"]}

Reading = dict[str, Any]
"""``findings`` ([rule, seq] in order), ``writer`` (the first finding's), ``withheld`` (the
first seq whose data is withheld, or ``None``) and ``forged`` ([seq, reason] of each ``ERASED``
that does not count), with the vectors' operator key pinned, and ``withheld_unpinned`` and
``forged_unpinned`` without a key."""

OPERATOR_KEY = bytes.fromhex(VECTORS["operator_public_key"])
PINNED = OperatorVerifier([OPERATOR_KEY])


def _reading(findings: list[Any], writer: str | None, pinned: Any, unpinned: Any) -> Reading:
    return {
        "findings": findings,
        "writer": writer,
        "withheld": pinned[0],
        "forged": pinned[1],
        "withheld_unpinned": unpinned[0],
        "forged_unpinned": unpinned[1],
    }


def _data(account: DataAccount) -> tuple[int | None, list[list[Any]]]:
    withheld = account.withheld
    return (
        None if withheld is None else withheld[0],
        [[seq, why] for seq, why, _writer in account.forged],
    )


def read_core(case: dict[str, Any]) -> Reading:
    """:func:`sagacity.chain._grammar.check` over the entries, and the core's data account."""
    entries = [JournalEntry.from_dict(e) for e in case["events"]]
    findings = check(entries, after_seq=case["after_seq"])
    accounts = []
    for operator in (PINNED, None):
        account = DataAccount(operator=operator)
        for e in entries:
            if e.event_type == "ERASED":
                account.erasure(e)
            account.feed(e.seq, e.event_type, e.attributes, e.commitments, e.salts)
        accounts.append(_data(account))
    return _reading(
        [[f.rule.value, f.seq] for f in findings],
        findings[0].writer if findings else None,
        *accounts,
    )


def _story_row(e: dict[str, Any]) -> tuple[Any, ...]:
    """A row as ``consumers.archive._story.story_query`` selects it."""
    digest = None
    if e["event_type"] in ("INTENT", "AWAITING_APPROVAL") and e["payload"] is not None:
        digest = hashlib.sha256(e["payload"].encode("utf-8")).hexdigest()
    form2 = e.get("form") == 2
    erased = e["event_type"] == "ERASED"
    return (
        e["saga_id"],
        e["seq"],
        e["event_type"],
        e["tool"],
        e["actor"],
        json.dumps(e["attributes"] or {}),
        digest,
        e["result"] if e["event_type"] == "SAGA_ENDED" else None,
        e["prev_hash"] if erased else None,
        e["recorded_at_us"] if erased else None,
        json.dumps(e.get("commitments") or {}) if form2 else None,
        json.dumps(e.get("salts") or {}) if form2 else None,
    )


def read_archive_rows(case: dict[str, Any]) -> Reading:
    """The archive's reading (``verify``, ``audit watch``): :func:`read_stories` over rows."""
    accounts = []
    for operator in (PINNED, None):
        stories = list(read_stories((_story_row(e) for e in case["events"]), operator=operator))
        assert len(stories) == 1
        accounts.append(_data(stories[0].data))
    story = stories[0]
    return _reading(
        [[f.rule.value, f.seq] for f in story.findings],
        story.findings[0].writer if story.findings else None,
        *accounts,
    )


def read_standalone(case: dict[str, Any]) -> Reading:
    """The standalone verifier's copy, in-process, over the events a bundle holds."""
    events = [dict(e) for e in case["events"]]
    findings = verify_bundle.check_grammar(events, case["after_seq"])
    accounts = []
    for keys in ({verify_bundle.key_id(OPERATOR_KEY): OPERATOR_KEY}, None):
        withheld = verify_bundle.withheld(events, keys)
        forged = verify_bundle.erasures(events, keys)[1]
        accounts.append(
            (None if withheld is None else withheld[0], [[seq, why] for seq, why, _w in forged])
        )
    return _reading(
        [[rule, seq] for rule, seq, _detail, _writer in findings],
        findings[0][3] if findings else None,
        *accounts,
    )


READERS: dict[str, Callable[[dict[str, Any]], Reading]] = {
    "core": read_core,
    "archive-rows": read_archive_rows,
    "standalone": read_standalone,
}

GRAMMAR_NAMERS = {
    # Every file of the product with a function that names a grammar rule, and the reader of
    # this module that runs it over the vectors.
    "sagacity/chain/_grammar.py": "core",
    "consumers/archive/verify_bundle.py": "standalone",
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_reader_reads_every_case(reader: str, name: str) -> None:
    case = CASES[name]
    got = READERS[reader](case)
    assert got == {
        key: case[key]
        for key in (
            "findings",
            "writer",
            "withheld",
            "forged",
            "withheld_unpinned",
            "forged_unpinned",
        )
    }


def test_the_vectors_cover_every_rule_and_the_flows_the_product_journals() -> None:
    named = {rule for case in CASES.values() for rule, _seq in case["findings"]}
    assert named == {r.value for r in GrammarRule}
    valid = [c for c in CASES.values() if c["name"].startswith("valid_")]
    assert len(valid) >= 15
    assert all(not c["findings"] and c["withheld"] is None and not c["forged"] for c in valid)
    assert any(c["withheld"] is not None for c in CASES.values())
    # Each way an ERASED fails to count, pinned and not.
    reasons = {why for c in CASES.values() for _seq, why in c["forged"]}
    assert reasons >= {"unsigned_operator_event", "unknown_operator_key", "bad_operator_signature"}
    assert any(c["forged"] and not c["forged_unpinned"] for c in CASES.values())
    assert any(c["writer"] for c in CASES.values() if c["findings"])


def test_every_case_is_a_hash_valid_chain() -> None:
    """A story is judged only once its chain verifies: every case must verify."""
    from sagacity import verify

    for case in CASES.values():
        entries = [JournalEntry.from_dict(e) for e in case["events"]]
        after = case["after_seq"]
        anchor = case["anchor_hash"] if after else "0" * 64
        verdict = verify(entries, saga_id=case["saga_id"], after_seq=after, after_hash=anchor)
        assert verdict.ok, (case["name"], verdict)


def test_the_standalone_verifier_knows_every_event_type() -> None:
    """An event type the copy does not know turns every open request "unknown" there, so it
    would stay silent where the product's grammar finds an impossible story."""
    from sagacity.entries._events import EventType

    assert {t.value for t in EventType} == verify_bundle._KNOWN_TYPES


def test_one_vocabulary() -> None:
    """The grammar's names are the core's, in every report: verify's reasons, the auditor's
    alerts and the standalone verifier's."""
    rules = {r.value for r in GrammarRule}
    assert rules == set(verify_bundle.GRAMMAR_RULES)
    assert rules <= {r.value for r in AuditReason}
    assert rules <= {r.value for r in AlertReason}
    assert "withheld" in {r.value for r in AuditReason}
    assert "forged_erasure" in {r.value for r in AuditReason}
    assert "forged_erasure" in {r.value for r in AlertReason}


def _names_a_rule(function: ast.AST) -> bool:
    members = set(GrammarRule.__members__)
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("grammar:")
        ):
            return True
        if isinstance(node, ast.Attribute) and node.attr in members:
            return True
    return False


def test_every_grammar_namer_is_registered() -> None:
    """A new reader of the grammar fails here until it is registered (and run over every
    vector): a second copy of the rules is allowed only where it is held to the first."""
    found: set[str] = set()
    for top in ("sagacity", "producer", "consumers", "schemas"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if any(p.is_symlink() for p in [path, *path.parents] if ROOT in p.parents):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _names_a_rule(node):
                    found.add(path.relative_to(ROOT).as_posix())
    assert found == set(GRAMMAR_NAMERS)
    assert set(GRAMMAR_NAMERS.values()) <= set(READERS)


# --- the standalone verifier as auditors run it ------------------------------------------------


def _bundle(directory: Path, case: dict[str, Any]) -> Path:
    """A bundle (format 3, no checkpoints) holding the case's events."""
    directory.mkdir(parents=True)
    events = case["events"]
    data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events).encode("utf-8")
    (directory / "events.jsonl").write_bytes(data)
    form2 = any(e.get("form") == 2 for e in events)
    manifest = {
        "format": "sagacity-audit-bundle/3",
        "saga_id": case["saga_id"],
        "events": len(events),
        "events_sha256": hashlib.sha256(data).hexdigest(),
        "head_seq": events[-1]["seq"],
        "head_hash": events[-1]["hash"],
        "anchor": None,
        "canonical_form": "SGC2" if form2 else "SGC1",
        "checkpoint_form": "SGCR2",
        "checkpoints": [],
        "unsigned": ["exported_at", "public_keys", "archive_verdict"],
    }
    (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    shutil.copy(verify_bundle.__file__, directory / "verify_bundle.py")
    return directory


def _run(directory: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(directory / "verify_bundle.py"), str(directory), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=directory,
        check=False,
    )


def test_the_standalone_verifier_run_as_auditors_run_it(tmp_path: Path) -> None:
    """Every case (but an anchored one, which needs a signed retention record) as a bundle
    checked by ``python -I verify_bundle.py`` with the operator key pinned: valid sagas pass,
    each impossible story fails with its first finding's name and seq, withheld data fails
    unless --allow-unopened, an ERASED that does not count fails as forged_erasure."""
    checked = 0
    operator = ("--operator-public-key", OPERATOR_KEY.hex())
    for name, case in sorted(CASES.items()):
        if case["after_seq"]:
            continue
        proc = _run(_bundle(tmp_path / name, case), "--allow-unsigned", *operator)
        if case["findings"]:
            rule, seq = case["findings"][0]
            assert proc.returncode == 1, (name, proc.stdout, proc.stderr)
            assert proc.stdout.startswith(f"FAILED: {rule} at seq {seq}: "), (name, proc.stdout)
            if case["writer"]:
                assert f"(written by writer {case['writer']})" in proc.stdout
        elif case["withheld"] is not None:
            assert proc.returncode == 1, (name, proc.stdout, proc.stderr)
            found = re.match(r"FAILED: withheld at seq (\d+): ", proc.stdout)
            assert found is not None, proc.stdout
            assert int(found.group(1)) == case["withheld"], proc.stdout
            accepted = _run(tmp_path / name, "--allow-unsigned", "--allow-unopened", *operator)
            if case["forged"]:
                assert accepted.returncode == 1, accepted.stdout + accepted.stderr
                seq = case["forged"][0][0]
                assert accepted.stdout.startswith(f"FAILED: forged_erasure at seq {seq}: ")
            else:
                assert accepted.returncode == 0, accepted.stdout + accepted.stderr
                assert "accepted only because of --allow-unopened" in accepted.stdout
        elif case["forged"]:
            seq, why = case["forged"][0]
            assert proc.returncode == 1, (name, proc.stdout, proc.stderr)
            assert proc.stdout.startswith(f"FAILED: forged_erasure at seq {seq}: "), proc.stdout
            assert f"({why})" in proc.stdout
        else:
            assert proc.returncode == 0, (name, proc.stdout, proc.stderr)
        checked += 1
    assert checked >= 40


def test_the_standalone_verifier_without_an_operator_key_says_it_counted_unverified(
    tmp_path: Path,
) -> None:
    """Without --operator-public-key an ERASED with an operator signature counts unverified
    (and the output says so); one without a signature never counts."""
    signed = _run(_bundle(tmp_path / "signed", CASES["erased_other_key"]), "--allow-unsigned")
    assert signed.returncode == 0, signed.stdout + signed.stderr
    assert "UNVERIFIED: 1 ERASED event(s) counted without checking" in signed.stdout
    pinned = _run(
        tmp_path / "signed", "--allow-unsigned", "--operator-public-key", OPERATOR_KEY.hex()
    )
    assert pinned.returncode == 1
    assert pinned.stdout.startswith("FAILED: withheld at seq 2: "), pinned.stdout
    assert "(the ERASED at seq 5 does not: unknown_operator_key)" in pinned.stdout
    unsigned = _run(_bundle(tmp_path / "unsigned", CASES["erased_unsigned"]), "--allow-unsigned")
    assert unsigned.returncode == 1
    assert unsigned.stdout.startswith("FAILED: withheld at seq 2: "), unsigned.stdout
    bad = _run(tmp_path / "unsigned", "--allow-unsigned", "--operator-public-key", "00" * 31)
    assert bad.returncode == 2
