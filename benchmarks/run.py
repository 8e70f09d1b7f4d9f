"""guardrail's benchmarks, one command: ``python benchmarks/run.py [--quick] [--only GROUP,...]``.

The groups live in the ``guardrail_bench`` package beside this file; ``--help`` lists
them. Run from the repository root in the development environment (``make bench``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from guardrail_bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
