//! The crate's unit tests: its writer of the canonical form (the codec) and its chain walker,
//! run over the shared vectors of `tests/vectors/` that every writer and walker of the product
//! is held to (docs/adr/0002-hash-chain.md; the Python side: `tests/conformance/`).

mod codec;
mod grammar;
mod json;
mod walker;
