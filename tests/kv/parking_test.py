#!/usr/bin/env python3
# Connections that go quiet park without a fiber (apps/kv/main.cpp) and
# come back when bytes arrive. Across two quiet spells every kind of
# connection must carry on as if nothing happened:
#   - plain ones, between commands (they park, and park again: the second
#     time re-arms what the first added);
#   - one cut in the middle of a command line and one in the middle of a
#     value (they are handed to a new fiber, with what they had read);
#   - one that never sent anything;
#   - one whose 24 MB reply it does not read (the write outlives the stop
#     request the sweeper sends it, and must still arrive whole).
# Then half of them close while parked, and curr_connections and
# parked_connections come back down.
#
#   parking_test.py --port P [--connections N]
#
# The waits are for the server's own stats (parked_connections, total_parks),
# never for a time: a slow machine only takes longer.

import kvtest

check = kvtest.check

BIG = 1000 * 1000
BIG_KEYS = [b"park:big%d" % i for i in range(4)]
# The slow reader's reply: 24 values, 24 MB, more than loopback's socket
# buffers take (a few MB each way), so the server's write waits. (Not a
# smaller SO_RCVBUF instead: a window below one segment stalls the sender
# on zero-window probes, whose back-off grows to minutes.)
BIG_GETS = 6


def value(i, round_):
    return b"value %d of round %d" % (i, round_)


def big_value(i):
    return bytes([97 + i]) * BIG


def read_value(c, key, want):
    head = c.line()
    check(head == b"VALUE %s 0 %d" % (key, len(want)), "%r: head %r" % (key, head[:80]))
    check(c.exact(len(want) + 2) == want + b"\r\n", "%r: the value differs" % key)


def main():
    args = kvtest.parse_args(__doc__, lambda p: p.add_argument("--connections", type=int, default=300))
    n = args.connections
    kvtest.raise_nofile(n + 64)
    probe = kvtest.Conn(args.host, args.port)
    base = probe.stats()
    base_conns = int(base["curr_connections"])
    base_parks = int(base["total_parks"])

    for k in BIG_KEYS:
        check(probe.call(b"set %s 0 0 %d\r\n" % (k, BIG) + big_value(BIG_KEYS.index(k)) + b"\r\n") == b"STORED",
              "set %r" % k)

    plain = [kvtest.Conn(args.host, args.port) for _ in range(n)]
    for i, c in enumerate(plain):
        check(c.call(b"set park:%d 0 0 %d\r\n%s\r\n" % (i, len(value(i, 0)), value(i, 0))) == b"STORED", "set %d" % i)
    half_line = kvtest.Conn(args.host, args.port)
    half_line.send(b"get park:")
    half_value = kvtest.Conn(args.host, args.port)
    half_value.send(b"set park:half 0 0 10\r\nabc")
    silent = kvtest.Conn(args.host, args.port)
    slow = kvtest.Conn(args.host, args.port)
    slow.send((b"get " + b" ".join(BIG_KEYS) + b"\r\n") * BIG_GETS)

    for round_ in (1, 2):
        # Every plain connection, and the silent one, parks.
        kvtest.wait_for(lambda: int(probe.stats()["parked_connections"]) >= n + 1,
                        "round %d: %d idle connections parked" % (round_, n + 1), timeout=120)
        for i, c in enumerate(plain):
            read = c.get(b"park:%d" % i)
            check(read == value(i, round_ - 1), "round %d: park:%d is %r" % (round_, i, read))
            v = value(i, round_)
            check(c.call(b"set park:%d 0 0 %d\r\n%s\r\n" % (i, len(v), v)) == b"STORED", "set %d again" % i)
        check(silent.call(b"version\r\n").startswith(b"VERSION "), "the silent connection's version")
        # (The stats say nothing of these two: the test passes whether or
        # not their fibers were handed over in time.)
        if round_ == 1:
            half_line.send(b"0 park:1\r\n")
            read_value(half_line, b"park:0", value(0, 1))
            read_value(half_line, b"park:1", value(1, 1))
            check(half_line.line() == b"END", "the half line's END")
            half_value.send(b"defghij\r\n")
            check(half_value.line() == b"STORED", "the half value's STORED")
            check(half_value.get(b"park:half") == b"abcdefghij", "the half value")
    parks = int(probe.stats()["total_parks"]) - base_parks
    check(parks >= 2 * (n + 1), "total_parks grew by %d, want at least %d" % (parks, 2 * (n + 1)))

    # The slow reader's reply, read only now, arrives whole.
    for _ in range(BIG_GETS):
        for i, k in enumerate(BIG_KEYS):
            read_value(slow, k, big_value(i))
        check(slow.line() == b"END", "the slow reader's END")

    # Close half while parked; the counts come back down.
    kvtest.wait_for(lambda: int(probe.stats()["parked_connections"]) >= n, "parked again", timeout=120)
    for c in plain[: n // 2]:
        c.close()
    left = n - n // 2 + 4  # and half_line, half_value, silent, slow
    kvtest.wait_for(lambda: int(probe.stats()["curr_connections"]) == base_conns + left,
                    "curr_connections back to %d" % (base_conns + left))
    st = probe.stats()
    check(int(st["parked_connections"]) <= left, "parked_connections %s with %d open" % (st["parked_connections"], left))
    for i, c in enumerate(plain[n // 2:], start=n // 2):
        check(c.get(b"park:%d" % i) == value(i, 2), "after the closes: park:%d" % i)
    print("parking: %d connections parked and woke twice (total_parks +%d), the 24 MB reply arrived whole" % (n + 1, parks))


if __name__ == "__main__":
    kvtest.run(main)
