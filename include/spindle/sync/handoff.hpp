// spindle/sync/handoff.hpp — spindle::handoff lives in the runtime
// (runtime/handoff.hpp); this header keeps older includes working.
#pragma once

#include <spindle/runtime/handoff.hpp>
