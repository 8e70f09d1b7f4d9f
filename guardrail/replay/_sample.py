"""The sample corpus that ships with guardrail: 200 recorded tau-bench airline conversations.

The wheel carries the traces (``traces.jsonl.gz``, MIT licence, with the
corpus's README and LICENSE) and the manifest that declares their tools, so
``guardrail replay`` has something real to run on right after an install. A
source checkout reads the same files from ``corpus/`` and ``examples/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from guardrail.errors import GuardrailUsageError

#: Where the wheel puts the corpus, inside this package.
_SHIPPED = Path(__file__).resolve().parent / "_corpus" / "tau-airline"
#: A source checkout: the repository's root, two levels above the package.
_CHECKOUT = Path(__file__).resolve().parents[2]


class SampleCorpus(NamedTuple):
    """The shipped traces (JSONL, gzipped, the corpus shape) and the manifest of their tools."""

    traces: Path
    manifest: Path


def sample_corpus() -> SampleCorpus:
    """The 200 tau-bench airline conversations and their manifest, as installed.

    ``guard = Guard.from_manifest(sample.manifest)``, then ``replay`` or
    ``load_trace_file(sample.traces)``. Raises ``GuardrailUsageError`` when
    the files are missing from the installation (reinstall it).
    """
    shipped = SampleCorpus(_SHIPPED / "traces.jsonl.gz", _SHIPPED / "manifest.toml")
    checkout = SampleCorpus(
        _CHECKOUT / "corpus" / "tau-airline" / "traces.jsonl.gz",
        _CHECKOUT / "examples" / "tau_airline.toml",
    )
    for sample in (shipped, checkout):
        if sample.traces.is_file() and sample.manifest.is_file():
            return sample
    raise GuardrailUsageError(
        f"the sample corpus is missing from this installation (looked in {_SHIPPED}): "
        "reinstall guardrail-ids"
    )
