"""Agents: the tools a model sees, the reference agent, and adapters for real model clients."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog

from guardrail import Guard
from guardrail.compaction import BLOCK_HEADER, ledger_block, ledger_values
from guardrail.errors import GuardrailUsageError
from guardrail.replay._agent import (
    Intent,
    agent_name,
    as_call,
    load_agent,
    takes_intent,
    tool_definitions,
)
from guardrail.replay._model_agents import anthropic_agent, openai_agent
from guardrail.replay._reference_agent import reference_agent

from .conftest import AIRLINE_MANIFEST as MANIFEST

BOOKING = {
    "user_id": "mia_li_3668",
    "origin": "JFK",
    "destination": "SEA",
    "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}],
    "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 100}],
    "cabin": "economy",
}


def airline() -> Guard:
    quiet = structlog.wrap_logger(
        structlog.PrintLogger(), wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR)
    )
    return Guard.from_manifest(MANIFEST, logger=quiet)


def booked_ledger(guard: Guard) -> Any:
    """A ledger that saw the user's details and a flight search."""
    ledger = guard.new_ledger("t")
    guard.observe_user("I am mia_li_3668", ledger=ledger)
    guard.record(
        "get_user_details",
        {"user_id": "mia_li_3668"},
        {"payment_methods": {"credit_card_4421486": {"source": "credit_card"}}},
        ledger=ledger,
    )
    guard.record(
        "search_direct_flight",
        {"origin": "JFK", "destination": "SEA"},
        [{"flight_number": "HAT136", "origin": "JFK", "destination": "SEA"}],
        ledger=ledger,
    )
    return ledger


def test_tools_declare_identifier_parameters_by_their_paths() -> None:
    """Each spec becomes an OpenAI function tool; nested id paths become arrays of objects."""
    tools = {t["function"]["name"]: t for t in tool_definitions(airline())}
    assert tools["cancel_reservation"]["type"] == "function"
    params = tools["book_reservation"]["function"]["parameters"]
    assert params["type"] == "object"
    flights = params["properties"]["flights"]
    assert flights["type"] == "array"
    assert flights["items"]["properties"]["flight_number"]["type"] == "string"
    assert "flight" in flights["items"]["properties"]["flight_number"]["description"]
    assert params["properties"]["user_id"]["type"] == "string"
    assert tools["think"]["function"]["parameters"] == {"type": "object", "properties": {}}
    json.dumps(list(tools.values()))  # JSON-safe, as an API takes it


def test_intent_blanks_ids_and_fills_them_back() -> None:
    """An intent holds placeholders and roles, never the values; fill() puts values back."""
    guard = airline()
    intent = Intent.of(guard, "book_reservation", BOOKING, booked_ledger(guard))
    assert intent.tool == "book_reservation"
    assert "HAT136" not in json.dumps(intent.arguments)
    assert intent.arguments["flights"][0] == {"flight_number": "<id 3>", "date": "2024-05-20"}
    assert intent.arguments["cabin"] == "economy"
    roles = {slot.param: slot.role for slot in intent.slots}
    assert roles["flights[*].flight_number"] == "flight"
    assert roles["payment_methods[*].payment_id"] == "payment_method"
    assert roles["user_id"] == "user"
    assert [slot.recorded for slot in intent.slots][:2] == ["mia_li_3668", "JFK"]
    assert intent.fill([slot.recorded for slot in intent.slots]) == BOOKING
    with pytest.raises(GuardrailUsageError, match="takes 5 values"):
        intent.fill(["x"])


def context_with_block(guard: Any, ledger: Any, summary: str) -> list[dict[str, Any]]:
    text = f"{ledger_block(ledger)}\n\nSUMMARY OF EARLIER TURNS\n{summary}"
    return [{"role": "system", "content": "policy"}, {"role": "system", "content": text}]


def test_an_agent_is_named_by_the_public_module_that_exports_it() -> None:
    """A replay names the reference agent by guardrail.replay, other agents where defined."""

    def mine(messages: Any, tools: Any) -> None:
        return None

    assert agent_name(reference_agent) == "guardrail.replay:reference_agent"
    assert agent_name(load_agent(agent_name(reference_agent))) == agent_name(reference_agent)
    assert agent_name(mine) == f"{__name__}:{mine.__qualname__}"


def test_reference_agent_copies_by_role_from_the_ledger_block() -> None:
    """With a ledger block, each id comes from its role's line, whatever the summary says."""
    guard = airline()
    ledger = booked_ledger(guard)
    intent = Intent.of(guard, "book_reservation", BOOKING, ledger)
    messages = context_with_block(guard, ledger, "The user booked HAT137 with credit_c…")
    assert ledger_values(messages)["flight"] == "HAT136"
    call = reference_agent(messages, [], intent=intent)
    assert call == {"name": "book_reservation", "arguments": BOOKING}


def test_reference_agent_without_a_block_copies_what_the_context_shows() -> None:
    """Verbatim where it is there, else a look-alike (mutated or cut short), else nothing."""
    guard = airline()
    intent = Intent.of(guard, "book_reservation", BOOKING, booked_ledger(guard))
    summary = "SUMMARY: user mia_li_3668 flies JFK to SEA on HAT163, to be paid by credit_card_44…"
    call = reference_agent([{"role": "system", "content": summary}], [], intent=intent)
    assert call is not None
    arguments = call["arguments"]
    assert arguments["user_id"] == "mia_li_3668"
    assert arguments["flights"][0]["flight_number"] == "HAT163"  # two swapped: copied as is
    assert arguments["payment_methods"][0]["payment_id"] == "credit_card_44…"
    bare = reference_agent([{"role": "user", "content": "book it"}], [], intent=intent)
    assert bare is not None
    assert bare["arguments"]["user_id"] is None
    assert bare["arguments"]["cabin"] == "economy"


def test_reference_agent_needs_an_intent() -> None:
    """Called without intent=, the reference agent says how it is meant to run."""
    assert takes_intent(reference_agent)
    with pytest.raises(GuardrailUsageError, match="intent="):
        reference_agent([], [])


def test_ledger_values_reads_the_first_block_only() -> None:
    """A context with no block gives no values; text parts are read too."""
    assert ledger_values([{"role": "user", "content": "hello"}]) == {}
    block = f"{BLOCK_HEADER}\norder     ord_8F3kQ2xM\n\nSUMMARY"
    parts = [{"role": "user", "content": [{"type": "text", "text": block}]}]
    assert ledger_values(parts) == {"order": "ord_8F3kQ2xM"}


def test_as_call_reads_what_agents_return() -> None:
    """A dict with name and arguments (or JSON text) is a call; None is none; else an error."""
    assert as_call(None) is None
    assert as_call({"name": "t", "arguments": '{"a": 1}'}) == ("t", {"a": 1})
    assert as_call({"name": "t"}) == ("t", {})
    assert as_call({"name": "t", "arguments": "{oops"}) == ("t", "{oops")
    assert as_call({"name": "t", "arguments": "[1]"}) == ("t", "[1]")  # JSON, but no object
    with pytest.raises(GuardrailUsageError, match="or None for no call"):
        as_call(["t", {}])


# -- adapters for real models, with fake clients (no network) ---------------------------------


class FakeOpenAI:
    """Stands in for ``openai.OpenAI()``: records the request, answers with one tool call."""

    def __init__(self, reply: Any) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply = reply
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **request: Any) -> Any:
        self.requests.append(request)
        return self.reply


def openai_reply(*calls: tuple[str, str]) -> Any:
    tool_calls = [
        SimpleNamespace(id="c", type="function", function=SimpleNamespace(name=n, arguments=a))
        for n, a in calls
    ]
    message = SimpleNamespace(role="assistant", content=None, tool_calls=tool_calls or None)
    return SimpleNamespace(choices=[SimpleNamespace(message=message)])


CONTEXT: list[dict[str, Any]] = [
    {"role": "system", "content": "policy"},
    {"role": "user", "content": "cancel ZFA04Y"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "get_reservation_details",
                    "arguments": '{"reservation_id": "ZFA04Y"}',
                },
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "get_reservation_details", "content": "{}"},
    {"role": "tool", "tool_call_id": "c2", "content": "second result"},
    {"role": "user", "content": "yes"},
]


def test_openai_agent_sends_the_context_and_reads_the_first_tool_call() -> None:
    """The request carries model, messages (API fields only) and tools; the reply is parsed."""
    client = FakeOpenAI(openai_reply(("cancel_reservation", '{"reservation_id": "ZFA04Y"}')))
    tools = tool_definitions(airline())
    agent = openai_agent(client, model="gpt-4o", temperature=0)
    call = agent(CONTEXT, tools)
    assert call == {"name": "cancel_reservation", "arguments": {"reservation_id": "ZFA04Y"}}
    (request,) = client.requests
    assert request["model"] == "gpt-4o"
    assert request["temperature"] == 0
    assert request["tools"] == tools
    assert request["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "{}"}
    assert request["messages"][:3] == CONTEXT[:3]


def test_openai_agent_no_tool_call_and_dict_replies() -> None:
    """A reply with no tool call is no call; a reply given as plain dicts works too."""
    assert openai_agent(FakeOpenAI(openai_reply()), model="m")(CONTEXT, []) is None
    reply = {
        "choices": [{"message": {"tool_calls": [{"function": {"name": "think", "arguments": ""}}]}}]
    }
    assert openai_agent(FakeOpenAI(reply), model="m")(CONTEXT, []) == {
        "name": "think",
        "arguments": {},
    }


class FakeAnthropic:
    """Stands in for ``anthropic.Anthropic()``: records the request, answers with content blocks."""

    def __init__(self, content: list[Any]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.messages = SimpleNamespace(create=self.create)
        self.content = content

    def create(self, **request: Any) -> Any:
        self.requests.append(request)
        return SimpleNamespace(content=self.content, stop_reason="tool_use")


def test_anthropic_agent_converts_the_context_and_reads_tool_use() -> None:
    """System text moves to system=, calls and results become blocks, roles alternate."""
    content = [
        SimpleNamespace(type="text", text="Cancelling."),
        SimpleNamespace(
            type="tool_use", id="t1", name="cancel_reservation", input={"reservation_id": "ZFA04Y"}
        ),
    ]
    client = FakeAnthropic(content)
    tools = tool_definitions(airline())
    call = anthropic_agent(client, model="claude-x", max_tokens=256)(CONTEXT, tools)
    assert call == {"name": "cancel_reservation", "arguments": {"reservation_id": "ZFA04Y"}}
    (request,) = client.requests
    assert request["model"] == "claude-x"
    assert request["max_tokens"] == 256
    assert request["system"] == "policy"
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert request["messages"][1]["content"] == [
        {
            "type": "tool_use",
            "id": "c1",
            "name": "get_reservation_details",
            "input": {"reservation_id": "ZFA04Y"},
        }
    ]
    results = request["messages"][2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "c1", "content": "{}"}
    cancel = next(t for t in request["tools"] if t["name"] == "cancel_reservation")
    assert cancel["input_schema"]["properties"]["reservation_id"]["type"] == "string"
    assert anthropic_agent(FakeAnthropic([]), model="m")(CONTEXT, tools) is None


def test_adapters_import_their_sdk_only_when_they_build_a_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a client and without the package, the error comes at the first call."""
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.setitem(sys.modules, "anthropic", None)
    openai_side = openai_agent(model="m")
    anthropic_side = anthropic_agent(model="m")
    with pytest.raises(ImportError):
        openai_side(CONTEXT, [])
    with pytest.raises(ImportError):
        anthropic_side(CONTEXT, [])


# -- loading an agent by name ---------------------------------------------------------------


def test_load_agent_by_module_and_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """module:callable loads; a module in the current directory is found too."""
    assert load_agent("guardrail.replay:reference_agent") is reference_agent
    (tmp_path / "my_agent_for_test.py").write_text(
        "class Box:\n    @staticmethod\n    def agent(messages, tools):\n        return None\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    agent = load_agent("my_agent_for_test:Box.agent")
    assert agent([], []) is None
    assert not takes_intent(agent)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "module:callable"),
        ("no_such_module_xyz:agent", "cannot import"),
        ("guardrail.replay:nothing_here", "has no 'nothing_here'"),
        ("guardrail.replay:FATES", "not callable"),
    ],
)
def test_load_agent_errors_say_what_to_give(spec: str, message: str) -> None:
    """Each way of naming an agent wrongly is a usage error saying what is expected."""
    with pytest.raises(GuardrailUsageError, match=message):
        load_agent(spec)
