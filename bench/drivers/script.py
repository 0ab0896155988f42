"""The scripted benchmark conversation, shared by both drivers (no imports beyond stdlib).

Turn 0 asks for a table (the Director advances to ``booking.collect``); every later turn gives
a changed party size and time, so each turn logs a user utterance, slot writes and a reply and
the call never ends: a steady state that shows per-turn cost and its growth with call length.
"""

from __future__ import annotations

from typing import Any


def user_line(turn: int) -> str:
    if turn == 0:
        return "Hi, I'd like to book a table for dinner"
    return f"We are {2 + turn % 8} people, at {17 + turn % 5}:00 please"


def director_verdict(turn: int) -> dict[str, Any]:
    if turn == 0:
        return {"slots": {}, "advance": "booking.collect", "note": None}
    return {
        "slots": {"party_size": 2 + turn % 8, "time": f"{17 + turn % 5}:00"},
        "spans": {"party_size": f"{2 + turn % 8} people", "time": f"{17 + turn % 5}:00"},
        "advance": None,
        "note": None,
    }


def talker_reply(turn: int) -> str:
    if turn == 0:
        return "Lovely! How many guests, and for which day and time?"
    return f"Noted, {2 + turn % 8} guests at {17 + turn % 5} o'clock. Which day would you like?"
