// A fiber's own stop token, relayed to the wait in progress (io_internal.hpp,
// own_stop).
//
// An I/O call without a token of its own observes its fiber's. Registering
// a std::stop_callback per wait cost six atomic read-modify-writes (the
// token's reference count, and the stop state's lock taken twice), ~85 % of
// uring_perform's samples in the echo benchmark. Instead each fiber gets,
// on its first such wait, one callback for its whole life, and each wait
// publishes itself in the relay's slot (one store and a fence) and takes
// itself out again (one CAS):
//
//     slot:  0           no wait in progress
//            busy        the callback is reading the wait it took out
//            target*     the fiber waits on this target
//
//   fiber (arm)                      callback (stop requested, any thread)
//   slot = target (release)          [the stop state is set before it runs]
//   fence seq_cst --------------+    fence seq_cst
//   stop requested? -> request  +--- t = exchange(slot, busy)
//   ... park ...                     t is a target -> request(t)
//   CAS slot target -> 0,            slot = t (release)
//     spinning while busy
//
// The two fences order "store the slot, then read the stop state" against
// "set the stop state, then read the slot": at least one side sees the
// other, so a stop requested around arming is never lost (both may see it:
// a request is idempotent). The fiber cannot take its target out while the
// callback holds it (busy), so the target outlives every request made on
// it.
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

struct relay final : spindle::detail::stop_relay {
    // The wait in progress (above). The callback's exchange (acq_rel) pairs
    // with the fiber's release store in own_stop(); its release restore
    // with the fiber's CAS in ~own_stop() (acquire).
    std::atomic<std::uintptr_t> slot{0};
    struct fire {
        relay* r;
        void operator()() const noexcept {
            // seq_cst: pairs with own_stop's fence (the table above).
            std::atomic_thread_fence(std::memory_order_seq_cst);
            std::uintptr_t t = r->slot.exchange(busy, std::memory_order_acq_rel);
            if (t != 0) {
                auto* target = reinterpret_cast<cancel_target*>(t);
                target->request(target);
            }
            r->slot.store(t, std::memory_order_release);
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

own_stop::own_stop(cancel_target* target) : target_(target) {
    spindle::detail::fiber_ctx* f = spindle::detail::running_fiber();
    relay* r = relay_of(f);
    relay_ = r;
    // release: pairs with the callback's exchange (acquire half), which
    // then sees the target's fields as they were written.
    r->slot.store(reinterpret_cast<std::uintptr_t>(target), std::memory_order_release);
    // seq_cst: pairs with the callback's fence (the table above).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (f->stop.stop_requested()) target->request(target);
}

own_stop::~own_stop() {
    auto* r = static_cast<relay*>(relay_);
    const auto mine = reinterpret_cast<std::uintptr_t>(target_);
    std::uintptr_t want = mine;
    // acquire: pairs with the callback's release restore, so its request on
    // the target is complete before the target goes away.
    while (!r->slot.compare_exchange_weak(want, 0, std::memory_order_acquire, std::memory_order_relaxed)) {
        want = mine;
        spindle::arch::cpu_relax();
    }
}

}  // namespace spindle::io::detail
