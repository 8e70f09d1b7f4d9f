"""guardrail's benchmarks: what the guard costs, measured in one process beside its peers.

``python benchmarks/run.py`` runs them (``--only GROUP,...`` some of them, ``--quick``
every one at tiny sizes). Each group is a module; they share one timing helper
(:mod:`.timing`), one report (:mod:`.report`) and one place that reaches into the
library's private names (:mod:`._internals`).
"""
