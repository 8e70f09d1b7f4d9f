"""Shared fixtures: a small shop guard, the path of the real traces, the corpus side by side."""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from guardrail import Guard, Ledger
from guardrail.replay import SideBySide, side_by_side

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpus"
AIRLINE_TRACES = CORPUS / "tau-airline" / "traces.jsonl.gz"
AIRLINE_MANIFEST = REPO / "examples" / "tau_airline.toml"


#: Marks a test that replays the airline corpus: slow, but run everywhere (the corpus ships here).
needs_corpus = pytest.mark.slow


def need_corpus() -> Path:
    """The airline traces, which ship with the repository."""
    assert AIRLINE_TRACES.exists(), f"{AIRLINE_TRACES} is missing: restore it from git"
    return AIRLINE_TRACES


def corpus_traces() -> list[dict[str, Any]]:
    """The 200 airline conversations as the corpus writes them (id, messages, metadata)."""
    with gzip.open(need_corpus(), "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def corpus_conversations() -> list[list[dict[str, Any]]]:
    """The message lists of the 200 airline conversations."""
    return [trace["messages"] for trace in corpus_traces()]


@pytest.fixture(scope="session")
def corpus_side_by_side() -> SideBySide:
    """side_by_side() over all 200 airline conversations, keep_recent 0 to 4, computed once.

    The full sweep takes about thirty seconds; the compaction test asserts on it and the
    README check compares the table the README quotes with it.
    """
    quiet = structlog.wrap_logger(
        None, wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR)
    )
    guard = Guard.from_manifest(AIRLINE_MANIFEST, logger=quiet)
    return side_by_side(corpus_conversations(), guard, keep_recent=range(5))


def shop_guard(mode: str = "raise", **options: object) -> Guard:
    """A guard with the kinds of a small web shop."""
    guard = Guard(mode=mode, **options)  # type: ignore[arg-type]
    guard.add_kind(
        "order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"], examples=["#W0000000"]
    )
    guard.add_kind("customer", pattern=r"cus_[A-Za-z0-9]{6}")
    guard.add_kind("item", pattern=r"it_[a-z0-9]{4,}")
    guard.add_kind("email", normalize="email")
    guard.declare(
        "search_orders",
        ids={"customer_id": "customer"},
        produces={"orders[*].order_id": {"kind": "order", "status": "status"}},
        effect="read",
    )
    guard.declare(
        "get_order",
        ids={"order_id": "order"},
        produces={"items[*].item_id": "item", "order_id": "order"},
        effect="read",
    )
    guard.declare("issue_refund", ids={"order_id": "order", "item_ids[*]": "item"})
    return guard


@pytest.fixture
def guard() -> Guard:
    """A raise-mode shop guard."""
    return shop_guard()


@pytest.fixture
def ledger(guard: Guard) -> Iterator[Ledger]:
    """An open session of the shop guard."""
    with guard.session("test") as opened:
        yield opened


ORDERS = {
    "orders": [
        {"order_id": "#W8855135", "status": "delivered"},
        {"order_id": "#W2378156", "status": "pending"},
    ]
}


# -- recorded conversations in the corpus shape, for replay tests ----------------------------


def user(text: str) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text}


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An assistant message making one tool call; ``arguments`` as given (an object, or text)."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
    }


def result(call_id: str, output: Any, *, error: bool = False) -> dict[str, Any]:
    """The tool message answering ``call_id``; an output that is not text is written as JSON."""
    text = output if isinstance(output, str) else json.dumps(output)
    return {"role": "tool", "tool_call_id": call_id, "content": text, "error": error}


def stored_ids(store: Any, session_id: str) -> set[str]:
    """The values of the live entries a store holds for a session (empty if none)."""
    snapshot = store.load(session_id)
    if snapshot is None:
        return set()
    return {r["value"] for r in snapshot.records if r["state"] == "live"}
