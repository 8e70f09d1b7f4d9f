"""The pytest plugin: a user's suite asserts on its own traces with the guardrail_replay fixture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from guardrail.errors import GuardrailUsageError
from guardrail.testing._plugin import expand

from .conftest import call, result, user

pytest_plugins = ["pytester"]

MANIFEST = """
[kinds.order]
pattern = "ord_[A-Za-z0-9]{8}"

[tools.list_orders]
effect = "read"
produces = { "orders[*].order_id" = "order" }

[tools.describe]
effect = "read"
ids = { order_id = "order" }

[tools.refund]
effect = "write"
ids = { order_id = "order" }
"""


def _conversation(refund: str, note: str = "") -> dict[str, Any]:
    return {
        "messages": [
            user("refund my order"),
            call("c1", "list_orders", {}),
            result("c1", {"orders": [{"order_id": "ord_8F3kQ2xM"}]}),
            call("c2", "describe", {"order_id": "ord_8F3kQ2xM"}),
            result("c2", {"note": note}),
            call("c3", "refund", {"order_id": refund}),
            result("c3", "ok"),
        ]
    }


def _project(pytester: pytest.Pytester, *conversations: dict[str, Any], test: str = "") -> None:
    pytester.makefile(".toml", tools=MANIFEST)
    traces = pytester.mkdir("traces")
    (traces / "a.jsonl").write_text(
        "\n".join(json.dumps(c) for c in conversations) + "\n", encoding="utf-8"
    )
    pytester.makepyfile(
        test_ours=test
        or """
        from guardrail import Guard

        def test_our_traces(guardrail_replay):
            report = guardrail_replay("traces/*.jsonl", Guard.from_manifest("tools.toml"))
            report.assert_no_false_refusals()
            report.assert_detection(0.99)
        """
    )


def test_fixture_passes_on_clean_traces(pytester: pytest.Pytester) -> None:
    """A user's test with the fixture passes when the guard refuses no real call."""
    _project(pytester, _conversation("ord_8F3kQ2xM"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_fixture_fails_with_the_report_on_a_false_refusal(pytester: pytest.Pytester) -> None:
    """A genuine false refusal fails the user's test and shows the finding and the tables."""
    # The note names an order the manifest does not harvest: refusing it is the guard's cost.
    _project(pytester, _conversation("ord_QQQQQQQQ", note="replaces ord_QQQQQQQQ"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*would be refused*",
            '*refund: order_id="ord_QQQQQQQQ" unknown*',
            "*guardrail replay*",
            "*Per trace file*",
        ]
    )


def test_the_fixtures_options_are_replays() -> None:
    """GuardrailReplay names replay()'s parameters, so a type checker sees every option."""
    import inspect

    from guardrail.replay import replay
    from guardrail.testing import GuardrailReplay

    def described(function: Any, skip: int = 0) -> list[tuple[str, Any]]:
        parameters = list(inspect.signature(function).parameters.values())[skip:]
        return [(p.name, p.kind) for p in parameters]

    assert described(GuardrailReplay.__call__, skip=1) == described(replay)


def test_expand_globs_and_keeps_other_sources(tmp_path: Path) -> None:
    """Glob patterns expand to sorted paths; other sources pass through unchanged."""
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text("", encoding="utf-8")
    plain = tmp_path / "x.json"
    assert expand([str(tmp_path / "*.jsonl"), plain]) == [
        str(tmp_path / "a.jsonl"),
        str(tmp_path / "b.jsonl"),
        plain,
    ]
    assert expand(str(plain)) == [str(plain)]


def test_a_pattern_that_matches_nothing_is_an_error(tmp_path: Path) -> None:
    """A glob with no match raises instead of replaying zero traces."""
    with pytest.raises(GuardrailUsageError, match="no trace files match"):
        expand(str(tmp_path / "*.jsonl"))
