# Runs an example program as a test: it must exit with status 0 and print
# what a user should see. (A test's PASS_REGULAR_EXPRESSION alone ignores
# the exit status: an example that printed the right line and then crashed
# would pass.) In a cross build the program runs under the toolchain's
# CMAKE_CROSSCOMPILING_EMULATOR (qemu-user for the AArch64 presets), which
# examples/CMakeLists.txt puts in front of it.
#
#   cmake "-DPROGRAM=[<emulator>;...;]<program>" -DEXPECT=<regex> -P run_example.cmake
cmake_minimum_required(VERSION 3.25)
foreach(v PROGRAM EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_example: -D${v}=... is required")
  endif()
endforeach()
list(FILTER PROGRAM EXCLUDE REGEX "^$")   # (no emulator: an empty first item)
list(JOIN PROGRAM " " shown)
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "run_example: ${shown} exited with ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "run_example: the output of ${shown} does not match '${EXPECT}'")
endif()
