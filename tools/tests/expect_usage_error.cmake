# CTest script: a bad command line must exit with status 2 and name the option on stderr.
# Inputs: -DIQ=<indexer-q>
foreach(case "run;--tokens;abc;--tokens" "bench;--format;xml;--format" "verify;--frobnicate;--frobnicate"
             "run;--dtype;int8;--dtype" "run;--recipe;v9_fp8;--recipe" "bench;--recipe;v4_fp8,nope;--recipe"
             "run;--backend;gpu;--backend")
  list(POP_BACK case expect)
  execute_process(COMMAND ${IQ} ${case} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "indexer-q ${case}: expected exit status 2, got '${rc}' (${err})")
  endif()
  string(FIND "${err}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "indexer-q ${case}: stderr does not name ${expect}: ${err}")
  endif()
endforeach()
