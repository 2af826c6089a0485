// bench/harness/fail.hpp — fail(), what every benchmark program and the
// harness's helpers do with an error they cannot go on from: say so, as
// "<program>: <message>" on stderr, and exit with status 1.
#pragma once

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace spindle::bench {

// Prints "<program>: <message>" and exits. _Exit: also used in forked
// children and inside fibers, where running static destructors (Boost's
// scheduler registry) could hang.
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "%s: ", program_invocation_short_name);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    std::fflush(nullptr);
    std::_Exit(1);
}

}  // namespace spindle::bench
