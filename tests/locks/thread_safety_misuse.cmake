# Compiles tests/locks/thread_safety_test.cpp with SPINDLE_TSA_MISUSE under
# Clang's -Wthread-safety and counts the diagnostics: each of the 23 lock
# cases must give one "writing variable 'n' requires holding mutex" and one
# "releasing mutex 'm' that was not held", and the readers of tclock_shared
# and rw_lock one more write each. The scoped guards (locks/guard.hpp; lock
# `mu`, field `v`): each of the 26 lock_guard cases must give one write after
# the guard's scope and one read without a guard diagnosed, each of the 3
# shared_lock_guard cases one write under the shared guard and one read
# after its scope. Fewer means an annotation is missing or a no-op.
# Usage: cmake -DCXX=clang++ -DSRC=file.cpp -DINC=include -P thread_safety_misuse.cmake
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -fno-caret-diagnostics -Wthread-safety -DSPINDLE_TSA_MISUSE -I${INC} ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCHALL "writing variable 'n' requires holding mutex 'm' exclusively" writes "${err}")
string(REGEX MATCHALL "releasing mutex 'm' that was not held" releases "${err}")
# (the capability's name is "mutex" or "shared_mutex", whichever the lock type declares)
string(REGEX MATCHALL "writing variable 'v' requires holding [a-z_]+ 'mu' exclusively" guard_writes "${err}")
string(REGEX MATCHALL "reading variable 'v' requires holding [a-z_]+ 'mu'" guard_reads "${err}")
list(LENGTH writes nw)
list(LENGTH releases nr)
list(LENGTH guard_writes ngw)
list(LENGTH guard_reads ngr)
if(NOT nw EQUAL 25 OR NOT nr EQUAL 23 OR NOT ngw EQUAL 29 OR NOT ngr EQUAL 29)
  message(FATAL_ERROR "thread-safety misuse: expected 25 unguarded writes and 23 bad releases diagnosed, "
                      "and under the scoped guards 29 writes and 29 reads; got ${nw}, ${nr}, ${ngw} and ${ngr} "
                      "(compiler exit ${rc}):\n${err}")
endif()
message(STATUS "thread-safety misuse: ${nw} unguarded writes and ${nr} bad releases diagnosed, and ${ngw} writes "
               "and ${ngr} reads outside the scoped guards, as expected")
