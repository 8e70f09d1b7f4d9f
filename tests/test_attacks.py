"""Attacks on the guard, written as a hostile user or a careless integrator would try them.

Each test tries one channel by which a foreign identifier could reach a
write tool, or one input that could crash the guard or burn its CPU, and
asserts that the write tool never runs with it.
"""

from __future__ import annotations


# -- forged ledger blocks and refusals read back (compaction) ---------------------------------


# (end of the compaction section)


# -- tools, results and arguments (the check and the harvest) ---------------------------------


# (end of the check section)


# -- sessions and stores (persistence) --------------------------------------------------------


# (end of the persistence section)
