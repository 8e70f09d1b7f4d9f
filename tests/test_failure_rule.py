"""The failure rule (``fails=``): declared once, read the same way by every reader of results.

Compiled in :mod:`guardrail._declare.failure`, applied by
:mod:`guardrail._provenance.failure`; written as an attacker would: an error
text that names an id, a failed lookup that would confirm one, a rule that
raises, a declaration of the wrong type.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from structlog.testing import capture_logs

from guardrail import Guard, GuardrailUsageError, ManifestError, Rejection
from guardrail._declare.failure import DEFAULT_FAILS, compile_fails
from guardrail._guard.audit import SilentLogger
from guardrail._provenance.failure import (
    ERROR_LOOKING,
    failed,
    reads_like_error,
    result_failed,
    suspect_success,
)

from .conftest import shop_guard

# -- error shapes and refusals: failures whatever the rule ---------------------------------------


REFUSAL = "guardrail refused the call to get_order; the tool did not run.\n- order_id=..."


@pytest.mark.parametrize(
    "result",
    [
        {"error": "not found", "order_id": "W1111111"},
        {"error": {"code": 404}, "order_id": "W1111111"},
        {"is_error": True, "order_id": "W1111111"},
        {"isError": True, "content": [{"type": "text", "text": "W1111111"}]},
        '{"error": "not found", "order_id": "W1111111"}',
        b'  {"isError": true, "order_id": "W1111111"}',
        '{"\\u0065rror": "escaped", "order_id": "W1111111"}',
        REFUSAL,
        "  " + REFUSAL,
        json.dumps(REFUSAL),
    ],
)
def test_error_shaped_results_are_failures(result: Any) -> None:
    """An error mapping (or its JSON text) and a refusal's text are failures, not results."""
    assert failed(None, result)


@pytest.mark.parametrize(
    "result",
    [
        {"error": None, "order_id": "W1111111"},
        {"error": "", "errors": ["x"]},
        {"is_error": False, "isError": "true"},
        '{"error": false, "order_id": "W1111111"}',
        '[{"error": "in a list"}]',
        "Errors: none",  # the default rule reads "Error:" (see tests/test_failure_rule.py)
        "the refusal guardrail refused the call to x",
        None,
        42,
        [],
        b"\xff",
    ],
)
def test_results_that_are_not_error_shaped(result: Any) -> None:
    """A falsy error field, an error inside a list or prose mentioning a refusal is no failure."""
    assert not failed(None, result)


def test_a_rejection_is_a_failure() -> None:
    """A Rejection a guarded tool returned instead of running is never a result."""
    guard = shop_guard("reprompt")
    with guard.session("s"):
        verdict = guard.enforce("issue_refund", {"order_id": "W1111111"})
    rejection = Rejection(verdict)
    assert failed(None, rejection)
    assert failed(None, rejection.to_dict())
    assert failed(None, str(rejection))


def test_a_python_repr_error_is_a_failure() -> None:
    """An error mapping sent as repr text is a failure, as its JSON would be."""
    assert failed(None, str({"error": "order #W9999999 not found", "order_id": "#W9999999"}))
    assert not failed(None, str({"order_id": "#W8855135", "ok": True}))


# -- the default rule: a text that says it is an error ------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        "Error: user not found",
        "error: order #W5061109 not found",
        "  ERROR: timeout",
        "\n\tError:",
        json.dumps("Error: quoted as a JSON string"),
        b"Error: as bytes",
    ],
)
def test_a_text_that_says_it_is_an_error_is_a_failure_by_default(result: Any) -> None:
    """``Error:`` in any case after leading white space, as text, JSON string or bytes."""
    assert failed(None, result)
    assert failed(shop_guard().specs["get_order"], result)


@pytest.mark.parametrize(
    "result",
    ["Errors: none", "No error: all fine", "error", "The error: none", {"message": "Error: x"}],
)
def test_a_text_that_only_mentions_an_error_is_a_success_by_default(result: Any) -> None:
    """Only a text starting ``Error:`` says so: not a mention, not a field of an object."""
    assert not failed(None, result)


# -- declared rules -------------------------------------------------------------------------------


def _spec(fails: Any) -> Any:
    guard = Guard(logger=SilentLogger())
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    return guard.declare("get_order", produces={"order_id": "order"}, effect="read", fails=fails)


@pytest.mark.parametrize(
    ("fails", "failure", "success"),
    [
        ("FAILED", "  FAILED: no such order", "Error: a normal output of this tool"),
        ("re:(?i)not found", "order #W5061109 Not Found", "Error: a normal output"),
        (re.compile(r"^\[E\d+\]"), "[E404] gone", "[ok] Error: fine"),
        ({"field": "status", "value": "error"}, {"status": "error"}, {"status": "ok"}),
        ({"field": "meta.ok", "value": False}, {"meta": {"ok": False}}, {"meta": {"ok": 0}}),
        ({"field": "code", "value": 404}, '{"code": 404.0}', {"code": "404"}),
        (lambda result: result.get("n") == 0, {"n": 0}, {"n": 1}),
        (["FAILED", {"field": "status", "value": "error"}], {"status": "error"}, "OK"),
        (False, "Error: the tool's normal output", "anything"),
    ],
)
def test_a_declared_rule_replaces_the_default(fails: Any, failure: Any, success: Any) -> None:
    """A prefix, a pattern, a field and value, a function, a list or False: as declared."""
    spec = _spec(fails)
    if fails is not False:
        assert failed(spec, failure)
    assert not failed(spec, success)


@pytest.mark.parametrize(
    "result",
    [
        {"error": "not found", "order_id": "#W5061109"},
        "guardrail refused the call to get_order; the tool did not run.",
        "guardrail: get_order failed: KeyError",
        "An error occurred while running the tool. Please try again.",
    ],
)
def test_no_rule_makes_an_error_shape_a_refusal_or_a_runtime_failure_a_success(
    result: Any,
) -> None:
    """Whatever the tool declares (even False), these never read as a tool's success."""
    assert failed(_spec(False), result)
    assert failed(_spec(lambda _: False), result)


def test_a_rule_that_raises_reads_as_a_failure_and_never_breaks_the_call() -> None:
    """A fails function that raises: a failure, the call still returns, a warning says why."""
    guard = Guard(mode="reprompt")
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])

    def broken(result: Any) -> bool:
        raise ValueError("no idea")

    @guard.tool(produces={"order_id": "order"}, effect="read", fails=broken)
    def get_order() -> dict[str, str]:
        return {"order_id": "#W5061109"}

    with capture_logs() as logs, guard.session("s") as ledger:
        assert get_order() == {"order_id": "#W5061109"}
        assert len(ledger) == 0
    (warning,) = [e for e in logs if e["event"] == "guardrail.result_unreadable"]
    assert "ValueError: no idea" in warning["problems"][0]
    assert result_failed(guard.specs["get_order"].fails, {"order_id": "#W5061109"})


@pytest.mark.parametrize(
    ("fails", "message"),
    [
        (3, "not 3"),
        (True, "not True"),
        ([], "not an empty list"),
        ("", "not ''"),
        ([False], "not False"),
        (["Error:", None], "not None in"),
        ({"field": "status"}, "{'field': PATH, 'value': VALUE}"),
        ({"field": "status", "value": [1]}, "text, a number, true, false or null"),
        ("re:(", "not a valid regular expression"),
        ({"field": "a[", "value": 1}, "a["),
        (int, "not <class 'int'>"),
    ],
)
def test_a_bad_rule_is_a_usage_error_that_says_what_a_rule_is(fails: Any, message: str) -> None:
    """fails= of a wrong type or shape names the tool and what a rule may be."""
    with pytest.raises(GuardrailUsageError, match=re.escape(message)) as raised:
        _spec(fails)
    assert raised.value.tool == "get_order"


@pytest.mark.parametrize(
    "fails", [3, True, [], "", {"field": "status"}, {"field": "s", "value": [1]}, [["x"]]]
)
def test_a_manifest_fails_of_a_wrong_type_is_a_manifest_error(fails: Any) -> None:
    """In a manifest, at a tool or the top level: a ManifestError that says what a rule is."""
    for manifest in (
        {"tools": {"get_order": {"effect": "read", "fails": fails}}},
        {"fails": fails, "tools": {"get_order": {"effect": "read"}}},
    ):
        with pytest.raises(ManifestError, match="is not a failure rule"):
            Guard.from_manifest(manifest)


def test_a_manifests_bad_pattern_is_a_manifest_error_naming_it() -> None:
    """A rule that passes the schema but does not compile is refused the same way."""
    with pytest.raises(ManifestError, match="not a valid regular expression"):
        Guard.from_manifest({"fails": "re:(", "tools": {"a": {"effect": "read"}}})


def test_the_rule_is_the_tools_else_the_manifests_else_the_guards() -> None:
    """Guard(fails=), a manifest's top-level fails and a tool's own: the nearest wins."""
    guard = Guard.from_manifest(
        {
            "fails": "Oops",
            "tools": {
                "own": {"effect": "read", "fails": False},
                "manifests": {"effect": "read"},
            },
        },
        fails="re:^Sorry",
    )
    guard.declare("guards", effect="read")
    assert not guard.failed("own", "Oops")
    assert guard.failed("manifests", "Oops") and not guard.failed("manifests", "Sorry")
    assert guard.failed("guards", "Sorry") and not guard.failed("guards", "Error: x")
    assert guard.failed("undeclared", "Sorry")  # a tool it does not know: the guard's rule
    assert guard.fails == "re:^Sorry"
    assert Guard().fails is None and compile_fails(None) is None


def test_the_same_tool_declared_twice_with_the_same_rule_is_one_tool() -> None:
    """A module run twice declares the same spec again: a rule function compares by identity."""

    def rule(result: Any) -> bool:
        return False

    guard = Guard()
    guard.declare("t", effect="read", fails=rule)
    assert guard.specs["t"].fails.checks == (rule,)
    assert guard.specs["t"].fails is not DEFAULT_FAILS


# -- a failed result yields nothing -------------------------------------------------------------


def test_an_error_text_naming_an_id_is_never_harvested() -> None:
    """Neither a ``$`` producer nor a ``re:`` producer takes anything from an error text."""
    guard = shop_guard()
    guard.declare("whole", produces={"$": "order"}, effect="read")
    guard.declare("scan", produces={"re:(#W\\d{7})": "order"}, effect="read")
    with guard.session("s") as ledger:
        assert guard.record("whole", {}, "Error: #W5061109") == []
        assert guard.record("scan", {}, "Error: order #W5061109 not found") == []
        assert len(ledger) == 0
        # The same texts from a tool that says its output may start so are harvested.
    loud = shop_guard()
    loud.declare("scan", produces={"re:(#W\\d{7})": "order"}, effect="read", fails=False)
    with loud.session("s") as ledger:
        loud.record("scan", {}, "Error: order #W5061109 not found")
        assert [e.value for e in ledger] == ["#W5061109"]


def test_a_failed_on_success_lookup_verifies_nothing_and_a_write_is_refused() -> None:
    """A lookup verifying on success answers ``Error: ...``: the typed id stays unverified."""
    guard = shop_guard("reprompt")
    guard.declare(
        "get_customer", ids={"customer_id": "customer"}, effect="read", verifies="on_success"
    )
    guard.declare("close_account", ids={"customer_id": "customer"}, effect="write")
    with guard.session("s") as ledger:
        guard.observe_user("I am cus_AAAAAA")
        guard.record("get_customer", {"customer_id": "cus_AAAAAA"}, "Error: customer not found")
        assert not ledger["customer"].verified
        verdict = guard.enforce("close_account", {"customer_id": "cus_AAAAAA"})
    assert [f.problem for f in verdict.findings] == ["unverified"]


def test_a_failed_write_mints_nothing() -> None:
    """A write whose ``mints`` would bring an id in answers ``Error: ...``: nothing is minted."""
    guard = shop_guard()
    guard.declare("invite", mints={"email": "email"}, effect="write")
    with guard.session("s") as ledger:
        guard.record("invite", {"email": "eve@example.com"}, "Error: quota exceeded")
        assert len(ledger) == 0


def test_a_failed_result_brings_no_mention_in() -> None:
    """A kind taking mentions from result text takes none from an error text."""
    guard = Guard()
    guard.add_kind("iban", pattern=r"[A-Z]{2}\d{2}[A-Z0-9]{10,30}", mentions="ask")
    guard.declare("read_file", effect="read")
    with guard.session("s") as ledger:
        guard.record("read_file", {}, "Error: cannot pay UK12345678901234567890")
        assert len(ledger) == 0
        guard.record("read_file", {}, "Please pay UK12345678901234567890")
        assert [e.tier for e in ledger] == ["mentioned"]


def test_guard_failed_is_the_rule_record_applies() -> None:
    """Guard.failed(tool, result) says what record() does with the result."""
    guard = shop_guard()
    for result, learns in (("Error: x #W5061109", False), ({"order_id": "#W5061109"}, True)):
        with guard.session(f"s{learns}") as ledger:
            guard.record("get_order", {}, result)
            assert guard.failed("get_order", result) is not learns
            assert (len(ledger) == 1) is learns


# -- results that read like errors, taken for successes ----------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Error - timeout", "Error"),
        ("  Not found: W1", "Not found"),
        ("INVALID id", "INVALID"),
        ("failed to load", "failed"),
        ("Could not reach the server", "Could not"),
        ("Errors: none", None),
        ("Invalidated caches", None),
        ("The order was not found", None),
    ],
)
def test_what_reads_like_an_error(text: str, words: str | None) -> None:
    """A text beginning with one of the listed words (whole words, any case) reads so."""
    assert reads_like_error(text) == words
    assert "error" in ERROR_LOOKING and "not found" in ERROR_LOOKING


def test_a_success_that_reads_like_an_error_and_yielded_ids_is_a_suspect() -> None:
    """The rule was overridden, or misses the tool's text: the tool, what was taken, the fix."""
    guard = shop_guard()
    guard.declare("whole", produces={"$": "customer"}, effect="read", fails=False)
    guard.declare("scan", produces={"re:(#W\\d{7})": "order"}, effect="read")
    suspect = suspect_success(guard.specs["whole"], "Error: cus_AAAAAA locked", guard.kinds)
    assert suspect is not None and suspect.tool == "whole"
    assert suspect.harvested == (("customer", "Error: cus_AAAAAA locked"),)
    assert 'fails = "Error"' in suspect.advice
    found = suspect_success(guard.specs["scan"], "Not found: #W5061109", guard.kinds)
    assert found is not None and found.harvested == (("order", "#W5061109"),)
    assert 'fails = "Not found"' in found.advice
    # A failure, a text that does not read so, or one that yields nothing: no suspect.
    assert suspect_success(guard.specs["scan"], "Error: #W5061109", guard.kinds) is None
    assert suspect_success(guard.specs["scan"], "Found #W5061109", guard.kinds) is None
    assert suspect_success(guard.specs["scan"], "Not found: nothing", guard.kinds) is None
    assert suspect_success(guard.specs["scan"], {"x": "Not found"}, guard.kinds) is None


def test_a_rejection_returned_by_a_tool_is_a_failure_under_any_rule() -> None:
    """A tool (a guarded one inside) that returns a Rejection never yields its ids."""
    guard = shop_guard("reprompt")
    with guard.session("s"):
        verdict = guard.enforce("issue_refund", {"order_id": "#W1111111"})
    assert failed(_spec(False), Rejection(verdict))
