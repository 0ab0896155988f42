"""One conversation: the ``Runtime`` and what a turn needs (turn flow, speaker, speech
integrity, quiescence, start-up checks). The top of the engine; nothing in it is imported from
below."""
