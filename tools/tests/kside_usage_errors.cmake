# CTest script: key-side command lines that must exit with status 2 and name the option on stderr.
# Inputs: -DIQ=<indexer-q>
foreach(case "bench;--recipe;v4_k_fp8,v4_fp8;--recipe" "run;--recipe;v4_k_fp4;--page-size;48;--page-size"
             "run;--recipe;v4_k_fp8;--heads;8;--heads")
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
