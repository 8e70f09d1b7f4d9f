"""Coverage: which declared result paths reach something, and the declaration admitting a value."""

from __future__ import annotations

from guardrail import Guard
from guardrail._provenance.coverage import admitting, reached


def _guard() -> Guard:
    guard = Guard()
    guard.add_kind("item", pattern=r"it_\d+")
    guard.declare(
        "get_product",
        effect="read",
        produces={"variants[*].item_id": "item", "re:(it_\\d+)": "item", "sku": "item"},
    )
    return guard


def test_reached_tells_each_producer_apart() -> None:
    """A list path over an object reaches nothing; a key present with a value does."""
    spec = _guard().specs["get_product"]
    result = {"variants": {"v1": {"item_id": "it_1"}}, "sku": "it_9"}
    assert reached(spec, result) == {
        "variants[*].item_id": False,
        "re:(it_\\d+)": False,  # a JSON object's text is read by paths only
        "sku": True,
    }
    assert reached(spec, "see it_4")["re:(it_\\d+)"] is True
    assert reached(spec, {"sku": ""})["sku"] is False  # an empty value is no id


def test_admitting_names_the_one_step_fix_of_a_declared_path() -> None:
    """variants[*].item_id over an object: the fix is variants.*.item_id, in its place."""
    spec = _guard().specs["get_product"]
    result = {"variants": {"v1": {"item_id": "it_1"}}}
    assert admitting("get_product", result, "it_1", "item", spec) == (
        'write produces={"variants.*.item_id": "item"} on get_product in place of '
        "'variants[*].item_id'"
    )
    assert admitting("get_product", {"deep": {"x": "it_1"}}, "it_1", "item") == (
        'declare produces={"deep.x": "item"} on get_product'
    )
    assert admitting("get_product", {"note": "buy it_1 now"}, "it_1", "item") == (
        "at note, inside a longer text: return it in a field of its own"
    )
    assert admitting("get_product", {"sku": "it_2"}, "it_1", "item") is None
