"""The journal's entries: the event vocabulary and entry value object, attribute names,
the domains of writer-chosen values, bounded appends, and the in-memory journal."""
