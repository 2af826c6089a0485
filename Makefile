# spindle — the two commands a user needs:
#   make test    build (release) and run the unit tests
#   make bench   build (release) and run the quick benchmark suite, then
#                write bench/results/latest/report.md
# and, for contributors:
#   make check   make test + ASan/UBSan and TSan test builds + a hardened
#                Clang 19 build and its tests + the AArch64 cross builds
#                (GCC, Clang) with their tests under qemu-user + real
#                programs under the LD_PRELOAD library (preload-real)
#   make deps    install (root) or name (otherwise) every Debian package the
#                targets need (each target also installs its own set)
#
# Options: SUITE=switch (one suite of make bench), BENCH_MODE=--full,
#          JOBS=N (parallel build jobs).

SHELL := /bin/bash
JOBS ?= $(shell nproc)
SUITE ?=
BENCH_MODE ?=
# Debian's python3 has python3-matplotlib; a python3 earlier in PATH may not.
PYTHON := $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)

.PHONY: all deps deps-build deps-bench deps-check build test check bench debug-test asan tsan clang aarch64 clobber-mutations tools-test preload-real clean

all: test

# Everything any target needs (build, bench, check); the targets below each
# install only their own set.
deps:
	@scripts/deps.sh all
deps-build:
	@scripts/deps.sh build
deps-bench:
	@scripts/deps.sh bench
deps-check:
	@scripts/deps.sh check

# configure + build one preset: $(call build,preset)
define build
	cmake --preset $(1) >/dev/null
	cmake --build --preset $(1) -j $(JOBS)
endef

build: deps-build
	$(call build,release)

test: build
	ctest --preset release

debug-test: deps-build
	$(call build,debug)
	ctest --preset debug

asan: deps-check
	$(call build,asan)
	ctest --preset asan

tsan: deps-check
	$(call build,tsan)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --preset tsan

clang: deps-check
	$(call build,clang)
	ctest --preset clang

# The AArch64 cross builds (GCC and Clang 19, -mbranch-protection=standard)
# and their runtime tests under qemu-user (scripts/aarch64-check.sh).
aarch64: deps-check
	JOBS=$(JOBS) scripts/aarch64-check.sh

# The clobber test must fail when any one register is missing from the
# switch's clobber list (GCC and Clang 19, -O2 and -O3; about 2 minutes).
clobber-mutations: deps-check
	scripts/clobber-mutations.sh

tools-test: deps-check
	$(PYTHON) -m unittest tools/test_bench.py

# xz, zstd, python3, LevelDB and sort under libspindle_preload.so, then
# CPython's own threading tests, every SPINDLE_LOCK value (about 3 minutes).
preload-real: deps-check
	$(call build,release)
	scripts/preload-real-programs.sh build/release/preload/libspindle_preload.so

check: test asan tsan clang aarch64 clobber-mutations tools-test preload-real
	@echo "make check: all builds and tests passed"

bench: deps-bench
	$(call build,release)
	$(PYTHON) tools/bench.py --build-dir build/release --out bench/results/latest \
	  $(if $(SUITE),--suite $(SUITE)) $(BENCH_MODE)

clean:
	rm -rf build
