"""Injected ids on the recorded AgentDojo runs: ``python benchmarks/agentdojo.py``.

Prints the share of successful attacks whose goal call the guard refuses or
asks the user about, and the cost on successful benign runs (see
``guardrail_bench/injections.py``). Run from the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from guardrail_bench.injections import main

if __name__ == "__main__":
    sys.exit(main())
