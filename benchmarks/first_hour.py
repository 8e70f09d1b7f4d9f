"""The steps of docs/first-hour.md, timed as a reader runs them (python benchmarks/first_hour.py).

Run it from the root of a fresh clone after ``time make demo``, with the interpreter of
``.venv``. Each step's blocks are written to files in a scratch folder (``first-hour-work``,
removed after) and each command runs under a wall clock, as the page's reader would run it:
a Python block as ``python FILE``, a ``sh`` line as written, with ``.venv/bin`` first on the
``PATH``. Before the ``pytest`` line, ``pip install pytest`` where ``.venv`` has no pytest
(``make demo`` leaves it out).
Prints a Markdown table of the times; a step that fails stops the run with its output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import docblocks  # noqa: E402 - the path above makes the repository importable

PAGE = ROOT / "docs" / "first-hour.md"


def _timed(argv: list[str], folder: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return seconds


def main() -> None:
    """Run every step of the page and print how long each command took."""
    text = PAGE.read_text(encoding="utf-8")
    lines = text.splitlines()
    folder = ROOT / "first-hour-work"
    folder.mkdir(exist_ok=True)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env["PYTHONPATH"] = str(folder)
    rows: list[tuple[str, str, float]] = []
    try:
        for number, block in enumerate(docblocks.blocks(text, "docs/first-hour.md"), 1):
            if not block.runs:
                continue
            step = next(line for line in reversed(lines[: block.line]) if line.startswith("## "))
            if block.file is not None:
                (folder / block.file).write_text(block.code, encoding="utf-8")
                continue  # a file the lines after it use
            if block.language == "python":
                name = f"block_{number}.py"
                (folder / name).write_text(block.code, encoding="utf-8")
                commands = [["python", name]]
            else:
                commands = [command.argv for command in docblocks.commands(block.code)]
            for argv in commands:
                runs_pytest = argv[0] == "pytest" or argv[1:3] == ["-m", "pytest"]
                if runs_pytest and shutil.which("pytest", path=str(bin_dir)) is None:
                    install = [sys.executable, "-m", "pip", "install", "-q", "pytest"]
                    rows.append((step, "pip install pytest", _timed(install, folder, env)))
                seconds = _timed([str(bin_dir / argv[0]), *argv[1:]], folder, env)
                rows.append((step, " ".join(argv)[:60], seconds))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("| step | command | seconds |\n|---|---|---:|")
    for step, command, seconds in rows:
        print(f"| {step[3:]} | `{command}` | {seconds:.2f} |")


if __name__ == "__main__":
    main()
