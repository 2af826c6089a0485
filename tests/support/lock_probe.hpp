// spindle::detail::lock_probe for the tests: a FIFO lock's arrival word.
// It changes exactly when a thread enqueues (a ticket taken, a node or Grant
// swapped into the tail) -- and on the releases that leave the lock free,
// which a test watching for arrivals holds the lock against. One definition
// for every test that includes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include <spindle/locks/detail/lock_support.hpp>

struct spindle::detail::lock_probe {
    // The word itself: ticket's `next` (the compact ticket lock's one word),
    // the others' `tail` -- of the queue for the locks built around one (MCS,
    // CLH, and every park twin's gate).
    template <class L>
    static const auto& arrival_word(const L& l) {
        if constexpr (requires { l.queue_; })
            return arrival_word(l.queue_);
        else if constexpr (requires { l.words_; })
            return l.words_.arrival_word();
        else if constexpr (requires { l.next_; })
            return l.next_;
        else
            return l.tail_;
    }
    // A park twin's gate word (detail/park_gate.hpp), now (relaxed).
    static constexpr std::uint32_t gate_sleeps = 2;
    static constexpr std::uint32_t gate_handoff = 4;
    template <class L>
    static std::uint32_t gate(const L& l) {
        static_assert(L::sleeps == gate_sleeps && L::handoff == gate_handoff);
        return l.word_.load(std::memory_order_relaxed);
    }
    template <class L>
    static std::atomic<std::uint32_t>* gate_word(L& l) {
        return &l.word_;
    }
    // Its value now (a relaxed load: an observation, not synchronization).
    template <class L>
    static std::uintptr_t arrivals(const L& l) {
        const auto v = arrival_word(l).load(std::memory_order_relaxed);
        if constexpr (std::is_pointer_v<decltype(v)>)
            return reinterpret_cast<std::uintptr_t>(v);
        else
            return v;
    }
};
