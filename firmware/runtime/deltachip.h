/* deltachip firmware runtime: console output, exit, input buffer, memory helpers.
 *
 * Memory map, UART and exit convention: docs/firmware.md. All output goes to the UART
 * (a byte store to 0x10000000 prints that byte); exit(code) is an ecall with a7 = 93.
 */
#ifndef DELTACHIP_H
#define DELTACHIP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* UART data register: a byte stored here is printed. */
#define DELTACHIP_UART ((volatile unsigned char *)0x10000000u)

/* The input text: NUL-terminated, written by the runner before the start
 * (all zeros, i.e. the empty string, when no input was given). */
extern char __input_buffer[];
/* Its capacity in bytes, including the NUL (an absolute linker symbol: use its address). */
extern char __input_size[];
#define INPUT_CAPACITY ((size_t)(uintptr_t)__input_size)

/* The input text (a pointer to __input_buffer). */
const char *input_text(void);

/* UART input: a byte load from here reads the next byte of the run's input stream (the
 * --input text, or a tool call's text inside a merged model), 0 once it is used up. */
#define DELTACHIP_UART_RX ((volatile unsigned char *)0x10000004u)
/* The next input byte from the UART (0: the stream is used up). */
static inline int read_input_byte(void) { return *DELTACHIP_UART_RX; }

/* Text input (a tool call's text tokens inside a merged model; docs/cpu.md, "Text input"):
 * a byte load from UART_TNEXT moves to the next text token and reads its length in bytes
 * (at most 255; 0 once the text is used up); UART_TXT[j] (j < TEXT_BYTES) is byte j of the
 * current token (0 past its end). A token longer than TEXT_BYTES shows only its first
 * TEXT_BYTES bytes: a program must refuse it. */
#define DELTACHIP_UART_TNEXT ((volatile unsigned char *)0x10000008u)
#define DELTACHIP_UART_TXT ((volatile unsigned char *)0x10000020u)
#define DELTACHIP_TEXT_BYTES 32
/* The next text token's length (0: the text is used up). */
static inline int read_text_next(void) { return *DELTACHIP_UART_TNEXT; }
/* Byte j of the current text token. */
static inline int read_text_byte(int j) { return DELTACHIP_UART_TXT[j]; }

/* Zicntr counters (rdcycle, rdtime, rdinstret): on the golden emulator (--engine ref) each
 * reads the number of instructions retired before it (one instruction = one cycle = one
 * tick). The compiled core (sim, fast) does not implement them yet: there the read is an
 * illegal-instruction fault (docs/firmware.md, "The C SDK"). */
static inline uint32_t read_instret(void) {
    uint32_t v;
    __asm__ volatile("rdinstret %0" : "=r"(v));
    return v;
}
static inline uint32_t read_cycle(void) {
    uint32_t v;
    __asm__ volatile("rdcycle %0" : "=r"(v));
    return v;
}
static inline uint64_t read_instret64(void) {
    uint32_t hi, lo, hi2;
    do {
        __asm__ volatile("rdinstreth %0" : "=r"(hi));
        __asm__ volatile("rdinstret %0" : "=r"(lo));
        __asm__ volatile("rdinstreth %0" : "=r"(hi2));
    } while (hi != hi2);
    return ((uint64_t)hi << 32) | lo;
}

/* The stack's size in bytes (8 KiB unless set): DELTACHIP_STACK_SIZE(16384) at file scope in
 * one C source sets it for the program (a multiple of 16, at least 1024). The stack is at the
 * bottom of RAM and grows towards unmapped memory: an overflow faults (docs/firmware.md). */
#define DELTACHIP_STACK_SIZE(bytes) \
    __asm__(".globl __stack_size\n.set __stack_size, " #bytes)
extern char __stack_size[], __heap_start[], __heap_end[];

#ifdef DELTACHIP_SDK
/* Built with the C SDK (picolibc, firmware/sdk): the C library's own headers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* Prints s without a newline. */
void print(const char *s);
#else
int putchar(int c);
/* Prints s and a newline, like C's puts. Returns a non-negative number. */
int puts(const char *s);
/* Prints s without a newline. */
void print(const char *s);
/* printf subset: %d %i %u %x %X %s %c %p %%, with '-' (left align), '0' (zero pad), a
 * field width (digits or '*'), a precision ('.' digits or '.*': the most bytes of a %s, the
 * fewest digits of a number), and the 'l' and 'll' length modifiers (ll = 64-bit).
 * Returns the number of bytes written. */
int printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int vprintf(const char *fmt, va_list ap);

/* Ends the program with this exit code (ecall a7 = 93). */
__attribute__((noreturn)) void exit(int code);
__attribute__((noreturn)) void _exit(int code);

void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);
#endif /* DELTACHIP_SDK */

#endif
