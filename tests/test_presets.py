"""Ready-made kinds: e-mail, UUID, URL, phone, IBAN and prefixed ids, on what users write."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
from guardrail_bench.crafted import TRIVIAL, crafted, ratio_to_trivial
from guardrail_bench.timing import fastest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Guard, GuardrailUsageError, Kind, ManifestError
from guardrail.kinds._presets import iban_checksum_ok

LIKES = ("email", "uuid", "url", "phone", "iban", "prefixed:cus_")


def kind(like: str) -> Kind:
    return Kind.build("k", like=like)


def taken(like: str, text: str) -> list[str]:
    """The keys of the ids a ready-made kind takes from ``text``."""
    return [key for _, key in kind(like).ids_in(text)]


@pytest.mark.parametrize(
    ("like", "text", "keys"),
    [
        ("email", "My email is Ana.Lopez@Example.COM.", ["ana.lopez@example.com"]),
        ("email", "write to <ana@example.com>, thanks", ["ana@example.com"]),
        ("email", "mailto:Ana@Example.com", ["ana@example.com"]),
        ("email", "it's 'ana@example.com' or \"bo@x.io\"!", ["ana@example.com", "bo@x.io"]),
        ("email", "(ANA@EXAMPLE.COM)", ["ana@example.com"]),
        (
            "email",
            "Contact: o'brien+shop@mail.example.co.uk...",
            ["o'brien+shop@mail.example.co.uk"],
        ),
        ("email", "no address @ here, nor ana@localhost", []),
        (
            "email",
            "--> ana@example.com, a.b-c@mail.example.org;",
            ["ana@example.com", "a.b-c@mail.example.org"],
        ),
        ("email", "x" * 65 + "@example.com is too long a local part", []),
        ("email", "name@sub.sub.example.museum", ["name@sub.sub.example.museum"]),
        (
            "uuid",
            "ref 123E4567-E89B-12D3-A456-426614174000.",
            ["123e4567-e89b-12d3-a456-426614174000"],
        ),
        (
            "uuid",
            "{123e4567-e89b-12d3-a456-426614174000}",
            ["123e4567-e89b-12d3-a456-426614174000"],
        ),
        (
            "uuid",
            "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
            ["123e4567-e89b-12d3-a456-426614174000"],
        ),
        ("uuid", "not 123e4567-e89b-12d3-a456", []),
        ("url", "see HTTPS://Example.com/orders/42/.", ["https://example.com/orders/42"]),
        ("url", "(https://example.com/wiki/Foo_(bar))", ["https://example.com/wiki/Foo_(bar)"]),
        ("url", "<http://example.com:80/a?b=1>", ["http://example.com/a?b=1"]),
        ("url", "example.com or ftp://example.com", []),
        ("phone", "call me at +1 (415) 555-0132.", ["+14155550132"]),
        ("phone", "UK: +44 (0)20 7946 0958", ["+442079460958"]),
        ("phone", "0044 20 7946 0958, evenings", ["+442079460958"]),
        ("phone", "(415) 555-0132 or 415.555.0132", ["4155550132", "4155550132"]),
        ("phone", "Berlin 030 1234567!", ["0301234567"]),
        ("phone", "on 2024-01-15 at 10:30, order 12345678, room 101, 01-15", []),
        ("phone", "Paris: +33 1 23 45 67 89", ["+33123456789"]),
        ("phone", "Moscow +7 (495) 123-45-67, Berlin 030/1234567", ["+74951234567", "0301234567"]),
        ("phone", "mobile 0171 1234567 or 06 12 34 56 78", ["01711234567", "0612345678"]),
        ("phone", "+1 415 555 0132x and +12", []),
        ("url", "http://a.example/" + ")" * 5000, ["http://a.example"]),
        ("iban", "IBAN: DE89 3704 0044 0532 0130 00.", ["DE89370400440532013000"]),
        ("iban", "de89370400440532013000 please", ["DE89370400440532013000"]),
        ("iban", "'GB82 WEST 1234 5698 7654 32'", ["GB82WEST12345698765432"]),
        ("iban", "DE89 3704 0044 0532 0130 01 (a wrong check digit)", []),
        ("iban", "FR14 2004 1010 0505 0001 3M02 606", ["FR1420041010050500013M02606"]),
        ("prefixed:cus_", "I'm cus_41ZpA9.", ["cus_41ZpA9"]),
        ("prefixed:cus_", "customer 'cus_NffrFeUfNV2Hib', not mycus_abc", ["cus_NffrFeUfNV2Hib"]),
        ("prefixed:cus_", "cus_ alone, CUS_41ZPA9", []),
    ],
)
def test_ready_made_kinds_find_ids_in_realistic_user_text(
    like: str, text: str, keys: list[str]
) -> None:
    """Each pattern takes the id out of case, quotes, brackets, mailto: and a final full stop."""
    assert taken(like, text) == keys


@pytest.mark.parametrize(
    ("like", "forms"),
    [
        (
            "email",
            [
                "ana@example.com",
                "Ana@Example.COM",
                "<ana@example.com>",
                "mailto:ana@example.com",
                " mailto:<ANA@example.com>. ",
                "<mailto:ana@example.com?subject=Hi>",
            ],
        ),
        (
            "uuid",
            [
                "123e4567-e89b-12d3-a456-426614174000",
                "{123E4567-E89B-12D3-A456-426614174000}",
                "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
                "123e4567e89b12d3a456426614174000",
            ],
        ),
        ("url", ["https://example.com/a", "HTTPS://EXAMPLE.com/a/", "https://example.com:443/a"]),
        ("phone", ["+14155550132", "+1 (415) 555-0132", "001-415-555-0132", "tel:+1.415.555.0132"]),
        (
            "iban",
            [
                "DE89370400440532013000",
                "de89 3704 0044 0532 0130 00",
                "DE89-3704-0044-0532-0130-00",
            ],
        ),
        ("prefixed:cus_", ["cus_41ZpA9", " cus_41ZpA9\n"]),
    ],
)
def test_every_way_of_writing_one_id_has_one_key(like: str, forms: list[str]) -> None:
    """The normaliser keys every written form of one id alike (what the check compares)."""
    assert len({kind(like).key(form) for form in forms}) == 1


@pytest.mark.parametrize(
    ("like", "other"),
    [
        ("prefixed:cus_", "cus_41zpa9"),  # these ids are case-sensitive: one letter is another id
        ("phone", "+14155550133"),
        ("iban", "DE89370400440532013001"),
    ],
)
def test_ids_that_differ_keep_different_keys(like: str, other: str) -> None:
    """A one-character change is another key: the check sees it as a near miss."""
    first = {
        "prefixed:cus_": "cus_41ZpA9",
        "phone": "+14155550132",
        "iban": "DE89370400440532013000",
    }
    assert kind(like).key(first[like]) != kind(like).key(other)


@pytest.mark.parametrize("like", LIKES)
def test_no_ready_made_pattern_takes_plain_words(like: str) -> None:
    """Declaring a ready-made kind warns about nothing: no plain English word is an id."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kind(like).plain_words() == []


def test_a_ready_made_kind_works_end_to_end_in_one_line() -> None:
    """The user types <Ana@Example.com>; the model's ana@example.com is looked up, then written."""
    guard = Guard(mode="raise")
    guard.add_kind("email", like="email")
    guard.declare("find_user", ids={"email": "email"}, produces={"email": "email"}, effect="read")
    guard.declare("send_invite", ids={"email": "email"})
    with guard.session("s") as ledger:
        guard.observe_user("Please invite <Ana@Example.com>.")
        assert ledger["email"].value == "Ana@Example.com"
        assert guard.check("find_user", {"email": "ana@example.com"}).allowed
        assert not guard.check("send_invite", {"email": "ana@example.com"}).allowed
        guard.record("find_user", {"email": "ana@example.com"}, {"email": "ana@example.com"})
        assert guard.check("send_invite", {"email": "mailto:ANA@example.com"}).allowed


def test_a_mutated_iban_is_refused_as_a_near_miss_of_the_one_it_copies() -> None:
    """The checksum keeps wrong IBANs out of user text, not out of the check's near-miss search."""
    guard = Guard(mode="reprompt")
    guard.add_kind("iban", like="iban")
    guard.declare("list_payees", produces={"[*].iban": "iban"}, effect="read")
    guard.declare("send_money", ids={"to": "iban"})
    with guard.session("s"):
        guard.record("list_payees", {}, [{"iban": "DE89 3704 0044 0532 0130 00"}])
        assert guard.check("send_money", {"to": "de89370400440532013000"}).allowed
        verdict = guard.check("send_money", {"to": "DE89 3704 0044 0532 0130 01"})
    assert [(f.problem, f.nearest_role) for f in verdict.findings] == [("mutated", "iban")]


def test_ready_made_kinds_come_from_a_manifest_too() -> None:
    """`like = "email"` in a manifest's kind is the same as like= in Python."""
    guard = Guard.from_manifest(
        {
            "kinds": {"contact": {"like": "email"}, "customer": {"like": "prefixed:cus_"}},
            "tools": {"get_customer": {"effect": "read", "ids": {"id": "customer"}}},
        }
    )
    assert guard.kinds["contact"].pattern == kind("email").pattern
    assert guard.kinds["customer"].matches("cus_41ZpA9")
    assert guard.kinds["contact"].description == "an e-mail address"
    with pytest.raises(ManifestError, match="like='email' gives the pattern"):
        Guard.from_manifest({"kinds": {"contact": {"like": "email", "pattern": "x"}}, "tools": {}})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"like": "mail"}, "no ready-made kind 'mail'; like= takes one of email, uuid"),
        ({"like": "prefixed:"}, "needs a prefix"),
        ({"like": "prefixed:cus _"}, "needs a prefix"),
        ({"like": "email", "normalize": "casefold"}, "pass like= alone"),
    ],
)
def test_a_wrong_like_is_a_usage_error_that_lists_the_choices(
    options: dict[str, str], message: str
) -> None:
    """An unknown ready-made kind, a bad prefix or like= with a pattern says what to write."""
    with pytest.raises(GuardrailUsageError, match=message):
        Guard().add_kind("k", **options)  # type: ignore[arg-type]


def test_the_iban_checksum_is_iso_13616() -> None:
    """Known good IBANs pass the mod-97 check; one changed digit fails it."""
    assert iban_checksum_ok("DE89370400440532013000")
    assert iban_checksum_ok("GB82WEST12345698765432")
    assert not iban_checksum_ok("DE89370400440532013001")


# -- property tests: the pattern finds what the normaliser keys the same -----------------------

_WORDS = st.lists(st.sampled_from(["hi", "my", "is", "the", "use", "thanks", "ok"]), max_size=3)
_WRAPPERS: list[Callable[[str], str]] = [
    lambda v: v,
    lambda v: f"{v}.",
    lambda v: f"{v},",
    lambda v: f"{v}!",
    lambda v: f'"{v}"',
    lambda v: f"'{v}'.",
    lambda v: f"({v})",
    lambda v: f"<{v}>",
]


def _mixed_case(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips, strict=True))


@st.composite
def emails(draw: st.DrawFn) -> tuple[str, str]:
    local = draw(st.from_regex(r"[a-z0-9]{1,8}(\.[a-z0-9]{1,5})?(\+[a-z]{1,4})?", fullmatch=True))
    domain = draw(st.from_regex(r"[a-z][a-z0-9]{0,8}\.(com|org|io|de|co\.uk)", fullmatch=True))
    address = f"{local}@{domain}"
    written = _mixed_case(draw, address)
    if draw(st.booleans()):
        written = f"mailto:{written}"
    return address, written


@st.composite
def uuids(draw: st.DrawFn) -> tuple[str, str]:
    value = str(draw(st.uuids()))
    written = _mixed_case(draw, value)
    if draw(st.booleans()):
        written = "{" + written + "}"
    return value, written


@st.composite
def urls(draw: st.DrawFn) -> tuple[str, str]:
    host = draw(st.from_regex(r"[a-z][a-z0-9]{0,8}\.(com|org|io)", fullmatch=True))
    path = draw(st.from_regex(r"(/[a-z0-9_-]{1,6}){0,3}", fullmatch=True))
    scheme = draw(st.sampled_from(["http", "https"]))
    written = f"{_mixed_case(draw, scheme)}://{_mixed_case(draw, host)}{path}"
    if draw(st.booleans()):
        written += "/"
    return f"{scheme}://{host}{path}", written


@st.composite
def phones(draw: st.DrawFn) -> tuple[str, str]:
    country = str(draw(st.integers(1, 999)))
    area = str(draw(st.integers(200, 999)))
    rest = draw(st.from_regex(r"[0-9]{3} ?[0-9]{4}", fullmatch=True)).replace(" ", "")
    shape = draw(
        st.sampled_from(
            ["+{c} {a} {r3} {r4}", "+{c} ({a}) {r3}-{r4}", "00{c} {a}.{r3}.{r4}", "+{c}{a}{r3}{r4}"]
        )
    )
    written = shape.format(c=country, a=area, r3=rest[:3], r4=rest[3:])
    return f"+{country}{area}{rest}", written


@st.composite
def ibans(draw: st.DrawFn) -> tuple[str, str]:
    country = draw(st.sampled_from(["DE", "FR", "NL", "ES"]))
    account = draw(st.from_regex(r"[0-9]{18}", fullmatch=True))
    number = int("".join(str(int(char, 36)) for char in f"{account}{country}00"))
    value = f"{country}{98 - number % 97:02d}{account}"
    grouped = " ".join(value[i : i + 4] for i in range(0, len(value), 4))
    written = draw(st.sampled_from([value, grouped, grouped.lower(), value.lower()]))
    return value, written


@st.composite
def prefixed(draw: st.DrawFn) -> tuple[str, str]:
    value = "cus_" + draw(st.from_regex(r"[A-Za-z0-9]{4,16}", fullmatch=True))
    return value, value


_GENERATORS = {
    "email": emails(),
    "uuid": uuids(),
    "url": urls(),
    "phone": phones(),
    "iban": ibans(),
    "prefixed:cus_": prefixed(),
}


@pytest.mark.parametrize("like", LIKES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_pattern_finds_what_the_normaliser_keys_the_same(
    like: str, data: st.DataObject
) -> None:
    """However an id is written in a sentence, the pattern takes it and its key is the id's."""
    ready = kind(like)
    value, written = data.draw(_GENERATORS[like])
    wrapper = data.draw(st.sampled_from(_WRAPPERS))
    before, after = data.draw(_WORDS), data.draw(_WORDS)
    sentence = " ".join([*before, wrapper(written), *after])
    key = ready.key(value)
    assert key is not None
    assert ready.key(written) == key
    assert [found for _, found in ready.ids_in(sentence)] == [key], sentence
    assert ready.key(ready.key(written) or "") == key  # the key is a fixed point


# -- crafted text: every pattern runs in linear time ------------------------------------------

#: How many times a trivial search of the same text (``re.search`` of a pattern tried at every
#: position) a ready-made kind's ``ids_in`` may take on 200,000 crafted characters. The worst
#: measured is about 100x, on a text dense with ids, each one normalised; the patterns that
#: backtracked took 6,000x (a URL ending in brackets) to 80,000x (digits after a ``+1``).
LINEAR = 250
#: The same bound for ``observe_user`` and ``record`` of 10 KB, where the cost of a call
#: (its session, its audit) is not small next to a search of 10 KB; backtracking cost more
#: than 5,000x there.
LINEAR_CALL = 1000


def _too_slow(ready: Kind, chars: int) -> dict[str, str]:
    """The crafted texts of ``chars`` characters on which ``ready.ids_in`` is over the bound."""
    slow = {}
    for name, text in crafted(chars).items():
        ratio, took, _ = ratio_to_trivial(ready, text)
        if ratio > LINEAR:
            slow[name] = f"{ratio:,.0f}x a trivial search ({took:.2f} s)"
    return slow


@pytest.mark.slow
@pytest.mark.parametrize("like", LIKES)
def test_no_crafted_text_makes_a_ready_made_pattern_slow(like: str) -> None:
    """On 200,000 crafted characters each kind takes at most 250x a trivial search of them.

    Digit runs with separators, ``a.a.a...``, ``@@@``, long dotted hosts, a URL
    ending in brackets and the rest (``guardrail_bench.crafted``); 20,000 first,
    so a pattern that backtracks fails in seconds, not hours.
    """
    ready = kind(like)
    assert _too_slow(ready, 20_000) == {}
    assert _too_slow(ready, 200_000) == {}


@pytest.mark.slow
@pytest.mark.parametrize("like", LIKES)
def test_observing_or_recording_10_kb_of_crafted_text_stays_linear(like: str) -> None:
    """A user message or a tool result of 10 KB crafted text costs at most 1,000x a search of it."""
    guard = Guard(mode="reprompt")
    guard.add_kind("k", like=like, mentions="ask")
    guard.declare("fetch", effect="read")
    slow = {}
    sessions = iter(range(10**6))  # each call in a session of its own: a first user message
    for name, text in crafted(10_000).items():

        def observe(text: str = text) -> None:
            with guard.session(f"user-{next(sessions)}"):
                guard.observe_user(text)

        def record(text: str = text) -> None:
            with guard.session(f"tool-{next(sessions)}"):
                guard.record("fetch", {}, {"body": text})

        trivial = fastest(lambda: TRIVIAL.search(text), 5)  # noqa: B023 - called at once
        for call, run in (("observe_user", observe), ("record", record)):
            ratio = fastest(run, 3) / trivial
            if ratio > LINEAR_CALL:
                slow[f"{call}, {name}"] = f"{ratio:,.0f}x"
    assert slow == {}


# -- phone numbers with a default country code ------------------------------------------------


@pytest.mark.parametrize(
    "spec", [{"like": "phone:+1"}, {"pattern": r"[0-9+()\- ]+", "normalize": "phone:+1"}]
)
def test_phone_default_country_folds_national_spellings(spec: dict[str, str]) -> None:
    """With phone:+1, (555) 123-2002, 555-123-2002 and +1 555 123 2002 are one number."""
    guard = Guard.from_manifest({"kinds": {"phone": spec}, "tools": {}})
    kind = guard.kinds["phone"]
    spellings = ["(555) 123-2002", "555-123-2002", "+1 555 123 2002", "1 555 123 2002"]
    assert {kind.key(s) for s in spellings} == {"+15551232002"}
    assert kind.key("+44 20 7946 0958") == "+442079460958"  # its own country code stays


def test_phone_default_country_drops_a_trunk_zero() -> None:
    """Outside North America, a national number's trunk 0 gives way to the country code."""
    guard = Guard()
    kind = guard.add_kind("phone", like="phone:+44")
    assert kind.key("020 7946 0958") == kind.key("+44 (0)20 7946 0958") == "+442079460958"


@pytest.mark.parametrize("bad", ["phone:", "phone:UK", "phone:+0"])
def test_phone_default_country_must_be_a_calling_code(bad: str) -> None:
    """A default that is no calling code is a usage error saying what to write."""
    with pytest.raises(GuardrailUsageError, match="country calling code"):
        Guard().add_kind("phone", like=bad)
    with pytest.raises(GuardrailUsageError, match="country calling code"):
        Guard().add_kind("phone", normalize=bad)


def test_phone_typed_one_way_looked_up_another_runs_as_written() -> None:
    """The user's (555) 123-2002 lets the model look up 555-123-2002, which the tool receives."""
    guard = Guard.from_manifest(
        {
            "kinds": {"phone": {"like": "phone:+1"}, "line": {"pattern": "L[0-9]{4}"}},
            "tools": {
                "find_line_by_phone": {
                    "effect": "read",
                    "ids": {"phone": "phone"},
                    "produces": {"line_id": "line", "phone": "phone"},
                },
                "suspend_line": {"effect": "write", "ids": {"line_id": "line"}},
            },
        },
        mode="reprompt",
    )
    with guard.session("phone-call"):
        guard.observe_user("Hi, my number is (555) 123-2002 and my line was stolen.")
        verdict = guard.check("find_line_by_phone", {"phone": "555-123-2002"})
        assert verdict.allowed
        assert verdict.arguments == {"phone": "555-123-2002"}
        guard.record(
            "find_line_by_phone",
            {"phone": "555-123-2002"},
            {"line_id": "L1002", "phone": "555-123-2002"},
        )
        assert guard.check("suspend_line", {"line_id": "L1002"}).allowed
