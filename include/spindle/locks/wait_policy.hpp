// spindle/locks/wait_policy.hpp — how a thread lock waits: spin, or spin then
// sleep.
//
// Every lock of locks/ is a template over one of these, with two names for
// its two instantiations:
//
//     spindle::ticket_lock       = basic_ticket_lock<spin_wait>
//     spindle::ticket_park_lock  = basic_ticket_lock<park_wait> behind a gate
//
// and likewise tas_lock / tas_park_lock, ttas_lock / ttas_park_lock,
// mcs_lock / mcs_park_lock, clh_lock / clh_park_lock, hemlock / hemlock_park
// (and the Hemlock variants hemlock_naive[_park], hemlock_overlap[_park],
// hemlock_aho[_park]).
//
//   spin_wait   waiters spin with cpu_relax() (PAUSE / YIELD) until they are
//               let in; unlock is what the paper behind each lock says it
//               is (often one plain store). For machines with a CPU per
//               waiting thread. One concession to oversubscription: every
//               yield_every steps (tens of microseconds, far longer than a
//               handover between running threads takes) a waiter calls
//               sched_yield() once. Without it, more spinners than CPUs
//               turn a FIFO lock into a convoy -- the thread the lock was
//               handed to waits for a time slice while the others burn
//               theirs (8 threads on 2 CPUs: minutes for what takes
//               milliseconds). Throughput still collapses there; use park.
//   park_wait   waiters spin `spin_steps` cpu_relax steps (a few
//               microseconds: a handoff that comes that soon costs no system
//               call on either side), then sleep on a futex. Each lock keeps
//               a "somebody sleeps" mark in its words, so an unlock makes a
//               FUTEX_WAKE only when a waiter may sleep: the uncontended
//               paths never enter the kernel. For oversubscribed machines,
//               and for locks held across blocking calls. The FIFO
//               families' park twins (ticket, MCS, CLH, Hemlock) put a
//               futex gate in front of basic_X<park_wait>, which then only
//               orders the waiters: detail/park_gate.hpp.
//
// A policy is a type with `parks` (bool) and `spin_steps` (unsigned) where it
// parks, `yield_every` where it does not; tests pass their own (the Hemlock model spins once before it
// parks, to reach the sleeping paths in few steps).
#pragma once

#include <spindle/arch/context.hpp>  // cpu_relax
#include <spindle/locks/detail/futex.hpp>

namespace spindle {

struct spin_wait {
    static constexpr bool parks = false;
    static constexpr unsigned yield_every = 1024;  // cpu_relax steps between two sched_yield calls
};

struct park_wait {
    static constexpr bool parks = true;
    // cpu_relax steps before sleeping: 128 PAUSEs are 1-5 us on current
    // x86-64 parts, about one short critical section plus a handoff.
    static constexpr unsigned spin_steps = 128;
};

namespace detail {

// One step of a spin_wait waiter: cpu_relax, and a sched_yield every
// yield_every steps. `steps` counts them (start it at 0).
template <class Wait>
SPINDLE_ALWAYS_INLINE void spin_step(unsigned& steps) noexcept {
    if (++steps % Wait::yield_every == 0) [[unlikely]]
        sched_yield_now();
    else
        arch::cpu_relax();
}

}  // namespace detail

}  // namespace spindle
