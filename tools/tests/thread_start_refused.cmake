# CTest script (with a timeout): `run` and `bench` with --threads N when the system refuses to
# start a thread. INDEXER_Q_CLI_THREAD_LIMIT=K (a test hook of tools/device_cpu.cpp) makes the
# copy pool's (K+1)-th thread start fail as the system does (std::system_error, EAGAIN): the
# pool must go on with the threads it has (a note on stderr) and the command finish normally,
# bit-exact. Works as root too (RLIMIT_NPROC does not apply to root).
# Inputs: -DIQ=<indexer-q>
foreach(limit 0 2)
  set(ENV{INDEXER_Q_CLI_THREAD_LIMIT} ${limit})
  math(EXPR have "${limit} + 1")
  foreach(case
      "run;--backend;cpu;--threads;4;--tokens;64;--heads;8;--iters;2"
      "bench;--backend;cpu;--threads;4;--recipe;v4_fp8;--tokens;512;--heads;64;--warmup;1;--iters;2;--rotate-mb;0"
      "run;--backend;cpu;--threads;4;--recipe;v4_k_fp8;--tokens;300;--iters;2")
    execute_process(COMMAND ${IQ} ${case} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
    message("limit ${limit}: indexer-q ${case}\n${out}${err}")
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "indexer-q ${case} (INDEXER_Q_CLI_THREAD_LIMIT=${limit}): expected exit status 0, got '${rc}'")
    endif()
    if(NOT err MATCHES "the copy pool runs on ${have} of 4 threads")
      message(FATAL_ERROR "indexer-q ${case}: no note that the copy pool runs on ${have} of 4 threads")
    endif()
  endforeach()
endforeach()
