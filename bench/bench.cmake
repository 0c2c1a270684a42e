# Speed benchmarks (not tests): bench_train times the three reference workloads
# through the public API on one BLAS thread; bench/run.sh runs it side by side
# with bench/torch_bench.py. Output lands in the build directory.
add_executable(bench_train ${CMAKE_SOURCE_DIR}/bench/bench_train.c)
set_target_properties(bench_train PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
target_include_directories(bench_train PRIVATE ${CMAKE_SOURCE_DIR}/src ${CBLAS_INCLUDE_DIR})
target_link_libraries(bench_train PRIVATE dtrain)
# bench_conv: the direct convolution kernel against im2col + GEMM, shape by shape.
add_executable(bench_conv ${CMAKE_SOURCE_DIR}/bench/bench_conv.c)
set_target_properties(bench_conv PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
target_include_directories(bench_conv PRIVATE ${CMAKE_SOURCE_DIR}/src ${CBLAS_INCLUDE_DIR})
target_link_libraries(bench_conv PRIVATE dtrain)
