// The configuration tag every translation unit that includes spindle
// refers to (spindle/arch/config.hpp). This library compiles the lock
// sources itself, without src/arch/context.cpp, which defines it for the
// spindle::locks target; its own translation units share its setting.
#include <spindle/arch/config.hpp>

extern "C" const char SPINDLE_CONFIG_TAG = 0;
