#!/usr/bin/env bash
# Cross-compiles the AArch64 context switch and its clobber test, and runs
# the test under qemu-user when available.
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=aarch64-linux-gnu-g++
out=build/aarch64
mkdir -p "$out"
if ! command -v $CXX >/dev/null; then
  echo "aarch64: $CXX not found (install g++-aarch64-linux-gnu)" >&2; exit 1
fi
# GoogleTest is not available for the target; the test has a tiny main of
# its own when built with SPINDLE_NO_GTEST.
for opt in O0 O2 O3; do
  $CXX -std=c++20 -$opt -Wall -Wextra -Werror -static -Iinclude -DSPINDLE_NO_GTEST \
    tests/arch/switch_clobber_test.cpp src/memory/stack.cpp src/runtime/generator.cpp -o $out/switch_clobber_$opt -pthread
done
# The whole library must compile too, and link into an example.
lib_sources=$(find src -name '*.cpp' | sort)
objs=()
for src in $lib_sources examples/generator_hanoi.cpp; do
  obj="$out/$(echo "$src" | tr / _).o"
  $CXX -std=c++20 -O2 -Wall -Wextra -Werror -Iinclude -c "$src" -o "$obj"
  objs+=("$obj")
done
$CXX -static "${objs[@]}" -o $out/generator_hanoi -pthread
echo "aarch64: switch, library and clobber test compile at -O0/-O2/-O3"
if command -v qemu-aarch64 >/dev/null; then
  for opt in O0 O2 O3; do qemu-aarch64 $out/switch_clobber_$opt; done
  qemu-aarch64 $out/generator_hanoi | grep -q "disk 3: peg 1 -> peg 3"
  echo "aarch64: clobber test and generator example passed under qemu-user"
else
  echo "aarch64: qemu-aarch64 not found; compiled only"
fi
