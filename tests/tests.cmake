# Every tests/test_*.c is one executable and one ctest, run from tests/ so it
# finds fixtures/. Shell tests tests/test_*.sh get the build dir as $1.
# Tests labelled "slow" (training to an accuracy bar) are skipped in the
# sanitizer build, where they would take too long.
file(GLOB DT_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
foreach(src ${DT_TEST_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests ${CBLAS_INCLUDE_DIR})
  target_link_libraries(${name} PRIVATE dtrain)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 600)
endforeach()
file(GLOB DT_TEST_SCRIPTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.sh)
foreach(script ${DT_TEST_SCRIPTS})
  get_filename_component(name ${script} NAME_WE)
  add_test(NAME ${name} COMMAND bash ${script} ${CMAKE_BINARY_DIR} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 600)
endforeach()
# Slow tests carry the label so the sanitizer pass can exclude them (-LE slow).
foreach(slow test_train_slow test_cli)
  if(TEST ${slow})
    set_tests_properties(${slow} PROPERTIES LABELS slow)
  endif()
endforeach()
