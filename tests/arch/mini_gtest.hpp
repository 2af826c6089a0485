// A few lines of GoogleTest's surface, for cross builds where GoogleTest is
// not available (the AArch64 clobber test under qemu-user).
#pragma once

#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace testing {
class Test {
public:
    virtual ~Test() = default;
    virtual void SetUp() {}
    virtual void TearDown() {}
    virtual void TestBody() = 0;
};
namespace mini {
struct entry {
    const char* name;
    std::function<Test*()> make;
};
inline std::vector<entry>& registry() {
    static std::vector<entry> r;
    return r;
}
inline int& failures() {
    static int f = 0;
    return f;
}
struct registrar {
    registrar(const char* name, std::function<Test*()> make) { registry().push_back({name, std::move(make)}); }
};
struct failure {
    std::ostringstream msg;
    const char* file;
    int line;
    failure(const char* f, int l) : file(f), line(l) {}
    ~failure() {
        ++failures();
        std::fprintf(stderr, "%s:%d: failure %s\n", file, line, msg.str().c_str());
    }
    template <class T>
    failure& operator<<(const T& v) {
        msg << v;
        return *this;
    }
};
struct ignore {
    template <class T>
    ignore& operator<<(const T&) {
        return *this;
    }
};
}  // namespace mini
}  // namespace testing

#define TEST_F(fixture, name)                                                                       \
    struct fixture##_##name : fixture {                                                             \
        void TestBody() override;                                                                   \
    };                                                                                              \
    static ::testing::mini::registrar fixture##_##name##_reg(#fixture "." #name,                    \
                                                             [] { return new fixture##_##name; }); \
    void fixture##_##name::TestBody()

#define EXPECT_EQ(a, b)                                                                            \
    if ((a) == (b)) ::testing::mini::ignore();                                                     \
    else ::testing::mini::failure(__FILE__, __LINE__) << #a " == " #b " "

int main() {
    int run = 0;
    for (auto& e : ::testing::mini::registry()) {
        int before = ::testing::mini::failures();
        ::testing::Test* t = e.make();
        t->SetUp();
        t->TestBody();
        t->TearDown();
        delete t;
        ++run;
        std::printf("[%s] %s\n", ::testing::mini::failures() == before ? "  OK  " : "FAILED", e.name);
    }
    int failed = ::testing::mini::failures() ? 1 : 0;
    std::printf("%d passed, %d failed\n", run - failed, failed);
    return failed;
}
