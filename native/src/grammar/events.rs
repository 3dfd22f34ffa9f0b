//! The events the grammar reads: the event types it knows (the core's `EventType`, in its
//! order) and one event as it reads it, with its attributes.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
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

pub(super) fn kind_of(name: &[u8]) -> Option<Kind> {
    TYPES
        .iter()
        .find(|(t, _)| t.as_bytes() == name)
        .map(|(_, kind)| *kind)
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
    pub(super) fn get(&self, key: &str) -> Option<&[u8]> {
        self.attributes
            .binary_search_by(|(k, _)| (*k).cmp(key.as_bytes()))
            .ok()
            .map(|i| self.attributes[i].1)
    }
}
