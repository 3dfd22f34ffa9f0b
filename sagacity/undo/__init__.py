"""Compensation and undo: the runner over a saga's chain, a result's own undo, the plan
and its preview, and which compensation request stands."""
