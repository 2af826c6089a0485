// spindle-kv through a real C client, libmemcached (Debian's
// libmemcached-dev, 1.1.x) over the text protocol: every storage, retrieval
// and arithmetic call it has, cas, touch, flush, expiry, noreply, values
// from 0 B to about 1 MiB and one over the item limit, and 10,000 keys
// round-tripped with their contents checked. Holds for memcached 1.6.18 as
// well.
//
//     libmemcached_client HOST PORT
//
// Exits 0 when every check passes; otherwise prints the first failure,
// naming the call and libmemcached's error, and exits 1.
#define _POSIX_C_SOURCE 200809L  // nanosleep

#include <libmemcached/memcached.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ITEM_MAX (1024u * 1024u)  // -I 1m, both servers' default
#define MANY 10000

static memcached_st* mc;  // the client everything below uses
static int checks;

static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("libmemcached_client: FAIL: ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    exit(1);
}

// A call's return code must be `want`.
static void expect_rc(memcached_return_t rc, memcached_return_t want, const char* what) {
    ++checks;
    if (rc != want) {
        fail("%s: %s (%d), want %s (%d); last error: %s", what, memcached_strerror(mc, rc), (int)rc,
             memcached_strerror(mc, want), (int)want, memcached_last_error_message(mc));
    }
}

static void expect(bool cond, const char* what) {
    ++checks;
    if (!cond) fail("%s", what);
}

static memcached_return_t set(const char* key, const void* val, size_t n, time_t exp, uint32_t flags) {
    return memcached_set(mc, key, strlen(key), (const char*)val, n, exp, flags);
}

// get `key`: want == NULL means it must be missing.
static void expect_value(const char* key, const void* want, size_t want_n, uint32_t want_flags) {
    size_t n = 0;
    uint32_t flags = 0;
    memcached_return_t rc;
    char* got = memcached_get(mc, key, strlen(key), &n, &flags, &rc);
    char what[512];
    if (want == NULL) {
        snprintf(what, sizeof what, "get %s: want a miss", key);
        expect_rc(rc, MEMCACHED_NOTFOUND, what);
        expect(got == NULL, what);
        return;
    }
    snprintf(what, sizeof what, "get %s", key);
    expect_rc(rc, MEMCACHED_SUCCESS, what);
    snprintf(what, sizeof what, "get %s: %zu bytes, flags %" PRIu32 ", want %zu bytes, flags %" PRIu32, key, n,
             flags, want_n, want_flags);
    // (An empty value comes back as NULL, with success.)
    expect(n == want_n && flags == want_flags && (n == 0 || (got != NULL && memcmp(got, want, n) == 0)), what);
    free(got);
}

static void fill(char* buf, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i) buf[i] = (char)((i * 31u + seed * 7u) & 0xffu);
}

static void storage(void) {
    expect_rc(set("lm:a", "alpha", 5, 0, 17), MEMCACHED_SUCCESS, "set lm:a");
    expect_value("lm:a", "alpha", 5, 17);
    expect_value("lm:missing", NULL, 0, 0);

    // add / replace.
    expect_rc(memcached_add(mc, "lm:a", 4, "x", 1, 0, 0), MEMCACHED_NOTSTORED, "add of an existing key");
    expect_rc(memcached_add(mc, "lm:add", 6, "x", 1, 0, 3), MEMCACHED_SUCCESS, "add of a new key");
    expect_value("lm:add", "x", 1, 3);
    expect_rc(memcached_replace(mc, "lm:nope", 7, "y", 1, 0, 0), MEMCACHED_NOTSTORED, "replace of a missing key");
    expect_rc(memcached_replace(mc, "lm:add", 6, "yy", 2, 0, 4), MEMCACHED_SUCCESS, "replace");
    expect_value("lm:add", "yy", 2, 4);

    // append / prepend keep the item's flags.
    expect_rc(memcached_append(mc, "lm:add", 6, "A", 1, 0, 9), MEMCACHED_SUCCESS, "append");
    expect_rc(memcached_prepend(mc, "lm:add", 6, "P", 1, 0, 9), MEMCACHED_SUCCESS, "prepend");
    expect_value("lm:add", "PyyA", 4, 4);
    expect_rc(memcached_append(mc, "lm:nope", 7, "A", 1, 0, 0), MEMCACHED_NOTSTORED, "append to a missing key");
    expect_rc(memcached_prepend(mc, "lm:nope", 7, "P", 1, 0, 0), MEMCACHED_NOTSTORED, "prepend to a missing key");

    // delete.
    expect_rc(memcached_delete(mc, "lm:add", 6, 0), MEMCACHED_SUCCESS, "delete");
    expect_rc(memcached_delete(mc, "lm:add", 6, 0), MEMCACHED_NOTFOUND, "delete of a missing key");
    expect_value("lm:add", NULL, 0, 0);
}

static void sizes(void) {
    static const size_t lens[] = {0, 1, 1024, ITEM_MAX - 1024};
    char* buf = malloc(ITEM_MAX + 1);
    if (buf == NULL) fail("out of memory");
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; ++i) {
        char key[32];
        snprintf(key, sizeof key, "lm:size%zu", lens[i]);
        fill(buf, lens[i], (unsigned)i);
        expect_rc(set(key, buf, lens[i], 0, (uint32_t)i), MEMCACHED_SUCCESS, key);
        expect_value(key, buf, lens[i], (uint32_t)i);
    }
    // One over the limit: the server refuses it (SERVER_ERROR object too
    // large for cache) and the connection goes on.
    fill(buf, ITEM_MAX + 1, 99);
    // libmemcached reads that reply as MEMCACHED_E2BIG.
    expect_rc(set("lm:big", buf, ITEM_MAX + 1, 0, 0), MEMCACHED_E2BIG, "set of one byte over 1 MiB");
    expect_value("lm:big", NULL, 0, 0);
    expect_value("lm:a", "alpha", 5, 17);
    free(buf);
}

static void mget(void) {
    const char* keys[] = {"lm:m1", "lm:m2", "lm:mnone", "lm:m3"};
    size_t lens[4];
    for (int i = 0; i < 4; ++i) lens[i] = strlen(keys[i]);
    expect_rc(set("lm:m1", "1", 1, 0, 1), MEMCACHED_SUCCESS, "set lm:m1");
    expect_rc(set("lm:m2", "22", 2, 0, 2), MEMCACHED_SUCCESS, "set lm:m2");
    expect_rc(set("lm:m3", "333", 3, 0, 3), MEMCACHED_SUCCESS, "set lm:m3");
    expect_rc(memcached_mget(mc, keys, lens, 4), MEMCACHED_SUCCESS, "mget");
    int seen = 0;
    memcached_return_t rc;
    memcached_result_st* r;
    while ((r = memcached_fetch_result(mc, NULL, &rc)) != NULL) {
        const char* k = memcached_result_key_value(r);
        size_t kn = memcached_result_key_length(r);
        size_t n = memcached_result_length(r);
        uint32_t flags = memcached_result_flags(r);
        int which = 0;
        if (kn == 5 && memcmp(k, "lm:m", 4) == 0) which = k[4] - '0';
        expect(which >= 1 && which <= 3 && !(seen & (1 << which)), "mget: an unexpected or repeated key");
        expect(n == (size_t)which && flags == (uint32_t)which && memcached_result_value(r)[0] == (char)('0' + which),
               "mget: a value or its flags");
        seen |= 1 << which;
        memcached_result_free(r);
    }
    expect(seen == 0xe, "mget: not every stored key came back");
}

static void cas(void) {
    expect_rc(set("lm:cas", "v1", 2, 0, 0), MEMCACHED_SUCCESS, "set lm:cas");
    const char* key = "lm:cas";
    size_t klen = strlen(key);
    expect_rc(memcached_mget(mc, &key, &klen, 1), MEMCACHED_SUCCESS, "gets lm:cas");
    memcached_return_t rc;
    memcached_result_st* r = memcached_fetch_result(mc, NULL, &rc);
    expect(r != NULL, "gets lm:cas: no result");
    uint64_t c1 = memcached_result_cas(r);
    memcached_result_free(r);
    while ((r = memcached_fetch_result(mc, NULL, &rc)) != NULL) memcached_result_free(r);
    expect(c1 != 0, "gets: cas 0");
    expect_rc(memcached_cas(mc, key, klen, "v2", 2, 0, 5, c1), MEMCACHED_SUCCESS, "cas with the item's cas");
    expect_rc(memcached_cas(mc, key, klen, "v3", 2, 0, 6, c1), MEMCACHED_DATA_EXISTS, "cas with a stale cas");
    expect_rc(memcached_cas(mc, "lm:casnone", 10, "v", 1, 0, 0, c1), MEMCACHED_NOTFOUND, "cas of a missing key");
    expect_value("lm:cas", "v2", 2, 5);
}

static void arithmetic(void) {
    uint64_t v = 0;
    expect_rc(set("lm:n", "10", 2, 0, 0), MEMCACHED_SUCCESS, "set lm:n");
    expect_rc(memcached_increment(mc, "lm:n", 4, 5, &v), MEMCACHED_SUCCESS, "increment");
    expect(v == 15, "increment: 10 + 5");
    expect_rc(memcached_decrement(mc, "lm:n", 4, 3, &v), MEMCACHED_SUCCESS, "decrement");
    expect(v == 12, "decrement: 15 - 3");
    expect_rc(memcached_decrement(mc, "lm:n", 4, 100, &v), MEMCACHED_SUCCESS, "decrement below 0");
    expect(v == 0, "decrement stops at 0");
    // (The delta is 32 bits wide in libmemcached's API.)
    expect_rc(set("lm:n", "18446744073709551613", 20, 0, 0), MEMCACHED_SUCCESS, "set lm:n to 2^64-3");
    expect_rc(memcached_increment(mc, "lm:n", 4, 2, &v), MEMCACHED_SUCCESS, "increment to 2^64-1");
    expect(v == UINT64_MAX, "increment to 2^64-1");
    expect_rc(memcached_increment(mc, "lm:n", 4, 2, &v), MEMCACHED_SUCCESS, "increment past 2^64");
    expect(v == 1, "increment wraps at 2^64");
    expect_rc(memcached_increment(mc, "lm:nnone", 8, 1, &v), MEMCACHED_NOTFOUND, "increment of a missing key");
    expect_rc(memcached_decrement(mc, "lm:nnone", 8, 1, &v), MEMCACHED_NOTFOUND, "decrement of a missing key");
    expect_rc(set("lm:text", "abc", 3, 0, 0), MEMCACHED_SUCCESS, "set lm:text");
    memcached_return_t rc = memcached_increment(mc, "lm:text", 7, 1, &v);
    ++checks;
    if (rc == MEMCACHED_SUCCESS) fail("increment of a non-numeric value succeeded");
    expect_value("lm:text", "abc", 3, 0);
}

static void touch_and_expiry(void) {
    expect_rc(set("lm:t", "t", 1, 1000, 0), MEMCACHED_SUCCESS, "set lm:t");
    expect_rc(memcached_touch(mc, "lm:t", 4, 2000), MEMCACHED_SUCCESS, "touch");
    expect_rc(memcached_touch(mc, "lm:tnone", 8, 10), MEMCACHED_NOTFOUND, "touch of a missing key");
    expect_value("lm:t", "t", 1, 0);
    expect_rc(memcached_touch(mc, "lm:t", 4, -1), MEMCACHED_SUCCESS, "touch -1");
    expect_value("lm:t", NULL, 0, 0);
    expect_rc(set("lm:neg", "n", 1, -1, 0), MEMCACHED_SUCCESS, "set with exptime -1");
    expect_value("lm:neg", NULL, 0, 0);
    // Exptime 1 has surely passed after 2.5 s (a slow machine only makes
    // it more so); exptime 1000 surely has not.
    expect_rc(set("lm:short", "s", 1, 1, 0), MEMCACHED_SUCCESS, "set with exptime 1");
    expect_rc(set("lm:long", "l", 1, 1000, 0), MEMCACHED_SUCCESS, "set with exptime 1000");
    struct timespec ts = {2, 500000000};
    nanosleep(&ts, NULL);
    expect_value("lm:short", NULL, 0, 0);
    expect_value("lm:long", "l", 1, 0);
}

static void noreply(void) {
    expect_rc(memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_NOREPLY, 1), MEMCACHED_SUCCESS, "noreply on");
    char key[32], val[32];
    for (int i = 0; i < 200; ++i) {
        snprintf(key, sizeof key, "lm:nr%d", i);
        int n = snprintf(val, sizeof val, "v%d", i);
        memcached_return_t rc = set(key, val, (size_t)n, 0, 0);
        expect(rc == MEMCACHED_SUCCESS || rc == MEMCACHED_BUFFERED, "noreply set");
    }
    memcached_delete(mc, "lm:nr0", 6, 0);
    memcached_add(mc, "lm:nr1", 6, "no", 2, 0, 0);  // exists: NOT_STORED, unsaid
    expect_rc(memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_NOREPLY, 0), MEMCACHED_SUCCESS, "noreply off");
    // The next replies on this connection are the next commands' own: the
    // server said nothing to the ones above.
    expect_value("lm:nr0", NULL, 0, 0);
    expect_value("lm:nr1", "v1", 2, 0);
    expect_value("lm:nr199", "v199", 4, 0);
}

static void many_keys(void) {
    // 10,000 keys with distinct contents of 1 to 300 bytes, all back intact
    // through mget (in batches: one command line per 500 keys).
    char key[32], val[320];
    for (int i = 0; i < MANY; ++i) {
        snprintf(key, sizeof key, "lm:many:%d", i);
        size_t n = 1 + (size_t)(i * 37) % 300;
        fill(val, n, (unsigned)i);
        expect_rc(set(key, val, n, 0, (uint32_t)i), MEMCACHED_SUCCESS, "set of one of 10,000 keys");
    }
    enum { batch = 500 };
    static char names[batch][32];
    const char* keys[batch];
    size_t lens[batch];
    int found = 0;
    for (int base = 0; base < MANY; base += batch) {
        for (int j = 0; j < batch; ++j) {
            lens[j] = (size_t)snprintf(names[j], sizeof names[j], "lm:many:%d", base + j);
            keys[j] = names[j];
        }
        expect_rc(memcached_mget(mc, keys, lens, batch), MEMCACHED_SUCCESS, "mget of 500 keys");
        memcached_return_t rc;
        memcached_result_st* r;
        while ((r = memcached_fetch_result(mc, NULL, &rc)) != NULL) {
            char name[32];
            size_t kn = memcached_result_key_length(r);
            expect(kn > 8 && kn < sizeof name, "one of 10,000 keys: a key of the wrong length");
            memcpy(name, memcached_result_key_value(r), kn);
            name[kn] = '\0';
            int i = atoi(name + 8);  // after "lm:many:"
            size_t n = 1 + (size_t)(i * 37) % 300;
            fill(val, n, (unsigned)i);
            expect(i >= base && i < base + batch && memcached_result_length(r) == n &&
                       memcached_result_flags(r) == (uint32_t)i && memcmp(memcached_result_value(r), val, n) == 0,
                   "one of 10,000 keys came back wrong");
            ++found;
            memcached_result_free(r);
        }
    }
    expect(found == MANY, "not all of 10,000 keys came back");
    printf("10000 keys round-tripped\n");
}

static void flush(void) {
    expect_rc(memcached_flush(mc, 0), MEMCACHED_SUCCESS, "flush");
    expect_value("lm:a", NULL, 0, 0);
    expect_value("lm:many:0", NULL, 0, 0);
    expect_rc(set("lm:a", "again", 5, 0, 0), MEMCACHED_SUCCESS, "set after flush");
    expect_value("lm:a", "again", 5, 0);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
        return 2;
    }
    mc = memcached_create(NULL);
    if (mc == NULL) fail("memcached_create");
    expect_rc(memcached_server_add(mc, argv[1], (in_port_t)atoi(argv[2])), MEMCACHED_SUCCESS, "server_add");
    expect_rc(memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SUPPORT_CAS, 1), MEMCACHED_SUCCESS, "cas on");
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 20000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, 20000000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_SND_TIMEOUT, 20000000);

    storage();
    sizes();
    mget();
    cas();
    arithmetic();
    touch_and_expiry();
    noreply();
    many_keys();
    flush();

    memcached_free(mc);
    printf("libmemcached_client: all %d checks passed\n", checks);
    return 0;
}
