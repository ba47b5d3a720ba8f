#!/usr/bin/env python3
"""Smart HTTP Git server for tests: runs `git http-backend` (CGI) for each request.

Optional HTTP basic auth against an htpasswd file of `user:{SHA}<base64 sha1>` lines (the
format of `htpasswd -s`), optional bearer token, optional TLS. Listens on 127.0.0.1 only.

    git-http.py --port P --root DIR [--htpasswd FILE] [--token-file FILE] [--cert C --key K]

Every request is logged to DIR/access.log as `METHOD PATH COMMAND`, COMMAND being the
protocol v2 command of an upload-pack POST (`ls-refs`, `fetch`), else `-`.
"""

import argparse
import base64
import hashlib
import hmac
import http.server
import os
import ssl
import subprocess
import urllib.parse


def load_htpasswd(path):
    users = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and ":" in line:
                user, digest = line.split(":", 1)
                users[user] = digest
    return users


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--htpasswd")
    parser.add_argument("--token-file")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    args = parser.parse_args()
    users = load_htpasswd(args.htpasswd) if args.htpasswd else None
    token = open(args.token_file).read().strip() if args.token_file else None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def authorized(self):
            header = self.headers.get("Authorization", "")
            if users is None and token is None:
                return True
            if token is not None and header.startswith("Bearer "):
                return hmac.compare_digest(header[7:].encode(), token.encode())
            if users is not None and header.startswith("Basic "):
                try:
                    user, password = base64.b64decode(header[6:]).decode().split(":", 1)
                except Exception:
                    return False
                want = users.get(user)
                got = "{SHA}" + base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
                return want is not None and hmac.compare_digest(want, got)
            return False

        def handle_git(self):
            if not self.authorized():
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            url = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            command = "-"
            for word in (b"ls-refs", b"fetch"):
                if b"command=" + word in body:
                    command = word.decode()
            with open(os.path.join(args.root, "access.log"), "a") as log:
                log.write(f"{self.command} {url.path} {command}\n")
            env = dict(os.environ)
            env.update({
                "GIT_PROJECT_ROOT": args.root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": urllib.parse.unquote(url.path),
                "QUERY_STRING": url.query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": "127.0.0.1",
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            })
            out = subprocess.run(["git", "http-backend"], input=body, env=env,
                                 capture_output=True).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode("latin-1").split("\r\n"):
                if not line:
                    continue
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                else:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = handle_git
        do_POST = handle_git

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
