# tools/gdb/spindle.py against a live program: runs
# tests/tools/gdb_fibers_target.cpp under gdb, stops it once its fibers are
# in place, and checks what `info fibers` and `fiber bt` print (the target's
# header lists the fibers and their states). Then the program continues to
# its end: after `fiber bt` loaded and put back the registers of its main
# thread, it must still finish as it would have ("gdb_fibers_target: ok").
#
# Exit code 77 (ctest: skipped) when there is no gdb or it has no Python.
#
#   cmake -DGDB=<gdb or empty> -DSCRIPT=<tools/gdb/spindle.py> -DTARGET=<program>
#         -P gdb_fibers_check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v SCRIPT TARGET)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "gdb_fibers_check: -D${v}=... is required")
  endif()
endforeach()
if(NOT GDB OR NOT EXISTS "${GDB}")
  message("gdb_fibers_check: no gdb (scripts/deps.sh check installs it): skipped")
  cmake_language(EXIT 77)
endif()
execute_process(COMMAND ${GDB} -batch -nx -ex "python print('python ok')"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT out MATCHES "python ok")
  message("gdb_fibers_check: ${GDB} has no Python: skipped\n${out}${err}")
  cmake_language(EXIT 77)
endif()

# The target's ids for the two backtraces (no debug information: read as
# the integers they are).
set(mutex_id "*(unsigned long long*)&gdb_fibers_mutex_waiter")
set(event_id "*(unsigned long long*)&gdb_fibers_event_waiter")
execute_process(
  COMMAND ${GDB} -batch -nx
          -ex "set pagination off"
          -ex "set confirm off"
          -ex "source ${SCRIPT}"
          -ex "break gdb_fibers_stop_here"
          -ex "run"
          -ex "echo === info fibers\\n"
          -ex "info fibers"
          -ex "echo === info fibers -q\\n"
          -ex "info fibers -q"
          -ex "echo === fiber bt mutex\\n"
          -ex "fiber bt ${mutex_id}"
          -ex "echo === fiber bt event\\n"
          -ex "fiber bt ${event_id}"
          -ex "echo === bt\\n"
          -ex "bt 1"
          -ex "echo === continue\\n"
          -ex "continue"
          --args ${TARGET}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
set(all "${out}${err}")
message("${all}")

function(section name result)
  string(FIND "${all}" "=== ${name}\n" b)
  if(b LESS 0)
    message(FATAL_ERROR "gdb_fibers_check: no '${name}' section in gdb's output")
  endif()
  string(SUBSTRING "${all}" ${b} -1 rest)
  string(LENGTH "=== ${name}\n" skip)
  string(SUBSTRING "${rest}" ${skip} -1 rest)
  string(FIND "${rest}" "\n===" e)
  if(e GREATER_EQUAL 0)
    string(SUBSTRING "${rest}" 0 ${e} rest)
  endif()
  set(${result} "${rest}" PARENT_SCOPE)
endfunction()

# How many lines of `text` match `regex` (anchored at both ends).
function(count_matches text regex expected what)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  list(FILTER lines INCLUDE REGEX "^${regex}$")
  list(LENGTH lines n)
  if(NOT n EQUAL expected)
    message(FATAL_ERROR "gdb_fibers_check: ${what}: ${n} lines, expected ${expected}")
  endif()
endfunction()

set(id "[0-9]+ +")
section("info fibers" info)
count_matches("${info}" "${id}[a-z]+ .*" 8 "fibers listed")
if(NOT info MATCHES "\n8 fibers")
  message(FATAL_ERROR "gdb_fibers_check: 'info fibers' does not count 8 fibers")
endif()
count_matches("${info}" "${id}running +0 +pinned" 1 "running on worker 0")
count_matches("${info}" "${id}running +1 +pinned" 1 "running on worker 1")
count_matches("${info}" "${id}parked +[0-9]+ +waiter 0x[0-9a-f]+ in spindle::mutex::[a-z_]+ from .*gdb_fibers_park_on_mutex"
              2 "parked in spindle::mutex from gdb_fibers_park_on_mutex")
count_matches("${info}" "${id}parked +[0-9]+ +waiter 0x[0-9a-f]+ in spindle::event::[a-z_]+ from .*gdb_fibers_wait_on_event"
              1 "parked in spindle::event from gdb_fibers_wait_on_event")
count_matches("${info}" "${id}parked .*" 3 "parked")
count_matches("${info}" "${id}finished +[0-9]+" 1 "finished")
count_matches("${info}" "${id}ready +0 +not started pinned" 2 "ready, not started, on worker 0")

section("info fibers -q" quick)
count_matches("${quick}" "${id}parked +[0-9]+ +waiter 0x[0-9a-f]+" 3 "parked, without wait sites (-q)")
count_matches("${quick}" "${id}[a-z]+ .*" 8 "fibers listed (-q)")

section("fiber bt mutex" bt)
if(NOT bt MATCHES "fiber [0-9]+ \\(parked\\)\n#0 [^\n]*spindle::detail::" OR
   NOT bt MATCHES "#[0-9]+ [^\n]*spindle::mutex::" OR
   NOT bt MATCHES "#[0-9]+ [^\n]*gdb_fibers_park_on_mutex" OR
   NOT bt MATCHES "#[0-9]+ [^\n]*spindle::detail::fiber_entry")
  message(FATAL_ERROR "gdb_fibers_check: 'fiber bt' of a fiber parked on the mutex does not run from "
          "fiber_entry through gdb_fibers_park_on_mutex and spindle::mutex to the runtime's park")
endif()
section("fiber bt event" bt)
if(NOT bt MATCHES "#[0-9]+ [^\n]*spindle::event::" OR NOT bt MATCHES "#[0-9]+ [^\n]*gdb_fibers_wait_on_event")
  message(FATAL_ERROR "gdb_fibers_check: 'fiber bt' of the fiber parked on the event does not show "
          "gdb_fibers_wait_on_event and spindle::event")
endif()
section("bt" bt)
if(NOT bt MATCHES "#0 [^\n]*gdb_fibers_stop_here")
  message(FATAL_ERROR "gdb_fibers_check: after 'fiber bt' the thread's own frame 0 is not back")
endif()
section("continue" cont)
if(NOT cont MATCHES "gdb_fibers_target: ok" OR NOT cont MATCHES "exited normally")
  message(FATAL_ERROR "gdb_fibers_check: the program did not run to its end after the fiber commands")
endif()
message(STATUS "gdb_fibers_check: ok")
