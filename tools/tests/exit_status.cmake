# CTest script: the exit-status table (tools/cli.h ExitStatus, docs/API.md "CLI"), one case or
# more per status and command: 0 success, 1 a mismatch, 2 a bad command line, 3 bad input,
# 4 a runtime failure; and the stderr of a size that does not fit names the options and the size.
# Inputs: -DIQ=<indexer-q> -DEDIT=<st_set_metadata> -DGOOD=<good .safetensors> -DWORK=<scratch dir>
file(MAKE_DIRECTORY ${WORK})
# A mismatch: the good file with another weight_scale (its weights_out no longer match).
execute_process(COMMAND ${EDIT} ${GOOD} ${WORK}/mismatch.safetensors weight_scale 0.25 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "st_set_metadata failed (${rc})")
endif()
file(WRITE ${WORK}/text.safetensors "not a safetensors file\n")

# expect(<status> <stderr regex or ""> <arg>...)
function(expect status re)
  execute_process(COMMAND ${IQ} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL status)
    message(FATAL_ERROR "indexer-q ${ARGN}: expected exit status ${status}, got '${rc}'\n${out}${err}")
  endif()
  if(NOT re STREQUAL "" AND NOT err MATCHES "${re}")
    message(FATAL_ERROR "indexer-q ${ARGN}: stderr does not match '${re}':\n${err}")
  endif()
  if(err MATCHES "bad_alloc")
    message(FATAL_ERROR "indexer-q ${ARGN}: std::bad_alloc on stderr:\n${err}")
  endif()
endfunction()

expect(0 "" verify --backend reference ${GOOD})
expect(1 "" verify --backend reference ${GOOD} ${WORK}/mismatch.safetensors)
# usage errors, each command
expect(2 "--tokens" run --tokens abc)
expect(2 "--tokens" bench --tokens 1,x)
expect(2 "no conformance file" verify)
expect(2 "unknown command" frobnicate)
expect(2 "--save: at most 65535 tokens" run --recipe v4_k_fp8 --tokens 70000 --save ${WORK}/x.safetensors)
expect(2 "key-side recipes: v4_k_fp8" run --recipe v9_fp8)
# bad input (over a mismatch when both)
expect(3 "" verify --backend reference ${WORK}/missing.safetensors)
expect(3 "" verify --backend reference ${WORK}/text.safetensors)
expect(3 "" verify --backend reference ${WORK}/mismatch.safetensors ${WORK}/text.safetensors)
# runtime failures: sizes that do not fit (named), a file that cannot be written
expect(4 "--tokens 4194304 x --heads 4096: needs about [0-9.]+ [kMGT]?B \\([0-9]+ bytes\\) of memory"
       run --backend cpu --tokens 4194304 --heads 4096)
expect(4 "--tokens 4194304 x --heads 4096 \\(1 buffer sets\\): needs about"
       bench --backend cpu --tokens 4194304 --heads 4096 --rotate-mb 0)
expect(4 "--save" run --backend cpu --tokens 16 --heads 8 --iters 1 --save ${WORK}/no/such/dir/x.safetensors)
