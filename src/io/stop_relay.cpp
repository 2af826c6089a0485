// A fiber's own stop token, relayed to the wait in progress (io_internal.hpp,
// own_stop).
//
// An I/O call without a token of its own observes its fiber's. Registering
// a std::stop_callback per wait cost six atomic read-modify-writes (the
// token's reference count, and the stop state's lock taken twice), ~85 % of
// uring_perform's samples in the echo benchmark. Instead each fiber gets,
// on its first such wait, one callback for its whole life, and each wait
// puts itself into the relay's word with one fetch_or and takes itself out
// with one fetch_and.
//
// Relay word (a pointer to the wait's target, aligned, and two flags):
//
//      63                                        2     1        0
//     +--------------------------------------------+---------+------+
//     |     target of the wait in progress, or 0     | stopped | busy |
//     +--------------------------------------------+---------+------+
//
//     stopped  the fiber's stop was requested (set once, by the callback)
//     busy     the callback is requesting the target it found
//
//   fiber                                callback (once; any thread)
//   old = fetch_or(target)               old = fetch_or(stopped | busy)
//   old has stopped -> request(target)   old has a target -> request(it)
//   ... park ...                         fetch_and(~busy)
//   old = fetch_and(stopped | busy)
//   old has busy -> spin until clear
//
// Both are read-modify-writes of one word, so one comes first: the
// callback finds the target, or the fiber finds `stopped`; a stop requested
// around a wait is never lost (both may see it: a request is idempotent).
// A fiber that takes its target out while the callback holds it (busy)
// waits, so the target outlives every request made on it.
#include <atomic>
#include <cstdint>
#include <new>
#include <stop_token>

#include <spindle/arch/context.hpp>
#include <spindle/runtime/fiber.hpp>

#include "io_internal.hpp"

namespace spindle::io::detail {

namespace {

constexpr std::uintptr_t busy = 1;
constexpr std::uintptr_t stopped = 2;
constexpr std::uintptr_t flags = busy | stopped;

struct relay final : spindle::detail::stop_relay {
    // The relay word (above). Every access is a read-modify-write (acq_rel)
    // but the fiber's spin (acquire): the callback's fetch_or pairs with the
    // fiber's, so it sees the target's fields; its fetch_and (release) with
    // the fiber's fetch_and or spin, so its request is complete before the
    // target goes away.
    std::atomic<std::uintptr_t> word{0};
    struct fire {
        relay* r;
        void operator()() const noexcept {
            std::uintptr_t old = r->word.fetch_or(stopped | busy, std::memory_order_acq_rel);
            if (auto t = old & ~flags; t != 0) {
                auto* target = reinterpret_cast<cancel_target*>(t);
                target->request(target);
            }
            r->word.fetch_and(~busy, std::memory_order_acq_rel);
        }
    };
    std::stop_callback<fire> cb;

    explicit relay(std::stop_token t) : spindle::detail::stop_relay{&destroy_relay}, cb(std::move(t), fire{this}) {}

    static void destroy_relay(spindle::detail::stop_relay* self) noexcept {
        delete static_cast<relay*>(self);  // ~stop_callback waits for a running callback
    }
};

relay* relay_of(spindle::detail::fiber_ctx* f) {
    if (f->relay == nullptr) f->relay = new relay(f->stop.get_token());
    return static_cast<relay*>(f->relay);
}

}  // namespace

bool own_stop_requested() noexcept {
    spindle::detail::fiber_ctx* f = spindle::detail::running_fiber();
    return f != nullptr && f->stop.stop_requested();
}

own_stop::own_stop(cancel_target* target) {
    static_assert(alignof(cancel_target) > flags, "the relay word keeps its flags in a target's low bits");
    relay* r = relay_of(spindle::detail::running_fiber());
    relay_ = r;
    // acq_rel: the relay word's protocol (relay::word).
    if (r->word.fetch_or(reinterpret_cast<std::uintptr_t>(target), std::memory_order_acq_rel) & stopped)
        target->request(target);
}

own_stop::~own_stop() {
    auto& word = static_cast<relay*>(relay_)->word;
    // acq_rel / acquire: the relay word's protocol (relay::word).
    if (word.fetch_and(flags, std::memory_order_acq_rel) & busy) {
        while (word.load(std::memory_order_acquire) & busy) spindle::arch::cpu_relax();
    }
}

}  // namespace spindle::io::detail
