/* Zicntr on the C SDK's runtime: rdinstret, rdcycle and the 64-bit read (rdinstreth) count
 * retired instructions on the golden emulator; a loop of known length moves the clock by
 * the number of instructions it retires. On the compiled core the first read faults. */
#include <stdio.h>
#include "deltachip.h"

int main(void) {
    uint32_t a = read_instret();
    uint32_t b = read_cycle();
    uint64_t c = read_instret64();
    uint32_t t0, t1;
    __asm__ volatile("rdtime %0" : "=r"(t0));
    __asm__ volatile(
        "li t0, 100\n"
        "1: addi t0, t0, -1\n"
        "bnez t0, 1b\n"
        "rdtime %0" : "=r"(t1) : : "t0");
    printf("first %u cycle-instret %u instret64-cycle %u loop %u\n", (unsigned)a,
           (unsigned)(b - a), (unsigned)((uint32_t)c - b), (unsigned)(t1 - t0));
    return 0;
}
