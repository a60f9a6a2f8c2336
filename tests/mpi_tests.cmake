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
  # hang: rank 1 stops calling MPI; rank 0's watchdog (AGOQ_COMM_TIMEOUT 2 s) ends it with status 4.
  set(fault_hang_regex "agoq: error: rank 0/2 on [^:]+: MPI barrier has not completed in 2 s"
      "Process name: \\[\\[[0-9]+,1\\],0\\].*Exit code: +4")
  foreach(fault exit config error hang)
    set(timeout 120)  # the watchdog's default, far above these tests' 20 s; hang: 2 s
    if(fault STREQUAL hang)
      set(timeout 2)
    endif()
    add_test(NAME comm_fault_${fault} COMMAND ${CMAKE_COMMAND}
      "-DCMD=${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;--bind-to;none;-x;OMP_NUM_THREADS=1;-x;AGOQ_TEST_COMM_FAULT=${fault};-x;AGOQ_COMM_TIMEOUT=${timeout};-np;2;$<TARGET_FILE:test_comm>"
      "-DEXPECT=${fault_${fault}_regex}" -DMAX_SECONDS=20
      -P ${CMAKE_SOURCE_DIR}/tests/comm/expect_failure.cmake)
    set_tests_properties(comm_fault_${fault} PROPERTIES TIMEOUT 60 LABELS mpi PROCESSORS 2)
  endforeach()
endif()

# Data-parallel training (tests/parallel): the suite on 2 and 4 ranks (the single-process run is gtest's), then
# process-level faults of `agoq train` under mpirun on a corpus written by the parallel_corpus fixture.
if(TARGET test_parallel)
  foreach(np 2 4)
    add_test(NAME parallel_np${np} COMMAND ${AGOQ_MPIRUN} -np ${np} $<TARGET_FILE:test_parallel>)
    set_tests_properties(parallel_np${np} PROPERTIES TIMEOUT 300 LABELS mpi PROCESSORS ${np})
  endforeach()

  set(dp_data ${CMAKE_BINARY_DIR}/parallel_fault_data)
  add_test(NAME parallel_corpus COMMAND ${CMAKE_COMMAND} -E env AGOQ_TEST_WRITE_DATA=${dp_data}
    $<TARGET_FILE:test_parallel>)
  set_tests_properties(parallel_corpus PROPERTIES FIXTURES_SETUP dp_corpus LABELS mpi)  # set-up of the MPI faults
  set(dp_mpirun "${MPIEXEC_EXECUTABLE};--allow-run-as-root;--oversubscribe;--bind-to;none;-x;OMP_NUM_THREADS=1;-x;OPENBLAS_NUM_THREADS=1")
  set(dp_train "$<TARGET_FILE:agoq>;train;--data;${dp_data};--dim;32;--layers;2;--heads;4;--kv-heads;2;--ffn;48;--seq;16;--batch;4;--steps;40;--eval-every;0;--eval-batches;1;--quiet")
  # A rank dies at step 3: mpirun names it and ends the job within seconds (no survivor waits forever).
  add_test(NAME parallel_fault_exit COMMAND ${CMAKE_COMMAND}
    "-DCMD=${dp_mpirun};-np;2;${dp_train};--out;${dp_data}/exit;--debug-exit-at-step;3;--debug-exit-rank;1"
    "-DEXPECT=agoq: debug: rank 1 exits with code 3 at step 3;Process name: \\[\\[[0-9]+,1\\],1\\].*Exit code: +3"
    -DMAX_SECONDS=20 -P ${CMAKE_SOURCE_DIR}/tests/comm/expect_failure.cmake)
  # Ranks started with different flags (MPMD: rank 1 has another seed): one message from rank 0, all exit 1.
  add_test(NAME parallel_fault_config COMMAND ${CMAKE_COMMAND}
    "-DCMD=${dp_mpirun};-np;1;${dp_train};--out;${dp_data}/cfg;--seed;1;:;-np;1;${dp_train};--out;${dp_data}/cfg;--seed;2"
    "-DEXPECT=agoq: error: rank 1 runs a different config than rank 0"
    -DMAX_SECONDS=20 -P ${CMAKE_SOURCE_DIR}/tests/comm/expect_failure.cmake)
  set_tests_properties(parallel_fault_exit parallel_fault_config PROPERTIES TIMEOUT 60 LABELS mpi PROCESSORS 2
    FIXTURES_REQUIRED dp_corpus)

  # Across hosts (network namespaces, scripts/hosts.sh; root only, else skipped): 2 hosts at 1 Gbit/s over TCP.
  # identical: 2-host losses equal 2-rank shared-memory losses bit for bit (fp32 and q8 paths); link: a host's
  # link goes down mid-run, every rank is gone within 30 s with mpirun naming the host, the checkpoint resumes.
  # The other fault cases (kill, slow) run by hand: tests/multihost/multihost_test.sh ... kill slow.
  foreach(case identical link)
    add_test(NAME multihost_${case} COMMAND ${CMAKE_SOURCE_DIR}/tests/multihost/multihost_test.sh
      $<TARGET_FILE:agoq> ${dp_data} ${CMAKE_BINARY_DIR}/multihost_work/${case} ${case})
    set_tests_properties(multihost_${case} PROPERTIES TIMEOUT 120 LABELS mpi PROCESSORS 2 SKIP_RETURN_CODE 77
      RESOURCE_LOCK agoq_hosts FIXTURES_REQUIRED dp_corpus)
  endforeach()
endif()
