# spindle-kv end to end (tests/kv/): the real spindle-kv binary on a free
# port, driven by real memcached clients, as memcached 1.6.18 passes them.
# Each test runs through tests/kv/run_server.py, which starts the server,
# finds its port in its "listening on ADDR:PORT" line, runs the client with
# @PORT@ replaced, then stops the server with SIGTERM (as cmake/
# run_server_example.cmake does for the examples; in Python so that a
# client's exit code 77 reaches ctest as a skip).
#
#   kv.e2e.protocol_conformance  byte-exact replies (tests/kv/protocol_conformance.py)
#   kv.e2e.memccapable           libmemcached's memccapable -a (27 tests)
#   kv.e2e.libmemcached          tests/kv/libmemcached_client.c
#   kv.e2e.pymemcache            tests/kv/pymemcache_test.py
#   kv.e2e.connections_10k       10,000 connections open at once, all served
#   kv.e2e.disconnect_storm      3,000 clients vanishing mid-command, 200 at a time
#   kv.e2e.sigterm               exit status 0 on SIGTERM with connections open
#
# The clients come from Debian's libmemcached-tools, libmemcached-dev and
# python3-pymemcache (scripts/deps.sh); a test whose client is missing is
# not registered (or, for pymemcache, skipped). Every build registers them,
# the sanitizer builds included: there the server is the sanitized one.
if(TARGET spindle_kv AND NOT CMAKE_CROSSCOMPILING)
  # pymemcache installs for the system's python3; a python3 found first on
  # PATH (a virtualenv, pyenv) may not have it. The scripts need nothing
  # else beyond the standard library.
  find_program(SPINDLE_PYTHON3 python3)
  if(NOT SPINDLE_PYTHON3)
    message(STATUS "spindle: no python3; the kv.e2e tests are not registered")
    return()
  endif()
  set(_kv_python ${SPINDLE_PYTHON3})
  foreach(_py ${SPINDLE_PYTHON3} /usr/bin/python3)
    execute_process(COMMAND ${_py} -c "import pymemcache" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(_rc EQUAL 0)
      set(_kv_python ${_py})
      break()
    endif()
  endforeach()

  set(_kv_dir ${CMAKE_CURRENT_SOURCE_DIR}/kv)
  set(_kv_server $<TARGET_FILE:spindle_kv> -l 127.0.0.1 -p 0 -t 2)
  # kv_e2e_test(NAME [SERVER_ARGS args...] [RUNNER_ARGS args...] CLIENT command...)
  function(kv_e2e_test name)
    cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SERVER_ARGS;RUNNER_ARGS;CLIENT")
    add_test(NAME kv.e2e.${name}
             COMMAND ${_kv_python} ${_kv_dir}/run_server.py ${arg_RUNNER_ARGS}
                     --server ${_kv_server} ${arg_SERVER_ARGS} -- ${arg_CLIENT})
    # (No __pycache__ in the source tree.)
    set_tests_properties(kv.e2e.${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
                         ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1" LABELS kv)
  endfunction()

  kv_e2e_test(protocol_conformance CLIENT ${_kv_python} ${_kv_dir}/protocol_conformance.py --port @PORT@)

  find_program(SPINDLE_MEMCCAPABLE memccapable)
  if(SPINDLE_MEMCCAPABLE)
    kv_e2e_test(memccapable CLIENT ${_kv_python} ${_kv_dir}/memccapable_test.py --port @PORT@
                --memccapable ${SPINDLE_MEMCCAPABLE})
  endif()

  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(SPINDLE_LIBMEMCACHED QUIET IMPORTED_TARGET libmemcached)
  endif()
  if(SPINDLE_LIBMEMCACHED_FOUND)
    add_executable(kv_libmemcached_client kv/libmemcached_client.c)
    target_link_libraries(kv_libmemcached_client PRIVATE PkgConfig::SPINDLE_LIBMEMCACHED spindle_warnings)
    set_target_properties(kv_libmemcached_client PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON)
    kv_e2e_test(libmemcached CLIENT $<TARGET_FILE:kv_libmemcached_client> 127.0.0.1 @PORT@)
  endif()

  kv_e2e_test(pymemcache CLIENT ${_kv_python} ${_kv_dir}/pymemcache_test.py --port @PORT@)

  # The server raises its own descriptor limit for -c, as memcached does.
  # Under ThreadSanitizer 4,000: it registers every live fiber as a thread
  # of its own and stops the program past 8,128 of them.
  set(_kv_conns 10000)
  if(SPINDLE_SANITIZER STREQUAL "thread")
    set(_kv_conns 4000)
  endif()
  kv_e2e_test(connections_10k SERVER_ARGS -c 10240
              CLIENT ${_kv_python} ${_kv_dir}/connections_test.py --port @PORT@ --connections ${_kv_conns})

  # (-c: the server notices a vanished client when it next reads, so more
  # than the 200 at a time may still be open on its side.)
  kv_e2e_test(disconnect_storm SERVER_ARGS -c 4096
              CLIENT ${_kv_python} ${_kv_dir}/disconnect_storm_test.py --port @PORT@)

  # Quiet connections park without a fiber and wake when bytes arrive;
  # -vv logs each sweep that parks some.
  kv_e2e_test(parking SERVER_ARGS -c 4096 -vv
              CLIENT ${_kv_python} ${_kv_dir}/parking_test.py --port @PORT@)

  kv_e2e_test(sigterm RUNNER_ARGS --expect-exit-0)
endif()
