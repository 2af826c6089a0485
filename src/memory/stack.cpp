// src/memory/stack.cpp — mapping, pooling and overflow reporting of stacks.
//
// The design is in include/spindle/memory/stack.hpp. This file has six parts:
//
//   1. the overflow registry: lock-free for its reader (the SIGSEGV handler),
//      a mutex for its writers (acquire/release of a fresh mapping);
//   2. mapping a stack: a guarded mapping (memory/detail/guarded_mapping.hpp),
//      registry slot;
//   3. the per-thread pool and the madvise release;
//   4. the SIGSEGV handler and the per-thread sigaltstack;
//   5. SPINDLE_STACK_SIZE;
//   6. the registry's description for debuggers.
//
// Everything the handler touches is either a lock-free atomic, memory that is
// never freed, or `g_previous_segv`, which is written once before the handler
// is installed.
#include <spindle/memory/stack.hpp>
#include <spindle/memory/detail/guarded_mapping.hpp>

#include <spindle/arch/context.hpp>

#include <spindle/arch/config.hpp>

#include <signal.h>
#include <sys/auxv.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>
#include <algorithm>

#if SPINDLE_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace spindle::detail {
namespace {

// ---------------------------------------------------------------------------
// Helpers

// Objects that must outlive every thread_local and static destructor (the
// registry is read by a signal handler until the process is gone, and
// released by threads still running at exit). Constant-initialized, never
// destroyed.
template <class T>
union no_destroy {
    T value;
    constexpr no_destroy() : value() {}
    ~no_destroy() {}
};

constexpr std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }

std::string errno_name(int err) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    if (const char* name = ::strerrorname_np(err)) return name;
#endif
    return "errno " + std::to_string(err);
}

// `what` failed for a stack mapping of `bytes` bytes with `err`.
[[noreturn]] SPINDLE_COLD void throw_map_error(int err, const char* what, std::size_t bytes) {
    std::string msg = "spindle: ";
    msg += what;
    msg += " for a ";
    msg += std::to_string(bytes);
    msg += "-byte stack mapping failed with ";
    msg += errno_name(err);
    if (err == ENOMEM)
        msg += " (out of address space, memory, or memory mappings: the process may have "
               "reached vm.max_map_count, see /proc/sys/vm/max_map_count and raise it with "
               "`sysctl -w vm.max_map_count=<n>`, or use smaller or fewer stacks)";
    throw std::system_error(err, std::generic_category(), msg);
}

// ---------------------------------------------------------------------------
// 1. Overflow registry
//
// Slot life cycle (transitions under g_registry.mutex, except owner_*):
//
//   free:        guard_base == 0, owner_id == index of the next free slot
//   registered:  guard_base != 0, usable/requested/owner_* describe the stack
//                (its guard is one page, page_size())
//
//   register:    fill usable, requested, owner_*    (relaxed)
//                guard_base = base                   (release; pairs with the
//                                                     handler's acquire load)
//   unregister:  guard_base = 0                      (relaxed: the handler then
//                                                     skips the slot; done before
//                                                     the munmap)
//
// A slot stays registered while its stack sits in a pool: nothing runs there,
// so it cannot produce a hit, and reuse from the pool costs no lock.

struct registry_slot {
    std::atomic<std::uintptr_t> guard_base{0};  // 0: slot free
    std::atomic<std::size_t> usable{0};         // bytes from guard end to top
    std::atomic<std::uint64_t> owner_id{0};     // fiber/generator id; free-list link when free
    // Bytes its current user asked for (acquire_stack's size), which the
    // overflow message gives; 0 when not known or 4 GiB and above (the
    // message then gives `usable`).
    std::atomic<std::uint32_t> requested{0};
    std::atomic<stack_owner> owner_kind{stack_owner::none};
    // Releases of this stack so far; drop_cold_pages looks at residency only
    // on some of them. Touched only by the thread releasing the stack, which
    // owns it then: relaxed.
    std::atomic<std::uint16_t> releases{0};
};
static_assert(sizeof(registry_slot) == 32, "slots are packed two per cache line");
// The handler reads these; only lock-free atomics are async-signal-safe.
static_assert(std::atomic<std::uintptr_t>::is_always_lock_free);
static_assert(std::atomic<std::size_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<stack_owner>::is_always_lock_free);
static_assert(std::atomic<registry_slot*>::is_always_lock_free);

constexpr std::uint32_t slots_per_chunk = 4096;  // 128 KiB per chunk
constexpr std::uint32_t max_chunks = 4096;       // 16 Mi stacks; the table is 32 KiB
constexpr std::uint32_t no_slot = UINT32_MAX;    // end of the free list
static_assert(std::uint64_t{slots_per_chunk} * max_chunks < no_slot, "slot indices must not reach no_slot");

struct registry {
    // chunks[i] covers slots [i * slots_per_chunk, (i + 1) * slots_per_chunk).
    // Stored with release after the chunk is mapped (zeroed = all slots free);
    // never cleared, never unmapped.
    std::atomic<registry_slot*> chunks[max_chunks];
    // Slots [0, bound) have been handed out at least once. Store (release) comes
    // after the chunk pointer store, so a handler that loads bound (acquire)
    // and then a chunk pointer below it finds the chunk published.
    std::atomic<std::uint32_t> bound{0};
    std::mutex mutex;                  // serializes slot allocation and freeing
    std::uint32_t free_head = no_slot; // guarded by mutex
};
constinit no_destroy<registry> g_registry;

registry_slot& slot_at(std::uint32_t index) noexcept {
    // Relaxed is enough: only called for slots this thread allocated or was
    // handed through a stack_region, which was published to it together with
    // the chunk (the acquire/release that passed the region along).
    return g_registry.value.chunks[index / slots_per_chunk].load(std::memory_order_relaxed)[index % slots_per_chunk];
}

std::uint32_t register_stack(std::byte* guard_base, std::size_t usable) {
    registry& r = g_registry.value;
    std::uint32_t index;
    {
        std::lock_guard<std::mutex> lock(r.mutex);
        if (r.free_head != no_slot) {
            index = r.free_head;
            r.free_head = static_cast<std::uint32_t>(slot_at(index).owner_id.load(std::memory_order_relaxed));
        } else {
            index = r.bound.load(std::memory_order_relaxed);  // only written under the mutex
            const std::uint32_t chunk = index / slots_per_chunk;
            if (chunk >= max_chunks) {
                const std::uint64_t limit = std::uint64_t{slots_per_chunk} * max_chunks;
                throw std::system_error(ENOMEM, std::generic_category(),
                                        "spindle: more than " + std::to_string(limit) + " stacks are live at once");
            }
            if (r.chunks[chunk].load(std::memory_order_relaxed) == nullptr) {
                const std::size_t bytes = sizeof(registry_slot) * slots_per_chunk;
                void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (mem == MAP_FAILED) throw_map_error(errno, "mmap of the stack registry", bytes);
                // Fresh anonymous memory is zero, which is what the slots'
                // constructors write; construct them anyway to start their
                // lifetime.
                auto* slots = static_cast<registry_slot*>(mem);
                for (std::uint32_t i = 0; i < slots_per_chunk; ++i) new (&slots[i]) registry_slot;
                // Pairs with the handler's acquire load of chunks[chunk].
                r.chunks[chunk].store(slots, std::memory_order_release);
            }
            // Pairs with the handler's acquire load of bound: the chunk pointer
            // stored above is visible to whoever sees index < bound.
            r.bound.store(index + 1, std::memory_order_release);
        }
    }
    registry_slot& s = slot_at(index);
    s.usable.store(usable, std::memory_order_relaxed);
    s.requested.store(0, std::memory_order_relaxed);
    s.owner_kind.store(stack_owner::none, std::memory_order_relaxed);
    s.owner_id.store(0, std::memory_order_relaxed);
    // Pairs with the handler's acquire load: a handler that sees the base sees
    // the fields above.
    s.guard_base.store(reinterpret_cast<std::uintptr_t>(guard_base), std::memory_order_release);
    return index;
}

void unregister_stack(std::uint32_t index) noexcept {
    registry& r = g_registry.value;
    registry_slot& s = slot_at(index);
    // Relaxed: a handler that still reads the old base can at worst report a
    // stack that is going away; the munmap that follows is a syscall, after
    // which no fault can come from this range as *this* stack.
    s.guard_base.store(0, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(r.mutex);
    s.owner_id.store(r.free_head, std::memory_order_relaxed);  // free-list link (slot is free now)
    r.free_head = index;
}

// ---------------------------------------------------------------------------
// 2. Mapping a stack

// Fresh mapping of `map_size` bytes with its guard and registry slot. `top`
// and `usable` are filled in by the caller.
stack_region map_stack(std::size_t map_size) {
    const guarded_mapping m = map_guarded(map_size);
    if (m.base == nullptr) throw_map_error(m.error, m.guard_failed ? "installing the guard page" : "mmap", map_size);
    std::byte* const base = m.base;
    void* const mem = base;
    stack_region r;
    r.map_base = base;
    r.map_size = map_size;
    try {
        r.slot = register_stack(base, 0);
    } catch (...) {
        ::munmap(mem, map_size);
        throw;
    }
    return r;
}

void unmap_stack(const stack_region& s) noexcept {
    unregister_stack(s.slot);  // before the munmap: see the slot life cycle
#if SPINDLE_ASAN
    // Frames of a fiber that died on this stack may still be poisoned in
    // ASan's shadow. The shadow outlives the mapping: whatever the kernel
    // maps here next (another thread's stack and TLS) must not inherit it.
    __asan_unpoison_memory_region(s.map_base + page_size(), s.map_size - page_size());
#endif
    ::munmap(s.map_base, s.map_size);
}

// Per-thread xorshift64 (Marsaglia's 13/7/17 triple, full period), seeded on
// first use from the thread's TLS address and the clock through splitmix64.
// Not a secure random source; it only has to spread stacks over cache sets.
constinit thread_local std::uint64_t t_rng_state = 0;

std::uint64_t next_random() noexcept {
    std::uint64_t x = t_rng_state;
    if (x == 0) {
        timespec ts{};
        ::clock_gettime(CLOCK_MONOTONIC, &ts);
        const std::uint64_t now_ns =
            static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
        std::uint64_t z = reinterpret_cast<std::uintptr_t>(&t_rng_state) ^ now_ns;
        z += 0x9e3779b97f4a7c15u;  // splitmix64 finalizer
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        x = (z ^ (z >> 31)) | 1;  // xorshift must not start at 0
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t_rng_state = x;
    return x;
}

// Bytes between `top` and the end of the mapping: [0, stack_start_jitter) in
// steps of stack_top_alignment.
std::size_t random_start_gap() noexcept {
    constexpr std::uint64_t steps = stack_start_jitter / stack_top_alignment;  // 32
    static_assert((steps & (steps - 1)) == 0, "a power of two keeps the draw unbiased");
    return static_cast<std::size_t>((next_random() >> 32) % steps) * stack_top_alignment;
}

// Chooses a new random top for `s` and records its usable size.
void place_top(stack_region& s) noexcept {
    const std::size_t page = page_size();
    s.top = s.map_base + s.map_size - random_start_gap();
    s.usable = static_cast<std::size_t>(s.top - (s.map_base + page));
    slot_at(s.slot).usable.store(s.usable, std::memory_order_relaxed);  // read by the handler of this thread
#if SPINDLE_ASAN
    // A fiber that died on this stack may have left its frames' redzones
    // poisoned; the next one must start clean.
    __asan_unpoison_memory_region(s.map_base + page, s.map_size - page);
#endif
}

// ---------------------------------------------------------------------------
// 3. Per-thread pool

// Gives the kernel back the pages of a stack below its hot window, if the
// stack ever went that deep (the mapping stays; the pages read as zero again).
//
// The residency check is a system call (about a microsecond here), which
// would dominate the create/destroy cycle of a short-lived generator or
// fiber. So it runs on the first release of each stack and then on every
// stack_residency_check_period-th one: a stack that goes deep and is then
// reused shallowly keeps its deep pages for at most that many reuses, and the
// pool bounds how many such stacks a thread keeps anyway.
void drop_cold_pages(const stack_region& s) noexcept {
    const std::size_t page = page_size();
    if (s.usable <= stack_hot_window + page) return;
    std::atomic<std::uint16_t>& releases = slot_at(s.slot).releases;
    const std::uint16_t n = releases.load(std::memory_order_relaxed);
    releases.store(static_cast<std::uint16_t>(n + 1), std::memory_order_relaxed);
    if (n % stack_residency_check_period != 0) return;
    std::byte* const guard_end = s.map_base + page;
    const auto cold_end_addr = (reinterpret_cast<std::uintptr_t>(s.top) - stack_hot_window) & ~(page - 1);
    auto* const cold_end = reinterpret_cast<std::byte*>(cold_end_addr);
    if (cold_end <= guard_end) return;
    // Stacks grow down contiguously: if the page right below the hot window
    // is resident, the stack went at least that deep at some point.
    unsigned char resident = 0;
    if (::mincore(cold_end - page, page, &resident) != 0 || (resident & 1) == 0) return;
    ::madvise(guard_end, static_cast<std::size_t>(cold_end - guard_end), MADV_DONTNEED);
}

// Lifetime of this thread's pool. Trivially destructible, so it can be read
// at any point of thread exit, also after t_pool was destroyed.
enum class pool_state : std::uint8_t { unborn, alive, dead };
constinit thread_local pool_state t_pool_state = pool_state::unborn;

// Worker threads pool a burst of releases beyond stack_pool_capacity and
// unmap the surplus when they run out of work (trim_stack_pool). A munmap of
// a stack costs a TLB shootdown IPI to every other CPU running this process:
// several microseconds, and it interrupts the other workers too. Done inline
// for each of thousands of fibers that end (or are joined) in a burst, it
// leaves the other workers idle at the end of the burst. Set per thread by
// defer_stack_pool_trim().
constinit thread_local bool t_pool_deferred = false;
// Stacks pooled beyond stack_pool_capacity, summed over all threads; at most
// stack_pool_surplus_max. Relaxed: a bound, not synchronization.
std::atomic<std::size_t> g_pool_surplus{0};

struct stack_pool {
    // [0, size) hold pooled stacks, oldest first. Up to stack_pool_capacity
    // entries, plus a surplus on threads that trim later (see above).
    std::vector<stack_region> entries;

    stack_pool() noexcept { t_pool_state = pool_state::alive; }
    ~stack_pool() {
        t_pool_state = pool_state::dead;  // releases from later destructors unmap directly
        for (auto& e : entries) unmap_stack(e);
        set_size(0);
    }
    stack_pool(const stack_pool&) = delete;
    stack_pool& operator=(const stack_pool&) = delete;

    static std::size_t surplus_of(std::size_t n) noexcept {
        return n > stack_pool_capacity ? n - stack_pool_capacity : 0;
    }
    // Shrinks entries to n (n <= size) and keeps g_pool_surplus in step.
    void set_size(std::size_t n) noexcept {
        std::size_t before = surplus_of(entries.size()), after = surplus_of(n);
        entries.resize(n);
        if (before != after) g_pool_surplus.fetch_sub(before - after, std::memory_order_relaxed);
    }

    // Most recently pooled stack of this mapping size (its top is warmest).
    bool take(std::size_t map_size, stack_region& out) noexcept {
        for (std::size_t i = entries.size(); i-- > 0;) {
            if (entries[i].map_size != map_size) continue;
            out = entries[i];
            for (std::size_t j = i + 1; j < entries.size(); ++j) entries[j - 1] = entries[j];
            set_size(entries.size() - 1);
            return true;
        }
        return false;
    }
    // Pools `s`. When the pool is full the oldest (coldest) stack makes room:
    // it is returned in `evicted` for the caller to unmap. A deferring thread
    // may go past stack_pool_capacity while the process-wide surplus allows.
    bool put(const stack_region& s, stack_region& evicted) noexcept {
        std::size_t n = entries.size();
        bool over = n >= stack_pool_capacity;
        if (over && t_pool_deferred &&
            g_pool_surplus.fetch_add(1, std::memory_order_relaxed) < stack_pool_surplus_max) {  // a bound, orders nothing
            if (push(s)) return false;
            g_pool_surplus.fetch_sub(1, std::memory_order_relaxed);  // give the reservation back
            evicted = s;
            return true;
        }
        // The reservation above failed (surplus full): undo it.
        if (over && t_pool_deferred) g_pool_surplus.fetch_sub(1, std::memory_order_relaxed);
        if (over) {
            evicted = entries[0];
            for (std::size_t j = 1; j < n; ++j) entries[j - 1] = entries[j];
            entries[n - 1] = s;
            return true;
        }
        if (push(s)) return false;
        evicted = s;  // no memory for the entry: unmap it instead
        return true;
    }
    bool push(const stack_region& s) noexcept {
        try {
            if (entries.capacity() == 0) entries.reserve(stack_pool_capacity);
            entries.push_back(s);
            return true;
        } catch (...) {
            return false;
        }
    }
    // Unmaps up to `max` of the oldest stacks beyond stack_pool_capacity.
    // Returns how many it unmapped.
    std::size_t trim(std::size_t max) noexcept {
        std::size_t k = std::min(max, surplus_of(entries.size()));
        if (k == 0) return 0;
        for (std::size_t i = 0; i < k; ++i) unmap_stack(entries[i]);
        std::size_t n = entries.size();
        for (std::size_t j = k; j < n; ++j) entries[j - k] = entries[j];
        set_size(n - k);
        return k;
    }
};
thread_local stack_pool t_pool;

// This thread's pool, or nullptr once it was destroyed at thread exit. The
// first call constructs it (and registers its destructor).
stack_pool* this_thread_pool() noexcept {
    if (t_pool_state == pool_state::dead) return nullptr;
    return &t_pool;
}

// ---------------------------------------------------------------------------
// 4. SIGSEGV handler and sigaltstack

// The SIGSEGV disposition before ours, which the handler chains to. Two
// slots, each written once under g_install_mutex and only before it is
// published in g_previous_segv: slot 0 with what we read before installing,
// slot 1 only if the install replaced something else (another thread changed
// the disposition in between). The handler reads g_previous_segv (acquire,
// pairs with the release stores below: a lock-free pointer load, safe in a
// signal handler) and then its slot, which is never written again -- so a
// fault on another thread during the installation never sees a half-written
// action.
struct sigaction g_previous_segv_slots[2];
std::atomic<const struct sigaction*> g_previous_segv{nullptr};
std::mutex g_install_mutex;
// Pairs: store(release) after installing, load(acquire) in the fast path of
// install_overflow_handler, so a caller that sees `true` sees a finished
// installation.
std::atomic<bool> g_handler_installed{false};

// --- async-signal-safe formatting ---

struct signal_buffer {
    char data[512];
    std::size_t length = 0;

    void put(const char* s) noexcept {
        while (*s != '\0' && length < sizeof data) data[length++] = *s++;
    }
    void put_decimal(std::uint64_t v) noexcept {
        char digits[20];  // UINT64_MAX has 20 decimal digits
        std::size_t n = 0;
        do {
            digits[n++] = static_cast<char>('0' + v % 10);
            v /= 10;
        } while (v != 0);
        while (n > 0 && length < sizeof data) data[length++] = digits[--n];
    }
    void put_hex(std::uint64_t v) noexcept {
        char digits[16];
        std::size_t n = 0;
        do {
            digits[n++] = "0123456789abcdef"[v & 0xf];
            v >>= 4;
        } while (v != 0);
        while (n > 0 && length < sizeof data) data[length++] = digits[--n];
    }
    void write_to_stderr() const noexcept {
        std::size_t done = 0;
        while (done < length) {
            const ssize_t n = ::write(STDERR_FILENO, data + done, length - done);
            if (n > 0) {
                done += static_cast<std::size_t>(n);
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else {
                return;
            }
        }
    }
};

[[noreturn]] void report_overflow_and_abort(const registry_slot& s) noexcept {
    const auto kind = s.owner_kind.load(std::memory_order_relaxed);
    const std::uint64_t id = s.owner_id.load(std::memory_order_relaxed);
    // The size the fiber's or generator's creator asked for: the usable size
    // is larger (page rounding, the random start offset) and varies.
    const std::uint64_t requested = s.requested.load(std::memory_order_relaxed);
    const std::uint64_t usable = requested != 0 ? requested : s.usable.load(std::memory_order_relaxed);
    signal_buffer out;
    switch (kind) {
        case stack_owner::fiber:
            out.put("spindle: fiber ");
            out.put_decimal(id);
            out.put(" overflowed its ");
            out.put_decimal(usable);
            out.put("-byte stack; raise it with spindle::fiber_options::stack_size or "
                    "spindle::scheduler::options::stack_size (SPINDLE_STACK_SIZE=<bytes> for the default)\n");
            break;
        case stack_owner::generator:
            out.put("spindle: generator ");
            out.put_decimal(id);
            out.put(" overflowed its ");
            out.put_decimal(usable);
            out.put("-byte stack; raise it with the stack_size argument of spindle::generator\n");
            break;
        case stack_owner::none:
        default:
            out.put("spindle: stack at 0x");
            out.put_hex(s.guard_base.load(std::memory_order_relaxed));
            out.put(" overflowed its ");
            out.put_decimal(usable);
            out.put("-byte stack\n");
            break;
    }
    out.write_to_stderr();
    // A SIGABRT handler of the program must not turn this into something
    // else (or return into the overflowed fiber).
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    ::sigemptyset(&dfl.sa_mask);
    ::sigaction(SIGABRT, &dfl, nullptr);
    std::abort();
}

std::uintptr_t stack_pointer_of([[maybe_unused]] const void* ucontext) noexcept {
    const auto* uc = static_cast<const ucontext_t*>(ucontext);
#if defined(__x86_64__)
    return static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
    return static_cast<std::uintptr_t>(uc->uc_mcontext.sp);
#else
    return 0;  // no stack-pointer rule on other targets
#endif
}

// The registered stack this fault overflowed, or nullptr. See the rules at
// install_overflow_handler() in the header.
const registry_slot* find_overflowed_stack(std::uintptr_t addr, std::uintptr_t sp) noexcept {
    registry& r = g_registry.value;
    const std::uint32_t bound = r.bound.load(std::memory_order_acquire);  // pairs with register_stack
    if (bound == 0) return nullptr;  // no stack yet
    // Every registered stack has a one-page guard. page_size() was computed
    // when the handler was installed (install_process_handler): here it is a
    // plain load, no initialization inside the signal handler.
    const std::uintptr_t page = page_size();
    const registry_slot* sp_candidate = nullptr;
    bool sp_inside_other_stack = false;
    for (std::uint32_t chunk = 0; chunk * slots_per_chunk < bound; ++chunk) {
        // Pairs with the release store that published the chunk.
        const registry_slot* slots = r.chunks[chunk].load(std::memory_order_acquire);
        if (slots == nullptr) continue;
        const std::uint32_t in_chunk =
            bound - chunk * slots_per_chunk < slots_per_chunk ? bound - chunk * slots_per_chunk : slots_per_chunk;
        for (std::uint32_t i = 0; i < in_chunk; ++i) {
            const registry_slot& s = slots[i];
            // Pairs with the release store in register_stack.
            const std::uintptr_t base = s.guard_base.load(std::memory_order_acquire);
            if (base == 0) continue;
            const std::uintptr_t guard_end = base + page;
            const std::uintptr_t top = guard_end + s.usable.load(std::memory_order_relaxed);
            // Rule (a): the access itself hit the guard.
            if (addr >= base && addr < guard_end) return &s;
            // Rule (b), first half: sp near this guard.
            const std::uintptr_t low = base > stack_overflow_sp_below ? base - stack_overflow_sp_below : 0;
            const bool sp_near_guard = sp >= low && sp < guard_end + stack_overflow_sp_above;
            if (sp_near_guard && sp_candidate == nullptr) {
                // The access lies in the new frame: at most a page below sp (a
                // push, the red zone, a probe) up to the guard it jumped over.
                const std::uintptr_t reach = guard_end - base;  // one page; no page_size() here
                const std::uintptr_t access_low = sp > reach ? sp - reach : 0;
                if (addr >= access_low && addr < guard_end) sp_candidate = &s;
            }
            // sp in the healthy part of a stack: that stack is running, and
            // this fault is not a jump over a neighbour's guard.
            if (sp >= guard_end + stack_overflow_sp_above && sp < top) sp_inside_other_stack = true;
        }
    }
    return sp_inside_other_stack ? nullptr : sp_candidate;
}

// Hands the fault to whoever had SIGSEGV before us, as the kernel would have
// called it: with its sa_mask blocked too, SIGSEGV unblocked for SA_NODEFER
// (ours runs with it blocked), and the disposition reset to the default
// first for SA_RESETHAND. The mask need not be restored: returning from our
// handler restores the one the fault interrupted; a handler that jumps out
// keeps the mask it would have had if the kernel had called it.
void chain_to_previous(int sig, siginfo_t* info, void* ucontext) noexcept {
    const struct sigaction* published = g_previous_segv.load(std::memory_order_acquire);  // pairs with install
    struct sigaction prev{};
    if (published != nullptr) prev = *published;  // else: SIG_DFL (a fault before the first install finished)
    if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) {
        // Default action: restore it and let the fault happen again (it does,
        // when we return to the faulting instruction). A SIGSEGV sent with
        // kill() does not repeat by itself: raise it again; it stays pending
        // (SIGSEGV is blocked while we run) and kills us once we return.
        struct sigaction dfl{};
        dfl.sa_handler = SIG_DFL;
        ::sigemptyset(&dfl.sa_mask);
        ::sigaction(SIGSEGV, &dfl, nullptr);
        if (info == nullptr || info->si_code <= 0) ::raise(sig);
        return;
    }
    if ((prev.sa_flags & SA_RESETHAND) != 0) {
        struct sigaction dfl{};
        dfl.sa_handler = SIG_DFL;
        ::sigemptyset(&dfl.sa_mask);
        ::sigaction(SIGSEGV, &dfl, nullptr);
    }
    sigset_t mask = prev.sa_mask;
    if ((prev.sa_flags & SA_NODEFER) == 0) {
        ::sigaddset(&mask, sig);
    } else {
        sigset_t unblock;
        ::sigemptyset(&unblock);
        ::sigaddset(&unblock, sig);
        ::pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);  // a system call: async-signal-safe on Linux
    }
    ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
    if ((prev.sa_flags & SA_SIGINFO) != 0) {
        prev.sa_sigaction(sig, info, ucontext);
    } else {
        prev.sa_handler(sig);
    }
}

void spindle_segv_handler(int sig, siginfo_t* info, void* ucontext) {
    const int saved_errno = errno;
    // si_code <= 0: sent by kill()/raise()/sigqueue(); si_addr means nothing.
    if (info != nullptr && info->si_code > 0) {
        const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
        const std::uintptr_t sp = ucontext != nullptr ? stack_pointer_of(ucontext) : 0;
        if (const registry_slot* hit = find_overflowed_stack(addr, sp)) report_overflow_and_abort(*hit);
    }
    chain_to_previous(sig, info, ucontext);
    errno = saved_errno;
}

void first_switch_on_thread() noexcept;  // below

SPINDLE_COLD void install_process_handler() {
    // Once per process, before its first stack or scheduler: a malformed
    // SPINDLE_STACK_SIZE stops it here, even when every fiber and generator
    // names its own size and the default is never needed (the environment
    // is never silently ignored). And the page size, which the handler
    // reads, is computed here rather than in the handler.
    (void)default_stack_size_from_env();
    (void)page_size();
    std::lock_guard<std::mutex> lock(g_install_mutex);
    if (g_handler_installed.load(std::memory_order_relaxed)) return;  // under the mutex
    struct sigaction& previous = g_previous_segv_slots[0];
    if (::sigaction(SIGSEGV, nullptr, &previous) != 0)
        throw std::system_error(errno, std::generic_category(), "spindle: reading the SIGSEGV disposition");
    g_previous_segv.store(&previous, std::memory_order_release);  // pairs with chain_to_previous
    struct sigaction ours{};
    ours.sa_sigaction = &spindle_segv_handler;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    ::sigemptyset(&ours.sa_mask);
    struct sigaction& replaced = g_previous_segv_slots[1];
    if (::sigaction(SIGSEGV, &ours, &replaced) != 0)
        throw std::system_error(errno, std::generic_category(), "spindle: installing the SIGSEGV handler");
    // Someone changed it between the two calls (another thread, outside our
    // mutex): chain to what we actually replaced, published whole in its own
    // slot. A fault in that window chains to the older handler, which is the
    // best we can do.
    if (replaced.sa_handler != previous.sa_handler || replaced.sa_flags != previous.sa_flags)
        g_previous_segv.store(&replaced, std::memory_order_release);  // pairs with chain_to_previous
    // A thread's first context switch gives it its alternate signal stack
    // (arch/context.hpp, set_first_switch_hook): a context may first run on
    // a thread that never called into spindle before.
    arch::detail::set_first_switch_hook(&first_switch_on_thread);
    g_handler_installed.store(true, std::memory_order_release);  // pairs with the fast-path load
}

// This thread's sigaltstack, when spindle installed it.
struct thread_altstack {
    std::byte* map = nullptr;  // guard page + stack
    std::size_t map_size = 0;

    constexpr thread_altstack() noexcept = default;
    thread_altstack(const thread_altstack&) = delete;
    thread_altstack& operator=(const thread_altstack&) = delete;
    ~thread_altstack() {
        if (map == nullptr) return;
        stack_t current{};
        if (::sigaltstack(nullptr, &current) == 0) {
            if ((current.ss_flags & SS_ONSTACK) != 0) return;  // cannot happen at thread exit; keep it
            if (current.ss_sp == map + page_size()) {
                stack_t disable{};
                disable.ss_flags = SS_DISABLE;
                ::sigaltstack(&disable, nullptr);
            }
        }
        ::munmap(map, map_size);
        map = nullptr;
    }
};
constinit thread_local bool t_altstack_checked = false;
thread_local thread_altstack t_altstack;

// The alternate signal stack the overflow handler needs: altstack_min_size,
// or four of the kernel's minimum signal frames if that is more (the frame
// grows with the CPU's register state: AVX-512, AMX).
std::size_t altstack_size_needed() noexcept {
    std::size_t size = altstack_min_size;
    if (const unsigned long min_frame = ::getauxval(AT_MINSIGSTKSZ); min_frame * 4 > size) size = min_frame * 4;
    return size;
}

SPINDLE_COLD void install_thread_altstack() {
    stack_t current{};
    if (::sigaltstack(nullptr, &current) != 0)
        throw std::system_error(errno, std::generic_category(), "spindle: reading the sigaltstack");
    // The thread has one (ASan's, the program's): keep it if the handler fits
    // (or if we run on it now, in a handler, and so cannot change it); a
    // smaller one is replaced -- the report would overflow it, and the
    // process would die without a word. Every handler with SA_ONSTACK then
    // runs on ours, which is larger.
    if ((current.ss_flags & SS_DISABLE) == 0 &&
        ((current.ss_flags & SS_ONSTACK) != 0 || current.ss_size >= altstack_size_needed())) {
        t_altstack_checked = true;
        return;
    }
    const std::size_t page = page_size();
    const std::size_t size = round_up(altstack_size_needed(), page);
    const std::size_t map_size = page + size;
    const guarded_mapping m = map_guarded(map_size);
    if (m.base == nullptr)
        throw_map_error(m.error, m.guard_failed ? "installing the signal stack's guard page" : "mmap of the signal stack",
                        map_size);
    std::byte* const base = m.base;
    void* const mem = base;
    stack_t ss{};
    ss.ss_sp = base + page;
    ss.ss_size = size;
    ss.ss_flags = 0;
    if (::sigaltstack(&ss, nullptr) != 0) {
        const int err = errno;
        ::munmap(mem, map_size);
        throw std::system_error(err, std::generic_category(), "spindle: installing a sigaltstack");
    }
    t_altstack.map = base;  // first use constructs t_altstack and registers its destructor
    t_altstack.map_size = map_size;
    t_altstack_checked = true;
}

// The first context switch of a thread (arch::detail::set_first_switch_hook).
void first_switch_on_thread() noexcept {
    if (t_altstack_checked) return;
    try {
        install_thread_altstack();
    } catch (...) {
        // Out of memory or mappings: the thread runs on without an overflow
        // report (a diagnostic, not a guarantee; stack.hpp).
    }
}

}  // namespace

// ---------------------------------------------------------------------------
// Public entry points

guard_method stack_guard_method() noexcept { return guard_method_in_use(); }

void install_overflow_handler() {
    if (!g_handler_installed.load(std::memory_order_acquire)) install_process_handler();  // pairs with its store
    if (!t_altstack_checked) install_thread_altstack();
}

stack_region acquire_stack(std::size_t size) {
    if (size < min_stack_size)
        throw std::invalid_argument("spindle: stack size " + std::to_string(size) + " is below the minimum of " +
                                    std::to_string(min_stack_size) + " bytes");
    install_overflow_handler();
    const std::size_t page = page_size();
    // guard + body + headroom (the random gap lives in the headroom page).
    if (size > SIZE_MAX / 2) throw_map_error(ENOMEM, "mmap", size);  // round_up would wrap
    const std::size_t map_size = page + round_up(size, page) + page;
    stack_region r;
    stack_pool* pool = this_thread_pool();
    if (pool == nullptr || !pool->take(map_size, r)) r = map_stack(map_size);
    place_top(r);
    // relaxed: read by the overflow handler of the thread that will run on
    // the stack, after the hand-over that publishes the stack itself.
    slot_at(r.slot).requested.store(size <= UINT32_MAX ? static_cast<std::uint32_t>(size) : 0,
                                    std::memory_order_relaxed);
    return r;
}

void release_stack(stack_region& s) noexcept {
    if (!s) return;
    slot_at(s.slot).owner_kind.store(stack_owner::none, std::memory_order_relaxed);  // nobody runs here now
    stack_pool* pool = this_thread_pool();
    if (pool == nullptr) {  // thread exit, after the pool was destroyed
        unmap_stack(s);
    } else {
        drop_cold_pages(s);
        stack_region evicted;
        if (pool->put(s, evicted)) unmap_stack(evicted);
    }
    s = stack_region{};
}

void defer_stack_pool_trim() noexcept { t_pool_deferred = true; }

std::size_t trim_stack_pool(std::size_t max_unmaps) noexcept {
    if (!t_pool_deferred) return 0;
    stack_pool* pool = this_thread_pool();
    return pool == nullptr ? 0 : pool->trim(max_unmaps);
}

void end_stack_pool_deferral() noexcept {
    (void)trim_stack_pool(SIZE_MAX);
    t_pool_deferred = false;
}

void set_stack_owner(const stack_region& s, stack_owner kind, std::uint64_t id) noexcept {
    registry_slot& slot = slot_at(s.slot);
    // Relaxed: read by the SIGSEGV handler of the thread that runs on this
    // stack, which switched onto it after this call (program order, or the
    // synchronization that handed the fiber over to it).
    slot.owner_id.store(id, std::memory_order_relaxed);
    slot.owner_kind.store(kind, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// 5. SPINDLE_STACK_SIZE

std::optional<std::size_t> parse_stack_size(const char* text) noexcept {
    if (text == nullptr || *text < '0' || *text > '9') return std::nullopt;
    std::size_t value = 0;
    const char* p = text;
    for (; *p >= '0' && *p <= '9'; ++p) {
        const auto digit = static_cast<std::size_t>(*p - '0');
        if (value > (SIZE_MAX - digit) / 10) return std::nullopt;  // overflow
        value = value * 10 + digit;
    }
    std::size_t unit = 1;
    if (*p == 'K' || *p == 'k') {
        unit = 1024;
        ++p;
    } else if (*p == 'M' || *p == 'm') {
        unit = 1024 * 1024;
        ++p;
    }
    if (*p != '\0') return std::nullopt;
    if (value > SIZE_MAX / unit) return std::nullopt;
    value *= unit;
    if (value < min_stack_size) return std::nullopt;
    return value;
}

std::size_t default_stack_size_from_env() {
    static const std::size_t value = [] {
        const char* text = std::getenv("SPINDLE_STACK_SIZE");
        if (text == nullptr) return default_stack_size;
        const std::optional<std::size_t> parsed = parse_stack_size(text);
        if (!parsed) {
            std::fprintf(stderr,
                         "spindle: SPINDLE_STACK_SIZE='%s' is not a valid stack size (bytes, or with K/M "
                         "suffix; at least %zu)\n",
                         text, min_stack_size);
            std::exit(2);
        }
        return *parsed;
    }();
    return value;
}

}  // namespace spindle::detail

// ---------------------------------------------------------------------------
// 6. What a debugger reads
//
// tools/gdb/spindle.py finds every live fiber through the overflow registry
// above: a registered slot whose owner is a fiber describes the stack the
// fiber's control block sits on top of (include/spindle/runtime/detail/
// debug_layout.hpp; the runtime's half of the layout is
// spindle_debug_layout). So listing fibers costs a spawn nothing:
// set_stack_owner stores the owner anyway. Plain
// integers and addresses fixed at compile time, readable without debug
// information. Bump `version` when a field changes meaning; add fields only
// at the end.
extern "C" {
struct spindle_debug_stacks_t {
    std::uint32_t version;          // 1
    std::uint32_t size;             // sizeof this struct
    const void* chunks;             // registry::chunks: max_chunks pointers to slot arrays (or null)
    const void* bound;              // registry::bound: uint32, slots [0, bound) were handed out
    std::uint32_t slots_per_chunk;
    std::uint32_t slot_size;        // sizeof(registry_slot)
    std::uint32_t slot_guard_base;  // uintptr: the mapping's start (its guard page); 0: slot free
    std::uint32_t slot_usable;      // size_t: bytes from the guard's end to the stack's top
    std::uint32_t slot_owner_id;    // uint64: the fiber's id
    std::uint32_t slot_owner_kind;  // uint8: stack_owner
    std::uint32_t owner_fiber;      // stack_owner::fiber
    std::uint32_t owner_generator;  // stack_owner::generator
};
// tools/gdb/spindle.py unpacks it with a fixed format ("<IIQQ8I").
static_assert(sizeof(spindle_debug_stacks_t) == 56, "change _STACKS_FORMAT in tools/gdb/spindle.py too");

extern const spindle_debug_stacks_t spindle_debug_stacks;
__attribute__((used)) const spindle_debug_stacks_t spindle_debug_stacks = {
    .version = 1,
    .size = sizeof(spindle_debug_stacks_t),
    .chunks = &spindle::detail::g_registry.value.chunks[0],
    .bound = &spindle::detail::g_registry.value.bound,
    .slots_per_chunk = spindle::detail::slots_per_chunk,
    .slot_size = sizeof(spindle::detail::registry_slot),
    .slot_guard_base = offsetof(spindle::detail::registry_slot, guard_base),
    .slot_usable = offsetof(spindle::detail::registry_slot, usable),
    .slot_owner_id = offsetof(spindle::detail::registry_slot, owner_id),
    .slot_owner_kind = offsetof(spindle::detail::registry_slot, owner_kind),
    .owner_fiber = static_cast<std::uint32_t>(spindle::detail::stack_owner::fiber),
    .owner_generator = static_cast<std::uint32_t>(spindle::detail::stack_owner::generator),
};
static_assert(sizeof(spindle::detail::stack_owner) == 1, "the debugger reads the owner as one byte");
}
