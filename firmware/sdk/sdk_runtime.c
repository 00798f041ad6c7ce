/* deltachip C SDK runtime: what picolibc needs from the machine (docs/firmware.md,
 * "The C SDK"). Linked with crt0.S (entry, gp/sp, _exit = ecall a7 93) instead of
 * firmware/runtime/runtime.c when a program is built with picolibc.
 *
 * - stdin/stdout/stderr: one tinystdio FILE; a put stores the byte to the UART
 *   (0x1000_0000), a get loads the next byte of the run's input stream (0x1000_0004;
 *   0 = used up = EOF). Unbuffered, so nothing is lost when the program ends.
 * - sbrk: the heap for malloc, from the end of .bss (__heap_start) to the end of RAM
 *   (__heap_end); it never grows into the stack, which lies below .data at the bottom of
 *   RAM. Out of heap: sbrk returns (void *)-1 with errno ENOMEM, malloc returns NULL.
 * - raise(sig): no signal handlers; the program ends with exit code 128 + sig (abort(), and
 *   so a failed assert(), end with 134 = 128 + SIGABRT, as a shell reports them).
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "deltachip.h"

const char *input_text(void) { return __input_buffer; }

void print(const char *s) {
    while (*s) *DELTACHIP_UART = (unsigned char)*s++;
}

static int uart_put(char c, FILE *f) {
    (void)f;
    *DELTACHIP_UART = (unsigned char)c;
    return (unsigned char)c;
}

static int uart_get(FILE *f) {
    (void)f;
    int c = read_input_byte();
    return c ? c : EOF;
}

static FILE uart_stdio = FDEV_SETUP_STREAM(uart_put, uart_get, NULL, _FDEV_SETUP_RW);
FILE *const stdin = &uart_stdio;
FILE *const stdout = &uart_stdio;
FILE *const stderr = &uart_stdio;

int raise(int sig) {
    _exit(128 + sig);
}

static char *heap_top = __heap_start;

void *sbrk(ptrdiff_t incr) {
    char *old = heap_top;
    if (incr > __heap_end - heap_top || incr < __heap_start - heap_top) {
        errno = ENOMEM;
        return (void *)-1;
    }
    heap_top += incr;
    return old;
}
