# CTest script (with a timeout): files `indexer-q verify` must not hang on or give up for.
#  - a FIFO named *.safetensors, given by name and found in a directory: skipped with a note
#    (opening it would wait for a writer forever); the good file beside it still verifies;
#  - a file whose data section is larger than this machine's memory (sparse, made by
#    st_make_huge), and one whose header claims such a tensor but ends after the header: each is
#    reported by its name from the header and the file size alone (no data read, no
#    std::bad_alloc), and the other files still run. Exit status 3 (bad input).
# Inputs: -DIQ=<indexer-q> -DHUGE=<st_make_huge> -DGOOD=<good .safetensors> -DWORK=<scratch dir>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/dir)
execute_process(COMMAND mkfifo ${WORK}/fifo.safetensors ${WORK}/dir/fifo.safetensors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mkfifo failed (${rc})")
endif()
file(COPY ${GOOD} DESTINATION ${WORK}/dir)
execute_process(COMMAND ${IQ} verify --backend reference ${GOOD} ${WORK}/fifo.safetensors ${WORK}/dir
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "FIFOs: expected exit status 0 (skipped, the good files exact), got '${rc}'")
endif()
foreach(want
    "skipped, not a regular file: [^\n]*/fifo.safetensors \\(a FIFO\\)"
    "skipped, not a regular file: [^\n]*/dir/fifo.safetensors \\(a FIFO\\)"
    "summary: 2 file\\(s\\), 0 unreadable; [0-9]+ run\\(s\\): [0-9]+ exact, 0 differ, 0 failed -> PASS")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "FIFOs: output does not match '${want}'")
  endif()
endforeach()

execute_process(COMMAND ${HUGE} ${WORK}/huge.safetensors RESULT_VARIABLE rc OUTPUT_VARIABLE bytes)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "st_make_huge failed (${rc})")
endif()
string(STRIP "${bytes}" bytes)
execute_process(COMMAND ${HUGE} ${WORK}/short.safetensors --short RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "st_make_huge --short failed (${rc})")
endif()
execute_process(COMMAND ${IQ} verify --backend reference ${WORK}/huge.safetensors ${GOOD} ${WORK}/short.safetensors
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("${out}${err}")
file(REMOVE ${WORK}/huge.safetensors)
if(NOT rc EQUAL 3)
  message(FATAL_ERROR "huge files: expected exit status 3 (bad input), got '${rc}'")
endif()
foreach(want
    "huge.safetensors\n  UNREADABLE: [^\n]*huge.safetensors: the data section is ${bytes} bytes, more than this machine's memory"
    "short.safetensors\n  UNREADABLE: [^\n]*short.safetensors: truncated or bad offsets: tensor 'big'"
    "summary: 3 file\\(s\\), 2 unreadable; [0-9]+ run\\(s\\): [0-9]+ exact, 0 differ, 0 failed -> FAIL")
  if(NOT out MATCHES "${want}")
    message(FATAL_ERROR "huge files: output does not match '${want}'")
  endif()
endforeach()
if(err MATCHES "bad_alloc")
  message(FATAL_ERROR "huge files: std::bad_alloc on stderr")
endif()
