"""The console's pure parts: redirects after sign-in, visible whitespace, the sign-in limit,
the metrics and their chart."""

from __future__ import annotations

from sagacity.consumers.approvals.console import _metrics
from sagacity.consumers.approvals.console._page import safe_next as _safe_next
from sagacity.consumers.approvals.console._requests import _visible_whitespace
from sagacity.consumers.approvals.console._security import LoginLimiter
from sagacity.ports import RequestRow, RowState


def test_only_console_paths_are_followed_after_sign_in() -> None:
    assert _safe_next("/ui/requests/s-1/4") == "/ui/requests/s-1/4"
    for hostile in (
        "https://evil.example/ui/",
        "//evil.example/ui/",
        "/ui//evil.example",
        "/ui/\\evil",
        "/elsewhere",
        "/ui/\nSet-Cookie: x",
        None,
        7,
    ):
        assert _safe_next(hostile) == "/ui/", hostile


def test_whitespace_and_invisible_characters_are_drawn() -> None:
    assert _visible_whitespace('{"a":1}') is None
    assert _visible_whitespace('{"to": "alice"}') == '{"to":·"alice"}'
    assert _visible_whitespace("a\tb\nc") == "a→b↵\nc"
    assert _visible_whitespace("ali\u200bce\u00a0") == "ali⟨U+200B⟩ce⍽"


def test_sign_in_failures_are_limited_per_address_and_forgotten_after_the_window() -> None:
    now = [0.0]
    limiter = LoginLimiter(attempts=3, window_s=60, clock=lambda: now[0])
    for _ in range(3):
        assert limiter.blocked("10.0.0.1") is None
        limiter.failed("10.0.0.1")
    assert limiter.blocked("10.0.0.1") == 60
    assert limiter.blocked("10.0.0.2") is None
    now[0] = 61
    assert limiter.blocked("10.0.0.1") is None
    limiter.failed("10.0.0.1")
    limiter.succeeded("10.0.0.1")
    assert limiter.blocked("10.0.0.1") is None


def _row(tool: str, decision: str, requested: int, decided: int) -> RequestRow:
    return RequestRow(
        saga_id="s",
        seq=1,
        tool=tool,
        payload="{}",
        payload_sha256=None,
        requested_at_us=requested,
        expires_at_us=None,
        signatures_required=1,
        policy_version="1",
        reversibility="IRREVERSIBLE",
        state=RowState.RESUMED,
        signed_by=(),
        decision=decision,
        decided_by="a",
        decided_at_us=decided,
        decision_policy_version="1",
        closed_at_us=decided,
    )


def test_figures_per_tool_and_window_and_an_escaped_chart() -> None:
    day = 86_400 * 1_000_000
    now = 10 * day
    rows = [
        _row("wire", "approved", now - 100_000_000, now - 90_000_000),  # 10 s
        _row("wire", "approved", now - 200_000_000, now - 170_000_000),  # 30 s
        _row("wire", "rejected", now - 2 * day, now - 2 * day + 50_000_000),  # 50 s, 2 days ago
        _row("<b>grant</b>", "expired", now - 3 * day, now - 3 * day + 1),
    ]
    (wire,) = _metrics.figures(rows, now_us=now, window_s=86_400)
    assert (wire.approved, wire.rejected, wire.approve_ratio) == (2, 0, 1.0)
    assert wire.p50_s == 20.0
    week = {f.tool: f for f in _metrics.figures(rows, now_us=now, window_s=7 * 86_400)}
    assert week["wire"].rejected == 1
    assert week["wire"].p95_s == 48.0
    assert week["<b>grant</b>"].approve_ratio is None
    svg = _metrics.chart(list(week.values()))
    assert "&lt;b&gt;grant&lt;/b&gt;" in svg
    assert "<b>" not in svg


def test_a_redacted_field_is_shown_masked_on_the_request_page() -> None:
    """docs/adr/0019-erasure.md §5: the formatted payload shows ``•••• (redacted)`` and names
    the redacted fields; the exact stored bytes (the redaction keys) stay on the page."""
    import jinja2

    from sagacity.chain import payload_sha256
    from sagacity.consumers.approvals.console import _page, _requests, _routes
    from sagacity.privacy._redaction import redact

    clear = '{"amount":120,"card_number":"4111111111111111","customer":{"name":"Ada"}}'
    payload = redact("charge", clear, ("$.card_number", "$.customer.iban")).payload
    row = RequestRow(
        saga_id="s",
        seq=2,
        tool="charge",
        payload=payload,
        payload_sha256=payload_sha256(payload),
        requested_at_us=1,
        expires_at_us=None,
        signatures_required=1,
        policy_version="1",
        reversibility="IRREVERSIBLE",
        state=RowState.PENDING,
        signed_by=(),
        decision=None,
        decided_by=None,
        decided_at_us=None,
        decision_policy_version=None,
        closed_at_us=None,
    )
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_routes.HERE / "templates")), autoescape=True
    )
    environment.globals.update(when=_page.when, span=_page.span)
    page = environment.get_template("request.html").render(
        row=row,
        before=[],
        after=[],
        pretty=_requests._pretty(payload),
        redacted=_requests._redacted(payload),
        visible=None,
        payload_bytes=len(payload),
        computed_sha256=payload_sha256(payload),
        hash_matches=True,
        deadline=None,
        left="no limit",
        writer="w",
        signed_by_me=False,
        undo={"reversed": (), "kept": (), "undone": (), "warning": None},
        csrf="c",
        viewer=None,
    )
    assert "4111111111111111" not in page
    assert '"card_number": "•••• (redacted)"' in page.replace("&#34;", '"')
    assert "never journaled in clear: $.card_number (shown •••• (redacted))" in page
    assert '"amount": 120' in page.replace("&#34;", '"')
    assert _requests._redacted('{"a":1}') == []
    assert _requests._redacted("not json") == []
