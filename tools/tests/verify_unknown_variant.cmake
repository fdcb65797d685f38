# CTest script: a conformance file whose metadata "variant" is not a recipe of the library must
# be reported as such (naming the variant and the library's recipes), the good file beside it
# still verified, and the exit status be 3 (bad input).
# Inputs: -DIQ=<indexer-q> -DEDIT=<st_set_metadata> -DGOOD=<good .safetensors> -DWORK=<scratch dir>
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${EDIT} ${GOOD} ${WORK}/unknown_variant.safetensors variant v5_fp3 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "st_set_metadata failed (${rc})")
endif()
execute_process(COMMAND ${IQ} verify ${GOOD} ${WORK}/unknown_variant.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 3)
  message(FATAL_ERROR "expected exit status 3 (bad input), got '${rc}'")
endif()
foreach(want
    "unknown_variant.safetensors\n  UNKNOWN VARIANT: metadata \"variant\" = \"v5_fp3\" is not a recipe of this library \\(query-side recipes: v4_fp8\\|[^\n]*; key-side recipes: v4_k_fp8\\|v4_k_fp4\\)"
    "summary: 2 file\\(s\\), 1 unreadable \\(1 of an unknown variant\\); [1-9][0-9]* run\\(s\\): [1-9][0-9]* exact, 0 differ, 0 failed -> FAIL")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "output does not match '${want}'")
  endif()
endforeach()
