// spindle/sync/channel.hpp — a FIFO channel, buffered or unbuffered
// (rendezvous), closable, with cancellable send and receive, for fibers and
// plain OS threads mixed.
//
//     spindle::channel<std::string> ch(16);          // room for 16 elements
//     spindle::channel<std::unique_ptr<job>> rv(0);   // rendezvous
//
//     producer:  if (ch.send(std::move(s)) != spindle::channel_status::ok) ...;  // s kept
//                ch.close();                                  // no more sends
//     consumer:  while (auto r = ch.receive()) use(*r);      // drains, then closed
//                auto r = ch.receive_for(5ms);                // r.status: ok | closed | timeout
//                auto r = ch.receive(stop_token);             // ok | closed | cancelled
//
// What it is. Go's `chan T`, kotlinx.coroutines' Channel(capacity) or
// Boost.Fiber's buffered_channel, for spindle's fibers and threads:
//
//   * capacity c >= 1: a send completes once its element is in the buffer
//     (it waits while c elements are buffered); capacity 0: a send completes
//     only once a receiver has taken its element.
//   * FIFO. Elements come out in the order they went in; the elements of
//     senders that wait for room go in, in the order those senders began to
//     wait, as room appears; waiting receivers are served in arrival order.
//   * close(): later sends fail (closed); receivers take what is buffered,
//     then get closed; every waiter is woken (a waiting sender gets closed
//     and keeps its element).
//   * Cancellation by timeout or std::stop_token, at any moment, neither loses
//     nor duplicates an element, and loses no wake-up.
//
// T: any object type whose move constructor and destructor do not throw
// (std::string, std::unique_ptr, structs of them; static_asserted). Elements
// live in the channel's buffer or, while their sender waits, in the sender's
// own argument; they never travel through the waiter queue, so T has no size
// limit. A send that returns anything but ok has *not* moved from its
// argument: the element stays with the caller. A receive returns a
// receive_result<T>: a status and a std::optional<T>, engaged exactly when the
// status is ok.
//
// Algorithm. A store of elements under one short spinlock, one permit word,
// and the CQS queue (detail/cqs.hpp; Koval, Khalanskiy, Alistarh, PLDI 2023)
// for receivers:
//
//     lock_ guards:  ring    [e0 e1 .. e(n-1)]    n <= capacity, FIFO (storage_, head_, size_)
//                    sendq_  [s0 s1 ..]           waiting senders, each still holding its element
//                    closed_
//     storage, oldest first: ring, then the elements of sendq_
//     invariant: sendq_ is empty unless ring is full (at capacity 0 it is always full)
//
//     items_ (int64), a count i and a flag, one FAA-able word:
//
//                      i > 0   i elements in storage not yet promised to a receiver
//                      i = 0   none, and no receiver counted
//                      i < 0   -i receivers counted as waiting in receivers_
//
//       word = 2i - pending + (closed ? 2^62 : 0)      |i| < 2^59
//
//              pending = 1 while some sender's cancel waits for a free permit
//              (the list from pend_head_): the parity of the word.
//              open, no pending:  ... -4 -2  0  2  4 ...   (i = -2 .. 2)
//              open, pending:     ... -5 -3 -1  1  3 ...   (i = -2 .. 2)
//              closed:            >= 2^61
//
//     So a word > 0 means "a free permit, or closed", a word < -1 "receivers
//     counted", and one FAA returns the count, the flag and closedness at
//     once.
//
// Invariants while open and lock_ is free (E: elements in storage; P:
// receivers holding a permit that have not taken yet). A send publishes its
// element's permit in the lock_ section that stores the element:
//
//     max(i, 0) + P = E            every published permit has its element
//     i < 0  =>  P = E             receivers wait only when all is promised
//     sendq_ non-empty  =>  ring full
//     pending  <=>  pend_head_ != null
//
// Every element that enters storage publishes one permit, (items) i -> i + 1;
// a receiver consumes one, (items) i -> i - 1, before it takes the *oldest*
// element (permits are interchangeable, elements are not: FIFO comes from
// the store, not from which permit a receiver holds). Receivers are the
// paper's semaphore acquirers:
//
//     send(e):    lock_. closed_: closed. ring has room: push e. Else queue
//                 at the tail of sendq_ (e stays in the caller's argument).
//                 (items) i -> i + 1. unlock_. i < 0: resume the oldest
//                 receiver (with the channel's handoff policy). Queued: park
//                 until a receiver takes e (ok), or a cancel or close()
//                 takes e back out (cancelled / timeout / closed).
//     receive():  (items) i -> i - 1. i > 0: take(). Else suspend in
//                 receivers_; once resumed, take().
//     take():     lock_. Pop ring's head; if a sender is queued, move its
//                 element to ring's tail and wake it (its send is done).
//                 Capacity 0: move the element straight out of sendq_'s head
//                 sender and wake it. Nothing stored: closed (a permit can
//                 outlive its element only once the channel is closed).
//     close():    lock_. closed_ = true; take every sender out of sendq_
//                 (closed; elements kept). unlock_. (items) word -> word + 2^62;
//                 resume -i receivers; wake the senders.
//
// A closed word reads > 0, so every receiver that meets it goes straight to
// take(): once closed, permits no longer matter; take() pops what is left
// and then reports closed. Sends check closed_ under lock_, so an element is
// either in storage before close() (and drained) or refused.
//
// Why senders do not wait in a CQS queue. A waiting sender holds an element
// that must enter the buffer, or reach a receiver, in its turn and at the
// moment room appears: the receiver that makes room has to find *that*
// sender. A CQS resume passes a value to the oldest waiter; it cannot take
// one from it, and it may come before its waiter and leave its value in the
// cell, where an element of any T could not wait without an allocation. So
// senders queue, as in Go's runtime, in an intrusive FIFO under the lock that
// guards the ring (a node on the sender's stack, no allocation), and whoever
// takes their element wakes them. What receivers wait for -- a permit for
// the oldest element -- is interchangeable, which is the CQS semaphore
// unchanged: FIFO, O(1) smart cancellation, elimination, handoff policies.
// The lock is held for one move of T, a few index updates and a send's FAA,
// never across a park, a wake-up or a cqs call; a receiver's counting is a
// lock-free FAA.
//
// Fairness: FIFO for elements, for waiting senders (sendq_) and for waiting
// receivers (the cqs: a permit goes to the oldest waiter, never back to the
// word, while anyone waits). A receiver that finds an unpromised element
// (i > 0) takes the oldest one at once, even if a receiver woken earlier has
// not run yet (that one then takes the next): as with the semaphore, nobody
// overtakes in count.
//
// Cancellation. A waiting receiver: the paper's smart cancellation (Listing
// 5): (items) i -> i + 1. i < 0: others are still counted; its cell becomes
// CANCELLED and resumes skip it in O(1). i >= 0: a send (or close()) counted
// it and its resume is on the way: the cell becomes REFUSE, and the increment
// already put that permit back in the word for the next receiver. (The queue
// runs this hook in the canceller -- the timer, or whoever calls
// request_stop() -- or in the receiver; it never blocks: an FAA and, rarely,
// settle() below, which holds lock_ for a few steps.)
//
// A waiting sender (its timer or stop callback, under lock_): it may take its
// element back out of sendq_ only together with a permit, (items) i -> i - 1
// while i > 0, so that every permit keeps an element. If none is free, every
// stored element is promised to a receiver already woken: in the same CAS it
// sets the pending flag, and the request waits in the pending list; the send
// completes with ok when its element is taken -- unless a permit comes back
// first: one that a later send publishes, or one put back by a woken receiver
// that was cancelled and refused. Their FAA returns the flag with the count,
// so they settle pending requests (settle(): oldest first, one per free
// permit); one word, so no permit can slip past a request unseen.
//
// A waiting sender's record carries a claim word (channel_claim): its timer
// or stop callback touches the channel only after winning it, and whoever
// completes the send (a receive, settle(), close()) ends it -- or waits out
// the canceller that won it -- before the wake-up that lets the sender
// return. So when an operation returns, nothing of the operation that
// completed it is still inside the channel, except code that the cqs itself
// waits for (a resume's last steps), a send's work after its publish and
// close() (both waited for by the destructor); see "Undefined" below.
//
// The last access. A send's FAA publishes its permit: from then on a
// receiver may take the element, return and destroy the channel. If the FAA
// found no receiver counted and no cancel pending it is the send's last
// access. Otherwise the send still has to wake a receiver or settle pending
// cancels, and a receiver need not wait for that: the receiver counted may
// be cancelled and refuse (its increment puts the permit back in the word,
// where anyone may take it), or the receiver woken may complete the very
// sender that settles. So such a send counts itself in busy_ in the lock_
// section of its FAA -- everyone who can take its element or its permit
// takes lock_ after it, and so sees the count -- and its decrement, after
// the wake-up and the settling, is its last access; the destructor waits
// for busy_ to drop to 0.
//
// Handoff (runtime/handoff.hpp): a receiver woken by a send, and a sender woken
// by the receive that took its element, are woken with the channel's policy,
// a constructor argument. Default ces, as for spindle's other primitives: a
// fiber that wakes a parked fiber switches straight to it (the element is
// still in cache), and goes on on another worker when one is free. dispatch
// lets a producer keep filling the buffer while the consumer waits its turn
// in a ready queue: more batching, more latency. close(), timeouts and stop
// requests wake with dispatch.
//
// Memory order, as in Go's memory model: a send happens before the receive
// that takes its element completes; a receive happens before the send it
// made room for (or, at capacity 0, whose element it took) completes;
// close() happens before a receive that returns closed because of it, and
// before closed() reads true.
//
// Contract. "Room": fewer than capacity elements buffered (never at capacity
// 0). "An element there": one not promised to a receiver already woken.
//
//   operation            | closed | room         | no room
//   ---------------------+--------+--------------+-----------------------------------------
//   send(v)              | closed | ok, buffered | waits in turn; ok once buffered (capacity
//                        |        |              | >= 1) or taken by a receiver (capacity 0)
//   send(v, stop_token)  | closed | ok           | as send(v); cancelled if stop comes first
//   send_until(v, t)     | closed | ok           | as send(v); timeout if t comes first
//   try_send(v)          | closed | ok           | a receiver waits: hands v to it, ok once
//                        |        |              | taken (*); else full
//
//   operation            | an element there | none, open                 | none, closed
//   ---------------------+------------------+----------------------------+-------------
//   receive()            | ok, the oldest   | waits                      | closed
//   receive(stop_token)  | ok               | waits; cancelled on stop   | closed
//   receive_until(t)     | ok               | waits; timeout at t        | closed
//   try_receive()        | ok               | empty                      | closed
//   close()              | the first call: true, wakes every waiter; later calls: false
//
//   Every status but ok leaves a send's argument unmoved. An element already
//   there, or room, wins over a stop request or a past deadline. A deadline
//   or stop request that comes after a queued element was promised to a
//   woken receiver does not take it back: that send completes with ok.
//   (*) At capacity 0 this is the only way try_send succeeds.
//
// Size: the element buffer (capacity * sizeof(T), allocated once by the
// constructor) plus a few cache lines (the permit word; the lock, indices
// and queue heads; a cqs). Each move of T happens under the lock: a T whose
// move is expensive makes others spin meanwhile (move a pointer instead).
// When not to use it: one producer and one consumer of small trivially
// copyable values between two threads are served better by a lock-free SPSC
// ring; waiting on several channels at once (Go's select) is not supported.
//
// Undefined (aborts with a message naming the channel in debug builds,
// SPINDLE_DEBUG_CHECKS; a release build throws std::length_error for the
// first): a capacity above max_capacity(); destroying the channel while a
// sender or receiver waits on it. Undefined, not checked: destroying it
// while any other operation is running or about to start. A caller whose
// operation returned may destroy it at once even if the operation that
// completed it has not returned yet -- a receiver right after its receive,
// though the send that published the element is still leaving (the
// destructor waits for it); a caller close() woke, though close() is still
// waking others (likewise). Elements still buffered are destroyed with the
// channel.
#pragma once

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>

#include <spindle/arch/config.hpp>
#include <spindle/runtime/handoff.hpp>
#include <spindle/sync/detail/cqs.hpp>
#include <spindle/sync/detail/wait_queue.hpp>

namespace spindle {

enum class channel_status : std::uint8_t {
    ok,         // sent (buffered or taken) / received
    closed,     // the channel is closed (a receive: and nothing is left)
    full,       // try_send: no room and no waiting receiver
    empty,      // try_receive: nothing there
    timeout,    // the deadline passed first
    cancelled,  // stop was requested first
};

constexpr const char* to_string(channel_status s) noexcept {
    switch (s) {
        case channel_status::ok: return "ok";
        case channel_status::closed: return "closed";
        case channel_status::full: return "full";
        case channel_status::empty: return "empty";
        case channel_status::timeout: return "timeout";
        case channel_status::cancelled: return "cancelled";
    }
    return "?";
}

// What a receive returns: `while (auto r = ch.receive()) use(*r);`
template <class T>
struct receive_result {
    channel_status status = channel_status::closed;
    std::optional<T> value;  // engaged exactly when status == ok

    [[nodiscard]] bool ok() const noexcept { return status == channel_status::ok; }
    explicit operator bool() const noexcept { return ok(); }
    T& operator*() & noexcept { return *value; }
    const T& operator*() const& noexcept { return *value; }
    T&& operator*() && noexcept { return std::move(*value); }
    T* operator->() noexcept { return std::addressof(*value); }
    const T* operator->() const noexcept { return std::addressof(*value); }
};

namespace detail {

// How channel_core moves elements of the T it was made for.
struct channel_elem_ops {
    std::size_t size;
    std::size_t align;
    void (*construct)(void* dst, void* src) noexcept;  // ::new (dst) T(std::move(*src))
    void (*take)(void* result, void* src) noexcept;    // result (std::optional<T>*)->emplace(std::move(*src))
    void (*destroy)(void* p) noexcept;                 // p->~T()
};

template <class T>
inline constexpr channel_elem_ops channel_elem_ops_for{
    sizeof(T),
    alignof(T),
    [](void* dst, void* src) noexcept { ::new (dst) T(std::move(*static_cast<T*>(src))); },
    [](void* result, void* src) noexcept {
        static_cast<std::optional<T>*>(result)->emplace(std::move(*static_cast<T*>(src)));
    },
    [](void* p) noexcept { static_cast<T*>(p)->~T(); },
};

class channel_core;

// A waiting sender's claim word: who may touch the channel on its behalf.
//
//     waiting --a receive, settle() or close() completes it--> done
//             --its timer or stop callback wins---------------> cancelling --> cancel_done
//
// A canceller touches the channel only after winning waiting -> cancelling,
// and stores cancel_done after its last touch. Whoever completes the send
// ends the claim (waiting -> done), or waits out a cancelling one, before the
// unpark that lets the sender return: so no callback of a finished send can
// still be inside the channel, and a caller may destroy the channel as soon
// as its own operation returned (see "Undefined" above).
namespace channel_claim {
inline constexpr std::uint32_t waiting = 0;
inline constexpr std::uint32_t done = 1;
inline constexpr std::uint32_t cancelling = 2;
inline constexpr std::uint32_t cancel_done = 3;
}  // namespace channel_claim

// A sender that waits for room: its record, on its stack, queued in sendq_.
struct channel_sender {
    wait_node node;                  // its waiter; links in sendq_ (node.owner == this)
    void* elem = nullptr;            // its T: moved from when a receiver takes it
    channel_core* ch = nullptr;
    // See channel_claim. acq_rel CASes; the canceller's final store is
    // release and the completer's wait for it acquire.
    std::atomic<std::uint32_t> claim{channel_claim::waiting};
    // The rest is guarded by ch->lock_.
    channel_sender* pend_prev = nullptr;  // in the pending list (a cancel waits for a permit)
    channel_sender* pend_next = nullptr;
    channel_sender* wake_next = nullptr;  // a local list of senders to wake after unlocking
    bool pending = false;                 // in the pending list
    bool try_mode = false;                // try_send: pending from the start; withdrawn -> full
    channel_status on_cancel = channel_status::cancelled;  // timeout or cancelled
    channel_status outcome = channel_status::ok;           // written before the unpark that ends the wait
};

// The non-template part of channel<T>: elements are void* handled through
// channel_elem_ops (slow paths in src/sync/channel.cpp). A send's `elem` is
// the caller's T, moved from only when the result is ok; a receive's `result`
// is a disengaged std::optional<T>, engaged only when the result is ok.
class channel_core {
public:
    static constexpr std::size_t max_capacity = std::size_t{1} << 40;

    channel_core(std::size_t capacity, const channel_elem_ops& ops, handoff policy);
    ~channel_core();
    channel_core(const channel_core&) = delete;
    channel_core& operator=(const channel_core&) = delete;

    // deadline/st: when to give up (no_deadline / null for never); on_cancel:
    // the status to report then (timeout or cancelled).
    channel_status send(void* elem, std::chrono::steady_clock::time_point deadline, std::stop_token* st,
                        channel_status on_cancel) noexcept {
        lock_.lock();
        if (closed_) [[unlikely]] {
            lock_.unlock();
            return channel_status::closed;
        }
        if (size_ < capacity_) [[likely]] {  // room (so sendq_ is empty: see the invariants)
            push_locked(elem);
            const std::int64_t w = publish_locked();
            lock_.unlock();
            if (has_work(w)) [[unlikely]]
                publish_work(w);
            return channel_status::ok;
        }
        lock_.unlock();
        return send_slow(elem, deadline, st, on_cancel);
    }

    channel_status try_send(void* elem) noexcept;

    channel_status receive(void* result, std::chrono::steady_clock::time_point deadline, std::stop_token* st,
                           channel_status on_cancel) noexcept {
        // (items): w -> w - permit. acquire pairs with publish_locked()'s release
        // FAA: the push of the element this permit stands for happens before
        // our take() (and, on a closed word, with close()'s acq_rel FAA).
        const std::int64_t w = items_.fetch_sub(permit, std::memory_order_acquire);
        if (w > 0) [[likely]]  // a free permit (count > 0), or a closed word (drain)
            return take(result);
        return receive_slow(result, deadline, st, on_cancel);
    }

    [[nodiscard]] channel_status try_receive(void* result) noexcept {
        // relaxed: the CAS re-reads it.
        std::int64_t w = items_.load(std::memory_order_relaxed);
        while (w > 0) {
            // (items): w -> w - permit while a permit is free (or closed:
            // drain). acquire as in receive().
            if (items_.compare_exchange_weak(w, w - permit, std::memory_order_acquire, std::memory_order_relaxed))
                return take(result);
        }
        return channel_status::empty;
    }

    bool close() noexcept;

    [[nodiscard]] bool closed() const noexcept {
        // acquire pairs with close()'s acq_rel FAA: what the closer did
        // before close() is visible once this reads true.
        return is_closed(items_.load(std::memory_order_acquire));
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t size() const noexcept;
    // Test and debug: the count in items_ (a snapshot; see the header essay).
    [[nodiscard]] std::int64_t permits() const noexcept {
        return count_of(items_.load(std::memory_order_relaxed));  // a snapshot
    }
    // Test and debug: frees the receivers' queue's retired segments, then
    // counts those still allocated.
    [[nodiscard]] std::size_t queue_segments() noexcept {
        receivers_.reclaim();
        return receivers_.live_segments();
    }

private:
    struct unit {};

    // items_ = 2 * count - (pending ? 1 : 0) + (closed ? closed_offset : 0),
    // counts within (-2^59, 2^59). So the word's sign is the count's (a
    // pending flag on a count of 0 reads -1), its parity is the flag, and a
    // closed word is >= 2^61.
    static constexpr std::int64_t permit = 2;        // one count
    static constexpr std::int64_t pending_flag = 1;  // subtracted while pend_head_ != null
    static constexpr std::int64_t closed_offset = std::int64_t{1} << 62;
    static constexpr std::int64_t closed_threshold = std::int64_t{1} << 61;
    static_assert(static_cast<std::int64_t>(max_capacity) < (std::int64_t{1} << 58),
                  "buffered elements plus waiting senders must fit in a count");
    static bool is_closed(std::int64_t w) noexcept { return w >= closed_threshold; }
    static bool has_pending(std::int64_t w) noexcept { return (w & 1) != 0; }
    static std::int64_t count_of(std::int64_t w) noexcept {
        const std::int64_t open = is_closed(w) ? w - closed_offset : w;
        return (open + (open & 1)) >> 1;  // even, so the shift is exact
    }

    void* slot(std::size_t index) const noexcept { return storage_ + index * ops_->size; }

    void push_locked(void* elem) noexcept SPINDLE_REQUIRES(lock_) {
        std::size_t tail = head_ + size_;
        if (tail >= capacity_) tail -= capacity_;
        ops_->construct(slot(tail), elem);
        ++size_;
    }

    void pop_locked(void* result) noexcept SPINDLE_REQUIRES(lock_) {
        void* p = slot(head_);
        ops_->take(result, p);
        ops_->destroy(p);
        if (++head_ == capacity_) head_ = 0;
        --size_;
    }

    // Whether a publish that found `w` has work left after its FAA: wake a
    // counted receiver (count < 0), or settle a pending cancel. A closed word
    // never: close() woke everyone, and receivers drain by take(). (A send
    // checks closed_ under lock_, and close() flags the word only after it
    // set closed_, so a publish never meets a closed word; the test is
    // cheap insurance.)
    static bool has_work(std::int64_t w) noexcept { return !is_closed(w) && (w < -1 || has_pending(w)); }

    // One element entered storage: publish its permit, in the same lock_
    // section (see "The last access" above). Returns the word before the FAA;
    // if it has work (has_work), the caller runs publish_work after
    // unlocking, which the busy_ count taken here keeps the channel alive
    // for.
    std::int64_t publish_locked() noexcept SPINDLE_REQUIRES(lock_) {
        // (items): w -> w + permit. release pairs with the acquire of the
        // receiver that takes this permit: our push happens before its take().
        const std::int64_t w = items_.fetch_add(permit, std::memory_order_release);
        // (busy): b -> b + 1. relaxed: lock_'s release, next, carries it to
        // everyone who takes our element or permit (they take lock_ after
        // us), hence to a destructor they run.
        if (has_work(w)) [[unlikely]]
            busy_.fetch_add(1, std::memory_order_relaxed);
        return w;
    }

    // A publish's work after lock_: wake the receiver our permit went to,
    // settle pending cancels; then drop our busy_ count, our last access.
    SPINDLE_NOINLINE void publish_work(std::int64_t w) noexcept;

    channel_status take(void* result) noexcept {
        lock_.lock();
        if (size_ != 0 && sendq_.empty()) [[likely]] {
            pop_locked(result);
            lock_.unlock();
            return channel_status::ok;
        }
        return take_slow(result);
    }

    SPINDLE_NOINLINE channel_status take_slow(void* result) noexcept SPINDLE_RELEASE(lock_);
    SPINDLE_NOINLINE channel_status send_slow(void* elem, std::chrono::steady_clock::time_point deadline,
                                              std::stop_token* st, channel_status on_cancel) noexcept;
    SPINDLE_NOINLINE channel_status receive_slow(void* result, std::chrono::steady_clock::time_point deadline,
                                                 std::stop_token* st, channel_status on_cancel) noexcept;
    SPINDLE_NOINLINE void wake_receiver() noexcept;
    SPINDLE_NOINLINE void settle() noexcept;
    static channel_status wait_as_sender(channel_sender& s, wait_guard* guard) noexcept;
    static void finish_sender(channel_sender* s, handoff policy) noexcept;
    static bool close_claim(channel_sender* s) noexcept;
    static void await_canceller(channel_sender* s) noexcept;
    bool try_take_permit_locked() noexcept SPINDLE_REQUIRES(lock_);
    bool take_permit_or_flag_locked() noexcept SPINDLE_REQUIRES(lock_);
    void withdraw_locked(channel_sender* s, channel_status outcome) noexcept SPINDLE_REQUIRES(lock_);
    void pend_link_locked(channel_sender* s) noexcept SPINDLE_REQUIRES(lock_);
    void pend_unlink_locked(channel_sender* s) noexcept SPINDLE_REQUIRES(lock_);
    static void cancel_send(wait_node* n) noexcept;
    static bool on_cancellation(void* self, std::uint64_t tag) noexcept;
    static void complete_refused_resume(void* self, unit) noexcept;
    static void return_value(void* self, unit) noexcept;
    [[noreturn]] SPINDLE_COLD void bad_state(const char* what) const noexcept;

    // The receivers' word (see the essay and the encoding above). Every
    // change is an RMW, so a publish heads a release sequence that any later
    // taker's acquire RMW reads from.
    alignas(arch::cache_line) std::atomic<std::int64_t> items_{0};

    // mutable: size() const takes it; it is not part of the channel's value.
    alignas(arch::cache_line) mutable spinlock lock_;
    const std::size_t capacity_;
    const channel_elem_ops* const ops_;
    std::byte* const storage_;  // capacity_ slots of ops_->size bytes; null at capacity 0
    const handoff policy_;
    std::size_t head_ SPINDLE_GUARDED_BY(lock_) = 0;
    std::size_t size_ SPINDLE_GUARDED_BY(lock_) = 0;
    bool closed_ SPINDLE_GUARDED_BY(lock_) = false;
    wait_list sendq_ SPINDLE_GUARDED_BY(lock_);
    channel_sender* pend_head_ SPINDLE_GUARDED_BY(lock_) = nullptr;
    channel_sender* pend_tail_ SPINDLE_GUARDED_BY(lock_) = nullptr;
    // Set by close() as its last access to the channel (release); the
    // destructor of a closed channel waits for it (acquire).
    std::atomic<bool> close_done_{false};
    // Sends between a publish that found work (publish_locked) and the end
    // of that work (publish_work); the destructor waits for 0. Counted in
    // publish's lock_ section, dropped (release) as the send's last access.
    std::atomic<std::uint32_t> busy_{0};
#if SPINDLE_DEBUG_CHECKS
    // Receivers inside a wait (relaxed: a misuse check). Waiting senders
    // are the ones in sendq_.
    std::atomic<std::int64_t> debug_receivers_{0};
#endif
    cqs<unit> receivers_;
};

}  // namespace detail

template <class T>
class channel {
    static_assert(std::is_object_v<T> && !std::is_array_v<T> && !std::is_const_v<T>,
                  "a channel carries non-const object types");
    static_assert(std::is_nothrow_move_constructible_v<T>,
                  "elements are moved under the channel's lock and in noexcept paths: T's move must not throw");
    static_assert(std::is_nothrow_destructible_v<T>, "T's destructor must not throw");

public:
    using value_type = T;

    static constexpr std::size_t max_capacity() noexcept { return detail::channel_core::max_capacity; }

    // capacity 0: rendezvous. policy: how a woken fiber runs (runtime/handoff.hpp).
    explicit channel(std::size_t capacity, handoff policy = handoff::ces)
        : core_(capacity, detail::channel_elem_ops_for<T>, policy) {}
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;

    // ---- send: `v` is moved from only when the result is ok ---------------

    // ok | closed. Waits for room (or, at capacity 0, for a receiver).
    [[nodiscard]] channel_status send(T&& v) noexcept {
        return core_.send(addr(v), detail::no_deadline, nullptr, channel_status::cancelled);
    }
    [[nodiscard]] channel_status send(const T& v) requires std::copy_constructible<T> {
        T copy(v);
        return send(std::move(copy));
    }

    // ok | closed | cancelled (stop requested on `st` first).
    [[nodiscard]] channel_status send(T&& v, std::stop_token st) noexcept {
        return core_.send(addr(v), detail::no_deadline, &st, channel_status::cancelled);
    }
    [[nodiscard]] channel_status send(const T& v, std::stop_token st) requires std::copy_constructible<T> {
        T copy(v);
        return send(std::move(copy), std::move(st));
    }

    // ok | closed | full. Never waits for room; see (*) under the contract table.
    [[nodiscard]] channel_status try_send(T&& v) noexcept { return core_.try_send(addr(v)); }
    [[nodiscard]] channel_status try_send(const T& v) requires std::copy_constructible<T> {
        T copy(v);
        return try_send(std::move(copy));
    }

    // ok | closed | timeout.
    template <class Clock, class Duration>
    [[nodiscard]] channel_status send_until(T&& v, const std::chrono::time_point<Clock, Duration>& t) {
        const auto deadline = detail::to_steady_deadline(t);
        if (std::chrono::steady_clock::now() >= deadline) {  // past: do not queue
            const channel_status s = core_.try_send(addr(v));
            return s == channel_status::full ? channel_status::timeout : s;
        }
        return core_.send(addr(v), deadline, nullptr, channel_status::timeout);
    }
    template <class Clock, class Duration>
    [[nodiscard]] channel_status send_until(const T& v, const std::chrono::time_point<Clock, Duration>& t)
        requires std::copy_constructible<T>
    {
        T copy(v);
        return send_until(std::move(copy), t);
    }
    template <class Rep, class Period>
    [[nodiscard]] channel_status send_for(T&& v, const std::chrono::duration<Rep, Period>& d) {
        return send_until(std::move(v), std::chrono::steady_clock::now() +
                                            std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }
    template <class Rep, class Period>
    [[nodiscard]] channel_status send_for(const T& v, const std::chrono::duration<Rep, Period>& d)
        requires std::copy_constructible<T>
    {
        T copy(v);
        return send_for(std::move(copy), d);
    }

    // ---- receive -----------------------------------------------------------

    // ok | closed. Waits for an element.
    [[nodiscard]] receive_result<T> receive() noexcept {
        receive_result<T> r;
        r.status = core_.receive(&r.value, detail::no_deadline, nullptr, channel_status::cancelled);
        return r;
    }

    // ok | closed | cancelled.
    [[nodiscard]] receive_result<T> receive(std::stop_token st) noexcept {
        receive_result<T> r;
        r.status = core_.receive(&r.value, detail::no_deadline, &st, channel_status::cancelled);
        return r;
    }

    // ok | closed | empty.
    [[nodiscard]] receive_result<T> try_receive() noexcept {
        receive_result<T> r;
        r.status = core_.try_receive(&r.value);
        return r;
    }

    // ok | closed | timeout.
    template <class Clock, class Duration>
    [[nodiscard]] receive_result<T> receive_until(const std::chrono::time_point<Clock, Duration>& t) {
        const auto deadline = detail::to_steady_deadline(t);
        receive_result<T> r;
        if (std::chrono::steady_clock::now() >= deadline) {  // past: do not queue
            r.status = core_.try_receive(&r.value);
            if (r.status == channel_status::empty) r.status = channel_status::timeout;
            return r;
        }
        r.status = core_.receive(&r.value, deadline, nullptr, channel_status::timeout);
        return r;
    }
    template <class Rep, class Period>
    [[nodiscard]] receive_result<T> receive_for(const std::chrono::duration<Rep, Period>& d) {
        return receive_until(std::chrono::steady_clock::now() +
                             std::chrono::ceil<std::chrono::steady_clock::duration>(d));
    }

    // ---- closing and state ---------------------------------------------------

    // Closes the channel and wakes every waiter; true if this call closed it.
    bool close() noexcept { return core_.close(); }

    [[nodiscard]] bool closed() const noexcept { return core_.closed(); }
    [[nodiscard]] std::size_t capacity() const noexcept { return core_.capacity(); }
    // Elements in the buffer now (a snapshot; not counting waiting senders').
    [[nodiscard]] std::size_t size() const noexcept { return core_.size(); }
    // Test and debug: the permit count (> 0 elements not promised to a
    // receiver, < 0 receivers counted as waiting).
    [[nodiscard]] std::int64_t debug_permits() const noexcept { return core_.permits(); }
    // Test and debug: segments of the receivers' waiter queue still allocated.
    [[nodiscard]] std::size_t debug_queue_segments() noexcept { return core_.queue_segments(); }

private:
    static void* addr(T& v) noexcept { return static_cast<void*>(std::addressof(v)); }

    detail::channel_core core_;
};

}  // namespace spindle
