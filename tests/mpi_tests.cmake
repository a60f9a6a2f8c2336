# Multi-process runs of test_comm (the single-process run is registered by gtest_discover_tests). Every rank runs
# the whole suite; test_comm's main fails every rank when one fails, so a failure anywhere fails the ctest.
set(AGOQ_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none
    -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
if(TARGET test_comm)
  foreach(np 2 4)
    add_test(NAME comm_np${np} COMMAND ${AGOQ_MPIRUN} -np ${np} $<TARGET_FILE:test_comm>)
    set_tests_properties(comm_np${np} PROPERTIES TIMEOUT 600 LABELS mpi PROCESSORS ${np})
  endforeach()

  # Faults: each must end quickly, non-zero, with the expected message (tests/comm/expect_failure.cmake).
  # exit: mpirun names the dead rank (process [[job,1],1], exit code 3). The survivors also print why they end
  # (our SIGTERM note); not matched, as mpirun may kill them before the note is forwarded.
  set(fault_exit_regex "rank 1 exits with code 3" "Process name: \\[\\[[0-9]+,1\\],1\\].*Exit code: +3")
  set(fault_config_regex "agoq: error: rank 1 runs a different config than rank 0")
  set(fault_error_regex "agoq: error: rank 1/2: cannot read shard 3")
  foreach(fault exit config error)
    add_test(NAME comm_fault_${fault} COMMAND ${CMAKE_COMMAND}
      "-DCMD=${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;--bind-to;none;-x;OMP_NUM_THREADS=1;-x;AGOQ_TEST_COMM_FAULT=${fault};-np;2;$<TARGET_FILE:test_comm>"
      "-DEXPECT=${fault_${fault}_regex}" -DMAX_SECONDS=20
      -P ${CMAKE_SOURCE_DIR}/tests/comm/expect_failure.cmake)
    set_tests_properties(comm_fault_${fault} PROPERTIES TIMEOUT 60 LABELS mpi PROCESSORS 2)
  endforeach()
endif()
