// preload/standin_lock.hpp — TEMPORARY: a ticket lock with the contract of
// include/spindle/locks/ (all-zero == unlocked, <= 16 bytes, noexcept), used
// by every SPINDLE_LOCK value until those headers are in the tree.
#pragma once

#include <atomic>
#include <cstdint>

#include "wait.hpp"

namespace spindle::preload {

class standin_lock {
public:
    void lock() noexcept {
        std::uint32_t t = next_.fetch_add(1, std::memory_order_relaxed);  // only the ticket matters
        unsigned spins = 0;
        // acquire pairs with unlock()'s release.
        while (serving_.load(std::memory_order_acquire) != t) spin_step(spins);
    }
    [[nodiscard]] bool try_lock() noexcept {
        std::uint32_t s = serving_.load(std::memory_order_acquire);  // pairs with unlock()
        std::uint32_t n = s;
        return next_.compare_exchange_strong(n, s + 1, std::memory_order_relaxed,
                                             std::memory_order_relaxed);
    }
    void unlock() noexcept {
        // release pairs with the next holder's acquire load of serving_.
        serving_.store(serving_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }

private:
    std::atomic<std::uint32_t> next_{0};
    std::atomic<std::uint32_t> serving_{0};
};

}  // namespace spindle::preload
