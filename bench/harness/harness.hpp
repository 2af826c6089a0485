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
// file named by --out (see ../shared/design/BENCHMARKS.md, "Result records"):
//
//   {"suite": "switch", "workload": "yield", "variant": "spindle",
//    "params": {"fibers": 10, "workers": 1}, "metric": "ns_per_op",
//    "higher_is_better": false, "median": 2.1, "min": 2.0, "max": 2.4,
//    "reps": 5, "samples": [...]}
//
// plus, where set, "reference": true, "note": "..." and "baseline": "name"
// (the variant this record's ratio is computed against, if not the
// reference).
//
// Progress goes to stderr, one line per comparison.
//
// Command line of every benchmark program:
//   --out FILE     where to write records (default: stdout)
//   --quick        the quick suite (default): small sizes, few reps
//   --full         paper-sized sweeps
//   --reps N       override the number of measured rounds
//   --only NAME    run only workloads whose name contains NAME
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

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

// One competitor: a name from BENCHMARKS.md ("spindle", "boost_context",
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
};

class harness {
public:
    harness(int argc, char** argv, std::string suite) : suite_(std::move(suite)) {
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
            else if (a == "--help" || a == "-h") usage(nullptr);
            else usage(("unknown argument '" + a + "'").c_str());
        }
        if (!out_path_.empty()) {
            out_ = std::fopen(out_path_.c_str(), "w");
            if (out_ == nullptr) {
                std::fprintf(stderr, "%s: cannot open %s for writing\n", suite_.c_str(), out_path_.c_str());
                std::exit(2);
            }
        } else {
            out_ = stdout;
        }
    }
    ~harness() {
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
    bool wants(const std::string& workload) const {
        return only_.empty() || workload.find(only_) != std::string::npos;
    }

    // Run the variants interleaved and write one record per variant.
    std::vector<summary> compare(const std::string& workload, const params& ps, const metric& m,
                                 const std::vector<variant>& vs, int reps = 0) {
        if (reps <= 0) reps = this->reps();
        std::vector<std::vector<double>> samples(vs.size());
        for (std::size_t i = 0; i < vs.size(); ++i) (void)vs[i].measure();  // warm-up, discarded
        for (int r = 0; r < reps; ++r) {
            for (std::size_t k = 0; k < vs.size(); ++k) {
                std::size_t i = (k + static_cast<std::size_t>(r)) % vs.size();
                samples[i].push_back(vs[i].measure());
            }
        }
        std::vector<summary> result;
        std::string line = suite_ + "/" + workload + " " + params_text(ps) + ":";
        for (std::size_t i = 0; i < vs.size(); ++i) {
            summary s = summarize(vs[i].name, samples[i]);
            write_record(workload, ps, m, s, vs[i].reference, vs[i].note, vs[i].baseline);
            char buf[128];
            std::snprintf(buf, sizeof buf, " %s %.4g", vs[i].name.c_str(), s.median);
            line += buf;
            result.push_back(std::move(s));
        }
        std::fprintf(stderr, "  %s %s (median of %d)\n", line.c_str(), m.name.c_str(), reps);
        return result;
    }

    // Write a record for a value computed elsewhere (e.g. a ratio of medians,
    // or a single measurement such as peak RSS).
    void report(const std::string& workload, const params& ps, const metric& m, const summary& s,
                bool reference = false, const std::string& note = "") {
        write_record(workload, ps, m, s, reference, note);
        std::fprintf(stderr, "  %s/%s %s: %s %.4g %s\n", suite_.c_str(), workload.c_str(),
                     params_text(ps).c_str(), s.variant.c_str(), s.median, m.name.c_str());
    }

    static summary summarize(const std::string& name, std::vector<double> v) {
        summary s;
        s.variant = name;
        s.samples = v;
        if (v.empty()) return s;
        std::sort(v.begin(), v.end());
        std::size_t n = v.size();
        s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
        s.min = v.front();
        s.max = v.back();
        return s;
    }

private:
    [[noreturn]] void usage(const char* err) const {
        if (err) std::fprintf(stderr, "spindle_bench_%s: %s\n", suite_.c_str(), err);
        std::fprintf(stderr,
                     "usage: spindle_bench_%s [--out FILE] [--quick|--full] [--reps N] [--only NAME]\n",
                     suite_.c_str());
        std::exit(err ? 2 : 0);
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

    void write_record(const std::string& workload, const params& ps, const metric& m,
                      const summary& s, bool reference, const std::string& note,
                      const std::string& baseline = {}) {
        std::string j = "{\"suite\": " + param::quote(suite_) + ", \"workload\": " + param::quote(workload) +
                        ", \"variant\": " + param::quote(s.variant) + ", \"params\": {";
        for (std::size_t i = 0; i < ps.size(); ++i) {
            if (i) j += ", ";
            j += param::quote(ps[i].key) + ": " + ps[i].json;
        }
        j += "}, \"metric\": " + param::quote(m.name) +
             ", \"higher_is_better\": " + (m.higher_is_better ? "true" : "false") +
             ", \"median\": " + num(s.median) + ", \"min\": " + num(s.min) + ", \"max\": " + num(s.max) +
             ", \"reps\": " + std::to_string(s.samples.size()) + ", \"samples\": [";
        for (std::size_t i = 0; i < s.samples.size(); ++i) {
            if (i) j += ", ";
            j += num(s.samples[i]);
        }
        j += "]";
        if (reference) j += ", \"reference\": true";
        if (!note.empty()) j += ", \"note\": " + param::quote(note);
        if (!baseline.empty()) j += ", \"baseline\": " + param::quote(baseline);
        j += "}\n";
        std::fputs(j.c_str(), out_);
        std::fflush(out_);
    }

    std::string suite_;
    std::string out_path_;
    std::string only_;
    std::FILE* out_ = nullptr;
    bool full_ = false;
    int reps_override_ = 0;
};

}  // namespace spindle::bench
