"""Speech and tool templates (SPEC §3): forgiving speech, strict tools, typed body leaves."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from superdialog_core.lang.templates import (
    TemplateError,
    TemplateRefusal,
    compile_speech,
    compile_tool_body,
    compile_tool_text,
)

SCOPE: dict[str, Any] = {
    "slots": {"name": "Ann", "party_size": 4, "day": "2026-12-01", "phone": "+4930123456"},
    "results": {
        "visit": {
            "ok": True,
            "status": 200,
            "data": {"items": [{"time": "19:00"}], "ref": None, "code": "AB12"},
            "error": None,
        }
    },
    "env": {"TOKEN": "secret"},
    "call": {},
    "calls": {},
    "views": {"open": True},
}


# --- speech ----------------------------------------------------------------------------------
def test_speech_renders_values() -> None:
    text, detail = compile_speech("Hi {{ slots.name }}, table for {{ slots.party_size }}.").render(
        SCOPE
    )
    assert (text, detail) == ("Hi Ann, table for 4.", None)


def test_speech_default_filter_on_unset_slot() -> None:
    assert compile_speech("{{ slots.city | default('?') }}").render(SCOPE) == ("?", None)


def test_speech_unset_slot_renders_empty_without_error() -> None:
    assert compile_speech("[{{ slots.city }}]").render(SCOPE) == ("[]", None)


def test_speech_chained_access_on_undefined_does_not_explode() -> None:
    template = compile_speech("{{ results.nope.data.items[0].time | default('later') }}")
    assert template.render(SCOPE) == ("later", None)


def test_speech_null_value_is_unset_and_never_says_none() -> None:
    assert compile_speech("[{{ results.visit.data.ref }}]").render(SCOPE) == ("[]", None)
    template = compile_speech("{{ results.visit.data.ref | default('no ref') }}")
    assert template.render(SCOPE) == ("no ref", None)


def test_speech_dict_attribute_reads_the_key_not_the_method() -> None:
    template = compile_speech("{{ results.visit.data.items[0].time }}")
    assert template.render(SCOPE) == ("19:00", None)


def test_speech_failing_part_is_empty_and_reported() -> None:
    template = compile_speech("Hello {{ slots.name + slots.party_size }}there {{ slots.name }}.")
    text, detail = template.render(SCOPE)
    assert text == "Hello there Ann."
    assert detail is not None and "TypeError" in detail


def test_speech_failing_block_is_empty_and_the_rest_spoken() -> None:
    template = compile_speech(
        "{% set greeting = 'Hi' %}{{ greeting }} {% if slots.party_size > 'x' %}big{% endif %}"
        "{{ slots.name }} {{ slots.missing + 1 }}!"
    )
    text, detail = template.render(SCOPE)
    assert text == "Hi Ann !"
    assert detail is not None and "line 1" in detail and "TypeError" in detail


def test_speech_failure_never_shows_template_syntax() -> None:
    text, detail = compile_speech("Your code is {{ slots.name - 1 }}.").render(SCOPE)
    assert "{{" not in text and "}}" not in text
    assert text == "Your code is ."
    assert detail is not None


def test_speech_cannot_reach_python_internals() -> None:
    text, _ = compile_speech("[{{ slots.name.__class__ }}]").render(SCOPE)
    assert text == "[]"


def test_speech_cannot_mutate_the_scope() -> None:
    scope = {"slots": {"tags": ["a"]}}
    _, detail = compile_speech("{{ slots.tags.append('b') }}").render(scope)
    assert scope["slots"]["tags"] == ["a"]
    assert detail is not None


def test_speech_literal_is_returned_as_is() -> None:
    assert compile_speech("Plain text.").render({}) == ("Plain text.", None)


def test_speech_syntax_error_names_the_line() -> None:
    with pytest.raises(TemplateError, match="line 2"):
        compile_speech("fine\n{{ slots.name ")


def test_unknown_filter_is_a_compile_error() -> None:
    with pytest.raises(TemplateError, match="nofilter"):
        compile_speech("{{ slots.name | nofilter }}")
    with pytest.raises(TemplateError, match="nofilter"):
        compile_tool_text("{{ slots.name | nofilter }}")
    with pytest.raises(TemplateError, match="nofilter"):
        compile_tool_body({"a": "{{ slots.name | nofilter }}"})


def test_spoken_filters_are_registered_in_speech() -> None:
    template = compile_speech(
        "{{ slots.day | spoken_date }} at {{ results.visit.data.items[0].time | spoken_time }},"
        " call {{ slots.phone | spoken_digits }}"
    )
    text, detail = template.render(SCOPE)
    assert detail is None
    assert text == "Tuesday, December 1 at 7:00 PM, call plus 4 9 3, 0 1 2, 3 4 5 6"


def test_spoken_filter_on_unset_slot_keeps_default_working() -> None:
    template = compile_speech("{{ slots.nope | spoken_date | default('that day') }}")
    assert template.render(SCOPE) == ("that day", None)


# --- strict tool text ------------------------------------------------------------------------
def test_tool_text_renders() -> None:
    template = compile_tool_text("https://api/{{ slots.day }}?n={{ slots.party_size }}")
    assert template.render(SCOPE) == "https://api/2026-12-01?n=4"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("https://api/{{ slots.day2 }}", "slots.day2 is not set"),
        ("ref={{ results.visit.data.other }}", "results.visit.data.other is missing"),
        ("ref={{ results.visit.data.ref }}", "results.visit.data.ref is null"),
        ("{{ results.gone.data.ref }}", "results.gone is missing"),
        ("{{ results.visit.data.items[3].time }}", "results.visit.data.items[3] is missing"),
        ("{{ slots.nope.inner }}", "slots.nope is not set"),
        ("{{ env.NOPE }}", "env.NOPE is missing"),
        ("{{ undeclared }}", "undeclared is missing"),
    ],
)
def test_tool_text_refusal_names_what_is_missing(source: str, message: str) -> None:
    with pytest.raises(TemplateRefusal) as raised:
        compile_tool_text(source).render(SCOPE)
    assert raised.value.message == message


def test_tool_text_refusal_for_a_failing_operation() -> None:
    with pytest.raises(TemplateRefusal, match="TypeError"):
        compile_tool_text("{{ slots.name - 1 }}").render(SCOPE)


def test_tool_text_default_filter_still_allowed() -> None:
    assert compile_tool_text("{{ slots.nope | default('x') }}").render(SCOPE) == "x"


def test_tool_text_literal() -> None:
    assert compile_tool_text("application/json").render({}) == "application/json"


# --- tool body -------------------------------------------------------------------------------
def test_body_typed_leaf_int_stays_int() -> None:
    body = compile_tool_body(
        {"party": "{{ slots.party_size }}", "loose": "  {{- slots.party_size -}} "}
    )
    assert body.render(SCOPE) == {"party": 4, "loose": 4}


def test_body_typed_leaf_keeps_structures_and_null() -> None:
    body = compile_tool_body(
        {"items": "{{ results.visit.data.items }}", "ref": "{{ results.visit.data.ref }}"}
    )
    assert body.render(SCOPE) == {"items": [{"time": "19:00"}], "ref": None}


def test_body_unset_optional_slot_becomes_none() -> None:
    assert compile_tool_body({"note": "{{ slots.note }}"}).render(SCOPE) == {"note": None}


def test_body_missing_result_path_refuses() -> None:
    with pytest.raises(TemplateRefusal, match=r"results\.gone is missing"):
        compile_tool_body({"x": "{{ results.gone.data }}"}).render(SCOPE)
    with pytest.raises(TemplateRefusal, match=r"results\.visit\.data\.nope is missing"):
        compile_tool_body({"x": "{{ results.visit.data.nope }}"}).render(SCOPE)


def test_body_text_leaf_is_strict() -> None:
    body = compile_tool_body({"greeting": "Hello {{ slots.name }}", "bad": "for {{ slots.note }}"})
    with pytest.raises(TemplateRefusal, match=r"slots\.note is not set"):
        body.render(SCOPE)


def test_body_nested_structures_and_literal_keys() -> None:
    body = compile_tool_body(
        {
            "{{ slots.name }}": [1, 2.5, True, None, "x", {"n": "{{ slots.party_size }}"}],
            "msg": "Hi {{ slots.name }}",
            "list": ["{{ slots.name | upper }}", "{{ slots.party_size }} people"],
        }
    )
    assert body.render(SCOPE) == {
        "{{ slots.name }}": [1, 2.5, True, None, "x", {"n": 4}],
        "msg": "Hi Ann",
        "list": ["ANN", "4 people"],
    }


def test_body_render_gives_a_fresh_structure() -> None:
    body = compile_tool_body({"a": ["x"]})
    first = body.render(SCOPE)
    first["a"].append("y")
    assert body.render(SCOPE) == {"a": ["x"]}


def test_body_two_expressions_are_text() -> None:
    body = compile_tool_body({"x": "{{ slots.party_size }}{{ slots.party_size }}"})
    assert body.render(SCOPE) == {"x": "44"}


def test_body_rejects_non_json_values() -> None:
    with pytest.raises(TemplateError, match=r"body.x: a tool body holds JSON values"):
        compile_tool_body({"x": object()})


def test_body_typed_leaf_syntax_error() -> None:
    with pytest.raises(TemplateError):
        compile_tool_body({"x": "{{ slots.name + }}"})


# --- slot_refs -------------------------------------------------------------------------------
def test_slot_refs_of_every_kind() -> None:
    assert compile_speech(
        "{{ slots.a }} {{ slots['b'] | default('') }} {{ results.c.ok }}"
    ).slot_refs == {
        "a",
        "b",
    }
    assert compile_tool_text("{{ slots.d.inner }}/{{ slots[slots.e] }}").slot_refs == {"d", "e"}
    body = compile_tool_body({"x": "{{ slots.f }}", "y": ["a {{ slots.g }}"], "z": 1})
    assert body.slot_refs == {"f", "g"}
    assert compile_speech("plain").slot_refs == frozenset()


def test_roots_lists_namespaces_used() -> None:
    assert compile_speech("{{ env.TOKEN }} {{ slots.a }}").roots == {"env", "slots"}


@pytest.mark.parametrize(
    "source",
    [
        "{% include 'x.txt' %}",
        "{% extends 'base' %}",
        "{% import 'm' as m %}",
        "{% from 'm' import a %}",
    ],
)
def test_include_extends_import_are_rejected(source: str) -> None:
    with pytest.raises(TemplateError, match="not supported in playbook templates"):
        compile_speech(source)


JINJA_TOKENS = [
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    " if ",
    " endif ",
    " for x in ",
    " endfor ",
    " set ",
    "slots",
    "results",
    ".a",
    ".data",
    "[0]",
    "|",
    "default('?')",
    "upper",
    "spoken_date",
    " + ",
    " - ",
    "(",
    ")",
    "'",
    "text ",
    "1",
    "none",
    "__class__",
    " and ",
    " not ",
]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=120), st.lists(st.sampled_from(JINJA_TOKENS), max_size=20).map("".join)
    )
)
def test_random_speech_templates_fail_only_at_compile(source: str) -> None:
    try:
        template = compile_speech(source)
    except TemplateError:
        return
    text, _ = template.render(SCOPE)
    assert isinstance(text, str)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(JINJA_TOKENS), max_size=20).map("".join))
def test_random_tool_templates_only_refuse(source: str) -> None:
    try:
        template = compile_tool_text(source)
    except TemplateError:
        return
    try:
        rendered = template.render(SCOPE)
    except TemplateRefusal as refusal:
        assert refusal.message  # a refusal always says why
        return
    assert isinstance(rendered, str)


# --- hardening (H10) -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source", ["{{ lipsum }}", "{{ cycler }}", "{{ ''.format }}", "{{ self }}", "{{ range }}"]
)
def test_speech_never_speaks_a_function_or_template_internal(source: str) -> None:
    text, _ = compile_speech(f"[{source}]").render(SCOPE)
    assert text == "[]"


@pytest.mark.parametrize("source", ["{{ lipsum }}", "{{ ''.format }}", "{{ self }}"])
def test_tool_text_refuses_a_function_instead_of_sending_its_repr(source: str) -> None:
    with pytest.raises(TemplateRefusal):
        compile_tool_text(f"https://api.example.com/{source}").render(SCOPE)


def test_body_typed_leaf_refuses_a_function() -> None:
    with pytest.raises(TemplateRefusal, match=r"''\.format gives a function, not a JSON value"):
        compile_tool_body({"x": "{{ ''.format }}"}).render(SCOPE)


def test_body_missing_key_inside_a_set_slot_refuses_rather_than_null() -> None:
    scope = {**SCOPE, "slots": {"prefs": {"seat": "window"}}}
    body = compile_tool_body({"seat": "{{ slots.prefs.seat }}", "x": "{{ slots.prefs.nope }}"})
    with pytest.raises(TemplateRefusal, match=r"slots\.prefs\.nope is missing"):
        body.render(scope)
    assert compile_tool_body({"p": "{{ slots.other }}"}).render(scope) == {"p": None}


def test_body_typed_leaf_hands_out_a_copy_not_the_state() -> None:
    scope = {"results": {"r": {"data": {"items": [{"t": "19:00"}]}}}}
    sent = compile_tool_body({"items": "{{ results.r.data.items }}"}).render(scope)
    sent["items"][0]["t"] = "changed"
    sent["items"].append("more")
    assert scope["results"]["r"]["data"]["items"] == [{"t": "19:00"}]


def test_body_typed_leaf_turns_tuples_and_generators_into_lists() -> None:
    body = compile_tool_body({"t": "{{ (1, 2) }}", "g": "{{ [3, 4] | map('string') }}"})
    assert body.render({}) == {"t": [1, 2], "g": ["3", "4"]}


@pytest.mark.parametrize(
    "source", ["{{ slots.x" + "[0]" * 3000 + " }}", "{{ slots.x" + " | lower" * 2000 + " }}"]
)
def test_deep_templates_are_a_compile_error_not_a_recursion_error(source: str) -> None:
    for compile_ in (compile_speech, compile_tool_text):
        with pytest.raises(TemplateError, match="nested too deeply"):
            compile_(source)


def test_rendering_never_parses_or_compiles_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from superdialog_core.lang import templates, tool_templates

    speech = compile_speech("Hi {{ slots.name }} on {{ slots.day | spoken_date }}{{ 1/0 }}")
    tool = compile_tool_text("https://x.example/{{ slots.name }}")
    body = compile_tool_body({"n": "{{ slots.party_size }}", "t": "for {{ slots.name }}"})

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed or compiled during a render")

    for env in (templates._SPEECH_ENV, tool_templates._TEXT_ENV, tool_templates._VALUE_ENV):
        for name in ("parse", "compile", "from_string", "compile_expression"):
            monkeypatch.setattr(env, name, forbidden)
    text, detail = speech.render(SCOPE)  # the failing part takes the piecewise path
    assert text == "Hi Ann on Tuesday, December 1" and detail is not None
    assert tool.render(SCOPE) == "https://x.example/Ann"
    assert body.render(SCOPE) == {"n": 4, "t": "for Ann"}


def test_spoken_forms_are_formatted_once_per_value(monkeypatch: pytest.MonkeyPatch) -> None:
    import babel.dates

    calls: list[Any] = []
    real = babel.dates.format_date
    monkeypatch.setattr(babel.dates, "format_date", lambda *a, **k: calls.append(a) or real(*a, **k))
    speech = compile_speech("{{ '2031-02-03' | spoken_date }}")
    assert [speech.render({})[0] for _ in range(3)] == ["Monday, February 3"] * 3
    assert len(calls) <= 1


def test_spoken_forms_speak_the_language_the_template_was_compiled_for() -> None:
    scope = {"slots": {"day": "2026-12-01", "at": "19:30"}}
    german = compile_speech("{{ slots.day | spoken_date }}, {{ slots.at | spoken_time }}", language="de")
    assert german.render(scope) == ("Dienstag, 1. Dezember, 19:30", None)
    # an explicit language still wins, and the piecewise fallback keeps the language
    mixed = compile_speech(
        "{{ slots.day | spoken_date('en') }} / {{ slots.day | spoken_date }}{{ 1/0 }}", language="de"
    )
    text, detail = mixed.render(scope)
    assert text == "Tuesday, December 1 / Dienstag, 1. Dezember" and detail is not None
    assert compile_speech("{{ slots.day | spoken_date }}").render(scope)[0] == "Tuesday, December 1"


def test_body_typed_leaf_with_absurdly_deep_data_refuses() -> None:
    deep: Any = "end"
    for _ in range(5000):
        deep = [deep]
    body = compile_tool_body({"x": "{{ results.r.data }}"})
    with pytest.raises(TemplateRefusal, match="nested too deeply"):
        body.render({"results": {"r": {"data": deep}}})
