// Compiled to assembly by hemlock_ctr_codegen.cmake, never run: Hemlock's
// unlock, whose wait for the acknowledgement is CTR's read-as-RMW.
#include <spindle/locks/hemlock.hpp>

void spindle_ctr_probe_unlock(spindle::hemlock& l) { l.unlock(); }
void spindle_ctr_probe_unlock_park(spindle::hemlock_park& l) { l.unlock(); }
