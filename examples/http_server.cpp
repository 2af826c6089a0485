// A small HTTP/1.1 server with keep-alive, one fiber per connection.
//
//   example_http_server [port] [workers]     (port 0: any free port)
//
// Every GET or HEAD answers 200 with a short text body; other methods get
// 405, a request it cannot parse 400 (and the connection closes). Requests
// may arrive pipelined; bodies (Content-Length) are read and discarded.
// Enough for wrk and curl, not a web server.
#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <spindle/io.hpp>
#include <spindle/runtime/scheduler.hpp>

namespace io = spindle::io;

namespace {

constexpr std::string_view body = "Hello from spindle\n";

// The value of header `name` in the header block, or "".
std::string_view header(std::string_view head, std::string_view name) {
    std::size_t pos = head.find("\r\n");
    while (pos != std::string_view::npos && pos + 2 < head.size()) {
        std::size_t end = head.find("\r\n", pos + 2);
        std::string_view line = head.substr(pos + 2, end == std::string_view::npos ? end : end - pos - 2);
        if (line.size() > name.size() && line[name.size()] == ':' &&
            ::strncasecmp(line.data(), name.data(), name.size()) == 0) {
            std::string_view v = line.substr(name.size() + 1);
            while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
            return v;
        }
        pos = end;
    }
    return {};
}

void serve(io::stream s) {
    (void)s.set_nodelay(true);
    std::string buf;
    char chunk[8192];
    for (;;) {
        std::size_t end;
        while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
            if (buf.size() > 64 * 1024) return;  // a header block this long: give up
            auto n = s.read_some(chunk, sizeof chunk);
            if (!n || *n == 0) return;
            buf.append(chunk, *n);
        }
        std::string_view head(buf.data(), end + 2);
        std::size_t sp1 = head.find(' ');
        std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : head.find(' ', sp1 + 1);
        std::size_t eol = head.find("\r\n");
        if (sp2 == std::string_view::npos || sp2 > eol) {
            (void)s.write_all("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            return;
        }
        std::string_view method = head.substr(0, sp1);
        std::string_view version = head.substr(sp2 + 1, eol - sp2 - 1);
        std::string_view conn = header(head, "Connection");
        auto is = [](std::string_view v, std::string_view word) {
            return v.size() == word.size() && ::strncasecmp(v.data(), word.data(), word.size()) == 0;
        };
        bool keep = version == "HTTP/1.1" ? !is(conn, "close") : is(conn, "keep-alive");
        std::size_t body_len = static_cast<std::size_t>(std::atoll(std::string(header(head, "Content-Length")).c_str()));
        std::size_t used = end + 4 + body_len;
        while (buf.size() < used) {  // discard a request body
            auto n = s.read_some(chunk, sizeof chunk);
            if (!n || *n == 0) return;
            buf.append(chunk, *n);
        }
        std::string reply;
        if (method == "GET" || method == "HEAD") {
            reply = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
                    (keep ? "\r\n\r\n" : "\r\nConnection: close\r\n\r\n");
            if (method == "GET") reply += body;
        } else {
            reply = "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 0\r\n";
            reply += keep ? "\r\n" : "Connection: close\r\n\r\n";
        }
        if (s.write_all(reply)) return;
        buf.erase(0, used);
        if (!keep) return;
    }
}

}  // namespace

int main(int argc, char** argv) {
    auto port = static_cast<std::uint16_t>(argc > 1 ? std::atoi(argv[1]) : 8080);
    unsigned workers = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 1;
    spindle::scheduler sched({.workers = workers});
    auto l = io::listener::bind(io::endpoint::loopback_v4(port));
    if (!l) {
        std::fprintf(stderr, "http_server: cannot listen on port %u: %s\n", unsigned{port}, l.error().message().c_str());
        return 1;
    }
    std::printf("http_server: listening on %s (%s, %u workers)\n", l->local_endpoint()->to_string().c_str(),
                io::backend_name(io::current_backend()), sched.workers());
    std::fflush(stdout);
    sched.spawn([&] {
        for (;;) {
            auto s = l->accept();
            if (!s) {
                if (s.error() == std::errc::too_many_files_open) {
                    spindle::this_fiber::sleep_for(std::chrono::milliseconds(10));
                    continue;
                }
                std::fprintf(stderr, "http_server: accept: %s\n", s.error().message().c_str());
                return;
            }
            sched.spawn([s = std::move(*s)]() mutable { serve(std::move(s)); }).detach();
        }
    }).join();
    return 0;
}
