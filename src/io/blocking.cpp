// spindle::blocking's pool (include/spindle/io/blocking.hpp): threads that
// run blocking calls for parked fibers.
//
// Lock word: one std::mutex `m` guards the FIFO of jobs (head/tail) and
// the counts; idle threads wait on `cv`. A job is handed to an idle thread
// if one is free for it, else a new thread starts (up to max_threads;
// beyond that jobs queue). A thread idle for idle_exit exits.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <spindle/io/blocking.hpp>

namespace spindle::detail {

namespace {

constexpr unsigned max_threads = 64;
constexpr auto idle_exit = std::chrono::seconds(10);

struct pool {
    std::mutex m;
    std::condition_variable cv;
    blocking_job* head = nullptr;  // guarded by m
    blocking_job* tail = nullptr;  // guarded by m
    unsigned queued = 0;           // jobs in the queue; guarded by m
    unsigned threads = 0;          // guarded by m
    unsigned idle = 0;             // threads waiting on cv; guarded by m
    unsigned starting = 0;         // threads started, not yet looking; guarded by m

    void loop() {
        std::unique_lock lk(m);
        --starting;
        for (;;) {
            if (head != nullptr) {
                blocking_job* j = head;
                head = j->next;
                if (head == nullptr) tail = nullptr;
                --queued;
                lk.unlock();
                j->run(j);
                unpark(&j->done);  // j may be gone from here on
                lk.lock();
                continue;
            }
            ++idle;
            bool woke = cv.wait_for(lk, idle_exit, [&] { return head != nullptr; });
            --idle;
            if (!woke) {
                --threads;
                return;
            }
        }
    }

    void submit(blocking_job* j) {
        std::unique_lock lk(m);
        j->next = nullptr;
        if (tail != nullptr) tail->next = j; else head = j;
        tail = j;
        ++queued;
        // Every queued job needs a thread of its own: an idle one, or one
        // on its way. (Counting idle threads alone, ten quick calls that
        // found one idle thread all queued for it: it had not woken yet.)
        if (queued > idle + starting && threads < max_threads) {
            ++threads;
            ++starting;
            lk.unlock();
            std::thread([this] { loop(); }).detach();
            return;
        }
        lk.unlock();
        cv.notify_one();
    }
};

pool& the_pool() {
    // Never destroyed: detached threads may still be leaving at exit.
    static pool* p = new pool;
    return *p;
}

}  // namespace

void run_blocking(blocking_job* job) noexcept {
    job->done.fiber = running_fiber();
    the_pool().submit(job);
    park(&job->done);
}

}  // namespace spindle::detail
