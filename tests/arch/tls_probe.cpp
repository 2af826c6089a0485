// Compiled to assembly by tls_codegen_check.cmake, never run: loops a user
// could write around every inline fast path of the public API, each of which
// can switch (and so migrate) in the middle. The check requires that the
// compiler itself never touches the thread pointer in any of them: spindle's
// inline code reaches its thread-locals only through its own asm reads
// (spindle/arch/tls.hpp), which the compiler cannot hoist out of these loops
// or keep across a switch.
#include <spindle/spindle.hpp>

namespace probe {

// The loop of the original report: with 2 workers an inlined yield() whose
// %fs:0 read was hoisted out of it crashed 4 runs in 10 (Clang 16).
void lock_unlock_yield(spindle::mutex& m, long& counter, int n) {
    for (int i = 0; i < n; ++i) {
        m.lock();
        ++counter;
        m.unlock();
        spindle::this_fiber::yield();
    }
}

void cqs_mutex_loop(spindle::cqs_mutex& m, long& counter, int n) {
    for (int i = 0; i < n; ++i) {
        m.lock();
        ++counter;
        m.unlock();
        spindle::this_fiber::yield();
    }
}

void shared_mutex_loop(spindle::shared_mutex& m, long& counter, int n) {
    for (int i = 0; i < n; ++i) {
        m.lock_shared();
        counter += spindle::this_fiber::is_fiber();
        m.unlock_shared();
        m.lock();
        ++counter;
        m.unlock();
    }
}

void semaphore_loop(spindle::counting_semaphore<>& s, int n) {
    for (int i = 0; i < n; ++i) {
        s.acquire();
        spindle::this_fiber::yield();
        s.release();
    }
}

long channel_loop(spindle::channel<long>& ch, int n) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        (void)ch.send(long{i});
        if (auto r = ch.receive()) sum += *r;
    }
    return sum;
}

void wait_loop(spindle::event& e, spindle::latch& l, spindle::barrier<>& b, int n) {
    for (int i = 0; i < n; ++i) {
        e.wait();
        l.wait();
        b.arrive_and_wait();
    }
}

void cv_loop(spindle::mutex& m, spindle::condition_variable& cv, const bool& ready, int n) {
    for (int i = 0; i < n; ++i) {
        std::unique_lock lk(m);
        cv.wait(lk, [&] { return ready; });
    }
}

long pool_loop(spindle::queue_pool<long>& p, int n) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        long v = p.take();
        sum += v;
        p.put(v);
    }
    return sum;
}

long identity_loop(int n) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        sum += static_cast<long>(spindle::this_fiber::get_id().value());
        sum += spindle::this_fiber::worker_index();
        spindle::this_fiber::sleep_for(std::chrono::microseconds(1));
    }
    return sum;
}

long local_loop(spindle::fiber_local<long>& l, int n) {
    long sum = 0;
    for (int i = 0; i < n; ++i) {
        sum += ++*l;
        spindle::this_fiber::yield();
    }
    return sum;
}

long generator_loop(int n) {
    spindle::generator<long> g([n](auto& y) {
        for (long i = 0; i < n; ++i) y(i);
    });
    long sum = 0;
    while (g.next()) {
        sum += g.value();
        spindle::this_fiber::yield();
    }
    return sum;
}

void spawn_join_loop(int n) {
    for (int i = 0; i < n; ++i) {
        spindle::fiber f([] { spindle::this_fiber::yield(); });
        f.join();
    }
}

}  // namespace probe
