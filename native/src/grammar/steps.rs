//! The calls in a saga's story and their undoing: an outcome bound to its intent, a replay of
//! an effect, a compensation of a step, a suspect call and its settlement
//! (`_grammar.SagaGrammar`'s steps).

use super::events::{Event, Kind};
use super::{rule, Grammar};

impl Grammar {
    pub(super) fn outcome(&mut self, event: &Event, kind: Kind, r: Option<i64>) {
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

    pub(super) fn replayed(&mut self, event: &Event, r: Option<i64>) {
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
    pub(super) fn compensation(&mut self, event: &Event, kind: Kind, r: Option<i64>) {
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

    pub(super) fn suspect(&mut self, event: &Event, r: Option<i64>) {
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

    pub(super) fn settled(&mut self, event: &Event, r: Option<i64>) {
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
