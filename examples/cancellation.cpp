// Cancelling waits: a fiber blocked on a mutex held elsewhere gives up when
// its stop token is requested (fiber::request_stop), a receive gives up at
// a timeout, and the waits that were cancelled leave the primitives as they
// were: the mutex still goes to the next locker, the channel still works.
#include <chrono>
#include <cstdio>

#include <spindle/spindle.hpp>

using namespace std::chrono_literals;

int main() {
    spindle::mutex m;
    spindle::channel<int> ch(1);
    int failures = 0;
    {
        spindle::scheduler sched({.workers = 2});
        m.lock();  // held by main (a plain thread) for now
        auto waiter = sched.spawn([&] {
            // Waits for m until stop is requested on this fiber.
            if (m.lock(spindle::this_fiber::get_stop_token())) {
                std::printf("waiter: got the mutex (unexpected)\n");
                ++failures;
                m.unlock();
            } else {
                std::printf("waiter: stop requested, gave up waiting for the mutex\n");
            }
            // A receive with a timeout: nothing is sent.
            auto r = ch.receive_for(20ms);
            std::printf("waiter: receive_for(20ms) -> %s\n",
                        r.status == spindle::channel_status::timeout ? "timeout" : "something else");
            if (r.status != spindle::channel_status::timeout) ++failures;
        });
        spindle::this_fiber::sleep_for(10ms);  // (a plain thread: sleeps)
        waiter.request_stop();
        waiter.join();
        m.unlock();
        // Both primitives work as before.
        auto after = sched.spawn([&] {
            m.lock();
            m.unlock();
            if (ch.send(7) != spindle::channel_status::ok || *ch.receive() != 7) ++failures;
        });
        after.join();
    }
    std::printf("%s\n", failures == 0 ? "cancellation left everything usable" : "FAILED");
    return failures == 0 ? 0 : 1;
}
