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
//!
//! Its rooms: this module, the state over one saga's chain and the order of its steps; `events`,
//! the event types it knows and one event as it reads it; `attributes`, the attributes it reads
//! as numbers; `gate`, requests, approvals, resumed calls and grants; `steps`, the calls'
//! outcomes, replays, compensations and suspects; `binding`, its Python binding for the
//! conformance suite.

use std::collections::{HashMap, HashSet};

mod attributes;
pub(crate) mod binding;
mod events;
mod gate;
mod steps;

use attributes::{ref_of, Refer};
pub(crate) use events::{event_types, Event};
use events::{kind_of, Kind};
use gate::{Grant, Request, State};

const LIMIT: usize = 100;

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
            Kind::Awaiting => self.awaiting(event)?,
            Kind::Approved
            | Kind::Rejected
            | Kind::Expired
            | Kind::ResumeRefused
            | Kind::ConstraintViolated => self.decision(event, kind, r),
            Kind::CompensationRequested => self.close_open_requests(State::Closed),
            Kind::CompensationIntent | Kind::Compensated | Kind::CompensationFailed => {
                self.compensation(event, kind, r)
            }
            Kind::Suspect => self.suspect(event, r),
            Kind::SuspectSettled => self.settled(event, r),
            Kind::Replayed => self.replayed(event, r),
            Kind::Granted => self.grant(event),
            Kind::GrantRevoked => self.revoke(event),
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
            self.close_open_requests(if result.is_empty() {
                State::Unknown
            } else {
                State::Closed
            });
        }
        self.ended = Some(result);
    }
}
