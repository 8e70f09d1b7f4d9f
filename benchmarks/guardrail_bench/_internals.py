"""The library's private names the benchmarks use, imported here and nowhere else.

The allowed, refused and memory groups build ledgers of 100,000 entries; going through
``guard.record`` would time JSON walking that they do not mean to measure, so they
admit prepared columns of ids the way a harvested result is admitted. When the library
moves these names, this module is the one to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from guardrail import Ledger
from guardrail._data.batch import Batch
from guardrail.ledger import Source
from guardrail.ledger._ledger import state_of
from guardrail.stores._json import encode

__all__ = ["Batch", "admit", "batch", "encoded_size"]

#: Where the prepared ids say they came from: one ``list_orders`` result.
SOURCE = Source("list_orders", None, "orders[*]", 0)


def batch(kind: str, values: Sequence[str], path: str = "orders[*]") -> Batch:
    """One column of ids of ``kind``, as a declared producer at ``path`` yields it."""
    return Batch(kind, path, None, list(values), list(values), None)


def admit(ledger: Ledger, batches: Iterable[Batch], *, tool: str = "list_orders") -> None:
    """Admit ``batches`` into ``ledger`` as one successful result of ``tool``."""
    source = SOURCE if tool == SOURCE.tool else Source(tool, None, SOURCE.path, 0)
    state_of(ledger).admit(batches, source=source)


def encoded_size(records: Iterable[Any]) -> int:
    """The bytes of the store records as a store writes them (JSON text)."""
    return sum(len(encode(record).encode()) for record in records)
