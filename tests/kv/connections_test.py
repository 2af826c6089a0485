#!/usr/bin/env python3
# 10,000 client connections open at once, every one of them served: each
# stores an item of its own, then (all open) reads it back and reads
# another connection's; "stats curr_connections" from one more connection
# counts them all; after they close, curr_connections comes back down.
#
#   connections_test.py --port P [--connections N]
#
# The server must be allowed that many descriptors: it raises its own soft
# RLIMIT_NOFILE (as memcached does for -c) and is started with a -c that
# admits them. Each process needs N + a few descriptors, so the test skips
# (77) where the hard limit is below N + 100; this one raises its soft
# limit to the hard one.
import errno
import selectors
import socket
import time

import kvtest

check = kvtest.check


def drive(conns, requests, replies, what):
    """Sends requests[i] on conns[i] (connecting first where conns[i] is
    still connecting) and reads exactly replies[i] back, on all at once."""
    sel = selectors.DefaultSelector()
    out = {}   # socket -> bytes still to send
    got = {}   # socket -> bytes read
    want = {}
    for sock, req, rep in zip(conns, requests, replies):
        out[sock] = req
        got[sock] = b""
        want[sock] = rep
        sel.register(sock, selectors.EVENT_WRITE)
    pending = len(conns)
    deadline = time.monotonic() + 120
    while pending:
        check(time.monotonic() < deadline, "%s: %d connections still unanswered after 120 s" % (what, pending))
        for key, _ in sel.select(timeout=1):
            sock = key.fileobj
            if out[sock]:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                check(err == 0, "%s: connect: %s" % (what, errno.errorcode.get(err, err)))
                n = sock.send(out[sock])
                out[sock] = out[sock][n:]
                if not out[sock]:
                    sel.modify(sock, selectors.EVENT_READ)
                continue
            chunk = sock.recv(65536)
            check(chunk, "%s: the server closed a connection (after %r)" % (what, got[sock]))
            got[sock] += chunk
            if len(got[sock]) >= len(want[sock]):
                check(got[sock] == want[sock], "%s: reply %r, want %r" % (what, got[sock][:200], want[sock]))
                sel.unregister(sock)
                pending -= 1
    sel.close()


def connect_nonblocking(host, port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    err = sock.connect_ex((host, port))
    check(err in (0, errno.EINPROGRESS), "connect: %s" % errno.errorcode.get(err, err))
    return sock


def value(i):
    return b"conn-%d-" % i + b"v" * (i % 50)


def get_reply(i):
    v = value(i)
    return b"VALUE c10k:%d 0 %d\r\n%s\r\nEND\r\n" % (i, len(v), v)


def main():
    args = kvtest.parse_args("many connections at once",
                             lambda p: p.add_argument("--connections", type=int, default=10000))
    n = args.connections
    have = kvtest.raise_nofile(n + 100)
    if have < n + 100:
        print("SKIP: %d connections need a descriptor limit of at least %d; the hard limit is %d (ulimit -Hn)"
              % (n, n + 100, have))
        raise SystemExit(kvtest.SKIP)

    probe = kvtest.Conn(args.host, args.port)
    baseline = int(probe.stats()["curr_connections"])
    probe.close()

    # Open them in waves of 500 (the server's accept backlog is finite),
    # each storing its own item; all stay open.
    conns = []
    start = time.monotonic()
    wave = 500
    for base in range(0, n, wave):
        batch = [connect_nonblocking(args.host, args.port) for _ in range(min(wave, n - base))]
        reqs = [b"set c10k:%d 0 0 %d\r\n%s\r\n" % (base + j, len(value(base + j)), value(base + j))
                for j in range(len(batch))]
        drive(batch, reqs, [b"STORED\r\n"] * len(batch), "set on connection %d+" % base)
        conns += batch
    opened = time.monotonic() - start
    print("%d connections open, each with its item stored (%.1f s)" % (len(conns), opened), flush=True)

    # With all of them open: each reads its own item and its neighbour's.
    reqs = [b"get c10k:%d c10k:%d\r\n" % (i, (i + 1) % n) for i in range(n)]
    reps = [get_reply(i)[:-5] + get_reply((i + 1) % n) for i in range(n)]
    drive(conns, reqs, reps, "get on every connection")
    print("every connection answered its get correctly", flush=True)

    extra = kvtest.Conn(args.host, args.port)
    st = extra.stats()
    curr = int(st["curr_connections"])
    print("stats: curr_connections %d (baseline %d), total_connections %s" % (curr, baseline,
                                                                            st["total_connections"]))
    check(curr >= n, "curr_connections %d with %d connections open" % (curr, n + 1))

    # And still served after the crowd leaves.
    for sock in conns:
        sock.close()
    kvtest.wait_for(lambda: int(extra.stats()["curr_connections"]) <= baseline,
                    "curr_connections back to the baseline %d" % baseline)
    check(extra.get(b"c10k:%d" % (n - 1)) == value(n - 1), "an item after the connections closed")
    extra.close()
    print("connections: %d at once, all served; curr_connections back to %d" % (n, baseline))


if __name__ == "__main__":
    kvtest.run(main)
