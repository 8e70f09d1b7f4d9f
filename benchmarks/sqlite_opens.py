"""Open errors when processes open one new SQLite file at once (benchmarks/sqlite_opens.py).

``--processes`` processes (8 unless told) open each of ``--files`` new files (125) at the
same moment (a barrier before each), with the default timeout: 1,000 opens. Prints how
many failed and the first errors. To compare with another checkout, run this file with
that checkout first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

from guardrail.errors import StoreError
from guardrail.stores import SQLiteStore


def _opener(folder: str, files: int, barrier: Any, errors: Any) -> None:
    failed = []
    for n in range(files):
        barrier.wait()
        try:
            SQLiteStore(Path(folder) / f"new-{n}.sqlite3").close()
        except StoreError as exc:
            failed.append(str(exc))
    errors.put(failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--files", type=int, default=125)
    options = parser.parse_args()
    context = multiprocessing.get_context("fork")
    barrier, errors = context.Barrier(options.processes), context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        procs = [
            context.Process(target=_opener, args=(folder, options.files, barrier, errors))
            for _ in range(options.processes)
        ]
        start = time.perf_counter()
        for proc in procs:
            proc.start()
        failed = [message for _ in procs for message in errors.get()]
        for proc in procs:
            proc.join()
        took = time.perf_counter() - start
    opens = options.processes * options.files
    print(f"{len(failed)} open errors in {opens} concurrent opens ({took:.1f} s)")
    for message in failed[:3]:
        print(" ", message)


if __name__ == "__main__":
    main()
