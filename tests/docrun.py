"""Runs the code blocks of a page (see :mod:`tests.docblocks`) the way a reader would.

Python runs; a TOML or JSON manifest loads with ``Guard.from_manifest`` (a
``pyproject.toml`` table has its dependencies read); a ``sh`` block's ``guardrail``
lines run the command in process, ``python - <<'EOF'`` runs its here-document,
``python FILE`` and ``pytest`` run in a subprocess. Whatever else a shell line runs
(``pip``, ``make``, ``git``) needs a *Needs* line. Everything runs in a scratch
folder holding links to the repository's ``examples/`` and ``corpus/``.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import structlog
import structlog.testing
from packaging.requirements import Requirement

from guardrail import Guard
from guardrail._guard.audit import _Routing
from guardrail.cli import _main as cli

from . import docblocks
from .docblocks import HOW_TO_FIX, Block

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Folders of the repository the examples name by relative path.
LINKED = ("examples", "corpus", "benchmarks")


class BlockFailed(AssertionError):
    """A block did not run as written, or printed something else than its page shows."""


class Runner:
    """Runs one page's blocks in order; a context manager that puts everything back after."""

    def __init__(self, folder: Path, repo: Path, request: pytest.FixtureRequest) -> None:
        self.folder = folder
        self.repo = repo
        self.request = request
        self.namespace: dict[str, Any] = {}
        self.skipped: list[Block] = []
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> Runner:
        for name in LINKED:
            link = self.folder / name
            if not link.exists():
                link.symlink_to(self.repo / name, target_is_directory=True)
        patch = self._exit.enter_context(pytest.MonkeyPatch.context())
        patch.chdir(self.folder)
        patch.syspath_prepend(str(self.folder))  # a block's module file is importable
        config = structlog.get_config()
        configured = structlog.is_configured()
        loggers = [logging.getLogger(), logging.getLogger("guardrail")]
        saved = [(list(log.handlers), log.level, log.propagate) for log in loggers]
        to_stdlib = _Routing.to_stdlib  # guardrail.audit_to_json() sets it

        def restore() -> None:
            # configure() marks structlog configured: a program that never configured it
            # (the audit's route to the standard library) must stay one.
            if configured:
                structlog.configure(**config)
            else:
                structlog.reset_defaults()
            for log, (handlers, level, propagate) in zip(loggers, saved, strict=True):
                log.handlers[:], log.level, log.propagate = handlers, level, propagate
            _Routing.to_stdlib = to_stdlib
            self._forget_modules()

        self._exit.callback(restore)
        return self

    def _forget_modules(self) -> None:
        """Modules of the scratch folder are imported afresh by the next block, as by a program."""
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", "") or "").startswith(str(self.folder)):
                del sys.modules[name]

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._exit.close()

    # -- one block --------------------------------------------------------------------------

    def run(self, block: Block) -> None:
        """Run one block; :class:`BlockFailed` says where, why and how to fix or mark it."""
        if block.hidden_mark:
            _fail(block, "has an HTML comment before it, which readers of the page do not see")
        if not block.language:
            _fail(block, "has no language: write ```python, ```toml, ```json, ```sh or ```text")
        if block.language not in docblocks.CODE:
            if block.language != docblocks.OUTPUT:
                _fail(block, f"is in {block.language!r}, which the docs test cannot run")
            return  # an illustration: a diagram, a synopsis
        if block.needs is not None:
            self.skipped.append(block)
            return
        if block.file is not None:
            path = self.folder / block.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.code, encoding="utf-8")
        runs: dict[str, Callable[[Block], str]] = {
            "python": self._python,
            "toml": self._manifest,
            "json": self._manifest,
            "sh": self._shell,
        }
        try:
            printed = runs[block.language](block)
        except BlockFailed:
            raise
        except (Exception, SystemExit) as exc:
            # The block's own lines first: where in the block it broke.
            frames = traceback.extract_tb(exc.__traceback__)
            inside = [frame for frame in frames if frame.filename == block.page] or frames[-3:]
            where = "".join(traceback.format_list(inside))
            _fail(block, f"raised {type(exc).__name__}: {exc}\n{where}")
        if block.output is not None and not docblocks.output_matches(block.output, printed):
            diff = difflib.unified_diff(
                block.output.splitlines(),
                printed.splitlines(),
                "shown in the page",
                "printed",
                lineterm="",
            )
            _fail(block, "prints something else than the block after it shows:\n" + "\n".join(diff))

    def _python(self, block: Block, code: str | None = None) -> str:
        # A block without the mark runs on its own; the names it defines first on the page are
        # then the page's, for the blocks after it that say they continue the example (a later
        # block on its own with a guard of its own does not replace the page's guard).
        namespace = self.namespace if block.continues else {"__name__": "docs_example"}
        before = set(namespace)
        out = io.StringIO()
        # Audit events are captured, not printed: the output is the example's own.
        with structlog.testing.capture_logs(), contextlib.redirect_stdout(out):
            # Compiled as the page, at the block's lines: a traceback names the page's line.
            source = "\n" * block.line + (code or block.code)
            exec(compile(source, block.page, "exec"), namespace)
            for name in [n for n in namespace if n.startswith("test_") and n not in before]:
                self._run_test(namespace[name])
        self._forget_modules()
        if namespace is not self.namespace:
            for name, value in namespace.items():
                self.namespace.setdefault(name, value)
        return out.getvalue()

    def _run_test(self, test: Any) -> None:
        """A pytest test the block defines, called with the fixtures it names."""
        import inspect

        parameters = inspect.signature(test).parameters
        test(**{name: self.request.getfixturevalue(name) for name in parameters})

    def _manifest(self, block: Block) -> str:
        data = json.loads(block.code) if block.language == "json" else tomllib.loads(block.code)
        if isinstance(data, dict) and ("kinds" in data or "tools" in data):
            path = self.folder / (block.file or f"block.{block.language}")
            path.write_text(block.code, encoding="utf-8")
            Guard.from_manifest(path)
        elif isinstance(data, dict) and "project" in data:
            for line in data["project"].get("dependencies", []):
                assert Requirement(line).name == "guardrail-ids", line
        elif block.file is None:
            _fail(block, "is neither a manifest ([kinds], [tools]) nor a pyproject.toml table")
        return ""

    def _shell(self, block: Block) -> str:
        return "".join(self._command(block, command) for command in docblocks.commands(block.code))

    def _command(self, block: Block, command: docblocks.Command) -> str:
        program, *args = command.argv
        if program == "guardrail":
            return self._guardrail(block, args)
        if program in ("python", "python3") and args == ["-"] and command.stdin is not None:
            with _shared_side_by_side(self.request):
                return self._python(block, command.stdin)
        if program in ("python", "python3", "pytest"):
            start = [sys.executable] if program != "pytest" else [sys.executable, "-m", "pytest"]
            done = subprocess.run(
                [*start, *args],
                cwd=self.folder,
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
                env={**os.environ, "PYTHONPATH": str(self.folder)},
            )
            if done.returncode != 0:
                _fail(
                    block,
                    f"ran {command.argv}, exit code {done.returncode}:\n"
                    f"{done.stdout[-2000:]}{done.stderr[-2000:]}",
                )
            return done.stdout
        _fail(
            block,
            f"cannot run {program!r}: the docs test runs 'guardrail ...', "
            "'python - <<EOF', 'python FILE' and 'pytest' lines",
        )
        raise AssertionError  # pragma: no cover - _fail raised

    def _guardrail(self, block: Block, args: list[str]) -> str:
        # The corpus replay the README shows is the suite's one run of it (tests/conftest.py).
        from .conftest import CORPUS_REPLAY

        resolved = [str(Path(arg).resolve()) if Path(arg).exists() else arg for arg in args]
        if resolved == list(CORPUS_REPLAY):
            shared: str = self.request.getfixturevalue("corpus_replay").printed
            return shared
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(args)
        if code not in (0, 1):  # 1: guardrail check refused the call, as the page may show
            _fail(block, f"ran guardrail {' '.join(args)}: exit code {code}\n{err.getvalue()}")
        return out.getvalue()


@contextlib.contextmanager
def _shared_side_by_side(request: pytest.FixtureRequest) -> Any:
    """side_by_side() over the whole corpus, keep_recent 0 to 4, is the suite's one sweep."""
    import guardrail.replay

    from .conftest import AIRLINE_MANIFEST, corpus_conversations

    real = guardrail.replay.side_by_side

    def shared(conversations: Any, guard: Guard, **options: Any) -> Any:
        same = (
            list(options.get("keep_recent", ())) == list(range(5))
            and set(options) == {"keep_recent"}
            and set(guard.specs) == set(Guard.from_manifest(AIRLINE_MANIFEST).specs)
            and conversations == corpus_conversations()
        )
        if same:
            return request.getfixturevalue("corpus_side_by_side")
        return real(conversations, guard, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(guardrail.replay, "side_by_side", shared)
        yield


def _fail(block: Block, why: str) -> None:
    raise BlockFailed(f"{block.where} ({block.language} block) {why}\n\n{HOW_TO_FIX}")
