// bench/harness/process.hpp — what the benchmarks that measure other
// programs (bench/io, bench/kv) share: a free loopback port and a
// connection to one (free_port, connect_to, accepts), child processes
// started pinned and watched by the harness (spawn, struct child), their
// output read by line until a deadline (read_line, next_line, drain), their
// end (ended, finish, how_it_ended, last_words), a server's start
// (await_accepting), and what /proc and the CPU clocks say of them
// (process_cpu_s, rss_kib). A system call that should not fail goes to
// fail() (fail.hpp): "<program>: <call>: <error>", exit 1.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fail.hpp"
#include "harness.hpp"

namespace spindle::bench {

// ---------------------------------------------------------------------------
// Loopback ports

// A port on 127.0.0.1 that was free a moment ago (bound to port 0 and
// released; the servers set SO_REUSEADDR).
inline int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket: %s", std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        fail("cannot find a free port: %s", std::strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}

// A connected socket to 127.0.0.1:port, or -1.
inline int connect_to(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// Whether something accepts connections on 127.0.0.1:port now.
inline bool accepts(int port) {
    const int fd = connect_to(port);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

// ---------------------------------------------------------------------------
// Child processes

// A child process: its pid, the write end of its stdin (-1: none) and the
// read end of its stdout and stderr together; what it wrote is kept.
struct child {
    pid_t pid = -1;
    int in = -1, out = -1;
    std::string text;
    bool reaped = false;
    int status = 0;
};

// Starts `argv` (argv[0] a path) with our environment less the variables
// named in `drop` plus `env` (NAME=VALUE each, replacing ours of that
// name), pinned to `cpu` (-1: not pinned), its stdin a pipe (`with_stdin`:
// child::in) or /dev/null; watched by the harness (watch_child). Everything
// is built before the fork: between it and the exec only system calls. In
// the child, exit status 126: it could not be pinned; 127: the exec failed.
inline child spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int cpu,
                   bool with_stdin = false, const std::vector<std::string>& drop = {}) {
    std::vector<std::string> dropped;  // "NAME="
    for (const std::string& d : drop) dropped.push_back(d + "=");
    std::vector<std::string> env_store;
    for (char** e = environ; *e != nullptr; ++e) {
        bool replaced = false;
        for (const std::string& d : dropped)
            if (std::strncmp(*e, d.c_str(), d.size()) == 0) replaced = true;
        for (const std::string& x : env)
            if (std::strncmp(*e, x.c_str(), x.find('=') + 1) == 0) replaced = true;
        if (!replaced) env_store.emplace_back(*e);
    }
    env_store.insert(env_store.end(), env.begin(), env.end());
    std::vector<char*> envp, argvp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_store = argv;
    for (auto& a : argv_store) argvp.push_back(a.data());
    argvp.push_back(nullptr);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0) CPU_SET(cpu, &set);

    int out_fds[2], in_fds[2] = {-1, -1};
    if (pipe2(out_fds, O_CLOEXEC) != 0 || (with_stdin && pipe2(in_fds, O_CLOEXEC) != 0))
        fail("pipe: %s", std::strerror(errno));
    const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) fail("fork: %s", std::strerror(errno));
    if (pid == 0) {
        if (cpu >= 0 && sched_setaffinity(0, sizeof set, &set) != 0) _exit(126);
        dup2(with_stdin ? in_fds[0] : devnull, STDIN_FILENO);
        dup2(out_fds[1], STDOUT_FILENO);
        dup2(out_fds[1], STDERR_FILENO);
        execve(argvp[0], argvp.data(), envp.data());
        _exit(127);
    }
    watch_child(pid);  // killed by the harness's watchdog if the measurement hangs
    close(devnull);
    close(out_fds[1]);
    child c;
    c.pid = pid;
    c.out = out_fds[0];
    if (with_stdin) {
        close(in_fds[0]);
        c.in = in_fds[1];
    }
    return c;
}

// Waits for more of what `c` writes, until `deadline` (now_ns()), and
// appends it to c.text; at its end of output closes c.out (-1). False when
// the deadline has passed or its output had ended already: nothing more
// will come.
inline bool read_more(child& c, double deadline) {
    const double left_ms = (deadline - now_ns()) / 1e6;
    if (left_ms <= 0 || c.out < 0) return false;
    pollfd p{c.out, POLLIN, 0};
    const int k = poll(&p, 1, static_cast<int>(std::min(left_ms, 1000.0)) + 1);
    if (k < 0 && errno != EINTR) fail("poll: %s", std::strerror(errno));
    if (k <= 0) return true;
    char buf[4096];
    const ssize_t n = read(c.out, buf, sizeof buf);
    if (n < 0 && errno == EINTR) return true;
    if (n <= 0) {
        close(c.out);
        c.out = -1;
        return true;
    }
    c.text.append(buf, static_cast<std::size_t>(n));
    return true;
}

// Reads what `c` writes until a line starting with `prefix` (returned,
// without its newline; it and the lines before it taken out of c.text),
// its end of output (""), or `deadline` ("").
inline std::string read_line(child& c, const std::string& prefix, double deadline) {
    std::size_t scanned = 0;
    for (;;) {
        for (std::size_t nl; (nl = c.text.find('\n', scanned)) != std::string::npos; scanned = nl + 1) {
            const std::string line = c.text.substr(scanned, nl - scanned);
            if (line.compare(0, prefix.size(), prefix) == 0) {
                c.text.erase(0, nl + 1);
                return line;
            }
        }
        if (!read_more(c, deadline)) return {};
    }
}

// The next whole line `c` writes (without its newline) into `line`; false
// at its end of output or at `deadline`.
inline bool next_line(child& c, double deadline, std::string& line) {
    for (;;) {
        if (const std::size_t nl = c.text.find('\n'); nl != std::string::npos) {
            line = c.text.substr(0, nl);
            c.text.erase(0, nl + 1);
            return true;
        }
        if (!read_more(c, deadline)) return false;
    }
}

// Everything `c` still has to say, for at most `wait_s`, into c.text.
inline void drain(child& c, double wait_s) {
    std::string line, kept;
    const double deadline = now_ns() + wait_s * 1e9;
    while (next_line(c, deadline, line)) kept += line + "\n";
    c.text = kept + c.text;
}

// Whether `c` has ended (reaped then, its status kept).
inline bool ended(child& c) {
    if (c.reaped) return true;
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0)
        return false;
    if (!reap_child(c.pid, c.status)) fail("waitpid: %s", std::strerror(errno));
    c.reaped = true;
    // Killed with SIGKILL and not by us: perhaps the watchdog, on its way
    // to a restart (it then never returns).
    if (WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGKILL) after_child_killed();
    return true;
}

// Ends `c` and reaps it: its stdin closed (if it has one: a load generator
// then closes its connections), it gets `grace_s` to end on its own, then
// SIGKILL.
inline void finish(child& c, double grace_s = 0) {
    if (c.in >= 0) close(c.in);
    c.in = -1;
    const double deadline = now_ns() + grace_s * 1e9;
    while (!ended(c) && now_ns() < deadline) usleep(1000);
    if (!ended(c)) {
        kill(c.pid, SIGKILL);
        if (!reap_child(c.pid, c.status)) fail("waitpid: %s", std::strerror(errno));
        c.reaped = true;
    }
    if (c.out >= 0) close(c.out);
    c.out = -1;
}

// How the reaped `c` ended, in words ("exited with status 1").
inline std::string how_it_ended(const child& c) {
    char buf[64];
    if (WIFSIGNALED(c.status)) std::snprintf(buf, sizeof buf, "killed by signal %d", WTERMSIG(c.status));
    else if (WEXITSTATUS(c.status) == 127) std::snprintf(buf, sizeof buf, "could not be run (exec failed)");
    else if (WEXITSTATUS(c.status) == 126) std::snprintf(buf, sizeof buf, "could not be pinned");
    else std::snprintf(buf, sizeof buf, "exited with status %d", WEXITSTATUS(c.status));
    return buf;
}

// The end of what a child said (its last 300 characters, on one line),
// as ": ..." to follow a message; "" if it said nothing.
inline std::string last_words(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.size() > 300) text = "..." + text.substr(text.size() - 300);
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text.empty() ? "" : ": " + text;
}

// Waits for the server `c`, just started, to accept connections on
// 127.0.0.1:port, for at most `limit_s`: "" once it does; else it is
// finished and the reason is returned, "<name>'s server exited with status
// 1 before accepting: <what it said>" or "<name>'s server did not accept
// connections within <limit_s> s".
inline std::string await_accepting(child& c, int port, const std::string& name, double limit_s) {
    const double deadline = now_ns() + limit_s * 1e9;
    for (;;) {
        if (ended(c)) {
            drain(c, 0.2);  // what it said before it went
            std::string why = name + "'s server " + how_it_ended(c) + " before accepting" + last_words(c.text);
            finish(c);
            return why;
        }
        if (accepts(port)) return {};
        if (now_ns() > deadline) {
            finish(c);
            return name + "'s server did not accept connections within " + param::number(limit_s) + " s";
        }
        usleep(5000);
    }
}

// ---------------------------------------------------------------------------
// What a process costs

// Where process_cpu_s goes when the process's CPU clock cannot be read.
enum class cpu_fallback {
    none,       // NaN
    proc_stat,  // utime + stime of /proc/PID/stat (clock ticks); fail() if unreadable
};

// CPU time of process `pid` so far (every thread, those ended too), s: its
// process CPU clock (clock_getcpuclockid, nanoseconds), else `fallback`.
inline double process_cpu_s(pid_t pid, cpu_fallback fallback = cpu_fallback::none) {
    clockid_t clk;
    timespec ts{};
    if (clock_getcpuclockid(pid, &clk) == 0 && clock_gettime(clk, &ts) == 0)
        return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    if (fallback == cpu_fallback::none) return std::nan("");
    // /proc/PID/stat: utime and stime (fields 14 and 15), in clock ticks.
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::size_t paren = s.rfind(')');
    if (paren == std::string::npos) fail("cannot read the CPU time of process %d", static_cast<int>(pid));
    std::istringstream in(s.substr(paren + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> field; ++i) {
        if (i == 14) utime = std::strtod(field.c_str(), nullptr);
        if (i == 15) stime = std::strtod(field.c_str(), nullptr);
    }
    return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// VmRSS of process `pid`, KiB (-1: unreadable).
inline double rss_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.compare(0, 6, "VmRSS:") == 0) return std::strtod(line.c_str() + 6, nullptr);
    return -1;
}

}  // namespace spindle::bench
