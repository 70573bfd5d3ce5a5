"""A loopback stand-in for ZeroGPU's control plane, the HTTP API the real ``spaces`` package calls
(read from spaces 0.51.3, ``spaces/zero/api.py`` and ``client.py``):

- ``POST /startup-report``: sent once at launch when at least one ``@spaces.GPU`` function exists;
- ``POST /schedule?cgroupPath=&taskId=&enableQueue=&tokenVersion=&durationSeconds=``: asks for a GPU;
  answered here at once with JSON ``{idle, nvidiaIndex, nvidiaUUID, allowToken}`` (no queue);
- ``POST /allow?allowToken=&pid=``: the forked worker asks to be let onto the GPU;
- ``POST /release?allowToken=&fail=``: the call is over (``fail=True`` when it failed).

Every request is recorded as a :class:`Call`. Tests only.
"""
from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Call:
    path: str
    params: dict


class ControlPlane:
    """``with ControlPlane(uuid) as cp:`` serves on 127.0.0.1:``cp.port`` in a thread; ``cp.calls``."""

    def __init__(self, nvidia_uuid: str = "GPU-00000000-rehearsal"):
        self.uuid, self.calls, self._tokens = nvidia_uuid, [], itertools.count(1)
        plane = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                url = urlsplit(self.path)
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                plane.calls.append(Call(url.path, params))
                body = b""
                if url.path == "/schedule":
                    body = json.dumps({"idle": False, "nvidiaIndex": 0, "nvidiaUUID": plane.uuid,
                                       "allowToken": f"token-{next(plane._tokens)}"}).encode()
                known = url.path in ("/startup-report", "/schedule", "/allow", "/release")
                self.send_response(200 if known else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def paths(self) -> list[str]:
        return [c.path for c in self.calls]
