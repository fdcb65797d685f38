/* The MUFU.RSQ table of src/common/rsq_sm90.cpp, embedded at build time: 2^24 deltas of 2 bits
   (4 MiB) made by scripts/make_rsq_table.py from the golden table. CMake passes the directory of
   the .bin to the assembler (-Wa,-I). ELF targets (GNU as); the '%' type syntax is the one every
   ELF target of GNU as accepts. */
        .section .rodata
        .balign 64
        .globl  indexer_q_rsq_sm90_delta2
        .hidden indexer_q_rsq_sm90_delta2
        .type   indexer_q_rsq_sm90_delta2, %object
        .size   indexer_q_rsq_sm90_delta2, 4194304
indexer_q_rsq_sm90_delta2:
        .incbin "rsq_sm90_delta2.bin"
#if defined(__ELF__)
        .section .note.GNU-stack,"",%progbits
#endif
