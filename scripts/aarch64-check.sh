#!/usr/bin/env bash
# The AArch64 builds: Debian's cross GCC and Clang 19, both with
# -mbranch-protection=standard (the aarch64-gcc and aarch64-clang presets,
# cmake/toolchains/). Each builds the library, the tests (Debian's GoogleTest,
# built from /usr/src/googletest for the target) and the examples, then runs
# through ctest, under qemu-user (the toolchains' CMAKE_CROSSCOMPILING_EMULATOR):
#   - the code-generation checks (arch.tls_codegen, arch.cf_protection), on
#     the host with the cross compiler;
#   - the switch, generator, fiber, migration (2-8 workers), pinning,
#     backtrace, landing-pad, stack, CES mutex and TCLock tests;
#   - the fiber I/O tests, on epoll (the cross builds have no target
#     liburing, so spindle::io is built with epoll alone), and spindle-kv's
#     protocol and store tests;
#   - the examples end to end, as a user would run them (example.*: exit
#     status 0 and the output a user should see).
# Nothing here runs a program itself: CMake and ctest do it all, so
#   cmake --preset aarch64-gcc && cmake --build --preset aarch64-gcc &&
#   ctest --preset aarch64-gcc
# is the same check by hand.
#
# Left out under qemu (testPresets "aarch64" in CMakePresets.json):
#   - death tests: gtest re-executes /proc/self/exe, which is qemu itself;
#   - Stack.DeferringThreadPoolsABurstAndTrimsItLater and
#     Stack.HundredThousandLiveSmallStacks: they read the kernel's view of
#     mappings (mincore, VMA counts), which qemu-user's own mmap emulation
#     does not give back as Linux does.
# Two TCLock tests wait to see a thread in a futex wait through
# /proc/self/task/<tid>/syscall, which under qemu-user shows the host's
# system call numbers: they find that out and skip.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
if ! command -v qemu-aarch64 >/dev/null; then
  echo "aarch64: qemu-aarch64 not found (install qemu-user)" >&2; exit 1
fi
for preset in aarch64-gcc aarch64-clang; do
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  ctest --preset "$preset"
  echo "aarch64: $preset built, tested under qemu-user"
done
