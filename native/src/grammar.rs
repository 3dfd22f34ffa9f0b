//! The saga grammar's per-row step beside the compiled chain walk: the state machine of
//! `sagacity/chain/_grammar.py` (docs/adr/0005-saga-core-events.md), advanced on the rows the
//! verifier streams, so that `verify` reads the archive once.
//!
//! The rule lives in `_grammar.py`; this is its twin for the compiled path only, held to it by
//! the vectors (`tests/vectors/grammar-v1.json`: every case, in this crate's tests and in
//! `tests/conformance/test_grammar_compiled.py`) and by a comparison on random stories there.
//! It decides one thing: that a saga's story is clean.  Whatever it finds, and whatever it does
//! not model (an `ERASED`, whose operator signature and data account are Python's; an event
//! type it does not know; an integer attribute holding text Python might read differently),
//! makes the saga's story the Python grammar's to tell: the finding's name, seq, detail and
//! writer always come from `_grammar.py`.

use std::collections::{HashMap, HashSet};

const INT64_MAX: i128 = i64::MAX as i128;
const SIGNATURES_MAX: i128 = i32::MAX as i128;
const STRICTEST_SIGNATURES: i128 = 2;
const LIMIT: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Opened,
    Intent,
    Executed,
    Failed,
    Awaiting,
    Approved,
    Rejected,
    Expired,
    ResumeRefused,
    ConstraintViolated,
    CompensationRequested,
    CompensationIntent,
    Compensated,
    CompensationFailed,
    Suspect,
    SuspectSettled,
    Ended,
    Erased,
    ApprovalRefused,
    Replayed,
    ApprovalEscalated,
    DeadlineExtended,
    Granted,
    GrantRevoked,
}

/// The event types `sagacity.entries._events.EventType` names, in its order, and what each is
/// here (a test holds the names to the core's).
const TYPES: [(&str, Kind); 24] = [
    ("SAGA_OPENED", Kind::Opened),
    ("INTENT", Kind::Intent),
    ("EXECUTED", Kind::Executed),
    ("FAILED", Kind::Failed),
    ("AWAITING_APPROVAL", Kind::Awaiting),
    ("APPROVED", Kind::Approved),
    ("REJECTED", Kind::Rejected),
    ("EXPIRED", Kind::Expired),
    ("RESUME_REFUSED", Kind::ResumeRefused),
    ("CONSTRAINT_VIOLATED", Kind::ConstraintViolated),
    ("COMPENSATION_REQUESTED", Kind::CompensationRequested),
    ("COMPENSATION_INTENT", Kind::CompensationIntent),
    ("COMPENSATED", Kind::Compensated),
    ("COMPENSATION_FAILED", Kind::CompensationFailed),
    ("SUSPECT", Kind::Suspect),
    ("SUSPECT_SETTLED", Kind::SuspectSettled),
    ("SAGA_ENDED", Kind::Ended),
    ("ERASED", Kind::Erased),
    ("APPROVAL_REFUSED", Kind::ApprovalRefused),
    ("REPLAYED", Kind::Replayed),
    ("APPROVAL_ESCALATED", Kind::ApprovalEscalated),
    ("DEADLINE_EXTENDED", Kind::DeadlineExtended),
    ("GRANTED", Kind::Granted),
    ("GRANT_REVOKED", Kind::GrantRevoked),
];

/// The names of [`TYPES`], in order.
pub(crate) fn event_types() -> Vec<&'static str> {
    TYPES.iter().map(|(name, _)| *name).collect()
}

fn kind_of(name: &[u8]) -> Option<Kind> {
    TYPES
        .iter()
        .find(|(t, _)| t.as_bytes() == name)
        .map(|(_, kind)| *kind)
}

/// The grammar's rules, by the value `GrammarRule` gives each.
pub(crate) mod rule {
    pub const REF_FORWARD: &str = "grammar:ref_forward";
    pub const EXECUTED_WITHOUT_INTENT: &str = "grammar:executed_without_intent";
    pub const GATED_WITHOUT_REQUEST: &str = "grammar:gated_without_request";
    pub const RESUME_WITHOUT_REQUEST: &str = "grammar:resume_without_request";
    pub const RESUMED_WITHOUT_APPROVAL: &str = "grammar:resumed_without_approval";
    pub const DECISION_WITHOUT_REQUEST: &str = "grammar:decision_without_request";
    pub const COMPENSATION_WITHOUT_REQUEST: &str = "grammar:compensation_without_request";
    pub const COMPENSATION_OF_NO_STEP: &str = "grammar:compensation_of_no_step";
    pub const SETTLEMENT_WITHOUT_SUSPECT: &str = "grammar:settlement_without_suspect";
    pub const AFTER_END: &str = "grammar:after_end";
    pub const REPLAY_OF_NO_EFFECT: &str = "grammar:replay_of_no_effect";
}

/// One event as the grammar reads it (`_grammar.Event`); `attributes` sorted by key.
pub(crate) struct Event<'a> {
    pub(crate) seq: i64,
    pub(crate) kind: &'a [u8],
    pub(crate) tool: Option<&'a [u8]>,
    pub(crate) actor: Option<&'a [u8]>,
    pub(crate) attributes: &'a [(&'a [u8], &'a [u8])],
    pub(crate) payload: Option<&'a [u8]>,
    pub(crate) result: Option<&'a [u8]>,
}

impl Event<'_> {
    fn get(&self, key: &str) -> Option<&[u8]> {
        self.attributes
            .binary_search_by(|(k, _)| (*k).cmp(key.as_bytes()))
            .ok()
            .map(|i| self.attributes[i].1)
    }
}

/// Not modelled here: the saga's story goes to the Python grammar.
struct Refer;

/// `sagacity.entries._bounds.parse_int`: the integer an attribute holds, saturated to
/// `[low, high]`; `Ok(None)` when absent or not a decimal integer; `Err(Refer)` for text
/// outside ASCII (whose whitespace Python's `str.strip` may read otherwise).
fn parse_int(raw: Option<&[u8]>, low: i128, high: i128) -> Result<Option<i128>, Refer> {
    let Some(raw) = raw else { return Ok(None) };
    if !raw.is_ascii() {
        return Err(Refer);
    }
    // str.strip()'s whitespace, within ASCII.
    let space = |b: &u8| matches!(b, b'\t'..=b'\r' | 0x1c..=0x1f | b' ');
    let start = raw.iter().position(|b| !space(b)).unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| !space(b)).map_or(start, |i| i + 1);
    let text = &raw[start..end];
    let negative = text.first() == Some(&b'-');
    let digits = if matches!(text.first(), Some(b'+' | b'-')) {
        &text[1..]
    } else {
        text
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Ok(None);
    }
    if digits.len() > 20 {
        return Ok(Some(if negative { low } else { high }));
    }
    let magnitude = digits
        .iter()
        .fold(0i128, |acc, d| acc * 10 + i128::from(d - b'0'));
    let value = if negative { -magnitude } else { magnitude };
    Ok(Some(value.clamp(low, high)))
}

/// `sagacity.gate._requests.ref_of`.
fn ref_of(event: &Event) -> Result<Option<i64>, Refer> {
    let found = parse_int(event.get("ref_seq"), 0, INT64_MAX)?;
    Ok(found.filter(|r| *r >= 1).map(|r| r as i64))
}

/// `_grammar.required_signatures`.
fn required_signatures(event: &Event) -> Result<i128, Refer> {
    let declared = match event.get("reversibility") {
        Some(b"IRREVERSIBLE") => 1,
        Some(b"PRIVILEGED") => 2,
        _ => 0,
    };
    let claimed = parse_int(event.get("signatures_required"), 0, SIGNATURES_MAX)?;
    let journaled = match claimed {
        Some(c) if c >= 1 => c,
        _ => STRICTEST_SIGNATURES,
    };
    Ok(declared.max(journaled))
}

/// A `GRANTED`'s tool and grant id.
type Grant = (Option<Vec<u8>>, Option<Vec<u8>>);

#[derive(PartialEq, Eq, Clone, Copy)]
enum State {
    Open,
    Closed,
    Unknown,
}

struct Request {
    tool: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
    required: i128,
    approvers: HashSet<Vec<u8>>,
    state: State,
}

fn quiet_end(result: &[u8]) -> bool {
    matches!(
        result,
        b"COMPLETED" | b"COMPENSATED" | b"REJECTED" | b"EXPIRED"
    )
}

fn calls_and_decisions(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Intent
            | Kind::Executed
            | Kind::Failed
            | Kind::Awaiting
            | Kind::Approved
            | Kind::Rejected
            | Kind::Expired
            | Kind::ResumeRefused
            | Kind::ConstraintViolated
            | Kind::Replayed
            | Kind::Granted
            | Kind::GrantRevoked
    )
}

fn cause(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Failed
            | Kind::Rejected
            | Kind::Expired
            | Kind::ResumeRefused
            | Kind::CompensationRequested
            | Kind::Suspect
            | Kind::SuspectSettled
    )
}

/// The grammar's state over one saga's chain (`_grammar.SagaGrammar`); `feed` each event in seq
/// order.  `findings` holds (rule, seq) of what it found; `referred` that the saga is the
/// Python grammar's.
#[derive(Default)]
pub(crate) struct Grammar {
    started: bool,
    after_seq: i64,
    pub(crate) referred: bool,
    pub(crate) findings: Vec<(&'static str, i64)>,
    known: bool,
    ended: Option<Vec<u8>>,
    mode: Option<Vec<u8>>,
    cause: bool,
    intents: HashMap<i64, Option<Vec<u8>>>,
    outcomes: HashMap<i64, i64>,
    requests: HashMap<i64, Request>,
    steps: HashSet<i64>,
    undoing: HashSet<i64>,
    suspects: HashSet<(i64, Vec<u8>)>,
    grants: HashMap<i64, Grant>,
    revoked: HashSet<Vec<u8>>,
}

impl Grammar {
    /// A grammar over a chain that starts after `after_seq` (`SagaGrammar(after_seq=...)`).
    pub(crate) fn after(after_seq: i64) -> Self {
        Grammar {
            started: true,
            after_seq,
            known: after_seq == 0,
            cause: after_seq != 0,
            ..Grammar::default()
        }
    }

    /// The saga's chain has ended: keep only what [`Grammar::clean`] reads (a saga waiting
    /// for its checkpoints and head holds no state of its story).
    pub(crate) fn settle(&mut self) {
        let findings = std::mem::take(&mut self.findings);
        *self = Grammar {
            started: true,
            referred: self.referred,
            findings,
            ..Grammar::default()
        };
    }

    /// Whether the story is clean: nothing found, nothing left to the Python grammar.
    pub(crate) fn clean(&self) -> bool {
        !self.referred && self.findings.is_empty()
    }

    /// Read the next event of a saga's chain; the first event read starts the chain after its
    /// seq minus one (as `read_stories` starts it).
    pub(crate) fn feed(&mut self, event: &Event) {
        if !self.started {
            *self = Grammar::after((event.seq - 1).max(0));
        }
        if self.referred {
            return;
        }
        if self.step(event).is_err() {
            self.referred = true;
        }
    }

    fn find(&mut self, rule: &'static str, seq: i64) {
        if self.findings.len() < LIMIT {
            self.findings.push((rule, seq));
        }
    }

    fn unknown_ref(&self, r: Option<i64>) -> bool {
        r.is_some_and(|r| r <= self.after_seq)
    }

    fn step(&mut self, event: &Event) -> Result<(), Refer> {
        // An event type this twin does not know, and an erasure (its operator signature and
        // the data account are Python's), are the Python grammar's.
        let kind = kind_of(event.kind).ok_or(Refer)?;
        if kind == Kind::Erased {
            return Err(Refer);
        }
        let mut r = ref_of(event)?;
        if r.is_some_and(|r| r >= event.seq) {
            self.find(rule::REF_FORWARD, event.seq);
            r = None;
        } else if self.ended.is_none() || !self.after_end(event, kind)? {
            self.handle(event, kind, r)?;
        }
        if !self.cause && kind != Kind::Ended {
            self.cause = (cause(kind) && event.get("refused").is_none())
                || (kind == Kind::ConstraintViolated && r.is_some());
        }
        Ok(())
    }

    fn after_end(&mut self, event: &Event, kind: Kind) -> Result<bool, Refer> {
        if !self.known {
            return Ok(false);
        }
        let Some(ended) = self.ended.as_deref() else {
            return Ok(false);
        };
        let after_any_end = kind == Kind::Ended;
        let ruled_out = (quiet_end(ended) && !after_any_end)
            || (ended == b"COMPENSATION_FAILED" && calls_and_decisions(kind))
            || matches!(kind, Kind::Awaiting | Kind::Replayed)
            || (kind == Kind::Intent && ref_of(event)?.is_none());
        if ruled_out {
            self.find(rule::AFTER_END, event.seq);
        }
        Ok(ruled_out)
    }

    fn handle(&mut self, event: &Event, kind: Kind, r: Option<i64>) -> Result<(), Refer> {
        match kind {
            Kind::Opened => {
                self.known = true;
                self.ended = None;
                self.mode = event.get("compensation").map(<[u8]>::to_vec);
            }
            Kind::Ended => self.end(event),
            Kind::Intent => self.intent(event, r)?,
            Kind::Executed | Kind::Failed => self.outcome(event, kind, r),
            Kind::Awaiting => {
                let request = Request {
                    tool: event.tool.map(<[u8]>::to_vec),
                    payload: event.payload.map(<[u8]>::to_vec),
                    required: required_signatures(event)?,
                    approvers: HashSet::new(),
                    state: State::Open,
                };
                self.requests.insert(event.seq, request);
            }
            Kind::Approved
            | Kind::Rejected
            | Kind::Expired
            | Kind::ResumeRefused
            | Kind::ConstraintViolated => self.decision(event, kind, r),
            Kind::CompensationRequested => {
                for request in self.requests.values_mut() {
                    if request.state == State::Open {
                        request.state = State::Closed;
                    }
                }
            }
            Kind::CompensationIntent | Kind::Compensated | Kind::CompensationFailed => {
                self.compensation(event, kind, r)
            }
            Kind::Suspect => self.suspect(event, r),
            Kind::SuspectSettled => self.settled(event, r),
            Kind::Replayed => self.replayed(event, r),
            Kind::Granted => {
                let grant = (
                    event.tool.map(<[u8]>::to_vec),
                    event.get("grant_id").map(<[u8]>::to_vec),
                );
                self.grants.insert(event.seq, grant);
            }
            Kind::GrantRevoked => {
                if let Some(id) = event.get("grant_id").filter(|id| !id.is_empty()) {
                    self.revoked.insert(id.to_vec());
                }
            }
            Kind::Erased
            | Kind::ApprovalRefused
            | Kind::ApprovalEscalated
            | Kind::DeadlineExtended => {}
        }
        Ok(())
    }

    fn end(&mut self, event: &Event) {
        let result = event.result.unwrap_or(b"").to_vec();
        self.known = true;
        self.cause = result.is_empty()
            || result.as_slice() == b"COMPENSATION_PENDING"
            || result.as_slice() == b"COMPENSATION_FAILED";
        if result.as_slice() != b"AWAITING_APPROVAL" {
            for request in self.requests.values_mut() {
                if request.state == State::Open {
                    request.state = if result.is_empty() {
                        State::Unknown
                    } else {
                        State::Closed
                    };
                }
            }
        }
        self.ended = Some(result);
    }

    fn intent(&mut self, event: &Event, r: Option<i64>) -> Result<(), Refer> {
        self.intents
            .insert(event.seq, event.tool.map(<[u8]>::to_vec));
        let Some(r) = r else {
            let declared = event.get("reversibility");
            if matches!(declared, Some(b"IRREVERSIBLE" | b"PRIVILEGED"))
                && !self.granted(event, declared == Some(b"PRIVILEGED"))?
            {
                self.find(rule::GATED_WITHOUT_REQUEST, event.seq);
            }
            return Ok(());
        };
        if self.unknown_ref(Some(r)) {
            return Ok(());
        }
        let seq = event.seq;
        let Some(request) = self.requests.get(&r) else {
            self.find(rule::RESUME_WITHOUT_REQUEST, seq);
            return Ok(());
        };
        if request.state == State::Closed {
            self.find(rule::RESUME_WITHOUT_REQUEST, seq);
            return Ok(());
        }
        if request.state == State::Open {
            let approved = request.approvers.len() as i128 >= request.required;
            let same_tool = event.tool == request.tool.as_deref();
            let same_payload = match (event.payload, request.payload.as_deref()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            if !(approved && same_tool && same_payload) {
                self.find(rule::RESUMED_WITHOUT_APPROVAL, seq);
            }
        }
        if let Some(request) = self.requests.get_mut(&r) {
            request.state = State::Closed;
        }
        Ok(())
    }

    /// `_grammar.SagaGrammar._ungranted` is `None`: a grant covers the gated call (or it refers
    /// before the chain held).
    fn granted(&self, event: &Event, privileged: bool) -> Result<bool, Refer> {
        let Some(raw) = event.get("grant_seq") else {
            return Ok(false);
        };
        let grant_seq = parse_int(Some(raw), 1, INT64_MAX)?.map(|s| s as i64);
        if self.unknown_ref(grant_seq) {
            return Ok(true);
        }
        let Some(grant_seq) = grant_seq else {
            return Ok(false);
        };
        let Some((tool, id)) = self.grants.get(&grant_seq) else {
            return Ok(false);
        };
        if grant_seq >= event.seq {
            return Ok(false);
        }
        let grant_id = event.get("grant_id");
        if tool.as_deref() != event.tool || id.as_deref() != grant_id {
            return Ok(false);
        }
        if grant_id.is_some_and(|g| self.revoked.contains(g)) {
            return Ok(false);
        }
        Ok(!privileged)
    }

    fn outcome(&mut self, event: &Event, kind: Kind, r: Option<i64>) {
        if self.unknown_ref(r) {
            if kind == Kind::Executed {
                self.steps.insert(event.seq);
            }
            return;
        }
        let ok = r.is_some_and(|r| {
            !self.outcomes.contains_key(&r)
                && self
                    .intents
                    .get(&r)
                    .is_some_and(|tool| tool.as_deref() == event.tool)
        });
        match r {
            Some(r) if ok => {
                self.outcomes.insert(r, event.seq);
                if kind == Kind::Executed {
                    self.steps.insert(event.seq);
                }
            }
            _ => self.find(rule::EXECUTED_WITHOUT_INTENT, event.seq),
        }
    }

    fn replayed(&mut self, event: &Event, r: Option<i64>) {
        if self.unknown_ref(r) {
            return;
        }
        if let Some(r) = r {
            if self
                .requests
                .get(&r)
                .is_some_and(|q| q.tool.as_deref() == event.tool)
            {
                return;
            }
            let executed = self
                .outcomes
                .get(&r)
                .is_some_and(|o| self.steps.contains(o));
            if executed
                && self
                    .intents
                    .get(&r)
                    .is_some_and(|tool| tool.as_deref() == event.tool)
            {
                return;
            }
        }
        self.find(rule::REPLAY_OF_NO_EFFECT, event.seq);
    }

    fn decision(&mut self, event: &Event, kind: Kind, r: Option<i64>) {
        if kind == Kind::ConstraintViolated && r.is_none() {
            return; // a first call refused by policy: no request involved
        }
        if self.unknown_ref(r) {
            return;
        }
        let Some(request) = r.and_then(|r| self.requests.get_mut(&r)) else {
            self.find(rule::DECISION_WITHOUT_REQUEST, event.seq);
            return;
        };
        if request.state != State::Open {
            return;
        }
        if kind == Kind::Approved {
            if let Some(actor) = event.actor.filter(|a| !a.is_empty()) {
                request.approvers.insert(actor.to_vec());
            }
        } else {
            // REJECTED, EXPIRED, RESUME_REFUSED, CONSTRAINT_VIOLATED: CLOSING_EVENTS.
            request.state = State::Closed;
        }
    }

    fn compensation(&mut self, event: &Event, kind: Kind, r: Option<i64>) {
        let inline_run = self.ended.is_none() && self.mode.as_deref() != Some(b"delegated");
        if !(self.cause || inline_run) {
            self.find(rule::COMPENSATION_WITHOUT_REQUEST, event.seq);
        }
        if self.unknown_ref(r) {
            return;
        }
        match r {
            Some(r) if self.steps.contains(&r) => {
                if kind == Kind::CompensationIntent {
                    self.undoing.insert(r);
                } else if kind == Kind::Compensated && !self.undoing.contains(&r) {
                    self.find(rule::COMPENSATION_OF_NO_STEP, event.seq);
                }
            }
            _ => self.find(rule::COMPENSATION_OF_NO_STEP, event.seq),
        }
    }

    fn suspect(&mut self, event: &Event, r: Option<i64>) {
        let phase = event.get("phase").unwrap_or(b"call");
        if let Some(r) = r {
            self.suspects.insert((r, phase.to_vec()));
        }
        if self.unknown_ref(r) {
            return;
        }
        let known = r.is_some_and(|r| {
            if phase == b"call" {
                self.intents.contains_key(&r)
            } else {
                self.steps.contains(&r)
            }
        });
        if !known {
            self.find(rule::COMPENSATION_OF_NO_STEP, event.seq);
        }
    }

    fn settled(&mut self, event: &Event, r: Option<i64>) {
        let phase = event.get("phase").unwrap_or(b"call");
        if self.unknown_ref(r) {
            return;
        }
        let Some(r) = r.filter(|r| self.suspects.contains(&(*r, phase.to_vec()))) else {
            self.find(rule::SETTLEMENT_WITHOUT_SUSPECT, event.seq);
            return;
        };
        if phase == b"call" && event.get("outcome") == Some(b"executed") {
            self.steps.insert(r);
        }
    }
}
