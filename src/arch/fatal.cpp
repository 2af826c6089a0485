// spindle::detail::fatal (include/spindle/arch/fatal.hpp).
#include <spindle/arch/fatal.hpp>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace spindle::detail {

void fatal(const char* fmt, ...) noexcept {
    // "spindle: " + message + "\n", built on the stack: no stdio stream (its
    // lock may be the very mutex that failed), no allocation.
    char buf[1024];
    constexpr char prefix[] = "spindle: ";
    constexpr std::size_t plen = sizeof prefix - 1;
    constexpr char cut[] = "...\n";
    std::memcpy(buf, prefix, plen);
    std::va_list ap;
    va_start(ap, fmt);
    const int n = std::vsnprintf(buf + plen, sizeof buf - plen, fmt, ap);
    va_end(ap);
    std::size_t len = plen;
    if (n > 0) len += static_cast<std::size_t>(n);
    if (len > sizeof buf - 2) {  // cut: end in "...\n" within the buffer
        len = sizeof buf - (sizeof cut - 1);
        std::memcpy(buf + len, cut, sizeof cut - 1);
        len += sizeof cut - 1;
    } else {
        buf[len++] = '\n';
    }
    const char* p = buf;
    while (len > 0) {
        const ssize_t w = ::write(STDERR_FILENO, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        len -= static_cast<std::size_t>(w);
    }
    std::abort();
}

}  // namespace spindle::detail
