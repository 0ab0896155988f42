"""Slot types: coercion of a raw value to its stored form (numbers, enums, emails, dates,
times, phones), the value context a call supplies (clock, zone, region, language) and the
refusals worded for the model. Imports nothing else of the engine."""
