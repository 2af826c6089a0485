#!/usr/bin/env python3
# The text protocol, byte for byte, as the real memcached 1.6.18 speaks it:
# a table of requests and the replies memcached gave to them (GOLDEN,
# below), compared against a live server.
#
#   protocol_conformance.py --port P            compare (the test)
#   protocol_conformance.py --port P --record   print GOLDEN from a live
#                                               memcached, to paste below
#
# Every case runs on a connection of its own, in the order of CASES; each of
# its steps is sent followed by "get __sentinel__\r\n" (a key no case sets),
# whose "END\r\n" marks where the step's reply ends, so that a reply too
# long, too short or missing shows as a mismatch rather than a hang. A step
# whose reply ends with the connection closed is marked so ("closes").
#
# What legitimately differs between servers, and so is not compared:
#   - the version string: "VERSION x" is compared as "VERSION <v>";
#   - cas values: "VALUE k f n <cas>" is compared as "VALUE k f n <cas>"
#     (a step's @CAS@ is the cas its case's last gets/gats reply gave);
#   - stats (values, and which stats there are): tests/kv/pymemcache_test.py
#     checks the counters that must move;
#   - the meta commands (mg, ms, md, ma, mn, me) and memcached's
#     administrative ones (slabs, lru, lru_crawler, watch, cache_memlimit,
#     shutdown, misbehave, debugtime): spindle-kv implements the classic
#     text protocol only;
#   - flags of 2^32 or more: memcached 1.6.18 stores them truncated to 32
#     bits (4294967296 reads back as 0), where a server may as well refuse
#     them; what both must do with negative and non-numeric flags is here;
#   - what depends on the item size limit's exact bookkeeping (memcached
#     counts its item header against -I): the too-large values here are
#     over 1 MiB by any count.
import re
import socket
import sys
import time

import kvtest

SENTINEL = b"get __sentinel__\r\n"
SENTINEL_REPLY = b"END\r\n"

K250 = b"k" * 250
K251 = b"k" * 251
BIG = 1024 * 1024 + 1  # over the 1 MiB item limit (-I 1m, both servers' default)


def big_set(cmd, key, extra=b""):
    return b"%s %s 0 0 %d%s\r\n" % (cmd, key, BIG, extra) + b"x" * BIG + b"\r\n"


# (name, [request, ...]): each request one step, sent whole.
CASES = [
    # Storage commands.
    ("set_get", [b"set sg 5 0 3\r\nabc\r\n", b"get sg\r\n"]),
    ("set_flags_max", [b"set sfm 4294967295 0 1\r\na\r\n", b"get sfm\r\n"]),
    ("set_flags_negative", [b"set sfn -1 0 1\r\na\r\n", b"get sfn\r\n"]),
    ("set_flags_non_numeric", [b"set sfx abc 0 1\r\na\r\n"]),
    ("set_exptime_non_numeric", [b"set sex 0 abc 1\r\na\r\n"]),
    ("set_exptime_negative", [b"set sen 0 -1 1\r\na\r\n", b"get sen\r\n"]),
    ("set_exptime_future", [b"set sef 0 1000 1\r\na\r\n", b"get sef\r\n"]),
    ("set_empty_value", [b"set sev 0 0 0\r\n\r\n", b"get sev\r\n"]),
    ("set_binary_value", [b"set sbv 0 0 6\r\n\x00\r\n\xff \n\r\n", b"get sbv\r\n"]),
    ("set_overwrite", [b"set sow 1 0 1\r\na\r\n", b"set sow 2 0 2\r\nbb\r\n", b"get sow\r\n"]),
    ("set_noreply", [b"set snr 0 0 1 noreply\r\na\r\n", b"get snr\r\n"]),
    ("set_missing_args", [b"set sma 0 0\r\n"]),
    ("set_too_many_args", [b"set stm 0 0 1 noreply extra\r\na\r\n"]),
    ("set_length_non_numeric", [b"set sln 0 0 abc\r\n"]),
    ("set_length_negative", [b"set slm 0 0 -1\r\n"]),
    ("set_bad_data_chunk", [b"set sbd 0 0 3\r\nabcd\r\n", b"get sbd\r\n"]),
    ("set_bad_data_chunk_noreply", [b"set sbn 0 0 3 noreply\r\nabcd\r\n", b"get sbn\r\n"]),
    ("set_no_crlf_after_data", [b"set snc 0 0 3\r\nabcXY", b"get snc\r\n"]),
    ("set_key_250", [b"set " + K250 + b" 0 0 1\r\na\r\n", b"get " + K250 + b"\r\n"]),
    ("set_key_too_long", [b"set " + K251 + b" 0 0 1\r\na\r\n", b"get " + K251 + b"\r\n"]),
    ("set_too_large", [big_set(b"set", b"stl"), b"get stl\r\n"]),
    ("set_too_large_noreply", [big_set(b"set", b"stn", b" noreply"), b"get stn\r\n"]),
    ("set_too_large_deletes_old", [b"set std 0 0 1\r\na\r\n", big_set(b"set", b"std"), b"get std\r\n"]),
    ("add_new", [b"add adn 3 0 1\r\na\r\n", b"get adn\r\n"]),
    ("add_existing", [b"set ade 0 0 1\r\na\r\n", b"add ade 0 0 1\r\nb\r\n", b"get ade\r\n"]),
    ("add_noreply", [b"set adr 0 0 1\r\na\r\n", b"add adr 0 0 1 noreply\r\nb\r\n", b"add adr2 0 0 1 noreply\r\nc\r\n",
                     b"get adr adr2\r\n"]),
    ("add_too_large", [big_set(b"add", b"atl"), b"get atl\r\n"]),
    ("replace_missing", [b"replace rpm 0 0 1\r\na\r\n", b"get rpm\r\n"]),
    ("replace_existing", [b"set rpe 1 0 1\r\na\r\n", b"replace rpe 2 0 2\r\nbb\r\n", b"get rpe\r\n"]),
    ("replace_noreply", [b"replace rpn 0 0 1 noreply\r\na\r\n", b"get rpn\r\n"]),
    ("append_missing", [b"append apm 0 0 1\r\na\r\n", b"get apm\r\n"]),
    ("append_existing", [b"set ape 7 0 2\r\nab\r\n", b"append ape 9 0 2\r\ncd\r\n", b"get ape\r\n"]),
    ("append_noreply", [b"set apn 0 0 1\r\na\r\n", b"append apn 0 0 1 noreply\r\nb\r\n", b"get apn\r\n"]),
    ("prepend_missing", [b"prepend ppm 0 0 1\r\na\r\n", b"get ppm\r\n"]),
    ("prepend_existing", [b"set ppe 7 0 2\r\nab\r\n", b"prepend ppe 9 0 2\r\ncd\r\n", b"get ppe\r\n"]),
    ("prepend_noreply", [b"set ppn 0 0 1\r\na\r\n", b"prepend ppn 0 0 1 noreply\r\nb\r\n", b"get ppn\r\n"]),
    # cas.
    ("cas_missing", [b"cas csm 0 0 1 1\r\na\r\n", b"get csm\r\n"]),
    ("cas_match", [b"set csa 0 0 1\r\na\r\n", b"gets csa\r\n", b"cas csa 4 0 1 @CAS@\r\nb\r\n", b"get csa\r\n"]),
    ("cas_exists", [b"set cse 0 0 1\r\na\r\n", b"gets cse\r\n", b"set cse 0 0 1\r\nb\r\n",
                    b"cas cse 0 0 1 @CAS@\r\nc\r\n", b"get cse\r\n"]),
    ("cas_noreply", [b"set csn 0 0 1\r\na\r\n", b"gets csn\r\n", b"cas csn 0 0 1 @CAS@ noreply\r\nb\r\n",
                     b"cas csn 0 0 1 @CAS@ noreply\r\nc\r\n", b"get csn\r\n"]),
    ("cas_missing_unique", [b"cas csu 0 0 1\r\n"]),
    ("cas_unique_non_numeric", [b"cas csx 0 0 1 abc\r\na\r\n"]),
    ("cas_too_large", [b"set ctl 0 0 1\r\na\r\n", b"gets ctl\r\n",
                       b"cas ctl 0 0 %d @CAS@\r\n" % BIG + b"x" * BIG + b"\r\n", b"get ctl\r\n"]),
    # Retrieval.
    ("get_miss", [b"get gmiss\r\n"]),
    ("get_multi", [b"set gm1 1 0 1\r\na\r\nset gm2 2 0 2\r\nbb\r\n", b"get gm1 gmx gm2 gm1\r\n"]),
    ("get_no_key", [b"get\r\n"]),
    ("get_key_too_long", [b"get " + K251 + b"\r\n"]),
    ("get_key_too_long_in_multi", [b"set gkl 0 0 1\r\na\r\n", b"get gkl " + K251 + b"\r\n"]),
    ("get_spaces", [b"set gsp 0 0 1\r\na\r\n", b"get  gsp   gsp \r\n"]),
    ("get_lf_only", [b"set glf 0 0 1\r\na\r\n", b"get glf\n"]),
    ("gets", [b"set gts 3 0 2\r\nab\r\n", b"gets gts gtsx\r\n"]),
    ("gets_no_key", [b"gets\r\n"]),
    # Deletion.
    ("delete_existing", [b"set dle 0 0 1\r\na\r\n", b"delete dle\r\n", b"get dle\r\n"]),
    ("delete_missing", [b"delete dlm\r\n"]),
    ("delete_noreply", [b"set dln 0 0 1\r\na\r\n", b"delete dln noreply\r\n", b"get dln\r\n"]),
    ("delete_time_zero", [b"set dlz 0 0 1\r\na\r\n", b"delete dlz 0\r\n"]),
    ("delete_time_nonzero", [b"set dlt 0 0 1\r\na\r\n", b"delete dlt 10\r\n", b"get dlt\r\n"]),
    ("delete_no_key", [b"delete\r\n"]),
    ("delete_key_too_long", [b"delete " + K251 + b"\r\n"]),
    # incr/decr.
    ("incr_missing", [b"incr icm 1\r\n"]),
    ("incr", [b"set ici 5 0 2\r\n10\r\n", b"incr ici 5\r\n", b"get ici\r\n"]),
    ("incr_wraps", [b"set icw 0 0 20\r\n18446744073709551615\r\n", b"incr icw 2\r\n", b"get icw\r\n"]),
    ("incr_grows", [b"set icg 0 0 1\r\n9\r\n", b"incr icg 1\r\n", b"get icg\r\n"]),
    ("incr_delta_max", [b"set icd 0 0 1\r\n0\r\n", b"incr icd 18446744073709551615\r\n"]),
    ("incr_non_numeric_value", [b"set icn 0 0 3\r\nabc\r\n", b"incr icn 1\r\n"]),
    ("incr_value_too_big", [b"set icb 0 0 20\r\n18446744073709551616\r\n", b"incr icb 1\r\n"]),
    ("incr_invalid_delta", [b"set icv 0 0 1\r\n1\r\n", b"incr icv abc\r\n", b"incr icv -1\r\n",
                            b"incr icv 18446744073709551616\r\n"]),
    ("incr_noreply", [b"set icr 0 0 1\r\n1\r\n", b"incr icr 2 noreply\r\n", b"get icr\r\n"]),
    ("incr_missing_delta", [b"incr icq\r\n"]),
    ("incr_key_too_long", [b"incr " + K251 + b" 1\r\n"]),
    ("decr", [b"set dci 0 0 3\r\n100\r\n", b"decr dci 1\r\n", b"get dci\r\n"]),
    ("decr_floor", [b"set dcf 0 0 1\r\n5\r\n", b"decr dcf 10\r\n", b"get dcf\r\n"]),
    ("decr_missing", [b"decr dcm 1\r\n"]),
    ("decr_non_numeric_value", [b"set dcn 0 0 1\r\nx\r\n", b"decr dcn 1\r\n"]),
    ("decr_noreply", [b"set dcr 0 0 2\r\n10\r\n", b"decr dcr 3 noreply\r\n", b"get dcr\r\n"]),
    # touch, gat, gats.
    ("touch_existing", [b"set tce 0 0 1\r\na\r\n", b"touch tce 1000\r\n", b"get tce\r\n"]),
    ("touch_missing", [b"touch tcm 10\r\n"]),
    ("touch_expire", [b"set tcx 0 0 1\r\na\r\n", b"touch tcx -1\r\n", b"get tcx\r\n"]),
    ("touch_noreply", [b"set tcn 0 0 1\r\na\r\n", b"touch tcn 1000 noreply\r\n", b"get tcn\r\n"]),
    ("touch_bad_exptime", [b"set tcb 0 0 1\r\na\r\n", b"touch tcb abc\r\n"]),
    ("touch_missing_args", [b"touch tcq\r\n"]),
    ("gat", [b"set gt1 6 0 1\r\na\r\nset gt2 7 0 2\r\nbb\r\n", b"gat 1000 gt1 gtx gt2\r\n", b"get gt1 gt2\r\n"]),
    ("gat_expire", [b"set gte 0 0 1\r\na\r\n", b"gat -1 gte\r\n", b"get gte\r\n"]),
    ("gats", [b"set gts1 0 0 1\r\na\r\n", b"gats 1000 gts1\r\n", b"cas gts1 0 0 1 @CAS@\r\nb\r\n", b"get gts1\r\n"]),
    ("gat_bad_exptime", [b"gat abc gtb\r\n"]),
    ("gat_no_key", [b"gat 10\r\n"]),
    ("gat_no_args", [b"gat\r\n"]),
    # Other commands.
    ("unknown_command", [b"bogus\r\n", b"GET x\r\n"]),
    ("empty_line", [b"\r\n"]),
    ("long_unknown_line", [b"a" * 3000 + b"\r\n"]),
    ("verbosity", [b"verbosity 1\r\n", b"verbosity 0 noreply\r\n", b"verbosity\r\n"]),
    ("version", [b"version\r\n"]),
    ("pipelined", [b"set pl1 0 0 1\r\na\r\nget pl1\r\ndelete pl1\r\nget pl1\r\nincr pl1 1\r\n"]),
    ("quit", [b"quit\r\n"]),
    ("quit_after_get", [b"set qag 0 0 1\r\na\r\nget qag\r\nquit\r\nget qag\r\n"]),
    ("flush_all", [b"set fa1 0 0 1\r\na\r\n", b"flush_all\r\n", b"get fa1\r\n", b"set fa1 0 0 1\r\nb\r\n",
                   b"get fa1\r\n"]),
    ("flush_all_noreply", [b"set fan 0 0 1\r\na\r\n", b"flush_all noreply\r\n", b"get fan\r\n"]),
    ("flush_all_zero", [b"set faz 0 0 1\r\na\r\n", b"flush_all 0\r\n", b"get faz\r\n"]),
    ("flush_all_bad_delay", [b"flush_all abc\r\n"]),
    # A delayed flush leaves items alive until then; the plain flush after
    # it puts the flush time back to now, for what runs after this table.
    ("flush_all_delay", [b"set fad 0 0 1\r\na\r\n", b"flush_all 1000\r\n", b"get fad\r\n",
                         b"flush_all 1000 noreply\r\n", b"get fad\r\n", b"flush_all\r\n", b"get fad\r\n"]),
]

VALUE_RE = re.compile(rb"^(VALUE \S+ \d+ \d+) \d+\r$", re.M)
VERSION_RE = re.compile(rb"^VERSION [^\r\n]*\r$", re.M)


def normalize(reply):
    reply = VALUE_RE.sub(rb"\1 <cas>\r", reply)
    return VERSION_RE.sub(b"VERSION <v>\r", reply)


LAST_CAS_RE = re.compile(rb"VALUE \S+ \d+ \d+ (\d+)\r\n")


def read_step(sock, done, timeout):
    """Reads until done(data) or EOF or the timeout; returns (data, closed)."""
    data = b""
    deadline = time.monotonic() + timeout
    while not done(data):
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def record_step(sock):
    # Until the sentinel's END has come and nothing follows for 0.3 s, or
    # the connection closes.
    data = b""
    deadline = time.monotonic() + 10
    while True:
        more, closed = read_step(sock, lambda d: False, 0.3)
        data += more
        if closed:
            return data, True
        if not more and data.endswith(SENTINEL_REPLY):
            return data[:-len(SENTINEL_REPLY)], False
        if time.monotonic() > deadline:
            sys.exit("record: no end to the reply (the sentinel swallowed?): %r" % data[:300])


def run_case(args, name, steps, golden, record):
    sock = socket.create_connection((args.host, args.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cas = b"0"
    got = []
    failures = []
    try:
        for i, request in enumerate(steps):
            request = request.replace(b"@CAS@", cas)
            try:
                sock.sendall(request + SENTINEL)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server closed: the reply says so
            if record:
                reply, closed = record_step(sock)
            else:
                want, want_closed = golden[i]
                want_n = normalize(want) if want_closed else normalize(want + SENTINEL_REPLY)
                # Done when it matches, or when as much has come as it
                # should have and a line is complete (then it differs).
                data, closed = read_step(
                    sock, lambda d: not want_closed and (normalize(d) == want_n or (
                        len(normalize(d)) >= len(want_n) and d.endswith(b"\r\n"))), 5)
                if want_closed and not closed:
                    failures.append("step %d: the server did not close the connection" % i)
                if not want_closed and closed:
                    failures.append("step %d: the server closed the connection" % i)
                if normalize(data) != want_n:
                    failures.append("step %d %r:\n      want %r\n      got  %r"
                                    % (i, request[:80], want_n[:300], normalize(data)[:300]))
                reply = data if closed else data[:-len(SENTINEL_REPLY)]
                if failures:
                    break
            got.append((reply, closed))
            m = LAST_CAS_RE.findall(reply)
            if m:
                cas = m[-1]
            if closed:
                break
    finally:
        sock.close()
    return got, failures


def main():
    args = kvtest.parse_args("memcached text protocol conformance",
                             lambda p: p.add_argument("--record", action="store_true"))
    names = [name for name, _ in CASES]
    assert len(set(names)) == len(names), "CASES: a name twice"
    if args.record:
        print("GOLDEN = {")
        for name, steps in CASES:
            got, _ = run_case(args, name, steps, None, True)
            print("    %r: [" % name)
            for reply, closed in got:
                print("        (%r, %r)," % (reply, closed))
            print("    ],")
        print("}")
        return
    missing = [n for n in names if n not in GOLDEN]
    kvtest.check(not missing, "cases with no golden reply (run --record against memcached): %s" % missing)
    failed = 0
    for name, steps in CASES:
        golden = GOLDEN[name]
        _, failures = run_case(args, name, steps[:len(golden)], golden, False)
        if failures:
            failed += 1
            print("[FAIL] %s" % name)
            for f in failures:
                print("    " + f)
        else:
            print("[pass] %s" % name)
    steps = sum(len(GOLDEN[n]) for n in names)
    kvtest.check(failed == 0, "%d of %d cases differ from memcached 1.6.18" % (failed, len(CASES)))
    print("protocol conformance: all %d cases (%d steps) as memcached 1.6.18 answers them" % (len(CASES), steps))


# Recorded with --record from memcached 1.6.18 (memcached -U 0 -t 1).
GOLDEN = {
    'set_get': [
        (b'STORED\r\n', False),
        (b'VALUE sg 5 3\r\nabc\r\nEND\r\n', False),
    ],
    'set_flags_max': [
        (b'STORED\r\n', False),
        (b'VALUE sfm 4294967295 1\r\na\r\nEND\r\n', False),
    ],
    'set_flags_negative': [
        (b'CLIENT_ERROR bad command line format\r\nERROR\r\n', False),
        (b'END\r\n', False),
    ],
    'set_flags_non_numeric': [
        (b'CLIENT_ERROR bad command line format\r\nERROR\r\n', False),
    ],
    'set_exptime_non_numeric': [
        (b'CLIENT_ERROR bad command line format\r\nERROR\r\n', False),
    ],
    'set_exptime_negative': [
        (b'STORED\r\n', False),
        (b'END\r\n', False),
    ],
    'set_exptime_future': [
        (b'STORED\r\n', False),
        (b'VALUE sef 0 1\r\na\r\nEND\r\n', False),
    ],
    'set_empty_value': [
        (b'STORED\r\n', False),
        (b'VALUE sev 0 0\r\n\r\nEND\r\n', False),
    ],
    'set_binary_value': [
        (b'STORED\r\n', False),
        (b'VALUE sbv 0 6\r\n\x00\r\n\xff \n\r\nEND\r\n', False),
    ],
    'set_overwrite': [
        (b'STORED\r\n', False),
        (b'STORED\r\n', False),
        (b'VALUE sow 2 2\r\nbb\r\nEND\r\n', False),
    ],
    'set_noreply': [
        (b'', False),
        (b'VALUE snr 0 1\r\na\r\nEND\r\n', False),
    ],
    'set_missing_args': [
        (b'ERROR\r\n', False),
    ],
    'set_too_many_args': [
        (b'ERROR\r\nERROR\r\n', False),
    ],
    'set_length_non_numeric': [
        (b'CLIENT_ERROR bad command line format\r\n', False),
    ],
    'set_length_negative': [
        (b'CLIENT_ERROR bad command line format\r\n', False),
    ],
    'set_bad_data_chunk': [
        (b'CLIENT_ERROR bad data chunk\r\nERROR\r\n', False),
        (b'END\r\n', False),
    ],
    'set_bad_data_chunk_noreply': [
        (b'ERROR\r\n', False),
        (b'END\r\n', False),
    ],
    'set_no_crlf_after_data': [
        (b'CLIENT_ERROR bad data chunk\r\n', False),
        (b'END\r\n', False),
    ],
    'set_key_250': [
        (b'STORED\r\n', False),
        (b'VALUE kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk 0 1\r\na\r\nEND\r\n', False),
    ],
    'set_key_too_long': [
        (b'CLIENT_ERROR bad command line format\r\nERROR\r\n', False),
        (b'CLIENT_ERROR bad command line format\r\n', False),
    ],
    'set_too_large': [
        (b'SERVER_ERROR object too large for cache\r\n', False),
        (b'END\r\n', False),
    ],
    'set_too_large_noreply': [
        (b'', False),
        (b'END\r\n', False),
    ],
    'set_too_large_deletes_old': [
        (b'STORED\r\n', False),
        (b'SERVER_ERROR object too large for cache\r\n', False),
        (b'END\r\n', False),
    ],
    'add_new': [
        (b'STORED\r\n', False),
        (b'VALUE adn 3 1\r\na\r\nEND\r\n', False),
    ],
    'add_existing': [
        (b'STORED\r\n', False),
        (b'NOT_STORED\r\n', False),
        (b'VALUE ade 0 1\r\na\r\nEND\r\n', False),
    ],
    'add_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'', False),
        (b'VALUE adr 0 1\r\na\r\nVALUE adr2 0 1\r\nc\r\nEND\r\n', False),
    ],
    'add_too_large': [
        (b'SERVER_ERROR object too large for cache\r\n', False),
        (b'END\r\n', False),
    ],
    'replace_missing': [
        (b'NOT_STORED\r\n', False),
        (b'END\r\n', False),
    ],
    'replace_existing': [
        (b'STORED\r\n', False),
        (b'STORED\r\n', False),
        (b'VALUE rpe 2 2\r\nbb\r\nEND\r\n', False),
    ],
    'replace_noreply': [
        (b'', False),
        (b'END\r\n', False),
    ],
    'append_missing': [
        (b'NOT_STORED\r\n', False),
        (b'END\r\n', False),
    ],
    'append_existing': [
        (b'STORED\r\n', False),
        (b'STORED\r\n', False),
        (b'VALUE ape 7 4\r\nabcd\r\nEND\r\n', False),
    ],
    'append_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'VALUE apn 0 2\r\nab\r\nEND\r\n', False),
    ],
    'prepend_missing': [
        (b'NOT_STORED\r\n', False),
        (b'END\r\n', False),
    ],
    'prepend_existing': [
        (b'STORED\r\n', False),
        (b'STORED\r\n', False),
        (b'VALUE ppe 7 4\r\ncdab\r\nEND\r\n', False),
    ],
    'prepend_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'VALUE ppn 0 2\r\nba\r\nEND\r\n', False),
    ],
    'cas_missing': [
        (b'NOT_FOUND\r\n', False),
        (b'END\r\n', False),
    ],
    'cas_match': [
        (b'STORED\r\n', False),
        (b'VALUE csa 0 1 27\r\na\r\nEND\r\n', False),
        (b'STORED\r\n', False),
        (b'VALUE csa 4 1\r\nb\r\nEND\r\n', False),
    ],
    'cas_exists': [
        (b'STORED\r\n', False),
        (b'VALUE cse 0 1 29\r\na\r\nEND\r\n', False),
        (b'STORED\r\n', False),
        (b'EXISTS\r\n', False),
        (b'VALUE cse 0 1\r\nb\r\nEND\r\n', False),
    ],
    'cas_noreply': [
        (b'STORED\r\n', False),
        (b'VALUE csn 0 1 31\r\na\r\nEND\r\n', False),
        (b'', False),
        (b'', False),
        (b'VALUE csn 0 1\r\nb\r\nEND\r\n', False),
    ],
    'cas_missing_unique': [
        (b'ERROR\r\n', False),
    ],
    'cas_unique_non_numeric': [
        (b'CLIENT_ERROR bad command line format\r\nERROR\r\n', False),
    ],
    'cas_too_large': [
        (b'STORED\r\n', False),
        (b'VALUE ctl 0 1 33\r\na\r\nEND\r\n', False),
        (b'SERVER_ERROR object too large for cache\r\n', False),
        (b'VALUE ctl 0 1\r\na\r\nEND\r\n', False),
    ],
    'get_miss': [
        (b'END\r\n', False),
    ],
    'get_multi': [
        (b'STORED\r\nSTORED\r\n', False),
        (b'VALUE gm1 1 1\r\na\r\nVALUE gm2 2 2\r\nbb\r\nVALUE gm1 1 1\r\na\r\nEND\r\n', False),
    ],
    'get_no_key': [
        (b'ERROR\r\n', False),
    ],
    'get_key_too_long': [
        (b'CLIENT_ERROR bad command line format\r\n', False),
    ],
    'get_key_too_long_in_multi': [
        (b'STORED\r\n', False),
        (b'CLIENT_ERROR bad command line format\r\n', False),
    ],
    'get_spaces': [
        (b'STORED\r\n', False),
        (b'VALUE gsp 0 1\r\na\r\nVALUE gsp 0 1\r\na\r\nEND\r\n', False),
    ],
    'get_lf_only': [
        (b'STORED\r\n', False),
        (b'VALUE glf 0 1\r\na\r\nEND\r\n', False),
    ],
    'gets': [
        (b'STORED\r\n', False),
        (b'VALUE gts 3 2 39\r\nab\r\nEND\r\n', False),
    ],
    'gets_no_key': [
        (b'ERROR\r\n', False),
    ],
    'delete_existing': [
        (b'STORED\r\n', False),
        (b'DELETED\r\n', False),
        (b'END\r\n', False),
    ],
    'delete_missing': [
        (b'NOT_FOUND\r\n', False),
    ],
    'delete_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'END\r\n', False),
    ],
    'delete_time_zero': [
        (b'STORED\r\n', False),
        (b'DELETED\r\n', False),
    ],
    'delete_time_nonzero': [
        (b'STORED\r\n', False),
        (b'CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n', False),
        (b'VALUE dlt 0 1\r\na\r\nEND\r\n', False),
    ],
    'delete_no_key': [
        (b'ERROR\r\n', False),
    ],
    'delete_key_too_long': [
        (b'CLIENT_ERROR bad command line format\r\n', False),
    ],
    'incr_missing': [
        (b'NOT_FOUND\r\n', False),
    ],
    'incr': [
        (b'STORED\r\n', False),
        (b'15\r\n', False),
        (b'VALUE ici 5 2\r\n15\r\nEND\r\n', False),
    ],
    'incr_wraps': [
        (b'STORED\r\n', False),
        (b'1\r\n', False),
        (b'VALUE icw 0 20\r\n1                   \r\nEND\r\n', False),
    ],
    'incr_grows': [
        (b'STORED\r\n', False),
        (b'10\r\n', False),
        (b'VALUE icg 0 2\r\n10\r\nEND\r\n', False),
    ],
    'incr_delta_max': [
        (b'STORED\r\n', False),
        (b'18446744073709551615\r\n', False),
    ],
    'incr_non_numeric_value': [
        (b'STORED\r\n', False),
        (b'CLIENT_ERROR cannot increment or decrement non-numeric value\r\n', False),
    ],
    'incr_value_too_big': [
        (b'STORED\r\n', False),
        (b'CLIENT_ERROR cannot increment or decrement non-numeric value\r\n', False),
    ],
    'incr_invalid_delta': [
        (b'STORED\r\n', False),
        (b'CLIENT_ERROR invalid numeric delta argument\r\n', False),
        (b'CLIENT_ERROR invalid numeric delta argument\r\n', False),
        (b'CLIENT_ERROR invalid numeric delta argument\r\n', False),
    ],
    'incr_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'VALUE icr 0 1\r\n3\r\nEND\r\n', False),
    ],
    'incr_missing_delta': [
        (b'ERROR\r\n', False),
    ],
    'incr_key_too_long': [
        (b'CLIENT_ERROR bad command line format\r\n', False),
    ],
    'decr': [
        (b'STORED\r\n', False),
        (b'99\r\n', False),
        (b'VALUE dci 0 3\r\n99 \r\nEND\r\n', False),
    ],
    'decr_floor': [
        (b'STORED\r\n', False),
        (b'0\r\n', False),
        (b'VALUE dcf 0 1\r\n0\r\nEND\r\n', False),
    ],
    'decr_missing': [
        (b'NOT_FOUND\r\n', False),
    ],
    'decr_non_numeric_value': [
        (b'STORED\r\n', False),
        (b'CLIENT_ERROR cannot increment or decrement non-numeric value\r\n', False),
    ],
    'decr_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'VALUE dcr 0 2\r\n7 \r\nEND\r\n', False),
    ],
    'touch_existing': [
        (b'STORED\r\n', False),
        (b'TOUCHED\r\n', False),
        (b'VALUE tce 0 1\r\na\r\nEND\r\n', False),
    ],
    'touch_missing': [
        (b'NOT_FOUND\r\n', False),
    ],
    'touch_expire': [
        (b'STORED\r\n', False),
        (b'TOUCHED\r\n', False),
        (b'END\r\n', False),
    ],
    'touch_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'VALUE tcn 0 1\r\na\r\nEND\r\n', False),
    ],
    'touch_bad_exptime': [
        (b'STORED\r\n', False),
        (b'CLIENT_ERROR invalid exptime argument\r\n', False),
    ],
    'touch_missing_args': [
        (b'ERROR\r\n', False),
    ],
    'gat': [
        (b'STORED\r\nSTORED\r\n', False),
        (b'VALUE gt1 6 1\r\na\r\nVALUE gt2 7 2\r\nbb\r\nEND\r\n', False),
        (b'VALUE gt1 6 1\r\na\r\nVALUE gt2 7 2\r\nbb\r\nEND\r\n', False),
    ],
    'gat_expire': [
        (b'STORED\r\n', False),
        (b'VALUE gte 0 1\r\na\r\nEND\r\n', False),
        (b'END\r\n', False),
    ],
    'gats': [
        (b'STORED\r\n', False),
        (b'VALUE gts1 0 1 71\r\na\r\nEND\r\n', False),
        (b'STORED\r\n', False),
        (b'VALUE gts1 0 1\r\nb\r\nEND\r\n', False),
    ],
    'gat_bad_exptime': [
        (b'CLIENT_ERROR invalid exptime argument\r\n', False),
    ],
    'gat_no_key': [
        (b'END\r\n', False),
    ],
    'gat_no_args': [
        (b'ERROR\r\n', False),
    ],
    'unknown_command': [
        (b'ERROR\r\n', False),
        (b'ERROR\r\n', False),
    ],
    'empty_line': [
        (b'ERROR\r\n', False),
    ],
    'long_unknown_line': [
        (b'ERROR\r\n', False),
    ],
    'verbosity': [
        (b'OK\r\n', False),
        (b'', False),
        (b'ERROR\r\n', False),
    ],
    'version': [
        (b'VERSION 1.6.18\r\n', False),
    ],
    'pipelined': [
        (b'STORED\r\nVALUE pl1 0 1\r\na\r\nEND\r\nDELETED\r\nEND\r\nNOT_FOUND\r\n', False),
    ],
    'quit': [
        (b'', True),
    ],
    'quit_after_get': [
        (b'STORED\r\nVALUE qag 0 1\r\na\r\nEND\r\n', True),
    ],
    'flush_all': [
        (b'STORED\r\n', False),
        (b'OK\r\n', False),
        (b'END\r\n', False),
        (b'STORED\r\n', False),
        (b'VALUE fa1 0 1\r\nb\r\nEND\r\n', False),
    ],
    'flush_all_noreply': [
        (b'STORED\r\n', False),
        (b'', False),
        (b'END\r\n', False),
    ],
    'flush_all_zero': [
        (b'STORED\r\n', False),
        (b'OK\r\n', False),
        (b'END\r\n', False),
    ],
    'flush_all_bad_delay': [
        (b'CLIENT_ERROR invalid exptime argument\r\n', False),
    ],
    'flush_all_delay': [
        (b'STORED\r\n', False),
        (b'OK\r\n', False),
        (b'VALUE fad 0 1\r\na\r\nEND\r\n', False),
        (b'', False),
        (b'VALUE fad 0 1\r\na\r\nEND\r\n', False),
        (b'OK\r\n', False),
        (b'END\r\n', False),
    ],
}

if __name__ == "__main__":
    kvtest.run(main)
