"""The ``guardrail`` command: replay end to end on the corpus, errors of use, and the demo."""

from __future__ import annotations

import importlib.metadata
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import guardrail
from guardrail.cli._main import USAGE_ERROR, main

from .conftest import AIRLINE_MANIFEST as MANIFEST
from .conftest import AIRLINE_TRACES as TAU
from .conftest import (
    CORPUS_REPLAY,
    REFERENCE_AGENT,
    REPO,
    CorpusReplay,
    call,
    needs_corpus,
    reports_kept,
    result,
    user,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MUTATIONS = ("substituted", "transposed", "deleted", "inserted")


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _small_trace(tmp_path: Path, extra: list[dict[str, Any]] | None = None) -> Path:
    """A short airline conversation, in the corpus shape."""
    messages = [
        user("I am mia_li_3668, please cancel my trip"),
        call("c1", "get_user_details", {"user_id": "mia_li_3668"}),
        {  # as the corpus records it: the tool's name, its parsed result and the error flag
            "role": "tool",
            "tool_call_id": "c1",
            "name": "get_user_details",
            "content": json.dumps({"reservations": ["NO6JO3"], "payment_methods": {}}),
            "result": {"reservations": ["NO6JO3"], "payment_methods": {}},
            "error": False,
        },
        *(extra or []),
    ]
    path = tmp_path / "small.jsonl"
    path.write_text(json.dumps({"id": "small", "messages": messages}) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus_report(corpus_replay: CorpusReplay) -> dict[str, Any]:
    """The JSON report of the README's command on the whole corpus (the suite's one run)."""
    data: dict[str, Any] = json.loads(corpus_replay.report.to_json())
    return data


@needs_corpus
def test_corpus_detection_of_mutated_truncated_invented_and_example_ids(
    corpus_report: dict[str, Any],
) -> None:
    """On the corpus, at least 99% of each corruption class the guard must catch is refused."""
    detection = corpus_report["total"]["detection"]
    for name in (*MUTATIONS, "truncated", "invented", "example", "other_kind"):
        assert detection[name]["variants"] > 1000, name
        assert detection[name]["rate"] >= 0.99, (name, detection[name])
    assert set(detection["substituted"]["findings"]) == {"mutated"}
    assert set(detection["truncated"]["findings"]) == {"truncated"}
    assert set(detection["example"]["findings"]) == {"example"}
    # Same-kind swaps are what provenance alone cannot see: reported, mostly allowed.
    assert detection["same_kind"]["rate"] < 0.5


@needs_corpus
def test_corpus_false_refusals_are_only_the_expected_ones(corpus_report: dict[str, Any]) -> None:
    """No genuine false refusal; the five refusals are the invented and unverified ids."""
    total = corpus_report["total"]
    assert total["traces"] == 200
    assert total["calls"] == 1164
    assert total["refused"] == 5
    false = total["false_refusals"]
    assert false["genuine"] == 0
    assert false["by_reason"] == {"genuine": 0, "invented": 0, "unverified": 1}
    (typed,) = false["examples"]["unverified"]
    assert typed["tool"] == "cancel_reservation"
    assert typed["findings"][0]["value"] == "3RK2T9"
    # The four invented payment ids failed in the recording too: refused, not false refusals.
    failed = total["refused_failed"]
    assert failed["by_reason"] == {"genuine": 0, "invented": 4, "unverified": 0}
    assert sorted(e["findings"][0]["value"] for e in failed["examples"]) == [
        "credit_card_5634230",
        "credit_card_5634230",
        "credit_card_7334",
        "credit_card_7334",
    ]
    assert total["refused_by_outcome"] == {"succeeded": 1, "failed": 4, "no_result": 0}


@needs_corpus
def test_corpus_input_is_clean_and_settings_recorded(corpus_report: dict[str, Any]) -> None:
    """The corpus has no malformed line or unknown tool; the settings say what ran."""
    total = corpus_report["total"]
    assert total["malformed"] == {"lines": 0, "messages": 0, "examples": []}
    assert total["unknown_tools"] == {}
    settings = corpus_report["settings"]
    assert settings["seed"] == 0
    assert settings["keep_recent"] == [0]
    assert settings["compaction"] == ["guardrail k=0", "plain summary k=0"]
    assert settings["summariser"].startswith("LossySummarizer(seed=0;")
    assert settings["agent"] == REFERENCE_AGENT
    assert corpus_report["files"][0]["path"] == str(TAU)


@needs_corpus
def test_corpus_availability_after_compaction(corpus_report: dict[str, Any]) -> None:
    """Guardrail keeps every ledger id within capacity verbatim; the plain summary loses some.

    Per trace file and in total. Ledger ids are identifier arguments whose value an earlier
    successful tool result produced; the others are counted apart, and every argument at a
    compaction lands in exactly one count.
    """
    for stats in (corpus_report["total"], *corpus_report["files"]):
        guarded = stats["availability"]["guardrail k=0"]
        plain = stats["availability"]["plain summary k=0"]
        assert guarded["compactions"] == plain["compactions"] == 1164
        assert guarded["ids"] == plain["ids"] > 1500
        assert guarded["evicted"] == 0  # the default capacity holds every conversation
        assert guarded["present"] == guarded["ids"]
        assert guarded["rate"] == 1.0
        assert guarded["misses"] == []
        assert plain["present"] < plain["ids"]
        assert plain["rate"] < 0.9
        counted = ("ids", "evicted", "other_ids", "not_in_context")
        assert sum(guarded[name] for name in counted) == sum(plain[name] for name in counted)


@needs_corpus
def test_corpus_agent_diff_is_empty_with_guardrail_and_not_with_a_plain_summary(
    corpus_report: dict[str, Any],
) -> None:
    """The reference agent keeps every ledger id after guardrail's compaction, not a summary's.

    And the guard refuses the plain summary's calls that carry a mutated id.
    """
    agent = corpus_report["total"]["agent"]
    recorded = agent["uncompacted_vs_recording"]
    assert recorded["calls"] == 1164
    assert recorded["changed"] == 0  # uncompacted, it repeats the recording's ledger ids
    guarded = agent["compacted_vs_uncompacted"]["guardrail k=0"]
    plain = agent["compacted_vs_uncompacted"]["plain summary k=0"]
    assert guarded["ids"] == plain["ids"] > 1500
    assert guarded["changed"] == 0
    assert plain["changed"] > 100
    assert plain["refused"] > 100
    assert guarded["same"] > plain["same"]
    assert any("(refused: mutated)" in e["label"] for e in plain["examples"])


@needs_corpus
def test_corpus_in_process_text_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json the command prints the tables, in process, with --limit and --seed."""
    code, out, err = _run(
        capsys, "replay", TAU, "--manifest", MANIFEST, "--limit", "30", "--seed", "7"
    )
    assert code == 0, err
    assert "guardrail replay: 30 traces" in out
    assert "(seed 7)" in out
    assert "Detection" in out
    assert "False refusals" in out


def test_json_prints_the_report_the_command_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json prints the report the tables would show, exactly as its to_json() writes it."""
    path = _small_trace(tmp_path)
    with reports_kept() as reports:
        code, out, err = _run(
            capsys, "replay", path, "--manifest", MANIFEST, "--agent", REFERENCE_AGENT, "--json"
        )
    assert code == 0, err
    (report,) = reports
    assert out == report.to_json() + "\n"
    assert json.loads(out)["settings"]["agent"] == REFERENCE_AGENT


def test_tables_piped_to_a_file_are_not_cut_at_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --width and without a terminal, each table has its natural width: nothing folds."""
    folder = tmp_path / ("a-folder-with-a-long-name-" * 3)
    folder.mkdir()
    path = _small_trace(folder)
    code, out, err = _run(capsys, "replay", path, "--manifest", MANIFEST, "--no-progress")
    assert code == 0, err
    row = next(line for line in out.splitlines() if str(path) in line)  # one line, not folded
    assert len(row) > 80
    code, narrow, _ = _run(capsys, "replay", path, "--manifest", MANIFEST, "--width", "80")
    assert str(path) not in narrow  # --width still folds, as asked
    assert max(len(line) for line in narrow.splitlines()) <= 80


def test_tables_piped_to_an_ascii_stream_use_ascii_boxes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The width-keeping stream passes its encoding on: rich draws ASCII boxes, never fails."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["replay", str(_small_trace(tmp_path)), "--manifest", str(MANIFEST)]) == 0
    stream.flush()
    out = raw.getvalue().decode("ascii")
    assert "+---" in out
    assert all(line == line.rstrip() for line in out.splitlines())


def test_malformed_lines_and_unknown_tools_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad lines and calls of undeclared tools are counted in the JSON, and the run succeeds."""
    extra = [call("c2", "teleport", '{"to": "mars"}'), result("c2", "Error: no", error=True)]
    path = _small_trace(tmp_path, extra)
    with path.open("a", encoding="utf-8") as handle:
        handle.write("{broken\n")
    code, out, err = _run(capsys, "replay", path, "--manifest", MANIFEST, "--json")
    assert code == 0, err
    total = json.loads(out)["total"]
    assert total["malformed"]["lines"] == 1
    assert total["malformed"]["examples"][0]["line"] == 2
    assert total["unknown_tools"] == {"teleport": 1}
    assert total["calls"] == 2


def test_classes_and_variants_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--classes picks corruption classes; --variants sets how many per argument."""
    path = _small_trace(tmp_path)
    code, out, _ = _run(
        capsys,
        "replay",
        path,
        "--manifest",
        MANIFEST,
        "--json",
        "--classes",
        "inserted,example",
        "--variants",
        "4",
    )
    assert code == 0
    detection = json.loads(out)["total"]["detection"]
    assert list(detection) == ["inserted", "example"]
    assert detection["inserted"]["variants"] == 4


def test_keep_recent_lists_and_repeats_imply_compaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--keep-recent takes a list or repeats; each depth gets both strategies, in order."""
    path = _small_trace(tmp_path)
    code, out, err = _run(
        capsys, "replay", path, "--manifest", MANIFEST, "--json", "--keep-recent", "2,0",
        "--keep-recent", "1", "--keep-recent", "0",
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["keep_recent"] == [2, 0, 1]
    assert list(data["total"]["availability"]) == [
        f"{name} k={k}" for k in (2, 0, 1) for name in ("guardrail", "plain summary")
    ]
    assert data["total"]["agent"] is None
    code, out, _ = _run(capsys, "replay", path, "--manifest", MANIFEST, "--json")
    assert json.loads(out)["total"]["availability"] == {}


def test_agent_option_runs_the_agent_and_prints_the_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--agent loads module:callable, implies --compact, and the tables show the diff."""
    extra = [
        user("cancel it"),
        call("c2", "cancel_reservation", {"reservation_id": "NO6JO3"}),
        result("c2", {}),
    ]
    path = _small_trace(tmp_path, extra)
    code, out, err = _run(
        capsys, "replay", path, "--manifest", MANIFEST, "--agent", REFERENCE_AGENT, "--width", "120"
    )
    assert code == 0, err
    assert "Availability after compaction" in out
    assert f"Agent diff ({REFERENCE_AGENT})" in out
    assert "guardrail k=0" in out and "plain summary k=0" in out


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("nonsense", "module:callable"),
        ("no_such_module_for_guardrail:agent", "cannot import"),
        ("guardrail.replay:missing", "has no 'missing'"),
    ],
)
def test_an_agent_that_cannot_be_loaded_is_an_error_of_use(
    agent: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --agent exits non-zero before the run, with one line saying what to give."""
    code, out, err = _run(
        capsys, "replay", _small_trace(tmp_path), "--manifest", MANIFEST, "--agent", agent
    )
    assert code == USAGE_ERROR
    assert out == ""
    assert message in err


def test_bad_manifest_is_one_clear_error_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest naming an unknown kind exits non-zero with one message and no report."""
    manifest = tmp_path / "bad.toml"
    manifest.write_text('[tools.refund]\nids = { order_id = "order" }\n', encoding="utf-8")
    code, out, err = _run(capsys, "replay", _small_trace(tmp_path), "--manifest", manifest)
    assert code == USAGE_ERROR
    assert out == ""
    assert err.count("guardrail: error:") == 1
    assert "bad.toml" in err
    assert "unknown kind 'order'" in err


def test_malformed_manifest_path_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest with a malformed result path, or no manifest file, is an error of use."""
    manifest = tmp_path / "paths.toml"
    manifest.write_text(
        '[kinds.order]\n[tools.get]\neffect = "read"\nproduces = { "a..b" = "order" }\n',
        encoding="utf-8",
    )
    code, _, err = _run(capsys, "replay", _small_trace(tmp_path), "--manifest", manifest)
    assert code == USAGE_ERROR
    assert "malformed path" in err
    code, _, err = _run(capsys, "replay", _small_trace(tmp_path), "--manifest", tmp_path / "no")
    assert code == USAGE_ERROR
    assert "cannot read it" in err


def test_unreadable_trace_file_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace file that is not JSON, or not UTF-8, exits non-zero naming file and line."""
    broken = tmp_path / "broken.json"
    broken.write_text('[\n {"role": "user", "content": "x"},\n oops\n]\n', encoding="utf-8")
    code, out, err = _run(capsys, "replay", broken, "--manifest", MANIFEST)
    assert code == USAGE_ERROR
    assert out == ""
    assert f"{broken}:3: not valid JSON" in err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"messages": []}\n\x89PNG\n')
    code, _, err = _run(capsys, "replay", binary, "--manifest", MANIFEST)
    assert code == USAGE_ERROR
    assert f"{binary}:2: not UTF-8" in err


def test_missing_trace_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace file that does not exist exits non-zero naming it, even after a good one."""
    missing = tmp_path / "missing.jsonl"
    code, out, err = _run(capsys, "replay", _small_trace(tmp_path), missing, "--manifest", MANIFEST)
    assert code == USAGE_ERROR
    assert out == ""
    assert str(missing) in err


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "x.jsonl", "--manifest", "m.toml", "--frobnicate"],
        ["replay", "x.jsonl"],
        ["replay", "x.jsonl", "--manifest", "m.toml", "--classes", "garbled"],
        ["replay", "x.jsonl", "--manifest", "m.toml", "--limit", "-1"],
        ["replay", "x.jsonl", "--manifest", "m.toml", "--seed", "abc"],
        ["replay", "x.jsonl", "--manifest", "m.toml", "--keep-recent", "-1"],
        ["replay", "x.jsonl", "--manifest", "m.toml", "--keep-recent", "0,x"],
        ["unknown-command"],
        [],
    ],
)
def test_bad_options_are_errors_of_use(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown options, missing or malformed ones exit with the usage-error code."""
    code, _, err = _run(capsys, *argv)
    assert code == USAGE_ERROR
    assert "error" in err


def test_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    """guardrail --version prints "guardrail <version>" and exits 0."""
    code, out, err = _run(capsys, "--version")
    assert (code, out, err) == (0, f"guardrail {guardrail.__version__}\n", "")


def test_version_of_the_command_and_of_python_m() -> None:
    """The installed command and python -m guardrail both answer --version."""
    script = Path(sys.executable).parent / "guardrail"
    commands = [[sys.executable, "-m", "guardrail"]] + ([[str(script)]] if script.exists() else [])
    for command in commands:
        capture = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False, timeout=120
        )
        assert capture.returncode == 0, capture.stderr
        assert capture.stdout == f"guardrail {guardrail.__version__}\n"


def test_the_version_is_written_once() -> None:
    """pyproject reads guardrail.__version__, so the package metadata cannot disagree with it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"] == {"path": "guardrail/__init__.py"}
    assert importlib.metadata.version("guardrail-ids") == guardrail.__version__


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints the options and exits 0."""
    code, out, _ = _run(capsys, "replay", "--help")
    assert code == 0
    assert "--manifest" in out
    assert "--json" in out


def test_demo_tells_the_story(capsys: pytest.CaptureFixture[str]) -> None:
    """guardrail demo shows the refusal, the re-prompt, the right refund and the audit events."""
    code, out, _ = _run(capsys, "demo", "--width", "120")
    assert code == 0
    assert "A plain summary compacts it" in out
    assert 'issue_refund(order_id="ord_8F3kQ2xN"' in out
    assert "guardrail refused the call" in out
    assert "[damaged_order]" in out
    assert 'issue_refund(order_id="ord_8F3kQ2xM"' in out
    assert "OK  refund rfq_77Hn02" in out
    assert "OK  nothing refunded on ord_8F3kQ2xN" in out
    assert "guardrail.call_checked" in out
    assert "compacted by guardrail" in out
    assert "BAD" not in out


def test_console_script_runs_the_demo() -> None:
    """The installed `guardrail` command (or python -m guardrail) runs the demo offline."""
    script = Path(sys.executable).parent / "guardrail"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "guardrail"]
    capture = subprocess.run(
        [*command, "demo"], capture_output=True, text=True, check=False, timeout=120
    )
    assert capture.returncode == 0, capture.stderr
    assert "refund rfq_77Hn02" in capture.stdout


@needs_corpus
def test_readme_numbers_are_what_the_command_prints(corpus_replay: CorpusReplay) -> None:
    """Every line of the replay output docs/results.md quotes is printed by the command it shows.

    The full sweep with compaction and the reference agent, in process: the suite's one run.
    """
    readme = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Evaluate your agent") :]
    block = section[section.index("```text\n") + len("```text\n") :]
    expected = [line for line in block[: block.index("```")].splitlines() if line != "..."]
    command = section[section.index("```sh\n") : section.index("```text\n")]
    for option in ("--compact", "--keep-recent 0", f"--agent {REFERENCE_AGENT}"):
        assert option in command
        assert option.split()[0] in CORPUS_REPLAY  # and the run asserted on is that command
    code, out = corpus_replay.code, corpus_replay.printed
    assert code == 0
    printed = {line.rstrip() for line in out.splitlines()}
    assert len(expected) > 40
    assert any(line.startswith("│ guardrail k=0") for line in expected)
    assert any(line.startswith("plain summary k=0 │") for line in expected)
    assert [line for line in expected if line not in printed] == []


# -- guardrail check ---------------------------------------------------------------------------

CHECK_MANIFEST = """
[kinds.order]
pattern = "#?W\\\\d{7}"
normalize = ["strip", "prefix:#"]

[kinds.customer]
like = "prefixed:cus_"

[tools.search_orders]
effect = "read"
ids = { customer_id = "customer" }
produces = { "orders[*].order_id" = "order" }

[tools.issue_refund]
ids = { order_id = "order" }
"""
SEARCH = {
    "tool": "search_orders",
    "arguments": {"customer_id": "cus_41ZpA9"},
    "result": {"orders": [{"order_id": "#W8855135"}, {"order_id": "#W2378156"}]},
}


def _manifest(tmp_path: Path, text: str = CHECK_MANIFEST) -> Path:
    path = tmp_path / "tools.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_check_prints_a_refusal_its_reprompt_and_the_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """guardrail check: a mutated id is refused (exit 1), with the finding, re-prompt and ledger."""
    code, out, err = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path),
        "--width",
        "200",
        "--user",
        "I'm cus_41ZpA9, the second order broke",
        "--result",
        json.dumps(SEARCH),
        "--call",
        '{"tool": "issue_refund", "arguments": {"order_id": "#W2378157"}}',
    )
    assert (code, err) == (REFUSED_EXIT, "")
    assert "issue_refund: refused" in out
    assert "mutated" in out and "order_2" in out
    assert "guardrail refused the call to issue_refund" in out
    assert "look it up with search_orders" in out
    for row in ("customer", "cus_41ZpA9", "#W8855135", "#W2378156"):
        assert row in out


def test_check_piped_to_a_file_keeps_its_tables_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --width and without a terminal, the finding's row is one line, not folded at 80."""
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path),
        "--result",
        json.dumps(SEARCH),
        "--call",
        '{"tool": "issue_refund", "arguments": {"order_id": "#W2378157"}}',
    )
    assert code == REFUSED_EXIT
    row = next(line for line in out.splitlines() if line.startswith("│ mutated"))
    assert row.rstrip("│ ").endswith("one character changed (position 8)")
    assert len(row) > 80


REFUSED_EXIT = 1


def test_check_reads_files_keeps_the_order_given_and_rewrites_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """@FILE inputs; an allowed call exits 0, its arguments left as written (no "runs with")."""
    results = tmp_path / "results.json"
    results.write_text(json.dumps([SEARCH]), encoding="utf-8")
    call = tmp_path / "call.json"
    call.write_text(json.dumps({"name": "issue_refund", "arguments": {"order_id": "W8855135"}}))
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path),
        "--width",
        "200",
        "--result",
        f"@{results}",
        "--call",
        f"@{call}",
    )
    assert code == 0
    assert "issue_refund: allowed" in out
    assert "runs with" not in out and "->" not in out


def test_check_json_gives_the_verdict_and_the_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json: allowed, findings, the re-prompt and every ledger entry, for machines."""
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path),
        "--json",
        "--user",
        "I'm cus_41ZpA9",
        "--call",
        '{"tool": "search_orders", "arguments": {"customer_id": "cus_41ZpA8"}}',
    )
    outcome = json.loads(out)
    assert code == REFUSED_EXIT
    assert outcome["allowed"] is False
    assert [f["problem"] for f in outcome["findings"]] == ["mutated"]
    assert outcome["ledger"] == [
        {
            "role": "customer",
            "kind": "customer",
            "value": "cus_41ZpA9",
            "verified": False,
            "source": "user",
            "path": "text",
        }
    ]


def test_check_kinds_only_shows_what_each_pattern_takes_and_flags_plain_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--kinds-only: each kind's matches and keys; a pattern that takes plain words is flagged."""
    manifest = _manifest(tmp_path, CHECK_MANIFEST + '\n[kinds.ticket]\npattern = "[a-z]{5,6}"\n')
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        manifest,
        "--kinds-only",
        "--width",
        "200",
        "--user",
        "Please close cus_41ZpA9 and order #W8855135.",
    )
    assert code == 0
    assert "warning: kind 'ticket': the pattern '[a-z]{5,6}' takes plain words" in out
    assert "'#W8855135' -> 'W8855135'" in out
    assert "'cus_41ZpA9' -> 'cus_41ZpA9'" in out
    assert "'close' -> 'close'  <- a plain word: the pattern is too broad" in out
    code, out, _ = _run(
        capsys, "check", "--manifest", manifest, "--kinds-only", "--json", "--user", "close it"
    )
    report = {kind["kind"]: kind for kind in json.loads(out)["kinds"]}
    assert report["ticket"]["taken"] == [
        {"text": 0, "written": "close", "key": "close", "plain_word": True}
    ]
    assert "please" in report["ticket"]["plain_words"]
    assert report["order"]["plain_words"] == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--call", "{not json"], "--call (inline) is not valid JSON"),
        (["--call", "@/nonexistent/call.json"], "--call @/nonexistent/call.json: cannot read it"),
        (["--call", '{"arguments": {}}'], '--call needs "tool"'),
        (["--result", '{"tool": "search_orders"}', "--call", '{"tool": "x"}'], 'needs "result"'),
        ([], "give --call JSON"),
    ],
)
def test_check_errors_of_use_say_what_to_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    """Bad JSON, a missing file or key, no call: exit 2 with one line saying what to do."""
    code, out, err = _run(capsys, "check", "--manifest", _manifest(tmp_path), *extra)
    assert code == 2
    assert out == ""
    assert message in err


# -- guardrail replay --live -----------------------------------------------------------------

SHOP_TRACES = REPO / "examples" / "live_shop.jsonl"
SHOP_MANIFEST = REPO / "examples" / "live_shop.toml"


def test_live_runs_the_shop_and_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """--live module:factory: the recorded calls through the shop's tools, both sides, as tables."""
    code, out, err = _run(
        capsys,
        "replay",
        SHOP_TRACES,
        "--manifest",
        SHOP_MANIFEST,
        "--live",
        "examples.live_shop:fresh",
        "--width",
        "200",
    )
    assert (code, err) == (0, "")
    assert "guardrail replay --live: 4 conversations, 15 tool calls, 15 run" in out
    assert "12 / 3" in out  # the baseline: 12 succeeded, 3 failed
    assert "Refused, ok without, by cause: get_order_details.order_id: unknown 1." in out


def test_live_json_is_the_replay_report_with_its_live_part(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--live --json: the report's JSON, the environment as typed in its settings."""
    code, out, _ = _run(
        capsys,
        "replay",
        SHOP_TRACES,
        "--manifest",
        SHOP_MANIFEST,
        "--live",
        "examples.live_shop",
        "--json",
        "--approve",
        "none",
        "--limit",
        "2",
    )
    assert code == 0
    report = json.loads(out)
    assert report["settings"]["live"] == "examples.live_shop"
    assert report["settings"]["approve"] == "none"
    assert report["total"]["traces"] == 2
    assert report["total"]["live"]["unguarded"] == {"succeeded": 4, "failed": 3}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--compact"], "--compact corrupt or compact"),
        (["--seed", "3", "--variants", "2"], "--seed, --variants"),
        (["--agent", "guardrail.replay:reference_agent"], "--agent"),
    ],
)
def test_live_with_replay_only_options_is_an_error_of_use(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Corruption and compaction options are a replay's: with --live they say so; nothing runs."""
    code, out, err = _run(
        capsys,
        "replay",
        SHOP_TRACES,
        "--manifest",
        SHOP_MANIFEST,
        "--live",
        "examples.live_shop:fresh",
        *extra,
    )
    assert (code, out) == (USAGE_ERROR, "")
    assert message in err


def test_live_environment_that_cannot_be_loaded_is_an_error_of_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A module that does not import, or an attribute that is not tools: the usage code."""
    for spec, message in [
        ("no_such_module_here:fresh", "cannot import the live environment's module"),
        ("examples.live_shop:USERS", "neither a function returning the tools"),
    ]:
        code, out, err = _run(
            capsys, "replay", SHOP_TRACES, "--manifest", SHOP_MANIFEST, "--live", spec
        )
        assert (code, out) == (USAGE_ERROR, "")
        assert message in err


def test_check_allows_the_models_spelling_and_gives_its_arguments_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user typed W8855135, the search wrote #W8855135: either spelling allowed, as written."""
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path),
        "--width",
        "200",
        "--user",
        "I'm cus_41ZpA9, refund W8855135",
        "--result",
        json.dumps(SEARCH),
        "--call",
        '{"tool": "issue_refund", "arguments": {"order_id": "#W8855135"}}',
    )
    assert code == 0
    assert "issue_refund: allowed" in out
    assert "runs with" not in out
    assert "#W8855135" in out
    for spelling in ("#W8855135", "W8855135"):
        code, out, _ = _run(
            capsys,
            "check",
            "--manifest",
            _manifest(tmp_path),
            "--json",
            "--user",
            "I'm cus_41ZpA9, refund W8855135",
            "--result",
            json.dumps(SEARCH),
            "--call",
            json.dumps({"tool": "issue_refund", "arguments": {"order_id": spelling}}),
        )
        assert code == 0
        assert json.loads(out)["arguments"] == {"order_id": spelling}


WHOIS_MANIFEST = (
    CHECK_MANIFEST
    + """
[tools.whois]
effect = "read"
produces = { "$" = "customer" }

[tools.whois_any]
effect = "read"
fails = false
produces = { "$" = "customer" }
"""
)


def test_check_reads_an_error_text_as_a_failure_and_warns_of_one_taken_for_a_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An "Error: ..." result teaches nothing; where fails = false took one, a warning says so."""
    error = {"tool": "whois", "arguments": {}, "result": "Error: cus_41ZpA9 unknown"}
    taken = {**error, "tool": "whois_any"}
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path, WHOIS_MANIFEST),
        "--json",
        "--result",
        json.dumps(error),
        "--call",
        '{"tool": "search_orders", "arguments": {"customer_id": "Error: cus_41ZpA9 unknown"}}',
    )
    assert (code, json.loads(out)["ledger"], json.loads(out)["warnings"]) == (REFUSED_EXIT, [], [])
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path, WHOIS_MANIFEST),
        "--json",
        "--result",
        json.dumps(taken),
        "--call",
        '{"tool": "search_orders", "arguments": {"customer_id": "Error: cus_41ZpA9 unknown"}}',
    )
    (warning,) = json.loads(out)["warnings"]
    assert code == 0
    assert warning.startswith("whois_any: a result that reads like an error")
    assert 'fails = "Error" on whois_any' in warning


def test_check_prints_ids_and_patterns_as_written_never_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ledger entry's source "re:(cus_[a-z0-9]{6})" is printed whole, brackets and all."""
    manifest = CHECK_MANIFEST + '\n[tools.scan]\neffect = "read"\n'
    manifest += 'produces = { "re:(cus_[a-z0-9]{6})" = "customer" }\n'
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path, manifest),
        "--width",
        "200",
        "--result",
        json.dumps({"tool": "scan", "arguments": {}, "result": "hello cus_abc123"}),
        "--call",
        '{"tool": "search_orders", "arguments": {"customer_id": "cus_abc123"}}',
    )
    assert code == 0
    assert "scan re:(cus_[a-z0-9]{6})" in out


VARIANTS_MANIFEST = """
[kinds.item]
pattern = "it_[0-9]+"

[tools.get_product]
effect = "read"
produces = { "variants[*].item_id" = "item", "name" = "item" }

[tools.buy]
ids = { item_id = "item" }
"""
PRODUCT = {
    "tool": "get_product",
    "arguments": {},
    "result": {"variants": {"v1": {"item_id": "it_1"}, "v2": {"item_id": "it_2"}}},
}


def test_check_names_a_declared_path_that_matched_nothing_and_its_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A list path over an object reaches nothing: check says so and names the path that would."""
    argv: list[str | Path] = [
        "check",
        "--manifest",
        _manifest(tmp_path, VARIANTS_MANIFEST),
        "--width",
        "200",
        "--result",
        json.dumps(PRODUCT),
        "--call",
        '{"tool": "buy", "arguments": {"item_id": "it_2"}}',
    ]
    code, out, _ = _run(capsys, *argv)
    assert code == REFUSED_EXIT
    assert "get_product declares produces 'variants[*].item_id', which matched nothing" in out
    assert "'name', which matched nothing" in out
    assert 'write produces={"variants.*.item_id": "item"} on get_product' in out
    code, out, _ = _run(capsys, *argv, "--json")
    outcome = json.loads(out)
    assert outcome["unmatched_paths"] == [
        {"tool": "get_product", "path": "variants[*].item_id"},
        {"tool": "get_product", "path": "name"},
    ]
    assert "variants.*.item_id" in outcome["hints"]["it_2"]


def test_check_is_quiet_about_paths_that_matched_and_values_in_no_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path that reached ids warns of nothing; an invented value gets no hint."""
    code, out, _ = _run(
        capsys,
        "check",
        "--manifest",
        _manifest(tmp_path),
        "--result",
        json.dumps(SEARCH),
        "--call",
        '{"tool": "issue_refund", "arguments": {"order_id": "#W1111111"}}',
        "--json",
    )
    outcome = json.loads(out)
    assert (code, outcome["unmatched_paths"], outcome["hints"]) == (REFUSED_EXIT, [], {})


def test_replay_reports_declared_paths_that_matched_nothing_in_the_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Path coverage: a produces path no result of its tool reached is named, with its count."""
    manifest = tmp_path / "airline.toml"
    manifest.write_text(
        MANIFEST.read_text(encoding="utf-8").replace(
            '"reservations[*]" = "reservation"',
            '"reservations[*]" = "reservation"\n"bookings[*].id" = "reservation"',
        ),
        encoding="utf-8",
    )
    trace = _small_trace(tmp_path)
    _, out, _ = _run(capsys, "replay", trace, "--manifest", manifest, "--json")
    coverage = json.loads(out)["total"]["path_coverage"]
    unmatched = {(row["tool"], row["path"]) for row in coverage["unmatched"]}
    assert ("get_user_details", "bookings[*].id") in unmatched
    assert ("get_user_details", "reservations[*]") not in unmatched
    _, out, _ = _run(capsys, "replay", trace, "--manifest", manifest, "--width", "200")
    assert "matched nothing in any successful result" in out
    assert "get_user_details bookings[*].id (1 result(s))" in out


def test_replay_with_no_refusal_prints_no_empty_refusals_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No refused call: the line says 0, and no table of one "- none" row follows."""
    _, out, _ = _run(capsys, "replay", _small_trace(tmp_path), "--manifest", MANIFEST)
    assert "0 genuine" in out
    assert "│ -" not in out and "| -" not in out and "none" not in out
