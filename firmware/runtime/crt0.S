/* deltachip crt0: the first instructions at address 0.
 *
 * Sets gp (for linker relaxation of small data) and sp (top of RAM), calls
 * main(), and ends the program with main's return value as the exit code
 * (ecall with a7 = 93). .data needs no copy (the loader writes it straight
 * into RAM) and .bss needs no zeroing (the loader zeroes it: it is the
 * p_memsz > p_filesz tail of the RAM segment), so the start costs 5-6
 * instructions.
 */
    .section .text.init, "ax", @progbits
    .globl _start
    .type _start, @function
_start:
    .option push
    .option norelax
    la      gp, __global_pointer$
    .option pop
    la      sp, __stack_top
    call    main
#ifdef DELTACHIP_SDK
    /* the C SDK (picolibc): exit() runs the atexit handlers, then _exit */
    call    exit
#endif
    /* fall through to _exit with a0 = main's return value */
    .size _start, . - _start

    .globl _exit
    .type _exit, @function
_exit:
    li      a7, 93
    ecall
1:  j       1b          /* not reached: the machine stops at the ecall */
    .size _exit, . - _exit
