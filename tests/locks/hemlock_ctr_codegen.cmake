# Hemlock's CTR read (Listing 2 line 15) must stay an atomic read-modify-
# write in the generated code: Clang turns fetch_add(0) into `mfence; mov`,
# a plain read that loses what CTR is for (include/spindle/locks/hemlock.hpp,
# ctr_read_acquire). Compiles hemlock_ctr_probe.cpp (hemlock's and
# hemlock_park's unlock) at -O2 and -O3 and requires a `lock xadd` and no
# `mfence`. x86-64.
#
#   cmake -DCXX=<compiler> -DROOT=<source dir> -DOUT=<dir> -P hemlock_ctr_codegen.cmake
cmake_minimum_required(VERSION 3.25)
separate_arguments(cxx UNIX_COMMAND "${CXX}")
file(MAKE_DIRECTORY ${OUT})
foreach(opt O2 O3)
  set(asm ${OUT}/hemlock_ctr_probe.${opt}.s)
  execute_process(COMMAND ${cxx} -std=c++20 -DNDEBUG -${opt} -I${ROOT}/include -S
                          ${ROOT}/tests/locks/hemlock_ctr_probe.cpp -o ${asm}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "hemlock_ctr_codegen: the probe does not compile at -${opt}:\n${err}")
  endif()
  file(READ ${asm} text)
  if(NOT text MATCHES "lock[ \t]+xadd")
    message(FATAL_ERROR "hemlock_ctr_codegen: -${opt}: no locked xadd in Hemlock's unlock (${asm})")
  endif()
  if(text MATCHES "mfence")
    message(FATAL_ERROR "hemlock_ctr_codegen: -${opt}: an mfence in Hemlock's unlock: CTR's read "
            "became a fenced plain load (${asm})")
  endif()
endforeach()
message(STATUS "hemlock_ctr_codegen: CTR's read is a locked xadd at -O2 and -O3")
