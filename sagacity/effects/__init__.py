"""Effects: the effect keys of a call, the effects a saga already has, and refusals (a
call with no effect)."""
