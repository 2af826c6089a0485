// bench/harness/work.hpp — what the benchmarks' actors compute between and
// inside operations: random numbers (splitmix64) and a busy loop of a known
// cost (spin, calibrate_spin).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "harness.hpp"

namespace spindle::bench {

// splitmix64: fast, good enough, identical on every platform.
struct splitmix64 {
    std::uint64_t s;
    std::uint64_t next() noexcept {
        std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, range): the high 32 bits scaled (range < 2^32).
    std::uint32_t below(std::uint32_t range) noexcept {
        return static_cast<std::uint32_t>(((next() >> 32) * range) >> 32);
    }
    double unit_open() noexcept {  // uniform in (0, 1]
        return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53;
    }
};

// Work: an empty loop of n iterations.
__attribute__((noinline)) inline void spin(std::uint32_t n) noexcept {
    for (std::uint32_t i = 0; i < n; ++i) __asm__ volatile("");  // volatile: the loop must run n times
}

// The cost of one iteration of spin() in ns, measured now; says so on stderr
// as "<suite>: work loop: ...".
inline double calibrate_spin(const char* suite) {
    std::vector<double> per;
    constexpr std::uint32_t n = 4'000'000;
    for (int round = 0; round < 7; ++round) {
        double t0 = now_ns();
        spin(n);
        per.push_back((now_ns() - t0) / n);
    }
    std::sort(per.begin(), per.end());
    const double ns = per.front();  // the fastest round: the others lost the CPU for a while
    std::fprintf(stderr, "%s: work loop: %.3f ns per iteration\n", suite, ns);
    return ns;
}

// The same, once per run: a restart after a hang (harness.hpp) gets the
// first image's value, so that its work loops are the replayed ones'.
inline double calibrate_spin(harness& h, const char* suite) {
    return h.calibration("spin_ns", [suite] { return calibrate_spin(suite); });
}

}  // namespace spindle::bench
