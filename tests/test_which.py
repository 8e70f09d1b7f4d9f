"""The "which one" measure: an id is told apart from each rival of its kind by a fact."""

from __future__ import annotations

from guardrail.replay._which import told_apart


def test_a_fact_against_each_rival_tells_an_id_apart() -> None:
    """Each rival must lack one of its facts; the facts need not be the same against each."""
    facts = {
        "order": {"Kettle K2", "2025-03-02"},
        "order_2": {"Vortex 900 blender", "2025-03-02"},
        "order_3": {"Kettle K2", "2025-04-18"},
    }
    assert told_apart("order", ["order_2", "order_3"], facts)


def test_no_fact_or_the_same_facts_tell_nothing_apart() -> None:
    """An entry with no facts, or whose facts a rival all shares, is not told apart."""
    facts = {"order": {"Kettle K2"}, "order_2": {"Kettle K2", "2025-03-02"}, "order_3": set()}
    assert not told_apart("order", ["order_2"], facts)
    assert told_apart("order_2", ["order"], facts)
    assert not told_apart("order_3", ["order"], facts)
    assert not told_apart("gone", ["order"], facts)  # a role with no line: a plain summary
