"""What ``import guardrail`` loads: none of the heavy dependencies until a feature needs one.

Each check runs in a fresh interpreter (the test process has imported everything already)
and counts modules, never time: which modules load is stable, how long they take is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import guardrail

from .conftest import AIRLINE_MANIFEST

HEAVY = ("structlog", "jsonschema", "rich", "pydantic", "pydantic_core")

#: Appended to every script: the heavy top-level packages it has loaded, as a JSON list.
REPORT = f"""
import json as _json, sys as _sys
print(_json.dumps(sorted({{m.split(".")[0] for m in _sys.modules}} & {set(HEAVY)!r})))
"""

GUARDED_CALLS = """
from typing import Annotated
from guardrail import Guard, Id, IdentifierViolation

guard = Guard(mode="raise")
guard.add_kind("order", pattern=r"W\\d{7}")

@guard.tool(produces={"orders[*].order_id": "order"}, effect="read")
def search_orders() -> dict:
    return {"orders": [{"order_id": "W8855135"}]}

@guard.tool(effect="write")
def issue_refund(order_id: Annotated[str, Id("order")]) -> str:
    return "refunded"

with guard.session("s"):
    search_orders()
    issue_refund("W8855135")
    try:
        issue_refund("W8855136")
    except IdentifierViolation:
        pass
"""


def fresh_environment() -> dict[str, str]:
    """This process's environment without coverage's: a measured child imports sqlite3 itself.

    `make coverage` measures subprocesses through a startup hook keyed by COVERAGE_ variables;
    what a fresh interpreter loads is asked of a user's interpreter, unmeasured.
    """
    return {name: value for name, value in os.environ.items() if not name.startswith("COVERAGE")}


def loaded(script: str) -> list[str]:
    """The heavy packages a fresh interpreter has loaded after running ``script``."""
    capture = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script) + REPORT],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=fresh_environment(),
    )
    assert capture.returncode == 0, capture.stderr
    names: list[str] = json.loads(capture.stdout.splitlines()[-1])
    return names


def test_import_guardrail_loads_no_heavy_dependency() -> None:
    """`import guardrail` loads neither structlog, jsonschema, rich nor pydantic."""
    assert loaded("import guardrail") == []


def test_import_guardrail_loads_neither_asyncio_nor_sqlite() -> None:
    """asyncio and sqlite3 load with the first async session or SQLite store, not at import."""
    script = "import sys, guardrail; print(sorted({'asyncio', 'sqlite3'} & set(sys.modules)))"
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=fresh_environment(),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_guarded_calls_load_no_heavy_dependency() -> None:
    """A guard, a decorated tool, allowed and refused calls: still none of them."""
    assert loaded(GUARDED_CALLS) == []


def test_structlog_is_used_only_when_the_application_configured_it() -> None:
    """A program that configured structlog gets the events through it, and only that loads."""
    script = (
        "import structlog\n"
        "from structlog.testing import capture_logs\n"
        "with capture_logs() as logs:\n" + textwrap.indent(GUARDED_CALLS, "    ") + "\n"
        "assert [e['outcome'] for e in logs if e['event'] == 'guardrail.call_checked'] == "
        "['allowed', 'allowed', 'refused'], logs\n"
    )
    assert loaded(script) == ["rich", "structlog"]  # structlog.dev imports rich


def test_each_dependency_loads_with_the_feature_that_needs_it() -> None:
    """A manifest loads jsonschema, a saved ledger pydantic, a report's text rich."""
    manifest = f"from guardrail import Guard\nGuard.from_manifest({str(AIRLINE_MANIFEST)!r})\n"
    assert loaded(manifest) == ["jsonschema"]
    saved = "from guardrail import Ledger\nLedger.from_json(Ledger().to_json())\n"
    assert loaded(saved) == ["pydantic", "pydantic_core"]
    report = (
        "from guardrail.replay import ReplayReport\n"
        "from guardrail.replay._stats import Stats\n"
        "report = ReplayReport(files=[Stats('a')], total=Stats('total'))\n"
        "report.to_dict()\n"
    )
    assert loaded(report) == []
    assert loaded(report + "assert 'guardrail replay' in report.to_text()\n") == ["rich"]


def test_lazy_names_are_the_objects_of_their_modules() -> None:
    """compact, CompactionReport, CompactionResult and SQLiteStore import from guardrail."""
    from guardrail import CompactionReport, CompactionResult, SQLiteStore, compact
    from guardrail.compaction import CompactionReport as Report
    from guardrail.compaction import CompactionResult as Result
    from guardrail.compaction import compact as compact_function
    from guardrail.stores import SQLiteStore as Store

    assert (compact, CompactionReport, CompactionResult) == (compact_function, Report, Result)
    assert SQLiteStore is Store
    assert set(guardrail.__all__) <= set(dir(guardrail))


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    """guardrail.nothing raises AttributeError naming it (hasattr and mocks rely on it)."""
    assert not hasattr(guardrail, "nothing")
    assert not hasattr(guardrail.stores, "nothing")
