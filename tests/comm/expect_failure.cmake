# cmake -DCMD="prog;args" -DEXPECT=regex -DMAX_SECONDS=n -P expect_failure.cmake
# Passes when CMD ends within MAX_SECONDS with a non-zero exit status and its output matches every regex of the
# list EXPECT.
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${CMD} TIMEOUT ${MAX_SECONDS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
message("--- output (exit status ${rc}, ${took} s) ---\n${out}---")
if(rc MATCHES "timeout" OR took GREATER_EQUAL MAX_SECONDS)
  message(FATAL_ERROR "did not end within ${MAX_SECONDS} s (a rank hangs)")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "exited with status 0; a failure was expected")
endif()
foreach(re IN LISTS EXPECT)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "output does not match: ${re}")
  endif()
endforeach()
