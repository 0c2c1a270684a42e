# Every tests/test_*.c is one executable and one ctest, run from tests/ so it
# finds fixtures/. Shell tests tests/test_*.sh get the build dir as $1.
# Tests labelled "slow" (training to an accuracy bar) and "matrix" (the same
# paths in many layouts) are skipped in the sanitizer build, which runs
# test_paths (every path once) instead.
file(GLOB DT_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
foreach(src ${DT_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${CBLAS_INCLUDE_DIR})
  target_link_libraries(${name} PRIVATE dtrain)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 600)
endforeach()
# Script tests start dtrain ranks under mpirun: in the sanitizer build, Open
# MPI's own allocations are suppressed as for test_comm_np* below.
file(GLOB DT_TEST_SCRIPTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.sh)
foreach(script ${DT_TEST_SCRIPTS})
  get_filename_component(name ${script} NAME_WE)
  # test_paths runs every code path once for the sanitizer build, in place of
  # the matrix tests below; the optimised build runs the matrices themselves.
  if(name MATCHES "^test_paths" AND NOT DT_SANITIZE)
    continue()
  endif()
  # Python loads the shared library, which under the sanitizers needs their
  # runtime preloaded into python3: the optimised build's pass tests the package
  # (test_train_api runs its C entry point under the sanitizers).
  if(name STREQUAL "test_python" AND DT_SANITIZE)
    continue()
  endif()
  # The fuzzers build themselves with clang's sanitizers whatever the build:
  # the optimised build's pass runs them, once.
  if(name STREQUAL "test_fuzz_smoke" AND DT_SANITIZE)
    continue()
  endif()
  add_test(NAME ${name} COMMAND bash ${script} ${CMAKE_BINARY_DIR} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "OPENBLAS_NUM_THREADS=1;ASAN_OPTIONS=fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0"
    TIMEOUT 600)
endforeach()
# Slow tests: training to an accuracy bar, and test_stop (every layout stopped
# by a signal at a random step and resumed: 150 s alone, 240 s beside the rest).
# `make test` leaves them to `make test-slow` (CI runs both) so that a new
# machine's `make test`, sanitizer pass included, stays within 15 minutes on 2
# cores; the sanitizer pass never runs them.
# The emulated cluster (namespaces, shaped links), the asynchronous strategies'
# and the compressed training's matrices and --layout auto's runs went there too
# when the suite outgrew 15 minutes (1064 s of tests at -j 2 in December 2026).
foreach(slow test_train_slow test_ps_slow test_async_slow test_compress_slow test_ps_elastic test_async test_cluster
        test_layout_auto test_compress_train)
  if(TEST ${slow})
    set_property(TEST ${slow} APPEND PROPERTY LABELS slow)
  endif()
endforeach()
# Matrix tests: many runs of each code path, to show that every layout gives
# the same numbers. The sanitizer pass leaves them out (-LE matrix) and runs
# test_paths and test_paths_b, every path once, instead: under ASan a run costs 3-4x, and the
# numbers are the optimised build's to check.
foreach(matrix test_dp test_pp test_tp test_seqpar test_ckpt test_ps test_async test_compress_train test_cluster
       test_models test_layout_auto test_precision test_fp16 test_zero3 test_interleaved
       # and fault tests whose paths test_paths runs once under the sanitizers
       test_ps_kill test_rl)
  if(TEST ${matrix})
    set_property(TEST ${matrix} APPEND PROPERTY LABELS matrix)
  endif()
endforeach()
if(TEST test_stop)
  set_tests_properties(test_stop PROPERTIES LABELS "slow;matrix")
endif()
# The pipeline's timing checks (the schedules' bubble, the auto partition
# against every split) judge measured time: they run alone (beside test_dp's
# ranks on 2 cores GPipe's idle share measured 15% over its formula, alone 5%).
# About 45 s with the machine to itself, so it is labelled slow: `make test-slow`
# (CI) runs it, the README's `make test` leaves it out. The sanitizer build skips
# its checks.
if(TEST test_pp_timing)
  set_tests_properties(test_pp_timing PROPERTIES RUN_SERIAL TRUE LABELS slow)
endif()

# The planner's tests (issue 16): `ctest -L plan` runs them alone.
# (test_layout_auto trains layouts several times over: a matrix test too, left to the
# optimised build.)
foreach(plan test_plan test_plan_layouts test_plan_links test_plan_memory test_plan_cli)
  if(TEST ${plan})
    set_property(TEST ${plan} APPEND PROPERTY LABELS plan)
  endif()
endforeach()
if(TEST test_layout_auto)
  set_property(TEST test_layout_auto APPEND PROPERTY LABELS plan)
endif()

# ---- test_comm under mpiexec: 2..5 ranks, oversubscribed on this machine -------
# (The glob above already runs test_comm as one process: the self communicator.)
# Shared memory and TCP transports only, so no network hardware is probed; the
# root flags let the suite run in containers, where tests often run as root.
# Sanitizer builds: Open MPI's own allocations are suppressed (tests/lsan.supp,
# whose header says why the full unwinder is needed).
find_program(DT_MPIEXEC NAMES mpiexec mpirun HINTS ${MPIEXEC_EXECUTABLE})
# dt_mpi_test(TARGET NP...): TARGET under mpiexec at each rank count.
function(dt_mpi_test target)
  dt_mpi_test_args(${target} "" "" ${ARGN})
endfunction()
# dt_mpi_test_args(TARGET SUFFIX ARGS NP...): the same with the program's
# arguments ARGS (a ;-list), named TARGET_npN_SUFFIX.
function(dt_mpi_test_args target suffix args)
  if(NOT DT_MPIEXEC OR NOT TARGET ${target})
    return()
  endif()
  foreach(np ${ARGN})
    set(name ${target}_np${np}${suffix})
    add_test(NAME ${name}
             COMMAND ${DT_MPIEXEC} -n ${np} --oversubscribe --mca btl self,vader,tcp
                     $<TARGET_FILE:${target}> ${args}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
    set_tests_properties(${name} PROPERTIES
      ENVIRONMENT "OPENBLAS_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;ASAN_OPTIONS=fast_unwind_on_malloc=0;LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0"
      TIMEOUT 120 LABELS mpi)
  endforeach()
endfunction()
dt_mpi_test(test_comm 2 3 4 5)
# The hierarchical algorithms on ranks that pretend to sit on several hosts:
# 2 x 2 (even), 3 + 2 (uneven), one rank per host.
dt_mpi_test_args(test_comm _hosts2 "--pretend-hosts;2" 4 5)
dt_mpi_test_args(test_comm _hosts3 "--pretend-hosts;3" 3)
# The compressed collectives across ranks, the same way.
dt_mpi_test(test_gradcomp 2 3 4)
# Sequence parallelism's layer paths against the unsharded model, the world one tp group.
dt_mpi_test(test_seqpar_grad 2 3 4)

# ---- the order on a fresh clone ------------------------------------------------
# ctest starts the tests with the highest COST first; without cost data from an
# earlier run (a fresh clone, CI) it would start them in name order and leave the
# longest (test_stop) to run alone at the end. Seconds measured with -j 2 on the
# 2-core machine (release build; test_paths, the sanitizer build's longest, there).
set(DT_TEST_COSTS
  test_stop 180 test_cluster 112 test_async 97 test_fuzz_smoke 60 test_pp 72 test_async_slow 67
  test_dp 61 test_compress_train 55 test_ps_slow 53 test_ckpt 52 test_models 50 test_layout_auto 44
  test_ps 43 test_ps_kill 38 test_compress_slow 30 test_ps_elastic 60 test_paths 190 test_paths_b 170 test_rl 15 test_interleaved 52
  test_precision 45 test_fp16 26 test_zero3 60 test_python 18 test_report 15 test_max_memory 10 test_cli 12 test_netbed 8 test_install 8 test_elastic 7 test_tp 24 test_seqpar 25 test_train_slow 15 test_pp_timing 45)
list(LENGTH DT_TEST_COSTS n)
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last} 2)
  math(EXPR j "${i} + 1")
  list(GET DT_TEST_COSTS ${i} name)
  list(GET DT_TEST_COSTS ${j} cost)
  if(TEST ${name})
    set_tests_properties(${name} PROPERTIES COST ${cost})
  endif()
endforeach()
