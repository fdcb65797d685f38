# CTest script: runs indexer-q with ARGS (a ;-list), requires exit status RC and stdout
# matching REGEX. Inputs: -DIQ=<indexer-q> -DARGS=<list> -DRC=<status> -DREGEX=<regex>
execute_process(COMMAND ${IQ} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL RC)
  message(FATAL_ERROR "expected exit status ${RC}, got '${rc}'")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'")
endif()
