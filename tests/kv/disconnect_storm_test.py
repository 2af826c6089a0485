#!/usr/bin/env python3
# A disconnect storm: thousands of clients that send part of something and
# vanish (a close, or a reset through SO_LINGER 0), 200 at a time, with
# well-behaved clients working among them whose every answer is checked.
# Afterwards the server still answers correctly, the items the vanished
# clients never finished are not there, and "stats curr_connections" comes
# back to what it was.
#
#   disconnect_storm_test.py --port P [--waves W] [--seed S]
#
# What the vanishing clients leave behind: a command line cut anywhere; a
# value cut short; a multiget cut in its key list; a multiget of 1 MiB of
# values not read at all (the server writes into a reset connection); a
# run of noreply sets, the last one cut; a too-large value cut while the
# server swallows it; bytes of garbage. Deterministic for a seed (printed).
import random
import socket
import struct
import time

import kvtest

check = kvtest.check

AT_ONCE = 200
BIG_KEYS = [b"storm:big%d" % i for i in range(10)]
BIG_LEN = 100 * 1024
KEYS = [b"storm:k%d" % i for i in range(100)]


def key_value(k):
    return b"value of " + k


def big_value(i):
    return bytes([65 + i]) * BIG_LEN


def fragment(rng, wave, i):
    """What a vanishing client sends: (kind, bytes)."""
    kind = rng.randrange(8)
    tag = b"storm:gone:%d:%d" % (wave, i)
    if kind == 0:  # a command line cut anywhere
        line = rng.choice([b"get %s\r\n" % KEYS[0], b"set %s 0 0 5\r\nhello\r\n" % tag,
                           b"incr %s 1\r\n" % tag, b"cas %s 0 0 1 99\r\nx\r\n" % tag,
                           b"gat 100 %s %s\r\n" % (KEYS[1], KEYS[2]), b"delete %s\r\n" % KEYS[3]])
        return "line", line[:rng.randrange(1, len(line) - 1)]
    if kind == 1:  # a value cut short
        n = rng.choice([10, 1000, 100000])
        return "value", b"set %s 0 0 %d\r\n" % (tag, n) + b"x" * rng.randrange(n)
    if kind == 2:  # a multiget cut in its key list
        line = b"get " + b" ".join(rng.sample(KEYS, 20)) + b"\r\n"
        return "multiget", line[:rng.randrange(5, len(line) - 2)]
    if kind == 3:  # a multiget of 1 MiB, its reply never read
        return "unread", b"get " + b" ".join(BIG_KEYS) + b"\r\n"
    if kind == 4:  # noreply sets, the last one cut
        whole = b"".join(b"set %s:%d 0 0 2 noreply\r\nok\r\n" % (tag, j) for j in range(rng.randrange(1, 5)))
        last = b"set %s:last 0 0 4 noreply\r\nda" % tag
        return "noreply", whole + last[:rng.randrange(1, len(last))]
    if kind == 5:  # a too-large value, cut while it is swallowed
        return "too_large", b"set %s 0 0 2000000\r\n" % tag + b"y" * rng.randrange(1, 300000)
    if kind == 6:  # garbage, with line ends in it
        return "garbage", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000)))
    return "nothing", b""  # connects and goes


def vanish(rng, sock):
    if rng.random() < 0.5:  # a reset rather than a close
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def well_behaved(args, rng, n):
    """One client that does real work and checks every answer."""
    c = kvtest.Conn(args.host, args.port)
    key = b"storm:good:%d" % n
    val = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 5000)))
    check(c.call(b"set %s 7 0 %d\r\n%s\r\n" % (key, len(val), val)) == b"STORED", "good %d: set" % n)
    check(c.get(key) == val, "good %d: get" % n)
    check(c.call(b"append %s 0 0 3\r\nabc\r\n" % key) == b"STORED", "good %d: append" % n)
    check(c.get(key) == val + b"abc", "good %d: get after append" % n)
    check(c.call(b"set %s:n 0 0 2\r\n40\r\n" % key) == b"STORED", "good %d: set counter" % n)
    check(c.call(b"incr %s:n 2\r\n" % key) == b"42", "good %d: incr" % n)
    picked = rng.sample(KEYS, 10)
    c.send(b"get " + b" ".join(picked) + b"\r\n")
    for k in picked:
        v = key_value(k)
        check(c.line() == b"VALUE %s 0 %d" % (k, len(v)), "good %d: multiget header of %s" % (n, k))
        check(c.exact(len(v) + 2) == v + b"\r\n", "good %d: multiget value of %s" % (n, k))
    check(c.line() == b"END", "good %d: multiget END" % n)
    # A noreply run, then a command with a reply: nothing said in between.
    c.send(b"".join(b"set %s:nr%d 0 0 1 noreply\r\n%d\r\n" % (key, j, j) for j in range(5)))
    check(c.call(b"delete %s\r\n" % key) == b"DELETED", "good %d: delete after noreply sets" % n)
    check(c.get(key) is None, "good %d: get after delete" % n)
    check(c.get(b"%s:nr4" % key) == b"4", "good %d: a noreply set" % n)
    if rng.random() < 0.5:
        c.send(b"quit\r\n")
    c.close()


def main():
    args = kvtest.parse_args("a disconnect storm", lambda p: (
        p.add_argument("--waves", type=int, default=15), p.add_argument("--seed", type=int, default=None)))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print("seed %d (rerun with --seed %d)" % (seed, seed), flush=True)
    rng = random.Random(seed)

    setup = kvtest.Conn(args.host, args.port)
    for k in KEYS:
        v = key_value(k)
        check(setup.call(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v)) == b"STORED", "setup: set %s" % k)
    for i, k in enumerate(BIG_KEYS):
        check(setup.call(b"set %s 0 0 %d\r\n%s\r\n" % (k, BIG_LEN, big_value(i))) == b"STORED", "setup: set big")
    baseline = int(setup.stats()["curr_connections"])

    kinds = {}
    good = 0
    start = time.monotonic()
    for wave in range(args.waves):
        socks = []
        for i in range(AT_ONCE):
            sock = socket.create_connection((args.host, args.port), timeout=20)
            kind, data = fragment(rng, wave, i)
            kinds[kind] = kinds.get(kind, 0) + 1
            if data:
                sock.setblocking(False)
                try:
                    sock.send(data)  # what fits; the rest is cut off too
                except (BlockingIOError, ConnectionResetError, BrokenPipeError):
                    pass
            socks.append(sock)
            if i % 40 == 20:
                well_behaved(args, rng, good)
                good += 1
        rng.shuffle(socks)
        for i, sock in enumerate(socks):
            vanish(rng, sock)
            if i % 50 == 25:
                well_behaved(args, rng, good)
                good += 1
    took = time.monotonic() - start
    print("%d clients vanished (%s), %d well-behaved ones checked, in %.1f s" % (
        args.waves * AT_ONCE, ", ".join("%s %d" % kv for kv in sorted(kinds.items())), good, took), flush=True)

    # The server notices each vanished client when it next reads from it.
    kvtest.wait_for(lambda: int(setup.stats()["curr_connections"]) <= baseline,
                    "curr_connections back to the baseline %d" % baseline)
    for k in KEYS:
        check(setup.get(k) == key_value(k), "after the storm: %s" % k)
    for i, k in enumerate(BIG_KEYS):
        check(setup.get(k) == big_value(i), "after the storm: %s" % k)
    # What no vanished client finished is not stored.
    for wave in range(args.waves):
        for i in range(0, AT_ONCE, 37):
            tag = b"storm:gone:%d:%d" % (wave, i)
            check(setup.get(tag) is None and setup.get(tag + b":last") is None, "an unfinished set: %s" % tag)
    well_behaved(args, rng, good)
    st = setup.stats()
    print("after: curr_connections %s (baseline %d), total_connections %s" % (
        st["curr_connections"], baseline, st["total_connections"]))
    setup.close()
    print("disconnect storm: the server answered every well-behaved client correctly throughout")


if __name__ == "__main__":
    kvtest.run(main)
