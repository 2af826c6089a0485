// Test parameters shared by the sync and runtime tests: worker counts, the
// three handoff policies, and the names gtest prints for them.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <spindle/runtime/handoff.hpp>

namespace spindle::test {

inline constexpr handoff all_policies[] = {handoff::inline_resume, handoff::dispatch, handoff::ces};
// 8 > the cores of a small machine on purpose: the OS must interleave workers.
inline constexpr unsigned stress_workers[] = {1, 2, 4, 8};

struct workers_and_policy {
    unsigned workers;
    handoff policy;
};

// Every worker count with every policy.
inline std::vector<workers_and_policy> workers_and_policies() {
    std::vector<workers_and_policy> v;
    for (unsigned w : stress_workers)
        for (handoff p : all_policies) v.push_back({w, p});
    return v;
}

inline std::string workers_name(const ::testing::TestParamInfo<unsigned>& i) {
    return std::to_string(i.param) + "workers";
}
inline std::string policy_name(const ::testing::TestParamInfo<handoff>& i) { return to_string(i.param); }
inline std::string workers_and_policy_name(const ::testing::TestParamInfo<workers_and_policy>& i) {
    return std::string(to_string(i.param.policy)) + "_" + std::to_string(i.param.workers) + "workers";
}

}  // namespace spindle::test
