"""Names of the journal entry attributes the core writes and reads (part of the format)."""

from __future__ import annotations

REF_SEQ = "ref_seq"
"""The seq an entry refers to: a decision's request, an outcome's intent, a step."""
REVERSIBILITY = "reversibility"
"""The tool's declared reversibility, on ``INTENT``/``EXECUTED``/``AWAITING_APPROVAL``."""
RESULT_ENCODING = "result_encoding"
"""How ``result`` encodes the tool's return value: ``text``, ``json`` or ``repr``."""
UNDO = "undo"
"""On ``EXECUTED``: ``tool`` (the result named its undo) or ``none`` (no undo exists).
Information for people: compensation reads the undo again from its own declaration of the
tool and the journaled call and result (``sagacity.undo._undo_plan``), never from these."""
UNDO_TOOL = "undo_tool"
"""The tool the result (or the declaration) named as the step's undo (information only)."""
UNDO_ARGUMENTS = "undo_arguments"
"""Compact JSON of the undo call's arguments (information only)."""
COMPENSATION = "compensation"
"""On ``SAGA_OPENED``: the mode (``inline``/``delegated``); on ``COMPENSATION_INTENT``: the
compensation called."""
CAUSE = "cause"
"""On ``COMPENSATION_FAILED``: ``error``, ``no_undo``, ``undeclared``, ``unregistered``,
``undeclared_undo`` (the result names an undo tool its tool does not declare) or
``gated_undo`` (the undo tool is IRREVERSIBLE or PRIVILEGED); see ``sagacity.undo._undo_plan``."""
PHASE = "phase"
"""On ``SUSPECT``: ``call`` (an ``INTENT`` without outcome) or ``compensation``."""
OUTCOME = "outcome"
"""On ``SUSPECT_SETTLED``: ``executed``, ``not-executed`` or ``fixed-by-hand``."""
NOTE = "note"
"""On ``SUSPECT_SETTLED``: what the person who settled it wrote."""
REASON = "reason"
"""On ``COMPENSATION_REQUESTED``: the event that made compensation necessary (or, signed by an
operator, the operator's words); on ``ERASED``: why the saga's data was erased."""
POLICY_VERSION = "policy_version"
"""The approval policy in force, on requests and decisions."""
PAYLOAD_SHA256 = "payload_sha256"
"""SHA-256 (hex) of the entry's payload, on requests and refused resumes."""
SIGNATURES_REQUIRED = "signatures_required"
"""On ``AWAITING_APPROVAL``: ``1`` or ``2`` (the requester's claim); on an ``APPROVED`` the
approvals service signed (``SGCD3``): the count it decided the request needs, routes included."""
EXPIRES_AT_US = "expires_at_us"
"""On ``AWAITING_APPROVAL``: when the request lapses, in microseconds since the epoch."""
DIRTY = "dirty"
"""On a ``SAGA_ENDED`` after compensation: the steps still dirty or suspect, for people."""
REQUESTED_BY = "requested_by"
"""On a resume's ``INTENT``, ``RESUME_REFUSED`` or ``CONSTRAINT_VIOLATED``: who asked for the
resume (the authenticated principal, when the caller knows one)."""
CALLER = "caller"
"""On ``INTENT``, ``AWAITING_APPROVAL`` and ``CONSTRAINT_VIOLATED``: the authenticated principal
the call came from (an MCP client over HTTP), where the process calling the tool knows one."""
LEASE_TTL_S = "lease_ttl_s"
"""On ``SAGA_OPENED``: the writer's lease in seconds (docs/adr/0011-writer-lease.md): it
appends without re-confirming only while its last acknowledged event is younger than this."""
HANDOFF = "handoff"
"""On a ``COMPENSATION_REQUESTED`` that took a saga from its writer: ``takeover``."""
ABANDONED_WRITER = "abandoned_writer"
"""On a takeover's ``COMPENSATION_REQUESTED``: the writer whose saga was taken."""
OMITTED = "omitted"
"""On an ``EXECUTED`` or ``FAILED`` too large for the journal: the field left out (``result``)
or cut short (``error``); the tool had run, so the outcome is journaled without it."""
OMITTED_SHA256 = "omitted_sha256"
"""SHA-256 (hex) of the UTF-8 bytes of the field left out or cut short."""
OMITTED_BYTES = "omitted_bytes"
"""The size in bytes of the field left out or cut short."""
DECISION_SIGNATURE = "decision_signature"
"""On a decision the approvals service journaled: ``SGCD3:<key_id>:<signature hex>``, its
Ed25519 signature (docs/adr/0014-signed-decisions-and-writers.md)."""
REQUEST_HASH = "request_hash"
"""On a decision: the hash of the entry decided on (the request, or the settled step), which
the signature binds (docs/adr/0025-trust-model.md); on ``APPROVAL_REFUSED``: the hash the
approver was shown."""
JOURNAL = "journal"
"""On a decision: the name of the journal it was made on (``SAGACITY_JOURNAL_NAME``, else
``kafka:<cluster id>/<topic>``); a decision counts on no other journal."""
GRANT_ID = "grant_id"
"""On ``GRANTED`` and ``GRANT_REVOKED``: the grant's id; on an ``INTENT`` (and its outcome) a
grant covered: the id of that grant (docs/operations/grants.md)."""
GRANT_SEQ = "grant_seq"
"""On an ``INTENT`` a grant covered, and on ``GRANT_REVOKED``: the seq of the ``GRANTED``."""
GRANT_RULES = "grant_rules"
"""On ``GRANTED``: the argument rules, a compact JSON list of their texts (signed)."""
GRANT_EXPIRES_AT_US = "grant_expires_at_us"
"""On ``GRANTED``: the grant's deadline in microseconds since the epoch (signed)."""
GRANT_AGENT = "grant_agent"
"""On ``GRANTED``: the writer that opened the saga, the only one the grant covers (signed)."""
GRANT_SIGNATURE = "grant_signature"
"""On ``GRANTED`` and ``GRANT_REVOKED``: ``SGCG1:<key_id>:<signature hex>``, the approvals
service's Ed25519 signature over the grant's own message (docs/operations/grants.md)."""
OPERATOR_SIGNATURE = "operator_signature"
"""On a ``COMPENSATION_REQUESTED`` journaled by ``sagacity saga compensate`` and on an
``ERASED`` journaled by ``sagacity erase``: ``SGCO1:<key_id>:<signature hex>``, the operator's
Ed25519 signature (docs/adr/0027-operator-signatures.md)."""
WRITER = "writer"
"""The id of the writer that produced the event (set by the Kafka journal on every event)."""
ERASED_FIELDS = "erased"
"""On ``ERASED``: compact JSON of the data fields erased, by seq (``{"2": ["payload"]}``):
every field of the saga's chain that has a commitment (docs/adr/0019-erasure.md §4)."""
ERASED_KEY = "erased_key"
"""On ``ERASED``: the id of the key-encryption key the destroyed data key was wrapped under,
``none`` when no data key existed (nothing was sealed), ``unknown`` when an earlier run had
destroyed it already and its id was not recorded."""
EFFECT_KEY = "effect_key"
"""On ``INTENT``, ``AWAITING_APPROVAL``, ``REPLAYED`` and an effect refusal's
``CONSTRAINT_VIOLATED`` of a tool with an effect key (docs/adr/0026-effects-and-refusals.md):
the fields that name its effect, ``*`` (the whole payload) or the compact JSON list of their
``$.`` paths.  Never a value: two calls share an effect when these fields are equal."""
EFFECT_OF = "effect_of"
"""On an effect refusal's ``CONSTRAINT_VIOLATED``: the seq of the earlier call (its ``INTENT``
or request) with the same effect key."""
REFUSED = "refused"
"""On ``FAILED``: the tool refused before acting (``retry``: a framework's signal to call again
with other arguments; ``declared``: an exception its declaration names): no effect, nothing to
undo, and the saga goes on."""
RECOVERS = "recovers"
"""On ``EXECUTED``: the seqs (comma-separated) of the earlier ``FAILED`` calls of the same tool
(and effect key) this success recovers: they no longer make the saga compensate."""
REDACTION = "redaction"
"""On an entry whose payload has redacted fields (docs/adr/0019-erasure.md §5): compact JSON of
each redacted path's salt (hex); a data attribute, committed to in chain form 2 and sealed."""
EXTEND_BY_US = "extend_by_us"
"""On ``DEADLINE_EXTENDED``: how long (microseconds) the request's deadline is extended by; the
operator-signed ``reason`` spells it out (``sagacity.gate._deadline_extension``)."""
TIER = "tier"
"""On ``APPROVAL_ESCALATED``: the route's tier the request reached (1 = the first escalation)."""
ROUTED_TO = "routed_to"
"""On ``APPROVAL_ESCALATED``: the groups (``group:NAME``) and principals the tier adds."""
