"""A smoke test of an installed wheel, run by `make package-check` in a clean environment.

Not collected by pytest: it runs with the wheel's own interpreter, outside the
source tree, and exercises what a user gets from ``pip install``: the package
imports from site-packages, a session store keeps a ledger, compaction runs,
the shipped corpus and its manifest load and replay, ``py.typed`` is there,
and the ``otel`` extra it was installed with works.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import sys
import tempfile
from pathlib import Path

#: The checks :func:`main` makes (each a group of asserts): where the package imports from,
#: its metadata and py.typed, a store, the otel extra, compaction, the shipped corpus.
CHECKS = 6


def main() -> int:
    """Run the checks; a failed one raises, which fails `make package-check`."""
    import guardrail
    from guardrail import Guard, SQLiteStore, compact
    from guardrail.integrations.otel import instrument
    from guardrail.replay import load_trace_file, replay, sample_corpus

    source = Path(__file__).resolve().parents[1] / "guardrail"
    installed = Path(guardrail.__file__).resolve()
    assert installed.parent != source, f"imported the source tree, not the wheel: {installed}"
    assert installed.parent.parent.name == "site-packages", installed
    assert importlib.metadata.version("guardrail-ids") == guardrail.__version__
    assert importlib.resources.files("guardrail").joinpath("py.typed").is_file(), "no py.typed"

    # A store keeps a session's ledger across guards, as across processes.
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "sessions.sqlite3")
        guard = Guard(store=SQLiteStore(path))
        guard.add_kind("customer", like="prefixed:cus_")
        guard.declare("get_customer", ids={"id": "customer"}, produces={"id": "customer"},
                      effect="read")  # fmt: skip
        with guard.session("s"):
            guard.record("get_customer", {"id": "cus_41ZpA9"}, {"id": "cus_41ZpA9"})
        again = Guard(store=SQLiteStore(path))
        again.add_kind("customer", like="prefixed:cus_")
        with again.session("s") as ledger:
            assert ledger["customer"].value == "cus_41ZpA9"
            instrument(again)  # the otel extra's API is installed
            messages = [
                {"role": "user", "content": "I am cus_41ZpA9"},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "Thanks"},
            ]
            block = compact(messages, ledger, keep_recent=1).messages[0]["content"]
            assert "cus_41ZpA9" in block, block

    # The shipped corpus and its manifest: loaded and replayed.
    sample = sample_corpus()
    assert installed.parent in sample.traces.parents, f"corpus outside the package: {sample}"
    traces = load_trace_file(sample.traces)
    assert len(traces.traces) == 200, len(traces.traces)
    report = replay([traces], Guard.from_manifest(sample.manifest), limit=5, variants=0)
    assert report.total.calls > 0, report.total
    print(f"guardrail-ids {guardrail.__version__} installed at {installed.parent}")
    # The closing line CI reads as a test count: every check above is an assert.
    print(f"smoke: {CHECKS} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
