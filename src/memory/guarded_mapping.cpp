// src/memory/guarded_mapping.cpp — an anonymous mapping with a guard page
// (include/spindle/memory/detail/guarded_mapping.hpp). Part of spindle_locks:
// the TCLocks map their ephemeral stacks with it, and the fiber stacks of
// src/memory/stack.cpp are the same mapping.
#include <spindle/memory/detail/guarded_mapping.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

// Guard regions (Linux 6.13). Old headers do not have the constant; the
// kernel answers EINVAL if it does not know the advice, and we fall back.
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

namespace spindle::detail {
namespace {

// The page size, once read (relaxed: every thread computes the same value;
// a plain atomic rather than a function-local static, so that the SIGSEGV
// handler of memory/stack.cpp may call it: no guard variable).
std::atomic<std::size_t> g_page_size{0};

// Which guard method works. Relaxed everywhere: it is a hint that saves a
// failing madvise per stack; every thread that reads `unknown` or a stale
// value simply tries madvise first and stays correct.
std::atomic<guard_method> g_guard_method{guard_method::unknown};

// Whether the guard region just installed at `p` really faults. Some
// environments accept advice they do not implement: qemu-user answers 0 to
// every madvise it does not know, and a stack would then have no guard at all.
// A kernel copying from a guard region fails with EFAULT, so we ask it to copy
// one byte into a pipe. Done once per process.
bool guard_region_faults(void* p) noexcept {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return true;  // cannot tell (no fds left): trust the kernel
    const ssize_t n = ::write(fds[1], p, 1);
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return n < 0 && err == EFAULT;
}

// Makes [p, p + bytes) a guard. Returns 0 or an errno value.
int install_guard(void* p, std::size_t bytes) noexcept {
    const guard_method known = g_guard_method.load(std::memory_order_relaxed);
    if (known != guard_method::mprotect) {
        int err = 0;
        // The kernel may ask us to retry (EAGAIN) when it races with page
        // faults, and EINTR on a pending signal; both are transient.
        for (int attempt = 0; attempt < 8; ++attempt) {
            if (::madvise(p, bytes, MADV_GUARD_INSTALL) == 0) {
                if (known == guard_method::guard_region) return 0;
                if (guard_region_faults(p)) {
                    g_guard_method.store(guard_method::guard_region, std::memory_order_relaxed);
                    return 0;
                }
                err = EINVAL;  // accepted but ignored: treat as unsupported
                break;
            }
            err = errno;
            if (err != EAGAIN && err != EINTR) break;
        }
        if (err != EINVAL) return err;
        // EINVAL: the kernel does not know guard regions (before 6.13), or
        // refuses them for this mapping (mlock'ed). Remember only the first
        // kind of answer: if guard regions ever worked they work in general.
        if (known == guard_method::unknown) g_guard_method.store(guard_method::mprotect, std::memory_order_relaxed);
    }
    if (::mprotect(p, bytes, PROT_NONE) != 0) return errno;
    return 0;
}

}  // namespace

std::size_t page_size() noexcept {
    std::size_t size = g_page_size.load(std::memory_order_relaxed);
    if (size == 0) [[unlikely]] {
        size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
        g_page_size.store(size, std::memory_order_relaxed);
    }
    return size;
}

guard_method guard_method_in_use() noexcept { return g_guard_method.load(std::memory_order_relaxed); }

guarded_mapping map_guarded(std::size_t size) noexcept {
    const int saved_errno = errno;  // left as it was (see the header)
    guarded_mapping m;
    void* mem = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                       -1, 0);
    if (mem == MAP_FAILED) {
        m.error = errno;
    } else if (const int err = install_guard(mem, page_size()); err != 0) {
        ::munmap(mem, size);
        m.error = err;
        m.guard_failed = true;
    } else {
        m.base = static_cast<std::byte*>(mem);
    }
    errno = saved_errno;
    return m;
}

}  // namespace spindle::detail
