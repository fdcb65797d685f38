# CTest script: bad command lines must exit with status 2 and name the option on stderr.
# Inputs: -DIQ=<indexer-q> [-DSIDE=kside: the key-side command lines instead of the query side's]

# expect_usage_error(<arg>... <text>): indexer-q <arg>... exits with status 2, <text> on stderr.
function(expect_usage_error)
  set(case ${ARGN})
  list(POP_BACK case expect)
  execute_process(COMMAND ${IQ} ${case} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "indexer-q ${case}: expected exit status 2, got '${rc}' (${err})")
  endif()
  string(FIND "${err}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "indexer-q ${case}: stderr does not name ${expect}: ${err}")
  endif()
endfunction()

if(SIDE STREQUAL "kside")
  # Key-side and query-side recipes are not mixed in one command; a bad page size is named.
  foreach(case "bench;--recipe;v4_k_fp8,v4_fp8;--recipe" "run;--recipe;v4_k_fp4;--page-size;48;--page-size"
               "run;--recipe;v4_k_fp8;--heads;8;--heads")
    expect_usage_error(${case})
  endforeach()
else()
  foreach(case "run;--tokens;abc;--tokens" "bench;--format;xml;--format" "verify;--frobnicate;--frobnicate"
               "run;--dtype;int8;--dtype" "run;--recipe;v9_fp8;--recipe" "bench;--recipe;v4_fp8,nope;--recipe"
               "run;--backend;gpu;--backend")
    expect_usage_error(${case})
  endforeach()
endif()
