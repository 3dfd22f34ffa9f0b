"""The saga and its run: the ``Sagacity`` facade, the active saga, a saga held open
across calls, how a saga ends and what its outcome is."""
