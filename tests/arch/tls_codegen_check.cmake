# Mechanical check that no compiler-generated thread-pointer access can
# outlive a context switch (include/spindle/arch/tls.hpp).
#
# A fiber may resume on another thread, and compilers treat the thread
# pointer as constant within a function, so spindle reaches its
# thread-locals only through SPINDLE_FRESH_TLS_ADDRESS, an asm statement.
# This script compiles the runtime, the sync layer, the I/O layer and
# tls_probe.cpp (the inline fast paths a user's loop can contain) to
# assembly, and fails if any line outside an inline-asm block (#APP ...
# #NO_APP) touches the thread pointer or a TLS relocation: then the
# compiler itself computed a thread-local's address, and could reuse it
# after a switch.
#
#   cmake -DCXX=<compiler> [-DCXX_FLAGS="<flags>"] [-DIO_URING=1] -DROOT=<source dir>
#         -DOUT=<dir> -P tls_codegen_check.cmake
#
# IO_URING=1: the target has liburing, so the I/O layer's io_uring backend
# is compiled too; otherwise the I/O sources are compiled as an epoll-only
# build has them.
# CXX_FLAGS may add a target (--target=aarch64-linux-gnu); every source is
# compiled at -O1, -O2 and -O3 (the register allocator and the inliner decide
# differently at each).
cmake_minimum_required(VERSION 3.25)
foreach(v CXX ROOT OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "tls_codegen_check: -D${v}=... is required")
  endif()
endforeach()
separate_arguments(extra UNIX_COMMAND "${CXX_FLAGS}")
separate_arguments(cxx UNIX_COMMAND "${CXX}")
file(GLOB sources ${ROOT}/src/runtime/*.cpp ${ROOT}/src/sync/*.cpp ${ROOT}/src/io/*.cpp)
if(IO_URING)
  list(APPEND extra -DSPINDLE_IO_URING=1)
else()
  list(REMOVE_ITEM sources ${ROOT}/src/io/uring.cpp)
  list(APPEND extra -DSPINDLE_IO_URING=0)
endif()
list(APPEND sources ${ROOT}/tests/arch/tls_probe.cpp)
file(MAKE_DIRECTORY ${OUT})

# Functions allowed to reach a thread-local the compiler's way: they never
# switch, so the thread pointer they read is the one they run on.
#   __tls_init, _ZTH*, _ZTW*   the compiler's own thread_local init and wrappers
#                              (out of line: each call reads the thread pointer)
#   current_local_table*       fiber_local's table for plain threads, taken
#                              only when no fiber runs (runtime/fiber_local.hpp)
#   io::detail::thread_await,  a plain thread's wait in poll(2), with its
#   thread_stop_fd             eventfd for stop requests (src/io/backend.cpp):
#                              perform() calls it only when no fiber runs
set(allowed "^(__tls_init|_ZTH.*|_ZTW.*|_ZN7spindle6detail19current_local_tableEv|_ZN7spindle6detail26current_local_table_if_anyEv|_ZN7spindle2io6detail12thread_await.*|_ZN7spindle2io6detail12_GLOBAL__N_114thread_stop_fdEv)$")

set(failures 0)
set(checked 0)
foreach(opt O1 O2 O3)
  foreach(src IN LISTS sources)
    get_filename_component(name ${src} NAME_WE)
    set(asm ${OUT}/${name}.${opt}.s)
    execute_process(
      COMMAND ${cxx} ${extra} -std=c++20 -DNDEBUG -${opt} -I${ROOT}/include -S ${src} -o ${asm}
      RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "tls_codegen_check: ${src} -${opt} does not compile:\n${err}")
    endif()
    # Only the lines that matter: asm block markers, function labels and
    # anything that mentions the thread pointer or a TLS relocation.
    file(STRINGS ${asm} lines REGEX
         "APP|^[A-Za-z_.$][A-Za-z0-9_.$]*:|%fs:|[Tt][Pp][Ii][Dd][Rr]_[Ee][Ll]0|@tpoff|@gottpoff|@tlsgd|@tlsld|@dtpoff|:tprel|:gottprel|:tlsdesc|:dtprel|__tls_get_addr")
    set(in_asm FALSE)
    set(func "?")
    set(asm_reads 0)
    foreach(line IN LISTS lines)
      if(line MATCHES "NO_APP")
        set(in_asm FALSE)
      elseif(line MATCHES "APP")
        set(in_asm TRUE)
      elseif(line MATCHES "^([A-Za-z_$][A-Za-z0-9_.$]*):")
        # (.L labels are blocks of the function we are in)
        set(func ${CMAKE_MATCH_1})
      elseif(line MATCHES "^[.]")
        # another local label
      elseif(in_asm)
        if(line MATCHES "spindle:tls")
          math(EXPR asm_reads "${asm_reads} + 1")
        endif()
      elseif(NOT func MATCHES "${allowed}")
        math(EXPR failures "${failures} + 1")
        message(SEND_ERROR "tls_codegen_check: ${name} -${opt}: the compiler touched the thread "
                "pointer in ${func}: '${line}' (${asm}). Reach the thread-local through "
                "SPINDLE_FRESH_TLS_ADDRESS (spindle/arch/tls.hpp).")
      endif()
    endforeach()
    math(EXPR checked "${checked} + 1")
    if(name STREQUAL "tls_probe" AND asm_reads LESS 10)
      # The probe's loops read the worker many times: if our own reads
      # vanished, the pattern above no longer finds them either.
      message(SEND_ERROR "tls_codegen_check: tls_probe -${opt} has only ${asm_reads} spindle:tls reads")
    endif()
  endforeach()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "tls_codegen_check: ${failures} compiler-generated thread-pointer accesses")
endif()
message(STATUS "tls_codegen_check: ${checked} assembly files, no compiler-generated thread-pointer access")
