// Three fibers on one worker take turns; main joins them.
#include <cstdio>
#include <vector>

#include <spindle/spindle.hpp>

int main() {
    spindle::scheduler sched({.workers = 1});
    std::vector<spindle::fiber> fibers;
    for (int id = 0; id < 3; ++id) {
        fibers.push_back(sched.spawn([id] {
            for (int step = 0; step < 2; ++step) {
                std::printf("fiber %d, step %d\n", id, step);
                spindle::this_fiber::yield();  // let the others run
            }
        }));
    }
    for (auto& f : fibers) f.join();
}
