// bench/kv — spindle-kv against memcached (docs/benchmarks.md, "kv
// (memcached-protocol cache)"): the same text protocol, the same client,
// the same flags.
//
// Variants, each a server process started per measurement with memcached's
// flags (`-p PORT -l 127.0.0.1 -t WORKERS -m 1024 -c 4096 -U 0`):
//   memcached              /usr/bin/memcached (--memcached PATH), `-t
//                          WORKERS`; the reference: every ratio is against
//                          it (as root it also gets `-u root`, which it
//                          needs to start)
//   spindle_kv             spindle-kv (apps/kv; --spindle-kv PATH, else
//                          SPINDLE_KV_SERVER, else the one this build
//                          made): a fiber per connection on spindle::io
//   memcached_preload_L    memcached under LD_PRELOAD=libspindle_preload.so
//                          with SPINDLE_LOCK=L: its pthread mutexes and
//                          condition variables replaced by spindle's locks.
//                          Quick: the library's default, hemlock_park;
//                          --full: every value the library lists, at the
//                          64-connection points
// A variant whose program is missing (spindle-kv not built yet, no preload
// library) or does not start gets "skipped" records that say why.
//
// The client: memaslap (Debian's libmemcached-tools names it memcaslap),
// its own libevent loop, `-T THREADS -c CONNS -F CONFIG -t (1+W)s -S 1s`.
// CONFIG fixes 32-byte keys, the value size and the get/set proportion.
// memaslap only gets keys it has set before (its task window), so gets hit
// unless the server evicts: the servers get 1 GiB (-m 1024), and the get
// misses are recorded (get_miss_pct). memaslap prints its statistics every
// second (-S 1s, line-buffered through stdbuf -oL): the first second is
// the warm-up and is dropped; the window is the W seconds after it.
//
// One measurement: a fresh server, memaslap, both reaped. Pinned points:
// server on CPU 1, memaslap on CPU 0 with one thread (both pinned in the
// child before the exec); 2-worker points: nothing pinned, memaslap with
// two threads. Per measurement (records: suite "kv"):
//   ops_per_s            memaslap's "Total" operations of the window's
//                        periods / their seconds (the comparison's metric)
//   latency_p50_us, latency_p99_us
//                        from memaslap's log2 histogram of every operation
//                        of the run, warm-up included (it prints one, at
//                        the end): bucket i holds the times t with
//                        2^(i-1) < t <= 2^i us; the bucket that holds the
//                        percentile is exact, the place within it is
//                        linear interpolation, clamped to memaslap's min
//                        and max (so up to a factor of 2 off in absolute
//                        terms; the same rule for every variant)
//   latency_avg_us       memaslap's mean over the window ("Period" rows)
//   server_cpu_us_per_op the server's CPU time over the window (its
//                        process CPU clock, every thread) / the window's
//                        operations
//   client_cpu_share     memaslap's CPU time over the window / (window x
//                        its threads): 0.9 or more, the client was
//                        saturated and the figures are the pair's
//                        throughput (said on stderr)
//   get_miss_pct         get misses / gets, over the run, %
//
// Workloads (params conns, size, workers):
//   get90_64b            90% get / 10% set, 64-byte values, 1 worker,
//                        pinned; C in {64, 1000} (quick: 64)
//   get90_1k, get50_64b, get50_1k
//                        the same with 1 KiB values and/or 50% get
//                        (--full)
//   get90_64b_2workers   64 B, 90% get, C in {64, 1000}, 2 workers
//                        (`-t 2`), nothing pinned (--full)
//   idle                 N connections (--idle-conns, 2000), each sends
//                        `version` once and reads its reply, then stays
//                        open and quiet for a second: the server's VmRSS
//                        with them less before, over N (rss_kib_per_conn);
//                        one measurement per variant per round (quick 1
//                        round, --full 3)
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../harness/harness.hpp"
#include "../harness/options.hpp"
#include "../harness/process.hpp"

namespace {

using spindle::bench::await_accepting;
using spindle::bench::child;
using spindle::bench::connect_to;
using spindle::bench::drain;
using spindle::bench::ended;
using spindle::bench::fail;
using spindle::bench::finish;
using spindle::bench::free_port;
using spindle::bench::harness;
using spindle::bench::how_it_ended;
using spindle::bench::last_words;
using spindle::bench::metric;
using spindle::bench::next_line;
using spindle::bench::now_ns;
using spindle::bench::param;
using spindle::bench::params;
using spindle::bench::process_cpu_s;
using spindle::bench::rss_kib;
using spindle::bench::spawn;
using spindle::bench::summary;
using spindle::bench::variant;

constexpr int server_cpu = 1;  // pinned points: the server here, memaslap on 0
constexpr int client_cpu = 0;
constexpr double start_limit_s = 10;  // a server that does not accept by then failed to start
const char* const default_lock = "hemlock_park";  // the preload library's default SPINDLE_LOCK
// Never inherited by a child (spawn's `drop`): a server runs under the
// preload library, or on a named I/O backend, only where its variant says
// so.
const std::vector<std::string> not_inherited{"LD_PRELOAD", "SPINDLE_LOCK", "SPINDLE_IO"};

struct run_options {
    spindle::bench::variant_filter variants;
    std::vector<unsigned> conns;  // mix workloads: empty, the defaults
    unsigned seconds = 0;         // the window, whole seconds (memaslap's -S granularity)
    unsigned idle_conns = 2000;
    std::string spindle_kv, memcached, memaslap, preload;
    std::vector<std::string> preload_locks;  // empty: the default (quick) or every listed one (--full)
    std::string parse_only;                  // --parse-memaslap FILE
};

[[maybe_unused]] std::string exe_dir() {  // where the build put neither path
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    return ec ? std::string(".") : p.parent_path().string();
}

// ---------------------------------------------------------------------------
// memaslap's output

// What one memaslap run printed (see parse_memaslap).
struct memaslap_output {
    std::vector<double> period_ops;     // "Total Statistics" "Period" rows: operations per period
    std::vector<double> period_avg_us;  // ... and their mean latency
    std::vector<double> log2_dist;      // the final "Total Statistics (N events)" histogram
    double min_us = 0, max_us = 0;
    double events = 0, cmd_get = 0, get_misses = 0;
    bool finished = false;  // its last line, "Run time: ...", was there
};

std::vector<std::string> words(const std::string& line) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string x; in >> x;) w.push_back(x);
    return w;
}

double num(const std::string& s) { return std::strtod(s.c_str(), nullptr); }

// memaslap -S prints, every period, a "Get", a "Set" and a "Total
// Statistics" block of a header and a "Period" and a "Global" row (Type
// Time(s) Ops TPS(ops/s) Net(M/s) Get_miss Min(us) Max(us) Avg(us)
// Std_dev Geo_dist); at the end, the same three as summaries
// ("Total Statistics (N events)", Min:, Max:, ..., "Log2 Dist:" and rows
// "   I:   c_I  c_I+1  c_I+2  c_I+3"), then "cmd_get: N", "get_misses: N",
// ..., and "Run time: ...". Each dump starts with a terminal clear.
memaslap_output parse_memaslap(const std::string& text) {
    memaslap_output o;
    enum class block { other, total_period, total_summary } in = block::other;
    bool in_dist = false;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        const std::vector<std::string> w = words(line);
        if (w.empty()) {
            in_dist = false;
            continue;
        }
        if (w.size() >= 2 && w[1] == "Statistics") {
            in = w[0] != "Total" ? block::other : w.size() == 2 ? block::total_period : block::total_summary;
            in_dist = false;
            if (in == block::total_summary && w.size() >= 3) o.events = num(w[2].substr(1));
            continue;
        }
        if (in == block::total_period && w[0] == "Period" && w.size() >= 9) {
            o.period_ops.push_back(num(w[2]));
            o.period_avg_us.push_back(num(w[8]));
        } else if (in == block::total_summary) {
            if (w[0] == "Min:" && w.size() >= 2) o.min_us = num(w[1]);
            else if (w[0] == "Max:" && w.size() >= 2) o.max_us = num(w[1]);
            else if (w[0] == "Log2" && w.size() >= 2 && w[1] == "Dist:") in_dist = true;
            else if (in_dist && w[0].back() == ':') {
                std::size_t at = static_cast<std::size_t>(std::strtoul(w[0].c_str(), nullptr, 10));
                for (std::size_t i = 1; i < w.size(); ++i, ++at) {
                    if (o.log2_dist.size() <= at) o.log2_dist.resize(at + 1, 0);
                    o.log2_dist[at] = num(w[i]);
                }
            }
        }
        if (w[0] == "cmd_get:" && w.size() >= 2) o.cmd_get = num(w[1]);
        else if (w[0] == "get_misses:" && w.size() >= 2) o.get_misses = num(w[1]);
        else if (w[0] == "Run" && w.size() >= 2 && w[1] == "time:") o.finished = true;
    }
    return o;
}

// The `p` quantile (0 < p < 1) of memaslap's log2 histogram: the bucket
// that holds it is exact (bucket i: 2^(i-1) < t <= 2^i us; bucket 0: t <=
// 1), the place within it linear interpolation; clamped to [min, max].
// NaN for an empty histogram.
double log2_quantile(const memaslap_output& o, double p) {
    double total = 0;
    for (double c : o.log2_dist) total += c;
    if (total <= 0) return std::nan("");
    const double rank = p * total;
    double below = 0;
    for (std::size_t i = 0; i < o.log2_dist.size(); ++i) {
        const double c = o.log2_dist[i];
        if (c > 0 && below + c >= rank) {
            const double hi = std::ldexp(1.0, static_cast<int>(i));
            const double lo = i == 0 ? 0 : hi / 2;
            double v = lo + (hi - lo) * (rank - below) / c;
            if (o.max_us > 0) v = std::min(v, o.max_us);
            return std::max(v, o.min_us);
        }
        below += c;
    }
    return o.max_us;
}

// --parse-memaslap FILE: what this program reads from a saved memaslap
// output, one line (tools/test_bench.py checks the parser with it).
int print_parsed(const std::string& file) {
    std::ifstream f(file);
    if (!f) fail("cannot read %s", file.c_str());
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const memaslap_output o = parse_memaslap(text);
    double window_ops = 0;
    for (std::size_t i = 1; i < o.period_ops.size(); ++i) window_ops += o.period_ops[i];
    std::printf("periods=%zu window_ops=%.0f events=%.0f p50_us=%.3f p99_us=%.3f min_us=%.0f max_us=%.0f "
                "cmd_get=%.0f get_misses=%.0f finished=%d\n",
                o.period_ops.size(), window_ops, o.events, log2_quantile(o, 0.50), log2_quantile(o, 0.99), o.min_us,
                o.max_us, o.cmd_get, o.get_misses, o.finished ? 1 : 0);
    return 0;
}

// ---------------------------------------------------------------------------
// The servers

struct server_kind {
    std::string name;
    std::string program;  // a path
    std::string lock;     // SPINDLE_LOCK under the preload library; empty: none
    std::string io;       // SPINDLE_IO for spindle-kv; empty: its default
    std::string note;
    std::string missing;  // why it cannot run (empty: it can)
};

struct server {
    child proc;
    int port = 0;
};

// Starts k's server with `workers`, pinned to server_cpu or not. Empty
// `why`: it accepts connections.
server start_server(const run_options& o, const server_kind& k, unsigned workers, bool pinned, std::string& why) {
    server s;
    s.port = free_port();
    std::vector<std::string> argv{k.program, "-p",   std::to_string(s.port), "-l", "127.0.0.1", "-t",
                                  std::to_string(workers), "-m", "1024", "-c", "4096", "-U", "0"};
    // memcached will not run as root without naming a user; spindle-kv
    // takes only the flags above.
    if (k.program != o.spindle_kv && geteuid() == 0) argv.insert(argv.end(), {"-u", "root"});
    std::vector<std::string> env;
    if (!k.lock.empty()) env = {"LD_PRELOAD=" + o.preload, "SPINDLE_LOCK=" + k.lock};
    if (!k.io.empty()) env.push_back("SPINDLE_IO=" + k.io);
    s.proc = spawn(argv, env, pinned ? server_cpu : -1, false, not_inherited);
    why = await_accepting(s.proc, s.port, k.name, start_limit_s);
    return s;
}

// Why the preload variant's server does not have the library mapped.
std::string preload_not_mapped(pid_t pid, const std::string& library) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    while (std::getline(f, line))
        if (line.find(library) != std::string::npos) return {};
    return "the server started, but " + library + " is not in its /proc/PID/maps";
}

// ---------------------------------------------------------------------------
// get/set mixes under memaslap

struct mix_point {
    std::string workload;
    unsigned conns, size, workers, get_pct;
    bool pinned() const { return workers == 1; }
    unsigned client_threads() const { return pinned() ? 1 : 2; }
};

struct side_sample {
    double p50, p99, avg, cpu_us_per_op, client_share, miss_pct;
};

// memaslap's configuration file for `pt`: 32-byte keys, one value size,
// the get/set proportion (cmd 0: set, 1: get).
std::string write_config(const std::string& dir, const mix_point& pt) {
    const std::string path = dir + "/" + pt.workload + ".cnf";
    std::ofstream f(path);
    f << "key\n32 32 1\nvalue\n"
      << pt.size << " " << pt.size << " 1\ncmd\n0 " << param::number((100 - pt.get_pct) / 100.0) << "\n1 "
      << param::number(pt.get_pct / 100.0) << "\n";
    if (!f) fail("cannot write %s", path.c_str());
    return path;
}

// One measurement of k at pt: operations per second; the rest to `side`.
// A server that fails, or a client that does, makes the variant hung, with
// the reason (measurement_hung).
double mix_measure(const run_options& o, const server_kind& k, const mix_point& pt, const std::string& config,
                   std::map<std::string, std::vector<side_sample>>& side) {
    std::string why;
    server s = start_server(o, k, pt.workers, pt.pinned(), why);
    if (!why.empty()) spindle::bench::measurement_hung(why);
    if (!k.lock.empty()) {
        why = preload_not_mapped(s.proc.pid, o.preload);
        if (!why.empty()) {
            finish(s.proc);
            spindle::bench::measurement_hung(k.name + ": " + why);
        }
    }
    const unsigned threads = pt.client_threads();
    child c = spawn({"/usr/bin/stdbuf", "-oL", o.memaslap, "-s", "127.0.0.1:" + std::to_string(s.port), "-F", config,
                     "-T", std::to_string(threads), "-c", std::to_string(pt.conns), "-t",
                     std::to_string(o.seconds + 1) + "s", "-S", "1s"},
                    {}, pt.pinned() ? client_cpu : -1, false, not_inherited);
    const double limit_s = spindle::bench::child_limit_s(30 + o.seconds + pt.conns / 100.0);
    const double deadline = now_ns() + limit_s * 1e9;
    // Sampled as each "Total Statistics" period row arrives: the first is
    // the end of the warm-up second, the last the end of the window.
    struct sample {
        double t_ns, client_s, server_s;
    };
    std::vector<sample> at;
    std::string text, line;
    bool total = false, done = false;
    while (next_line(c, deadline, line)) {
        text += line + "\n";
        if (line.find("Total Statistics") != std::string::npos) total = line.find('(') == std::string::npos;
        else if (total && line.compare(0, 6, "Period") == 0) {
            at.push_back({now_ns(), process_cpu_s(c.pid), process_cpu_s(s.proc.pid)});
            total = false;
        }
        if (line.compare(0, 9, "Run time:") == 0) {
            done = true;
            break;
        }
    }
    const bool server_alive = !ended(s.proc);
    const memaslap_output out = parse_memaslap(text);
    if (!done || !out.finished || at.size() < 2 || out.period_ops.size() != at.size()) {
        const bool late = now_ns() >= deadline;
        finish(c);
        finish(s.proc);
        spindle::bench::measurement_hung(
            k.name + ": memaslap " +
            (late ? "did not finish within " + param::number(limit_s) + " s" : how_it_ended(c)) +
            " after " + std::to_string(at.size()) + " period(s)" + last_words(text + c.text) +
            (server_alive ? "" : "; the server had " + how_it_ended(s.proc)));
    }
    finish(c, 5);
    finish(s.proc);
    double ops = 0, avg = 0;
    for (std::size_t i = 1; i < out.period_ops.size(); ++i) {
        ops += out.period_ops[i];
        avg += out.period_avg_us[i] * out.period_ops[i];
    }
    const double secs = static_cast<double>(out.period_ops.size() - 1);  // -S 1s periods
    const sample& a = at.front();
    const sample& b = at.back();
    const double wall_s = (b.t_ns - a.t_ns) * 1e-9;
    side[k.name].push_back({log2_quantile(out, 0.50), log2_quantile(out, 0.99), ops > 0 ? avg / ops : 0,
                            (b.server_s - a.server_s) * 1e6 / ops,
                            wall_s > 0 ? (b.client_s - a.client_s) / (wall_s * threads) : 0,
                            out.cmd_get > 0 ? 100.0 * out.get_misses / out.cmd_get : 0});
    return ops / secs;
}

const char* const side_metric_names[] = {"latency_p50_us",       "latency_p99_us",   "latency_avg_us",
                                         "server_cpu_us_per_op", "client_cpu_share", "get_miss_pct"};

void skipped_everywhere(harness& h, const mix_point& pt, const params& ps, const server_kind& k,
                        const std::string& why) {
    h.report_status(pt.workload, ps, {"ops_per_s", true}, k.name, "skipped", why, k.note);
    for (const char* m : side_metric_names) h.report_status(pt.workload, ps, {m, false}, k.name, "skipped", why, k.note);
}

void bench_mix(harness& h, const run_options& o, const std::vector<server_kind>& kinds, const mix_point& pt,
               const std::string& dir) {
    const params ps{{"conns", pt.conns}, {"size", pt.size}, {"workers", pt.workers}};
    const std::string config = write_config(dir, pt);
    const std::string common =
        "memaslap -T " + std::to_string(pt.client_threads()) + " -c " + std::to_string(pt.conns) + ", " +
        std::to_string(pt.get_pct) + "% get / " + std::to_string(100 - pt.get_pct) + "% set, 32-byte keys, " +
        std::to_string(pt.size) + "-byte values, " + std::to_string(o.seconds) +
        " s after 1 s of warm-up; `-t " + std::to_string(pt.workers) + "`; " +
        (pt.pinned() ? "server on CPU 1, memaslap on CPU 0" : "nothing pinned") + "; a fresh server per measurement";
    std::map<std::string, std::vector<side_sample>> side;
    std::vector<variant> vs;
    std::vector<const server_kind*> measured;
    for (const server_kind& k : kinds) {
        if (!k.lock.empty() && pt.conns != 64) continue;  // the locks: at the 64-connection points
        if (!k.io.empty() && pt.pinned()) continue;        // the backends: at the 2-worker points
        if (!k.missing.empty()) {
            skipped_everywhere(h, pt, ps, k, k.missing);
            continue;
        }
        vs.push_back(variant(
            k.name, [&, kp = &k] { return mix_measure(o, *kp, pt, config, side); }, k.name == "memcached",
            k.note + "; " + common));
        measured.push_back(&k);
    }
    if (vs.empty()) return;
    const int reps = h.reps(3, 5);
    const std::vector<summary> res = h.compare(pt.workload, ps, {"ops_per_s", true}, vs, reps);
    if (h.replaying()) return;
    // The same runs' other figures, their warm-up measurement dropped.
    std::map<std::string, std::vector<side_sample>> runs;
    for (const summary& r : res) {
        if (!r.measured()) continue;
        std::vector<side_sample>& v = side[r.variant];
        if (v.size() != r.samples.size() + 1)
            fail("%s: %zu side samples for %zu measurements of %s", pt.workload.c_str(), v.size(), r.samples.size(),
                 r.variant.c_str());
        v.erase(v.begin());
        runs[r.variant] = v;
    }
    struct side_metric {
        const char* name;
        double side_sample::* field;
        const char* what;
    };
    const side_metric metrics[] = {
        {"latency_p50_us", &side_sample::p50,
         "median operation time, us, from memaslap's log2 histogram of the whole run (the bucket exact, linear "
         "within it)"},
        {"latency_p99_us", &side_sample::p99,
         "99th percentile operation time, us, from memaslap's log2 histogram of the whole run (the bucket exact, "
         "linear within it)"},
        {"latency_avg_us", &side_sample::avg, "mean operation time over the window, us (memaslap's Period rows)"},
        {"server_cpu_us_per_op", &side_sample::cpu_us_per_op,
         "the server's CPU time over the window (every thread) / its operations, us"},
        {"client_cpu_share", &side_sample::client_share,
         "memaslap's CPU time over the window / (the window x its threads): 0.9 or more, the client was saturated"},
        {"get_miss_pct", &side_sample::miss_pct, "get misses / gets over the run, %"},
    };
    for (const side_metric& m : metrics) {
        for (std::size_t i = 0; i < res.size(); ++i) {
            if (!res[i].measured()) continue;
            std::vector<double> xs;
            for (const side_sample& s : runs[res[i].variant]) xs.push_back(s.*m.field);
            const server_kind& k = *measured[i];
            h.report(pt.workload, ps, {m.name, false}, harness::summarize(k.name, xs), k.name == "memcached",
                     std::string(m.what) + " (the ops_per_s runs); " + k.note);
        }
    }
    for (const auto& [name, v] : runs) {
        int saturated = 0, missed = 0;
        for (const side_sample& s : v) saturated += s.client_share >= 0.9, missed += s.miss_pct > 1;
        if (saturated > 0)
            std::fprintf(stderr, "    %s: memaslap was CPU-saturated in %d of %zu rounds\n", name.c_str(), saturated,
                         v.size());
        if (missed > 0)
            std::fprintf(stderr, "    %s: over 1%% of gets missed in %d of %zu rounds\n", name.c_str(), missed,
                         v.size());
    }
}

// ---------------------------------------------------------------------------
// idle

// k's RSS growth per idle connection, KiB; empty `why`: `out` holds it.
std::string idle_measure(const run_options& o, const server_kind& k, double& out) {
    std::string why;
    server s = start_server(o, k, 1, true, why);
    if (!why.empty()) return why;
    if (!k.lock.empty() && !(why = preload_not_mapped(s.proc.pid, o.preload)).empty()) {
        finish(s.proc);
        return k.name + ": " + why;
    }
    usleep(100'000);  // the probe connection's end, and the server's start, settle
    const double rss0 = rss_kib(s.proc.pid);
    std::vector<int> fds;
    const double deadline = now_ns() + (30 + o.idle_conns / 100.0) * 1e9;
    static const char version[] = "version\r\n";
    for (unsigned i = 0; i < o.idle_conns && why.empty(); ++i) {
        const int fd = connect_to(s.port);
        if (fd < 0) {
            why = k.name + ": connection " + std::to_string(i + 1) + " of " + std::to_string(o.idle_conns) +
                  " failed: " + std::strerror(errno);
            break;
        }
        fds.push_back(fd);
        // One command and its whole reply ("VERSION x.y.z\r\n"), so that
        // the server has read from the connection and answered on it.
        std::string reply;
        if (send(fd, version, sizeof version - 1, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof version - 1))
            why = k.name + ": cannot send on connection " + std::to_string(i + 1);
        while (why.empty() && reply.find("\r\n") == std::string::npos) {
            pollfd p{fd, POLLIN, 0};
            const int left_ms = static_cast<int>((deadline - now_ns()) / 1e6);
            char buf[256];
            ssize_t n = -1;
            if (left_ms > 0 && poll(&p, 1, left_ms) > 0) n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0) why = k.name + ": no reply to `version` on connection " + std::to_string(i + 1);
            else reply.append(buf, static_cast<std::size_t>(n));
        }
        if (why.empty() && reply.compare(0, 8, "VERSION ") != 0)
            why = k.name + ": `version` on connection " + std::to_string(i + 1) + " answered '" +
                  reply.substr(0, reply.find('\r')) + "'";
    }
    // Idle means idle for a while: a server may shed what a quiet
    // connection holds (spindle-kv parks one after 0.1-0.2 s; memcached
    // holds the same from the start).
    if (why.empty()) usleep(1'000'000);
    const double rss1 = rss_kib(s.proc.pid);
    const bool alive = !ended(s.proc);
    for (int fd : fds) close(fd);
    finish(s.proc);
    if (!why.empty()) return why + (alive ? "" : "; the server had " + how_it_ended(s.proc));
    if (!alive || rss0 < 0 || rss1 < 0) return k.name + "'s server ended while its connections were idle";
    out = (rss1 - rss0) / o.idle_conns;
    return {};
}

void bench_idle(harness& h, const run_options& o, const std::vector<server_kind>& kinds) {
    const params ps{{"conns", o.idle_conns}};
    const metric rss{"rss_kib_per_conn", false};
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < o.idle_conns + 64) {
        h.report_status("idle", ps, {"*", false}, "*", "skipped",
                        "not run: RLIMIT_NOFILE's hard limit is " + std::to_string(rl.rlim_max) + ", under the " +
                            std::to_string(o.idle_conns + 64) + " descriptors " + std::to_string(o.idle_conns) +
                            " connections need",
                        "");
        return;
    }
    const std::string common = std::to_string(o.idle_conns) +
                               " connections, each sent `version` once and its reply read, then idle: the server's "
                               "VmRSS with them open less before, over the connections; `-t 1`, server on CPU 1";
    std::map<std::string, std::vector<double>> got;
    std::map<std::string, std::string> failed;
    const int rounds = h.full() ? 3 : 1;
    for (int r = 0; r < rounds; ++r)
        for (std::size_t i = 0; i < kinds.size(); ++i) {
            const server_kind& k = kinds[(i + static_cast<std::size_t>(r)) % kinds.size()];
            if (!k.missing.empty() || failed.count(k.name) || h.over_time_budget()) continue;
            double v = 0;
            std::string why = idle_measure(o, k, v);
            if (!why.empty()) failed[k.name] = why;
            else got[k.name].push_back(v);
        }
    for (const server_kind& k : kinds) {
        std::string why = !k.missing.empty() ? k.missing : failed.count(k.name) ? failed[k.name] : "";
        if (why.empty() && got[k.name].empty()) why = h.budget_reason();
        if (!why.empty()) {
            h.report_status("idle", ps, rss, k.name, "skipped", why, k.note);
            continue;
        }
        h.report("idle", ps, rss, harness::summarize(k.name, got[k.name]), k.name == "memcached",
                 "KiB of server RSS per connection; " + common + "; " + k.note);
    }
}

// ---------------------------------------------------------------------------

// The SPINDLE_LOCK values the library offers: it names them when given
// one it does not know ("... is not valid; valid values: a, b, ..."), here
// at memcached's first lock. Empty if it cannot be read.
std::vector<std::string> preload_values(const run_options& o) {
    child c = spawn({o.memcached, "-h"}, {"LD_PRELOAD=" + o.preload, "SPINDLE_LOCK=spindle-bench-no-such-lock"}, -1,
                    false, not_inherited);
    drain(c, 10);
    finish(c, 5);
    const std::string tag = "valid values: ";
    const std::size_t at = c.text.find(tag);
    std::vector<std::string> v;
    if (at == std::string::npos) return v;
    std::string list = c.text.substr(at + tag.size());
    list = list.substr(0, list.find('\n'));
    for (std::string& name : spindle::bench::parse_names(list)) {
        const std::size_t b = name.find_first_not_of(' '), e = name.find_last_not_of(' ');
        if (b != std::string::npos) v.push_back(name.substr(b, e - b + 1));
    }
    return v;
}

std::string find_program(const std::string& given, std::initializer_list<const char*> candidates) {
    if (!given.empty()) return given;
    for (const char* p : candidates)
        if (access(p, X_OK) == 0) return p;
    return *candidates.begin();
}

std::string canonical(const std::string& path) {
    std::error_code ec;
    auto c = std::filesystem::weakly_canonical(path, ec);
    return ec ? path : c.string();
}

run_options take_own_args(int& argc, char** argv) {
    run_options o;
    spindle::bench::take_own_args(
        argc, argv,
        "spindle_bench_kv also takes: [--variants spindle_kv,memcached,...] [--conns 64,1000] [--seconds S] "
        "[--idle-conns N] [--spindle-kv PATH] [--memcached PATH] [--memaslap PATH] [--preload PATH] "
        "[--preload-locks LIST] [--parse-memaslap FILE]",
        fail,
        {
            {"--variants", [&](const std::string& v) { o.variants.set(v); }},
            {"--conns",
             [&](const std::string& v) { o.conns = spindle::bench::parse_numbers(v, "connection count", 2, 4000, fail); }},
            {"--seconds",
             [&](const std::string& v) { o.seconds = spindle::bench::parse_numbers(v, "window", 1, 3600, fail).front(); }},
            {"--idle-conns",
             [&](const std::string& v) {
                 o.idle_conns = spindle::bench::parse_numbers(v, "connection count", 1, 4000, fail).front();
             }},
            {"--spindle-kv", [&](const std::string& v) { o.spindle_kv = v; }},
            {"--memcached", [&](const std::string& v) { o.memcached = v; }},
            {"--memaslap", [&](const std::string& v) { o.memaslap = v; }},
            {"--preload", [&](const std::string& v) { o.preload = v; }},
            {"--preload-locks", [&](const std::string& v) { o.preload_locks = spindle::bench::parse_names(v); }},
            {"--parse-memaslap", [&](const std::string& v) { o.parse_only = v; }},
        });
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    run_options o = take_own_args(argc, argv);
    if (!o.parse_only.empty()) return print_parsed(o.parse_only);
    harness h(argc, argv, "kv");
    if (o.seconds == 0) o.seconds = h.quick() ? 2 : 4;
    signal(SIGPIPE, SIG_IGN);
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;  // inherited by the servers and memaslap
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (std::thread::hardware_concurrency() < 2)
        std::fprintf(stderr, "kv: fewer than 2 CPUs: server and client share one, the figures are not comparable\n");

    const char* env_kv = std::getenv("SPINDLE_KV_SERVER");
#ifdef SPINDLE_BENCH_KV_SERVER
    const std::string built_kv = SPINDLE_BENCH_KV_SERVER;
#else
    const std::string built_kv = exe_dir() + "/../apps/kv/spindle-kv";
#endif
    if (o.spindle_kv.empty()) o.spindle_kv = env_kv != nullptr && *env_kv != '\0' ? env_kv : built_kv;
    o.memcached = find_program(o.memcached, {"/usr/bin/memcached", "/usr/local/bin/memcached"});
    o.memaslap = find_program(o.memaslap, {"/usr/bin/memcaslap", "/usr/bin/memaslap", "/usr/local/bin/memaslap"});
    if (o.preload.empty()) {
        const char* env = std::getenv("SPINDLE_PRELOAD_LIB");
#ifdef SPINDLE_BENCH_PRELOAD_LIBRARY
        o.preload = env != nullptr && *env != '\0' ? env : SPINDLE_BENCH_PRELOAD_LIBRARY;
#else
        o.preload = env != nullptr && *env != '\0' ? env : exe_dir() + "/../preload/libspindle_preload.so";
#endif
    }
    o.preload = canonical(o.preload);

    // The variants, and which of them can run: present, and a server that
    // starts (once; one that then fails in a measurement is recorded as
    // hung by it).
    std::vector<server_kind> kinds;
    kinds.push_back({"memcached", o.memcached, "", "", "memcached (" + o.memcached + "); the reference", ""});
    kinds.push_back({"spindle_kv", o.spindle_kv, "", "", "spindle-kv (" + o.spindle_kv + "): a fiber per connection", ""});
    // The epoll backend where workers share CPUs with the client: there a
    // worker can take the events of a preempted peer, which io_uring's
    // per-thread rings cannot.
    kinds.push_back({"spindle_kv_epoll", o.spindle_kv, "", "epoll",
                     "spindle-kv under SPINDLE_IO=epoll (at the 2-worker points)", ""});
    const bool have_memcached = access(o.memcached.c_str(), X_OK) == 0;
    const bool have_preload = access(o.preload.c_str(), R_OK) == 0;
    std::vector<std::string> locks = o.preload_locks;
    if (locks.empty() && have_memcached && have_preload) {
        if (h.full()) locks = preload_values(o);
        if (locks.empty()) locks = {default_lock};
    } else if (locks.empty()) {
        locks = {default_lock};
    }
    for (const std::string& l : locks)
        kinds.push_back({"memcached_preload_" + l, o.memcached, l, "",
                         "memcached under LD_PRELOAD=libspindle_preload.so, SPINDLE_LOCK=" + l, ""});
    std::vector<server_kind> wanted;
    for (server_kind& k : kinds) {
        if (!o.variants.wants(k.name)) continue;
        if (access(k.program.c_str(), X_OK) != 0)
            k.missing = "not built: no " + k.program +
                        (k.program == o.spindle_kv ? " (apps/kv; or name one with --spindle-kv PATH or SPINDLE_KV_SERVER)"
                                                : " (Debian: memcached)");
        else if (!k.lock.empty() && !have_preload)
            k.missing = "not built: no preload library at " + o.preload +
                        " (build preload/, or name it with --preload PATH or SPINDLE_PRELOAD_LIB)";
        if (k.missing.empty()) {
            std::string why;
            server s = start_server(o, k, 1, true, why);
            if (why.empty() && !k.lock.empty()) why = preload_not_mapped(s.proc.pid, o.preload);
            if (s.proc.pid > 0) finish(s.proc);
            if (!why.empty()) k.missing = "not run: " + why;
        }
        if (!k.missing.empty()) std::fprintf(stderr, "kv: %s: %s\n", k.name.c_str(), k.missing.c_str());
        wanted.push_back(std::move(k));
    }

    std::vector<mix_point> points;
    const std::vector<unsigned> cs = !o.conns.empty() ? o.conns
                                     : h.full()      ? std::vector<unsigned>{64, 1000}
                                                     : std::vector<unsigned>{64};
    for (unsigned c : cs) points.push_back({"get90_64b", c, 64, 1, 90});
    if (h.full()) {
        for (unsigned c : cs) points.push_back({"get90_1k", c, 1024, 1, 90});
        for (unsigned c : cs) points.push_back({"get50_64b", c, 64, 1, 50});
        for (unsigned c : cs) points.push_back({"get50_1k", c, 1024, 1, 50});
        for (unsigned c : cs) points.push_back({"get90_64b_2workers", c, 64, 2, 90});
    }
    const bool have_memaslap = access(o.memaslap.c_str(), X_OK) == 0;
    const bool have_stdbuf = access("/usr/bin/stdbuf", X_OK) == 0;
    std::string dir;
    for (const mix_point& pt : points) {
        if (!h.wants(pt.workload)) continue;
        if (!have_memaslap || !have_stdbuf) {
            h.report_status(pt.workload, {{"conns", pt.conns}, {"size", pt.size}, {"workers", pt.workers}},
                            {"*", false}, "*", "skipped",
                            !have_memaslap ? "not run: no memaslap at " + o.memaslap +
                                                 " (Debian: libmemcached-tools; or --memaslap PATH)"
                                           : std::string("not run: no /usr/bin/stdbuf (coreutils)"),
                            "");
            continue;
        }
        if (dir.empty()) dir = h.make_scratch_dir("kv-memaslap");
        if (dir.empty()) fail("cannot make a scratch directory: %s", std::strerror(errno));
        bench_mix(h, o, wanted, pt, dir);
    }
    if (!dir.empty()) h.remove_scratch_dir(dir);
    if (h.wants("idle")) {
        std::vector<server_kind> idle_kinds;  // the locks change nothing an idle connection holds
        for (const server_kind& k : wanted)
            if ((k.lock.empty() || k.lock == default_lock) && k.io.empty()) idle_kinds.push_back(k);
        bench_idle(h, o, idle_kinds);
    }
    return 0;
}
