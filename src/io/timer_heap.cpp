// A worker's own timers (timer_heap.hpp).
#include "timer_heap.hpp"

#include <algorithm>
#include <stop_token>

#include <spindle/runtime/fiber.hpp>

namespace spindle::io::detail {

using spindle::detail::heap_timer;
using spindle::detail::local_timer;

void timer_heap::set(std::size_t i, heap_timer* h) noexcept {
    v_[i] = h;
    h->idx = i;
}

void timer_heap::up(std::size_t i) noexcept {
    heap_timer* h = v_[i];
    while (i > 0) {
        std::size_t parent = (i - 1) / 2;
        if (v_[parent]->t <= h->t) break;
        set(i, v_[parent]);
        i = parent;
    }
    set(i, h);
}

void timer_heap::down(std::size_t i) noexcept {
    std::size_t n = v_.size();
    heap_timer* h = v_[i];
    for (;;) {
        std::size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && v_[c + 1]->t < v_[c]->t) ++c;
        if (h->t <= v_[c]->t) break;
        set(i, v_[c]);
        i = c;
    }
    set(i, h);
}

void timer_heap::push(heap_timer* h) noexcept {
    v_.push_back(h);
    up(v_.size() - 1);
}

void timer_heap::remove(heap_timer* h) noexcept {
    std::size_t i = h->idx;
    heap_timer* last = v_.back();
    v_.pop_back();
    if (last == h) return;
    set(i, last);
    up(i);
    down(last->idx);
}

void timer_heap::add(local_timer* lt) noexcept {
    if (v_.size() >= sweep_at_) {
        sweep();
        sweep_at_ = std::max<std::size_t>(64, 2 * v_.size());
    }
    push(lt);
}

bool timer_heap::due_before(time_point horizon) const noexcept {
    return (!v_.empty() && v_.front()->t < horizon) || spindle::detail::timer_earliest() < horizon;
}

void timer_heap::fire() noexcept {
    if (v_.empty()) return;
    const time_point now = std::chrono::steady_clock::now();
    // Taken out in deadline order, acted on last first: the worker's deque
    // runs newest first, so fibers woken at one look then run in deadline
    // order (as reap's completions, uring.cpp). Acted on in deadline order,
    // two sleepers a late look found both due ran latest first.
    while (!v_.empty() && v_.front()->t <= now) {
        due_.push_back(v_.front());
        remove(v_.front());
    }
    for (std::size_t i = due_.size(); i-- > 0;) {
        heap_timer* h = due_[i];
        if (h->is_local_timer)
            spindle::detail::local_timer_fire(static_cast<local_timer*>(h));  // (or frees a cancelled one)
        else
            spindle::detail::unpark(&static_cast<sleeper*>(h)->wt);  // it may be gone from here on
    }
    due_.clear();
}

void timer_heap::sweep() noexcept {
    std::size_t kept = 0;
    for (heap_timer* h : v_)
        if (!h->is_local_timer || !spindle::detail::local_timer_reclaim(static_cast<local_timer*>(h)))
            v_[kept++] = h;
    v_.resize(kept);
    for (std::size_t i = 0; i < kept; ++i) v_[i]->idx = i;
    for (std::size_t i = kept / 2; i-- > 0;) down(i);
}

void timer_heap::wake_stopped() noexcept {
    for (std::size_t i = 0; i < v_.size();) {
        if (v_[i]->is_local_timer) {  // (no stop token of its own: the wait's guard has it)
            ++i;
            continue;
        }
        auto* s = static_cast<sleeper*>(v_[i]);
        // acquire pairs with the request's release store.
        if (!s->stop.load(std::memory_order_acquire)) {
            ++i;
            continue;
        }
        remove(s);  // (what moved into slot i is looked at next)
        spindle::detail::unpark(&s->wt);
    }
}

bool sleep_on(timer_heap& heap, spindle::detail::worker* w, std::chrono::steady_clock::time_point t,
              std::atomic<std::uint32_t>& stop_requests, void (*wake)(spindle::detail::io_engine*) noexcept,
              spindle::detail::io_engine* e) noexcept {
    std::stop_token stop = this_fiber::get_stop_token();
    if (stop.stop_requested()) return false;
    sleeper s;
    s.wt.fiber = w->current;
    s.t = t;
    heap.push(&s);
    w->yield_check = 1;  // yields look at the engine meanwhile (yield_slow)
    auto request = [&s, &stop_requests, wake, e]() noexcept {
        s.stop.store(true, std::memory_order_release);  // before the count: see stop_requests
        // release pairs with the owner's acquire exchange of the count,
        // after which it finds this sleeper marked (wake_stopped).
        stop_requests.fetch_add(1, std::memory_order_release);
        wake(e);
    };
    {
        std::stop_callback<decltype(request)> cb(stop, request);
        spindle::detail::park_now(&s.wt);
    }  // (waits for a callback running on another thread)
    return !stop.stop_requested();
}

}  // namespace spindle::io::detail
