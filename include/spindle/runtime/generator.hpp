// spindle/runtime/generator.hpp — stackful generators (asymmetric coroutines).
//
// A generator runs a function on its own small pooled stack. The function
// yields values to whoever resumes it; each resume and each yield is one
// inlined CACS switch (spindle/arch/), so a value passes for about the cost
// of a function call and return (the CACS paper, §3.2 and Fig. 10):
//
//     spindle::generator<int> countdown([](auto& yield) {
//         for (int i = 3; i > 0; --i) yield(i);
//     });
//     for (int v : countdown) std::printf("%d\n", v);   // 3 2 1
//
// Because the generator has a real stack, the yield can happen in any
// function it calls, at any depth — no co_yield chain through every level
// (Tower of Hanoi in examples/ and bench/switch). Pass the yielder down by
// reference.
//
// Contract:
//   next()       runs the body to its next yield: true, value() is that value;
//                or to its end: false (and rethrows an exception that escaped
//                the body). After false, next() keeps returning false.
//   value()      the last yielded value; valid until the next next() (debug
//                builds abort before the first next(), after the end, and on
//                a moved-from generator). Small
//                trivially copyable values are copied into the generator;
//                others are referred to where the body holds them.
//   begin()/end() range-for; begin() starts the body.
//   ~generator   a body suspended mid-way is unwound: yield() throws an
//                internal exception so destructors of the body's locals run.
//                A body must let that exception pass (catch (...) must
//                rethrow); one that yields again while unwinding is aborted.
//   resuming a generator from inside its own body aborts (debug builds).
//   pthread_exit(), or a thread cancellation acting, inside the body stops
//                the program naming the generator: the forced unwind ends at
//                the bottom of the body's stack and cannot reach the thread's
//                start (as for fibers, runtime/fiber.hpp).
//
// A generator may be resumed from any thread or fiber, one at a time; it is
// not itself synchronized. Stack: `stack_size` (default SPINDLE_STACK_SIZE or
// 128 KiB, minimum 16 KiB); an overflow ends the process with a message
// naming the generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include <spindle/arch/context.hpp>
#include <spindle/arch/fatal.hpp>
#include <spindle/memory/stack.hpp>

namespace spindle {

namespace detail {

// Thrown from yield() into a body whose generator is being destroyed.
// Deliberately not derived from std::exception.
struct generator_unwind {};

std::uint64_t next_generator_id() noexcept;
[[noreturn]] void generator_entry(arch::raw_context* self, arch::raw_context* from) noexcept;
// "spindle: generator <id>: <what>", then abort (arch/fatal.hpp).
[[noreturn]] SPINDLE_COLD inline void generator_misuse(std::uint64_t id, const char* what) noexcept {
    fatal("generator %llu: %s", static_cast<unsigned long long>(id), what);
}
// For a handle with no body (moved from): names the handle.
[[noreturn]] SPINDLE_COLD inline void generator_handle_misuse(const void* handle, const char* what) noexcept {
    fatal("generator handle %p: %s", handle, what);
}

// Whether a finished body's context stays valid (see generator_entry): its
// last act is not a final switch but a loop that answers every resume at
// once. Then resuming a finished generator is harmless (it reports the end
// again), and the range-for loop's ++ needs no test of `done` before its
// resume. Sanitizer builds keep the final switch, which tells ASan and TSan
// that the context is gone, and the test.
//
// That test, like any use of the frame pointer that the compiler cannot take
// from the switch's output register, made it keep the pointer in rbp, which
// every switch stores and reloads: one more store-to-load forwarding on the
// loop's dependency chain. Without it, with the yielder and the iterator
// writing back the pointer the switch returns, bench/switch sum went from
// 2.05 to 1.6-1.8 ns a value on the 2-CPU EPYC, depending on what the
// compiler keeps in rbp (C++20 stackless: 1.27 to 1.75 ns from one process
// to the next).
inline constexpr bool gen_resume_after_done_ok = !(SPINDLE_ASAN || SPINDLE_TSAN);

// generator_frame_base::status bits.
inline constexpr std::uint8_t gen_done = 1;        // the body returned or threw
inline constexpr std::uint8_t gen_body_eh = 2;     // self.eh holds the body's exception state (body suspended)
inline constexpr std::uint8_t gen_eh_swapped = 4;  // caller.eh holds the consumer's (body runs)
inline constexpr std::uint8_t gen_unwinding = 8;   // ~generator asked the body to unwind

struct generator_frame_base {
    arch::context self;    // the body's context while suspended; first member
    arch::context caller;  // whoever resumed us, while the body runs
    std::uint8_t status = 0;  // gen_* bits: one load tests what a side must do after a switch
    bool started = false;    // the body has begun (set by the body itself)
    bool running = false;    // debug check: resumed and not yet back (set and cleared by resume())
    std::exception_ptr error;
    void (*invoke)(generator_frame_base*) = nullptr;
    void (*destroy)(generator_frame_base*) = nullptr;
    std::uint64_t id = 0;
    stack_region stack;
};
static_assert(offsetof(generator_frame_base, self) == 0, "entry casts the context to its frame");
// Offsets the generator's switches use: resume goes caller -> self, yield
// self -> caller, both through the frame pointer kept in a register.
inline constexpr std::size_t gen_self_off = offsetof(generator_frame_base, self);
inline constexpr std::size_t gen_caller_off = offsetof(generator_frame_base, caller);

// Resume (consumer side) and yield (body side): the frame travels in a
// register both ways, `word` carries a small value from the body (a resume
// only receives it).
SPINDLE_ALWAYS_INLINE generator_frame_base* gen_resume(generator_frame_base* f, std::uintptr_t& word) noexcept {
    void* s = f;
    arch::switch_shared<gen_caller_off, gen_self_off, false>(s, word);
    return static_cast<generator_frame_base*>(s);
}
SPINDLE_ALWAYS_INLINE generator_frame_base* gen_yield(generator_frame_base* f, std::uintptr_t& word) noexcept {
    void* s = f;
    arch::switch_shared<gen_self_off, gen_caller_off>(s, word);
    return static_cast<generator_frame_base*>(s);
}

void release_generator_frame(generator_frame_base* f) noexcept;

// Exception state across generator switches. A fiber switch parks and
// installs the C++ runtime's per-thread exception state both ways
// (arch::swap_eh_state). A generator can do less, because its switches nest
// like a call and a return: the body runs only between a resume and the next
// yield. Invariant: while the body runs, the thread's state is the body's;
// `caller.eh` holds the consumer's only when gen_eh_swapped is set, and is
// zero otherwise; `self.eh` holds the body's only when gen_body_eh is set.
// So in the common case (no exception in flight on either side) each side
// tests the thread's two words before it switches, and the status byte it
// reads anyway where it lands, and nothing is stored:
//   resume: if the consumer is inside a handler, park its state and clear
//           the thread's (slow path; sets gen_eh_swapped).
//   land:   (the body, where a resume lands it) if it yielded inside a
//           handler (gen_body_eh), install its state again; the same test
//           sees gen_unwinding (slow path, gen_land_slow).
//   yield:  if the body is inside a handler, or a resume parked the
//           consumer's state, park the body's and give the consumer its own.
// When no test fires the state both sides see is zero, which is already
// right. Installing the body's state where it lands, rather than in the
// resume, keeps the consumer's side of a value to one test (bench/switch
// sum: 2.93 -> 2.88 ns a value with the receive-only resume word, 2-CPU
// EPYC; the C++20 stackless generator 2.5 ns in the same runs).
SPINDLE_ALWAYS_INLINE bool eh_state_busy(const arch::eh_state& e) noexcept {
    return (reinterpret_cast<std::uintptr_t>(e.caught) | e.uncaught) != 0;
}
// (A thread's first test reads arch::detail::eh_lookup_pending, which looks
// busy: its slow path does the lookup and a swap that is always correct.)
// All return f, so that the caller's copy can stay in a scratch register;
// gen_land_slow throws generator_unwind when the body must unwind.
SPINDLE_NOINLINE generator_frame_base* gen_eh_enter_slow(generator_frame_base* f) noexcept;
SPINDLE_NOINLINE generator_frame_base* gen_eh_leave_slow(generator_frame_base* f) noexcept;
SPINDLE_NOINLINE generator_frame_base* gen_land_slow(generator_frame_base* f);
template <class F>
SPINDLE_ALWAYS_INLINE F* gen_eh_enter(F* f) noexcept {
    const arch::eh_state* g = arch::detail::eh_globals_peek();
    if ((reinterpret_cast<std::uintptr_t>(g->caught) | g->uncaught) != 0) [[unlikely]]
        f = static_cast<F*>(gen_eh_enter_slow(f));
    return f;
}
template <class F>
SPINDLE_ALWAYS_INLINE F* gen_eh_leave(F* f) noexcept {
    const arch::eh_state* g = arch::detail::eh_globals_peek();
    // Two tests, not one OR: the status test is one fused test-and-branch.
    if ((reinterpret_cast<std::uintptr_t>(g->caught) | g->uncaught) != 0 || (f->status & gen_eh_swapped) != 0)
        [[unlikely]] f = static_cast<F*>(gen_eh_leave_slow(f));
    return f;
}

}  // namespace detail

template <class T>
class generator {
    static_assert(std::is_object_v<T> && !std::is_const_v<T>, "generator<T>: T must be a non-const object type");
    // Small trivially copyable values travel by copy, others by address. A
    // value that fits a machine word travels in a register through the switch.
    static constexpr bool by_copy = std::is_trivially_copyable_v<T> && sizeof(T) <= 16;
    static constexpr bool in_word = by_copy && sizeof(T) <= sizeof(std::uintptr_t);

    struct frame_base : detail::generator_frame_base {
        std::conditional_t<by_copy, T, const T*> slot{};
        const T& get() const noexcept {
            if constexpr (by_copy) return slot; else return *slot;
        }
    };

public:
    using value_type = T;
    // Bodies larger than this live on the heap rather than on the stack top.
    static constexpr std::size_t inline_body_max = 1024;

    // Handed to the body; call it (or .yield) to produce a value.
    class yielder {
    public:
        SPINDLE_ALWAYS_INLINE void yield(const T& v) {
            frame_base* f = f_;
            std::uintptr_t word = 0;
            if constexpr (in_word) std::memcpy(&word, &v, sizeof(T));
            else if constexpr (by_copy) f->slot = v;
            else f->slot = std::addressof(v);
            f = detail::gen_eh_leave(f);
            f = static_cast<frame_base*>(detail::gen_yield(f, word));
            // Written back (it is the same frame) so that a loop of yields
            // takes f from this register, not from the yielder's stack slot,
            // which the switch's memory clobber would make it reload.
            f_ = f;
            if ((f->status & (detail::gen_body_eh | detail::gen_unwinding)) != 0) [[unlikely]]
                f_ = f = static_cast<frame_base*>(detail::gen_land_slow(f));
        }
        SPINDLE_ALWAYS_INLINE void operator()(const T& v) { yield(v); }
        yielder(const yielder&) = delete;
        yielder& operator=(const yielder&) = delete;

    private:
        friend class generator;
        explicit yielder(frame_base* f) noexcept : f_(f) {}
        frame_base* f_;
    };

    template <class Fn>
        requires(!std::is_same_v<std::remove_cvref_t<Fn>, generator> &&
                 std::is_invocable_v<std::decay_t<Fn>&, yielder&>)
    explicit generator(Fn&& body, std::size_t stack_size = 0) {
        using F = std::decay_t<Fn>;
        // A body (the callable and its captures) is stored at the top of the
        // generator's stack when small; a large one goes to the heap so it can
        // never reach below the stack's guard.
        constexpr bool inline_body = sizeof(F) <= inline_body_max && alignof(F) <= 64;
        struct frame : frame_base {
            explicit frame(Fn&& b) : storage(make(std::forward<Fn>(b))) {}
            static auto make(Fn&& b) {
                if constexpr (inline_body) return F(std::forward<Fn>(b));
                else return std::make_unique<F>(std::forward<Fn>(b));
            }
            F& body() noexcept {
                if constexpr (inline_body) return storage; else return *storage;
            }
            std::conditional_t<inline_body, F, std::unique_ptr<F>> storage;
        };
        static_assert(alignof(frame) <= 64, "generator body over-aligned");
        if (stack_size == 0) stack_size = detail::default_stack_size_from_env();
        detail::stack_region st = detail::acquire_stack(stack_size);
        auto top = reinterpret_cast<std::uintptr_t>(st.top);
        top = (top - sizeof(frame)) & ~std::uintptr_t{63};
        frame* f;
        try {
            f = ::new (reinterpret_cast<void*>(top)) frame(std::forward<Fn>(body));
        } catch (...) {
            detail::release_stack(st);
            throw;
        }
        f->stack = st;
        f->id = detail::next_generator_id();
        f->invoke = [](detail::generator_frame_base* b) {
            auto* self = static_cast<frame*>(b);
            yielder y(self);
            std::invoke(self->body(), y);
        };
        f->destroy = [](detail::generator_frame_base* b) { static_cast<frame*>(b)->~frame(); };
        detail::set_stack_owner(st, detail::stack_owner::generator, f->id);
        void* stack_top = reinterpret_cast<void*>(top & ~std::uintptr_t{15});
        arch::make_context(&f->self.regs, stack_top, &detail::generator_entry);
        std::byte* bottom = st.top - st.usable;
        arch::annotate_new_context(&f->self, bottom,
                                   static_cast<std::size_t>(static_cast<std::byte*>(stack_top) - bottom));
        f_ = f;
    }

    generator(generator&& o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
    generator& operator=(generator&& o) noexcept {
        if (this != &o) {
            reset();
            f_ = std::exchange(o.f_, nullptr);
        }
        return *this;
    }
    generator(const generator&) = delete;
    generator& operator=(const generator&) = delete;
    ~generator() { reset(); }

    // Run the body to its next yield (true) or its end (false).
    SPINDLE_ALWAYS_INLINE bool next() {
        frame_base* f = f_;
        if (f == nullptr || (f->status & detail::gen_done) != 0) [[unlikely]]
            return false;
        // A local copy: the body may move or destroy *this while it runs.
        return resume(f);
    }

    [[nodiscard]] const T& value() const noexcept {
#if SPINDLE_DEBUG_CHECKS
        if (f_ == nullptr) detail::generator_handle_misuse(this, "value() on a generator with no body (moved from)");
        if (!f_->started) detail::generator_misuse(f_->id, "value() before the first next()");
        if ((f_->status & detail::gen_done) != 0) detail::generator_misuse(f_->id, "value() after its body ended");
#endif
        return f_->get();
    }
    [[nodiscard]] bool done() const noexcept { return f_ == nullptr || (f_->status & detail::gen_done) != 0; }
    [[nodiscard]] std::uint64_t id() const noexcept { return f_ ? f_->id : 0; }

    struct sentinel {};
    class iterator {
    public:
        using value_type = T;
        using difference_type = std::ptrdiff_t;
        using reference = const T&;
        iterator() = default;
        const T& operator*() const noexcept { return f_->get(); }
        const T* operator->() const noexcept { return std::addressof(f_->get()); }
        iterator& operator++() {
            // The frame pointer is kept here, not re-read from the generator:
            // it comes back from the switch in a register. A body that ended
            // through a direct next() meanwhile answers the resume with the
            // end (detail::gen_resume_after_done_ok), or is tested for first.
            if constexpr (detail::gen_resume_after_done_ok)
                at_end_ = !resume(f_);
            else
                at_end_ = (f_->status & detail::gen_done) != 0 || !resume(f_);
            return *this;
        }
        void operator++(int) { ++*this; }
        friend bool operator==(const iterator& i, sentinel) noexcept { return i.at_end_; }

    private:
        friend class generator;
        iterator(generator* g, bool at_end) noexcept : f_(g->f_), at_end_(at_end) {}
        frame_base* f_ = nullptr;
        bool at_end_ = true;
    };

    iterator begin() { return iterator(this, !next()); }
    sentinel end() noexcept { return {}; }

private:
    // f is not done, or gen_resume_after_done_ok. Writes back the frame
    // pointer the switch returns: pass a copy that the body cannot move or
    // destroy (a local, an iterator's), never the generator's own f_.
    SPINDLE_ALWAYS_INLINE static bool resume(frame_base*& f) {
#if SPINDLE_DEBUG_CHECKS
        if (f->running) detail::generator_misuse(f->id, "resumed from inside its own body");
        f->running = true;
#endif
        std::uintptr_t word = 0;
        f = detail::gen_eh_enter(f);
        f = static_cast<frame_base*>(detail::gen_resume(f, word));
#if SPINDLE_DEBUG_CHECKS
        // Cleared here, by the code that set it, not by the body's yield:
        // that keeps a store out of every yield of a release build, and a
        // body compiled without the checks cannot leave it set.
        f->running = false;
#endif
        if ((f->status & detail::gen_done) != 0) [[unlikely]] {
            finished(f);
            return false;
        }
        if constexpr (in_word) std::memcpy(&f->slot, &word, sizeof(T));
        return true;
    }

    // The body ended: rethrows what escaped it, if anything.
    SPINDLE_NOINLINE static void finished(frame_base* f) {
        if (f->error) std::rethrow_exception(std::exchange(f->error, nullptr));
    }

    void reset() noexcept {
        frame_base* f = std::exchange(f_, nullptr);
        if (f == nullptr) return;
        if (f->started && (f->status & detail::gen_done) == 0) {
            f->status |= detail::gen_unwinding;
            std::uintptr_t word = 0;
            f = detail::gen_eh_enter(f);
            f = static_cast<frame_base*>(detail::gen_resume(f, word));
            if ((f->status & detail::gen_done) == 0) detail::generator_misuse(f->id, "yielded again while being destroyed");
        }
        detail::release_generator_frame(f);
    }

    frame_base* f_ = nullptr;
};

}  // namespace spindle
