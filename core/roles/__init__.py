"""The two model seams: the Director (request, per-checkpoint verdict schema, verdict parsing
and application, the goodbye guard) and the Talker (view, transcript packing, never_say filter),
with the ``DirectorModel`` / ``TalkerModel`` protocols and their scripted stand-ins."""
