"""The event log and what is derived from it: the event models, ``EventLog``, the incremental
``ConversationState`` fold, the slot-status rules that plan events, and the stores that hold
logs. Imports ``format`` (read-only), ``values``, ``lang``."""
