#!/usr/bin/env python3
"""Run spindle's benchmark programs and turn their records into a report.

Usage (from the repository root)::

    /usr/bin/python3 tools/bench.py --build-dir build/release \\
        --out bench/results/latest [--suite switch[,ces,...]] [--full] \\
        [--suite-budget SECONDS | --no-budget] \\
        [--compare OLD/results.json] [--report-only]

The entry point only: the tool is the package beside it, tools/spindle_bench/,
whose __init__.py is its manual (steps, records, budgets, report rules).
"""

import sys
from pathlib import Path

# The package lives beside this file. Put its folder first on the path
# whatever the caller's working directory (the repository's bench/ folder
# must not be what an import finds).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from spindle_bench.cli import main  # noqa: E402  (after the path is set)

if __name__ == "__main__":
    sys.exit(main())
