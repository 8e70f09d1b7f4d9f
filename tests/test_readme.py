"""The README's example runs as written; docs/results.md's numbers are what commands print."""

from __future__ import annotations

import re
from typing import Any

import pytest

from .conftest import REPO, needs_corpus


def test_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The thirty-line example at the top of the README works and refuses the mutated id."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert example is not None
    code = example.group(1)
    assert len(code.splitlines()) <= 30
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    # The tool runs with the order as the model wrote it, copied from the search's result.
    assert "refunded 40 on #W2378156" in out
    assert "\nmutated\n" in out
    assert "guardrail refused the call to issue_refund" in out


#: Where the numbers moved: each beside the command that prints it.
RESULTS = "docs/results.md"


def _section(title: str, page: str = "README.md") -> str:
    text = (REPO / page).read_text(encoding="utf-8")
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL)


# What the Compaction section's example prints: its guard has a secret and the ledger a session
# id, so the seal, keyed from both, is the same on every run.
COMPACTED_EXAMPLE = """\
ID LEDGER (verbatim, do not paraphrase)
user              mia_li_3668
reservation       NO6JO3
reservation_2     AIXC49
(seal 56640a6fd3fee58097ea13a392f224ca)

SUMMARY OF EARLIER TURNS (identifiers appear as [role]; copy their values from the ID LEDGER)
- User: Hi, I am [user]. Please cancel my Seattle trip.
- Agent called get_user_details(user_id=[user]) -> [reservation], [reservation_2]"""


def test_compaction_example_runs_and_prints_what_it_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Compaction section's example fits in fourteen lines and prints the sealed block."""
    section = _section("Compaction", RESULTS)
    code = _blocks(section, "python")[0]
    assert len(code.splitlines()) <= 14
    monkeypatch.chdir(REPO)  # the example names examples/tau_airline.toml
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert COMPACTED_EXAMPLE in out
    assert _blocks(section, "text")[0].strip() == COMPACTED_EXAMPLE  # the page quotes it


@needs_corpus
def test_compaction_side_by_side_table_is_what_the_command_prints(
    corpus_side_by_side: Any,
) -> None:
    """The side-by-side table the results page quotes is side_by_side() on the whole corpus."""
    section = _section("Compaction", RESULTS)
    command = next(block for block in _blocks(section, "sh") if "side_by_side(" in block)
    assert "keep_recent=range(5)" in command
    table = _blocks(section, "text")[1]
    assert table.rstrip("\n") == corpus_side_by_side.table()


@pytest.mark.runtimes  # imports every adapter
def test_readme_runtime_table_names_what_each_adapter_exports() -> None:
    """Every adapter name the README's runtime table tells users to write is exported."""
    import importlib

    table = _section("Where agents run")
    expected = {
        "langchain": ["GuardrailMiddleware", "GuardrailCompactionMiddleware"],
        "pydantic_ai": ["Guardrail", "guardrail_history_processor"],
        "openai_agents": ["guard_agent", "GuardedSession", "compact_model_input"],
        "mcp": ["guard_server", "guarded_call_tool"],
        "loops": ["run_tool_calls"],
    }
    for module, names in expected.items():
        adapter = importlib.import_module(f"guardrail.integrations.{module}")
        for name in names:
            assert name in table, name
            assert name in adapter.__all__, (module, name)
    for example in ("langchain_agent", "pydantic_ai_agent", "openai_agents_agent", "mcp_server"):
        assert f"{example}.py" in table
        assert (REPO / "examples" / f"{example}.py").is_file()


def test_readme_store_lines_build_stores_guardrail_exports() -> None:
    """Each store the README picks in one line is exported by guardrail.stores under that name."""
    import guardrail.stores

    section = _section("Stores: where sessions live between calls")
    for name in ("SQLiteStore", "RedisStore", "PostgresStore", "AsyncRedisStore"):
        assert f"{name}" in section
        assert name in guardrail.stores.__all__
        assert getattr(guardrail.stores, name).__name__ == name
    assert callable(guardrail.stores.RedisStore.from_url)
