"""A say_verbatim line is spoken once per entry, and that fact is folded from the log."""

from __future__ import annotations

from superdialog_core import MemoryStore, Playbook, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core import events as ev

PLAYBOOK = """
journeys:
  main:
    checkpoints:
      - id: a
        goal: Learn what the caller wants
        exit_say: "Great."
        advance_when:
          - {id: go, when: "the caller wants to go on", judge: llm, to: main.b}
      - id: b
        goal: Take the details
        say_verbatim: "Welcome to step b."
        advance_when:
          - {id: done, when: "the caller is done", judge: llm, to: main.c}
      - {id: c, terminal: true, outcome: done, say_verbatim: "Bye."}
"""


async def test_an_exit_line_does_not_count_as_the_next_steps_verbatim_and_resume_keeps_it() -> None:
    store = MemoryStore()
    playbook = Playbook.from_yaml(PLAYBOOK)
    rt = Runtime(playbook, ScriptedDirector([{"advance": "main.b"}, {}]),
                 ScriptedTalker(["Hello!", "Sure.", "What is your name?"]),
                 store=store, session_id="s1")
    await rt.start()
    turn = await rt.user_turn("let's go on")
    # the reply, a's exit line, then b's verbatim line: the exit line did not stand in for it
    assert turn.text == "Sure. Great. Welcome to step b."
    lines = [e for e in rt.log if isinstance(e, ev.Utterance) and e.kind == "verbatim"]
    assert [(e.text, e.checkpoint) for e in lines] == [
        ("Great.", None), ("Welcome to step b.", "main.b")]
    assert rt.state.verbatim_spoken == {"main.b"}
    await rt.wait_idle()

    # A resumed call knows b's line was spoken at this entry: the Talker speaks next, once.
    talker = ScriptedTalker(["What is your name?"])
    again = Runtime(playbook, ScriptedDirector([{}]), talker, store=store, session_id="s1")
    await again.start()
    assert again.state.verbatim_spoken == {"main.b"}
    turn = await again.user_turn("hm")
    assert turn.text == "What is your name?" and len(talker.requests) == 1
