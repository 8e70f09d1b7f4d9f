"""One answer runs a held call once, in every runtime: written as the replay an attacker tries.

A held payment is approved; then the same answer is brought back (the
held message answered again, the approved run resumed again, on this
worker or another sharing the store): the payment must not run twice. The
scope of the approval decides what a new call with the same payee does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests

from guardrail import Guard
from guardrail.integrations.loops import run_tool_calls
from guardrail.integrations.pydantic_ai import Guardrail, answer_approvals
from guardrail.stores import SQLiteStore
from tests.integrations.test_loops import SHAPES, answers
from tests.integrations.test_loops_approvals import BILL_IBAN, Bank, _bill_read, _pay, bank_guard
from tests.integrations.test_pydantic_ai import returns
from tests.integrations.test_pydantic_ai_approvals import Bank as PydanticBank
from tests.integrations.test_pydantic_ai_approvals import _pays


@pytest.mark.parametrize("shape", SHAPES)
def test_a_loop_answered_twice_pays_once(shape: str) -> None:
    """The held message passed again after it ran: its call is refused, not run twice."""
    guard, bank = bank_guard(), Bank()
    tools = _bill_read(guard, bank, shape)
    message = _pay(shape)
    (request,) = run_tool_calls(guard, message, tools, session="s").approvals
    guard.approve(request)
    run_tool_calls(guard, message, tools, session="s")
    again = run_tool_calls(guard, message, tools, session="s")
    assert bank.sent == [BILL_IBAN]
    ((call_id, text, _),) = answers(shape, again)
    assert call_id == "c2" and "already ran" in text
    # The default scope: a new payment to the approved payee runs without asking.
    run_tool_calls(guard, _pay(shape, "c3"), tools, session="s")
    assert bank.sent == [BILL_IBAN, BILL_IBAN]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_loop_approval_of_the_held_call_alone_asks_for_the_next(shape: str) -> None:
    """scope="call": the held call runs once; a new payment to the same payee asks again."""
    guard, bank = bank_guard(), Bank()
    tools = _bill_read(guard, bank, shape)
    (request,) = run_tool_calls(guard, _pay(shape), tools, session="s").approvals
    guard.approve(request, scope="call")
    run_tool_calls(guard, _pay(shape), tools, session="s")
    later = run_tool_calls(guard, _pay(shape, "c3"), tools, session="s")
    assert later.waiting and bank.sent == [BILL_IBAN]


def test_a_loop_answered_again_on_another_worker_pays_once(tmp_path: Path) -> None:
    """Two workers on one store: the message answered on one, brought back on the other."""
    path = tmp_path / "sessions.db"
    one = bank_guard()
    one = _with_store(one, SQLiteStore(path))
    other = _with_store(bank_guard(), SQLiteStore(path))
    bank = Bank()
    tools = _bill_read(one, bank, "openai_chat")
    other_tools = type(tools)(other, [bank.read_file, bank.send_money, bank.schedule_transaction])
    message = _pay("openai_chat")
    (request,) = run_tool_calls(one, message, tools, session="s").approvals
    one.approve(request)
    run_tool_calls(one, message, tools, session="s")
    run_tool_calls(other, message, other_tools, session="s")
    assert bank.sent == [BILL_IBAN]


def _with_store(guard: Guard, store: SQLiteStore) -> Guard:
    """The same declarations on a guard that keeps its sessions in ``store``."""
    worker = Guard(mode=guard.mode, store=store, secret="the workers' shared key")
    worker.add_kind("iban", pattern=r"[A-Z]{2}\d{2}[A-Z0-9]{10,30}", mentions="ask")
    worker.add_kind("file")
    worker.declare("read_file", ids={"file_path": "file"}, effect="read", verifies=False)
    worker.declare("send_money", ids={"recipient": "iban"}, effect="write")
    worker.declare("schedule_transaction", ids={"recipient": "iban"}, effect="write")
    return worker


def test_a_pydantic_ai_run_resumed_twice_with_one_yes_pays_once() -> None:
    """The deferred call's yes given to two resumed runs: the payment runs in the first only."""
    guard, bank = bank_guard(), PydanticBank()
    agent = Agent(
        _model(),
        toolsets=[bank.toolset()],
        capabilities=[Guardrail(guard)],
        output_type=[str, DeferredToolRequests],
    )
    with guard.session("s"):
        result = asyncio.run(agent.run("Can you please pay the bill 'bill-december-2023.txt'?"))
    deferred = result.output
    assert isinstance(deferred, DeferredToolRequests)
    (call,) = deferred.approvals
    yes = answer_approvals(guard, deferred, {call.tool_call_id: True})
    history = result.all_messages()
    for _ in range(2):
        with guard.session("s"):
            resumed = asyncio.run(
                agent.run(None, message_history=history, deferred_tool_results=yes)
            )
    assert bank.sent == [BILL_IBAN]
    (refused,) = returns(resumed.all_messages(), "send_money")
    assert "already ran" in str(refused.content)


def _model() -> Any:
    from pydantic_ai.models.function import FunctionModel

    return FunctionModel(_pays())


def test_every_adapter_page_says_what_an_approval_covers_in_the_same_words() -> None:
    """The one sentence of docs/approvals.md on scope, repeated on each adapter's page."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    text = " ".join((docs / "approvals.md").read_text().split())
    start = text.index("**What an approval covers.** ") + len("**What an approval covers.** ")
    sentence = text[start : text.index(".", start) + 1]
    assert 'scope="call"' in sentence and "once" in sentence
    pages = sorted((docs / "integrations").glob("*.md"))
    missing = [
        page.name
        for page in pages
        if page.stem not in ("index", "otel") and sentence not in " ".join(page.read_text().split())
    ]
    assert not missing, f"these adapter pages do not repeat {sentence!r}: {missing}"


def test_an_agents_sdk_state_resumed_twice_with_one_yes_pays_once() -> None:
    """The approved state saved, then resumed twice (two workers, one answer): one payment."""
    from agents import Runner, RunState, set_tracing_disabled
    from agents.testing import ModelStep, assistant_message

    from tests.integrations.test_openai_agents_approvals import Bank as AgentsBank
    from tests.integrations.test_openai_agents_approvals import _interrupted

    set_tracing_disabled(True)
    try:
        guard, bank = bank_guard(), AgentsBank()
        done = ModelStep.respond(lambda call: [assistant_message("Paid.")])
        agent, result = _interrupted(guard, bank, done, done)
        state = result.to_state()
        state.approve(result.interruptions[0])
        saved = state.to_json()
        for _ in range(2):
            resumed = asyncio.run(RunState.from_json(agent, saved))
            with guard.session("s"):
                asyncio.run(Runner.run(agent, resumed))
        assert bank.sent == [BILL_IBAN]
    finally:
        set_tracing_disabled(False)


def test_a_langgraph_interrupt_resumed_twice_from_its_checkpoint_pays_once() -> None:
    """The interrupted checkpoint resumed with one approve, then again from the same checkpoint."""
    from langgraph.types import Command

    from tests.integrations.test_langchain_approvals import Bank as GraphBank
    from tests.integrations.test_langchain_approvals import _interrupted

    guard, bank = bank_guard(), GraphBank()
    agent, _ = _interrupted(guard, bank)
    held = agent.get_state({"configurable": {"thread_id": "s"}}).config
    for _ in range(2):
        agent.invoke(Command(resume={"type": "approve"}), held)
    assert bank.sent == [BILL_IBAN]


def test_an_agent_framework_answer_replayed_on_a_restored_session_pays_once() -> None:
    """The session saved before the yes, restored twice (two workers), the same yes sent to each."""
    from agent_framework import AgentSession

    from tests.integrations.test_agent_framework_approvals import _answers, _asked, _run

    _, bank, agent, session, response = _asked()
    saved = session.to_dict()
    for _ in range(2):
        _run(agent, _answers(response, True), AgentSession.from_dict(saved))
    assert bank.sent == [BILL_IBAN]
