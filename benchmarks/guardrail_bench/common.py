"""What the groups share: sizes, the run's state, the data, and logging as in production."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from guardrail import Guard, Ledger

from ._internals import admit, batch
from .report import Report

ALPHABET = string.ascii_letters + string.digits
CUSTOMER, ORDER = "customer", "order"


@dataclass(frozen=True)
class Sizes:
    """How big and how long: the full run, or the quick harness check."""

    ledgers: tuple[int, ...]  # the allowed path's ledgers, for the scaling curve
    table: tuple[int, int]  # the two of them the table quotes
    refused_ledger: int
    growth: int  # ids added between two refusals, in the growing-ledger case
    harvest_ids: int
    harvest_bytes: int
    memory_ledgers: tuple[int, ...]
    sessions: int
    session_entries: int
    transcripts: tuple[int, ...]
    compaction_rounds: tuple[int, ...]  # per transcript size: compaction takes seconds
    compaction_entries: int
    rounds: int  # interleaved rounds for the per-call groups
    sample: float  # seconds one sample of a per-call case aims at
    slow_rounds: int  # rounds for the cases that take milliseconds or more
    naive_rounds: int
    store_ledgers: tuple[int, ...] = (1_000, 10_000, 100_000)  # entries per stored session
    finished_sessions: int = 20_000  # conversations ended, for the memory a guard holds
    harvest_records: tuple[int, ...] = (10, 1_000, 100_000)  # records per result, harvest sizes


FULL = Sizes(
    ledgers=(1_000, 3_000, 10_000, 30_000, 100_000),
    table=(10_000, 100_000),
    refused_ledger=100_000,
    growth=300,
    harvest_ids=40_000,
    harvest_bytes=2_000_000,
    memory_ledgers=(10_000, 100_000),
    sessions=10_000,
    session_entries=50,
    transcripts=(1_000, 10_000, 100_000),
    compaction_rounds=(5, 3, 1),
    compaction_entries=5_000,
    rounds=25,
    sample=0.04,
    slow_rounds=9,
    naive_rounds=3,
)
QUICK = Sizes(
    ledgers=(100, 1_000),
    table=(100, 1_000),
    refused_ledger=1_000,
    growth=300,
    harvest_ids=400,
    harvest_bytes=20_000,
    memory_ledgers=(100, 1_000),
    sessions=20,
    session_entries=5,
    transcripts=(20, 50, 100),
    compaction_rounds=(2, 2, 2),
    compaction_entries=50,
    rounds=2,
    sample=0.001,
    slow_rounds=2,
    naive_rounds=1,
    store_ledgers=(100,),
    finished_sessions=100,
    harvest_records=(10, 100),
)


@dataclass
class Run:
    """One run of some groups: its size, seeded generator and report.

    ``store_entries`` replaces the ledger sizes of the store groups (``--store-entries``);
    ``shared`` holds what consecutive groups build once (the allowed path's ledgers).
    """

    quick: bool
    rng: random.Random
    report: Report = field(default_factory=Report)
    store_entries: tuple[int, ...] | None = None
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def sizes(self) -> Sizes:
        return QUICK if self.quick else FULL

    def pick(self, full: Any, quick: Any) -> Any:
        """``full`` on a full run, ``quick`` on a quick one: a group's own sizes."""
        return quick if self.quick else full


# -- logging ------------------------------------------------------------------------------------


@contextlib.contextmanager
def production_logging() -> Iterator[None]:
    """structlog filtering below WARNING, rendering JSON to a sink; restored afterwards.

    Refusals are warnings, so the refused path renders each one; the sink is
    the null device so the terminal is not flooded, as a log file would be.
    """
    saved = structlog.get_config()
    with Path(os.devnull).open("w") as sink:
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso"),
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=structlog.PrintLoggerFactory(file=sink),
            cache_logger_on_first_use=True,
        )
        try:
            yield
        finally:
            structlog.configure(**saved)


@contextlib.contextmanager
def default_logging() -> Iterator[None]:
    """structlog as a program that never configured it: the audit goes to the stdlib logger.

    The library routes its events to structlog only when the program configured
    it; this undoes an earlier group's configuration for the block, then puts it back.
    """
    was_configured = structlog.is_configured()
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**saved)


# -- data ---------------------------------------------------------------------------------------


def ids(rng: random.Random, prefix: str, length: int, count: int) -> list[str]:
    """``count`` distinct ids such as ``ord_8F3kQ2xM01``."""
    made: dict[str, None] = {}
    while len(made) < count:
        made[prefix + "".join(rng.choices(ALPHABET, k=length))] = None
    return list(made)


def make_guard(**options: Any) -> Guard:
    """The shop guard of the core groups: customers, orders and a ``list_orders`` lookup."""
    guard = Guard(**{"capacity": 10_000_000, **options})
    guard.add_kind(CUSTOMER, pattern=r"cus_[A-Za-z0-9]{8}")
    guard.add_kind(ORDER, pattern=r"ord_[A-Za-z0-9]{10}")
    guard.declare(
        "list_orders",
        produces={"orders[*].order_id": ORDER, "orders[*].customer_id": CUSTOMER},
        effect="read",
    )
    return guard


def fill(guard: Guard, customers: Sequence[str], orders: Sequence[str]) -> Ledger:
    """A ledger holding ``customers`` and ``orders``, admitted as one tool result would be."""
    ledger = guard.new_ledger(f"bench-{len(customers) + len(orders)}")
    admit(ledger, [batch(CUSTOMER, customers), batch(ORDER, orders)])
    return ledger


def scope(guard: Guard, ledger: Ledger) -> Callable[[], Any]:
    """A factory of ``with`` blocks that make ``ledger`` the current session of ``guard``."""
    return lambda: guard.session(ledger.session_id or "bench", ledger=ledger)
