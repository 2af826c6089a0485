# Compiles tests/locks/thread_safety_test.cpp with SPINDLE_TSA_MISUSE under
# Clang's -Wthread-safety and counts the diagnostics: each of the 21 lock
# cases must give one "writing variable 'n' requires holding mutex" and one
# "releasing mutex 'm' that was not held", and tclock_shared's reader one
# more write. Fewer means an annotation is missing or a no-op.
# Usage: cmake -DCXX=clang++ -DSRC=file.cpp -DINC=include -P thread_safety_misuse.cmake
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -fno-caret-diagnostics -Wthread-safety -DSPINDLE_TSA_MISUSE -I${INC} ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCHALL "writing variable 'n' requires holding mutex 'm' exclusively" writes "${err}")
string(REGEX MATCHALL "releasing mutex 'm' that was not held" releases "${err}")
list(LENGTH writes nw)
list(LENGTH releases nr)
if(NOT nw EQUAL 22 OR NOT nr EQUAL 21)
  message(FATAL_ERROR "thread-safety misuse: expected 22 unguarded writes and 21 bad releases diagnosed, "
                      "got ${nw} and ${nr} (compiler exit ${rc}):\n${err}")
endif()
message(STATUS "thread-safety misuse: ${nw} unguarded writes and ${nr} bad releases diagnosed, as expected")
