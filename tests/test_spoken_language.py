"""Spoken forms in verbatim lines speak the playbook's language (SPEC §16)."""

from __future__ import annotations

from superdialog_core import Playbook

TEMPLATE = """
guidelines: {{language: {language}}}
journeys:
  m:
    checkpoints:
      - id: a
        slots: {{d: {{type: date}}, t: {{type: time}}}}
        say_verbatim: "{{{{ slots.d | spoken_date }}}}, {{{{ slots.t | spoken_time }}}}"
        terminal: true
"""


def render(language: str) -> str:
    playbook = Playbook.from_yaml(TEMPLATE.format(language=language))
    text, error = playbook.checkpoint("m.a")._say_verbatim.render(
        {"slots": {"d": "2026-12-01", "t": "14:30"}}
    )
    assert error is None
    return text


def test_spoken_forms_follow_the_playbook_language() -> None:
    assert render("de") == "Dienstag, 1. Dezember, 14:30"
    assert render("en").startswith("Tuesday, December 1, 2:30")


def test_an_explicit_filter_language_still_wins() -> None:
    playbook = Playbook.from_yaml(
        TEMPLATE.format(language="de").replace("spoken_date }}", "spoken_date('en') }}")
    )
    text, _ = playbook.checkpoint("m.a")._say_verbatim.render({"slots": {"d": "2026-12-01", "t": "09:00"}})
    assert text.startswith("Tuesday, December 1")
