"""A small shop of the tests' own, shaped as real tool sets are: the shop case.

Its tools write an order id as ``#W5061109`` and find it only so spelled
(``W5061109``, as users type it, is not found), and they report a failure by
returning text (``Error: user not found``), not by raising. A guard that
rewrites a correct ``#W5061109`` to the user's ``W5061109``, refuses it, or
takes an error text for a success breaks calls that work without it; the
tests that import this module hold it to never doing so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from guardrail import Guard
from guardrail._guard.audit import SilentLogger
from guardrail._guard.engine import Mode

#: The shop's customers: each one's name and orders, as the tools write them.
USERS: dict[str, dict[str, Any]] = {
    "yusuf_rossi_9620": {"name": "Yusuf Rossi", "orders": ["#W5061109", "#W2378156"]},
    "mia_li_3668": {"name": "Mia Li", "orders": ["#W8855135"]},
}
#: The shop's orders, by id as the tools write it.
ORDERS: dict[str, dict[str, Any]] = {
    "#W5061109": {"user_id": "yusuf_rossi_9620", "status": "pending", "total": 40},
    "#W2378156": {"user_id": "yusuf_rossi_9620", "status": "delivered", "total": 99},
    "#W8855135": {"user_id": "mia_li_3668", "status": "pending", "total": 12},
}

#: The shop's tools as a manifest: order ids fold the ``#`` the user leaves out.
MANIFEST: dict[str, Any] = {
    "version": 1,
    "kinds": {
        "order": {"pattern": "#?W[0-9]{7}", "normalize": ["strip", "prefix:#"]},
        "user": {"pattern": "[a-z]+_[a-z]+_[0-9]{4}"},
    },
    "tools": {
        "find_user_id_by_name": {"effect": "read", "produces": {"$": "user"}},
        # A user record holds no user_id: a success confirms the id it took (it fails with
        # "Error: user not found" for an unknown one).
        "get_user_details": {
            "effect": "read",
            "verifies": "on_success",
            "ids": {"user_id": "user"},
            "produces": {"orders[*]": "order"},
        },
        "get_order_details": {
            "effect": "read",
            "ids": {"order_id": "order"},
            "produces": {"order_id": {"kind": "order", "status": "status"}},
        },
        "cancel_pending_order": {
            "effect": "write",
            "ids": {"order_id": "order"},
            "produces": {"order_id": {"kind": "order", "status": "status"}},
        },
        "modify_user_address": {"effect": "write", "ids": {"user_id": "user"}},
    },
}


class Shop:
    """One conversation's shop: a fresh copy of the data, and the tools over it.

    Each tool records the arguments it received exactly as given (``calls``),
    so a test sees what the guard handed it.
    """

    def __init__(self) -> None:
        self.users = copy.deepcopy(USERS)
        self.orders = copy.deepcopy(ORDERS)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def find_user_id_by_name(self, first_name: str, last_name: str) -> str:
        """The user id of a customer, as plain text."""
        self.calls.append(
            ("find_user_id_by_name", {"first_name": first_name, "last_name": last_name})
        )
        for user_id, user in self.users.items():
            if user["name"] == f"{first_name} {last_name}":
                return user_id
        return "Error: user not found"

    def get_user_details(self, user_id: str) -> dict[str, Any] | str:
        """A customer's record (no user_id field) with the ids of their orders."""
        self.calls.append(("get_user_details", {"user_id": user_id}))
        user = self.users.get(user_id)
        if user is None:
            return "Error: user not found"
        return {"name": user["name"], "orders": list(user["orders"])}

    def get_order_details(self, order_id: str) -> dict[str, Any] | str:
        """An order, found only by its id as the shop writes it (``#W...``)."""
        self.calls.append(("get_order_details", {"order_id": order_id}))
        order = self.orders.get(order_id)
        if order is None:
            return "Error: order not found"
        return {"order_id": order_id, **order}

    def cancel_pending_order(self, order_id: str, reason: str) -> dict[str, Any] | str:
        """Cancel a pending order; ``Error: ...`` text for any other."""
        self.calls.append(("cancel_pending_order", {"order_id": order_id, "reason": reason}))
        order = self.orders.get(order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != "pending":
            return "Error: non-pending order cannot be cancelled"
        order["status"] = "cancelled"
        return {"order_id": order_id, **order}

    def modify_user_address(self, user_id: str, address: str) -> dict[str, Any] | str:
        """Change a customer's address."""
        self.calls.append(("modify_user_address", {"user_id": user_id, "address": address}))
        user = self.users.get(user_id)
        if user is None:
            return "Error: user not found"
        user["address"] = address
        return {"name": user["name"], "address": address}

    def tools(self) -> dict[str, Callable[..., Any]]:
        """The tools by name."""
        return {
            "find_user_id_by_name": self.find_user_id_by_name,
            "get_user_details": self.get_user_details,
            "get_order_details": self.get_order_details,
            "cancel_pending_order": self.cancel_pending_order,
            "modify_user_address": self.modify_user_address,
        }

    def received(self, tool: str) -> list[dict[str, Any]]:
        """The arguments each call of ``tool`` received, in order."""
        return [arguments for name, arguments in self.calls if name == tool]


def shop_guard(mode: Mode = "reprompt", **options: Any) -> Guard:
    """A guard that knows the shop's tools from :data:`MANIFEST` (audit silenced)."""
    options.setdefault("logger", SilentLogger())
    return Guard.from_manifest(MANIFEST, mode=mode, **options)


def guarded_shop(mode: Mode = "reprompt", **options: Any) -> tuple[Shop, Guard, dict[str, Any]]:
    """A fresh shop, a guard, and the shop's tools guarded by it (``@guard.tool``), by name.

    The tools are declared as :data:`MANIFEST` declares them, through the
    decorator: a call checks, runs and records as a program's would.
    """
    options.setdefault("logger", SilentLogger())
    shop = Shop()
    guard = Guard(mode=mode, **options)
    for name, kind in MANIFEST["kinds"].items():
        guard.add_kind(name, **kind)
    tools = {
        name: guard.tool(name=name, **MANIFEST["tools"][name])(function)
        for name, function in shop.tools().items()
    }
    return shop, guard, tools
