// bench/harness/harness.hpp — the shared benchmark harness.
//
// Every benchmark program compares *variants* (spindle and its competitors)
// on one *workload* with fixed *params*. This machine is shared and noisy, so
// variants never run in separate blocks: the harness runs them interleaved,
// one measurement of each per round (A B C, then B C A, then C A B, ... so no
// variant always goes first), for `reps` rounds after one discarded warm-up
// round, and reports median, min and max per variant. Ratios between
// variants come from the same rounds.
//
// Output: one JSON record per variant per comparison, one per line, in the
// file named by --out (see docs/benchmarks.md, "Result records"):
//
//   {"suite": "switch", "workload": "yield", "variant": "spindle",
//    "params": {"fibers": 10, "workers": 1}, "metric": "ns_per_op",
//    "higher_is_better": false, "median": 2.1, "min": 2.0, "max": 2.4,
//    "reps": 5, "samples": [...]}
//
// plus, where set, "reference": true, "note": "..." and "baseline": "name"
// (the variant this record's ratio is computed against, if not the
// reference). A variant that was not measured gets a record with a
// "status" instead of median, min, max and reps:
//
//   {..., "variant": "std_counting_semaphore", ..., "status": "hung",
//    "reason": "no result within 10 s (...)"}
//
// "hung": the watchdog (below) stopped it; "skipped": not run, the suite's
// time budget (--time-budget) was spent (a workload skipped whole has one
// such record, with variant "*", metric "*" and no params).
//
// Progress goes to stderr, one line per comparison.
//
// The watchdog, and why it lives here. A variant that hangs (a competitor's
// lost wake-up, say) blocks the thread that measures it, and a thread
// blocked in the kernel cannot be cancelled: only the end of the process
// image gets rid of it. A forked child per comparison would keep the
// parent clean, but the measurements would leave the process the program
// set up: switch/yield's scheduler and cqs/abort's queued waiters live on
// worker threads built before compare(), which a fork does not copy, and
// cqs/abort and ces/queuing-delay gather side results into the caller's
// memory during the measurements. So measurements stay in-process, exactly
// as before, and are watched:
//   * Each measurement arms a timer (a timerfd: one system call before and
//     one after); a watchdog thread blocked on it wakes only when a
//     measurement overruns its budget: 100x the slowest finished
//     measurement of the comparison, at least 10 s, at most --hang-budget
//     (60 s quick, 300 s full; the first measurement of a comparison gets
//     the most).
//   * On an overrun the watchdog kills the child processes the measurement
//     started (watch_child), saves what this run has measured (every
//     finished comparison's summaries, the hung variant, the start time) to
//     a state file next to --out, and re-executes the program with --resume
//     FILE. The new image replays the finished comparisons (compare()
//     returns their saved summaries without measuring, report() writes
//     nothing), then measures the hung comparison again without the hung
//     variant, records that one as "hung" and goes on. The records file is
//     appended to. Nothing is lost but the hung comparison's samples.
// That relies on a program calling compare() in the same order with the
// same arguments whenever it runs with the same command line, which every
// program here does. tools/bench.py adds the outer bound: a budget per
// suite, passed on as --time-budget, and a kill past it (for a hang outside
// a measurement, which the watchdog does not see).
//
// Command line of every benchmark program:
//   --out FILE          where to write records (default: stdout)
//   --quick             the quick suite (default): small sizes, few reps
//   --full              paper-sized sweeps
//   --reps N            override the number of measured rounds
//   --only NAME         run only workloads whose name contains NAME
//   --hang-budget S     the longest one measurement may take, seconds
//   --time-budget S     past S seconds of the run, record comparisons and
//                       workloads as "skipped" instead of running them
//   --test-hang V[:K]   test only: the K-th measurement (default 1, the
//                       warm-up) of variant V in every comparison blocks
//                       forever in a thread join, as a lost wake-up would
//   --resume FILE       internal: the watchdog's restart after a hang
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <unistd.h>  // sysconf

namespace spindle::bench {

// Resident set size of this process in bytes (from /proc/self/statm; 0 when
// it cannot be read).
inline long rss_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    long pages_total = 0, pages_rss = 0;
    if (f) {
        if (std::fscanf(f, "%ld %ld", &pages_total, &pages_rss) != 2) pages_rss = 0;
        std::fclose(f);
    }
    return pages_rss * sysconf(_SC_PAGESIZE);
}

inline double now_ns() {
    return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Keep a value alive in the optimizer's eyes.
template <class T>
inline void do_not_optimize(T const& v) {
    __asm__ volatile("" : : "r,m"(v) : "memory");
}

// A parameter value: a number or a string.
struct param {
    std::string key;
    std::string json;  // already JSON-encoded
    param(std::string k, long long v) : key(std::move(k)), json(std::to_string(v)) {}
    param(std::string k, int v) : param(std::move(k), static_cast<long long>(v)) {}
    param(std::string k, unsigned v) : param(std::move(k), static_cast<long long>(v)) {}
    param(std::string k, std::size_t v) : param(std::move(k), static_cast<long long>(v)) {}
    // A fractional value (e.g. writer_pct 6.25), written with %g: 50 -> 50.
    param(std::string k, double v) : key(std::move(k)), json(number(v)) {}
    param(std::string k, const char* v) : key(std::move(k)), json(quote(v)) {}
    static std::string number(double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        return buf;
    }
    static std::string quote(const std::string& s) {
        std::string o = "\"";
        for (char c : s) {
            if (c == '"' || c == '\\') o += '\\';
            if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                o += buf;
                continue;
            }
            o += c;
        }
        return o + "\"";
    }
};
using params = std::vector<param>;

// What a comparison measures.
struct metric {
    std::string name;  // ns_per_op, ops_per_s, bytes, ...
    bool higher_is_better = false;
};

// One competitor: a name from docs/benchmarks.md ("spindle", "boost_context",
// "cxx20_stackless", "callback", ...) and a function that performs one
// measurement and returns its value in the comparison's metric.
struct variant {
    variant(std::string n, std::function<double()> m, bool ref = false, std::string nt = {}, std::string base = {})
        : name(std::move(n)), measure(std::move(m)), reference(ref), note(std::move(nt)), baseline(std::move(base)) {}
    std::string name;
    std::function<double()> measure;
    bool reference = false;  // the ratio denominator (default: first "spindle*")
    std::string note;
    // The variant of the same comparison this one's ratio is computed
    // against, when not the reference (e.g. a thread-only competitor against
    // spindle's thread variant); empty: the reference.
    std::string baseline;
};

struct summary {
    std::string variant;
    double median = 0, min = 0, max = 0;
    std::vector<double> samples;
    // Empty: measured. "hung" or "skipped" (see the header): not measured;
    // median, min and max are then NaN, samples empty, and `reason` says why.
    std::string status;
    std::string reason;
    bool measured() const { return status.empty(); }
};

// The child processes a measurement has started and not yet reaped: the
// watchdog kills them before it restarts the program, so that a hung child
// (Boost.Fiber's work-stealing threads spin) does not outlive its
// measurement. in_child (runners.hpp) and locks' LevelDB driver register
// theirs.
namespace detail {
inline std::mutex& child_mutex() {
    static std::mutex m;
    return m;
}
inline std::vector<pid_t>& child_pids() {
    static std::vector<pid_t> v;
    return v;
}
}  // namespace detail

inline void watch_child(pid_t pid) {
    std::lock_guard<std::mutex> lk(detail::child_mutex());
    detail::child_pids().push_back(pid);
}

inline void forget_child(pid_t pid) {
    std::lock_guard<std::mutex> lk(detail::child_mutex());
    auto& v = detail::child_pids();
    v.erase(std::remove(v.begin(), v.end(), pid), v.end());
}

class harness;

namespace detail {
inline harness*& current_harness() {
    static harness* h = nullptr;
    return h;
}
}  // namespace detail

// Called by a measurement that knows it is hung (a child it waits for has
// overrun its own limit): records the variant as hung with `reason` and
// goes on as the watchdog would. Outside a measurement: prints the reason
// and exits 1.
[[noreturn]] void measurement_hung(const std::string& reason);

class harness {
public:
    harness(int argc, char** argv, std::string suite) : suite_(std::move(suite)) {
        std::string resume_path;
        for (int i = 1; i < argc; ++i) {
            std::string a = argv[i];
            auto value = [&](const char* what) -> std::string {
                if (i + 1 >= argc) usage(("missing value after " + std::string(what)).c_str());
                return argv[++i];
            };
            if (a == "--out") out_path_ = value("--out");
            else if (a == "--quick") full_ = false;
            else if (a == "--full") full_ = true;
            else if (a == "--reps") reps_override_ = std::atoi(value("--reps").c_str());
            else if (a == "--only") only_ = value("--only");
            else if (a == "--hang-budget") hang_budget_s_ = seconds(value("--hang-budget"), "--hang-budget");
            else if (a == "--time-budget") time_budget_s_ = seconds(value("--time-budget"), "--time-budget");
            else if (a == "--test-hang") test_hang(value("--test-hang"));
            else if (a == "--resume") resume_path = value("--resume");
            else if (a == "--help" || a == "-h") usage(nullptr);
            else usage(("unknown argument '" + a + "'").c_str());
        }
        if (hang_budget_s_ <= 0) hang_budget_s_ = full_ ? 300 : 60;
        start_ns_ = now_ns();
        if (!resume_path.empty()) load_state(resume_path);
        if (!out_path_.empty()) {
            // "e": close-on-exec, the restart opens it again, to append.
            out_ = std::fopen(out_path_.c_str(), resuming() ? "ae" : "we");
            if (out_ == nullptr) {
                std::fprintf(stderr, "%s: cannot open %s for writing\n", suite_.c_str(), out_path_.c_str());
                std::exit(2);
            }
        } else {
            out_ = stdout;
        }
        cmdline_ = read_cmdline();
        start_watchdog();
        detail::current_harness() = this;
    }
    ~harness() {
        detail::current_harness() = nullptr;
        stop_watchdog();
        if (ff_)
            std::fprintf(stderr,
                         "%s: the comparison that hung (number %d) was never reached again; its hung variant is "
                         "not recorded\n",
                         suite_.c_str(), resume_at_ + 1);
        if (out_ != stdout) std::fclose(out_);
    }
    harness(const harness&) = delete;
    harness& operator=(const harness&) = delete;

    bool full() const { return full_; }
    bool quick() const { return !full_; }
    // Measured rounds: the override, else `quick_reps`/`full_reps`.
    int reps(int quick_reps = 5, int full_reps = 11) const {
        if (reps_override_ > 0) return reps_override_;
        return full_ ? full_reps : quick_reps;
    }
    // Whether to run `workload`: --only allows it and the time budget is not
    // spent (if it is, the workload gets one "skipped" record). While
    // replaying, the budget is not looked at: the workload of the hung
    // comparison must be reached again.
    bool wants(const std::string& workload) {
        if (!only_.empty() && workload.find(only_) == std::string::npos) return false;
        if (ff_ || !over_time_budget()) return true;
        if (skipped_workloads_.insert(workload).second) {
            summary s;
            s.variant = "*";
            mark(s, "skipped", budget_reason());
            write_status_record(workload, {}, {"*", false}, s, "");
            std::fprintf(stderr, "  %s/%s: skipped (%s)\n", suite_.c_str(), workload.c_str(), s.reason.c_str());
        }
        return false;
    }
    // True while this image replays the comparisons an earlier one finished
    // (after a restart): work that only feeds report() can be left out.
    bool replaying() const { return ff_; }

    // Run the variants interleaved and write one record per variant.
    std::vector<summary> compare(const std::string& workload, const params& ps, const metric& m,
                                 const std::vector<variant>& vs, int reps = 0) {
        const int index = compare_count_++;
        if (ff_ && index < resume_at_) {
            if (static_cast<std::size_t>(index) < done_.size()) return done_[static_cast<std::size_t>(index)];
            fail_resume("the saved results end before the comparison that hung");
        }
        std::vector<summary> result(vs.size());
        for (std::size_t i = 0; i < vs.size(); ++i) result[i].variant = vs[i].name;
        if (ff_ && index == resume_at_) {
            ff_ = false;
            for (const auto& [name, reason] : resume_hung_)
                for (auto& s : result)
                    if (s.variant == name) mark(s, "hung", reason);
        }
        if (reps <= 0) reps = this->reps();
        std::vector<std::size_t> active;  // the variants to measure
        const bool skip_all = over_time_budget();
        for (std::size_t i = 0; i < vs.size(); ++i) {
            if (!result[i].measured()) continue;
            if (skip_all) mark(result[i], "skipped", budget_reason());
            else active.push_back(i);
        }

        // Warm-up (discarded), then `reps` rounds, each starting one variant
        // further on; every measurement is watched.
        {
            std::lock_guard<std::mutex> lk(wd_m_);
            cur_index_ = index;
            cur_label_ = suite_ + "/" + workload + " " + params_text(ps);
            cur_slowest_ns_ = 0;
        }
        std::vector<int> measured_count(vs.size(), 0);
        auto one = [&](std::size_t i) {
            const int nth = ++measured_count[i];
            const double t0 = now_ns();
            arm(vs[i].name, nth, reps + 1);
            double v;
            if (vs[i].name == test_hang_variant_ && nth == test_hang_at_) v = hang_forever();
            else v = vs[i].measure();
            disarm(now_ns() - t0);
            return v;
        };
        for (std::size_t i : active) (void)one(i);
        for (int r = 0; r < reps && !active.empty(); ++r) {
            for (std::size_t k = 0; k < active.size(); ++k) {
                std::size_t i = active[(k + static_cast<std::size_t>(r)) % active.size()];
                result[i].samples.push_back(one(i));
            }
        }

        std::string line = suite_ + "/" + workload + " " + params_text(ps) + ":";
        for (std::size_t i = 0; i < vs.size(); ++i) {
            char buf[160];
            if (result[i].measured()) {
                result[i] = summarize(vs[i].name, result[i].samples);
                write_record(workload, ps, m, result[i], vs[i].reference, vs[i].note, vs[i].baseline);
                std::snprintf(buf, sizeof buf, " %s %.4g", vs[i].name.c_str(), result[i].median);
            } else {
                write_status_record(workload, ps, m, result[i], vs[i].note, vs[i].baseline);
                std::snprintf(buf, sizeof buf, " %s %s", vs[i].name.c_str(), result[i].status.c_str());
            }
            line += buf;
        }
        std::fprintf(stderr, "  %s %s (median of %d)\n", line.c_str(), m.name.c_str(), reps);
        done_.push_back(result);
        return result;
    }

    // Write a record for a value computed elsewhere (e.g. a ratio of medians,
    // or a single measurement such as peak RSS). A summary that is not
    // measured is written as such; one with no values or a value that is
    // not finite (computed from a variant that hung) is not written. While
    // replaying, nothing is written: the earlier image did.
    void report(const std::string& workload, const params& ps, const metric& m, const summary& s,
                bool reference = false, const std::string& note = "") {
        if (ff_) return;
        if (!s.measured()) {
            write_status_record(workload, ps, m, s, note);
            return;
        }
        if (s.samples.empty() || !finite(s)) {
            std::fprintf(stderr, "  %s/%s %s: %s %s not written: no finite value (from a variant that hung?)\n",
                         suite_.c_str(), workload.c_str(), params_text(ps).c_str(), s.variant.c_str(),
                         m.name.c_str());
            return;
        }
        write_record(workload, ps, m, s, reference, note);
        std::fprintf(stderr, "  %s/%s %s: %s %.4g %s\n", suite_.c_str(), workload.c_str(),
                     params_text(ps).c_str(), s.variant.c_str(), s.median, m.name.c_str());
    }

    // A record of `rounds` repeated rounds of one variant (the hang-freedom
    // workload): metric rounds_finished, its value `finished`; reps =
    // `rounds` attempted; plus "hung_rounds" and "round_budget_ms".
    void report_rounds(const std::string& workload, const params& ps, const std::string& variant, long rounds,
                       long finished, long hung, double round_budget_ms, bool reference, const std::string& note) {
        if (ff_) return;
        summary s;
        s.variant = variant;
        const std::string n = std::to_string(finished);  // whole numbers: %g would round a million
        write_json(workload, ps, {"rounds_finished", true}, s, reference, note, "",
                   ", \"median\": " + n + ", \"min\": " + n + ", \"max\": " + n +
                       ", \"reps\": " + std::to_string(std::max(rounds, 1L)) + ", \"hung_rounds\": " +
                       std::to_string(hung) + ", \"round_budget_ms\": " + num(round_budget_ms));
        std::fprintf(stderr, "  %s/%s %s: %s %ld of %ld rounds finished, %ld hung\n", suite_.c_str(),
                     workload.c_str(), params_text(ps).c_str(), variant.c_str(), finished, rounds, hung);
    }

    static summary summarize(const std::string& name, std::vector<double> v) {
        summary s;
        s.variant = name;
        s.samples = v;
        if (v.empty()) return s;
        // A NaN (a value derived from a variant that hung) would break the
        // sort's ordering: the whole summary is NaN instead.
        if (std::any_of(v.begin(), v.end(), [](double x) { return !std::isfinite(x); })) {
            s.median = s.min = s.max = std::numeric_limits<double>::quiet_NaN();
            return s;
        }
        std::sort(v.begin(), v.end());
        std::size_t n = v.size();
        s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
        s.min = v.front();
        s.max = v.back();
        return s;
    }

private:
    friend void measurement_hung(const std::string& reason);

    [[noreturn]] void usage(const char* err) const {
        if (err) std::fprintf(stderr, "spindle_bench_%s: %s\n", suite_.c_str(), err);
        std::fprintf(stderr,
                     "usage: spindle_bench_%s [--out FILE] [--quick|--full] [--reps N] [--only NAME]\n"
                     "       [--hang-budget SECONDS] [--time-budget SECONDS] [--test-hang VARIANT[:K]]\n",
                     suite_.c_str());
        std::exit(err ? 2 : 0);
    }

    double seconds(const std::string& s, const char* what) const {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !(v > 0 && v < 1e7))
            usage((std::string("bad ") + what + " '" + s + "'").c_str());
        return v;
    }

    void test_hang(const std::string& spec) {
        const std::size_t colon = spec.rfind(':');
        test_hang_variant_ = spec.substr(0, colon);
        if (colon != std::string::npos) {
            test_hang_at_ = std::atoi(spec.c_str() + colon + 1);
            if (test_hang_at_ < 1) usage(("bad --test-hang '" + spec + "'").c_str());
        }
        if (test_hang_variant_.empty()) usage(("bad --test-hang '" + spec + "'").c_str());
    }

    // --test-hang: a thread that waits for a notification nobody sends,
    // joined -- a measurement stuck the way a lost wake-up leaves one.
    [[noreturn]] static double hang_forever() {
        std::mutex m;
        std::condition_variable cv;
        std::thread t([&] {
            std::unique_lock<std::mutex> lk(m);
            cv.wait(lk, [] { return false; });
        });
        t.join();
        std::abort();
    }

    static std::string params_text(const params& ps) {
        std::string t = "[";
        for (std::size_t i = 0; i < ps.size(); ++i) {
            if (i) t += " ";
            t += ps[i].key + "=" + ps[i].json;
        }
        return t + "]";
    }

    static std::string num(double v) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        return buf;
    }

    static bool finite(const summary& s) {
        return std::isfinite(s.median) && std::isfinite(s.min) && std::isfinite(s.max) &&
               std::all_of(s.samples.begin(), s.samples.end(), [](double x) { return std::isfinite(x); });
    }

    static void mark(summary& s, const char* status, const std::string& reason) {
        s.status = status;
        s.reason = reason;
        s.median = s.min = s.max = std::numeric_limits<double>::quiet_NaN();
        s.samples.clear();
    }

    // ----- records

    void write_record(const std::string& workload, const params& ps, const metric& m, const summary& s,
                      bool reference, const std::string& note, const std::string& baseline = {}) {
        std::string j = ", \"median\": " + num(s.median) + ", \"min\": " + num(s.min) + ", \"max\": " + num(s.max) +
                        ", \"reps\": " + std::to_string(s.samples.size()) + ", \"samples\": [";
        for (std::size_t i = 0; i < s.samples.size(); ++i) {
            if (i) j += ", ";
            j += num(s.samples[i]);
        }
        j += "]";
        write_json(workload, ps, m, s, reference, note, baseline, j);
    }

    void write_status_record(const std::string& workload, const params& ps, const metric& m, const summary& s,
                             const std::string& note, const std::string& baseline = {}) {
        const std::string j = ", \"status\": " + param::quote(s.status) + ", \"reason\": " + param::quote(s.reason);
        write_json(workload, ps, m, s, false, note, baseline, j);
    }

    // {"suite", "workload", "variant", "params", "metric",
    // "higher_is_better", <body>, "reference", "note", "baseline"}
    void write_json(const std::string& workload, const params& ps, const metric& m, const summary& s,
                    bool reference, const std::string& note, const std::string& baseline, const std::string& body) {
        std::string j = "{\"suite\": " + param::quote(suite_) + ", \"workload\": " + param::quote(workload) +
                        ", \"variant\": " + param::quote(s.variant) + ", \"params\": {";
        for (std::size_t i = 0; i < ps.size(); ++i) {
            if (i) j += ", ";
            j += param::quote(ps[i].key) + ": " + ps[i].json;
        }
        j += "}, \"metric\": " + param::quote(m.name) +
             ", \"higher_is_better\": " + (m.higher_is_better ? "true" : "false") + body;
        if (reference) j += ", \"reference\": true";
        if (!note.empty()) j += ", \"note\": " + param::quote(note);
        if (!baseline.empty()) j += ", \"baseline\": " + param::quote(baseline);
        j += "}\n";
        std::fputs(j.c_str(), out_);
        std::fflush(out_);
    }

    // ----- time budget

    bool over_time_budget() {
        if (time_budget_s_ <= 0 || now_ns() - start_ns_ <= time_budget_s_ * 1e9) return false;
        if (!said_over_budget_) {
            said_over_budget_ = true;
            std::fprintf(stderr, "%s: the time budget of %g s is spent: what is left is recorded as skipped\n",
                         suite_.c_str(), time_budget_s_);
        }
        return true;
    }

    std::string budget_reason() const {
        return "not run: the suite's time budget of " + num(time_budget_s_) + " s was spent";
    }

    // ----- watchdog (see the header)

    static constexpr double hang_factor = 100;     // x the slowest finished measurement of the comparison
    static constexpr double hang_floor_s = 10;     // ... but at least this, and at most --hang-budget

    void start_watchdog() {
        tfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
        if (tfd_ < 0) {
            std::fprintf(stderr, "%s: timerfd_create: %s; measurements are not watched\n", suite_.c_str(),
                         std::strerror(errno));
            return;
        }
        watchdog_ = std::thread([this] { watch(); });
    }

    void stop_watchdog() {
        if (!watchdog_.joinable()) return;
        {
            std::lock_guard<std::mutex> lk(wd_m_);
            stopping_ = true;
        }
        set_timer(1e-9);  // wake it now
        watchdog_.join();
        close(tfd_);
    }

    void set_timer(double seconds) {
        if (tfd_ < 0) return;
        itimerspec its{};
        if (seconds > 0) {
            const auto ns = static_cast<long long>(seconds * 1e9);
            its.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
            its.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
            if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
        }
        timerfd_settime(tfd_, 0, &its, nullptr);
    }

    void arm(const std::string& variant, int nth, int of) {
        std::lock_guard<std::mutex> lk(wd_m_);
        const double budget = cur_slowest_ns_ <= 0
                                  ? hang_budget_s_
                                  : std::min(hang_budget_s_, std::max(std::min(hang_floor_s, hang_budget_s_),
                                                                      hang_factor * cur_slowest_ns_ * 1e-9));
        cur_variant_ = variant;
        cur_nth_ = nth;
        cur_of_ = of;
        cur_budget_s_ = budget;
        cur_deadline_ns_ = now_ns() + budget * 1e9;
        armed_ = true;
        set_timer(budget);
    }

    void disarm(double took_ns) {
        std::lock_guard<std::mutex> lk(wd_m_);
        armed_ = false;
        set_timer(0);
        cur_slowest_ns_ = std::max(cur_slowest_ns_, took_ns);
    }

    void watch() {
        for (;;) {
            std::uint64_t expirations = 0;
            const ssize_t n = read(tfd_, &expirations, sizeof expirations);
            if (n < 0 && errno != EINTR && errno != EAGAIN) return;
            std::unique_lock<std::mutex> lk(wd_m_);
            if (stopping_) return;
            if (!armed_ || now_ns() < cur_deadline_ns_) continue;  // a stale expiry
            char why[256];
            std::snprintf(why, sizeof why,
                          "no result within %g s (its measurement %d of %d in this comparison, the warm-up "
                          "counted; the comparison was measured again without it)",
                          cur_budget_s_, cur_nth_, cur_of_);
            restart_without_current(why);  // holds wd_m_ to the end: the measuring thread stays out
        }
    }

    // The current measurement's variant hung: record it and go on in a new
    // image of the program (see the header). Called with wd_m_ held.
    [[noreturn]] void restart_without_current(const std::string& reason) {
        {
            std::lock_guard<std::mutex> lk(detail::child_mutex());
            for (pid_t pid : detail::child_pids()) kill(pid, SIGKILL);
        }
        std::fprintf(stderr, "  %s: %s hung: %s; restarting the program to go on without it\n",
                     cur_label_.c_str(), cur_variant_.c_str(), reason.c_str());
        std::vector<std::pair<std::string, std::string>> hung;
        if (cur_index_ == resume_at_) hung = resume_hung_;
        hung.emplace_back(cur_variant_, reason);
        // Kept beside the records (or in /tmp for stdout), removed when read.
        const std::string path = out_path_.empty()
                                     ? "/tmp/spindle_bench_" + suite_ + "." + std::to_string(getpid()) + ".resume"
                                     : out_path_ + ".resume";
        if (!save_state(path, cur_index_, hung)) {
            std::fprintf(stderr, "%s: cannot write %s: %s\n", suite_.c_str(), path.c_str(), std::strerror(errno));
            std::fflush(nullptr);
            _exit(3);
        }
        std::vector<std::string> args;
        for (std::size_t i = 0; i < cmdline_.size(); ++i) {
            if (cmdline_[i] == "--resume" && i + 1 < cmdline_.size()) {
                ++i;
                continue;
            }
            args.push_back(cmdline_[i]);
        }
        args.push_back("--resume");
        args.push_back(path);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        std::fflush(nullptr);
        execv("/proc/self/exe", argv.data());
        std::fprintf(stderr, "%s: cannot restart (execv /proc/self/exe: %s)\n", suite_.c_str(), std::strerror(errno));
        std::fflush(nullptr);
        _exit(3);
    }

    static std::vector<std::string> read_cmdline() {
        std::vector<std::string> out;
        std::ifstream f("/proc/self/cmdline", std::ios::binary);
        std::string arg;
        while (std::getline(f, arg, '\0')) out.push_back(arg);
        return out;
    }

    // ----- the state a restart carries over
    //
    //   spindle-bench-resume 1
    //   start_ns <the run's start, CLOCK_MONOTONIC ns>
    //   at <index of the comparison that hung>
    //   c <number of summaries>          one per finished comparison, each
    //   s <status|-> <n> <median> <min> <max> <n samples> <variant>
    //   r <reason>                       after every s and h line
    //   h <variant>                      a hung variant of comparison `at`

    bool resuming() const { return resume_at_ >= 0; }

    bool save_state(const std::string& path, int at, const std::vector<std::pair<std::string, std::string>>& hung) {
        const std::string tmp = path + ".tmp";
        std::FILE* f = std::fopen(tmp.c_str(), "w");
        if (f == nullptr) return false;
        std::fprintf(f, "spindle-bench-resume 1\nstart_ns %.17g\nat %d\n", start_ns_, at);
        for (const auto& cmp : done_) {
            std::fprintf(f, "c %zu\n", cmp.size());
            for (const summary& s : cmp) {
                std::fprintf(f, "s %s %zu %.17g %.17g %.17g", s.status.empty() ? "-" : s.status.c_str(),
                             s.samples.size(), s.median, s.min, s.max);
                for (double x : s.samples) std::fprintf(f, " %.17g", x);
                std::fprintf(f, " %s\nr %s\n", s.variant.c_str(), one_line(s.reason).c_str());
            }
        }
        for (const auto& [name, reason] : hung) std::fprintf(f, "h %s\nr %s\n", name.c_str(), one_line(reason).c_str());
        const bool ok = std::fflush(f) == 0 && std::ferror(f) == 0;
        std::fclose(f);
        return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
    }

    static std::string one_line(std::string s) {
        std::replace(s.begin(), s.end(), '\n', ' ');
        return s;
    }

    [[noreturn]] void fail_resume(const char* why) const {
        std::fprintf(stderr, "%s: cannot resume: %s\n", suite_.c_str(), why);
        std::exit(2);
    }

    void load_state(const std::string& path) {
        std::ifstream f(path);
        if (!f) fail_resume(("cannot read " + path).c_str());
        std::string line;
        if (!std::getline(f, line) || line != "spindle-bench-resume 1") fail_resume("not a resume file");
        std::string* pending_reason = nullptr;
        while (std::getline(f, line)) {
            std::istringstream in(line);
            std::string tag;
            in >> tag;
            if (tag == "start_ns") {
                in >> start_ns_;
            } else if (tag == "at") {
                in >> resume_at_;
            } else if (tag == "c") {
                done_.emplace_back();
            } else if (tag == "s") {
                if (done_.empty()) fail_resume("a summary before its comparison");
                // Numbers through strtod: operator>> does not read "nan".
                auto number = [&] {
                    std::string t;
                    in >> t;
                    char* end = nullptr;
                    const double v = std::strtod(t.c_str(), &end);
                    if (t.empty() || *end != '\0') fail_resume(("bad line: " + line).c_str());
                    return v;
                };
                summary s;
                in >> s.status;
                const auto n = static_cast<std::size_t>(number());
                s.median = number();
                s.min = number();
                s.max = number();
                if (s.status == "-") s.status.clear();
                s.samples.resize(n);
                for (double& x : s.samples) x = number();
                in >> s.variant;
                if (!in) fail_resume(("bad line: " + line).c_str());
                done_.back().push_back(std::move(s));
                pending_reason = &done_.back().back().reason;
            } else if (tag == "h") {
                std::string name;
                in >> name;
                resume_hung_.emplace_back(name, "");
                pending_reason = &resume_hung_.back().second;
            } else if (tag == "r") {
                if (pending_reason != nullptr) *pending_reason = line.size() > 2 ? line.substr(2) : "";
                pending_reason = nullptr;
            } else {
                fail_resume(("bad line: " + line).c_str());
            }
        }
        if (resume_at_ < 0 || resume_hung_.empty()) fail_resume("no hung comparison in the resume file");
        std::remove(path.c_str());
        ff_ = true;
        std::fprintf(stderr, "%s: restarted after a hang: replaying %d finished comparisons, then comparison %d "
                     "without %s\n", suite_.c_str(), resume_at_, resume_at_ + 1, resume_hung_.back().first.c_str());
    }

    std::string suite_;
    std::string out_path_;
    std::string only_;
    std::FILE* out_ = nullptr;
    bool full_ = false;
    int reps_override_ = 0;

    double start_ns_ = 0;         // the run's start (the first image's, after a restart)
    double time_budget_s_ = 0;    // 0: none
    double hang_budget_s_ = 0;    // the most one measurement may take
    bool said_over_budget_ = false;
    std::set<std::string> skipped_workloads_;
    std::string test_hang_variant_;
    int test_hang_at_ = 1;
    std::vector<std::string> cmdline_;

    int compare_count_ = 0;
    std::vector<std::vector<summary>> done_;  // every finished comparison's summaries, in order
    int resume_at_ = -1;                      // the comparison that hung in the earlier image
    bool ff_ = false;                         // replaying up to resume_at_
    std::vector<std::pair<std::string, std::string>> resume_hung_;  // its hung variants and why

    // The watchdog's view of the current measurement; the measuring thread
    // changes it only between measurements, under wd_m_.
    std::thread watchdog_;
    int tfd_ = -1;
    std::mutex wd_m_;
    bool stopping_ = false;
    bool armed_ = false;
    double cur_deadline_ns_ = 0;
    double cur_budget_s_ = 0;
    double cur_slowest_ns_ = 0;
    int cur_index_ = -1;
    int cur_nth_ = 0, cur_of_ = 0;
    std::string cur_label_;
    std::string cur_variant_;
};

inline void measurement_hung(const std::string& reason) {
    harness* h = detail::current_harness();
    if (h != nullptr) {
        std::unique_lock<std::mutex> lk(h->wd_m_);
        if (h->armed_) h->restart_without_current(reason + " (the comparison was measured again without it)");
    }
    std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, reason.c_str());
    std::fflush(nullptr);
    std::_Exit(1);
}

}  // namespace spindle::bench
