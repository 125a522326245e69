#!/usr/bin/env python3
"""Git's smart-HTTP protocol on loopback, for the GitOps controllers of the e2e tests.

    git-serve.py ROOT PORTFILE

Serves every repository under ROOT (bare or not) at http://127.0.0.1:PORT/<path>, through Debian's
`git http-backend` (a CGI program), clone, fetch and push. Flux's source-controller speaks Git over
HTTP(S) and SSH only, and go-git needs the smart protocol, so a plain file server would not do.
The port is chosen by the kernel and written to PORTFILE once the server listens. Standard library
only: http.server's CGI handler is deprecated, so the few CGI lines are here.
"""

import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

ROOT = os.path.abspath(sys.argv[1])
PORTFILE = sys.argv[2]
BACKEND = "/usr/lib/git-core/git-http-backend"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def body(self):
        """The request body: Content-Length, or chunked (git sends large pushes chunked)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def backend(self):
        url = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": ROOT,
            "GIT_HTTP_EXPORT_ALL": "1",
            # http-backend refuses pushes from anonymous users; the tests push as this one.
            "REMOTE_USER": "e2e",
            "REMOTE_ADDR": self.client_address[0],
            "REQUEST_METHOD": self.command,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        data = self.body() if self.command == "POST" else b""
        env["CONTENT_LENGTH"] = str(len(data))
        proc = subprocess.run([BACKEND], input=data, env=env, capture_output=True, check=False)
        if proc.stderr:
            sys.stderr.write(proc.stderr.decode(errors="replace"))
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        if proc.returncode != 0 and not proc.stdout:
            status, payload = 500, b"git http-backend failed\n"
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = backend
    do_POST = backend

    def log_message(self, fmt, *args):
        sys.stderr.write("git-serve: %s %s\n" % (self.address_string(), fmt % args))


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORTFILE + ".tmp", "w", encoding="ascii") as f:
    f.write("%d\n" % server.server_address[1])
os.replace(PORTFILE + ".tmp", PORTFILE)
server.serve_forever()
