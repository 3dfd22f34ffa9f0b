"""Configuration: typed ``SAGACITY_*`` settings, the names every part agrees on, and the
one duration syntax."""
