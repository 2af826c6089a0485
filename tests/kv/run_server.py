#!/usr/bin/env python3
# Runs one end-to-end test of spindle-kv: starts the server on a free port,
# runs a client against it, stops the server with SIGTERM and waits for it.
# As cmake/run_server_example.cmake does for the examples, the server says
# where it listens on stdout ("listening on ADDR:PORT") and @PORT@ in the
# client's arguments becomes that port. A Python runner rather than a CMake
# one so that a client's "skipped" exit code (77) reaches ctest.
#
#   run_server.py [--expect-exit-0] --server PROG ARGS... -- [CLIENT ARGS...]
#
# The test fails when the client fails, when the server's output holds a
# sanitizer's report, and (--expect-exit-0) when the server does not exit
# with status 0 within 10 s of SIGTERM. With --expect-exit-0 the SIGTERM
# comes while connections are open: HOLD idle ones, each with an item
# stored (parked by the time the signal comes), and one in the middle of a
# command line and one in the middle of a value, as a server stopped in
# service has them.
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import kvtest

SKIP = 77
PORT_RE = re.compile(rb"listening on [^ ]*:([0-9]+)")
SANITIZER_RE = re.compile(rb"AddressSanitizer|LeakSanitizer|ThreadSanitizer|UndefinedBehaviorSanitizer|runtime error")


HOLD = 16


def hold_connections(port):
    socks = []
    for i in range(HOLD):
        sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        socks.append(sock)
        sock.sendall(b"set run_server:hold:%d 0 0 1\r\nx\r\n" % i)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(100)
            assert chunk, "closed by the server"
            reply += chunk
        assert reply == b"STORED\r\n", reply
    socks[0].sendall(b"get run_server:ho")
    socks[1].sendall(b"set run_server:hold:1 0 0 10\r\nabc")
    # The idle ones park (no fiber) before the signal comes, so shutdown
    # meets both kinds. A wait for the server's count, not for a time.
    probe = kvtest.Conn("127.0.0.1", port)
    socks.append(probe.sock)
    parked = lambda: int(probe.stats().get("parked_connections", -1))
    kvtest.wait_for(lambda: parked() >= HOLD - 2, "%d idle connections parked" % (HOLD - 2), timeout=60)
    print("run_server: holding %d connections open, %d of them parked" % (HOLD, parked()), flush=True)
    return socks


def main(argv):
    expect_exit_0 = False
    if argv and argv[0] == "--expect-exit-0":
        expect_exit_0 = True
        argv = argv[1:]
    if not argv or argv[0] != "--server" or "--" not in argv:
        print("usage: run_server.py [--expect-exit-0] --server PROG ARGS... -- CLIENT ARGS...")
        return 2
    sep = argv.index("--")
    server_cmd, client_cmd = argv[1:sep], argv[sep + 1:]

    with tempfile.TemporaryFile() as out:
        server = subprocess.Popen(server_cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        port = None
        deadline = time.monotonic() + 30  # an ASan build starts slowly
        while port is None and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.05)
            out.seek(0)
            m = PORT_RE.search(out.read())
            if m:
                port = m.group(1).decode()
        if port is None:
            server.kill()
            server.wait()
            out.seek(0)
            print("run_server: the server did not say where it listens (exit %s):\n%s"
                  % (server.returncode, out.read().decode(errors="replace")))
            return 1

        client = [a.replace("@PORT@", port) for a in client_cmd]
        print("run_server: server on port %s: %s" % (port, " ".join(server_cmd)), flush=True)
        rc = 0
        if client:
            print("run_server: client: %s" % " ".join(client), flush=True)
            try:
                rc = subprocess.call(client, timeout=300)
            except subprocess.TimeoutExpired:
                print("run_server: the client did not finish within 300 s")
                rc = 1

        held = []
        if expect_exit_0 and rc == 0:
            try:
                held = hold_connections(int(port))
            except (OSError, AssertionError, kvtest.Failure) as e:
                print("run_server: FAIL: opening connections to hold: %r" % (e,))
                rc = 1
        server.send_signal(signal.SIGTERM)
        try:
            server_rc = server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            print("run_server: the server did not exit within 10 s of SIGTERM; killed")
            server.kill()
            server.wait()
            server_rc = None
        out.seek(0)
        server_out = out.read()
    for sock in held:
        sock.close()
    print("run_server: server output:\n" + server_out.decode(errors="replace"))

    failed = False
    if rc == SKIP:
        print("run_server: the client skipped the test")
        return SKIP
    if rc != 0:
        print("run_server: FAIL: the client exited with %d" % rc)
        failed = True
    if SANITIZER_RE.search(server_out):
        print("run_server: FAIL: the server reported an error")
        failed = True
    if expect_exit_0:
        if server_rc is None:
            print("run_server: FAIL: the server did not exit within 10 s of SIGTERM")
            failed = True
        elif server_rc != 0:
            print("run_server: FAIL: the server exited with %d after SIGTERM (want 0)" % server_rc)
            failed = True
        else:
            print("run_server: the server exited with 0 after SIGTERM")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
