// spindle/runtime/handoff.hpp — who runs a waiter once it may proceed.
//
// Every spindle primitive that wakes a waiting fiber takes one of these
// policies (the CES paper, §3.2 and §5, Figures 2, 3 and 6). They differ only
// when the waker is itself a fiber; a waiter that is an OS thread is always
// unparked through its futex, and a waker that is a thread always dispatches.
//
//   inline_resume  the waker switches to the waiter and runs it *nested*: the
//                  waker continues only when the waiter next suspends (Fig. 2;
//                  cppcoro, folly). No queuing delay, but every contended
//                  critical section and what follows it collapses onto one
//                  worker ("collapse of parallelism", §4.2).
//   dispatch       the waiter is made ready on the worker it blocked on
//                  (where idle workers may steal it) and the waker continues (Fig. 3;
//                  Boost.Fiber, Tokio, Kotlin). The lock stays held, nobody in
//                  its critical section, while the waiter sits in a ready
//                  queue ("queuing delay", §4.1).
//   ces            combine and exchange (Fig. 6): the waker hands *itself* to
//                  the executor, where another worker can pick it up, and
//                  switches straight to the waiter on its own worker. No
//                  queuing delay, no collapse: contended critical sections run
//                  back to back on one worker, where the protected data is.
//
// A runtime type: the primitives in sync/ only name the policy; the runtime
// makes the decision (runtime/detail/park.hpp, unpark_with(), implemented in
// src/runtime/handoff.cpp), so a contended unlock reads top to bottom in two
// files: the primitive's (say src/sync/mutex.cpp) and src/runtime/handoff.cpp.
#pragma once

namespace spindle {

enum class handoff : unsigned char { inline_resume, dispatch, ces };

constexpr const char* to_string(handoff h) noexcept {
    switch (h) {
        case handoff::inline_resume: return "inline_resume";
        case handoff::dispatch: return "dispatch";
        case handoff::ces: return "ces";
    }
    return "?";
}

}  // namespace spindle
