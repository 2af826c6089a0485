// spindle/arch/fatal.hpp — the one way spindle stops a program. Internal.
//
// fatal(fmt, ...) writes "spindle: <message>\n" to standard error in one
// write(2) and calls abort(). Every layer uses it: the runtime, the sync
// primitives, the thread locks and the LD_PRELOAD library. So it takes no
// lock and allocates nothing (vsnprintf into a buffer on the stack, then the
// system call): it is safe inside a pthread_mutex_lock that the preload
// library replaced, and in a thread whose allocator is broken. A message
// longer than the buffer (1 KiB) is cut, and ends in "...".
//
// How messages read (tests match them, so keep to it):
//   misuse of an object   "<type> <address>: <what>"
//                         spindle::mutex 0x7f..: unlock() by a caller that does not hold it
//                         generator 12: value() before the first next()
//   a fiber or thread     a sentence naming it and what to do instead
//                         fiber 7 called join() on itself; it would wait forever
// The "spindle: " prefix is fatal's; callers do not write it.
#pragma once

#include <spindle/arch/config.hpp>

namespace spindle::detail {

[[noreturn]] SPINDLE_COLD void fatal(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace spindle::detail
