//! The approval gate in a saga's story: a gated call's request, its approvals and decisions,
//! the call resumed on it, and the standing grants that cover a call without one
//! (`_grammar.SagaGrammar`'s requests and grants).

use std::collections::HashSet;

use super::attributes::{parse_int, required_signatures, Refer, INT64_MAX};
use super::events::{Event, Kind};
use super::{rule, Grammar};

/// A `GRANTED`'s tool and grant id.
pub(super) type Grant = (Option<Vec<u8>>, Option<Vec<u8>>);

#[derive(PartialEq, Eq, Clone, Copy)]
pub(super) enum State {
    Open,
    Closed,
    Unknown,
}

/// An `AWAITING_APPROVAL` and what its decisions have done to it.
pub(super) struct Request {
    pub(super) tool: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
    required: i128,
    approvers: HashSet<Vec<u8>>,
    state: State,
}

impl Grammar {
    /// An `AWAITING_APPROVAL`: a request, open.
    pub(super) fn awaiting(&mut self, event: &Event) -> Result<(), Refer> {
        let request = Request {
            tool: event.tool.map(<[u8]>::to_vec),
            payload: event.payload.map(<[u8]>::to_vec),
            required: required_signatures(event)?,
            approvers: HashSet::new(),
            state: State::Open,
        };
        self.requests.insert(event.seq, request);
        Ok(())
    }

    /// Every request still open is now `to`.
    pub(super) fn close_open_requests(&mut self, to: State) {
        for request in self.requests.values_mut() {
            if request.state == State::Open {
                request.state = to;
            }
        }
    }

    /// A `GRANTED`: its tool and grant id, by its seq.
    pub(super) fn grant(&mut self, event: &Event) {
        let grant = (
            event.tool.map(<[u8]>::to_vec),
            event.get("grant_id").map(<[u8]>::to_vec),
        );
        self.grants.insert(event.seq, grant);
    }

    /// A `GRANT_REVOKED`: the grant id no longer covers a call.
    pub(super) fn revoke(&mut self, event: &Event) {
        if let Some(id) = event.get("grant_id").filter(|id| !id.is_empty()) {
            self.revoked.insert(id.to_vec());
        }
    }

    pub(super) fn intent(&mut self, event: &Event, r: Option<i64>) -> Result<(), Refer> {
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

    pub(super) fn decision(&mut self, event: &Event, kind: Kind, r: Option<i64>) {
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
}
