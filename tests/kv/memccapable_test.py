#!/usr/bin/env python3
# libmemcached's protocol checker, memccapable (Debian's libmemcached-tools,
# 1.1.4), in ASCII mode: every one of its ascii tests that the real
# memcached 1.6.18 passes must pass ("[pass]"), and none may fail.
#
#   memccapable_test.py --port P [--memccapable PATH]
import re
import subprocess

import kvtest

# What memccapable -a runs and memcached 1.6.18 passes: all of it.
EXPECTED = [
    "version", "quit", "verbosity", "set", "set noreply", "get", "gets", "mget",
    "flush", "flush noreply", "add", "add noreply", "replace", "replace noreply",
    "cas", "cas noreply", "delete", "delete noreply", "incr", "incr noreply",
    "decr", "decr noreply", "append", "append noreply", "prepend", "prepend noreply",
    "stat",
]
LINE_RE = re.compile(r"^ascii (.*?)\s+\[(\w+)\]\s*$")


def main():
    args = kvtest.parse_args("memccapable -a against a server",
                             lambda p: p.add_argument("--memccapable", default="memccapable"))
    proc = subprocess.run([args.memccapable, "-h", args.host, "-p", str(args.port), "-a"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = proc.stdout.decode(errors="replace")
    print(out)
    results = {}
    for line in out.splitlines():
        m = LINE_RE.match(line)
        if m:
            results[m.group(1)] = m.group(2)
    kvtest.check("[FAIL]" not in out, "memccapable reports a failure")
    missing = [t for t in EXPECTED if t not in results]
    kvtest.check(not missing, "memccapable did not run: %s" % missing)
    not_passed = ["%s: %s" % (t, results[t]) for t in EXPECTED if results[t] != "pass"]
    kvtest.check(not not_passed, "not passed: %s" % not_passed)
    kvtest.check(proc.returncode == 0, "memccapable exited with %d" % proc.returncode)
    print("memccapable: all %d ascii tests pass" % len(EXPECTED))


if __name__ == "__main__":
    kvtest.run(main)
