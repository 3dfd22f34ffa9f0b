"""``python -m sagacity.consumers.compensation``: the same as ``sagacity serve compensation``."""

from sagacity.cli.serve_compensation import compensation

if __name__ == "__main__":
    compensation(prog_name="python -m sagacity.consumers.compensation")
