"""The ``superdialog-livekit`` command: validate, graph, schema, chat, replay, convert.

``chat`` runs a real LiveKit ``AgentSession`` in text mode (no server) with
``DialogMachineLLM``; it defaults to the offline model ``local/smollm2-135m`` for both roles.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from superdialog_core.errors import CallStartError, ConfigError, PlaybookError
from superdialog_core.playbook import Playbook

__all__ = ["main"]

DEFAULT_MODEL = "local/smollm2-135m"
# director_timeout for local models: the first, uncached Director prompt takes a while on CPU.
LOCAL_DIRECTOR_TIMEOUT = 60.0


def _console(stderr: bool = False) -> Console:
    # Plain output when piped, so scripts and tests read clean text.
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


# --- validate ---------------------------------------------------------------------------


def _cmd_validate(args: argparse.Namespace) -> int:
    out = _console()
    failed = 0
    for path in args.playbooks:
        try:
            playbook = Playbook.load(path, strict=args.strict)
        except PlaybookError as exc:
            failed += 1
            errors = [p for p in exc.problems if p.severity == "error"]
            out.print(f"[red]✗ {path}[/red]: {len(errors)} problem(s)")
            for problem in exc.problems:
                tag = "error" if problem.severity == "error" else "warning"
                out.print(f"  {tag}: {problem}", markup=False)
            continue
        except OSError as exc:
            failed += 1
            out.print(f"[red]✗ {path}[/red]: cannot read: {exc}", markup=True)
            continue
        out.print(f"[green]✓ {path}[/green]: {len(playbook.checkpoints)} checkpoints")
        for warning in playbook.warnings:
            out.print(f"  warning: {warning}", markup=False)
        if playbook.gate_note:
            out.print(f"  note: {playbook.gate_note}", markup=False)
    return 1 if failed else 0


# --- graph and schema ---------------------------------------------------------------------


def _cmd_graph(args: argparse.Namespace) -> int:
    from .graph import mermaid

    try:
        playbook = Playbook.load(args.playbook)
    except PlaybookError as exc:
        print(exc, file=sys.stderr)
        return 1
    sys.stdout.write(mermaid(playbook))
    return 0


def playbook_json_schema() -> dict[str, Any]:
    """JSON Schema for editors: a ``oneOf`` of the full and the simple format."""
    from superdialog_core.format.simple import SimpleDoc

    full = Playbook.model_json_schema(by_alias=True)
    simple = SimpleDoc.model_json_schema(by_alias=True)
    defs: dict[str, Any] = {}
    for schema in (full, simple):
        defs.update(schema.pop("$defs", {}))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "superdialog playbook",
        "oneOf": [full, simple],
        "$defs": defs,
    }


def _cmd_schema(args: argparse.Namespace) -> int:
    json.dump(playbook_json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


# --- chat ---------------------------------------------------------------------------------


def _describe(event: Any) -> str | None:
    """One line for an event worth showing beside a reply, or None."""
    kind = type(event).__name__
    if kind == "SlotWrite":
        return f"slot {event.key} = {event.value!r} ({event.status}, by {event.by})"
    if kind == "SlotClear":
        return f"slot {event.key} cleared ({event.reason})"
    if kind == "SlotRefused":
        return f"refused {event.key}: {event.message}"
    if kind == "Advance":
        return f"→ {event.to} ({event.rule_id}, by {event.by})"
    if kind == "ToolResult":
        state = "ok" if event.ok else f"failed: {event.error}"
        status = f" {event.status}" if event.status is not None else ""
        return f"tool {event.tool}{status} {state}"
    if kind == "Degraded":
        return f"degraded {event.component}: {event.detail}"
    if kind == "Verdict":
        fields = [k for k, v in (event.verdict or {}).items() if v not in (None, [], {}, "")]
        return f"director: {', '.join(fields) if fields else 'nothing to record'}"
    if kind == "SessionEnd":
        return f"call ended: {event.outcome}"
    return None


async def _chat(args: argparse.Namespace) -> int:
    from livekit.agents import AgentSession

    from .agent import DialogAgent
    from .llm import DialogMachineLLM

    err = _console(stderr=True)
    out = _console()
    playbook_path = Path(args.playbook)
    try:
        playbook = Playbook.load(playbook_path)
    except PlaybookError as exc:
        err.print(str(exc), markup=False)
        return 1
    from superdialog_core.tools.discovery import find_python_tools

    try:  # --tools, else $SUPERDIALOG_TOOLS, else the sidecar <playbook>_tools.py
        python_tools = find_python_tools(playbook_path, args.tools, explicit_name="--tools")
    except ConfigError as exc:
        err.print(str(exc), markup=False)
        return 1
    if python_tools.source is not None:
        err.print(f"python tools from {python_tools.source}: {', '.join(python_tools) or 'none'}",
                  markup=False)
    call_start = json.loads(args.call_start) if args.call_start else None
    talker = args.talker or os.environ.get("TALKER_MODEL") or DEFAULT_MODEL
    director = args.director or os.environ.get("DIRECTOR_MODEL") or talker
    err.print(f"talker: {talker}  director: {director}", markup=False)
    timeout = args.director_timeout
    if timeout is None:
        # A local model on a busy CPU needs several seconds for its first (uncached) prompt.
        timeout = LOCAL_DIRECTOR_TIMEOUT if _is_local(talker) or _is_local(director) else 8.0
    uses_local = _is_local(talker) or _is_local(director)
    if uses_local:
        err.print("starting the local model server(s)...", markup=False)
        failed = _prestart_local({"talker": talker, "director": director})
        if failed is not None:
            err.print(failed, markup=False)
            return 1
    try:
        llm = DialogMachineLLM(
            playbook, talker=talker, director=director, python_tools=python_tools,
            call_start=call_start, call={"channel": "web"}, director_timeout=timeout,
        )
    except (CallStartError, ConfigError) as exc:
        err.print(str(exc), markup=False)
        return 1
    interactive = sys.stdin.isatty()
    shown = 0

    def show(reply: str, who: str = "agent:") -> None:
        nonlocal shown
        events = list(llm.runtime.log)[shown:]
        shown += len(events)
        table = Table.grid(padding=(0, 2))
        table.add_column(ratio=3)
        table.add_column(ratio=2, style="dim")
        changes = [line for line in map(_describe, events) if line]
        table.add_row(f"[bold]{who}[/bold] {reply or '(silence)'}", "\n".join(changes))
        out.print(table)

    # Text only: no VAD or turn detector, and no "are you still there?" while the user types.
    def server_died() -> bool:
        """A local model server died: say why and stop (its role would only say "sorry")."""
        dead = _dead_local_servers() if uses_local else []
        for failure in dead:
            err.print(f"error: {failure.details()}", markup=False)
        return bool(dead)

    async with AgentSession(llm=llm, vad=None, turn_handling={"turn_detection": None},
                            user_away_timeout=None) as session:
        opening = await session.start(DialogAgent(llm), capture_run=True)
        if server_died():
            return 1
        show(_reply_text(opening))
        while not llm.runtime.state.ended:
            if interactive:
                try:
                    line = await asyncio.to_thread(input, "you: ")
                except EOFError:
                    break
            else:
                line = sys.stdin.readline()
                if not line:
                    break
                line = line.rstrip("\n")
                out.print(f"[bold]you:[/bold] {line}", markup=True)
            if not line.strip():
                continue
            try:
                result = await session.run(user_input=line)
            except Exception:
                if server_died():
                    return 1
                raise
            # The Director decides beside the reply; wait for it so the row shows this turn's
            # slots and advances rather than the next one's.
            await _settle(llm)
            if server_died():
                return 1
            show(_reply_text(result))
        await _settle(llm)
        if server_died():
            return 1
        if len(llm.runtime.log) > shown:
            show("(after the last reply)", who="later:")
    state = llm.runtime.state
    out.print(f"checkpoint: {state.checkpoint}  ended: {state.ended}  outcome: {state.outcome}")
    if getattr(args, "log", None):
        Path(args.log).write_text(llm.runtime.log.to_jsonl(), encoding="utf-8")
        err.print(f"log written to {args.log} (replay it with: superdialog-livekit replay "
                  f"{args.log} {args.playbook} --director URI)", markup=False)
    return 0


async def _settle(llm: Any, timeout: float = 120.0) -> None:
    """Wait (bounded) until the runtime's decision for the last turn has landed."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(llm.runtime.wait_idle(), timeout)


def _prestart_local(uris: dict[str, str]) -> str | None:
    """Start the local servers of both roles side by side (DialogMachineLLM then reuses them).

    Returns what to print when one cannot start (its cause and, for a server that died, the
    last lines of its log), else None.
    """
    try:
        from concurrent.futures import ThreadPoolExecutor

        from .local import LocalModelError, LocalServerDied, local_server
    except ImportError:
        return None
    jobs = [(uri.strip()[len("local/"):], role) for role, uri in uris.items() if _is_local(uri)]

    def start(job: tuple[str, str]) -> str | None:
        try:
            local_server(job[0], instance=job[1])
        except LocalServerDied as exc:
            return f"error: {exc.details()}"
        except LocalModelError as exc:  # no extra, no such model, or the server did not come up
            return f"error: the local model for the {job[1]}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=len(jobs) or 1) as pool:
        failures = [f for f in pool.map(start, jobs) if f]
    return "\n".join(failures) if failures else None


def _dead_local_servers() -> list[Any]:
    """``LocalServerDied`` for every local model server of this process that died."""
    from .local import dead_servers

    return dead_servers()


def _is_local(uri: Any) -> bool:
    return isinstance(uri, str) and uri.strip().startswith("local/")


def _reply_text(result: Any) -> str:
    texts = []
    for event in getattr(result, "events", []) or []:
        item = getattr(event, "item", None)
        if getattr(item, "type", None) == "message" and getattr(item, "role", None) == "assistant":
            texts.append(item.text_content or "")
    return " ".join(t for t in texts if t)


def _cmd_chat(args: argparse.Namespace) -> int:
    return asyncio.run(_chat(args))


# --- replay -------------------------------------------------------------------------------


def _read_log(path: Path) -> Any:
    """The event log in a JSONL file (a JsonlStore file or ``chat --log``)."""
    from superdialog_core import EventLog

    return EventLog.from_jsonl(path.read_bytes(), source=str(path))


async def _replay(args: argparse.Namespace) -> int:
    from superdialog_core.turn.replay import replay, report_lines

    from .uris import director_from_uri

    err = _console(stderr=True)
    log_path = Path(args.log)
    try:
        log = _read_log(log_path)
    except OSError as exc:
        err.print(f"cannot read the log {log_path}: {exc}", markup=False)
        return 2
    except ValueError as exc:  # LogCorruptError names the line
        err.print(str(exc), markup=False)
        return 2
    try:
        playbook = Playbook.load(args.playbook)
    except PlaybookError as exc:
        err.print(str(exc), markup=False)
        return 2
    director_uri = args.director or os.environ.get("DIRECTOR_MODEL") or DEFAULT_MODEL
    timeout = args.director_timeout
    if timeout is None:
        timeout = LOCAL_DIRECTOR_TIMEOUT if _is_local(director_uri) else 8.0
    try:
        director = director_from_uri(director_uri,
                                     base_url=os.environ.get("SUPERDIALOG_LLM_BASE_URL"))
    except ConfigError as exc:
        err.print(str(exc), markup=False)
        return 2
    try:
        report = await replay(log, playbook, director, director_timeout=timeout)
    finally:
        model = getattr(director, "llm", None)  # a LiveKit LLM this command built
        if model is not None:
            await model.aclose()
    if args.json:
        data = report.to_dict()
        data.update(log=str(log_path), playbook_path=str(args.playbook), director=director_uri)
        sys.stdout.write(json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False,
                                    default=str) + "\n")
    else:
        text = report_lines(report, log=str(log_path), playbook=str(args.playbook),
                            director=director_uri)
        sys.stdout.write("\n".join(text) + "\n")
    return 1 if report.has_drift else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    return asyncio.run(_replay(args))


# --- convert ------------------------------------------------------------------------------


def _import_handlers(name: str) -> dict[str, Any]:
    """The public callables of a module (dotted name, or a path to a .py file)."""
    import importlib

    path = Path(name)
    if name.endswith(".py") or path.is_file():
        spec = importlib.util.spec_from_file_location(f"superdialog_handlers_{path.stem}", path)
        if spec is None or spec.loader is None or not path.is_file():
            raise ValueError(f"--handlers {name}: no such Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # `python -m`-style: modules of the working dir
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"--handlers {name}: cannot import it ({exc}); pass a module on "
                             "the Python path or a .py file") from exc
    return {key: value for key, value in vars(module).items()
            if callable(value) and not key.startswith("_") and not isinstance(value, type)}


def _cmd_convert(args: argparse.Namespace) -> int:
    from superdialog_core.format.pipecat import convert_flow_config, is_flow_config, read_flow_file

    err = _console(stderr=True)
    source = Path(args.file)
    try:
        doc = read_flow_file(source)
    except PlaybookError as exc:
        err.print(str(exc), markup=False)
        return 1
    report: list[str] = []
    if is_flow_config(doc):
        try:
            handlers = _import_handlers(args.handlers) if args.handlers else None
        except ValueError as exc:
            err.print(str(exc), markup=False)
            return 1
        try:
            conversion = convert_flow_config(doc, handlers=handlers, name=source.stem,
                                             source=str(source))
        except PlaybookError as exc:
            err.print(str(exc), markup=False)
            return 1
        text = conversion.to_yaml()
        report = [str(p) for p in conversion.report]
        kind = "pipecat-flows FlowConfig"
    else:
        if args.handlers:
            err.print("--handlers is only read for a pipecat FlowConfig; ignored", markup=False)
        try:
            playbook = Playbook.load(source)  # a legacy flow compiles through our flow compiler
        except PlaybookError as exc:
            err.print(str(exc), markup=False)
            return 1
        text = playbook.to_yaml()
        # What did not fully map, as the author named it; mapped nodes need no look.
        report = [f"{gap.source} → {gap.became}" + (f": {gap.note}" if gap.note else "")
                  for gap in playbook.coverage_gaps or []]
        kind = "legacy flow" if playbook.coverage is not None else "playbook"
    try:
        playbook = Playbook.from_yaml(text, source=args.output or "<converted>")
    except PlaybookError as exc:
        err.print(f"the converted playbook does not load, which is a bug of convert; "
                  f"please report it with the input file:\n{exc}", markup=False)
        return 1
    report += [f"warning: {w}" for w in playbook.warnings if str(w) not in report]
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        where = args.output
    else:
        sys.stdout.write(text)
        where = "stdout"
    err.print(f"converted {source} ({kind}) → {where}: {len(playbook.checkpoints)} checkpoints",
              markup=False)
    if report:
        err.print(f"what did not map or needs a look ({len(report)}):", markup=False)
        for line in report:
            err.print(f"  - {line}", markup=False)
    else:
        err.print("everything mapped", markup=False)
    return 0


def _add_tool_parsers(sub: Any) -> None:
    """The author's tools: ``chat --log``, ``replay`` and ``convert`` (SPEC §12)."""
    chat = sub.choices["chat"]
    chat.add_argument("--log", help="write the call's event log (JSONL) to this file at the end, "
                      "for replay")
    p = sub.add_parser("replay", help="re-run the Director over a logged call; diff its "
                       "decisions; exit 1 on drift (2 on bad input)")
    p.add_argument("log", help="the call's JSONL event log (a JsonlStore file or chat --log)")
    p.add_argument("playbook")
    p.add_argument("--director", help="model URI for the Director, e.g. scripted:verdicts.yaml "
                   f"(default: $DIRECTOR_MODEL, else {DEFAULT_MODEL})")
    p.add_argument("--director-timeout", type=float, default=None,
                   help="seconds to wait for a verdict (default 8; 60 with a local/ model)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    p.set_defaults(func=_cmd_replay)
    p = sub.add_parser("convert", help="pipecat-flows FlowConfig or legacy flow → playbook YAML")
    p.add_argument("file", help="a FlowConfig (YAML or JSON) or a superdialog legacy flow")
    p.add_argument("-o", "--output", help="write the playbook here (default: stdout)")
    p.add_argument("--handlers", help="the flow's functions: an importable module or a .py file; "
                   "their signatures give the slots")
    p.set_defaults(func=_cmd_convert)


# --- entry point --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="superdialog-livekit",
        description="Validate, draw, describe, chat with, replay and convert superdialog playbooks.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("validate", help="check playbooks; print every problem; exit 1 on any")
    p.add_argument("playbooks", nargs="+")
    p.add_argument("--strict", action="store_true",
                   help="template reads that render empty (undeclared slot, env in speech, "
                        "bare name) are errors, not warnings")
    p.set_defaults(func=_cmd_validate)
    p = sub.add_parser("graph", help="print a Mermaid flowchart of a playbook")
    p.add_argument("playbook")
    p.set_defaults(func=_cmd_graph)
    p = sub.add_parser("schema", help="print the JSON Schema of the playbook formats")
    p.set_defaults(func=_cmd_schema)
    p = sub.add_parser("chat", help="talk to a playbook in the terminal (or from piped lines)")
    p.add_argument("playbook")
    p.add_argument("--talker", help=f"model URI for the Talker (default {DEFAULT_MODEL})")
    p.add_argument("--director", help="model URI for the Director (default: the talker)")
    p.add_argument("--director-timeout", type=float, default=None,
                   help="seconds to wait for a verdict (default 8; 60 with a local/ model)")
    p.add_argument("--call-start", help="call-start values as JSON, e.g. '{\"clinic_id\": \"c1\"}'")
    p.add_argument("--tools", help="Python file defining TOOLS = {id: callable} (default: "
                   "$SUPERDIALOG_TOOLS, else <playbook>_tools.py next to the playbook)")
    p.set_defaults(func=_cmd_chat)
    _add_tool_parsers(sub)
    return parser


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM's default action kills the process without running atexit, which would leave the
    # llama.cpp servers `local/...` URIs started running; as an exit, they are stopped.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
