"""Manifests: kinds and tools as JSON or TOML data, checked before anything is compiled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardrail import Guard, ManifestError

from .conftest import AIRLINE_MANIFEST

MANIFEST = {
    "kinds": {
        "order": {"pattern": "#?W\\d{7}", "normalize": ["strip", "prefix:#"], "examples": ["#W0"]},
        "item": {},
    },
    "tools": {
        "get_order": {
            "effect": "read",
            "ids": {"order_id": "order"},
            "produces": {"items[*].item_id": "item", "re:(W\\d{7})": "order"},
        },
        "refund": {"ids": {"order_id": "order", "item_ids": {"kind": "item", "sep": ","}}},
    },
}

TOML = """
[kinds.order]
pattern = "#?W\\\\d{7}"
normalize = ["strip", "prefix:#"]

[tools.get_order]
effect = "read"
ids = { order_id = "order" }
produces = { "items[*].item_id" = { kind = "order", status = "status" } }
"""


def test_mapping_json_and_toml_give_the_same_guard(tmp_path: Path) -> None:
    """A manifest may be a mapping, a .json file or a .toml file."""
    as_json = tmp_path / "tools.json"
    as_json.write_text(json.dumps(MANIFEST))
    for source in (MANIFEST, as_json):
        guard = Guard.from_manifest(source, mode="reprompt")
        assert guard.mode == "reprompt"
        assert guard.specs["get_order"].effect == "read"
        assert guard.specs["refund"].effect == "write"
        assert guard.specs["refund"].params[1].sep == ","
    as_toml = tmp_path / "tools.toml"
    as_toml.write_text(TOML)
    guard = Guard.from_manifest(as_toml)
    assert guard.kinds["order"].normalize("#W1234567") == "W1234567"
    assert guard.specs["get_order"].produces[0].status == "status"


def test_airline_example_manifest_loads() -> None:
    """The manifest kept in examples/ is valid and declares every airline tool."""
    guard = Guard.from_manifest(AIRLINE_MANIFEST)
    assert {"get_user_details", "book_reservation", "send_certificate"} <= set(guard.specs)
    assert not guard.kinds["airport"].enforce
    # User records carry no user_id: the lookup's success is what confirms the id it took.
    assert guard.specs["get_user_details"].verifies == "on_success"
    assert guard.specs["get_reservation_details"].verifies is True


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["tools"]["get_order"].update(effect="reed"), r"tools\.get_order\.effect"),
        (lambda m: m["tools"]["get_order"].update(idz={}), "'idz' was unexpected.*allowed"),
        (lambda m: m["tools"]["refund"]["ids"].update(order_id=3), "not a kind, a list of kinds"),
        (lambda m: m["tools"]["refund"]["ids"].update(order_id="ordr"), "unknown kind 'ordr'"),
        (lambda m: m["tools"]["get_order"]["produces"].update({"a[": "item"}), "malformed path"),
        (lambda m: m["kinds"]["order"].update(pattern="W("), "bad pattern"),
        (lambda m: m.pop("tools"), "'tools' is a required property"),
    ],
)
def test_bad_manifests_give_one_clear_error(change: object, message: str) -> None:
    """Every manifest error names the place at fault and what to write instead."""
    manifest = json.loads(json.dumps(MANIFEST))
    change(manifest)  # type: ignore[operator]
    with pytest.raises(ManifestError, match=message):
        Guard.from_manifest(manifest)


def test_unreadable_and_unparsable_files(tmp_path: Path) -> None:
    """Missing files and bad syntax are errors naming the file."""
    with pytest.raises(ManifestError, match="nope.json: cannot read it"):
        Guard.from_manifest(tmp_path / "nope.json")
    broken = tmp_path / "broken.toml"
    broken.write_text("[kinds\n")
    with pytest.raises(ManifestError, match="broken.toml: not valid TOML"):
        Guard.from_manifest(broken)
    text = tmp_path / "tools.txt"
    text.write_text("kinds = 1")
    with pytest.raises(ManifestError, match="not valid JSON.*name TOML files"):
        Guard.from_manifest(text)


def test_a_bad_manifest_adds_nothing() -> None:
    """Loading is all or nothing: a failure leaves the guard as it was."""
    guard = Guard.from_manifest(MANIFEST)
    bad = {"kinds": {"user": {}}, "tools": {"a": {"ids": {"x": "user"}}, "b": {"ids": {"x": "no"}}}}
    with pytest.raises(ManifestError):
        guard.load_manifest(bad)
    assert "user" not in guard.kinds
    assert set(guard.specs) == {"get_order", "refund"}


def test_a_manifest_naming_a_declared_tool_is_refused_and_adds_nothing(tmp_path: Path) -> None:
    """A manifest cannot replace a tool declared before it; nothing of it is added."""
    guard = Guard()
    guard.add_kind("order")
    guard.declare("refund", ids={"order_id": "order"})
    path = tmp_path / "more.json"
    path.write_text(
        json.dumps(
            {
                "kinds": {"user": {}},
                "tools": {"lookup": {"effect": "read"}, "refund": {"ids": {}}},
            }
        )
    )
    with pytest.raises(ManifestError, match=r"more\.json.*refund.*guard\.declare.*name=") as info:
        guard.load_manifest(path)
    assert str(path) in str(info.value)
    assert set(guard.specs) == {"refund"}
    assert "user" not in guard.kinds
    assert guard.specs["refund"].params[0].kinds == ("order",)
    loaded = Guard.from_manifest(MANIFEST)
    loaded.load_manifest(MANIFEST)  # the same tools again: nothing replaced
    changed = json.loads(json.dumps(MANIFEST))
    changed["tools"]["get_order"]["effect"] = "write"
    with pytest.raises(ManifestError, match="get_order.*declared by manifest"):
        loaded.load_manifest(changed)
    assert loaded.specs["get_order"].effect == "read"


def test_a_json_manifest_naming_a_tool_twice_is_refused(tmp_path: Path) -> None:
    """JSON keeps the last of two equal keys silently; a manifest refuses them instead."""
    path = tmp_path / "twice.json"
    path.write_text(
        '{"kinds": {"order": {}}, "tools": {"refund": {"ids": {"order_id": "order"}},'
        ' "refund": {"ids": {}}}}'
    )
    with pytest.raises(ManifestError, match="twice.json.*'refund' twice"):
        Guard.from_manifest(path)
