// The condition variables' cancellation storm, shared by
// condition_variable_test.cpp and condition_variable_any_test.cpp.
//
// Consumers wait for tickets with every kind of wait -- plain, timed, with a
// stop token (a stopper thread keeps requesting stops), fibers and threads
// mixed -- while a producer hands tickets out with notify_one and
// notify_all, under the lock and after it. A cancelled wait returns holding
// the lock and takes nothing; a ticket is taken at most once; nobody hangs
// (no notification lost); and at the end every ticket was taken.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "fiber_fixtures.hpp"

namespace spindle::test {

struct cv_storm_shape {
    int fibers;              // consumers on the scheduler
    int threads;             // consumers on plain threads
    int takes;               // tickets each consumer takes
    unsigned consumer_seed;  // consumer i draws its waits from i * 7919 + consumer_seed
    unsigned producer_seed;
};

struct cv_storm_counts {
    long long taken;
    long long cancelled;  // waits that timed out or were stopped
};

// Runs the storm on `sched` with mutex `m` and condition variable `cv`;
// checks what the header says and returns the counts.
template <class Mutex, class CV>
cv_storm_counts run_cv_cancellation_storm(scheduler& sched, Mutex& m, CV& cv, cv_storm_shape shape) {
    long long tickets = 0;  // guarded by m
    bool closing = false;   // guarded by m: the producer is done, take what is left
    std::atomic<long long> taken{0}, cancelled{0};
    std::atomic<int> not_holding{0};
    stop_slots sources;
    std::atomic<bool> stopping{false};
    const long long total = static_cast<long long>(shape.fibers + shape.threads) * shape.takes;
    auto consume = [&](int i) {
        std::minstd_rand rng(static_cast<unsigned>(i) * 7919u + shape.consumer_seed);
        int mine = 0;
        while (mine < shape.takes) {
            std::unique_lock lk(m);
            auto ready = [&] { return tickets > 0 || closing; };
            bool ok;
            switch (rng() % 4) {
            case 0:
                cv.wait(lk, ready);
                ok = true;
                break;
            case 1: ok = cv.wait_for(lk, std::chrono::microseconds(rng() % 300), ready); break;
            case 2:
                ok = cv.wait_until(lk, std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 300),
                                   ready);
                break;
            default: ok = cv.wait(lk, sources.token(static_cast<std::size_t>(i)), ready); break;
            }
            if (!lk.owns_lock()) not_holding.fetch_add(1);
            if (!ok) {
                cancelled.fetch_add(1, std::memory_order_relaxed);
                continue;
            }
            if (tickets == 0) return;  // closing and nothing left
            --tickets;
            ++mine;
            taken.fetch_add(1, std::memory_order_relaxed);
        }
    };
    std::thread stopper([&] {
        while (!stopping.load()) sources.stop_one_round(std::chrono::microseconds(15));
    });
    std::thread producer([&] {
        std::minstd_rand rng(shape.producer_seed);
        for (long long n = 0; n < total;) {
            const long long batch = 1 + static_cast<long long>(rng() % 4);
            std::unique_lock lk(m);
            const long long k = std::min(batch, total - n);
            tickets += k;
            n += k;
            if (rng() % 2 == 0) lk.unlock();  // notify after the lock, else under it
            if (k == 1) cv.notify_one();
            else cv.notify_all();
            if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        std::lock_guard g(m);
        closing = true;
        cv.notify_all();
    });
    run_crowd(sched, {.fibers = shape.fibers, .threads = shape.threads, .first_thread = shape.fibers}, consume);
    producer.join();
    stopping.store(true);
    stopper.join();
    EXPECT_EQ(not_holding.load(), 0);
    EXPECT_EQ(taken.load(), total);  // every ticket taken once, each consumer its `takes`
    std::lock_guard g(m);
    EXPECT_EQ(tickets, 0);
    return {taken.load(), cancelled.load()};
}

}  // namespace spindle::test
