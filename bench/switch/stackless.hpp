// bench/switch/stackless.hpp — the C++20 stackless competitors, written here
// as a careful user would write them (no library): a generator, a recursive
// generator (each level its own coroutine, values relayed level by level),
// and a task type with symmetric transfer for the write_fully workload.
#pragma once

#include <coroutine>
#include <cstdint>
#include <deque>
#include <exception>
#include <utility>

namespace bench_stackless {

// A minimal C++20 generator: the value lives in the promise.
template <class T>
class generator {
public:
    struct promise_type {
        T value{};
        generator get_return_object() {
            return generator(std::coroutine_handle<promise_type>::from_promise(*this));
        }
        std::suspend_always initial_suspend() noexcept { return {}; }
        std::suspend_always final_suspend() noexcept { return {}; }
        std::suspend_always yield_value(T v) noexcept {
            value = v;
            return {};
        }
        void return_void() noexcept {}
        void unhandled_exception() { std::terminate(); }
    };
    using handle = std::coroutine_handle<promise_type>;

    explicit generator(handle h) : h_(h) {}
    generator(generator&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    ~generator() {
        if (h_) h_.destroy();
    }

    struct sentinel {};
    struct iterator {
        handle h;
        iterator& operator++() {
            h.resume();
            return *this;
        }
        const T& operator*() const { return h.promise().value; }
        friend bool operator==(const iterator& i, sentinel) { return i.h.done(); }
    };
    iterator begin() {
        h_.resume();
        return {h_};
    }
    sentinel end() { return {}; }

private:
    handle h_;
};

// write_fully's task: lazily started, awaiting it runs it and transfers back
// to the awaiter when it completes (symmetric transfer both ways).
template <class T>
class task {
public:
    struct promise_type {
        T value{};
        std::coroutine_handle<> continuation;
        task get_return_object() { return task(std::coroutine_handle<promise_type>::from_promise(*this)); }
        std::suspend_always initial_suspend() noexcept { return {}; }
        struct final_awaiter {
            bool await_ready() noexcept { return false; }
            std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
                auto c = h.promise().continuation;
                return c ? c : std::noop_coroutine();
            }
            void await_resume() noexcept {}
        };
        final_awaiter final_suspend() noexcept { return {}; }
        void return_value(T v) noexcept { value = v; }
        void unhandled_exception() { std::terminate(); }
    };
    using handle = std::coroutine_handle<promise_type>;

    explicit task(handle h) : h_(h) {}
    task(task&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    ~task() {
        if (h_) h_.destroy();
    }

    bool await_ready() noexcept { return false; }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
        h_.promise().continuation = awaiter;
        return h_;
    }
    T await_resume() noexcept { return h_.promise().value; }

    handle get() const { return h_; }

private:
    handle h_;
};

// Round-robin scheduler for stackless tasks: a co_await of wait_for_ready()
// puts the awaiting coroutine at the back of the queue and returns to the
// scheduler loop, which resumes the front one.
struct rr_scheduler {
    std::deque<std::coroutine_handle<>> ready;
    void run() {
        while (!ready.empty()) {
            auto h = ready.front();
            ready.pop_front();
            h.resume();
        }
    }
};

struct wait_for_ready {
    rr_scheduler* s;
    bool await_ready() noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { s->ready.push_back(h); }
    void await_resume() noexcept {}
};

}  // namespace bench_stackless
