// spindle/io/wait.hpp — wait until any non-blocking descriptor is readable
// or writable, so that other libraries' sockets (a database client's, say)
// can be driven from fibers: try the library's non-blocking call; on
// EAGAIN, wait_readable / wait_writable, then try again.
//
// Returns {} once the descriptor is ready (or has an error or a hang-up
// pending, which the next call will report), timed_out or
// operation_canceled as limits says (io/result.hpp). The descriptor stays
// the caller's: nothing is registered with it after the call returns.
#pragma once

#include <system_error>

#include <spindle/io/result.hpp>

namespace spindle::io {

std::error_code wait_readable(int fd, limits l = {});
std::error_code wait_writable(int fd, limits l = {});

}  // namespace spindle::io
