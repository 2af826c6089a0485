#!/usr/bin/env bash
# Installs (as root) or names (otherwise) the Debian packages spindle needs.
# Usage: scripts/deps.sh [build|bench|check|all]   (all: the union, `make deps`)
set -euo pipefail
what=${1:-build}

# liburing-dev: spindle's io_uring back end (spindle::io), the io suite's
# load generator and C server (bench/io). wrk: the HTTP example's test.
# libmemcached-dev, libmemcached-tools (memccapable) and python3-pymemcache:
# real memcached clients that spindle-kv's tests run against it (apps/kv).
pkgs=(cmake ninja-build g++ pkg-config libgtest-dev libboost-context-dev libboost-fiber-dev libleveldb-dev
      liburing-dev wrk libmemcached-dev libmemcached-tools python3-pymemcache)
# strace: the io suite's system calls per round trip. Go and cargo (its Go
# and tokio servers) are not Debian packages of the right age: the suite
# records those variants as skipped where they are missing.
# memcached and memaslap (libmemcached-tools): the kv suite's anchor and client.
bench_pkgs=(python3 python3-matplotlib strace memcached libmemcached-tools)
# googletest: the GoogleTest sources (/usr/src/googletest) that the AArch64
# cross builds compile for the target (libgtest-dev depends on it; named
# because tests/CMakeLists.txt uses it directly).
check_pkgs=(python3 python3-matplotlib clang-19 libclang-rt-19-dev g++-aarch64-linux-gnu qemu-user
            googletest
            xz-utils zstd  # xz, zstd: scripts/preload-real-programs.sh
            gdb)  # tests/tools/gdb_fibers_check.cmake
case $what in
  build) ;;
  bench) pkgs+=("${bench_pkgs[@]}") ;;
  check) pkgs+=("${check_pkgs[@]}") ;;
  all) pkgs+=("${bench_pkgs[@]}" "${check_pkgs[@]}") ;;
  *) echo "deps.sh: unknown set '$what' (build, bench, check or all)" >&2; exit 2 ;;
esac

# Installs (as root) or names the packages of "$@" that are not installed.
updated=0
ensure() {
  local missing=() p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$p")
    fi
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if [[ $(id -u) -eq 0 ]]; then
    echo "spindle: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    [[ $updated -eq 1 ]] || apt-get update -qq >/dev/null
    updated=1
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "spindle: missing Debian packages. Install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
}
ensure "${pkgs[@]}"

# CPython's own threading tests (scripts/preload-real-programs.sh, which
# skips them when they are missing) come in a package named after the
# python3 the system has, known once it is installed. Best effort: a
# machine without it, or whose sources lack it, still builds and tests.
if [[ ($what == check || $what == all) && -x /usr/bin/python3 ]]; then
  minor=$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])')
  p="libpython3.$minor-testsuite"
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    if [[ $(id -u) -eq 0 ]]; then
      ensure "$p" || echo "spindle: could not install $p; the preload check skips CPython's test suite" >&2
    else
      echo "spindle: optional, for CPython's own threading tests under the preload library:" >&2
      echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $p" >&2
    fi
  fi
fi
