// A fiber's own stop token, relayed to the wait in progress (io_internal.hpp,
// own_stop).
//
// An I/O call without a token of its own observes its fiber's. Registering
// a std::stop_callback per wait cost six atomic read-modify-writes (the
// token's reference count, and the stop state's lock taken twice), ~85 % of
// uring_perform's samples in the echo benchmark. Instead each fiber gets,
// on its first such wait, one callback for its whole life, and each wait
// puts itself into the relay's word with one fetch_or and takes itself out
// with one fetch_and. The word is the fiber's own (fiber_ctx::stop_word),
// in its control block beside what every switch touches; only the callback
// lives in an allocation of its own. And the check before a wait reads the
// word's `stopped`, not the stop source's state (another allocation): with
// a thousand fibers both were cache misses at every wait (perf annotate of
// the echo server at 1000 connections: the relay's share of the profile
// fell from 2.9 % to 2.2 %, the check's from 0.5 % to 0.1 %; what is left
// is the two locked instructions).
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
    // Every access to the relay word is a read-modify-write (acq_rel) but
    // the fiber's spin and the check before a wait (acquire): the
    // callback's fetch_or pairs with the fiber's, so it sees the target's
    // fields; its fetch_and (release) with the fiber's fetch_and or spin, so
    // its request is complete before the target goes away.
    struct fire {
        std::atomic<std::uintptr_t>* word;  // the fiber's stop_word
        void operator()() const noexcept {
            std::uintptr_t old = word->fetch_or(stopped | busy, std::memory_order_acq_rel);
            if (auto t = old & ~flags; t != 0) {
                auto* target = reinterpret_cast<cancel_target*>(t);
                target->request(target);
            }
            word->fetch_and(~busy, std::memory_order_acq_rel);
        }
    };
    std::stop_callback<fire> cb;

    explicit relay(spindle::detail::fiber_ctx* f)
        : spindle::detail::stop_relay{&destroy_relay}, cb(f->stop.get_token(), fire{&f->stop_word}) {}

    static void destroy_relay(spindle::detail::stop_relay* self) noexcept {
        delete static_cast<relay*>(self);  // ~stop_callback waits for a running callback
    }
};

// The fiber's relay word, its callback registered first if need be.
std::atomic<std::uintptr_t>& word_of(spindle::detail::fiber_ctx* f) {
    if (f->relay == nullptr) f->relay = new relay(f);
    return f->stop_word;
}

}  // namespace

bool own_stop_requested() noexcept {
    spindle::detail::fiber_ctx* f = spindle::detail::running_fiber();
    if (f == nullptr) return false;
    // Once the relay's callback is registered, `stopped` says the same as
    // the stop source for every request that happened before this call
    // (request_stop runs the callbacks before it returns); a request racing
    // with the call reaches the wait through the word instead. acquire:
    // pairs with the callback's fetch_or, as in the relay word's protocol.
    if (f->relay != nullptr) return (f->stop_word.load(std::memory_order_acquire) & stopped) != 0;
    return f->stop.stop_requested();
}

own_stop::own_stop(cancel_target* target) {
    static_assert(alignof(cancel_target) > flags, "the relay word keeps its flags in a target's low bits");
    std::atomic<std::uintptr_t>& word = word_of(spindle::detail::running_fiber());
    word_ = &word;
    // acq_rel: the relay word's protocol (relay).
    if (word.fetch_or(reinterpret_cast<std::uintptr_t>(target), std::memory_order_acq_rel) & stopped)
        target->request(target);
}

own_stop::~own_stop() {
    // acq_rel / acquire: the relay word's protocol (relay).
    if (word_->fetch_and(flags, std::memory_order_acq_rel) & busy) {
        while (word_->load(std::memory_order_acquire) & busy) spindle::arch::cpu_relax();
    }
}

}  // namespace spindle::io::detail
