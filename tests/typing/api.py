"""The public API as users write it, checked by mypy --strict (never run, never collected).

Each ``assert_type`` pins what a call returns; each ``# type: ignore[code]``
marks a misuse that must stay a type error (``warn_unused_ignores``, part
of --strict, fails the check the day one stops being an error).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

if sys.version_info >= (3, 11):
    from typing import assert_type
else:
    from typing_extensions import assert_type

import redis.asyncio

import guardrail
from guardrail import (
    CompactionReport,
    CompactionResult,
    Entry,
    Finding,
    Guard,
    GuardrailUsageError,
    Id,
    IdentifierViolation,
    Kind,
    Ledger,
    MemoryStore,
    Patch,
    Rejection,
    SessionScope,
    SQLiteStore,
    Summarizer,
    ToolSpec,
    Verdict,
    compact,
    extractive_summary,
    model_summarizer,
)
from guardrail.compaction import LintIssue
from guardrail.kinds import compile_normalizer, id_text
from guardrail.replay import (
    LossySummarizer,
    ReplayReport,
    SampleCorpus,
    SideBySide,
    Stats,
    Trace,
    TraceFile,
    load_trace_file,
    openai_agent,
    plain_compact,
    reference_agent,
    replay,
    sample_corpus,
    side_by_side,
    strategies,
    trace_from_messages,
)
from guardrail.stores import AsyncRedisStore, PostgresStore, RedisStore, ThreadedAsyncStore
from guardrail.stores.protocol import Change, Snapshot, Written
from guardrail.testing import GuardrailReplay

Order = Annotated[str, Id("order")]

# -- the guard and its options ----------------------------------------------------------------

guard = Guard(
    mode="reprompt",
    capacity=500,
    store=SQLiteStore("sessions.sqlite3"),
    default_session="default",
    redact="secret",
    refuse_undeclared=True,
    max_reprompts=2,
    tombstones=100,
    secret=b"key",
    max_ids_per_call=20,
)
assert_type(guard, Guard)
assert_type(guard.mode, Literal["raise", "reprompt", "observe"])
assert_type(guard.silenced(), Guard)
assert_type(Guard.from_manifest("tools.toml", capacity=10), Guard)
assert_type(guard.add_kind("order", pattern=r"W\d{7}", normalize=["strip", "prefix:#"]), Kind)
assert_type(Kind.build("user", normalize="casefold"), Kind)
assert_type(guard.declare("find_user", ids={"user_id": "user"}, effect="read"), ToolSpec)
assert_type(guard.kinds, dict[str, Kind])
assert_type(compile_normalizer("upper")("w1"), str)
assert_type(id_text(7), str | None)

Guard(mode="loud")  # type: ignore[arg-type]
Guard(capacity="many")  # type: ignore[arg-type]
Guard(store=object())  # type: ignore[arg-type]
guard.declare("t", effect="delete")  # type: ignore[arg-type]
guard.declare("t", efect="read")  # type: ignore[call-arg]
guard.tool(nmae="ship")  # type: ignore[call-overload]
guard.patch("shop.api:ship", verifes=True)  # type: ignore[call-arg]

# -- the decorator keeps the function's type --------------------------------------------------


@guard.tool(effect="read", produces={"orders[*]": "order"})
def list_orders(user_id: str) -> list[str]:
    return []


@guard.tool
async def refund(order_id: Order, amount: int = 0) -> str:
    return order_id


class Shop:
    @guard.tool(name="ship")
    def ship(self, order_id: Order) -> bool:
        return True


as_declared: Callable[[str], list[str]] = list_orders
assert_type(list_orders("mia_li_3668"), list[str])
list_orders(42)  # type: ignore[arg-type]
_ = list_orders.no_such_attribute  # type: ignore[attr-defined]  # the tool is not Any


async def uses_async_tool() -> None:
    assert_type(await refund("W1000001", amount=5), str)
    await refund("W1000001", amount="five")  # type: ignore[arg-type]


assert_type(Shop().ship("W1000001"), bool)
Shop().ship()  # type: ignore[call-arg]

# -- sessions, checks, verdicts and findings --------------------------------------------------

assert_type(guard.session("conv-1"), SessionScope)
with guard.session("conv-1") as ledger:
    assert_type(ledger, Ledger)
    verdict = guard.check("refund", {"order_id": "W1000001"})
    assert_type(verdict, Verdict)
    assert_type(verdict.allowed, bool)
    assert_type(verdict.findings, tuple[Finding, ...])
    assert_type(verdict.arguments, Mapping[str, Any] | None)
    assert_type(
        verdict.findings[0].problem,
        Literal[
            "mutated",
            "truncated",
            "example",
            "wrong_kind",
            "unverified",
            "evicted",
            "unknown",
            "malformed",
            "undeclared",
            "declined",
            "mentioned",
            "outside",
        ],
    )
    assert_type(verdict.outcome, Literal["allowed", "refused", "ask"])
    assert_type(verdict.findings[0].nearest_role, str | None)
    assert_type(guard.check("refund", '{"order_id": "W1000001"}'), Verdict)
    assert_type(guard.enforce("refund", {"order_id": "W1000001"}), Verdict)
    assert_type(guard.record("list_orders", {}, ["W1000001"]), list[Entry])
    assert_type(guard.seal_result("list_orders", "{}", "[]", call_id="c1", session="s"), str)
    assert_type(guard.seals_results, bool)
    assert_type(guard.observe_user("my order is W1000001"), list[Entry])
    assert_type(guard.ledger, Ledger)
    guard.check("refund", ["W1000001"])  # type: ignore[arg-type]


async def uses_async_session() -> None:
    async with guard.session("conv-2") as ledger:
        assert_type(ledger, Ledger)


try:
    guard.enforce("refund", {"order_id": "W9999999"})
except IdentifierViolation as violation:
    assert_type(violation.findings, tuple[Finding, ...])
    assert_type(violation.verdict, Verdict)
except GuardrailUsageError as mistake:
    assert_type(mistake.tool, str | None)

rejection = Rejection(verdict)
assert_type(rejection.message, str)
assert_type(rejection.result_message("anthropic", "toolu_1"), dict[str, Any])
rejection.result_message("gemini", "c1")  # type: ignore[arg-type]

# -- the ledger and the stores ----------------------------------------------------------------

restored = Ledger.from_json(ledger.to_json(), kinds=guard.kinds)
assert_type(restored, Ledger)
assert_type(Ledger.from_dict(ledger.to_dict()), Ledger)
assert_type(ledger.entries(), list[Entry])
assert_type(ledger.get("order", "W1000001"), Entry | None)
assert_type(ledger.roles, dict[str, str])
ledger.lookup("W1000001")  # type: ignore[attr-defined]  # internal now
assert_type(ledger.pin("order"), Entry)
assert_type(MemoryStore().load("conv-1"), Snapshot | None)
assert_type(MemoryStore().apply("conv-1", Change(0)), Written)
assert_type(guard.check("refund", {"order_id": "W1"}, session="conv-1"), Verdict)
assert_type(guard.ledger_for("conv-1"), Ledger)
guard.end_session("conv-1", delete=True)
assert_type(guard.expire_sessions(3600), list[str])
Guard(store=ThreadedAsyncStore(MemoryStore()), max_cached_sessions=100)
assert_type(RedisStore.from_url("redis://localhost:6379/0", prefix="app", ttl=3600.0), RedisStore)
assert_type(
    PostgresStore("dbname=app", schema="guardrail", synchronous_commit=False), PostgresStore
)
Guard(store=AsyncRedisStore.from_url("redis://localhost:6379/0"))
RedisStore(redis.asyncio.Redis())  # type: ignore[arg-type]  # the asyncio client: AsyncRedisStore
Ledger.from_json(ledger)  # type: ignore[arg-type]

# -- compaction -------------------------------------------------------------------------------

messages: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Cancel W1000001."},
]
result = compact(messages, ledger, guard=guard, keep_recent=1)
assert_type(result, CompactionResult[dict[str, Any]])
assert_type(result.messages, list[dict[str, Any]])
assert_type(result.report, CompactionReport)
assert_type(result.report.summarized, int)
assert_type(result.report.lint, tuple[LintIssue, ...])
assert_type(result.report.to_dict(), dict[str, Any])


class ChatMessage(TypedDict):
    """A provider SDK's message type: compaction hands the same type back."""

    role: Literal["system", "user", "assistant"]
    content: str


typed: list[ChatMessage] = [{"role": "user", "content": "Hi"}]
assert_type(compact(typed, ledger).messages, list[ChatMessage])
assert_type(
    guardrail.compact(typed, ledger, summarize=extractive_summary), CompactionResult[ChatMessage]
)

# A list whose element type was lost (dicts of different value types join to object) still
# compacts, and its messages come back as the dicts they are.
mixed = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}]
assert_type(mixed, list[object])
assert_type(compact(mixed, ledger).messages, list[dict[str, Any]])


def kept(result: CompactionResult) -> CompactionReport:
    """A bare CompactionResult annotation is valid under --strict."""
    return result.report


compact(messages, guard)  # type: ignore[call-overload]
compact(messages, guard.session("conv-1"))  # type: ignore[call-overload]
compact(messages, ledger, summarise=extractive_summary)  # type: ignore[call-overload]
compact(messages, ledger, extractive_summary)  # type: ignore[call-overload]
compact(messages, ledger, keep_recent="2")  # type: ignore[call-overload]
compact("Cancel W1000001.", ledger)  # type: ignore[type-var]

# -- summarizers ------------------------------------------------------------------------------


def chat(prompt: list[dict[str, str]]) -> str:
    return "The user asked about [order]."


summarizer = model_summarizer(chat)
assert_type(summarizer, Summarizer)
assert_type(summarizer([{"role": "user", "content": "Hi"}], {"order": "order"}), str)
assert_type(extractive_summary(messages, {}, max_chars=500), str)
model_summarizer("gpt-4o")  # type: ignore[arg-type]


def mapping_summary(messages: Sequence[Mapping[str, Any]], roles: Mapping[str, str]) -> str:
    return ""


def dict_summary(messages: list[dict[str, Any]], roles: dict[str, str]) -> str:
    return ""


def loose_summary(messages: Sequence[Any], roles: Mapping[str, str]) -> str:
    return ""


def wrong_summary(messages: list[str], roles: dict[str, str]) -> str:
    return ""


def no_summary(messages: list[dict[str, Any]], roles: dict[str, str]) -> None:
    return None


# Summarizers declared in any of the usual ways fit; ones that cannot take messages do not.
for fits in (mapping_summary, dict_summary, loose_summary, LossySummarizer(seed=1)):
    compact(messages, ledger, summarize=fits)
compact(messages, ledger, summarize=wrong_summary)  # type: ignore[call-overload]
compact(messages, ledger, summarize=no_summary)  # type: ignore[call-overload]

# -- ready-made kinds, what a kind takes from text, patching in place -------------------------

assert_type(guard.add_kind("email", like="email"), Kind)
assert_type(guard.kinds["email"].ids_in("ana@example.com"), list[tuple[str, str]])
assert_type(guard.kinds["email"].plain_words(), list[str])
guard.add_kind("email", like=["email"])  # type: ignore[arg-type]
assert_type(guard.patch("shop.api:issue_refund", ids={"order_id": "order"}), Patch)
assert_type(guard.patch("shop.api:issue_refund").applied, bool)
guard.patch(list_orders)  # type: ignore[arg-type]
assert_type(sample_corpus(), SampleCorpus)
assert_type(sample_corpus().traces, Path)

# -- the replay harness -----------------------------------------------------------------------

report = replay("traces.jsonl", guard, seed=1, limit=20, compaction=strategies(guard))
assert_type(report, ReplayReport)
assert_type(report.total, Stats)
assert_type(report.files, list[Stats])
assert_type(report.detection_rate("substituted"), float | None)
assert_type(report.to_json(), str)
assert_type(replay([Path("a.jsonl"), trace_from_messages(messages)], guard), ReplayReport)
assert_type(load_trace_file("traces.jsonl"), TraceFile)
assert_type(trace_from_messages(messages), Trace)
assert_type(plain_compact(messages, keep_recent=1), CompactionResult[dict[str, Any]])
assert_type(side_by_side([messages], guard, keep_recent=[0, 1]), SideBySide)
assert_type(LossySummarizer(seed=1, generalize=0.2).fate("W1000001"), str)
assert_type(reference_agent(messages, []), dict[str, Any] | None)
assert_type(openai_agent(model="gpt-4o-mini")(messages, []), dict[str, Any] | None)
replay("traces.jsonl", "tools.toml")  # type: ignore[arg-type]
replay("traces.jsonl", guard, sed=1)  # type: ignore[call-arg]
LossySummarizer(generalise=0.2)  # type: ignore[call-arg]
strategies(guard, summarise=summarizer)  # type: ignore[call-arg]


def test_our_traces(guardrail_replay: GuardrailReplay) -> None:
    """The pytest fixture takes replay()'s options, typed."""
    assert_type(guardrail_replay("traces/*.jsonl", guard, limit=5), ReplayReport)
    guardrail_replay("traces/*.jsonl", "tools.toml")  # type: ignore[arg-type]
    guardrail_replay("traces/*.jsonl", guard, sed=1)  # type: ignore[call-arg]
