"""``python -m guardrail``: the same as the ``guardrail`` command."""

import sys

from guardrail.cli import main

sys.exit(main())
