"""Kinds: names, patterns, normalisers and examples."""

from __future__ import annotations

import pytest

from guardrail import GuardrailUsageError, Kind
from guardrail.kinds import compile_normalizer, id_text


def test_default_normaliser_strips_white_space() -> None:
    """Surrounding white space is never part of an id."""
    assert Kind.build("order").normalize("  W1 \n") == "W1"


@pytest.mark.parametrize(
    ("spec", "written", "normal"),
    [
        ("casefold", "AbC", "abc"),
        ("upper", "zfa04y", "ZFA04Y"),
        (["strip", "prefix:#"], " #W8855135 ", "W8855135"),
        ("number", "7.0", "7"),
        ("number", "007", "7"),
        ("number", "7.50", "7.5"),
        ("number", "seven", "seven"),
        ("url", "HTTPS://Example.com/a/", "https://example.com/a"),
        ("url", "example.com/a", "example.com/a"),
        ("url", "http://example.com:8080/x?q=1", "http://example.com:8080/x?q=1"),
        ("url", "http://Example.com:80/x", "http://example.com/x"),
        ("url", "https://Example.com:0443/x", "https://example.com/x"),
        ("url", "https://example.com:80/x", "https://example.com:80/x"),
        ("url", "Javascript://Example.com/x", "javascript://example.com/x"),
        ("url", "http://User:Pw@Example.com/x#Top", "http://User:Pw@example.com/x#Top"),
        ("url", "http://[::1]:8080/", "http://[::1]:8080"),
        ("url", " example.com/a/ / ", "example.com/a"),
        ("number", "1e3", "1000"),
        ("number", "1e999999999", "1e999999999"),
        ("number", "1.00000000000000000000000000001", "1.00000000000000000000000000001"),
        ("number", "9" * 101, "9" * 101),
        ("prefix:#", "##W1", "W1"),
        ("prefix:ab", "ababaW1", "aW1"),
        (["strip", "prefix:#"], "#  W1", "W1"),
        (["prefix:#", "strip"], " # #W1", "W1"),
        ("email", " Jane.Doe@Example.COM ", "jane.doe@example.com"),
    ],
)
def test_builtin_normalisers(spec: str | list[str], written: str, normal: str) -> None:
    """Each built-in normaliser maps written forms of one id to one key."""
    assert compile_normalizer(spec)(written) == normal


def test_callable_normaliser_is_used_as_given() -> None:
    """Any callable can normalise."""
    kind = Kind.build("sku", normalize=lambda value: value.replace("-", ""))
    assert kind.normalize("AB-12") == "AB12"


def test_unknown_normaliser_is_a_usage_error() -> None:
    """A misspelt normaliser names the ones that exist."""
    with pytest.raises(GuardrailUsageError, match="unknown normaliser 'casefld'.*casefold"):
        Kind.build("order", normalize="casefld")


@pytest.mark.parametrize("name", ["", "1order", "order id", "ord-er"])
def test_bad_kind_names_are_refused(name: str) -> None:
    """Kind names become roles, so they must be plain names."""
    with pytest.raises(GuardrailUsageError, match="kind name"):
        Kind.build(name)


def test_bad_pattern_is_a_usage_error() -> None:
    """A pattern that does not compile is reported with the kind's name."""
    with pytest.raises(GuardrailUsageError, match="kind 'order': bad pattern"):
        Kind.build("order", pattern="W(\\d")


def test_examples_are_kept_normalised() -> None:
    """Examples are compared after normalising, so '#W0000000' also covers 'W0000000'."""
    kind = Kind.build("order", normalize=["strip", "prefix:#"], examples=["#W0000000"])
    assert kind.examples == frozenset({"W0000000"})
    assert kind.with_examples(["W1111111"]).examples == frozenset({"W0000000", "W1111111"})
    assert kind.with_examples(["#W0000000"]) is kind


def test_find_reads_ids_in_prose_trimmed_of_punctuation() -> None:
    """Pattern matches in prose are whole tokens, anchors in the pattern ignored."""
    kind = Kind.build("order", pattern=r"^#?W\d{7}$")
    text = 'My orders are "#W8855135", W2378156. Not XW1234567 nor W12345678.'
    assert list(kind.find(text)) == ["#W8855135", "W2378156"]
    assert kind.matches("#W8855135")
    assert not kind.matches("W12")


def test_kind_without_pattern_finds_nothing_and_matches_anything() -> None:
    """A kind with no pattern cannot be recognised in prose."""
    kind = Kind.build("hotel")
    assert not kind.has_pattern
    assert list(kind.find("the Grand Hotel")) == []
    assert kind.matches("anything")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("W1", "W1"),
        (7, "7"),
        (7.5, "7.5"),
        (True, None),
        (None, None),
        (float("inf"), None),
        (float("nan"), None),
        (["W1"], None),
        ({"id": 1}, None),
    ],
)
def test_id_text_reads_strings_and_numbers_only(value: object, text: str | None) -> None:
    """Check, harvest and replay read an identifier value as text the same way."""
    assert id_text(value) == text


@pytest.mark.parametrize(
    "value", ["http://[x", "http://host:port/", "http://h:99999/", "h:1:2", "http://h/" * 1000]
)
def test_url_normaliser_raises_value_error_for_what_is_no_url(value: str) -> None:
    """A value no URL parser can read raises ValueError (the check calls it malformed)."""
    with pytest.raises(ValueError, match="URL"):
        compile_normalizer("url")(value)


def test_url_written_without_a_scheme_is_no_url_with_one() -> None:
    """example.com/a and https://example.com/a are two keys: the scheme is never guessed."""
    url = compile_normalizer("url")
    assert url("example.com/a") != url("https://example.com/a")
    assert url("https://example.com/a") != url("http://example.com/a")


def test_composed_normalisers_run_to_a_fixed_point_or_raise() -> None:
    """A composition is run again until stable; a value that never settles is a ValueError."""
    normalize = compile_normalizer(["strip", "prefix:#"])
    assert normalize("#  W1") == normalize(normalize("#  W1")) == "W1"
    assert normalize("# " * 20 + "W1") == "W1"  # strip and prefixes settle in one pass
    rounds = compile_normalizer(["prefix:#", "prefix: "])  # a prefix of white space: rounds
    assert rounds("# # W1") == "W1"
    with pytest.raises(ValueError, match="does not settle"):
        rounds("# " * 20 + "W1")


def test_a_single_builtin_normaliser_is_the_function_itself() -> None:
    """One built-in needs no rounds: the allowed path calls it directly."""
    assert compile_normalizer("casefold") is compile_normalizer(["casefold"])
    assert compile_normalizer("strip") is str.strip


def test_examples_a_normaliser_cannot_read_are_left_out() -> None:
    """An example that is no URL is not kept (nothing can ever have its key)."""
    kind = Kind.build("url", normalize="url", examples=["http://[x", "https://example.com/"])
    assert kind.examples == frozenset({"https://example.com"})
    assert kind.with_examples(["http://h:port"]) is kind


def test_a_pattern_that_takes_plain_words_is_warned_about_where_it_is_declared() -> None:
    """`[A-Za-z]{5,6}` takes close, issue, please: the declaration warns at the caller."""
    from guardrail import Guard
    from guardrail.errors import BroadPatternWarning

    with pytest.warns(BroadPatternWarning, match=r"takes plain words as ids \('about'") as seen:
        kind = Guard().add_kind("ticket", pattern=r"[A-Za-z]{5,6}")
    assert seen[0].filename == __file__
    assert {"close", "issue", "please"} <= set(kind.plain_words())
    warning = seen[0].message
    assert isinstance(warning, BroadPatternWarning)
    assert warning.kind == "ticket"
    assert "close" in warning.words


@pytest.mark.parametrize("pattern", [r"#?W\d{7}", r"cus_\w{6}", r"[A-Z]{3}", r"[a-z]+_[a-z]+_\d+"])
def test_a_narrow_pattern_is_not_warned_about(pattern: str) -> None:
    """Patterns with a prefix, digits or capitals only take no plain word."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Kind.build("k", pattern=pattern).plain_words() == []


def test_ids_in_gives_what_observe_user_would_take() -> None:
    """ids_in: each match trimmed, with its key; examples and unreadable ones left out."""
    kind = Kind.build("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    kind = kind.with_examples(["#W0000000"])
    text = 'Orders "#W8855135", W2378156. and #W0000000'
    assert kind.ids_in(text) == [("#W8855135", "W8855135"), ("W2378156", "W2378156")]
