// A recursion deep enough to overflow any fiber or generator stack, for the
// stack-overflow death tests.
#pragma once

namespace spindle::test {

// Each frame holds 512 bytes; the use after the call rules out a tail call,
// the volatile limit an infinite-recursion warning.
inline volatile int g_overflow_depth_limit = 1 << 30;
__attribute__((noinline)) inline int dig(int depth) {
    volatile char frame[512];
    frame[0] = static_cast<char>(depth);
    if (depth >= g_overflow_depth_limit) return frame[0];
    return dig(depth + 1) + frame[0];
}

}  // namespace spindle::test
