# Shared pieces of spindle-kv's end-to-end test scripts (tests/kv/*.py): the
# command line every script takes, a raw text-protocol connection, "stats".
# Nothing here knows which server it talks to: the tests hold for the real
# memcached 1.6 as for spindle-kv.
import argparse
import resource
import socket
import sys
import time

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests (tests/kv/e2e.cmake)


def parse_args(description, extra=None):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    if extra:
        extra(p)
    return p.parse_args()


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(main):
    """Runs main(); a Failure is the test failing, with its message."""
    try:
        main()
    except Failure as e:
        print("FAIL: %s" % e, flush=True)
        sys.exit(1)


class Conn:
    """One text-protocol connection, read line by line."""

    def __init__(self, host, port, timeout=20):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Failure("the server closed the connection (read so far: %r)" % self.buf[:200])
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def call(self, request):
        """Sends a one-line-reply command, returns the line."""
        self.send(request)
        return self.line()

    def get(self, key):
        """The value of `key`, or None: "get" and its reply, checked."""
        self.send(b"get " + key + b"\r\n")
        head = self.line()
        if head == b"END":
            return None
        parts = head.split(b" ")
        check(len(parts) == 4 and parts[0] == b"VALUE" and parts[1] == key, "get %r: bad reply %r" % (key, head))
        value = self.exact(int(parts[3]) + 2)
        check(value.endswith(b"\r\n"), "get %r: the value does not end in CRLF" % key)
        check(self.line() == b"END", "get %r: no END after the value" % key)
        return value[:-2]

    def stats(self):
        self.send(b"stats\r\n")
        out = {}
        while True:
            line = self.line()
            if line == b"END":
                return out
            parts = line.split(b" ", 2)
            check(len(parts) == 3 and parts[0] == b"STAT", "stats: bad line %r" % line)
            out[parts[1].decode()] = parts[2].decode()

    def close(self):
        self.sock.close()


def raise_nofile(want):
    """Raises RLIMIT_NOFILE's soft limit to the hard one; returns the hard
    limit (the caller skips when it is below what it needs)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        new = hard if hard != resource.RLIM_INFINITY else max(soft, want)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def wait_for(cond, what, timeout=30):
    """Polls cond() until it holds: for what the server does after a client
    has gone (it notices a close when it next reads). Not a timing check: a
    slow machine only takes longer; the timeout is for a server that never
    gets there."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            raise Failure("%s: not so after %d s" % (what, timeout))
        time.sleep(0.05)
