#!/usr/bin/env bash
# Proves that tests/arch/switch_clobber_test.cpp would catch a missing clobber
# in the x86-64 switch: for each register the switch lists as clobbered (and
# for "memory"), builds the test with that one entry taken out of the
# switch's list and runs it. Every such build must FAIL its run; a mutant
# that passes is a register the test cannot see, and this script fails.
#
# The mutant header is a copy of include/spindle/arch/x86_64_sysv.hpp, placed
# first on the include path, with the entry replaced by a second "cc" (a
# repeated clobber is accepted by both compilers). The test's own register
# scrambler spells out its list and is not affected. -O2 and -O3: at -O0
# every value lives in memory and no register clobber can be missed.
#
# Not for clang: the "memory" mutant. Clang treats a volatile asm as reading
# and writing memory whatever its clobbers say (it reloads a global the asm
# does not name; GCC forwards the stored value), so no test can see it
# missing there; it matters, and is caught, with GCC.
#
# The test is built with Debian's GoogleTest (libgtest-dev, through
# pkg-config), as in the CMake build.
#
# Usage: scripts/clobber-mutations.sh [compiler ...]   (default: g++, and
# clang++-19 when installed). About two seconds per mutant, nproc at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(uname -m) == x86_64 ]] || { echo "clobber-mutations: x86-64 only" >&2; exit 0; }

compilers=("$@")
if [[ ${#compilers[@]} -eq 0 ]]; then
  compilers=(g++)
  command -v clang++-19 >/dev/null && compilers+=(clang++-19)
fi
regs=(rbx rcx rdx r8 r9 r10 r11 r12 r13 r14 r15
      xmm0 xmm1 xmm2 xmm3 xmm4 xmm5 xmm6 xmm7 xmm8 xmm9 xmm10 xmm11 xmm12 xmm13 xmm14 xmm15
      memory)
if ! gtest=$(pkg-config --cflags --libs gtest_main); then
  echo "clobber-mutations: GoogleTest not found by pkg-config (install libgtest-dev: make deps)" >&2
  exit 1
fi
out=build/clobber-mutations
rm -rf "$out"
mkdir -p "$out"

# One mutant: $1 compiler, $2 register ("none": the unmutated header, which
# must pass), $3 optimization level. Prints "caught", "missed ..." when the
# test passed anyway, or "error: ..." when the mutant could not be built (a
# build failure is no evidence either way).
mutant() {
  local cxx=$1 reg=$2 opt=$3 tag
  tag=$(basename "$cxx")
  local dir="$out/$tag-$reg-$opt"
  mkdir -p "$dir/include/spindle/arch"
  sed "s/\"$reg\"/\"cc\"/g" include/spindle/arch/x86_64_sysv.hpp > "$dir/include/spindle/arch/x86_64_sysv.hpp"
  if [[ $reg != none ]] && cmp -s include/spindle/arch/x86_64_sysv.hpp "$dir/include/spindle/arch/x86_64_sysv.hpp"; then
    echo "error: \"$reg\" is not in the switch's clobber list"
    return
  fi
  # ($gtest unquoted: pkg-config's flags, one word each)
  if ! "$cxx" -std=c++20 -"$opt" -I"$dir/include" -Iinclude \
      tests/arch/switch_clobber_test.cpp "$out/$tag-stack.o" "$out/$tag-guarded_mapping.o" "$out/$tag-generator.o" \
      "$out/$tag-context.o" "$out/$tag-fatal.o" -o "$dir/switch_clobber" \
      $gtest -pthread >"$dir/build.log" 2>&1; then
    echo "error: $tag -$opt without \"$reg\" did not build (see $dir/build.log)"
    return
  fi
  if [[ $reg == none ]]; then
    # The baseline: the same build with the real header must pass.
    if { timeout 20 "$dir/switch_clobber" >"$dir/run.log" 2>&1; } 2>/dev/null; then
      echo "baseline"
    else
      echo "error: $tag -$opt with the real header failed (see $dir/run.log)"
    fi
    return
  fi
  # A mutant may fail a check, crash, or hang (a corrupted loop counter):
  # each is a catch. A correct build runs in milliseconds. The braces keep
  # the shell's own "Segmentation fault" line out of the output.
  if { timeout 20 "$dir/switch_clobber" >"$dir/run.log" 2>&1; } 2>/dev/null; then
    echo "missed: $tag -$opt without \"$reg\""
  else
    echo "caught"
  fi
}
export -f mutant
export out gtest

jobs=()
for cxx in "${compilers[@]}"; do
  tag=$(basename "$cxx")
  # The library parts the test needs (stacks and their guarded mappings, the
  # generator's entry, the switch's thread-locals, fatal()), built once per
  # compiler with the real header: only the test's inlined switches are
  # mutated.
  for src in src/memory/stack.cpp src/memory/guarded_mapping.cpp src/runtime/generator.cpp \
             src/arch/context.cpp src/arch/fatal.cpp; do
    "$cxx" -std=c++20 -O2 -Iinclude -c "$src" -o "$out/$tag-$(basename "$src" .cpp).o"
  done
  for opt in O2 O3; do jobs+=("$cxx none $opt"); done
  for reg in "${regs[@]}"; do
    [[ $reg == memory && $cxx == clang* ]] && continue
    for opt in O2 O3; do jobs+=("$cxx $reg $opt"); done
  done
done

results=$(printf '%s\n' "${jobs[@]}" | xargs -P "$(nproc)" -L 1 bash -c 'mutant "$0" "$1" "$2"')
if grep -q -e '^missed' -e '^error' <<<"$results"; then
  echo "clobber-mutations: the clobber test passed with a clobber removed:" >&2
  grep -e '^missed' -e '^error' <<<"$results" | sed 's/^/  /' >&2
  exit 1
fi
echo "clobber-mutations: the real header passes ($(grep -c '^baseline' <<<"$results") builds); all" \
  "$(grep -c '^caught' <<<"$results") mutants of the switch's clobber list caught"
