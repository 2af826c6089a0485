// Seeing that a plain thread is parked, without timing: the kernel says so.
//
// A FIFO test over threads needs each waiter really queued -- in its cell,
// parked -- before the next one starts; a counted-but-preempted thread may
// lose its cell to a synchronous resume and queue again at the tail (the
// documented exception to FIFO). A sleep cannot tell the two apart on a
// loaded machine. The kernel can: a waiter's thread sleeps (state S in
// /proc/self/task/<tid>/stat) only in its futex wait, which it enters after
// it has taken its cell. The thread's own spinning and yielding before it
// queues show as R.
//
//     std::atomic<pid_t> tid{0};
//     std::thread t([&] { tid = this_tid(); m.lock(); ... });
//     ASSERT_TRUE(parks(tid));   // t waits in its cell now
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace spindle::test {

// The calling thread's kernel id.
inline pid_t this_tid() noexcept { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// The kernel's one-letter state of thread `tid` of this process (R, S, D,
// ...), or 0 if it is gone.
inline char kernel_thread_state(pid_t tid) {
    std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
    std::string line;
    if (!std::getline(in, line)) return 0;
    // "tid (comm) S ...": comm may hold spaces and parentheses; the state
    // follows the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) return 0;
    return line[close + 2];
}

// Waits until the thread whose id `tid` publishes (0 until it has started)
// sleeps in the kernel and stays asleep for every look over 2 ms (a brief
// sleep on some lock inside the runtime or a sanitizer does not count), or
// 30 s pass; true if it does.
inline bool parks(const std::atomic<pid_t>& tid) {
    using clock = std::chrono::steady_clock;
    const auto give_up = clock::now() + std::chrono::seconds(30);
    clock::time_point asleep_since{};
    bool asleep = false;
    for (;;) {
        const pid_t t = tid.load();
        const bool s = t != 0 && kernel_thread_state(t) == 'S';
        const auto now = clock::now();
        if (!s) {
            asleep = false;
        } else if (!asleep) {
            asleep = true;
            asleep_since = now;
        } else if (now - asleep_since >= std::chrono::milliseconds(2)) {
            return true;
        }
        if (now > give_up) return false;
        std::this_thread::yield();
    }
}

}  // namespace spindle::test
