"""How the tool speaks up: warnings on stderr, prefixed with its name."""

from __future__ import annotations

import sys


def warn(message: str) -> None:
    """Print a diagnostic on stderr, prefixed with the tool's name."""
    print(f"bench.py: {message}", file=sys.stderr, flush=True)
