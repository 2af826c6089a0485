// spindle::channel: buffered and rendezvous semantics; FIFO of elements, of
// waiting senders and of waiting receivers; move-only elements, and elements
// kept by every failed send; close() semantics; producers and consumers
// mixing fibers and threads over 1, 2, 4 and 8 workers (every element
// received exactly once, in order per producer); cancellation storms by stop
// requests, with and without a close in the middle (no element lost or
// duplicated, no wake-up lost); a few timeouts; the three handoff policies;
// misuse aborts in debug builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spindle/sync/channel.hpp>

#include "../support/fiber_fixtures.hpp"
#include "../support/last_reference.hpp"
#include "../support/thread_state.hpp"

namespace {

using namespace spindle::test;
using spindle::channel;
using spindle::channel_status;

#if SPINDLE_TSAN || SPINDLE_ASAN
constexpr int kPerProducer = 200;
#else
constexpr int kPerProducer = 800;
#endif

// Waits (yielding) until `pred` holds: for setting up a known queue state.
template <class Pred>
void until(Pred pred) {
    while (!pred()) this_fiber::yield();
}

std::uint64_t tag(std::uint64_t producer, std::uint64_t seq) { return producer << 32 | seq; }

// ---- single-threaded semantics ------------------------------------------------

TEST(Channel, BufferedElementsComeOutInOrderAndTheRingWraps) {
    channel<int> ch(3);
    EXPECT_EQ(ch.capacity(), 3u);
    EXPECT_FALSE(ch.closed());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(ch.try_send(i), channel_status::ok);
    EXPECT_EQ(ch.try_send(3), channel_status::full);
    EXPECT_EQ(ch.size(), 3u);
    EXPECT_EQ(ch.debug_permits(), 3);
    for (int i = 0; i < 3; ++i) {
        auto r = ch.try_receive();
        ASSERT_TRUE(r);
        EXPECT_EQ(*r, i);
    }
    auto none = ch.try_receive();
    EXPECT_EQ(none.status, channel_status::empty);
    EXPECT_FALSE(none.value.has_value());
    // Blocking operations that need not wait, over many wraps of the ring.
    int next_in = 100, next_out = 100;
    for (int round = 0; round < 50; ++round) {
        for (int k = 0; k < 1 + round % 3; ++k) EXPECT_EQ(ch.send(next_in++), channel_status::ok);
        while (next_out < next_in) {
            auto r = ch.receive();
            ASSERT_TRUE(r);
            EXPECT_EQ(*r, next_out++);
        }
    }
    EXPECT_EQ(ch.size(), 0u);
    EXPECT_EQ(ch.debug_permits(), 0);
    const int copied = 5;  // the const T& overloads copy
    EXPECT_EQ(ch.send(copied), channel_status::ok);
    EXPECT_EQ(*ch.receive(), 5);
}

TEST(Channel, ASenderWaitsForRoomThenItsElementGoesInItsTurn) {
    channel<int> ch(1);
    ASSERT_EQ(ch.send(1), channel_status::ok);
    std::atomic<bool> done{false};
    std::thread t([&] {
        EXPECT_EQ(ch.send(2), channel_status::ok);
        done.store(true);
    });
    until([&] { return ch.debug_permits() == 2; });  // 1 buffered, 2 queued with its sender
    std::this_thread::sleep_for(2ms);
    EXPECT_FALSE(done.load());  // no room yet: it cannot have finished
    EXPECT_EQ(ch.size(), 1u);
    EXPECT_EQ(*ch.receive(), 1);  // makes room: 2 moves into the buffer, its send is done
    t.join();
    EXPECT_TRUE(done.load());
    EXPECT_EQ(ch.size(), 1u);
    EXPECT_EQ(*ch.receive(), 2);
}

TEST(Channel, RendezvousSendCompletesOnlyOnceTaken) {
    channel<int> ch(0);
    EXPECT_EQ(ch.capacity(), 0u);
    EXPECT_EQ(ch.try_send(1), channel_status::full);  // nobody to take it
    EXPECT_EQ(ch.try_receive().status, channel_status::empty);
    std::atomic<bool> done{false};
    std::thread sender([&] {
        EXPECT_EQ(ch.send(5), channel_status::ok);
        done.store(true);
    });
    until([&] { return ch.debug_permits() == 1; });  // its element is on offer
    std::this_thread::sleep_for(2ms);
    EXPECT_FALSE(done.load());
    EXPECT_EQ(ch.size(), 0u);
    auto r = ch.try_receive();  // takes it straight from the sender
    ASSERT_TRUE(r);
    EXPECT_EQ(*r, 5);
    sender.join();
    EXPECT_TRUE(done.load());

    // try_send succeeds when a receiver waits, and returns once it took it.
    std::atomic<int> got{0};
    std::thread receiver([&] { got.store(*ch.receive()); });
    until([&] { return ch.debug_permits() == -1; });
    EXPECT_EQ(ch.try_send(6), channel_status::ok);
    receiver.join();
    EXPECT_EQ(got.load(), 6);
    EXPECT_EQ(ch.debug_permits(), 0);
}

TEST(Channel, MoveOnlyElementsAndFailedSendsKeepTheirElement) {
    scheduler sched({.workers = 2});
    for (std::size_t cap : {std::size_t{0}, std::size_t{1}}) {
        channel<std::unique_ptr<int>> ch(cap);
        if (cap == 1) {
            auto p = std::make_unique<int>(1);
            ASSERT_EQ(ch.send(std::move(p)), channel_status::ok);
            EXPECT_EQ(p, nullptr);  // moved from on ok
        }
        auto q = std::make_unique<int>(2);
        EXPECT_EQ(ch.try_send(std::move(q)), channel_status::full);
        ASSERT_NE(q, nullptr);
        EXPECT_EQ(ch.send_for(std::move(q), 1ms), channel_status::timeout);
        ASSERT_NE(q, nullptr);
        EXPECT_EQ(ch.send_until(std::move(q), std::chrono::steady_clock::now() - 1s), channel_status::timeout);
        ASSERT_NE(q, nullptr);
        std::stop_source stopped;
        stopped.request_stop();
        EXPECT_EQ(ch.send(std::move(q), stopped.get_token()), channel_status::cancelled);
        ASSERT_NE(q, nullptr);
        // A fiber stopped while it waits.
        fiber f = sched.spawn([&] {
            auto mine = std::make_unique<int>(3);
            EXPECT_EQ(ch.send(std::move(mine), this_fiber::get_stop_token()), channel_status::cancelled);
            ASSERT_NE(mine, nullptr);
            EXPECT_EQ(*mine, 3);
        });
        until([&] { return ch.debug_permits() == static_cast<std::int64_t>(cap) + 1; });
        f.request_stop();
        f.join();
        EXPECT_EQ(ch.debug_permits(), static_cast<std::int64_t>(cap));
        if (cap == 1) {
            auto r = ch.receive();
            ASSERT_TRUE(r);
            EXPECT_EQ(**r, 1);
        }
        EXPECT_TRUE(ch.close());
        EXPECT_EQ(ch.send(std::move(q)), channel_status::closed);
        ASSERT_NE(q, nullptr);
        EXPECT_EQ(*q, 2);
        EXPECT_EQ(ch.receive().status, channel_status::closed);
    }
}

TEST(Channel, StringsCrossBetweenFibersAndThreads) {
    scheduler sched({.workers = 2});
    for (std::size_t cap : {std::size_t{0}, std::size_t{2}}) {
        channel<std::string> to_thread(cap), to_fiber(cap);
        const std::string long_text(200, 'x');  // beyond any small-string buffer
        std::thread echo([&] {
            while (auto r = to_thread.receive()) ASSERT_EQ(to_fiber.send(std::move(*r) + "!"), channel_status::ok);
            to_fiber.close();
        });
        fiber f = sched.spawn([&] {
            for (int i = 0; i < 50; ++i) {
                ASSERT_EQ(to_thread.send(long_text + std::to_string(i)), channel_status::ok);
                auto r = to_fiber.receive();
                ASSERT_TRUE(r);
                EXPECT_EQ(*r, long_text + std::to_string(i) + "!");
            }
            to_thread.close();
            EXPECT_EQ(to_fiber.receive().status, channel_status::closed);
        });
        f.join();
        echo.join();
    }
}

TEST(Channel, CloseFailsSendsAndReceiversDrainFirst) {
    channel<int> ch(4);
    ASSERT_EQ(ch.send(0), channel_status::ok);
    ASSERT_EQ(ch.send(1), channel_status::ok);
    ASSERT_EQ(ch.send(2), channel_status::ok);
    EXPECT_TRUE(ch.close());
    EXPECT_FALSE(ch.close());  // idempotent
    EXPECT_TRUE(ch.closed());
    EXPECT_EQ(ch.send(9), channel_status::closed);
    EXPECT_EQ(ch.try_send(9), channel_status::closed);
    EXPECT_EQ(ch.send_for(9, 1ms), channel_status::closed);
    EXPECT_EQ(*ch.receive(), 0);
    EXPECT_EQ(*ch.try_receive(), 1);
    std::stop_source stopped;
    stopped.request_stop();
    EXPECT_EQ(*ch.receive(stopped.get_token()), 2);  // an element there wins over a stop request
    EXPECT_EQ(ch.receive().status, channel_status::closed);
    EXPECT_EQ(ch.try_receive().status, channel_status::closed);
    EXPECT_EQ(ch.receive_for(1ms).status, channel_status::closed);
    EXPECT_EQ(ch.receive(stopped.get_token()).status, channel_status::closed);
    EXPECT_EQ(ch.size(), 0u);

    channel<int> rv(0);
    EXPECT_TRUE(rv.close());
    EXPECT_EQ(rv.send(1), channel_status::closed);
    EXPECT_EQ(rv.try_send(1), channel_status::closed);
    EXPECT_EQ(rv.receive().status, channel_status::closed);
    EXPECT_EQ(rv.try_receive().status, channel_status::closed);
}

TEST(Channel, CloseWakesEveryWaiterAndWaitingSendersKeepTheirElements) {
    scheduler sched({.workers = 2});
    for (std::size_t cap : {std::size_t{0}, std::size_t{1}}) {
        channel<std::unique_ptr<int>> full(cap), empty(cap);
        if (cap == 1) {
            ASSERT_EQ(full.send(std::make_unique<int>(-1)), channel_status::ok);
        }
        std::atomic<int> senders_closed{0}, receivers_closed{0};
        auto sender = [&](int i) {
            auto p = std::make_unique<int>(i);
            if (full.send(std::move(p)) == channel_status::closed && p && *p == i) senders_closed.fetch_add(1);
        };
        auto receiver = [&] {
            if (empty.receive().status == channel_status::closed) receivers_closed.fetch_add(1);
        };
        std::vector<fiber> fs;
        std::vector<std::thread> ts;
        for (int i = 0; i < 3; ++i) {
            fs.push_back(sched.spawn([&, i] { sender(i); }));
            fs.push_back(sched.spawn(receiver));
            ts.emplace_back([&, i] { sender(10 + i); });
            ts.emplace_back(receiver);
        }
        until([&] {
            return full.debug_permits() == static_cast<std::int64_t>(cap) + 6 && empty.debug_permits() == -6;
        });
        EXPECT_TRUE(full.close());
        EXPECT_TRUE(empty.close());
        for (auto& f : fs) f.join();
        for (auto& t : ts) t.join();
        EXPECT_EQ(senders_closed.load(), 6);
        EXPECT_EQ(receivers_closed.load(), 6);
        if (cap == 1) {  // the element buffered before close is still there
            auto r = full.receive();
            ASSERT_TRUE(r);
            EXPECT_EQ(**r, -1);
        }
        EXPECT_EQ(full.receive().status, channel_status::closed);
    }
}

// ---- FIFO, with one worker for a known arrival order ------------------------------

class ChannelCapacity : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ChannelCapacity, WaitingReceiversAreServedInArrivalOrder) {
    scheduler sched({.workers = 1});
    channel<int> ch(GetParam());
    constexpr int kReceivers = 20;
    std::vector<int> arrived, got_by(kReceivers, -1);  // one worker: no data race
    int received = 0;
    fiber outer = sched.spawn([&] {
        std::vector<fiber> fs;
        for (int i = 0; i < kReceivers; ++i) {
            fs.push_back(fiber([&, i] {
                arrived.push_back(i);  // just before queueing: one worker, no preemption
                auto r = ch.receive();
                ASSERT_TRUE(r);
                got_by[static_cast<std::size_t>(*r)] = i;
                ++received;
            }));
        }
        until([&] { return arrived.size() == kReceivers && ch.debug_permits() == -kReceivers; });
        for (int k = 0; k < kReceivers; ++k) {
            ASSERT_EQ(ch.send(k), channel_status::ok);
            until([&] { return received == k + 1; });
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(got_by, arrived);
    EXPECT_EQ(ch.debug_permits(), 0);
}

// Plain threads: each receiver starts once the one before is parked in its
// cell (the kernel says it sleeps), so the arrival order is known without
// timing; the k-th element goes to the k-th of them. (One send at a time:
// receivers are served -- given a permit -- in arrival order, and take the
// oldest element when they run, so two woken together may swap elements.)
TEST_P(ChannelCapacity, WaitingReceiverThreadsAreServedInArrivalOrder) {
    channel<int> ch(GetParam());
    constexpr int kReceivers = 8;
    std::vector<std::atomic<int>> got(kReceivers);
    std::atomic<int> received{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kReceivers; ++t) {
        got[static_cast<std::size_t>(t)].store(-1);
        std::atomic<pid_t> tid{0};
        ts.emplace_back([&, t] {
            tid.store(this_tid());
            auto r = ch.receive();
            got[static_cast<std::size_t>(t)].store(r ? *r : -2);
            received.fetch_add(1);
        });
        EXPECT_TRUE(parks(tid)) << "receiver " << t << " never parked";
    }
    EXPECT_EQ(ch.debug_permits(), -kReceivers);
    for (int k = 0; k < kReceivers; ++k) {
        EXPECT_EQ(ch.send(k + 100), channel_status::ok);
        while (received.load() < k + 1) std::this_thread::yield();
    }
    for (auto& t : ts) t.join();
    for (int t = 0; t < kReceivers; ++t) EXPECT_EQ(got[static_cast<std::size_t>(t)].load(), t + 100) << "receiver " << t;
    EXPECT_EQ(ch.debug_permits(), 0);
}

TEST_P(ChannelCapacity, WaitingSendersElementsGoInInTheirTurn) {
    scheduler sched({.workers = 1});
    const std::size_t cap = GetParam();
    channel<int> ch(cap);
    constexpr int kSenders = 20;
    std::vector<int> expected, out;
    fiber outer = sched.spawn([&] {
        for (std::size_t k = 0; k < cap; ++k) {
            ASSERT_EQ(ch.send(-1 - static_cast<int>(k)), channel_status::ok);
            expected.push_back(-1 - static_cast<int>(k));
        }
        std::vector<fiber> fs;
        for (int i = 0; i < kSenders; ++i) {
            fs.push_back(fiber([&, i] {
                expected.push_back(i);  // just before queueing
                EXPECT_EQ(ch.send(int{i}), channel_status::ok);
            }));
        }
        until([&] { return ch.debug_permits() == static_cast<std::int64_t>(cap) + kSenders; });
        // Take everything at once: the woken senders have not run yet, and
        // their elements still come out in their turn.
        for (std::size_t k = 0; k < cap + kSenders; ++k) {
            auto r = ch.receive();
            ASSERT_TRUE(r);
            out.push_back(*r);
        }
        for (auto& f : fs) f.join();
    });
    outer.join();
    EXPECT_EQ(out, expected);
    EXPECT_EQ(ch.debug_permits(), 0);
    EXPECT_EQ(ch.size(), 0u);
}

// Stop requests for parked waiters in the middle of the queue: the others
// keep their turns, and the permit count comes back exact.
TEST_P(ChannelCapacity, StoppedWaitersInTheMiddleAreSkipped) {
    scheduler sched({.workers = 1});
    const std::size_t cap = GetParam();
    channel<int> ch(cap);
    std::vector<int> got;
    std::vector<std::stop_source> src(6);
    int kept = 0;
    fiber outer = sched.spawn([&] {
        // Receivers: the even ones are stopped.
        std::vector<fiber> fs;
        for (int i = 0; i < 6; ++i) {
            fs.push_back(fiber([&, i] {
                auto r = ch.receive(src[static_cast<std::size_t>(i)].get_token());
                if (r) got.push_back(i * 100 + *r);
                else EXPECT_EQ(r.status, channel_status::cancelled);
            }));
            until([&] { return ch.debug_permits() == -(i + 1); });  // it queued
        }
        for (int i = 0; i < 6; i += 2) src[static_cast<std::size_t>(i)].request_stop();
        until([&] { return ch.debug_permits() == -3; });  // the stopped ones gave their counts back
        for (int k = 0; k < 3; ++k) {
            ASSERT_EQ(ch.send(int{k}), channel_status::ok);
            until([&] { return got.size() == static_cast<std::size_t>(k) + 1; });
        }
        for (auto& f : fs) f.join();
        EXPECT_EQ(got, (std::vector<int>{100, 301, 502}));
        fs.clear();
        // Senders: fill the buffer, queue six, stop the even ones.
        std::vector<std::stop_source> ssrc(6);
        for (std::size_t k = 0; k < cap; ++k) ASSERT_EQ(ch.send(-1), channel_status::ok);
        for (int i = 0; i < 6; ++i) {
            fs.push_back(fiber([&, i] {
                int v = i;
                const auto s = ch.send(std::move(v), ssrc[static_cast<std::size_t>(i)].get_token());
                if (s == channel_status::cancelled) {
                    EXPECT_EQ(v, i);  // kept
                    ++kept;
                } else {
                    EXPECT_EQ(s, channel_status::ok);
                }
            }));
            until([&] { return ch.debug_permits() == static_cast<std::int64_t>(cap) + i + 1; });  // it queued
        }
        for (int i = 0; i < 6; i += 2) ssrc[static_cast<std::size_t>(i)].request_stop();
        until([&] { return ch.debug_permits() == static_cast<std::int64_t>(cap) + 3; });
        got.clear();
        for (std::size_t k = 0; k < cap + 3; ++k) got.push_back(*ch.receive());
        for (auto& f : fs) f.join();
    });
    outer.join();
    std::vector<int> expected(cap, -1);
    expected.insert(expected.end(), {1, 3, 5});
    EXPECT_EQ(got, expected);
    EXPECT_EQ(kept, 3);
    EXPECT_EQ(ch.debug_permits(), 0);
}

INSTANTIATE_TEST_SUITE_P(Capacities, ChannelCapacity, ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{3}),
                         [](const ::testing::TestParamInfo<std::size_t>& i) {
                             return "capacity" + std::to_string(i.param);
                         });

TEST(Channel, TimeoutsLeaveNoTrace) {
    scheduler sched({.workers = 2});
    channel<int> empty(2), full(1), rv(0);
    ASSERT_EQ(full.send(1), channel_status::ok);
    fiber f = sched.spawn([&] {
        EXPECT_EQ(empty.receive_for(2ms).status, channel_status::timeout);
        EXPECT_EQ(rv.receive_for(2ms).status, channel_status::timeout);
        EXPECT_EQ(full.send_for(2, 2ms), channel_status::timeout);
        EXPECT_EQ(rv.send_for(2, 2ms), channel_status::timeout);
        EXPECT_EQ(empty.receive_until(std::chrono::system_clock::now() + 1ms).status, channel_status::timeout);
    });
    f.join();
    // Past deadlines do not queue.
    EXPECT_EQ(empty.receive_until(std::chrono::steady_clock::now() - 1s).status, channel_status::timeout);
    EXPECT_EQ(full.send_until(3, std::chrono::steady_clock::now() - 1s), channel_status::timeout);
    // Threads time out on the futex path.
    std::vector<std::thread> ts;
    std::atomic<int> timed_out{0};
    for (int i = 0; i < 3; ++i) {
        ts.emplace_back([&] {
            if (empty.receive_for(2ms).status == channel_status::timeout) timed_out.fetch_add(1);
        });
        ts.emplace_back([&] {
            if (full.send_for(7, 2ms) == channel_status::timeout) timed_out.fetch_add(1);
        });
        ts.emplace_back([&] {
            if (rv.send_for(7, 2ms) == channel_status::timeout) timed_out.fetch_add(1);
        });
    }
    for (auto& t : ts) t.join();
    EXPECT_EQ(timed_out.load(), 9);
    EXPECT_EQ(empty.debug_permits(), 0);
    EXPECT_EQ(full.debug_permits(), 1);
    EXPECT_EQ(rv.debug_permits(), 0);
    EXPECT_EQ(*full.receive(), 1);
    // A timed receive gets what a sender offers in time.
    std::thread late([&] {
        std::this_thread::sleep_for(1ms);
        EXPECT_EQ(rv.send(8), channel_status::ok);
    });
    auto r = rv.receive_for(10s);
    ASSERT_TRUE(r);
    EXPECT_EQ(*r, 8);
    late.join();
}

// ---- producers and consumers, fibers and threads ------------------------------

struct workers_and_capacity {
    unsigned workers;
    std::size_t capacity;
};

std::vector<workers_and_capacity> workers_and_capacities() {
    std::vector<workers_and_capacity> v;
    for (unsigned w : spindle::test::stress_workers)
        for (std::size_t c : {std::size_t{0}, std::size_t{1}, std::size_t{16}}) v.push_back({w, c});
    return v;
}

std::string workers_and_capacity_name(const ::testing::TestParamInfo<workers_and_capacity>& i) {
    return "capacity" + std::to_string(i.param.capacity) + "_" + std::to_string(i.param.workers) + "workers";
}

class ChannelStress : public ::testing::TestWithParam<workers_and_capacity> {};

// Each stress instance runs one handoff policy; over the grid, all three.
spindle::handoff policy_for(unsigned workers, std::size_t capacity) {
    return spindle::test::all_policies[(workers + capacity) % 3];
}

// Producers (fibers and threads, by send, try_send and send_for) and
// consumers (fibers and threads, by receive, try_receive and receive_for):
// every element is received exactly once, and each consumer sees each
// producer's elements in the order they were sent. The handoff policy
// varies with the parameters (policy_for).
TEST_P(ChannelStress, ProducersAndConsumersLoseNothingAndKeepOrder) {
    const auto [workers, capacity] = GetParam();
    scheduler sched(stress_options(workers));
    channel<std::uint64_t> ch(capacity, policy_for(workers, capacity));
    constexpr int kFiberProducers = 6, kThreadProducers = 2, kProducers = kFiberProducers + kThreadProducers;
    constexpr int kFiberConsumers = 5, kThreadConsumers = 2;
    std::vector<std::atomic<std::uint8_t>> seen(static_cast<std::size_t>(kProducers) * kPerProducer);
    std::atomic<int> order_violations{0}, duplicates{0};
    std::atomic<long long> received{0};

    auto produce = [&](int p) {
        for (int s = 0; s < kPerProducer; ++s) {
            std::uint64_t v = tag(static_cast<std::uint64_t>(p), static_cast<std::uint64_t>(s));
            switch ((p + s) % 4) {
            case 0:
            case 1: ASSERT_EQ(ch.send(std::move(v)), channel_status::ok); break;
            case 2:
                for (;;) {
                    const auto st = ch.try_send(std::move(v));
                    if (st == channel_status::ok) break;
                    ASSERT_EQ(st, channel_status::full);
                    this_fiber::yield();
                }
                break;
            default:
                if (p == 0) {  // one timed producer
                    while (ch.send_for(std::move(v), 1ms) != channel_status::ok) {
                    }
                } else {
                    ASSERT_EQ(ch.send(std::move(v)), channel_status::ok);
                }
                break;
            }
        }
    };
    auto consume = [&](int c) {
        std::vector<std::int64_t> last(kProducers, -1);
        for (;;) {
            spindle::receive_result<std::uint64_t> r;
            if (c % 3 == 1) {
                r = ch.try_receive();
                if (r.status == channel_status::empty) {
                    this_fiber::yield();
                    continue;
                }
            } else if (c == 0) {  // one timed consumer
                r = ch.receive_for(1ms);
                if (r.status == channel_status::timeout) continue;
            } else {
                r = ch.receive();
            }
            if (r.status == channel_status::closed) return;
            ASSERT_TRUE(r);
            const auto p = static_cast<std::size_t>(*r >> 32);
            const auto s = static_cast<std::int64_t>(*r & 0xffffffffu);
            if (s <= last[p]) order_violations.fetch_add(1);
            last[p] = s;
            if (seen[p * kPerProducer + static_cast<std::size_t>(s)].fetch_add(1) != 0) duplicates.fetch_add(1);
            received.fetch_add(1, std::memory_order_relaxed);
        }
    };
    std::vector<fiber> consumers, producers;
    std::vector<std::thread> thread_consumers, thread_producers;
    for (int c = 0; c < kFiberConsumers; ++c) consumers.push_back(sched.spawn([&, c] { consume(c); }));
    for (int c = 0; c < kThreadConsumers; ++c) thread_consumers.emplace_back([&, c] { consume(kFiberConsumers + c); });
    for (int p = 0; p < kFiberProducers; ++p) producers.push_back(sched.spawn([&, p] { produce(p); }));
    for (int p = 0; p < kThreadProducers; ++p) thread_producers.emplace_back([&, p] { produce(kFiberProducers + p); });
    for (auto& f : producers) f.join();
    for (auto& t : thread_producers) t.join();
    EXPECT_TRUE(ch.close());
    for (auto& f : consumers) f.join();
    for (auto& t : thread_consumers) t.join();
    EXPECT_EQ(received.load(), static_cast<long long>(kProducers) * kPerProducer);
    EXPECT_EQ(duplicates.load(), 0);
    EXPECT_EQ(order_violations.load(), 0);
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
}

// The storm: fibers send and receive with their own stop tokens (and a few
// with timeouts, and a few threads), while the main thread stops them one by
// one in random order: waits are cancelled before they park, while parked,
// and while an element is being handed over. `close_midway`: the channel is
// closed in the middle of it. Then: every element whose send returned ok was
// received exactly once, every other one stayed with its sender; with no
// close, the permit count is exact and a fresh pair still meets.
void cancellation_storm(unsigned workers, std::size_t capacity, bool close_midway) {
    scheduler sched(stress_options(workers));
    const spindle::handoff policy = policy_for(workers, capacity);
    channel<std::uint64_t> ch(capacity, policy);
    constexpr int kIters = 8;
    constexpr int kThreads = 2;  // senders and as many receivers
    const int kSlots = stress_fibers + 2 * kThreads;
    std::vector<std::atomic<std::uint8_t>> sent(static_cast<std::size_t>(kSlots) * kIters);
    std::vector<std::atomic<std::uint8_t>> got(static_cast<std::size_t>(kSlots) * kIters);  // (sends use n < kIters)
    std::atomic<long long> ok_sends{0}, kept{0}, oks{0}, cancels{0}, closeds{0}, lost{0}, failed_receives{0};

    auto do_send = [&](int i, int n, std::stop_token st) {
        std::uint64_t v = tag(static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(n));
        channel_status s;
        if (i < 4) {
            s = ch.send_for(std::move(v), std::chrono::microseconds(100 + 50 * i));  // a few timed waits
        } else if (n % 3 == 2) {
            s = ch.try_send(std::move(v));
            if (s == channel_status::full) s = ch.send(std::move(v), st);
        } else {
            s = ch.send(std::move(v), st);
        }
        if (s == channel_status::ok) {
            sent[static_cast<std::size_t>(i) * kIters + static_cast<std::size_t>(n)].store(1);
            ok_sends.fetch_add(1);
        } else {
            // Kept: the element is still ours, unchanged.
            if (v != tag(static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(n))) lost.fetch_add(1);
            kept.fetch_add(1);
            (s == channel_status::closed ? closeds : cancels).fetch_add(1);
        }
    };
    auto record = [&](const spindle::receive_result<std::uint64_t>& r) {
        if (!r) {
            (r.status == channel_status::closed ? closeds : cancels).fetch_add(1);
            failed_receives.fetch_add(1);
            return;
        }
        const auto p = static_cast<std::size_t>(*r >> 32), s = static_cast<std::size_t>(*r & 0xffffffffu);
        got[p * kIters + s].fetch_add(1);
        oks.fetch_add(1);
    };
    auto do_receive = [&](int i, int n, std::stop_token st) {
        if (i < 4) {
            record(ch.receive_for(std::chrono::microseconds(100 + 50 * i)));
        } else if (n % 3 == 2) {
            auto r = ch.try_receive();
            if (r.status == channel_status::empty) r = ch.receive(st);
            record(r);
        } else {
            record(ch.receive(st));
        }
    };
    // Lopsided on purpose, so that waiters pile up to be stopped: in the
    // first half of the iterations receivers outnumber senders two to one,
    // in the second half the other way round; and every fourth participant
    // receives once more at the end, so receives outnumber sends and at least
    // `surplus` of them can only end by a stop, a timeout or close().
    auto sends = [](int i, int n) { return ((i + n) % 3 == 0) == (n < kIters / 2) && n < kIters; };
    auto ops = [](int i) { return kIters + (i % 4 == 0 ? 1 : 0); };
    long long send_ops = 0, receive_ops = 0;
    for (int i = 0; i < kSlots; ++i)
        for (int n = 0; n < ops(i); ++n) (sends(i, n) ? send_ops : receive_ops) += 1;
    const long long surplus = receive_ops - send_ops;
    ASSERT_GT(surplus, 0);
    auto body = [&](int i, std::stop_token st) {
        for (int n = 0; n < ops(i); ++n) {
            if (sends(i, n)) do_send(i, n, st);
            else do_receive(i, n, st);
            if (n % 4 == 3) this_fiber::yield();
        }
    };
    std::vector<fiber> fs;
    for (int i = 0; i < stress_fibers; ++i) fs.push_back(sched.spawn([&, i] { body(i, this_fiber::get_stop_token()); }));
    std::vector<std::stop_source> thread_stops(2 * kThreads);
    std::vector<std::thread> ts;
    for (int t = 0; t < 2 * kThreads; ++t)
        ts.emplace_back([&, t] { body(stress_fibers + t, thread_stops[static_cast<std::size_t>(t)].get_token()); });

    std::vector<std::size_t> order(fs.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::shuffle(order.begin(), order.end(), std::minstd_rand(workers * 31 + static_cast<unsigned>(capacity)));
    for (std::size_t k = 0; k < order.size(); ++k) {
        if (close_midway && k == order.size() / 2) {
            EXPECT_TRUE(ch.close());
        }
        fs[order[k]].request_stop();
        if (k % 16 == 15) std::this_thread::sleep_for(20us);
    }
    for (auto& f : fs) f.join();
    for (auto& s : thread_stops) s.request_stop();
    for (auto& t : ts) t.join();

    const long long storm_failed_receives = failed_receives.load();
    long long drained = 0;
    if (close_midway) {
        while (auto r = ch.receive()) {
            record(r);
            ++drained;
        }
    } else {
        for (auto r = ch.try_receive(); r; r = ch.try_receive()) {
            record(r);
            ++drained;
        }
        // Nothing waits and nothing is left: the count is exact.
        EXPECT_EQ(ch.debug_permits(), 0);
        EXPECT_EQ(ch.size(), 0u);
    }
    std::printf("    [%u workers, capacity %zu, %s%s: %lld sent, %lld kept, %lld cancelled, %lld closed, "
                "%lld drained]\n",
                workers, capacity, to_string(policy), close_midway ? ", closed midway" : "", ok_sends.load(),
                kept.load(), cancels.load(), closeds.load(), drained);
    EXPECT_EQ(lost.load(), 0);
    // At most send_ops receives can succeed: the storm did end waits early.
    EXPECT_GE(storm_failed_receives, surplus);
    long long mismatches = 0;
    for (std::size_t k = 0; k < sent.size(); ++k)
        if (sent[k].load() != got[k].load()) ++mismatches;  // lost (1, 0), invented (0, 1) or duplicated (1, 2)
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(oks.load(), ok_sends.load());
    EXPECT_LE(ch.debug_queue_segments(), 3u);  // nothing kept for the cancelled receivers

    if (!close_midway) {
        // No wake-up lost: a fresh receiver and a fresh sender still meet.
        std::atomic<std::uint64_t> v{0};
        std::thread w([&] { v.store(*ch.receive()); });
        until([&] { return ch.debug_permits() == -1; });
        fiber s = sched.spawn([&] { EXPECT_EQ(ch.send(std::uint64_t{42}), channel_status::ok); });
        s.join();
        w.join();
        EXPECT_EQ(v.load(), 42u);
        EXPECT_EQ(ch.debug_permits(), 0);
        EXPECT_TRUE(ch.close());
    }
}

TEST_P(ChannelStress, CancellationStormLosesNothing) {
    cancellation_storm(GetParam().workers, GetParam().capacity, false);
}

TEST_P(ChannelStress, CloseDuringACancellationStorm) {
    cancellation_storm(GetParam().workers, GetParam().capacity, true);
}

INSTANTIATE_TEST_SUITE_P(WorkersAndCapacities, ChannelStress, ::testing::ValuesIn(workers_and_capacities()),
                         workers_and_capacity_name);

// ---- handoff policies -------------------------------------------------------------

class ChannelPolicy : public ::testing::TestWithParam<spindle::test::workers_and_policy> {};

// producer -> rendezvous -> relay -> buffered -> consumer, and a thread
// feeding the relay's channel too: each stream arrives whole and in order.
TEST_P(ChannelPolicy, PipelineKeepsEachStreamInOrder) {
    const auto [workers, policy] = GetParam();
    scheduler sched({.workers = workers});
    channel<std::uint64_t> first(0, policy), second(3, policy);
    constexpr int kItems = 1000;
    std::atomic<int> producers_left{2};
    auto produce = [&](std::uint64_t id) {
        for (int i = 0; i < kItems; ++i) {
            ASSERT_EQ(first.send(tag(id, static_cast<std::uint64_t>(i))), channel_status::ok);
        }
        if (producers_left.fetch_sub(1) == 1) first.close();
    };
    fiber producer = sched.spawn([&] { produce(0); });
    std::thread thread_producer([&] { produce(1); });
    fiber relay = sched.spawn([&] {
        while (auto r = first.receive()) ASSERT_EQ(second.send(std::move(*r)), channel_status::ok);
        second.close();
    });
    std::int64_t next[2] = {0, 0};
    int bad = 0;
    fiber consumer = sched.spawn([&] {
        while (auto r = second.receive()) {
            const auto id = static_cast<std::size_t>(*r >> 32);
            if (static_cast<std::int64_t>(*r & 0xffffffffu) != next[id]++) ++bad;
        }
    });
    producer.join();
    thread_producer.join();
    relay.join();
    consumer.join();
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(next[0], kItems);
    EXPECT_EQ(next[1], kItems);
}

std::vector<spindle::test::workers_and_policy> pipeline_params() {
    std::vector<spindle::test::workers_and_policy> v;
    for (unsigned w : {1u, 4u})
        for (auto p : spindle::test::all_policies) v.push_back({w, p});
    return v;
}

INSTANTIATE_TEST_SUITE_P(WorkersAndPolicies, ChannelPolicy, ::testing::ValuesIn(pipeline_params()),
                         spindle::test::workers_and_policy_name);

// ---- lifetime -------------------------------------------------------------------

// The receiver close() woke destroys the channel at once, while close() may
// still be on its way out (the destructor waits for it).
TEST(Channel, DestroyedRightAfterCloseWokeItsOnlyReceiver) {
    scheduler sched({.workers = 2});
    for (int round = 0; round < 100; ++round) {
        auto* ch = new channel<int>(round % 2);
        fiber f = sched.spawn([ch] {
            EXPECT_EQ(ch->receive().status, channel_status::closed);
            delete ch;
        });
        until([&] { return ch->debug_permits() == -1; });  // it is counted: the channel is alive until it wakes
        std::thread closer([ch] { ch->close(); });
        f.join();
        closer.join();
    }
}

// A receiver destroys the channel as soon as its receive returned, while the
// send that completed it may still be leaving -- and while that sender's own
// stop request races with the receive (its callback must not touch the
// channel once the send is complete).
TEST(Channel, DestroyedRightAfterItsLastReceiveReturned) {
    scheduler sched({.workers = 2});
    std::minstd_rand rng(7);
    int received = 0, cancelled = 0;
    for (int round = 0; round < 300; ++round) {
        auto* ch = new channel<int>(static_cast<std::size_t>(round % 2));
        std::stop_source send_stop, receive_stop;
        const unsigned delay = rng() % 64;
        std::atomic<bool> got{false};
        fiber sender = sched.spawn([ch, &send_stop] {
            int v = 7;
            const auto s = ch->send(std::move(v), send_stop.get_token());
            EXPECT_TRUE(s == channel_status::ok || (s == channel_status::cancelled && v == 7));
        });
        std::thread receiver([ch, &receive_stop, &got] {
            auto r = ch->receive(receive_stop.get_token());
            if (r) {
                EXPECT_EQ(*r, 7);
                got.store(true);
                delete ch;  // the send completed us; it may still be on its way out
            }
        });
        for (unsigned k = 0; k < delay; ++k) std::this_thread::yield();
        send_stop.request_stop();  // races with the receive that takes the element
        sender.join();
        receive_stop.request_stop();  // if the send was cancelled, nothing will come
        receiver.join();
        if (got.load()) {
            ++received;
        } else {
            ++cancelled;
            delete ch;  // both operations returned
        }
    }
    std::printf("    [%d received, %d cancelled]\n", received, cancelled);
}

#if SPINDLE_DEBUG_CHECKS
TEST(ChannelDeathTest, DestroyingWithAWaitingReceiverAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(destroy_while_waited_on(
                     new channel<int>(1), [](auto& ch) { (void)ch.receive(); },
                     [](auto& ch) { return ch.debug_permits() == -1; }),
        "spindle::channel 0x[0-9a-f]+ destroyed with 1 waiters");
}

TEST(ChannelDeathTest, DestroyingWithAWaitingSenderAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(destroy_while_waited_on(
                     new channel<int>(0), [](auto& ch) { (void)ch.send(1); },
                     [](auto& ch) { return ch.debug_permits() == 1; }),
        "spindle::channel 0x[0-9a-f]+ destroyed with 1 waiters");
}

TEST(ChannelDeathTest, CapacityAboveTheMaximumAborts) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH({ channel<int> ch(channel<int>::max_capacity() + 1); },
                 "spindle::channel 0x[0-9a-f]+: capacity [0-9]+ above max_capacity\\(\\)");
}
#endif

}  // namespace

// ---- the last reference receives and frees ---------------------------------
//
// (tests/support/last_reference.hpp.) A channel may be destroyed by a
// caller whose operation returned while the operation that completed it is
// still leaving: a receiver right after its receive, though the send that
// published its element has not returned.

namespace {

// A channel of capacity 1 passing one token: whoever holds the token holds
// the object's lock; a count of references guarded by it.
struct token_channel : counted_object<token_channel> {
    explicit token_channel(int n) : refs(n) { EXPECT_EQ(ch.send(1), channel_status::ok); }
    channel<int> ch{1};
    int refs;  // guarded by the token

    const void* primitive() const { return &ch; }  // its core, which the race points name
    void hold() { EXPECT_TRUE(ch.receive().ok()); }
    void unhold() { EXPECT_EQ(ch.send(1), channel_status::ok); }
    bool enter(std::stop_token st) { return ch.receive(std::move(st)).ok(); }
    bool try_enter() { return ch.try_receive().ok(); }
    void enter() { EXPECT_TRUE(ch.receive().ok()); }
    void leave() { EXPECT_EQ(ch.send(1), channel_status::ok); }
    int drop() { return --refs; }
};

class ChannelLastReference : public ::testing::TestWithParam<party_kind> {};

// H sends the token back while W waits to receive it. Right after H's FAA
// counted W (before H wakes it), W is cancelled; W then takes the token if
// it can, drops the last reference, sends the token back and deletes the
// channel before H goes on. H must not touch the channel after that -- or
// the channel's destructor must wait until H has left it.
TEST_P(ChannelLastReference, PublishMatchedToACancelledReceiverLeavesTheChannelAlone) {
    if (!race_points_enabled) GTEST_SKIP() << "race points exist only with SPINDLE_DEBUG_CHECKS";
    last_reference_scenario<token_channel>(GetParam(), race_point::channel_publish_matched,
                                           race_point::channel_publish_matched, {.delete_waits = true});
    last_reference_scenario<token_channel>(GetParam(), race_point::channel_publish_matched,
                                           race_point::channel_publish_matched,
                                           {.block_after_holder = true, .delete_waits = true});
}

INSTANTIATE_TEST_SUITE_P(Holders, ChannelLastReference,
                         ::testing::Values(party_kind::fiber, party_kind::thread), party_name);

class ChannelLastReferenceStress : public ::testing::TestWithParam<unsigned> {};

// The token channel over a chain: timed receives of a few microseconds
// (retried) race the sends that pass the token on; the last holder deletes.
TEST_P(ChannelLastReferenceStress, TimedReceivesRaceTheLastSend) {
    const unsigned workers = GetParam();
    run_chain<token_channel>(workers, chain_fibers, chain_threads, chain_rounds(workers),
                             [](token_channel& o, std::minstd_rand& rng) {
                                 linger(rng);
                                 while (!o.ch.receive_for(short_timeout(rng)).ok()) {
                                 }
                                 linger(rng);
                                 const bool last = --o.refs == 0;
                                 EXPECT_EQ(o.ch.send(1), channel_status::ok);
                                 if (last) delete &o;
                             });
}

// Half the parties send one element each, half receive one, all with timed
// waits of a few microseconds (retried). Only receivers hold references:
// once every element is received every send has completed, so the last
// receiver deletes the channel as soon as its receive returns -- while
// sends, settles of cancelled senders and wake-ups may still be leaving.
template <std::size_t Capacity>
struct flow_channel : counted_object<flow_channel<Capacity>> {
    explicit flow_channel(int parties) : receivers(parties / 2) { EXPECT_EQ(parties % 2, 0); }
    channel<int> ch{Capacity};
    std::atomic<int> receivers;
    std::atomic<int> turn{0};  // even: a sender next, odd: a receiver
};

template <std::size_t Capacity>
void flow_pass(flow_channel<Capacity>& o, std::minstd_rand& rng, bool sender) {
    linger(rng);
    if (sender) {
        for (;;) {
            const channel_status s = o.ch.send_for(7, short_timeout(rng));
            if (s == channel_status::ok) return;
            EXPECT_EQ(s, channel_status::timeout);
        }
    }
    while (!o.ch.receive_for(short_timeout(rng)).ok()) {
    }
    if (o.receivers.fetch_sub(1) == 1) delete &o;
}

template <std::size_t Capacity>
void run_flow(unsigned workers) {
    using obj = flow_channel<Capacity>;
    // Parties alternate between senders and receivers by the order they
    // reach each object: as many of each (the parties are even).
    run_chain<obj>(workers, chain_fibers, chain_threads, chain_rounds(workers), [](obj& o, std::minstd_rand& rng) {
        flow_pass(o, rng, o.turn.fetch_add(1) % 2 == 0);
    });
}

TEST_P(ChannelLastReferenceStress, TimedSendsAndReceivesRaceTheLastReceive) {
    run_flow<0>(GetParam());
    run_flow<2>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Workers, ChannelLastReferenceStress, ::testing::ValuesIn(stress_workers), workers_name);

}  // namespace
