"""A telecom support desk to run recorded conversations against, live: ``guardrail replay --live``.

Customers (``C1001``), lines (``L1001``, ``L1002``, ... dense: one character
apart), bills, devices, and plans from the business's catalog (``P1003``,
``P1004``, ``P1005``), which no tool lists: the agent knows them from its
system prompt, as the operator does. Customers give their phone number as
they write it (``(555) 123-2002``, ``+1 555 123 2002``); the tools write
``555-123-2002`` and find a number however it is spelled. One lookup,
``get_details_by_id``, takes an id of any of five kinds. A tool that fails
returns a text starting ``Error:``. ``change_plan`` and ``suspend_line``
change the desk's records, and a later lookup sees the change.

``fresh()`` opens a desk with its starting data and returns its tools.
``live_telecom.jsonl`` beside this file holds conversations recorded against
it, and ``live_telecom.toml`` its manifest::

    guardrail replay examples/live_telecom.jsonl --manifest examples/live_telecom.toml \\
        --live examples.live_telecom:fresh
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The plans on sale: the operator's catalog, which the system prompt quotes.
PLANS: dict[str, dict[str, Any]] = {
    "P1003": {"name": "Basic", "price": 15, "data_gb": 5},
    "P1004": {"name": "Plus", "price": 25, "data_gb": 20},
    "P1005": {"name": "Max", "price": 40, "data_gb": 100},
}
#: The system prompt the conversations were recorded with: the catalog, in the operator's words.
SYSTEM_PROMPT = (
    "You are the support agent of a phone company. Plans on sale: P1003 (Basic, 15/month), "
    "P1004 (Plus, 25/month), P1005 (Max, 40/month). Look customers up by phone number."
)

CUSTOMERS: dict[str, dict[str, Any]] = {
    "C1001": {
        "name": "Ana Lima",
        "phone": "555-123-2002",
        "line_ids": ["L1001", "L1002"],
        "bill_ids": ["B3001"],
    },
    "C1002": {
        "name": "Ben Ode",
        "phone": "555-123-3003",
        "line_ids": ["L1003"],
        "bill_ids": ["B3002"],
    },
}
LINES: dict[str, dict[str, Any]] = {
    "L1001": {"customer_id": "C1001", "phone": "555-123-2002", "plan_id": "P1003",
              "device_id": "D2001", "status": "active"},
    "L1002": {"customer_id": "C1001", "phone": "555-123-2005", "plan_id": "P1004",
              "device_id": "D2002", "status": "active"},
    "L1003": {"customer_id": "C1002", "phone": "555-123-3003", "plan_id": "P1003",
              "device_id": "D2003", "status": "active"},
}  # fmt: skip
BILLS: dict[str, dict[str, Any]] = {
    "B3001": {"customer_id": "C1001", "amount": 40, "status": "due"},
    "B3002": {"customer_id": "C1002", "amount": 15, "status": "paid"},
}
DEVICES: dict[str, dict[str, Any]] = {
    "D2001": {"model": "Pixel 8", "line_id": "L1001"},
    "D2002": {"model": "iPhone 15", "line_id": "L1002"},
    "D2003": {"model": "Galaxy S23", "line_id": "L1003"},
}

_DIGITS = re.compile(r"[0-9]")


def _digits(phone: str) -> str:
    """A phone number's national digits: how the desk finds a number however it is written."""
    digits = "".join(_DIGITS.findall(phone))
    return digits[1:] if len(digits) == 11 and digits.startswith("1") else digits


@dataclass
class Desk:
    """One desk's records, changed by the write tools."""

    customers: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(CUSTOMERS))
    lines: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(LINES))
    bills: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(BILLS))
    devices: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(DEVICES))


def tools(desk: Desk) -> dict[str, Callable[..., str]]:
    """The desk's tools, working on ``desk``."""

    def find_customer_by_phone(phone: str) -> str:
        """The customer whose number this is, written any way."""
        wanted = _digits(phone)
        for customer_id, customer in desk.customers.items():
            numbers = [desk.lines[line]["phone"] for line in customer["line_ids"]]
            if wanted in {_digits(number) for number in [customer["phone"], *numbers]}:
                return json.dumps({"customer_id": customer_id, **customer})
        return "Error: no customer with this phone number"

    def get_details_by_id(id: str) -> str:  # noqa: A002 (the tool's own parameter name)
        """Details of a customer, line, plan, bill or device, by its id."""
        tables = {
            "C": ("customer_id", desk.customers),
            "L": ("line_id", desk.lines),
            "P": ("plan_id", PLANS),
            "B": ("bill_id", desk.bills),
            "D": ("device_id", desk.devices),
        }
        name, table = tables.get(id[:1], ("", {}))
        if id not in table:
            return f"Error: no record with id {id}"
        return json.dumps({name: id, **table[id]})

    def change_plan(line_id: str, plan_id: str) -> str:
        """Move a line to another plan of the catalog."""
        if line_id not in desk.lines:
            return "Error: no such line"
        if plan_id not in PLANS:
            return "Error: no such plan"
        desk.lines[line_id]["plan_id"] = plan_id
        return json.dumps({"line_id": line_id, **desk.lines[line_id]})

    def suspend_line(line_id: str, reason: str) -> str:
        """Suspend a line (a lost or stolen phone)."""
        if line_id not in desk.lines:
            return "Error: no such line"
        desk.lines[line_id]["status"] = "suspended"
        return json.dumps({"line_id": line_id, **desk.lines[line_id]})

    def send_verification_code(phone: str) -> str:
        """Text a one-time code to a customer's number (an SMS gateway takes +1 5551232002 too)."""
        wanted = _digits(phone)
        for customer_id, customer in desk.customers.items():
            if _digits(customer["phone"]) == wanted:
                return json.dumps({"customer_id": customer_id, "sent_to": customer["phone"]})
        return "Error: not a customer's number"

    def pay_bill(bill_id: str) -> str:
        """Mark a due bill paid."""
        bill = desk.bills.get(bill_id)
        if bill is None:
            return "Error: no such bill"
        if bill["status"] != "due":
            return f"Error: the bill is {bill['status']}"
        bill["status"] = "paid"
        return json.dumps({"bill_id": bill_id, **bill})

    return {
        function.__name__: function
        for function in (
            find_customer_by_phone,
            get_details_by_id,
            change_plan,
            suspend_line,
            send_verification_code,
            pay_bill,
        )
    }


#: A fresh environment, for ``tools``: with these two names the module itself is what
#: ``--live examples.live_telecom`` takes.
environment = Desk


def fresh() -> dict[str, Callable[..., str]]:
    """The tools of a desk just opened: one per conversation, and per side of it."""
    return tools(Desk())
