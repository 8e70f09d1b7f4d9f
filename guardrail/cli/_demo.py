"""``guardrail demo``: one support conversation, compacted two ways, and the guard in between.

A customer asks for a refund for a damaged blender from her second order.
The tools are in memory and guarded with ``@guard.tool``. Before the agent
acts, the conversation is compacted. First by a plain summary through the
seeded :class:`~guardrail.replay.LossySummarizer` (the seed is chosen so
that it mutates the order id, one character off, into another customer's
order): the guard refuses the refund with a re-prompt, the agent copies the
id from the ledger, and the refund lands on the right order. Then the same
conversation is compacted by :func:`~guardrail.compaction.compact`, with
the same summariser: the id is carried verbatim in the ledger block, and
the refund is right the first time. Everything runs offline, with no model.

:func:`run_demo` takes the step that builds the agent's context as a
parameter (``context=``), so another compaction can be put in the plain
summary's place.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel
from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from guardrail._check.reprompt import Rejection
from guardrail._declare.spec import Id
from guardrail._guard.facade import Guard
from guardrail.compaction import CompactionReport, compact, ledger_values
from guardrail.ledger import Ledger
from guardrail.ledger._ledger import state_of
from guardrail.replay import LossySummarizer, plain_compact

Messages = list[dict[str, Any]]
#: ``(conversation, ledger) -> the messages the agent sees next``: the seam for compaction.
ContextStep = Callable[[Messages, Ledger], Messages]

SYSTEM = "You are the support agent of a kitchen-appliance shop. Use the tools; never guess ids."
CUSTOMER_EMAIL = "dana.whitfield@example.com"
ORDER_SHAPE = r"ord_[A-Za-z0-9]{8}"
#: The lossy summariser's seed: with its default rates (10% each for drop, generalise, truncate
#: and mutate), this seed mutates Dana's order id into Lee's and keeps the other ids.
LOSSY_SEED = 1586
#: Turns each compaction keeps raw: the customer's "Yes please."
KEEP_RECENT = 1


# -- the shop: in-memory data and its tools ---------------------------------------------------


class Order(BaseModel):
    """An order as ``list_orders`` returns it; ``order_id`` is harvested by its annotation.

    Its note, the items and the date, tells the model which order is which.
    """

    order_id: Annotated[str, Id("order", note=["items", "placed"])]
    placed: str
    items: list[str]
    total_cents: int


class OrderList(BaseModel):
    """The orders of one customer, oldest first."""

    orders: list[Order]


@dataclass
class Shop:
    """Customers, orders (with their owners) and the refunds issued."""

    customers: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "cus_41ZpA9": {"name": "Dana Whitfield", "email": CUSTOMER_EMAIL},
            "cus_7Yq2Lm": {"name": "Lee Park", "email": "lee.park@example.com"},
        }
    )
    orders: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "ord_3Tq7Lm2P": {
                "customer": "cus_41ZpA9",
                "placed": "2025-03-02",
                "items": ["Kettle K2 (stainless)"],
                "total_cents": 3900,
            },
            "ord_8F3kQ2xM": {
                "customer": "cus_41ZpA9",
                "placed": "2025-04-18",
                "items": ["Vortex 900 blender"],
                "total_cents": 8900,
            },
            # One character away from Dana's second order: somebody else's order.
            "ord_8F3kQ2xN": {
                "customer": "cus_7Yq2Lm",
                "placed": "2025-04-19",
                "items": ["Stand mixer S5"],
                "total_cents": 24900,
            },
        }
    )
    refunds: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Tools:
    """The guarded tools of the demo shop."""

    find_customer: Callable[..., Any]
    list_orders: Callable[..., Any]
    issue_refund: Callable[..., Any]


class AuditLog:
    """A structlog-style logger that keeps the guard's audit events for display."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def isEnabledFor(self, level: int) -> bool:
        return True

    def _keep(self, level: str, event: str, **fields: Any) -> None:
        self.events.append({"level": level, "event": event, **fields})

    def debug(self, event: str, **fields: Any) -> None:
        self._keep("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._keep("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._keep("warning", event, **fields)


def build(shop: Shop, log: AuditLog) -> tuple[Guard, Tools]:
    """A guard in re-prompt mode with the shop's kinds, and the shop's tools decorated by it."""
    guard = Guard(mode="reprompt", logger=log)
    guard.add_kind("customer", pattern=r"cus_[A-Za-z0-9]{6}")
    guard.add_kind("order", pattern=ORDER_SHAPE, examples=["ord_00000000"])
    guard.add_kind("refund", pattern=r"rfq_[A-Za-z0-9]{6}")

    @guard.tool(effect="read", produces={"customer_id": "customer"})
    def find_customer(email: str) -> dict[str, str]:
        """Find a customer by e-mail address."""
        for customer_id, customer in shop.customers.items():
            if customer["email"] == email.strip().lower():
                return {"customer_id": customer_id, "name": customer["name"]}
        return {"error": "no customer with that e-mail"}

    @guard.tool(effect="read")
    def list_orders(customer_id: Annotated[str, Id("customer")]) -> OrderList:
        """The customer's orders, oldest first."""
        return OrderList(
            orders=[
                Order(order_id=order_id, **{k: v for k, v in order.items() if k != "customer"})
                for order_id, order in shop.orders.items()
                if order["customer"] == customer_id
            ]
        )

    @guard.tool(effect="write", produces={"refund_id": {"kind": "refund", "status": "status"}})
    def issue_refund(
        order_id: Annotated[str, Id("order")], amount_cents: int, reason: str
    ) -> dict[str, Any]:
        """Refund an order (e.g. order_id="ord_00000000"); the refund awaits approval."""
        refund = {
            "refund_id": f"rfq_77Hn0{len(shop.refunds) + 2}",
            "order_id": order_id,
            "amount_cents": amount_cents,
            "reason": reason,
            "status": "pending_approval",
        }
        shop.refunds.append(refund)
        return refund

    return guard, Tools(find_customer, list_orders, issue_refund)


# -- the context the agent sees ---------------------------------------------------------------


def lossy_summariser(ledger: Ledger) -> LossySummarizer:
    """The seeded lossy summariser, knowing the shop's kinds of id."""
    return LossySummarizer(seed=LOSSY_SEED, kinds=state_of(ledger).kinds)


def plain_summary_context(conversation: Messages, ledger: Ledger) -> Messages:
    """A plain summary: the older turns summarised by the lossy summariser, no ledger."""
    result = plain_compact(
        conversation, summarize=lossy_summariser(ledger), keep_recent=KEEP_RECENT
    )
    return [dict(message) for message in result.messages]


# -- the scripted agent -----------------------------------------------------------------------


def _context_text(context: Sequence[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in context)


def scripted_agent(context: Sequence[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The next call, read from the context as a model would: the last order it mentions.

    An order is an order id, or a ``[role]`` that the ID LEDGER block in the
    context (if there is one) resolves to an order id.
    """
    roles = ledger_values(context)
    text = _context_text(context)
    body = text.partition("\n\n")[2] if roles else text  # the summary, past the block
    mentions = []
    for match in re.finditer(rf"{ORDER_SHAPE}|\[(\w+)\]", body):
        value = roles.get(match.group(1), "") if match.group(1) else match.group()
        if re.fullmatch(ORDER_SHAPE, value):
            mentions.append(value)
    return "issue_refund", {
        "order_id": mentions[-1] if mentions else "",
        "amount_cents": 8900,
        "reason": "arrived cracked",
    }


def copy_from_ledger(
    arguments: dict[str, Any], rejection: Rejection, ledger: Ledger
) -> dict[str, Any]:
    """Follow the re-prompt: copy the value of the ledger role it names, byte for byte."""
    fixed = dict(arguments)
    for finding in rejection.verdict.findings:
        if finding.nearest_role:
            fixed[finding.param] = ledger[finding.nearest_role].value
    return fixed


# -- the story --------------------------------------------------------------------------------


@dataclass
class GuardedRun:
    """The same conversation compacted by guardrail's ``compact()``, and what the agent did."""

    context: Messages
    report: CompactionReport
    call: dict[str, Any]
    rejection: Rejection | None
    refunds: list[dict[str, Any]]
    events: list[dict[str, Any]]


@dataclass
class DemoResult:
    """What happened, for tests and for anyone driving the demo from code.

    ``context`` is what the agent saw after the plain summary (or the
    ``context=`` step given); ``guarded`` the run compacted by guardrail.
    """

    conversation: Messages
    context: Messages
    first_call: dict[str, Any]
    rejection: Rejection | None
    second_call: dict[str, Any] | None
    refunds: list[dict[str, Any]]
    ledger: Ledger
    events: list[dict[str, Any]]
    guarded: GuardedRun


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())
    return f"{name}({args})"


def _result_text(result: Any) -> str:
    data = result.model_dump() if isinstance(result, BaseModel) else result
    return json.dumps(data)


class _Story:
    """The conversation as it happens, printed and kept as OpenAI-shaped messages."""

    def __init__(self, console: Console, guard: Guard, ledger: Ledger) -> None:
        self.console = console
        self.guard = guard
        self.ledger = ledger
        self.messages: Messages = [{"role": "system", "content": SYSTEM}]
        self.calls = 0

    def user(self, text: str) -> None:
        self.guard.observe_user(text)
        self.messages.append({"role": "user", "content": text})
        self.console.print(Text.assemble(("customer  ", "bold cyan"), text))

    def agent(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})
        self.console.print(Text.assemble(("agent     ", "bold green"), text))

    def call(self, tool: Callable[..., Any], name: str, arguments: dict[str, Any]) -> Any:
        self.calls += 1
        call_id = f"call_{self.calls}"
        self.messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
        )
        self.console.print(Text.assemble(("agent  -> ", "bold green"), _call_text(name, arguments)))
        before = {entry.role for entry in self.ledger.entries()}
        result = tool(**arguments)
        content = str(result) if isinstance(result, Rejection) else _result_text(result)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if isinstance(result, Rejection):
            self.console.print(
                Panel(
                    Text(result.message),
                    title="guardrail refused the call: the tool did not run",
                    title_align="left",
                    border_style="red",
                )
            )
            return result
        added = [e for e in self.ledger.entries() if e.role not in before]
        note = "   ledger + " + ", ".join(f"[{e.role}] {e.value}" for e in added) if added else ""
        self.console.print(Text.assemble(("tool   <- ", "dim"), content, (note, "yellow")))
        return result


def _ledger_table(ledger: Ledger) -> Table:
    table = Table(title="ID LEDGER (kept by guardrail, copied byte for byte)", title_justify="left")
    for name in ("role", "kind", "value", "from", "note"):
        table.add_column(name)
    for entry in ledger.entries():
        table.add_row(
            Text(entry.role),
            entry.kind,
            Text(entry.value, style="bold"),
            entry.source.tool,
            Text(entry.note or entry.status or ""),
        )
    return table


_EVENT_FIELDS = (
    "outcome",
    "problem",
    "param",
    "value",
    "nearest_role",
    "roles",
    "values",
    "role",
    "old_role",
    "summarised",
    "masked",
    "ledger_entries",
    "tokens_before",
    "tokens_after",
)


def _events_table(events: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="Audit events (structlog)", title_justify="left")
    for name in ("level", "event", "tool", "detail"):
        table.add_column(name, overflow="fold")
    for event in events:
        detail = {
            key: event[key]
            for key in _EVENT_FIELDS
            if key in event and event[key] not in (None, [], "")
        }
        style = {"warning": "red", "info": "green"}.get(event["level"], "dim")
        table.add_row(
            Text(event["level"], style=style),
            event["event"],
            str(event.get("tool", "")),
            Text(", ".join(f"{k}={v}" for k, v in detail.items())),
        )
    return table


def _converse(story: _Story, tools: Tools, guard: Guard, ledger: Ledger) -> tuple[str, Order]:
    """The conversation up to the customer's "Yes please."; returns her id and second order."""
    story.user(
        "Hi, the blender from my second order arrived cracked. I'd like a refund. "
        f"My e-mail is {CUSTOMER_EMAIL}."
    )
    found = story.call(tools.find_customer, "find_customer", {"email": CUSTOMER_EMAIL})
    orders = story.call(tools.list_orders, "list_orders", {"customer_id": found["customer_id"]})
    second: Order = orders.orders[1]
    entry = ledger.get("order", second.order_id)
    if entry is not None:
        old = entry.role
        guard.label(old, "damaged_order")
        story.console.print(Text(f"          (the agent labels [{old}] as [damaged_order])", "dim"))
    story.agent(
        f"I found it: order {second.order_id} from {second.placed}, the Vortex 900 "
        "blender, $89.00. Shall I refund it?"
    )
    story.user("Yes please.")
    return str(found["customer_id"]), second


def _show_context(console: Console, context: Messages, title: str) -> None:
    """The messages the agent sees, past the system prompt, order ids in bold."""
    for message in context[1:] if context and context[0].get("content") == SYSTEM else context:
        text = Text(str(message.get("content") or ""))
        text.highlight_regex(ORDER_SHAPE, "bold yellow")
        text.highlight_regex(r"\[damaged_order\]", "bold yellow")
        console.print(Panel(text, title=f"{title}: {message['role']} message", title_align="left"))


def _outcome(console: Console, shop: Shop, right: str, wrong: str | None) -> None:
    for refund in shop.refunds:
        order = shop.orders[refund["order_id"]]
        who = shop.customers[order["customer"]]["name"]
        ok = refund["order_id"] == right
        console.print(
            Text.assemble(
                ("OK  " if ok else "BAD ", "bold green" if ok else "bold red"),
                f"refund {refund['refund_id']} ({refund['status']}) of "
                f"${refund['amount_cents'] / 100:.2f} on {refund['order_id']}: "
                f"{who}'s {', '.join(order['items'])}",
            )
        )
    if wrong and wrong != right and not any(r["order_id"] == wrong for r in shop.refunds):
        console.print(Text(f"OK  nothing refunded on {wrong}", style="bold green"))


def _warn_if_foreign(console: Console, shop: Shop, order_id: str, customer_id: str) -> None:
    owner = shop.orders.get(order_id, {}).get("customer")
    if owner and owner != customer_id:
        console.print(
            Text(
                f"{order_id} passes any format check and exists: it is "
                f"{shop.customers[owner]['name']}'s order. Without the guard the refund "
                "would land there.",
                style="yellow",
            )
        )


def run_demo(console: Console | None = None, *, context: ContextStep | None = None) -> DemoResult:
    """Play the conversation and print it; ``context`` builds what the agent sees first.

    The default ``context`` is :func:`plain_summary_context`. The second
    part always compacts with guardrail's ``compact()``.
    """
    console = console if console is not None else Console()
    step = context if context is not None else plain_summary_context
    shop, log = Shop(), AuditLog()
    guard, tools = build(shop, log)
    console.print(Rule("guardrail demo: a refund for a damaged blender"))
    console.print(
        "In-memory shop tools guarded with @guard.tool: find_customer and list_orders (read), "
        "issue_refund (write). No network, no model: the agent is scripted, the summariser is "
        f"guardrail.replay.LossySummarizer(seed={LOSSY_SEED}), which drops, generalizes, "
        "truncates or mutates each id it sees (10% each); this seed mutates the order id."
    )
    with guard.session("demo") as ledger:
        story = _Story(console, guard, ledger)
        console.print()
        console.print(Rule("1. The conversation", align="left"))
        customer_id, second = _converse(story, tools, guard, ledger)

        console.print()
        if context is None:
            console.print(Rule("2. A plain summary compacts it", align="left"))
            console.print(
                Text(
                    "plain_compact(messages, summarize=lossy, keep_recent=1): the older turns go "
                    'to the lossy summariser, the last turn ("Yes please.") stays raw. No ledger, '
                    "no masking: the summariser sees the ids and can spoil them."
                )
            )
        else:
            console.print(Rule("2. The context the agent sees next", align="left"))
        agent_context = step(story.messages, ledger)
        _show_context(console, agent_context, "the agent sees")

        console.print()
        console.print(Rule("3. The agent acts on that context", align="left"))
        name, arguments = scripted_agent(agent_context)
        wrong = str(arguments["order_id"])
        _warn_if_foreign(console, shop, wrong, customer_id)
        first = story.call(tools.issue_refund, name, arguments)
        rejection = first if isinstance(first, Rejection) else None
        second_call = None
        if rejection is not None:
            console.print()
            console.print(Rule("4. The agent copies the id from the ledger", align="left"))
            console.print(_ledger_table(ledger))
            second_call = copy_from_ledger(arguments, rejection, ledger)
            story.call(tools.issue_refund, name, second_call)

        console.print()
        console.print(Rule("5. Outcome", align="left"))
        _outcome(console, shop, second.order_id, wrong)

        console.print()
        console.print(Rule("6. What the guard logged", align="left"))
        console.print(_events_table(log.events))

    guarded = _guarded_run(console)
    return DemoResult(
        conversation=story.messages,
        context=agent_context,
        first_call={"name": name, "arguments": arguments},
        rejection=rejection,
        second_call=second_call,
        refunds=list(shop.refunds),
        ledger=ledger,
        events=list(log.events),
        guarded=guarded,
    )


def _guarded_run(console: Console) -> GuardedRun:
    """The same conversation, in a fresh shop, compacted by ``compact()`` this time."""
    shop, log = Shop(), AuditLog()
    guard, tools = build(shop, log)
    console.print()
    console.print(Rule("7. The same conversation, compacted by guardrail", align="left"))
    console.print(
        Text(
            "The same turns, in a fresh shop (not shown again), compacted by "
            f"compact(messages, ledger, summarize=lossy, keep_recent={KEEP_RECENT}) with the same "
            "lossy summariser and seed. Every id goes to the ID LEDGER block verbatim; the "
            "summariser sees [roles] only, and has nothing to spoil."
        )
    )
    with guard.session("demo-compacted") as ledger:
        silent = _Story(Console(file=io.StringIO()), guard, ledger)
        customer_id, second = _converse(silent, tools, guard, ledger)
        result = compact(
            silent.messages,
            ledger,
            summarize=lossy_summariser(ledger),
            keep_recent=KEEP_RECENT,
            guard=guard,
        )
        agent_context = [dict(m) for m in result.messages]
        _show_context(console, agent_context, "the agent sees")
        name, arguments = scripted_agent(agent_context)
        silent.console = console
        first = silent.call(tools.issue_refund, name, arguments)
        rejection = first if isinstance(first, Rejection) else None
        if rejection is None:
            console.print(
                Text(
                    f"Allowed at the first try: [damaged_order] is {second.order_id}, "
                    "copied from the ledger block byte for byte.",
                    style="green",
                )
            )
        _outcome(console, shop, second.order_id, None)
        console.print(
            Text(
                "Same summariser, same seed: the plain summary changed the order id, compact() "
                "carried it verbatim.",
                style="bold",
            )
        )
        console.print()
        console.print(Rule("8. What the guard logged this time", align="left"))
        compacted = [e for e in log.events if e["event"] == "guardrail.compacted"]
        checked = [e for e in log.events if e["event"] == "guardrail.call_checked"]
        console.print(_events_table([*compacted, checked[-1]]))
        _warn_if_foreign(console, shop, str(arguments["order_id"]), customer_id)
    return GuardedRun(
        context=agent_context,
        report=result.report,
        call={"name": name, "arguments": arguments},
        rejection=rejection,
        refunds=list(shop.refunds),
        events=list(log.events),
    )
