# CTest script: runs indexer-q with ARGS (a ;-list), requires exit status RC and stdout
# matching every regex of REGEX (a ;-list; each matched on its own).
# Inputs: -DIQ=<indexer-q> -DARGS=<list> -DRC=<status> -DREGEX=<regex>[;<regex>...]
execute_process(COMMAND ${IQ} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL RC)
  message(FATAL_ERROR "expected exit status ${RC}, got '${rc}'")
endif()
foreach(re IN LISTS REGEX)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "output does not match '${re}'")
  endif()
endforeach()
