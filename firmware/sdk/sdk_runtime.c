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
 * - POSIX I/O for fdopen/fopen: write(1 or 2) prints, read(0) reads the input stream,
 *   open() fails with ENOENT (no files), close/lseek fail with EBADF/ESPIPE.
 * - raise(sig): no signal handlers; the program ends with exit code 128 + sig (abort(), and
 *   so a failed assert(), end with 134 = 128 + SIGABRT, as a shell reports them).
 */
#include <errno.h>
#include <fcntl.h>
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

ssize_t write(int fd, const void *buf, size_t n) {
    if (fd != 1 && fd != 2) { errno = EBADF; return -1; }
    const unsigned char *p = buf;
    for (size_t i = 0; i < n; i++) *DELTACHIP_UART = p[i];
    return (ssize_t)n;
}

ssize_t read(int fd, void *buf, size_t n) {
    if (fd != 0) { errno = EBADF; return -1; }
    unsigned char *p = buf;
    size_t i = 0;
    for (int c; i < n && (c = read_input_byte()) != 0; i++) p[i] = (unsigned char)c;
    return (ssize_t)i;
}

int open(const char *path, int flags, ...) {
    (void)path; (void)flags;
    errno = ENOENT;
    return -1;
}

int close(int fd) {
    (void)fd;
    errno = EBADF;
    return -1;
}

off_t lseek(int fd, off_t offset, int whence) {
    (void)fd; (void)offset; (void)whence;
    errno = ESPIPE;
    return -1;
}

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
