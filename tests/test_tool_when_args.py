"""A tool's `when` reads the arguments it is called with (a handler's payload)."""

from __future__ import annotations

from superdialog_core import EventLog, Playbook
from superdialog_core.events import Event
from superdialog_core.log.state import ConversationState
from superdialog_core.tools.runner import ToolRunner

PLAYBOOK = """
journeys:
  m:
    checkpoints:
      - {id: a, goal: wait}
tools:
  - {id: refund, type: python, when: "args.amount > 0", store_response_as: refund}
"""


async def test_when_sees_the_call_arguments() -> None:
    playbook = Playbook.from_yaml(PLAYBOOK)
    log, state = EventLog(), ConversationState(playbook)

    def emit(event: Event) -> Event:
        state.apply(log.append(event))
        return event

    calls: list[dict] = []
    runner = ToolRunner(playbook, env={}, python_tools={"refund": lambda args: calls.append(args) or {"ok": 1}})
    assert await runner.run_tool("refund", state=state, emit=emit, args={"amount": 0}) is None
    assert calls == []
    result = await runner.run_tool("refund", state=state, emit=emit, args={"amount": 5})
    assert result is not None and result.ok
    assert calls == [{"amount": 5}]
    assert state.results["refund"].ok
