/* A recursion that never ends: each call keeps a 64-byte frame. The stack is at the bottom
 * of RAM and grows towards unmapped memory, so the overflow stops the machine with a fault
 * (a store below 0x00080000) before anything in .data or .bss is touched. */
#include <stdio.h>

static volatile int sink;
int guard = 12345;                     /* .data: must still be intact when it faults */

static int deep(int n) {
    volatile char frame[48];
    frame[n % 48] = (char)n;
    sink = frame[(n * 7) % 48];
    return deep(n + 1) + frame[0];
}

int main(void) {
    printf("guard %d, recursing\n", guard);
    return deep(0);
}
