// The thread-locals of include/spindle/arch/context.hpp. They are reached
// only through SPINDLE_FRESH_TLS_ADDRESS (arch/tls.hpp), by these assembler
// names; C++ code never names them, so no compiler-computed address of them
// can outlive a switch.
#include <spindle/arch/context.hpp>

namespace spindle::arch::detail {

__thread const eh_state* tl_eh_globals SPINDLE_TLS_NAME("spindle_tl_eh_globals")
    __attribute__((tls_model("initial-exec"), used)) = &eh_lookup_pending;

// Defined in every build, so that a sanitizer build of a program links
// against a library built without one (it is then never read).
__thread context* asan_switch_from SPINDLE_TLS_NAME("spindle_asan_switch_from")
    __attribute__((tls_model("initial-exec"), used)) = nullptr;

}  // namespace spindle::arch::detail
