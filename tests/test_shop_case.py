"""The shop case: a guarded program never breaks a call that works without the guard.

The shop (``tests/shop_case.py``) writes order ids ``#W...``, finds them only
so spelled, and answers a failure with ``Error: ...`` text; its users type
``W...``. Each test runs the shop's real tools through ``@guard.tool`` and
asserts on what the tools received and returned.
"""

from __future__ import annotations

from guardrail import Rejection

from .shop_case import Shop, guarded_shop


def test_the_models_correct_spelling_is_neither_rewritten_nor_refused() -> None:
    """The user typed W5061109, a lookup wrote #W5061109: the model's #W5061109 runs as it is."""
    shop, guard, tools = guarded_shop()
    with guard.session("s") as ledger:
        guard.observe_user("I am yusuf_rossi_9620, please cancel my order W5061109.")
        assert tools["get_user_details"]("yusuf_rossi_9620")["orders"][0] == "#W5061109"
        done = tools["cancel_pending_order"]("#W5061109", "no longer needed")
        assert ledger["order"].value == "#W5061109"  # the spelling the shop wrote
    assert done["status"] == "cancelled"
    assert shop.received("cancel_pending_order")[0]["order_id"] == "#W5061109"


def test_a_user_typed_id_reaches_a_read_as_the_model_wrote_it() -> None:
    """Before any tool wrote it, the model's #W5061109 reaches the read as it is, not the user's."""
    shop, guard, tools = guarded_shop()
    with guard.session("s") as ledger:
        guard.observe_user("What is the status of W5061109?")
        found = tools["get_order_details"]("#W5061109")
        assert found["status"] == "pending"
        assert ledger["order"].value == "#W5061109"  # the lookup's result wrote it
        assert ledger["order"].verified
        done = tools["cancel_pending_order"]("#W5061109", "ordered by mistake")
    assert shop.received("get_order_details") == [{"order_id": "#W5061109"}]
    assert done["status"] == "cancelled"


def test_the_users_spelling_runs_as_written_and_fails_as_it_does_without_the_guard() -> None:
    """The model copying the user's W5061109 after the shop wrote #W5061109: allowed, not fixed.

    The guard only allows or refuses: the tool gets W5061109 and answers as
    it answers the same call made without the guard.
    """
    shop, guard, tools = guarded_shop()
    with guard.session("s"):
        guard.observe_user("I am yusuf_rossi_9620; cancel W5061109.")
        tools["get_user_details"]("yusuf_rossi_9620")
        done = tools["cancel_pending_order"]("W5061109", "no longer needed")
    assert shop.received("cancel_pending_order") == [
        {"order_id": "W5061109", "reason": "no longer needed"}
    ]
    assert done == Shop().cancel_pending_order("W5061109", "no longer needed")
    assert done == "Error: order not found"


def test_an_error_text_confirms_no_user_typed_id_and_a_write_with_it_is_refused() -> None:
    """get_user_details answers "Error: user not found": the typed id stays unverified."""
    shop, guard, tools = guarded_shop()
    with guard.session("s") as ledger:
        guard.observe_user("I am noah_brown_1234, change my address.")
        assert tools["get_user_details"]("noah_brown_1234") == "Error: user not found"
        assert not ledger["user"].verified
        refused = tools["modify_user_address"]("noah_brown_1234", "1 Main St")
    assert isinstance(refused, Rejection)
    assert [f.problem for f in refused.verdict.findings] == ["unverified"]
    assert shop.received("modify_user_address") == []


def test_an_error_text_is_never_harvested_as_an_id() -> None:
    """find_user_id_by_name's whole text is a user id, but not its "Error: user not found"."""
    shop, guard, tools = guarded_shop()
    with guard.session("s") as ledger:
        guard.observe_user("My name is Noah Brown.")
        assert tools["find_user_id_by_name"]("Noah", "Brown") == "Error: user not found"
        assert len(ledger) == 0
        refused = tools["modify_user_address"]("Error: user not found", "1 Main St")
    assert isinstance(refused, Rejection)
    assert [f.problem for f in refused.verdict.findings] == ["unknown"]
    assert shop.received("modify_user_address") == []
