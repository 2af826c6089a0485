// tests/locks/thread_safety_test.cpp — the Clang thread-safety annotations of
// every thread lock, checked both ways.
//
// Built normally (part of spindle_tests), this file uses each lock the right
// way on data GUARDED_BY it: under Clang, -Wthread-safety -Werror (the clang
// preset) fails the build if an annotation is missing or wrong (a lock()
// that does not acquire, a try_lock() without its success value, ...).
//
// Built with SPINDLE_TSA_MISUSE (the ctest locks.thread_safety_misuse, Clang
// only: tests/locks/thread_safety_misuse.cmake), it adds, for each lock, a
// write without the lock and an unlock of a lock not held, and the check
// counts Clang's diagnostics: one of each per lock. That half is what shows
// the annotations are not no-ops.
//
// The scoped guards (locks/guard.hpp) are checked the same way, over every
// thread lock and the sync layer's mutexes: a field read and written under
// a guard compiles clean; written after the guard's scope, or read with no
// guard at all, it is diagnosed (and for the shared guard, a write under
// it and a read after it).
#include <mutex>  // std::adopt_lock

#include <spindle/locks/guard.hpp>
#include <spindle/locks/futex_cond.hpp>
#include <spindle/locks/locks.hpp>
#include <spindle/locks/rw_lock.hpp>
#include <spindle/locks/tclock.hpp>
#include <spindle/locks/tclock_shared.hpp>
#include <spindle/sync/cqs_mutex.hpp>
#include <spindle/sync/mutex.hpp>
#include <spindle/sync/shared_mutex.hpp>

#ifndef SPINDLE_TSA_MISUSE
#include <gtest/gtest.h>
#endif

namespace {

// One struct per lock type: Clang checks non-template code as written.
#define SPINDLE_TSA_CASE(L, id)                                                                                \
    struct guarded_##id {                                                                                      \
        spindle::L m;                                                                                         \
        int n SPINDLE_GUARDED_BY(m) = 0;                                                                      \
        void add() {                                                                                           \
            m.lock();                                                                                          \
            ++n;                                                                                               \
            m.unlock();                                                                                        \
        }                                                                                                      \
        bool try_add() {                                                                                       \
            if (!m.try_lock()) return false;                                                                   \
            ++n;                                                                                               \
            m.unlock();                                                                                        \
            return true;                                                                                       \
        }                                                                                                      \
        int read() SPINDLE_REQUIRES(m) { return n; }                                                           \
        SPINDLE_TSA_MISUSE_CASE                                                                                \
    };

#ifdef SPINDLE_TSA_MISUSE
#define SPINDLE_TSA_MISUSE_CASE                                                                                \
    void write_unlocked() { n = 1; }      /* diagnosed: a write without m */                                   \
    void unlock_unheld() { m.unlock(); }  /* diagnosed: a release of m, not held */
#else
#define SPINDLE_TSA_MISUSE_CASE
#endif

SPINDLE_TSA_CASE(tas_lock, 1)
SPINDLE_TSA_CASE(tas_park_lock, 2)
SPINDLE_TSA_CASE(ttas_lock, 3)
SPINDLE_TSA_CASE(ttas_park_lock, 4)
SPINDLE_TSA_CASE(ticket_lock, 5)
SPINDLE_TSA_CASE(ticket_park_lock, 6)
SPINDLE_TSA_CASE(mcs_lock, 7)
SPINDLE_TSA_CASE(mcs_park_lock, 8)
SPINDLE_TSA_CASE(clh_lock, 9)
SPINDLE_TSA_CASE(clh_park_lock, 10)
SPINDLE_TSA_CASE(hemlock, 11)
SPINDLE_TSA_CASE(hemlock_park, 12)
SPINDLE_TSA_CASE(hemlock_naive, 13)
SPINDLE_TSA_CASE(hemlock_naive_park, 14)
SPINDLE_TSA_CASE(hemlock_overlap, 15)
SPINDLE_TSA_CASE(hemlock_overlap_park, 16)
SPINDLE_TSA_CASE(hemlock_aho, 17)
SPINDLE_TSA_CASE(hemlock_aho_park, 18)
SPINDLE_TSA_CASE(tclock, 19)
SPINDLE_TSA_CASE(tclock_blocking, 20)
SPINDLE_TSA_CASE(tclock_shared, 21)
SPINDLE_TSA_CASE(compact_ticket_lock, 22)
SPINDLE_TSA_CASE(rw_lock, 23)

// The reader side of tclock_shared.
struct guarded_shared {
    spindle::tclock_shared m;
    int n SPINDLE_GUARDED_BY(m) = 0;
    int read() {
        m.lock_shared();
        const int v = n;
        m.unlock_shared();
        return v;
    }
#ifdef SPINDLE_TSA_MISUSE
    void write_shared() {  // diagnosed: a write under a shared hold
        m.lock_shared();
        n = 1;
        m.unlock_shared();
    }
#endif
};

// The guards. The lock is `mu` and the field `v` here, so that the misuse
// check counts these diagnostics apart from the ones above.
#define SPINDLE_TSA_GUARD_CASE(L, id)                                                                          \
    struct scoped_##id {                                                                                       \
        L mu;                                                                                                  \
        int v SPINDLE_GUARDED_BY(mu) = 0;                                                                     \
        void add() {                                                                                           \
            spindle::lock_guard g(mu);                                                                         \
            ++v;                                                                                               \
        }                                                                                                      \
        void add_adopted() {                                                                                   \
            mu.lock();                                                                                         \
            spindle::lock_guard g(mu, std::adopt_lock);                                                        \
            ++v;                                                                                               \
        }                                                                                                      \
        int read() {                                                                                           \
            spindle::lock_guard g(mu);                                                                         \
            return v;                                                                                          \
        }                                                                                                      \
        SPINDLE_TSA_GUARD_MISUSE_CASE                                                                          \
    };

#ifdef SPINDLE_TSA_MISUSE
#define SPINDLE_TSA_GUARD_MISUSE_CASE                                                                          \
    void write_after_scope() {                                                                                 \
        {                                                                                                      \
            spindle::lock_guard g(mu);                                                                         \
            ++v;                                                                                               \
        }                                                                                                      \
        v = 0; /* diagnosed: the guard released mu */                                                          \
    }                                                                                                          \
    int read_unguarded() { return v; } /* diagnosed: a read without mu */
#else
#define SPINDLE_TSA_GUARD_MISUSE_CASE
#endif

SPINDLE_TSA_GUARD_CASE(spindle::tas_lock, 1)
SPINDLE_TSA_GUARD_CASE(spindle::tas_park_lock, 2)
SPINDLE_TSA_GUARD_CASE(spindle::ttas_lock, 3)
SPINDLE_TSA_GUARD_CASE(spindle::ttas_park_lock, 4)
SPINDLE_TSA_GUARD_CASE(spindle::ticket_lock, 5)
SPINDLE_TSA_GUARD_CASE(spindle::ticket_park_lock, 6)
SPINDLE_TSA_GUARD_CASE(spindle::mcs_lock, 7)
SPINDLE_TSA_GUARD_CASE(spindle::mcs_park_lock, 8)
SPINDLE_TSA_GUARD_CASE(spindle::clh_lock, 9)
SPINDLE_TSA_GUARD_CASE(spindle::clh_park_lock, 10)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock, 11)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock_park, 12)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock_naive, 13)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock_naive_park, 14)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock_overlap, 15)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock_overlap_park, 16)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock_aho, 17)
SPINDLE_TSA_GUARD_CASE(spindle::hemlock_aho_park, 18)
SPINDLE_TSA_GUARD_CASE(spindle::tclock, 19)
SPINDLE_TSA_GUARD_CASE(spindle::tclock_blocking, 20)
SPINDLE_TSA_GUARD_CASE(spindle::tclock_shared, 21)
SPINDLE_TSA_GUARD_CASE(spindle::mutex, 22)
SPINDLE_TSA_GUARD_CASE(spindle::cqs_mutex, 23)
SPINDLE_TSA_GUARD_CASE(spindle::shared_mutex, 24)
SPINDLE_TSA_GUARD_CASE(spindle::compact_ticket_lock, 25)
SPINDLE_TSA_GUARD_CASE(spindle::rw_lock, 26)

// The shared guard, over the reader-writer locks.
#define SPINDLE_TSA_SHARED_GUARD_CASE(L, id)                                                                   \
    struct shared_scoped_##id {                                                                                \
        L mu;                                                                                                  \
        int v SPINDLE_GUARDED_BY(mu) = 0;                                                                     \
        void add() {                                                                                           \
            spindle::lock_guard g(mu);                                                                         \
            ++v;                                                                                               \
        }                                                                                                      \
        int read() {                                                                                           \
            spindle::shared_lock_guard g(mu);                                                                  \
            return v;                                                                                          \
        }                                                                                                      \
        int read_adopted() {                                                                                   \
            mu.lock_shared();                                                                                  \
            spindle::shared_lock_guard g(mu, std::adopt_lock);                                                 \
            return v;                                                                                          \
        }                                                                                                      \
        SPINDLE_TSA_SHARED_GUARD_MISUSE_CASE                                                                   \
    };

#ifdef SPINDLE_TSA_MISUSE
#define SPINDLE_TSA_SHARED_GUARD_MISUSE_CASE                                                                   \
    void write_shared() {                                                                                      \
        spindle::shared_lock_guard g(mu);                                                                      \
        v = 1; /* diagnosed: a write under a shared hold */                                                    \
    }                                                                                                          \
    int read_after_scope() {                                                                                   \
        { spindle::shared_lock_guard g(mu); }                                                                  \
        return v; /* diagnosed: the guard released mu */                                                       \
    }
#else
#define SPINDLE_TSA_SHARED_GUARD_MISUSE_CASE
#endif

SPINDLE_TSA_SHARED_GUARD_CASE(spindle::tclock_shared, 1)
SPINDLE_TSA_SHARED_GUARD_CASE(spindle::shared_mutex, 2)
SPINDLE_TSA_SHARED_GUARD_CASE(spindle::rw_lock, 3)
// The reader side of rw_lock.
struct guarded_rw_shared {
    spindle::rw_lock m;
    int n SPINDLE_GUARDED_BY(m) = 0;
    int read() {
        m.lock_shared();
        const int v = n;
        m.unlock_shared();
        return v;
    }
#ifdef SPINDLE_TSA_MISUSE
    void write_shared() {  // diagnosed: a write under a shared hold
        m.lock_shared();
        n = 1;
        m.unlock_shared();
    }
#endif
};


// A condition variable wait: wait() requires the lock and keeps it held.
struct guarded_cond {
    spindle::ticket_lock m;
    spindle::futex_cond cv;
    int n SPINDLE_GUARDED_BY(m) = 0;
    int wait_for_one() {
        m.lock();
        while (n == 0) cv.wait(m);
        const int v = n;
        m.unlock();
        return v;
    }
    void post() {
        m.lock();
        ++n;
        m.unlock();
        cv.notify_one();
    }
};

}  // namespace

#ifndef SPINDLE_TSA_MISUSE
// The right uses also run, once each.
template <class G>
void use_once() {
    G g;
    g.add();
    EXPECT_TRUE(g.try_add());
    g.m.lock();
    EXPECT_EQ(g.read(), 2);
    g.m.unlock();
}

TEST(LockAnnotations, RightUsesCompileCleanAndRun) {
    use_once<guarded_1>();
    use_once<guarded_2>();
    use_once<guarded_3>();
    use_once<guarded_4>();
    use_once<guarded_5>();
    use_once<guarded_6>();
    use_once<guarded_7>();
    use_once<guarded_8>();
    use_once<guarded_9>();
    use_once<guarded_10>();
    use_once<guarded_11>();
    use_once<guarded_12>();
    use_once<guarded_13>();
    use_once<guarded_14>();
    use_once<guarded_15>();
    use_once<guarded_16>();
    use_once<guarded_17>();
    use_once<guarded_18>();
    use_once<guarded_19>();
    use_once<guarded_20>();
    use_once<guarded_21>();
    use_once<guarded_22>();
    use_once<guarded_23>();
    guarded_shared s;
    EXPECT_EQ(s.read(), 0);
    guarded_rw_shared rs;
    EXPECT_EQ(rs.read(), 0);
    guarded_cond c;
    c.post();
    EXPECT_EQ(c.wait_for_one(), 1);
}

template <class G>
void use_guard_once() {
    G g;
    g.add();
    g.add_adopted();
    EXPECT_EQ(g.read(), 2);
}

template <class G>
void use_shared_guard_once() {
    G g;
    g.add();
    EXPECT_EQ(g.read(), 1);
    EXPECT_EQ(g.read_adopted(), 1);
}

TEST(LockAnnotations, GuardedFieldsUnderScopedGuardsCompileCleanAndRun) {
    use_guard_once<scoped_1>();
    use_guard_once<scoped_2>();
    use_guard_once<scoped_3>();
    use_guard_once<scoped_4>();
    use_guard_once<scoped_5>();
    use_guard_once<scoped_6>();
    use_guard_once<scoped_7>();
    use_guard_once<scoped_8>();
    use_guard_once<scoped_9>();
    use_guard_once<scoped_10>();
    use_guard_once<scoped_11>();
    use_guard_once<scoped_12>();
    use_guard_once<scoped_13>();
    use_guard_once<scoped_14>();
    use_guard_once<scoped_15>();
    use_guard_once<scoped_16>();
    use_guard_once<scoped_17>();
    use_guard_once<scoped_18>();
    use_guard_once<scoped_19>();
    use_guard_once<scoped_20>();
    use_guard_once<scoped_21>();
    use_guard_once<scoped_22>();
    use_guard_once<scoped_23>();
    use_guard_once<scoped_24>();
    use_shared_guard_once<shared_scoped_1>();
    use_shared_guard_once<shared_scoped_2>();
}
#endif
