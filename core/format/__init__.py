"""What an author writes: the pydantic models of the full format, the loaders (YAML 1.2,
simple format, legacy flow), validation with every problem at its author path, and the
compile-at-load step. Imports ``lang``, ``values`` and ``errors``."""
