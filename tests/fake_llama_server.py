"""A tiny OpenAI-compatible server process standing in for llama.cpp's (tests only).

Run as ``python tests/fake_llama_server.py --port N [--die-on K] [--signal SIGILL]``. It answers
``GET /v1/models`` and non-streamed and streamed ``POST /v1/chat/completions`` (a request with
``response_format`` gets ``{}``, a Director verdict with nothing to record; others get
"Okay."), prints one line per request to stdout (the log file ``superdialog_livekit.local``
keeps), and on the K-th completion request kills itself with the given signal (default
SIGILL), as llama.cpp built for instructions the CPU lacks does on its first real work. The
standard library only: it starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_count = 0


def _chunk(delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
    body: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                            "created": int(time.time()), "model": "fake",
                            "choices": [] if delta is None else
                            [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if delta is None:
        body["usage"] = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    die_on = 0
    die_with = signal.SIGILL

    def log_message(self, format: str, *args: Any) -> None:
        print("fake llama:", format % args, flush=True)

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self.send_error(404)
            return
        self._json({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    def do_POST(self) -> None:
        global _count
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        _count += 1
        print(f"fake llama: completion request {_count}", flush=True)
        if _count == self.die_on:
            print(f"fake llama: dying with {signal.Signals(self.die_with).name}", flush=True)
            os.kill(os.getpid(), self.die_with)
            time.sleep(5)  # the signal is delivered before this returns
        text = "{}" if body.get("response_format") else "Okay."
        if not body.get("stream"):
            self._json({"id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(_chunk({"role": "assistant", "content": text}))
        self.wfile.write(_chunk({}, finish="stop"))
        self.wfile.write(_chunk(None))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _json(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--die-on", type=int, default=0, help="completion request that kills it")
    parser.add_argument("--signal", default="SIGILL")
    args = parser.parse_args(argv)
    Handler.die_on = args.die_on
    Handler.die_with = signal.Signals[args.signal]
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"fake llama: listening on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
