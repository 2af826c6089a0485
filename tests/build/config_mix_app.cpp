// A program a user writes against an installed or built spindle: a mutex
// contended by fibers on two workers, a generator, a fiber join. Compiled
// by tests/build/config_mix_check.cmake with and without NDEBUG against
// the library of this build.
#include <cstdio>

#include <spindle/spindle.hpp>

int main() {
    spindle::mutex m;
    long n = 0;
    {
        spindle::scheduler sched({.workers = 2});
        auto body = [&] {
            for (int i = 0; i < 2000; ++i) {
                m.lock();
                ++n;
                m.unlock();
                if (i % 64 == 0) spindle::this_fiber::yield();
            }
        };
        auto a = sched.spawn(body);
        auto b = sched.spawn(body);
        a.join();
        b.join();
    }
    spindle::generator<int> g([](auto& yield) {
        for (int i = 1; i <= 3; ++i) yield(i);
    });
    int sum = 0;
    for (int v : g) sum += v;
    std::printf("count %ld sum %d\n", n, sum);
    return n == 4000 && sum == 6 ? 0 : 1;
}
