"""The gate: approval requests read from the chain, decisions on them and what they
prove, the resume of an approved call, deadline extensions and settlements of suspect
steps."""
