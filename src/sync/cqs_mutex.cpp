// spindle::cqs_mutex (include/spindle/sync/cqs_mutex.hpp): the debug checks;
// everything else is detail::semaphore_core with one permit.
#include <spindle/sync/cqs_mutex.hpp>

#include <spindle/arch/fatal.hpp>
#include <spindle/runtime/fiber.hpp>

namespace spindle {

using detail::fatal;

cqs_mutex::~cqs_mutex() {
#if SPINDLE_DEBUG_CHECKS
    const std::int64_t c = core_.count();  // a misuse check, not synchronization
    if (c != 1)
        fatal("spindle::cqs_mutex %p destroyed while %s", static_cast<void*>(this),
              c == 0 ? "held" : "held and waited on");
#endif
}

#if SPINDLE_DEBUG_CHECKS
void cqs_mutex::check_owner() noexcept {
    // relaxed: a misuse check, not synchronization; a correct caller wrote
    // owner_ itself.
    if (core_.count() == 1)
        fatal("spindle::cqs_mutex %p: unlock() of a mutex that is not locked", static_cast<void*>(this));
    if (owner_.load(std::memory_order_relaxed) != detail::caller_identity())
        fatal("spindle::cqs_mutex %p: unlock() by a caller that does not hold it", static_cast<void*>(this));
    // Before the release: a waiter it hands the mutex to writes its own
    // identity after its wake-up, which the release orders after this store.
    // Until then a second unlock() by us finds no owner, not us.
    owner_.store(nullptr, std::memory_order_relaxed);
}

void cqs_mutex::check_not_owner() noexcept {
    // relaxed: only the holder ever finds itself here (check_owner forgets
    // the owner before every release), and it reads its own store.
    if (owner_.load(std::memory_order_relaxed) == detail::caller_identity())
        fatal("spindle::cqs_mutex %p: lock() by the caller that holds it (it would wait for itself forever)",
              static_cast<void*>(this));
}
#endif

}  // namespace spindle
