#!/usr/bin/env python3
# spindle-kv through a real Python client, pymemcache (Debian's
# python3-pymemcache): every command it has for the text protocol, values
# from 0 B to about 1 MiB, one over the item limit, expiry, noreply, stats
# counters that must move, version. Holds for memcached 1.6.18 as well.
#
#   pymemcache_test.py --port P
import sys
import time

import kvtest

try:
    from pymemcache.client.base import Client
    from pymemcache.exceptions import MemcacheServerError, MemcacheClientError
except ImportError:
    print("SKIP: pymemcache is not installed for %s (Debian: python3-pymemcache)" % sys.executable)
    sys.exit(kvtest.SKIP)

check = kvtest.check
ITEM_MAX = 1024 * 1024  # -I 1m, the default of both servers


def client(args, **kw):
    return Client((args.host, args.port), connect_timeout=10, timeout=30, **kw)


def main():
    args = kvtest.parse_args("pymemcache against a server")
    c = client(args, default_noreply=False)
    raw = kvtest.Conn(args.host, args.port)
    before = raw.stats()

    # version: only the prefix is the protocol's ("VERSION x").
    v = c.version()
    check(isinstance(v, bytes) and len(v) > 0, "version: %r" % v)

    # set / get, flags, values of 0 B, 1 KiB, about 1 MiB, binary.
    check(c.set("py:a", b"alpha", expire=0) is True, "set py:a")
    check(c.get("py:a") == b"alpha", "get py:a")
    check(c.get("py:missing") is None, "get of a missing key")
    check(c.get("py:missing", default=b"d") == b"d", "get's default")
    check(c.set("py:flags", b"f", flags=0xdeadbeef) is True, "set with flags")
    raw.send(b"get py:flags\r\n")
    head = raw.line()
    check(head == b"VALUE py:flags 3735928559 1", "flags come back: %r" % head)
    check(raw.exact(3) == b"f\r\n" and raw.line() == b"END", "get py:flags")
    for size in (0, 1024, ITEM_MAX - 1024):
        data = bytes((i * 7 + size) & 0xff for i in range(size))
        check(c.set("py:size", data) is True, "set of %d bytes" % size)
        check(c.get("py:size") == data, "get of %d bytes" % size)
    binary = bytes(range(256)) * 4 + b"\r\nEND\r\n"
    check(c.set("py:bin", binary) is True, "set of binary data")
    check(c.get("py:bin") == binary, "get of binary data")

    # One over the item limit: the server's error, and the connection goes on.
    try:
        c.set("py:big", b"x" * (ITEM_MAX + 1))
        check(False, "set of %d bytes: no error" % (ITEM_MAX + 1))
    except MemcacheServerError as e:
        check("object too large" in str(e), "set too large: %s" % e)
    check(c.get("py:big") is None, "the too large value is not stored")
    check(c.get("py:a") == b"alpha", "the connection works after the error")
    # A key too long is the client's to refuse; the server's check is in
    # protocol_conformance.py.
    try:
        c.get("k" * 251)
        check(False, "a key of 251 bytes: no error")
    except MemcacheClientError:
        pass

    # get_many / gets / cas.
    c.set_many({"py:m1": b"1", "py:m2": b"22", "py:m3": b"333"})
    got = c.get_many(["py:m1", "py:m2", "py:nope", "py:m3"])
    check(got == {"py:m1": b"1", "py:m2": b"22", "py:m3": b"333"}, "get_many: %r" % got)
    value, cas = c.gets("py:m1")
    check(value == b"1" and cas is not None and int(cas) > 0, "gets: %r %r" % (value, cas))
    check(c.cas("py:m1", b"one", cas) is True, "cas with the item's cas")
    check(c.cas("py:m1", b"uno", cas) is False, "cas with a stale cas (EXISTS)")
    check(c.cas("py:nope", b"x", cas) is None, "cas of a missing key (NOT_FOUND)")
    value2, cas2 = c.gets("py:m1")
    check(value2 == b"one" and int(cas2) > int(cas), "gets after cas: %r %r" % (value2, cas2))
    many = c.gets_many(["py:m2", "py:m3"])
    check(set(many) == {"py:m2", "py:m3"} and many["py:m2"][0] == b"22", "gets_many: %r" % many)

    # add / replace / append / prepend / delete.
    check(c.add("py:add", b"x") is True, "add of a new key")
    check(c.add("py:add", b"y") is False, "add of an existing key")
    check(c.replace("py:add", b"z") is True, "replace of an existing key")
    check(c.replace("py:rep-missing", b"z") is False, "replace of a missing key")
    check(c.append("py:add", b"A") is True and c.prepend("py:add", b"P") is True, "append, prepend")
    check(c.get("py:add") == b"PzA", "after append and prepend: %r" % c.get("py:add"))
    check(c.append("py:app-missing", b"A") is False, "append to a missing key")
    check(c.delete("py:add") is True, "delete")
    check(c.delete("py:add") is False, "delete of a missing key")
    check(c.get("py:add") is None, "get after delete")

    # incr / decr.
    c.set("py:n", b"10")
    check(c.incr("py:n", 5) == 15, "incr")
    check(c.decr("py:n", 20) == 0, "decr stops at 0")
    check(c.incr("py:n", 2 ** 64 - 1) == 2 ** 64 - 1, "incr to 2^64-1")
    check(c.incr("py:n", 1) == 0, "incr wraps at 2^64")
    check(c.incr("py:n-missing", 1) is None, "incr of a missing key")
    c.set("py:text", b"abc")
    try:
        c.incr("py:text", 1)
        check(False, "incr of a non-numeric value: no error")
    except MemcacheClientError as e:
        check("non-numeric" in str(e), "incr non-numeric: %s" % e)

    # touch, expiry (a negative exptime is already expired; exptime 1 has
    # surely passed after 2.5 s: a slow machine only makes it more so).
    c.set("py:t", b"t", expire=1000)
    check(c.touch("py:t", 2000) is True, "touch")
    check(c.touch("py:t-missing", 10) is False, "touch of a missing key")
    check(c.get("py:t") == b"t", "alive after touch")
    check(c.touch("py:t", -1) is True and c.get("py:t") is None, "touch -1 expires")
    c.set("py:neg", b"n", expire=-1)
    check(c.get("py:neg") is None, "a negative exptime is expired at once")
    c.set("py:short", b"s", expire=1)
    c.set("py:long", b"l", expire=1000)
    time.sleep(2.5)
    check(c.get("py:short") is None, "exptime 1: gone after 2.5 s")
    check(c.get("py:long") == b"l", "exptime 1000: still there")

    # noreply: the client does not wait; the next command's answer proves
    # the server kept in step.
    n = client(args, default_noreply=True)
    for i in range(100):
        n.set("py:nr%d" % i, b"v%d" % i)
    n.delete("py:nr0")
    n.incr("py:nr-missing", 1, noreply=True)
    # A command with a reply on the same connection: the ones before it are
    # done, and had no reply (a stray one would be read as version's).
    check(n.version() == v, "version after noreply commands")
    got = c.get_many(["py:nr%d" % i for i in range(100)])
    check(len(got) == 99 and got["py:nr99"] == b"v99" and "py:nr0" not in got, "noreply sets: %d items" % len(got))
    n.close()

    # stats: the counters the commands above moved.
    after = raw.stats()
    for name in ("cmd_get", "get_hits", "get_misses", "cmd_set", "curr_items", "total_connections",
                 "curr_connections", "pid", "uptime", "version"):
        check(name in after, "stats has no %s" % name)
    moved = {k: int(after[k]) - int(before[k]) for k in ("cmd_get", "get_hits", "get_misses", "cmd_set",
                                                         "total_connections")}
    print("stats moved: %s; curr_items %s" % (moved, after["curr_items"]))
    check(moved["cmd_get"] >= 30, "cmd_get moved by %d" % moved["cmd_get"])
    check(moved["get_hits"] >= 20, "get_hits moved by %d" % moved["get_hits"])
    check(moved["get_misses"] >= 5, "get_misses moved by %d" % moved["get_misses"])
    check(moved["cmd_set"] >= 100, "cmd_set moved by %d" % moved["cmd_set"])
    check(moved["total_connections"] >= 2, "total_connections moved by %d" % moved["total_connections"])
    check(int(after["curr_items"]) >= 99, "curr_items is %s" % after["curr_items"])
    check(int(after["curr_connections"]) >= 2, "curr_connections is %s" % after["curr_connections"])
    check(after["version"] == v.decode(), "stats version %s, version %s" % (after["version"], v))
    pstats = c.stats()
    check(int(pstats[b"curr_items"]) == int(raw.stats()["curr_items"]), "stats through pymemcache")

    # flush_all: everything is gone, and the store works on.
    check(c.flush_all() is True, "flush_all")
    check(c.get("py:a") is None and c.get_many(["py:m1", "py:m2"]) == {}, "items after flush_all")
    check(c.set("py:a", b"again") is True and c.get("py:a") == b"again", "set after flush_all")
    c.close()
    raw.close()
    print("pymemcache: every check passed")


if __name__ == "__main__":
    kvtest.run(main)
