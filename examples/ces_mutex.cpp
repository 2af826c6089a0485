// A contended spindle::mutex with the CES handoff (the default policy):
// eight fibers on two workers increment shared counters under one lock.
// At a contended unlock the waiter runs next on the unlocker's worker, so
// the critical sections stay where the data is. Prints the total and how
// often a fiber's section ran on another worker than its previous one.
#include <array>
#include <atomic>
#include <cstdio>
#include <vector>

#include <spindle/spindle.hpp>

int main() {
    constexpr int fibers = 8, rounds = 20000;
    spindle::mutex m;  // spindle::mutex m(spindle::handoff::dispatch) to compare
    std::array<long, 16> counters{};  // guarded by m
    std::atomic<long> moves{0};
    {
        spindle::scheduler sched({.workers = 2});
        std::vector<spindle::fiber> fs;
        for (int id = 0; id < fibers; ++id) {
            fs.push_back(sched.spawn([&, id] {
                int last = spindle::this_fiber::worker_index();
                for (int i = 0; i < rounds; ++i) {
                    m.lock();
                    for (long& c : counters) ++c;
                    m.unlock();
                    int now = spindle::this_fiber::worker_index();
                    if (now != last) moves.fetch_add(1, std::memory_order_relaxed);
                    last = now;
                    if (i % 128 == id) spindle::this_fiber::yield();
                }
            }));
        }
        for (auto& f : fs) f.join();
    }
    for (long c : counters)
        if (c != long{fibers} * rounds) {
            std::printf("lost an update: %ld\n", c);
            return 1;
        }
    std::printf("%d fibers x %d sections: every counter at %ld; %ld worker changes\n", fibers, rounds,
                counters[0], moves.load());
}
