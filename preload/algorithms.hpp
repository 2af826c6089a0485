// preload/algorithms.hpp — the SPINDLE_LOCK values and what each one uses.
//
// Each algorithm names the lock that goes inside pthread_mutex_t (and is the
// writers' lock of pthread_rwlock_t) and the 32-bit lock of
// pthread_spinlock_t (spin.hpp says why that one differs).
#pragma once

#include "spin.hpp"
#include "standin_lock.hpp"

namespace spindle::preload {

#define SPINDLE_PRELOAD_ALGORITHM(id, lock_type, spin_type) \
    struct id {                                              \
        static constexpr const char name[] = #id;            \
        using lock = lock_type;                              \
        using spin = spin_type;                              \
    };

SPINDLE_PRELOAD_ALGORITHM(hemlock, standin_lock, ticket_spin)
SPINDLE_PRELOAD_ALGORITHM(mcs, standin_lock, ticket_spin)
SPINDLE_PRELOAD_ALGORITHM(clh, standin_lock, ticket_spin)
SPINDLE_PRELOAD_ALGORITHM(ticket, standin_lock, ticket_spin)
SPINDLE_PRELOAD_ALGORITHM(tas, standin_lock, tas_spin)
SPINDLE_PRELOAD_ALGORITHM(ttas, standin_lock, ttas_spin)

#undef SPINDLE_PRELOAD_ALGORITHM

// X(algorithm) for each; the first is the default.
#define SPINDLE_PRELOAD_ALGORITHMS(X) X(hemlock) X(mcs) X(clh) X(ticket) X(tas) X(ttas)

}  // namespace spindle::preload
