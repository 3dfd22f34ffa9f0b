"""Tools and their calls: declaring and registering tools, wrapping them, the hot path of
a call, the entries and text forms it journals."""
