"""The running guard: the facade a program builds, and what it composes.

- :mod:`~guardrail._guard.facade`: :class:`~guardrail.Guard`, the one object a
  program holds: kinds and tools declared, sessions opened, calls checked,
  the user's answers to approval requests taken.
- :mod:`~guardrail._guard.decorator`: ``@guard.tool``, the check before a tool
  function and the record after it.
- :mod:`~guardrail._guard.patching`: guarding a function of a module the
  program cannot edit, in place.
- :mod:`~guardrail._guard.binding`: a guard's declarations (a manifest's)
  applied to the callables that run its tools, by name.
- :mod:`~guardrail._guard.sessions`: which ledger is current, the sessions
  cached as live ledgers, the store behind them.
- :mod:`~guardrail._guard.journal`: a ledger kept in a store: what changed since
  the last write, and catching up with other writers.
- :mod:`~guardrail._guard.engine`: checks and records against a given ledger,
  in the guard's mode, each decision logged.
- :mod:`~guardrail._guard.registry`: a guard's kinds and tool specs, and the
  check plans compiled from them.
- :mod:`~guardrail._guard.audit`: every decision as a structlog event.

Imports: everything below it (:mod:`guardrail._check`,
:mod:`guardrail._provenance`, :mod:`guardrail.stores`, :mod:`guardrail.ledger`,
...); nothing above (compaction, replay, integrations, the command). Its own
modules top-down in the order above.
"""
