// spindle/io.hpp — fiber I/O: sockets, files, readiness waits, blocking().
// Link spindle::io. See docs/io.md.
#pragma once

#include <spindle/io/blocking.hpp>
#include <spindle/io/file.hpp>
#include <spindle/io/result.hpp>
#include <spindle/io/socket.hpp>
#include <spindle/io/wait.hpp>
