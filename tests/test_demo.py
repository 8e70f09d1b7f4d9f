"""The demo: a plain lossy summary mutates the order id, the guard refuses, compact() keeps it."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from guardrail import Ledger
from guardrail.cli._demo import LOSSY_SEED, lossy_summariser, run_demo
from guardrail.compaction import BLOCK_HEADER
from guardrail.replay import LossySummarizer

RIGHT, WRONG = "ord_8F3kQ2xM", "ord_8F3kQ2xN"  # Dana's blender order; Lee's stand mixer order


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=100)


def test_the_seeded_lossy_summariser_mutates_the_order_id() -> None:
    """With the demo's seed and default rates, the order id's fate is a one-character mutation."""
    lossy = LossySummarizer(seed=LOSSY_SEED)
    assert lossy.fate(RIGHT) == "mutate"
    assert lossy.fate("cus_41ZpA9") == "keep"
    assert lossy.spoil(f"order {RIGHT}", {RIGHT: "order"}) == f"order {WRONG}"


def test_the_plain_summary_the_agent_sees_has_the_mutated_id() -> None:
    """The plain compaction's summary names the other customer's order, never the right one."""
    result = run_demo(_quiet())
    summary = result.context[1]["content"]
    assert summary.startswith("SUMMARY OF EARLIER TURNS\n")
    assert WRONG in summary
    assert RIGHT not in summary
    assert BLOCK_HEADER not in summary
    assert result.context[-1] == {"role": "user", "content": "Yes please."}


def test_the_mutated_id_is_refused_and_the_refund_lands_right() -> None:
    """The summary's one-character-off id is refused; the copy from the ledger is refunded."""
    result = run_demo(_quiet())
    assert result.first_call["arguments"]["order_id"] == WRONG
    assert result.rejection is not None
    (finding,) = result.rejection.verdict.findings
    assert finding.problem == "mutated"
    assert finding.nearest_role == "damaged_order"
    assert "[damaged_order]" in result.rejection.message
    assert result.second_call is not None
    assert result.second_call["order_id"] == RIGHT
    assert [refund["order_id"] for refund in result.refunds] == [RIGHT]
    assert result.ledger["damaged_order"].value == RIGHT


def test_compact_keeps_the_id_verbatim_and_the_refund_is_right_first_time() -> None:
    """The same conversation compacted by guardrail: the block carries the id, nothing refused."""
    guarded = run_demo(_quiet()).guarded
    text = guarded.context[1]["content"]
    assert text.startswith(BLOCK_HEADER + "\n")
    block, _, summary = text.partition("\n\n")
    assert f"damaged_order     {RIGHT}" in block
    assert "[damaged_order]" in summary
    assert RIGHT not in summary and WRONG not in summary
    assert guarded.report.masked > 0
    assert guarded.call["arguments"]["order_id"] == RIGHT
    assert guarded.rejection is None
    assert [refund["order_id"] for refund in guarded.refunds] == [RIGHT]
    assert any(e["event"] == "guardrail.compacted" for e in guarded.events)


def test_the_audit_events_record_the_refusal() -> None:
    """The guard's events include the refused call (a warning) and the allowed refund."""
    result = run_demo(_quiet())
    checked = [e for e in result.events if e["event"] == "guardrail.call_checked"]
    refused = [e for e in checked if e["outcome"] == "refused"]
    assert len(refused) == 1
    assert refused[0]["level"] == "warning"
    assert refused[0]["problem"] == "mutated"
    assert checked[-1]["tool"] == "issue_refund"
    assert checked[-1]["outcome"] == "allowed"


def test_the_story_is_printed_in_order() -> None:
    """The printed story names the summariser and its seed and shows both compactions."""
    console = _quiet()
    run_demo(console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    steps = [
        f"LossySummarizer(seed={LOSSY_SEED})",
        "2. A plain summary compacts it",
        "guardrail refused the call",
        "4. The agent copies the id from the ledger",
        f"OK  nothing refunded on {WRONG}",
        "7. The same conversation, compacted by guardrail",
        "ID LEDGER (verbatim, do not paraphrase)",
        "Allowed at the first try",
        "guardrail.compacted",
    ]
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions)
    assert "BAD" not in text


def test_the_context_step_can_be_replaced() -> None:
    """A context step that keeps the conversation whole leads straight to the right refund."""
    given: list[Ledger] = []

    def keep(conversation: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        given.append(ledger)
        return conversation

    console = _quiet()
    result = run_demo(console, context=keep)
    assert result.rejection is None
    assert [refund["order_id"] for refund in result.refunds] == [RIGHT]
    assert "A plain summary" not in console.file.getvalue()  # type: ignore[attr-defined]
    # The step is asked once, with the session's ledger, and the agent sees what it returns.
    assert given == [result.ledger]
    assert result.context[1]["content"].startswith("Hi, the blender")
    assert lossy_summariser(result.ledger).seed == LOSSY_SEED


def test_the_compacted_block_tells_the_orders_apart_as_the_results_page_quotes() -> None:
    """compact()'s block notes what tells each order apart (its items), as docs/results.md shows."""
    from pathlib import Path

    guarded = run_demo(_quiet()).guarded
    block = str(guarded.context[1]["content"]).partition("\n\n")[0]
    lines = block.splitlines()[:-1]  # the seal differs with the guard's random secret
    assert lines[2:4] == [
        'order             ord_3Tq7Lm2P      (note: "Kettle K2 (stainless)")',
        'damaged_order     ord_8F3kQ2xM      (note: "Vortex 900 blender")',
    ]
    readme = (Path(__file__).parent.parent / "docs" / "results.md").read_text(encoding="utf-8")
    assert "\n".join(lines) in readme
