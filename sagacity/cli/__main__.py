"""``python -m sagacity.cli``: the ``sagacity`` command, for running it from a given interpreter."""

from sagacity.cli import main

main(prog_name="sagacity")
