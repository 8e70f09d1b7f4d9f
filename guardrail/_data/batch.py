"""Batches: the ids one source found, as columns, the one form ids travel in to a ledger.

A result's harvest, its mentions, the ids a call vouches for, an approval
and a ledger block read back all hand a ledger :class:`Batch` columns.
"""

from __future__ import annotations

from typing import NamedTuple


class Related(str):
    """A note that only says which record holds an id (``origin of ZFA04Y``), none of its own.

    It fills an entry that has no note and never replaces one: the order a
    customer's own record described stays described when a list of orders
    names the customer.
    """

    __slots__ = ()


class Batch(NamedTuple):
    """The ids one producer found, as columns: how ids travel from a result into a ledger.

    ``kind``, ``path`` (the declaration) and ``role`` (a role template) are
    shared; ``values``, ``keys``, ``statuses`` (None when no status is
    read) and ``notes`` (None when no note is read) hold one item per id. A
    result of tens of thousands of ids costs no object per id on its way to
    the ledger.
    """

    kind: str
    path: str
    role: str | None
    values: list[str]
    keys: list[str]
    statuses: list[str | None] | None
    notes: list[str | None] | None = None
    #: The provenance tier the ids enter with (None: the admission's), and whether an outside
    #: party chose them (a producer declared ``Id(kind, outside=True)``).
    tier: str | None = None
    outside: bool = False

    @classmethod
    def one(
        cls,
        kind: str,
        value: str,
        key: str,
        path: str,
        status: str | None = None,
        role: str | None = None,
    ) -> Batch:
        """A batch of one id, for a caller that has a single id to admit."""
        return cls(kind, path, role, [value], [key], None if status is None else [status])
