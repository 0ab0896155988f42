"""YAML with 1.2 core-schema scalars, for reading and writing playbooks.

PyYAML implements YAML 1.1, where ``no``/``on``/``yes`` are booleans, ``10:30`` is the
sexagesimal integer 630 and ``2026-12-01`` a date object. In a playbook those are a goal, a key
and a time of day, so we read with the 1.2 core schema (SPEC §2.1): only ``true``/``false`` (in
their three spellings) are booleans, ``null``/``~``/empty is null, integers are decimal,
``0o`` octal or ``0x`` hex, floats are plain decimals or ``.inf``/``.nan``, and everything else
is a string, keys included (``on:`` is the key ``"on"``). Duplicate keys are refused instead of
silently keeping the last one.

The dumper quotes every string that a YAML 1.1 *or* a 1.2 reader would take for something
else, so files we write read back the same in any YAML library.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"

_CORE_RESOLVERS: list[tuple[str, re.Pattern[str], str]] = [
    (_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    (_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), "~nN"),
    (_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), "-+0123456789"),
    (
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+0123456789.",
    ),
]


def _core_resolvers() -> dict[str | None, list[tuple[str, re.Pattern[str]]]]:
    """The implicit-resolver table of the 1.2 core schema (merge keys ``<<`` kept)."""
    table: dict[str | None, list[tuple[str, re.Pattern[str]]]] = {}
    for tag, pattern, first in _CORE_RESOLVERS:
        for ch in first:
            table.setdefault(ch, []).append((tag, pattern))
    # An empty plain scalar resolves through the None bucket.
    table.setdefault(None, []).append((_NULL, re.compile(r"^$")))
    table.setdefault("<", []).append((_MERGE, re.compile(r"^(?:<<)$")))
    return table


# libyaml's parser when PyYAML was built with it (several times faster); the scalar
# resolution and construction below are Python either way, so both read identically.
_SafeBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Yaml12Loader(_SafeBase):  # type: ignore[misc, valid-type]
    """SafeLoader with YAML 1.2 core-schema scalars and duplicate-key detection."""

    yaml_implicit_resolvers = _core_resolvers()

    def construct_yaml_int(self, node: ScalarNode) -> int:  # type: ignore[override]
        value = str(self.construct_scalar(node))
        if value.startswith("0o"):
            return int(value[2:], 8)
        if value.startswith("0x"):
            return int(value[2:], 16)
        return int(value, 10)  # 1.2: a leading zero is still decimal

    def construct_yaml_float(self, node: ScalarNode) -> float:  # type: ignore[override]
        value = str(self.construct_scalar(node)).lower()
        if value.endswith(".inf"):
            return -math.inf if value.startswith("-") else math.inf
        if value == ".nan":
            return math.nan
        return float(value)

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # unhashable key: SafeConstructor reports it below
                if first is not None:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r} (first at line {first.line + 1}); "
                        "keep one of them",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


Yaml12Loader.add_constructor(_INT, Yaml12Loader.construct_yaml_int)
Yaml12Loader.add_constructor(_FLOAT, Yaml12Loader.construct_yaml_float)


class _Core12Resolver(yaml.resolver.BaseResolver):
    """Resolves plain scalars the way ``Yaml12Loader`` reads them (used by the dumper)."""

    yaml_implicit_resolvers = _core_resolvers()


_core12 = _Core12Resolver()


class Yaml12Dumper(yaml.SafeDumper):
    """SafeDumper that quotes strings any YAML 1.1 or 1.2 reader would misread.

    PyYAML's own resolver already quotes the 1.1 look-alikes (``no``, ``on``, ``10:30``,
    ``2026-12-01``); we add the 1.2 ones it does not know (``0o17``, ``1e3``) and write
    multi-line strings as literal blocks for readable diffs.
    """

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:  # type: ignore[override]
        tag = super().resolve(kind, value, implicit)
        if kind is ScalarNode and implicit[0] and tag == _STR:
            core = _core12.resolve(kind, value, implicit)
            if core != _STR:
                return core  # not the str tag, so the emitter quotes the string
        return tag


_ODD_BREAKS = frozenset("\r\x85\u2028\u2029")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> ScalarNode:
    # YAML folds the Unicode line breaks (NEL, LS, PS) and CR into plain newlines unless they
    # are escaped, so such strings are double-quoted; other multi-line text reads best as a block.
    if any(c in _ODD_BREAKS for c in value):
        style: str | None = '"'
    elif "\n" in value and "\t" not in value:
        style = "|"
    else:
        style = None
    return dumper.represent_scalar(_STR, value, style=style)


Yaml12Dumper.add_representer(str, _represent_str)


def load_yaml(text: str) -> Any:
    """Parse ``text`` with YAML 1.2 core-schema scalars (raises ``yaml.YAMLError``)."""
    # yaml.load is safe here: Yaml12Loader is a (C)SafeLoader subclass.
    return yaml.load(text, Loader=Yaml12Loader)


def dump_yaml_text(data: Any) -> str:
    """Write ``data`` as block-style YAML that reads back identically under 1.1 and 1.2."""
    return yaml.dump(
        data,
        Dumper=Yaml12Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


__all__ = ["Yaml12Dumper", "Yaml12Loader", "dump_yaml_text", "load_yaml"]
