// spindle/memory/detail/guarded_mapping.hpp — an anonymous mapping whose
// lowest page is a guard: the fiber stacks, the per-thread signal stacks
// (memory/stack.hpp) and the TCLocks' ephemeral stacks (src/locks/tclock.cpp)
// are all one.
//
//     guarded_mapping m = map_guarded(size);   // size: a multiple of page_size()
//     if (m.base == nullptr) report(m.error, m.guard_failed);
//     usable: [m.base + page_size(), m.base + size)
//     ::munmap(m.base, size);
//
// The mapping is MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
// readable and writable: no commit charge, pages backed once touched. The
// guard page is made with madvise(MADV_GUARD_INSTALL) (Linux >= 6.13: the
// mapping stays one VMA) where the kernel takes that advice, else with
// mprotect(PROT_NONE) (two VMAs); which works is decided by the first guard
// of the process and remembered (guard_method_in_use(); the first guard
// region is checked to really fault: qemu-user accepts the advice and
// ignores it). memory/stack.hpp says why the VMA count matters.
//
// No exceptions, no allocation, errno left as it was: the thread locks
// (spindle_locks, which also goes into the preload library) call it from a
// thread about to wait. Its part of spindle_locks is
// src/memory/guarded_mapping.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spindle::detail {

// How guard pages are made in this process (decided by the first guard).
enum class guard_method : std::uint8_t {
    unknown = 0,       // no guard made yet
    guard_region = 1,  // madvise(MADV_GUARD_INSTALL): no extra VMA
    mprotect = 2,      // mprotect(PROT_NONE): one extra VMA per mapping
};
guard_method guard_method_in_use() noexcept;

// The page size (glibc answers from the auxiliary vector: no system call).
std::size_t page_size() noexcept;

struct guarded_mapping {
    std::byte* base = nullptr;  // the mapping, guard page first; null: failed
    int error = 0;              // when base is null: the errno value of the failed call
    bool guard_failed = false;  // when base is null: the guard failed, not the mmap (nothing stays mapped)
};

// Maps `size` bytes (a multiple of page_size(), more than one page) with
// the lowest page a guard. Unmap with munmap(base, size).
guarded_mapping map_guarded(std::size_t size) noexcept;

}  // namespace spindle::detail
