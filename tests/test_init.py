"""guardrail init: a starter manifest proposed from tool definitions, each with its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from guardrail import Guard
from guardrail.cli._main import USAGE_ERROR, main

DEFINITIONS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Details of an order.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {
                        "type": "string",
                        "description": "The order id, such as '#W0000000'.",
                    }
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "exchange_items",
            "description": "Exchange items of a delivered order.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "item_ids": {"type": "array", "items": {"type": "string"}},
                    "payment": {
                        "type": "object",
                        "properties": {
                            "method": {"type": "string", "description": "the card's identifier"}
                        },
                    },
                    "reason": {"type": "string", "description": "why, in the user's words"},
                    "legs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "flight_number": {
                                    "type": "string",
                                    "description": "Flight number, such as 'HAT001'.",
                                },
                                "seat_number": {"type": "integer"},
                            },
                        },
                    },
                    "page_number": {"type": "integer", "description": "which page"},
                    "trackingNumber": {"type": "string"},
                },
            },
        },
    },
    {"name": "delete_ticket", "input_schema": {"properties": {"id": {"type": "integer"}}}},
]


def _init(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    source = tmp_path / "tools.json"
    source.write_text(json.dumps(DEFINITIONS), encoding="utf-8")
    code = main(["init", str(source), "-o", str(tmp_path / "manifest.toml"), *extra])
    return code, capsys.readouterr().out


def test_init_proposes_each_id_parameter_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """By name (*_id, *_ids, id, a text *_number), by description (an identifier), nested.

    Other parameters not: a reason in words, an integer page or seat number.
    """
    code, out = _init(tmp_path, capsys)
    assert code == 0
    text = (tmp_path / "manifest.toml").read_text(encoding="utf-8")
    guard = Guard.from_manifest(tmp_path / "manifest.toml")
    ids = {
        name: [(p.path.text, p.kinds) for p in spec.params] for name, spec in guard.specs.items()
    }
    assert ids == {
        "get_order_details": [("order_id", ("order",))],
        "exchange_items": [
            ("order_id", ("order",)),
            ("item_ids[*]", ("item",)),
            ("payment.method", ("payment_method",)),
            ("legs[*].flight_number", ("flight",)),
            ("trackingNumber", ("tracking",)),
        ],
        "delete_ticket": [("id", ("ticket",))],
    }
    assert "its name 'order_id' ends in id; its description quotes '#W0000000'" in text
    assert "its description calls it an id" in text
    assert "its name 'flight_number' ends in number and it takes text" in text
    assert "[kinds.flight]" in text and '"HAT001"' in text
    assert "get_order_details.order_id -> order" in out


def test_init_proposes_effects_and_examples_and_what_it_writes_refuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lookup verb is a read, anything else a write; a quoted id is a refused placeholder."""
    _init(tmp_path, capsys)
    guard = Guard.from_manifest(tmp_path / "manifest.toml")
    effects = {name: spec.effect for name, spec in guard.specs.items()}
    assert effects == {
        "get_order_details": "read",
        "exchange_items": "write",
        "delete_ticket": "write",
    }
    with guard.session("s"):
        guard.observe_user("it is #W0000000")
        verdict = guard.check("get_order_details", {"order_id": "#W0000000"})
    assert [finding.problem for finding in verdict.findings] == ["example"]
    text = (tmp_path / "manifest.toml").read_text(encoding="utf-8")
    # A read tool's produces, to fill in, sits before its ids table: uncommented, it stays its own.
    produces = text.index("# produces", text.index("[tools.get_order_details]"))
    assert produces < text.index("[tools.get_order_details.ids]")


def test_init_keeps_an_existing_file_unless_forced_and_prints_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing manifest is never overwritten silently; -o - prints the proposal."""
    (tmp_path / "manifest.toml").write_text("# mine\n", encoding="utf-8")
    code, _ = _init(tmp_path, capsys)
    assert code == USAGE_ERROR
    assert (tmp_path / "manifest.toml").read_text(encoding="utf-8") == "# mine\n"
    assert _init(tmp_path, capsys, "--force")[0] == 0
    source = tmp_path / "listing.json"
    source.write_text(json.dumps({"tools": [DEFINITIONS[2]]}), encoding="utf-8")
    assert main(["init", str(source), "-o", "-"]) == 0
    assert '[tools.delete_ticket.ids]\nid = "ticket"' in capsys.readouterr().out


def test_init_of_a_file_that_is_not_definitions_says_what_it_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input: an error of use naming the shapes it reads."""
    source = tmp_path / "tools.json"
    source.write_text('"hello"', encoding="utf-8")
    assert main(["init", str(source), "-o", "-"]) == USAGE_ERROR
    assert "OpenAI, Anthropic or MCP shape" in capsys.readouterr().err
