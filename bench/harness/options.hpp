// bench/harness/options.hpp — the benchmark programs' own command-line
// options, beside the harness's (harness.hpp): taking them out of argv,
// lists such as "1,2,4" or "a,b,c", and --variants.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"

namespace spindle::bench {

// "a,b,c" -> {a, b, c}; empty items are dropped.
inline std::vector<std::string> parse_names(const std::string& s) {
    std::vector<std::string> out;
    for (std::size_t b = 0; b <= s.size();) {
        std::size_t e = s.find(',', b);
        if (e == std::string::npos) e = s.size();
        if (e > b) out.push_back(s.substr(b, e - b));
        b = e + 1;
    }
    return out;
}

// "1,2,4" -> {1, 2, 4}: every item a whole number in [lo, hi]. An item that
// is not one (an empty one included) goes to fail("bad <what> '<item>' in
// '<s>'"), which does not return.
template <class Fail>
std::vector<unsigned> parse_numbers(const std::string& s, const char* what, long lo, long hi, Fail fail) {
    std::vector<unsigned> out;
    std::size_t i = 0;
    while (i <= s.size()) {
        std::size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        std::string item = s.substr(i, j - i);
        char* end = nullptr;
        long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < lo || v > hi) fail("bad %s '%s' in '%s'", what, item.c_str(), s.c_str());
        out.push_back(static_cast<unsigned>(v));
        i = j + 1;
    }
    return out;
}

// --variants a,b,c: only those variants run (all when it is not given).
class variant_filter {
public:
    void set(const std::string& list) {
        for (std::string& name : parse_names(list)) names_.push_back(std::move(name));
    }
    bool wants(const std::string& name) const {
        return names_.empty() || std::find(names_.begin(), names_.end(), name) != names_.end();
    }
    std::vector<variant> selected(std::vector<variant> vs) const {
        std::vector<variant> out;
        for (auto& v : vs)
            if (wants(v.name)) out.push_back(std::move(v));
        return out;
    }

private:
    std::vector<std::string> names_;
};

// A program's own option: its name, and what to do with the value that
// follows it.
struct own_option {
    std::string name;
    std::function<void(const std::string&)> take;
};

// Takes a program's own options out of argv, leaving the harness's for
// harness's constructor. An own option without a value goes to
// fail("missing value after %s", name), which does not return. --help and
// -h stay for the harness, after `also_takes` (the program's own usage) has
// gone to stderr.
template <class Fail>
void take_own_args(int& argc, char** argv, const char* also_takes, Fail fail, const std::vector<own_option>& own) {
    int out = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto it = std::find_if(own.begin(), own.end(), [&](const own_option& o) { return o.name == a; });
        if (it != own.end()) {
            if (i + 1 >= argc) fail("missing value after %s", a.c_str());
            it->take(argv[++i]);
            continue;
        }
        if (a == "--help" || a == "-h") std::fprintf(stderr, "%s\n", also_takes);
        argv[out++] = argv[i];
    }
    argc = out;
    argv[argc] = nullptr;
}

}  // namespace spindle::bench
