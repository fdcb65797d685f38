# CTest script: `indexer-q verify` on a good conformance file plus malformed ones must report
# each malformed file, still verify the good one, and exit with status 3, bad input (not crash).
# Inputs: -DIQ=<indexer-q> -DGOOD=<good .safetensors> -DWORK=<scratch dir>
file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/text.safetensors "this is not a safetensors file, only text\n")
file(WRITE ${WORK}/empty.safetensors "")
execute_process(
  COMMAND ${IQ} verify ${GOOD} ${WORK}/text.safetensors ${WORK}/empty.safetensors ${WORK}/missing.safetensors
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 3)
  message(FATAL_ERROR "expected exit status 3 (bad input), got '${rc}'")
endif()
foreach(want
    "text.safetensors\n  UNREADABLE: [^\n]*header length"
    "empty.safetensors\n  UNREADABLE: [^\n]*truncated"
    "missing.safetensors\n  UNREADABLE: [^\n]*cannot open"
    "summary: 4 file\\(s\\), 3 unreadable; [0-9]+ run\\(s\\): [0-9]+ exact, 0 differ, 0 failed")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "output does not match '${want}'")
  endif()
endforeach()
