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
// such record, with variant "*", metric "*" and no params), or not
// finished, stopped when --hard-budget was nearly spent.
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
//     the most), and never past --hard-budget less a margin for the
//     restart (hard_margin_s), so that a measurement still running late
//     in the run is recorded before tools/bench.py kills the program. One
//     stopped at that cut did not run out of its own budget: it is
//     recorded as "skipped" (its reason says so), not as "hung".
//   * On an overrun the watchdog saves what this run has measured (every
//     finished comparison's key and summaries, the hung variant, the
//     calibrations, the start time) to a state file next to --out, removes
//     the measurements' scratch directories, kills the child processes the
//     measurement started (watch_child) and, at once, re-executes the
//     program with --resume FILE. It holds its lock (wd_m_) from the
//     overrun to the execv: a measuring thread that sees its child killed
//     takes that lock first (after_child_killed), so it cannot fail the run
//     in between. The new image replays the finished comparisons (compare()
//     checks each one's key and returns its saved summaries without
//     measuring, report() writes nothing), then measures the hung
//     comparison again without the hung variant, records that one as
//     "hung" and goes on. The records file is appended to. Nothing is lost
//     but the hung comparison's samples.
// That relies on a program calling compare() in the same order with the
// same arguments whenever it runs with the same command line, which every
// program here does; a replayed comparison whose key differs from the saved
// one stops the run. tools/bench.py adds the outer bound: a budget per
// suite, passed on as --time-budget (its share) and --hard-budget (the
// whole), and a kill past it (for a hang outside a measurement, which the
// watchdog does not see).
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
//   --hard-budget S     the program is killed S seconds after its start
//                       (tools/bench.py's budget): no measurement is
//                       watched past S less hard_margin_s
//   --test-hang V[:K]   test only: the K-th measurement (default 1, the
//                       warm-up) of variant V in every comparison blocks
//                       forever in a thread join, as a lost wake-up would
//   --test-hang-child V[:K]  test only: the same measurement runs, but the
//                       child processes it starts (in_child, locks' LevelDB
//                       driver) block forever
//   --test-hang-budget S  test only: that measurement's budget (default: as
//                       any other's)
//   --test-child-limit S  test only: the children of that measurement get S
//                       seconds instead of their own limit
//   --resume FILE       internal: the watchdog's restart after a hang
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

#include <fcntl.h>
#include <signal.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/wait.h>
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
// watchdog kills them on its way to the restart, so that a hung child
// (Boost.Fiber's work-stealing threads spin) does not outlive its
// measurement. in_child (runners.hpp) and locks' LevelDB driver register
// theirs, and reap them with reap_child.
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

// Waits for child `pid` to end, stops watching it, then reaps it and stores
// its wait status; false (errno set) if it cannot be waited for. In that
// order: until it is reaped the pid is still the dead child's, so the
// watchdog cannot kill another process that has been given the same pid.
inline bool reap_child(pid_t pid, int& status) {
    siginfo_t info{};
    int r = 0;
    while ((r = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT)) != 0 && errno == EINTR) {
    }
    forget_child(pid);
    if (r != 0) return false;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return false;
    return true;
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

// Called by a measurement whose child died of SIGKILL, before it does
// anything else. The watchdog kills the children only on its way to the
// execv, holding its lock: if that is what happened, this blocks until the
// new image replaces this one. Otherwise (another process killed the
// child) it returns, and the caller goes on as it would have.
void after_child_killed();

// Test only (--test-hang-child, --test-child-limit): whether the child
// processes the current measurement starts are to block forever, and the
// limit such a child gets instead of its own `own_s`.
bool test_hang_children();
double child_limit_s(double own_s);

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
            else if (a == "--hard-budget") hard_budget_s_ = seconds(value("--hard-budget"), "--hard-budget");
            else if (a == "--test-hang") test_hang(value("--test-hang"), test_hang_);
            else if (a == "--test-hang-child") test_hang(value("--test-hang-child"), test_hang_child_);
            else if (a == "--test-hang-budget")
                test_hang_budget_s_ = seconds(value("--test-hang-budget"), "--test-hang-budget");
            else if (a == "--test-child-limit")
                test_child_limit_s_ = seconds(value("--test-child-limit"), "--test-child-limit");
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
        remove_scratch_dirs();
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
        last_result_.clear();
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

    // Whether --time-budget is spent (said once on stderr), why what it
    // leaves out is skipped, and when it ends (now_ns()'s clock; infinity
    // without one): for a workload that watches its own time
    // (cqs/hang_freedom).
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
    double time_budget_end_ns() const {
        return time_budget_s_ > 0 ? start_ns_ + time_budget_s_ * 1e9 : std::numeric_limits<double>::infinity();
    }

    // A value the measurements depend on that the program measures before
    // them (calibrate_spin's cost of a work-loop iteration): `measure()` in
    // the first image, the same value after a restart, so that the replayed
    // and the new comparisons ran the same work loops.
    double calibration(const std::string& name, const std::function<double()>& measure) {
        for (const auto& [n, v] : calibrations_)
            if (n == name) {
                std::fprintf(stderr, "%s: %s = %g, as measured before the restart\n", suite_.c_str(), name.c_str(), v);
                return v;
            }
        const double v = measure();
        std::lock_guard<std::mutex> lk(wd_m_);  // the watchdog saves them
        calibrations_.emplace_back(name, v);
        return v;
    }

    // A directory for a workload's files (locks' LevelDB database), made
    // beside --out (tools/bench.py's temporary directory, which it removes
    // even when it kills the program), or in $TMPDIR without --out; removed
    // by remove_scratch_dir, by the watchdog before a restart (an execv runs
    // no clean-up) and when the harness ends. Empty if it cannot be made
    // (errno set).
    std::string make_scratch_dir(const std::string& name) {
        std::string dir = out_path_.empty() ? temp_dir() : std::filesystem::path(out_path_).parent_path().string();
        if (dir.empty()) dir = ".";
        std::string tmpl = dir + "/spindle-bench-" + name + "-XXXXXX";
        if (mkdtemp(tmpl.data()) == nullptr) return {};
        std::lock_guard<std::mutex> lk(wd_m_);
        scratch_dirs_.push_back(tmpl);
        return tmpl;
    }
    void remove_scratch_dir(const std::string& path) {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
        std::lock_guard<std::mutex> lk(wd_m_);
        scratch_dirs_.erase(std::remove(scratch_dirs_.begin(), scratch_dirs_.end(), path), scratch_dirs_.end());
    }

    // Run the variants interleaved and write one record per variant.
    std::vector<summary> compare(const std::string& workload, const params& ps, const metric& m,
                                 const std::vector<variant>& vs, int reps = 0) {
        const int index = compare_count_++;
        const std::string key = comparison_key(workload, ps, m, vs);
        if (ff_ && index < resume_at_) {
            if (static_cast<std::size_t>(index) >= done_.size())
                fail_resume("the saved results end before the comparison that hung");
            check_key(index, done_keys_[static_cast<std::size_t>(index)], key);
            last_result_ = done_[static_cast<std::size_t>(index)];
            return last_result_;
        }
        std::vector<summary> result(vs.size());
        for (std::size_t i = 0; i < vs.size(); ++i) result[i].variant = vs[i].name;
        if (ff_ && index == resume_at_) {
            check_key(index, resume_key_, key);
            ff_ = false;
            for (const stopped_variant& st : resume_hung_)
                for (auto& s : result)
                    if (s.variant == st.variant) mark(s, st.status.c_str(), st.reason);
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
            cur_key_ = key;
            cur_label_ = suite_ + "/" + workload + " " + params_text(ps);
            cur_slowest_ns_ = 0;
        }
        std::vector<int> measured_count(vs.size(), 0);
        auto one = [&](std::size_t i) {
            const int nth = ++measured_count[i];
            const bool hang = vs[i].name == test_hang_.variant && nth == test_hang_.at;
            const bool hang_child = vs[i].name == test_hang_child_.variant && nth == test_hang_child_.at;
            const double t0 = now_ns();
            arm(vs[i].name, nth, reps + 1, hang || hang_child);
            hang_children_.store(hang_child, std::memory_order_relaxed);
            double v;
            if (hang) v = hang_forever();
            else v = vs[i].measure();
            hang_children_.store(false, std::memory_order_relaxed);
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
        {
            std::lock_guard<std::mutex> lk(wd_m_);  // the watchdog saves them
            done_.push_back(result);
            done_keys_.push_back(key);
        }
        last_result_ = result;
        return result;
    }

    // Write a record for a value computed elsewhere (e.g. a ratio of medians,
    // or a single measurement such as peak RSS). A summary that is not
    // measured is written as such. One with no values or a value that is
    // not finite was computed from a variant that hung or was skipped: if
    // one of the last comparison's variants was not measured (this one's
    // own first), it is written as a status record that names it;
    // otherwise it is left out, with a line on stderr. While replaying,
    // nothing is written: the earlier image did. `baseline`: as a variant's
    // (the variant of the same group its ratio is computed against).
    void report(const std::string& workload, const params& ps, const metric& m, const summary& s,
                bool reference = false, const std::string& note = "", const std::string& baseline = {}) {
        if (ff_) return;
        if (!s.measured()) {
            write_status_record(workload, ps, m, s, note, baseline);
            return;
        }
        if (s.samples.empty() || !finite(s)) {
            const summary* from = nullptr;
            for (const summary& r : last_result_) {
                if (r.measured()) continue;
                if (from == nullptr) from = &r;
                if (r.variant == s.variant) {
                    from = &r;
                    break;
                }
            }
            if (from != nullptr) {
                summary t;
                t.variant = s.variant;
                mark(t, from->status.c_str(),
                     "not computed: it derives from " + from->variant + ", which " +
                         (from->status == "hung" ? "hung" : "was " + from->status) + " (" + from->reason + ")");
                write_status_record(workload, ps, m, t, note, baseline);
                std::fprintf(stderr, "  %s/%s %s: %s %s %s (from %s)\n", suite_.c_str(), workload.c_str(),
                             params_text(ps).c_str(), s.variant.c_str(), m.name.c_str(), t.status.c_str(),
                             from->variant.c_str());
                return;
            }
            std::fprintf(stderr, "  %s/%s %s: %s %s not written: no finite value\n", suite_.c_str(),
                         workload.c_str(), params_text(ps).c_str(), s.variant.c_str(), m.name.c_str());
            return;
        }
        write_record(workload, ps, m, s, reference, note, baseline);
        std::fprintf(stderr, "  %s/%s %s: %s %.4g %s\n", suite_.c_str(), workload.c_str(),
                     params_text(ps).c_str(), s.variant.c_str(), s.median, m.name.c_str());
    }

    // A record of a variant that was not run or not measured, with `status`
    // ("hung" or "skipped") and `reason`, for a workload that runs its own
    // variants (cqs/hang_freedom). Nothing while replaying.
    void report_status(const std::string& workload, const params& ps, const metric& m, const std::string& variant,
                       const char* status, const std::string& reason, const std::string& note) {
        if (ff_) return;
        summary s;
        s.variant = variant;
        mark(s, status, reason);
        write_status_record(workload, ps, m, s, note);
        std::fprintf(stderr, "  %s/%s %s: %s %s (%s)\n", suite_.c_str(), workload.c_str(), params_text(ps).c_str(),
                     variant.c_str(), status, reason.c_str());
    }

    // A record of `rounds` repeated rounds of one variant (the hang-freedom
    // workload): metric rounds_finished, its value `finished`; reps =
    // `rounds` attempted; plus "hung_rounds" and "round_budget_ms". A
    // variant that attempted none should have a report_status record
    // instead; it gets a "skipped" one here.
    void report_rounds(const std::string& workload, const params& ps, const std::string& variant, long rounds,
                       long finished, long hung, double round_budget_ms, bool reference, const std::string& note) {
        if (ff_) return;
        if (rounds <= 0) {
            report_status(workload, ps, {"rounds_finished", true}, variant, "skipped", "not run: no round attempted",
                          note);
            return;
        }
        summary s;
        s.variant = variant;
        const std::string n = std::to_string(finished);  // whole numbers: %g would round a million
        write_json(workload, ps, {"rounds_finished", true}, s, reference, note, "",
                   ", \"median\": " + n + ", \"min\": " + n + ", \"max\": " + n +
                       ", \"reps\": " + std::to_string(rounds) + ", \"hung_rounds\": " + std::to_string(hung) +
                       ", \"round_budget_ms\": " + num(round_budget_ms));
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
    friend void after_child_killed();
    friend bool test_hang_children();
    friend double child_limit_s(double own_s);

    // A variant of the comparison that hung, which the watchdog stopped:
    // "hung", or "skipped" when its budget was what --hard-budget left.
    struct stopped_variant {
        std::string variant;
        std::string status;
        std::string reason;
    };

    struct test_hang_spec {
        std::string variant;  // empty: none
        int at = 1;           // its K-th measurement in a comparison
    };

    [[noreturn]] void usage(const char* err) const {
        if (err) std::fprintf(stderr, "spindle_bench_%s: %s\n", suite_.c_str(), err);
        std::fprintf(stderr,
                     "usage: spindle_bench_%s [--out FILE] [--quick|--full] [--reps N] [--only NAME]\n"
                     "       [--hang-budget SECONDS] [--time-budget SECONDS] [--hard-budget SECONDS]\n"
                     "       [--test-hang VARIANT[:K]] [--test-hang-child VARIANT[:K]]\n"
                     "       [--test-hang-budget SECONDS] [--test-child-limit SECONDS]\n",
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

    void test_hang(const std::string& spec, test_hang_spec& t) {
        const std::size_t colon = spec.rfind(':');
        t.variant = spec.substr(0, colon);
        if (colon != std::string::npos) {
            t.at = std::atoi(spec.c_str() + colon + 1);
            if (t.at < 1) usage(("bad test hang '" + spec + "'").c_str());
        }
        if (t.variant.empty()) usage(("bad test hang '" + spec + "'").c_str());
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

    static std::string temp_dir() {
        const char* t = std::getenv("TMPDIR");
        return t != nullptr && *t != '\0' ? t : "/tmp";
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

    // What identifies a comparison across a restart: workload, params,
    // metric and variants, on one line.
    static std::string comparison_key(const std::string& workload, const params& ps, const metric& m,
                                      const std::vector<variant>& vs) {
        std::string k = workload + " " + params_text(ps) + " " + m.name + ":";
        for (const variant& v : vs) k += " " + v.name;
        return one_line(k);
    }

    void check_key(int index, const std::string& saved, const std::string& now) {
        if (saved == now) return;
        fail_resume(("comparison " + std::to_string(index + 1) + " is '" + now + "' in this image but '" + saved +
                     "' in the saved run: the program did not call compare() in the same order")
                        .c_str());
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

    // ----- watchdog (see the header)

    static constexpr double hang_factor = 100;     // x the slowest finished measurement of the comparison
    static constexpr double hang_floor_s = 10;     // ... but at least this, and at most --hang-budget
    static constexpr double hard_floor_s = 1;      // a budget cut by --hard-budget: at least this

    // What a restart needs before --hard-budget: the new image replays the
    // finished comparisons and sets up again (locks refills its LevelDB
    // database), then records what is left as skipped.
    double hard_margin_s() const { return std::max(5.0, 0.1 * hard_budget_s_); }

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

    void arm(const std::string& variant, int nth, int of, bool test_hang) {
        std::lock_guard<std::mutex> lk(wd_m_);
        double budget = cur_slowest_ns_ <= 0
                            ? hang_budget_s_
                            : std::min(hang_budget_s_, std::max(std::min(hang_floor_s, hang_budget_s_),
                                                                hang_factor * cur_slowest_ns_ * 1e-9));
        if (test_hang && test_hang_budget_s_ > 0) budget = test_hang_budget_s_;
        cur_cut_ = false;
        if (hard_budget_s_ > 0) {
            const double left = hard_budget_s_ - hard_margin_s() - (now_ns() - start_ns_) * 1e-9;
            if (left < budget) {
                budget = std::max(left, hard_floor_s);
                cur_cut_ = true;
            }
        }
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
            // Cut short by --hard-budget, it was stopped for want of time,
            // not because it hung: recorded as skipped.
            char why[360];
            if (cur_cut_)
                std::snprintf(why, sizeof why,
                              "not finished: stopped after %g s, all that the suite's --hard-budget left it; it may "
                              "or may not have hung (its measurement %d of %d in this comparison, the warm-up "
                              "counted)",
                              cur_budget_s_, cur_nth_, cur_of_);
            else
                std::snprintf(why, sizeof why,
                              "no result within %g s (its measurement %d of %d in this comparison, the warm-up "
                              "counted; the comparison was measured again without it)",
                              cur_budget_s_, cur_nth_, cur_of_);
            // Holds wd_m_ to the end: the measuring thread stays out.
            restart_without_current(cur_cut_ ? "skipped" : "hung", why);
        }
    }

    // Writes `text` to stderr without stdio: the watchdog must not wait for
    // a stream's lock that a stuck measurement may hold.
    static void say(const std::string& text) {
        const char* p = text.data();
        std::size_t left = text.size();
        while (left > 0) {
            const ssize_t k = write(STDERR_FILENO, p, left);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) return;
            p += k;
            left -= static_cast<std::size_t>(k);
        }
    }

    void kill_children() {
        std::lock_guard<std::mutex> lk(detail::child_mutex());
        for (pid_t pid : detail::child_pids()) kill(pid, SIGKILL);
    }

    void remove_scratch_dirs() {
        std::vector<std::string> dirs;
        {
            std::lock_guard<std::mutex> lk(wd_m_);
            dirs.swap(scratch_dirs_);
        }
        for (const std::string& d : dirs) {
            std::error_code ec;
            std::filesystem::remove_all(d, ec);
        }
    }

    // The current measurement's variant hung (or, `status` "skipped", ran
    // out of the suite's time): record it so and go on in a new image of
    // the program (see the header). Called with wd_m_ held, which
    // it keeps: save the state, remove the scratch directories, kill the
    // children, execv -- the children last, so that nothing is left for a
    // measuring thread to fail on (it takes wd_m_ first: after_child_killed).
    [[noreturn]] void restart_without_current(const char* status, const std::string& reason) {
        say("  " + cur_label_ + ": " + cur_variant_ + (std::strcmp(status, "hung") == 0 ? " hung: " : " stopped: ") +
            reason + "; restarting the program to go on without it\n");
        std::vector<stopped_variant> hung;
        if (cur_index_ == resume_at_) hung = resume_hung_;
        hung.push_back({cur_variant_, status, reason});
        std::string path;
        if (!save_state(cur_index_, hung, path)) {
            say(suite_ + ": cannot save the state for a restart (" + path + "): " + std::strerror(errno) + "\n");
            kill_children();
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
        for (const std::string& d : scratch_dirs_) {  // wd_m_ is held
            std::error_code ec;
            std::filesystem::remove_all(d, ec);
        }
        kill_children();
        execv("/proc/self/exe", argv.data());
        say(suite_ + ": cannot restart (execv /proc/self/exe: " + std::strerror(errno) + ")\n");
        std::remove(path.c_str());
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
    //   spindle-bench-resume 2
    //   start_ns <the run's start, CLOCK_MONOTONIC ns>
    //   cal <name> <value>               a calibration (see calibration())
    //   at <index of the comparison that hung>
    //   key <its key>
    //   c <key>                          one per finished comparison, with
    //   s <status|-> <median> <min> <max> <n samples> <samples...>
    //   v <variant>                      after every s line
    //   r <reason>                       after every v and h line
    //   h <hung|skipped> <variant>       a variant of comparison `at` that
    //                                    the watchdog stopped, and as what
    //
    // Keys, variant names and reasons are the rest of their line. The file
    // is new (O_EXCL, a name of its own beside --out or in $TMPDIR) and
    // written without stdio (the watchdog writes it); read, it is removed.

    bool resuming() const { return resume_at_ >= 0; }

    // Called with wd_m_ held. `path`: the file written, else (false, errno
    // set) the one tried.
    bool save_state(int at, const std::vector<stopped_variant>& hung, std::string& path) {
        auto number = [](double v) {
            char buf[40];
            std::snprintf(buf, sizeof buf, " %.17g", v);
            return std::string(buf);
        };
        std::string t = "spindle-bench-resume 2\nstart_ns" + number(start_ns_) + "\n";
        for (const auto& [name, v] : calibrations_) t += "cal " + name + number(v) + "\n";
        t += "at " + std::to_string(at) + "\nkey " + cur_key_ + "\n";
        for (std::size_t i = 0; i < done_.size(); ++i) {
            t += "c " + done_keys_[i] + "\n";
            for (const summary& s : done_[i]) {
                t += "s " + (s.status.empty() ? std::string("-") : s.status) + number(s.median) + number(s.min) +
                     number(s.max) + " " + std::to_string(s.samples.size());
                for (double x : s.samples) t += number(x);
                t += "\nv " + one_line(s.variant) + "\nr " + one_line(s.reason) + "\n";
            }
        }
        for (const stopped_variant& st : hung)
            t += "h " + st.status + " " + one_line(st.variant) + "\nr " + one_line(st.reason) + "\n";

        path = (out_path_.empty() ? temp_dir() + "/spindle_bench_" + suite_ : out_path_) + ".resume.XXXXXX";
        const int fd = mkostemp(path.data(), O_CLOEXEC);
        if (fd < 0) return false;
        const char* p = t.data();
        std::size_t left = t.size();
        while (left > 0) {
            const ssize_t k = write(fd, p, left);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                const int e = k < 0 ? errno : ENOSPC;
                close(fd);
                unlink(path.c_str());
                errno = e;
                return false;
            }
            p += k;
            left -= static_cast<std::size_t>(k);
        }
        if (close(fd) != 0) {
            const int e = errno;
            unlink(path.c_str());
            errno = e;
            return false;
        }
        return true;
    }

    static std::string one_line(std::string s) {
        std::replace(s.begin(), s.end(), '\n', ' ');
        return s;
    }

    // Stops the run: the resume file (once it was opened) and the scratch
    // directories go with it.
    [[noreturn]] void fail_resume(const char* why) {
        std::fprintf(stderr, "%s: cannot resume: %s\n", suite_.c_str(), why);
        if (!resume_path_.empty()) std::remove(resume_path_.c_str());
        remove_scratch_dirs();
        std::exit(2);
    }

    void load_state(const std::string& path) {
        std::ifstream f(path);
        if (!f) fail_resume(("cannot read " + path).c_str());
        resume_path_ = path;
        std::string line;
        if (!std::getline(f, line) || line != "spindle-bench-resume 2") fail_resume("not a resume file");
        std::string* pending_reason = nullptr;  // an r line is due for it
        summary* pending_variant = nullptr;     // a v line is due for it
        auto bad = [&] { fail_resume(("bad line: " + line).c_str()); };
        while (std::getline(f, line)) {
            const std::size_t sp = line.find(' ');
            const std::string tag = line.substr(0, sp);
            const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
            if ((pending_variant != nullptr) != (tag == "v")) bad();
            if ((pending_reason != nullptr) != (tag == "r")) bad();
            std::istringstream in(rest);
            // Numbers through strtod: operator>> does not read "nan".
            auto number = [&] {
                std::string t;
                in >> t;
                char* end = nullptr;
                const double v = std::strtod(t.c_str(), &end);
                if (t.empty() || *end != '\0') bad();
                return v;
            };
            if (tag == "start_ns") {
                start_ns_ = number();
            } else if (tag == "cal") {
                std::string name;
                in >> name;
                const double v = number();
                calibrations_.emplace_back(name, v);
            } else if (tag == "at") {
                resume_at_ = static_cast<int>(number());
            } else if (tag == "key") {
                resume_key_ = rest;
            } else if (tag == "c") {
                done_.emplace_back();
                done_keys_.push_back(rest);
            } else if (tag == "s") {
                if (done_.empty()) fail_resume("a summary before its comparison");
                summary s;
                in >> s.status;
                if (s.status == "-") s.status.clear();
                s.median = number();
                s.min = number();
                s.max = number();
                const double n = number();
                if (!(n >= 0 && n < 1e9)) bad();
                s.samples.resize(static_cast<std::size_t>(n));
                for (double& x : s.samples) x = number();
                done_.back().push_back(std::move(s));
                pending_variant = &done_.back().back();
            } else if (tag == "v") {
                pending_variant->variant = rest;
                pending_reason = &pending_variant->reason;
                pending_variant = nullptr;
            } else if (tag == "h") {
                const std::size_t sp2 = rest.find(' ');
                stopped_variant st;
                st.status = rest.substr(0, sp2);
                if (sp2 == std::string::npos || (st.status != "hung" && st.status != "skipped")) bad();
                st.variant = rest.substr(sp2 + 1);
                resume_hung_.push_back(std::move(st));
                pending_reason = &resume_hung_.back().reason;
            } else if (tag == "r") {
                *pending_reason = rest;
                pending_reason = nullptr;
            } else {
                bad();
            }
        }
        if (pending_variant != nullptr || pending_reason != nullptr) fail_resume("the file ends in a record");
        if (resume_at_ < 0 || resume_hung_.empty() || resume_key_.empty())
            fail_resume("no hung comparison in the resume file");
        std::remove(path.c_str());
        ff_ = true;
        std::fprintf(stderr, "%s: restarted after a hang: replaying %d finished comparisons, then comparison %d "
                     "without %s\n", suite_.c_str(), resume_at_, resume_at_ + 1, resume_hung_.back().variant.c_str());
    }

    std::string suite_;
    std::string out_path_;
    std::string only_;
    std::FILE* out_ = nullptr;
    bool full_ = false;
    int reps_override_ = 0;

    double start_ns_ = 0;         // the run's start (the first image's, after a restart)
    double time_budget_s_ = 0;    // 0: none
    double hard_budget_s_ = 0;    // 0: none
    double hang_budget_s_ = 0;    // the most one measurement may take
    bool said_over_budget_ = false;
    std::set<std::string> skipped_workloads_;
    test_hang_spec test_hang_, test_hang_child_;
    double test_hang_budget_s_ = 0;   // 0: as any other measurement's
    double test_child_limit_s_ = 0;   // 0: the children's own
    // The current measurement is --test-hang-child's. Relaxed: the
    // measuring thread stores it before and after the measurement, and the
    // loads (in_child, run_driver) are that measurement's own, on the same
    // thread; pairs with nothing.
    std::atomic<bool> hang_children_{false};
    std::vector<std::string> cmdline_;
    std::vector<summary> last_result_;  // the last comparison's, for report()

    int compare_count_ = 0;
    std::string resume_path_;                 // the state file read at the start
    std::vector<std::vector<summary>> done_;  // every finished comparison's summaries, in order
    std::vector<std::string> done_keys_;      // ... and keys
    std::vector<std::pair<std::string, double>> calibrations_;
    int resume_at_ = -1;                      // the comparison that hung in the earlier image
    std::string resume_key_;                  // ... its key
    bool ff_ = false;                         // replaying up to resume_at_
    std::vector<stopped_variant> resume_hung_;  // its variants the watchdog stopped

    // The watchdog's view of the current measurement; the measuring thread
    // changes it only between measurements, under wd_m_. done_, done_keys_,
    // calibrations_ and scratch_dirs_ change under wd_m_ too.
    std::thread watchdog_;
    int tfd_ = -1;
    std::mutex wd_m_;
    bool stopping_ = false;
    bool armed_ = false;
    bool cur_cut_ = false;  // its budget is what --hard-budget left
    double cur_deadline_ns_ = 0;
    double cur_budget_s_ = 0;
    double cur_slowest_ns_ = 0;
    int cur_index_ = -1;
    int cur_nth_ = 0, cur_of_ = 0;
    std::string cur_key_;
    std::string cur_label_;
    std::string cur_variant_;
    std::vector<std::string> scratch_dirs_;
};

inline void measurement_hung(const std::string& reason) {
    harness* h = detail::current_harness();
    if (h != nullptr) {
        std::unique_lock<std::mutex> lk(h->wd_m_);
        if (h->armed_) h->restart_without_current("hung", reason + " (the comparison was measured again without it)");
        lk.unlock();
        h->remove_scratch_dirs();
    }
    std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, reason.c_str());
    std::fflush(nullptr);
    std::_Exit(1);
}

inline void after_child_killed() {
    harness* h = detail::current_harness();
    if (h == nullptr) return;
    std::lock_guard<std::mutex> lk(h->wd_m_);  // held for good by a watchdog that restarts the program
}

inline bool test_hang_children() {
    const harness* h = detail::current_harness();
    return h != nullptr && h->hang_children_.load(std::memory_order_relaxed);
}

inline double child_limit_s(double own_s) {
    const harness* h = detail::current_harness();
    return test_hang_children() && h->test_child_limit_s_ > 0 ? h->test_child_limit_s_ : own_s;
}

}  // namespace spindle::bench
