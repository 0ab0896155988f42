"""The expression language (SPEC §3): grammar, limits, optional chaining, context checks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from superdialog_core import ExprError, compile_expr, evaluate
from superdialog_core.lang.expr import CompiledExpr, ExprContext

SCOPE: dict[str, Any] = {
    "slots": {"city": "Pune", "n": 3, "prefs": {"seat": "window"}, "tags": ["a", "b"]},
    "results": {
        "search": {
            "ok": True,
            "status": 200,
            "data": {"slots": [{"time": "19:00"}, {"time": "20:00"}, {"time": "19:00"}]},
            "error": None,
        },
        "hold": {"ok": False, "status": 404, "data": None, "error": "not found"},
    },
    "env": {"API": "secret"},
    "call": {"direction": "inbound"},
    "calls": {"hold": 2},
    "pipeline": {"ok": True, "failed": False},
    "views": {"open": True},
}


def ev(text: str, scope: dict[str, Any] | None = None) -> Any:
    return compile_expr(text).evaluate(SCOPE if scope is None else scope)


# --- the reference outputs of superdialog §2 that we keep ---------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('slots.city == "Pune"', True),
        ("slots.missing is None", True),
        ("results.hold.status == 404", True),
        ("len(results.search.data.slots) > 0", True),
        ('first(pluck(results.search.data.slots, "time"))', "19:00"),
        ('last(pluck(results.search.data.slots, "time"))', "19:00"),
        ('unique(pluck(results.search.data.slots, "time"))', ["19:00", "20:00"]),
        ("len(slots.missing)", 0),
        ("(1, 2)", (1, 2)),
        ("[1, slots.n]", [1, 3]),
        ("True and slots.n", 3),
        ("slots.prefs.seat", "window"),
        ('slots["city"]', "Pune"),
        ('slots.prefs["seat"]', "window"),
        ("-slots.n", -3),
        ("-1", -1),
        ("1 < 2 < 3", True),
        ("3 > 2 > 2", False),
        ('"a" in slots.tags', True),
        ('"z" not in slots.tags', True),
        ('slots.city in ["Pune", "Delhi"]', True),
        ('"un" in slots.city', True),
        ("slots.n is not None", True),
        ("min(5, slots.n, 9)", 3),
        ("max([1, 7, 2])", 7),
        ("any([0, slots.n])", True),
        ("all([1, slots.n])", True),
        ('lower(slots.city) == "pune"', True),
        ("upper(slots.city)", "PUNE"),
        ("pipeline.ok", True),
        ("views.open", True),
        ("call.direction", "inbound"),
        ("env.API", "secret"),
    ],
)
def test_grammar_and_helpers(text: str, expected: Any) -> None:
    assert ev(text) == expected


# --- optional chaining -----------------------------------------------------------------------
def test_missing_path_is_none_for_that_node_only_or() -> None:
    assert ev("results.nope.ok or True") is True


def test_missing_path_is_none_for_that_node_only_not() -> None:
    assert ev("not results.nope.ok") is True


def test_missing_at_every_depth_is_none() -> None:
    assert ev("results.nope.data.items[3].name") is None
    assert ev("slots.prefs.seat.width") is None  # attribute of a str: not an object path
    assert ev("slots.tags[7]") is None  # index out of range
    assert ev('slots.tags["x"]') is None  # a key on a list


def test_missing_namespace_is_none() -> None:
    assert ev("results.search.ok", {"slots": {}}) is None
    assert ev("slots.city", {}) is None


def test_list_index_gives_attribute_access_to_dict_items() -> None:
    assert ev("results.search.data.slots[0].time") == "19:00"
    assert ev("results.search.data.slots[1].time") == "20:00"
    assert ev("results.search.data.slots[-1].time") == "19:00"


def test_first_and_last_give_attribute_access() -> None:
    assert ev("first(results.search.data.slots).time") == "19:00"
    assert ev("last(results.search.data.slots)['time']") == "19:00"
    assert ev("first([]).time") is None


def test_dynamic_index() -> None:
    scope = {"slots": {"i": 1, "key": "seat", "prefs": {"seat": "aisle"}, "tags": ["x", "y"]}}
    assert ev("slots.tags[slots.i]", scope) == "y"
    assert ev("slots.prefs[slots.key]", scope) == "aisle"
    assert ev("slots.tags[slots.nope]", scope) is None


def test_calls_of_a_tool_never_called_is_zero() -> None:
    assert ev('calls["hold"]') == 2
    assert ev("calls.search") == 0
    assert ev("calls.search == 0", {}) is True


def test_raw_values_ignore_status() -> None:
    """Scope values are raw; a dict value is a dict, not a slot object."""
    assert ev("slots.prefs") == {"seat": "window"}


# --- None semantics --------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["<", ">", "<=", ">="])
def test_ordering_with_none_is_false(op: str) -> None:
    assert ev(f"slots.missing {op} 3") is False
    assert ev(f"3 {op} slots.missing") is False
    assert ev(f"not (slots.missing {op} 3)") is True


def test_in_none_is_false() -> None:
    assert ev('"a" in slots.missing') is False
    assert ev('"a" not in slots.missing') is True
    assert ev("slots.missing in slots.city") is False


def test_all_of_empty_or_none_is_false() -> None:
    """Documented choice: a vacuous all() must not fire a rule."""
    assert ev("all([])") is False
    assert ev("all(slots.missing)") is False
    assert ev("any(slots.missing)") is False


def test_min_max_skip_none_and_empty_is_none() -> None:
    assert ev("min(slots.missing, 4)") == 4
    assert ev("max([])") is None
    assert ev("max(slots.missing)") is None


def test_pluck_and_unique_of_none_are_empty() -> None:
    assert ev('pluck(slots.missing, "x")') == []
    assert ev("unique(slots.missing)") == []
    assert ev("unique([[1], [1], [2]])") == [[1], [2]]


# --- impossible operations: None for that node, reported once --------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "slots.city < 3",
        "len(slots.n)",
        "-slots.city",
        "slots.n in 3",
        "slots.n in slots.city",
        "first(slots.n)",
        'pluck(slots.city, "x")',
        "max(slots.city, 3)",
        "any(slots.n)",
        "lower(slots.n)",
        "slots.prefs[slots.tags]",
    ],
)
def test_impossible_operation_is_none_and_reported(text: str) -> None:
    details: list[str] = []
    assert compile_expr(text).evaluate(SCOPE, details.append) is None
    assert len(details) == 1
    assert text in details[0]


def test_impossible_operation_is_none_for_that_node_only() -> None:
    details: list[str] = []
    value = compile_expr("slots.city < 3 or slots.n == 3").evaluate(SCOPE, details.append)
    assert value is True
    assert len(details) == 1


def test_on_error_is_called_once_per_evaluation() -> None:
    details: list[str] = []
    compiled = compile_expr("[len(slots.n), slots.city < 1, -slots.city]")
    assert compiled.evaluate(SCOPE, details.append) == [None, None, None]
    assert len(details) == 1
    assert "and 2 more" in details[0]


def test_on_error_not_called_for_missing_values() -> None:
    details: list[str] = []
    compile_expr("results.nope.ok or slots.missing < 3").evaluate(SCOPE, details.append)
    assert details == []


def test_scope_of_the_wrong_shape_does_not_raise() -> None:
    details: list[str] = []
    assert compile_expr("slots.x").evaluate(42, details.append) is None  # type: ignore[arg-type]
    assert details


# --- rejected at compile time ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("slots.n + 1", "BinOp"),
        ("slots.n * 2", "arithmetic"),
        ("[x for x in slots.tags]", "ListComp"),
        ("{x for x in slots.tags}", "SetComp"),
        ("{x: 1 for x in slots.tags}", "DictComp"),
        ("any(x for x in slots.tags)", "GeneratorExp"),
        ("lambda: 1", "Lambda"),
        ('f"{slots.city}"', "f-string"),
        ('{"a": 1}', "Dict"),
        ("{1, 2}", "Set"),
        ("1 if slots.n else 2", "IfExp"),
        ("slots.tags[0:1]", "Slice"),
        ("max(slots.tags, default=0)", "keyword"),
        ("len(*slots.tags)", "Starred"),
        ("(x := 1)", "NamedExpr"),
        ("~slots.n", "UnaryOp"),
        ("slots.city.upper()", "method calls are not allowed"),
        ("slots._secret", "forbidden attribute '_secret'"),
        ("slots.__class__", "forbidden attribute '__class__'"),
        ("__import__", "forbidden name '__import__'"),
        ('pluck(slots.tags, "_x")', "forbidden pluck key '_x'"),
        ("open", "unknown name 'open'"),
        ("slot.city", "did you mean 'slots'"),
        ("true", "did you mean True"),
        ("eval(slots.x)", "unknown helper 'eval'"),
        ("lenn(slots.x)", "did you mean 'len'"),
        ("len", "must be called"),
        ("len(slots.a, slots.b)", "len() takes 1"),
        ("b'x'", "forbidden constant"),
        ("slots.x ==", "syntax error"),
        ("", "empty expression"),
    ],
)
def test_forbidden_constructs(text: str, fragment: str) -> None:
    with pytest.raises(ExprError) as raised:
        compile_expr(text)
    assert fragment in str(raised.value)


def test_error_names_the_position() -> None:
    with pytest.raises(ExprError, match=r"at column 12 in '1 \+ 2'"):
        compile_expr("slots.n == 1 + 2")


def test_length_limit() -> None:
    ok = "slots.n == 1" + " " * (4096 - 12)
    compile_expr(ok)
    with pytest.raises(ExprError, match="too long"):
        compile_expr(ok + " ")


def test_depth_limit() -> None:
    compile_expr("not " * 30 + "slots.x")  # 30 UnaryOp + Attribute + Name = 32 levels
    with pytest.raises(ExprError, match="nested too deeply"):
        compile_expr("not " * 31 + "slots.x")


@pytest.mark.parametrize(
    "text",
    [
        "len(" * 100 + "slots.x" + ")" * 100,
        "[" * 100 + "]" * 100,
        "not " * 1000 + "x",
        "-" * 4000 + "x",
        "(" * 2000 + ")" * 2000,
        "slots." + ".a" * 1000,
        "a." * 2000 + "b",
    ],
)
def test_deep_or_huge_input_is_an_expr_error(text: str) -> None:
    with pytest.raises(ExprError):
        compile_expr(text)


def test_non_string_is_an_expr_error() -> None:
    with pytest.raises(ExprError, match="must be a string"):
        compile_expr(3)  # type: ignore[arg-type]


# --- context checks --------------------------------------------------------------------------
CTX = ExprContext(declared_slots={"party_size", "city"}, allow_pipeline=False, allow_env=False)


def test_context_accepts_declared_slots() -> None:
    assert (
        compile_expr("slots.city and slots['party_size']", context=CTX).evaluate(
            {"slots": {"city": "x", "party_size": 2}}
        )
        == 2
    )


def test_context_rejects_undeclared_slot_with_did_you_mean() -> None:
    with pytest.raises(
        ExprError, match=r"undeclared slot 'party_sise' \(did you mean 'party_size'\?\)"
    ):
        compile_expr("slots.party_sise > 2", context=CTX)


def test_context_rejects_undeclared_subscript_slot() -> None:
    with pytest.raises(ExprError, match="undeclared slot 'zzz'"):
        compile_expr('slots["zzz"]', context=CTX)


def test_context_pipeline_only_where_allowed() -> None:
    with pytest.raises(ExprError, match="'pipeline' is only available"):
        compile_expr("pipeline.ok", context=CTX)
    allowed = ExprContext(declared_slots=None, allow_pipeline=True, allow_env=False)
    assert compile_expr("pipeline.ok", context=allowed).evaluate(SCOPE) is True


def test_context_env_only_where_allowed() -> None:
    with pytest.raises(ExprError, match="'env' is not available"):
        compile_expr("env.API", context=CTX)
    allowed = ExprContext(declared_slots=None, allow_pipeline=False, allow_env=True)
    assert compile_expr("env.API", context=allowed).evaluate(SCOPE) == "secret"


def test_without_context_everything_is_allowed() -> None:
    compiled = compile_expr("slots.anything and pipeline.ok and env.X")
    scope = {"slots": {"anything": 1}, "pipeline": {"ok": True}, "env": {"X": "token"}}
    assert compiled.evaluate(scope) == "token"


def test_slot_refs() -> None:
    compiled = compile_expr('slots.a == slots["b"] or results.x.ok or slots.c.d or slots[slots.e]')
    assert compiled.slot_refs == frozenset({"a", "b", "c", "e"})
    assert compiled.text.startswith("slots.a")


# --- module-level evaluate ------------------------------------------------------------------
def test_evaluate_accepts_text_and_compiled() -> None:
    assert evaluate("slots.n == 3", SCOPE) is True
    assert evaluate(compile_expr("slots.n == 3"), SCOPE) is True


def test_evaluate_rejects_bad_text() -> None:
    with pytest.raises(ExprError):
        evaluate("slots.n + 1", SCOPE)


def test_compiled_is_reusable_across_scopes() -> None:
    compiled = compile_expr("slots.n > 2")
    assert isinstance(compiled, CompiledExpr)
    assert compiled.evaluate({"slots": {"n": 3}}) is True
    assert compiled.evaluate({"slots": {"n": 1}}) is False
    assert compiled.evaluate({"slots": {}}) is False


# --- property tests --------------------------------------------------------------------------
TOKENS = [
    "slots",
    "results",
    "env",
    "calls",
    "call",
    "pipeline",
    "views",
    "x",
    "_x",
    "__class__",
    ".",
    ".a",
    ".ok",
    "[",
    "]",
    "(",
    ")",
    ",",
    "0",
    "-1",
    "'a'",
    '"_b"',
    "None",
    "True",
    " and ",
    " or ",
    "not ",
    "-",
    " == ",
    " != ",
    " < ",
    " >= ",
    " in ",
    " not in ",
    " is ",
    " is not ",
    "len(",
    "first(",
    "last(",
    "pluck(",
    "unique(",
    "min(",
    "max(",
    "any(",
    "all(",
    "lower(",
    "+",
    "*",
    ":",
    "lambda",
    " for ",
    " if ",
    " else ",
    "{",
    "}",
    "=",
    "**",
]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "ok", "data", "x", "0"]), children, max_size=4)
    ),
    max_leaves=12,
)
SCOPES = st.dictionaries(
    st.sampled_from(["slots", "results", "env", "calls", "call", "pipeline", "views"]),
    JSON,
    max_size=7,
)


def _compile_or_none(text: str) -> CompiledExpr | None:
    try:
        return compile_expr(text)
    except ExprError:
        return None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), SCOPES)
def test_random_text_only_raises_expr_error(text: str, scope: dict[str, Any]) -> None:
    compiled = _compile_or_none(text)
    if compiled is not None:
        details: list[str] = []
        compiled.evaluate(scope, details.append)  # never raises
        assert len(details) <= 1, "on_error is called at most once per evaluation"


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=25), SCOPES)
def test_random_token_soup_never_raises_at_evaluation(
    tokens: list[str], scope: dict[str, Any]
) -> None:
    compiled = _compile_or_none("".join(tokens))
    if compiled is not None:
        details: list[str] = []
        compiled.evaluate(scope, details.append)
        assert len(details) <= 1


def test_multi_line_expression_from_a_yaml_block() -> None:
    compiled = compile_expr('slots.city == "Pune"\n  and slots.n > 2\n')
    assert compiled.evaluate(SCOPE) is True


def test_module_evaluate_reports_through_on_error() -> None:
    details: list[str] = []
    assert evaluate("len(slots.n)", SCOPE, details.append) is None
    assert details and "len() of int" in details[0]


# --- hardening (H10) -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ['slots.city is "Pune"', "slots.n is 1000", "slots.n is not 1", "1 is slots.n",
     "slots.n is -1", "slots.n is []", "slots.n is (1, 2)", "slots.n is 1.5", "slots.n is 1.0",
     "slots.n is 0",
     "slots.n == 1 is 1"],
)  # fmt: skip
def test_identity_against_a_literal_value_is_a_load_error(text: str) -> None:
    with pytest.raises(ExprError, match="'is' only tests None, True or False"):
        compile_expr(text)


def test_identity_against_none_and_booleans_still_works() -> None:
    scope = {"slots": {"flag": True, "n": 0}}
    assert evaluate("slots.flag is True and slots.n is not None", scope) is True
    assert evaluate("slots.n is False", scope) is False  # 0 is not False
    assert evaluate("slots.x is None and slots.n is not slots.x", scope) is True


def test_a_comment_in_a_multi_line_expression_ends_at_its_line() -> None:
    scope = {"slots": {"a": 1, "b": 3}}
    text = 'slots.a == 1  # the size is known\nand slots.b == 2  # "and" must still count\n'
    assert compile_expr(text).evaluate(scope) is False  # joined naively, `and ...` was a comment
    assert compile_expr('slots.a == 1\n# a whole-line note\nor slots.b == "#2"').evaluate(scope)
    with pytest.raises(ExprError, match="empty expression"):
        compile_expr("# nothing but a note")


@pytest.mark.parametrize("newline", ["\r\n", "\r", "\n"])
def test_any_line_ending_joins_lines(newline: str) -> None:
    text = f"slots.a == 1{newline}  and slots.b == 3{newline}"
    assert compile_expr(text).evaluate({"slots": {"a": 1, "b": 3}}) is True


def test_evaluation_never_parses_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import ast

    compiled = compile_expr("results.search.ok and len(slots.items) > 0")
    text = "slots.n >= 2 and first(slots.items).name == 'x'"
    scope = {"slots": {"n": 2, "items": [{"name": "x"}]}, "results": {"search": {"ok": True}}}
    assert evaluate(text, scope) is True  # compiled once, cached by its text

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed during an evaluation")

    monkeypatch.setattr(ast, "parse", forbidden)
    assert compiled.evaluate(scope) is True
    assert evaluate(text, scope) is True
