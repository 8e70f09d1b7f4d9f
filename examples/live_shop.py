"""A small shop to run recorded conversations against, live: ``guardrail replay --live``.

Its tools show order ids as ``#W1000001`` and want them so; customers type
``W1000001``. A tool that fails returns a text starting ``Error:`` instead of
raising (an unknown user, an unknown order, an order already cancelled), as
many real tool sets do. ``cancel_order`` and ``update_address`` change the
shop, and a later ``get_order_details`` sees the change.

``fresh()`` opens a shop with its starting data and returns its tools, so each
conversation (and each side of it, with and without the guard) runs on a shop
of its own. ``live_shop.jsonl`` beside this file holds conversations recorded
against it, and ``live_shop.toml`` its manifest::

    guardrail replay examples/live_shop.jsonl --manifest examples/live_shop.toml \\
        --live examples.live_shop:fresh
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The shop's starting data: customers by user id, orders by order id as the tools show it.
USERS: dict[str, dict[str, Any]] = {
    "noa_kim_1234": {
        "name": "Noa Kim",
        "email": "noa.kim@example.com",
        "address": "4 Quay Road",
        "orders": ["#W1000001", "#W1000002"],
    },
    "ivy_ray_2222": {
        "name": "Ivy Ray",
        "email": "ivy.ray@example.com",
        "address": "9 Mill Lane",
        "orders": ["#W2000001", "#W2000002"],
    },
}
ORDERS: dict[str, dict[str, Any]] = {
    "#W1000001": {"user_id": "noa_kim_1234", "status": "delivered", "items": ["lamp"]},
    "#W1000002": {"user_id": "noa_kim_1234", "status": "pending", "items": ["kettle"]},
    "#W2000001": {"user_id": "ivy_ray_2222", "status": "delivered", "items": ["desk"]},
    "#W2000002": {"user_id": "ivy_ray_2222", "status": "pending", "items": ["chair", "rug"]},
}


@dataclass
class Shop:
    """One shop's state: its customers and orders, changed by the write tools."""

    users: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(USERS))
    orders: dict[str, dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(ORDERS))

    def order(self, order_id: str) -> dict[str, Any]:
        """An order as the tools show it."""
        return {"order_id": order_id, **self.orders[order_id]}


def tools(shop: Shop) -> dict[str, Callable[..., str]]:
    """The shop's tools, working on ``shop``."""

    def find_user_id_by_email(email: str) -> str:
        """The user id of the customer with this e-mail address."""
        for user_id, user in shop.users.items():
            if user["email"] == email.strip().lower():
                return user_id
        return "Error: user not found"

    def get_user_details(user_id: str) -> str:
        """A customer's name, address and order ids."""
        if user_id not in shop.users:
            return "Error: user not found"
        return json.dumps({"user_id": user_id, **shop.users[user_id]})

    def get_order_details(order_id: str) -> str:
        """An order's status and items; the id as the tools show it, '#W' and seven digits."""
        if order_id not in shop.orders:
            return "Error: order not found"
        return json.dumps(shop.order(order_id))

    def cancel_order(order_id: str, reason: str) -> str:
        """Cancel a pending order."""
        if order_id not in shop.orders:
            return "Error: order not found"
        if shop.orders[order_id]["status"] != "pending":
            return f"Error: order is {shop.orders[order_id]['status']}, only pending orders cancel"
        shop.orders[order_id]["status"] = "cancelled"
        return json.dumps(shop.order(order_id))

    def update_address(user_id: str, address: str) -> str:
        """Change a customer's address."""
        if user_id not in shop.users:
            return "Error: user not found"
        shop.users[user_id]["address"] = address
        return json.dumps({"user_id": user_id, **shop.users[user_id]})

    return {
        function.__name__: function
        for function in (
            find_user_id_by_email,
            get_user_details,
            get_order_details,
            cancel_order,
            update_address,
        )
    }


#: A fresh environment, for ``tools``: with these two names the module itself is what
#: ``--live examples.live_shop`` takes.
environment = Shop


def fresh() -> dict[str, Callable[..., str]]:
    """The tools of a shop just opened: one per conversation, and per side of it."""
    return tools(Shop())
