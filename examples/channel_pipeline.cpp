// A three-stage pipeline over spindle::channel: a producer sends 1..N, a
// stage squares each number, a consumer adds them up. close() ends each
// stage in turn: a receive on a closed, drained channel returns `closed`.
#include <cstdio>

#include <spindle/spindle.hpp>

int main() {
    constexpr long n = 1000;
    spindle::channel<long> numbers(16);  // buffered: 16 elements
    spindle::channel<long> squares(0);   // rendezvous: a send waits for its receiver
    long total = 0;
    {
        spindle::scheduler sched({.workers = 2});
        auto producer = sched.spawn([&] {
            for (long i = 1; i <= n; ++i)
                if (numbers.send(i) != spindle::channel_status::ok) return;
            numbers.close();
        });
        auto square = sched.spawn([&] {
            while (auto r = numbers.receive())
                if (squares.send(*r * *r) != spindle::channel_status::ok) return;
            squares.close();  // numbers is closed and drained
        });
        auto consumer = sched.spawn([&] {
            while (auto r = squares.receive()) total += *r;
        });
        producer.join();
        square.join();
        consumer.join();
    }
    const long expected = n * (n + 1) * (2 * n + 1) / 6;
    std::printf("sum of squares 1..%ld = %ld (%s)\n", n, total, total == expected ? "right" : "WRONG");
    return total == expected ? 0 : 1;
}
