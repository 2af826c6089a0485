// spindle/locks/guard.hpp — scoped guards that Clang's thread-safety
// analysis follows.
//
// Every lock of spindle carries capability annotations (SPINDLE_CAPABILITY,
// SPINDLE_ACQUIRE, ...; arch/config.hpp), so a field SPINDLE_GUARDED_BY(m)
// is checked at each use under -Wthread-safety. The standard guards carry
// none in libstdc++: inside `std::lock_guard g(m);` the analysis does not
// know m is held, and every use of the field is reported (or the check is
// switched off, and then nothing is). These guards are the same RAII, marked
// as scoped capabilities: the constructor acquires the lock for the scope,
// the destructor releases it, and a use of the field before, after or
// without the guard is an error the compiler reports.
//
//     guard                                   constructor             destructor
//     lock_guard<L> g(l)                      l.lock()          (1)   l.unlock()
//     lock_guard<L> g(l, std::adopt_lock)     nothing; l held   (2)   l.unlock()
//     shared_lock_guard<L> g(l)               l.lock_shared()   (3)   l.unlock_shared()
//     shared_lock_guard<L> g(l, std::adopt_lock)  nothing; l held shared (4)   l.unlock_shared()
//
//     (1) ACQUIRE(l)   (2) REQUIRES(l)   (3) ACQUIRE_SHARED(l)   (4) REQUIRES_SHARED(l)
//
// L is any lock of spindle with that member (the thread locks of locks/,
// tclock, tclock_shared, spindle::mutex, cqs_mutex, shared_mutex) or any
// other type annotated the same way; with an unannotated type the guard
// works and the analysis simply learns nothing. Neither guard can be copied
// or moved: the scope is the hold.
//
//     struct account {
//         spindle::mutex m;
//         long balance SPINDLE_GUARDED_BY(m) = 0;
//         void deposit(long x) {
//             spindle::lock_guard g(m);
//             balance += x;             // checked: m is held here
//         }
//         long peek() { return balance; }  // -Wthread-safety: reading 'balance' requires holding 'm'
//     };
//
// (tests/locks/thread_safety_test.cpp uses each guard the right way and,
// for the misuse check, the wrong ways.)
#pragma once

#include <mutex>  // std::adopt_lock_t

#include <spindle/arch/config.hpp>

namespace spindle {

template <class L>
class SPINDLE_SCOPED_CAPABILITY lock_guard {
public:
    [[nodiscard]] explicit lock_guard(L& l) SPINDLE_ACQUIRE(l) : l_(l) { l.lock(); }
    // Takes over a hold the caller already has.
    [[nodiscard]] lock_guard(L& l, std::adopt_lock_t) SPINDLE_REQUIRES(l) : l_(l) {}
    ~lock_guard() SPINDLE_RELEASE() { l_.unlock(); }

    lock_guard(const lock_guard&) = delete;
    lock_guard& operator=(const lock_guard&) = delete;

private:
    L& l_;
};

template <class L>
class SPINDLE_SCOPED_CAPABILITY shared_lock_guard {
public:
    [[nodiscard]] explicit shared_lock_guard(L& l) SPINDLE_ACQUIRE_SHARED(l) : l_(l) { l.lock_shared(); }
    // Takes over a shared hold the caller already has.
    [[nodiscard]] shared_lock_guard(L& l, std::adopt_lock_t) SPINDLE_REQUIRES_SHARED(l) : l_(l) {}
    // RELEASE, not RELEASE_SHARED: a scoped capability's destructor releases
    // whatever it holds, in whichever mode (Clang's convention).
    ~shared_lock_guard() SPINDLE_RELEASE() { l_.unlock_shared(); }

    shared_lock_guard(const shared_lock_guard&) = delete;
    shared_lock_guard& operator=(const shared_lock_guard&) = delete;

private:
    L& l_;
};

}  // namespace spindle
