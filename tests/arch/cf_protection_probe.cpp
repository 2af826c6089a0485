// Linked by cf_protection_check.cmake, never run: a program compiled with a
// hardened distribution's flags (-fcf-protection=full on x86-64,
// -mbranch-protection=standard on AArch64) that uses fibers, a mutex and a
// generator, so that the link pulls in spindle's switching objects. It is
// linked without the C runtime's start files (Debian's carry no property
// notes, which would clear every feature bit and make the check vacuous).
#include <spindle/spindle.hpp>

extern "C" int spindle_cf_probe() {
    spindle::scheduler s({.workers = 1});
    spindle::mutex m;
    spindle::fiber f = s.spawn([&] {
        m.lock();
        spindle::this_fiber::yield();
        m.unlock();
    });
    f.join();
    spindle::generator<int> g([](auto& y) { y(1); });
    return g.next() ? 0 : 1;
}

// The start files' symbol, which the C++ runtime's static destructors need.
extern "C" __attribute__((visibility("hidden"))) void* __dso_handle;
void* __dso_handle = &__dso_handle;
