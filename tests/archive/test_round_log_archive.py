"""The log of signing rounds on real Postgres (docs/adr/0015-round-log.md): a round rewritten
and re-signed breaks every later round; rounds of the first format (SGCR1) are still verified
and the log continues after them; the continuous auditor records rounds and catches two
histories; the witness."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import psycopg
import pytest
from archive_helpers import as_raw, encode, make_chain
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.consumers.archive import BatchArchiver, Signer, audit, generate_key, sign_pending
from sagacity.consumers.archive._checkpoints import (
    FIRST_PREV_ROOT,
    leaf_hash,
    merkle_root,
)
from sagacity.consumers.archive._export import export_bundle
from sagacity.consumers.archive._merkle import consistency_proof, verify_consistency
from sagacity.consumers.archive._roundlog import consistency_proof_between, rounds_after
from sagacity.consumers.archive._watch import AlertReason, AuditorState, watch_once
from sagacity.consumers.archive._witness import publish, read
from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
    PostgresRoundLog,
    PostgresSagaBundles,
    PostgresWatchedArchive,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres

SAGAS = ("l-1", "l-2", "l-3")


@pytest.fixture
def archiver(archive_dsn: str) -> Iterator[BatchArchiver]:
    a = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    yield a
    a.close()


@pytest.fixture
def signer(tmp_path) -> Signer:
    return generate_key(tmp_path / "archive.key")


def tamper(dsn: str, *statements: tuple[str, tuple[object, ...]]) -> None:
    """Run statements with triggers disabled (as a superuser can)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        for sql, params in statements:
            conn.execute(sql, params)


def _sign_first_format(conn: psycopg.Connection, signer: Signer) -> None:
    """One round as archives signed before the log (SGCR1: a root over the round's heads)."""
    with conn.transaction():
        heads = conn.execute(
            "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"
            ' WHERE head_seq > checkpointed_seq ORDER BY saga_id COLLATE "C"'
        ).fetchall()
        last = conn.execute(
            "SELECT root FROM archive_checkpoint_round ORDER BY round_id DESC LIMIT 1"
        ).fetchone()
        (round_id,) = conn.execute("SELECT nextval('archive_checkpoint_round_id_seq')").fetchone()
        leaves = [leaf_hash(saga_id=s, seq=n, hash=h) for s, n, h in heads]
        signed = signer.sign_round(
            round_id=round_id,
            leaf_count=len(leaves),
            root=merkle_root(leaves).hex(),
            prev_root=last[0] if last else FIRST_PREV_ROOT,
            signed_at_us=round_id,
        )
        conn.execute(
            "INSERT INTO archive_checkpoint_round (round_id, leaf_count, root, prev_root,"
            " signed_at_us, key_id, signature) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                round_id,
                len(leaves),
                signed.root,
                signed.prev_root,
                round_id,
                signer.key_id,
                signed.signature,
            ),
        )
        for index, (saga_id, seq, hash) in enumerate(heads):
            conn.execute(
                "INSERT INTO archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id,"
                " round_id, leaf_index) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (saga_id, seq, hash, round_id, signer.key_id, round_id, index),
            )
            conn.execute(
                "UPDATE archive_saga_head SET checkpointed_seq = %s WHERE saga_id = %s",
                (seq, saga_id),
            )


def _rounds(archiver, dsn: str, signer: Signer, count: int, *, first_format: int = 0) -> dict:
    """``count`` rounds, one per seq of three sagas; the first ``first_format`` in SGCR1."""
    chains = {s: make_chain(s, count) for s in SAGAS}
    for seq in range(count):
        archiver.archive(as_raw([c[seq] for c in chains.values()], first_offset=3 * seq))
        with psycopg.connect(dsn) as conn:
            if seq < first_format:
                _sign_first_format(conn, signer)
            else:
                assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 3
    return chains


def _all_leaves(dsn: str, up_to: int) -> list[bytes]:
    with psycopg.connect(dsn) as conn:
        return [
            leaf_hash(saga_id=s, seq=n, hash=h)
            for s, n, h in conn.execute(
                "SELECT saga_id, seq, hash FROM archive_checkpoint WHERE round_id <= %s"
                " ORDER BY round_id, leaf_index",
                (up_to,),
            )
        ]


def _resign(dsn: str, signer: Signer, round_id: int, *, log: bool) -> None:
    """Re-sign round ``round_id`` over the archive's checkpoints as they now are, linked to
    the round before it as it now is: what someone holding the key does to hide a rewrite."""
    with psycopg.connect(dsn) as conn:
        (prev_root,) = conn.execute(
            "SELECT coalesce((SELECT root FROM archive_checkpoint_round WHERE round_id < %s"
            " ORDER BY round_id DESC LIMIT 1), %s)",
            (round_id, FIRST_PREV_ROOT),
        ).fetchone()
        (leaf_count, signed_at_us) = conn.execute(
            "SELECT leaf_count, signed_at_us FROM archive_checkpoint_round WHERE round_id = %s",
            (round_id,),
        ).fetchone()
    if log:
        leaves = _all_leaves(dsn, round_id)
        signed = signer.sign_log_round(
            round_id=round_id,
            tree_size=len(leaves),
            leaf_count=leaf_count,
            root=merkle_root(leaves).hex(),
            prev_root=prev_root,
            signed_at_us=signed_at_us,
        )
    else:
        leaves = _all_leaves(dsn, round_id)[-leaf_count:]
        signed = signer.sign_round(
            round_id=round_id,
            leaf_count=leaf_count,
            root=merkle_root(leaves).hex(),
            prev_root=prev_root,
            signed_at_us=signed_at_us,
        )
    tamper(
        dsn,
        (
            "UPDATE archive_checkpoint_round SET root = %s, prev_root = %s, signature = %s"
            " WHERE round_id = %s",
            (signed.root, signed.prev_root, signed.signature, round_id),
        ),
    )


def _rewrite_leaf(dsn: str, round_id: int) -> None:
    """Change the hash one checkpoint of ``round_id`` signed (as for a rewritten chain)."""
    tamper(
        dsn,
        (
            "UPDATE archive_checkpoint SET hash = %s WHERE round_id = %s AND leaf_index = 1",
            ("ab" * 32, round_id),
        ),
    )


@pytest.mark.parametrize("log", [False, True], ids=["SGCR1", "SGCR2"])
def test_resigning_a_rewritten_round_breaks_every_later_round(archiver, archive_dsn, signer, log):
    """Someone holding the key rewrites round 2 and re-signs it and round 3, which linked to
    it.  With rounds of the first format that hides the rewrite (the reproduction: nothing
    later covers round 3's root); in the log, every round after the ones re-signed fails, and
    re-signing round 2 alone fails rounds 3 and 4."""
    _rounds(archiver, archive_dsn, signer, 4, first_format=0 if log else 4)
    keys = [signer.public_raw]
    with psycopg.connect(archive_dsn) as conn:
        ids = [r.round_id for r in rounds_after(PostgresRoundLog(conn))]
        assert audit(PostgresArchiveAudits(conn), pinned_keys=keys).all_ok
    assert len(ids) == 4
    _rewrite_leaf(archive_dsn, ids[1])
    _resign(archive_dsn, signer, ids[1], log=log)
    with psycopg.connect(archive_dsn) as conn:
        failed = audit(PostgresArchiveAudits(conn), pinned_keys=keys).rounds.failed
    # The next round's link breaks; in the log, every later root too.
    assert sorted(failed) == (ids[2:] if log else [ids[2]])
    _resign(archive_dsn, signer, ids[2], log=log)
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
    if not log:
        # The weakness of the first format: two signatures make every round verify again
        # (the rewritten checkpoint then only has to match a chain rewritten to fit it).
        assert not summary.rounds.failed
        return
    assert sorted(summary.rounds.failed) == [ids[3]]
    _, detail = summary.rounds.failed[ids[3]]
    # Round 3's root covers round 2's leaves, so re-signing it changed its root: round 4 no
    # longer follows it.  Hiding the rewrite means re-signing every round up to the latest,
    # which an auditor's record or the witness then catches (the tests below).
    assert f"round {ids[3]} does not follow round {ids[2]}" in detail


def test_first_format_rounds_verify_and_the_log_continues_after_them(
    archiver, archive_dsn, signer, tmp_path
):
    """Two SGCR1 rounds, then three of the log: the log's first round covers the older
    rounds' leaves too, consistency proofs from the archive match the in-memory ones, and an
    auditor records the whole history."""
    _rounds(archiver, archive_dsn, signer, 5, first_format=2)
    keys = [signer.public_raw]
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
        rounds = rounds_after(PostgresRoundLog(conn))
        assert [r.format for r in rounds] == [1, 1, 2, 2, 2]
        assert [r.tree_size for r in rounds] == [None, None, 9, 12, 15]
        assert rounds[2].prev_root == rounds[1].root
        for old, new in [(rounds[2], rounds[4]), (rounds[3], rounds[4]), (rounds[2], rounds[3])]:
            proof = consistency_proof_between(PostgresRoundLog(conn), old, new)
            leaves = _all_leaves(archive_dsn, new.round_id)
            assert proof == consistency_proof(leaves, old.tree_size)
            assert verify_consistency(
                old.tree_size,
                new.tree_size,
                bytes.fromhex(old.root),
                bytes.fromhex(new.root),
                proof,
            )
        report = watch_once(
            PostgresWatchedArchive(conn),
            AuditorState(tmp_path / "a.jsonl"),
            keys={signer.key_id: signer.public_raw},
        )
    assert (summary.all_ok, summary.rounds.rounds, summary.checkpoints) == (True, 5, 15)
    assert report.ok, report.alerts
    assert [r.round_id for r in report.recorded] == [r.round_id for r in rounds]
    # A bundle mixing both formats: the package and the standalone verifier agree.
    with psycopg.connect(archive_dsn) as conn:
        verdict = export_bundle(PostgresSagaBundles(conn), "l-2", tmp_path / "bundle")
    assert verdict.ok
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert [c["round"]["format"] for c in manifest["checkpoints"]] == [
        "SGCR1",
        "SGCR1",
        "SGCR2",
        "SGCR2",
        "SGCR2",
    ]
    script = tmp_path / "bundle" / "verify_bundle.py"
    command = [sys.executable, "-I", str(script), str(tmp_path / "bundle")]
    done = subprocess.run(
        [*command, "--public-key", signer.public_hex],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 signed checkpoint(s) verified" in done.stdout


def _watch(dsn: str, state, *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        main, ["audit", "watch", "--database-url", dsn, "--state", str(state), "--once", *extra]
    )
    return result.exit_code, result.stdout, result.stderr


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:
    received: list[dict] = []
    handler = type("Hook", (_Hook,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received
    server.shutdown()
    server.server_close()


def test_two_histories_shown_to_two_auditors_are_caught(
    archiver, archive_dsn, signer, tmp_path, webhook
):
    """Auditor A records rounds 1-2 and the witness holds round 2.  The operator (holding the
    key) then rewrites round 2, re-signs it and signs round 3 on top: a self-consistent history
    that auditor B, starting now, accepts.  A's next pass, B compared with A's record, and B
    checked against the witness each catch the fork."""
    url, received = webhook
    public = signer.public_hex
    witness = tmp_path / "witness.json"
    _rounds(archiver, archive_dsn, signer, 2)
    with psycopg.connect(archive_dsn) as conn:
        publish(str(witness), rounds_after(PostgresRoundLog(conn))[-1], public_hex=public)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    code, out, err = _watch(archive_dsn, a, "--public-key", public, "--witness", str(witness))
    assert code == 0, err
    assert out.count("recorded") == 2
    code, out, _ = _watch(archive_dsn, a, "--public-key", public)
    assert (code, out.count("recorded")) == (0, 0)  # nothing new: consistent

    with psycopg.connect(archive_dsn) as conn:
        second = rounds_after(PostgresRoundLog(conn))[-1].round_id
    _rewrite_leaf(archive_dsn, second)
    _resign(archive_dsn, signer, second, log=True)
    archiver.archive(as_raw([c[2] for c in (make_chain(s, 3) for s in SAGAS)], first_offset=6))
    with psycopg.connect(archive_dsn) as conn:
        # the operator's archiver goes on signing
        assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 3

    code, out, err = _watch(archive_dsn, b, "--public-key", public)
    assert code == 0, err  # B alone sees nothing wrong: the forged history is self-consistent
    assert out.count("recorded") == 3
    code, _, err = _watch(archive_dsn, a, "--public-key", public, "--webhook", url)
    assert code == 1
    assert f"ALERT fork: round {second} was recorded with root" in err
    assert [r["alert"] for r in received] == ["fork"]
    assert received[0]["round_id"] == second
    code, _, err = _watch(archive_dsn, b, "--public-key", public, "--peer", str(a))
    assert code == 1
    assert "two histories were shown" in err
    code, _, err = _watch(archive_dsn, b, "--public-key", public, "--witness", str(witness))
    assert code == 1
    assert f"the witness {witness} published round {second}" in err
    # A's record is left as it was: the fork's rounds were not recorded.
    assert [r.round_id for r in AuditorState(a).rounds()] == [second - 1, second]


def test_the_auditor_catches_removed_rounds_and_bad_signatures(
    archiver, archive_dsn, signer, tmp_path
):
    _rounds(archiver, archive_dsn, signer, 3)
    keys = {signer.key_id: signer.public_raw}
    state = AuditorState(tmp_path / "s.jsonl")
    with psycopg.connect(archive_dsn) as conn:
        assert watch_once(PostgresWatchedArchive(conn), state, keys=keys).ok
        ids = [r.round_id for r in rounds_after(PostgresRoundLog(conn))]
    tamper(
        archive_dsn,
        ("DELETE FROM archive_checkpoint WHERE round_id = %s", (ids[-1],)),
        ("DELETE FROM archive_checkpoint_round WHERE round_id = %s", (ids[-1],)),
    )
    with psycopg.connect(archive_dsn) as conn:
        (alert,) = watch_once(PostgresWatchedArchive(conn), state, keys=keys).alerts
        assert alert.reason is AlertReason.ROLLBACK
        # An auditor starting now sees a consistent archive, until it compares with the first.
        late = AuditorState(tmp_path / "late.jsonl")
        assert watch_once(PostgresWatchedArchive(conn), late, keys=keys).ok
        (alert,) = watch_once(PostgresWatchedArchive(conn), late, keys=keys, peers=[state]).alerts
        assert (alert.reason, alert.round_id) == (AlertReason.ROLLBACK, ids[-1])
        fresh = AuditorState(tmp_path / "fresh.jsonl")
        stranger = generate_key(tmp_path / "other.key")
        (alert,) = watch_once(
            PostgresWatchedArchive(conn), fresh, keys={stranger.key_id: stranger.public_raw}
        ).alerts
        assert alert.reason is AlertReason.UNKNOWN_KEY
        assert list(fresh.rounds()) == []
    (tmp_path / "bad.jsonl").write_text("not json\n")
    from sagacity.errors import AuditorStateError

    with (
        psycopg.connect(archive_dsn) as conn,
        pytest.raises(AuditorStateError, match=r"bad\.jsonl:1"),
    ):
        watch_once(PostgresWatchedArchive(conn), AuditorState(tmp_path / "bad.jsonl"), keys=keys)


@pytest.mark.kafka
def test_verify_checks_the_witness(kafka_bootstrap, make_topic, archive_dsn, signer, tmp_path):
    """`sagacity archive checkpoint --witness` reads the topic, signs what it read and
    publishes the latest round; `verify --witness` passes while the archive holds it and fails
    once it was removed or the witness forged."""
    from confluent_kafka import Producer

    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for saga in SAGAS:
        first = make_chain(saga, 2)[0]
        producer.produce(topic, key=saga.encode(), value=encode(first))
    assert producer.flush(30) == 0
    witness = tmp_path / "w" / "witness.json"
    key = tmp_path / "archive.key"  # the signer fixture's
    runner = CliRunner()

    def run(*args: str):
        result = runner.invoke(main, list(args))
        return result.exit_code, result.stdout + result.stderr

    code, out = run(
        "archive",
        "checkpoint",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--topic",
        topic,
        "--database-url",
        archive_dsn,
        "--signing-key",
        str(key),
        "--witness",
        str(witness),
    )
    assert code == 0, out
    assert "read 3 message(s) (0 again, 3 newly archived); signed 3 head(s)" in out
    published = read(str(witness))
    assert published is not None
    assert published.tree_size == 3
    verify = ("verify", "--database-url", archive_dsn, "--public-key", signer.public_hex)
    code, out = run(*verify, "--witness", str(witness))
    assert code == 0, out
    assert f"witness: round {published.round_id}:{published.root}" in out
    tamper(
        archive_dsn,
        ("DELETE FROM archive_checkpoint WHERE round_id = %s", (published.round_id,)),
        ("DELETE FROM archive_checkpoint_round WHERE round_id = %s", (published.round_id,)),
    )
    code, out = run(*verify, "--witness", str(witness))
    assert code == 1
    assert "recorded earlier, is not in the archive" in out
    forger = generate_key(tmp_path / "forger.key")
    publish(
        str(witness),
        forger.sign_log_round(
            round_id=published.round_id + 1,
            tree_size=3,
            leaf_count=3,
            root="00" * 32,
            signed_at_us=1,
        ),
        public_hex=forger.public_hex,
    )
    code, out = run(*verify, "--witness", str(witness))
    assert code == 1
    assert "not signed by a trusted key" in out
    # A witness file never moves back to an older round.
    publish(str(witness), published, public_hex=signer.public_hex)
    assert read(str(witness)).round_id == published.round_id + 1
    (witness).write_text("{}")
    code, out = run(*verify, "--witness", str(witness))
    assert code == 2
    assert "holds no signed round" in out


@pytest.mark.parametrize("column", ["signed_at_us", "key_id"])
def test_a_checkpoint_showing_another_time_or_key_than_its_round_fails(
    archiver, archive_dsn, signer, column
):
    """A checkpoint row's time and key are shown (in bundles too) but signed only as its
    round's: a row showing others fails its round."""
    _rounds(archiver, archive_dsn, signer, 1)
    value = "feedfeedfeedfeed" if column == "key_id" else 42
    tamper(
        archive_dsn,
        (f"UPDATE archive_checkpoint SET {column} = %s WHERE saga_id = 'l-2'", (value,)),
    )
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    ((reason, detail),) = summary.rounds.failed.values()
    assert reason == "bad_signature"
    assert "leaf 1 shows a signing time or key other than its round's" in detail
    assert len(summary.failures) == 3


def test_audit_watch_refuses_a_state_file_it_cannot_read(archive_dsn, tmp_path):
    """A damaged record is an error (exit 2) naming the line, never a pass or a reset."""
    state = tmp_path / "state.jsonl"
    state.write_text('{"round_id": 1}\n')
    code, _, err = _watch(archive_dsn, state)
    assert code == 2
    assert "state.jsonl:1 is not a recorded round" in err
    assert state.read_text() == '{"round_id": 1}\n'
    code, _, err = _watch(archive_dsn, tmp_path / "new.jsonl", "--interval", "0")
    assert (code, "--interval must be positive" in err) == (2, True)
