/* deltachip firmware runtime: UART output, printf subset, exit, memory and string helpers.
 * See deltachip.h for the interface and docs/firmware.md for the machine conventions. */
#include "deltachip.h"

const char *input_text(void) { return __input_buffer; }

int putchar(int c) {
    *DELTACHIP_UART = (unsigned char)c;
    return (unsigned char)c;
}

void print(const char *s) {
    while (*s) putchar(*s++);
}

int puts(const char *s) {
    print(s);
    putchar('\n');
    return 1;
}

void exit(int code) { _exit(code); }

/* "00" "01" ... "99": a decimal number is cut into two-digit pieces, one division each. */
static const char DIGIT_PAIRS[200] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Writes the decimal digits of w backwards, the last one just before `end`; returns where
 * the first one is. */
static inline char *format_decimal(unsigned w, char *end) {
    for (; w >= 100; w /= 100) {
        const char *pair = DIGIT_PAIRS + 2 * (w % 100);
        end -= 2;
        end[0] = pair[0];
        end[1] = pair[1];
    }
    if (w < 10) {
        *--end = (char)('0' + w);
    } else {
        end -= 2;
        end[0] = DIGIT_PAIRS[2 * w];
        end[1] = DIGIT_PAIRS[2 * w + 1];
    }
    return end;
}

/* Writes the digits of v in base 10 or 16 backwards, the last one just before `end`;
 * returns where the first one is. */
static char *format_digits(unsigned long long v, unsigned base, int upper, char *end) {
    if (base == 16) {
        const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
        for (; v > 0xffffffffu; v >>= 4) *--end = digits[v & 15];
        unsigned w = (unsigned)v;
        do { *--end = digits[w & 15]; w >>= 4; } while (w);
        return end;
    }
    /* past 32 bits, one digit per (helper-call) division; the rest without them */
    for (; v > 0xffffffffu; v /= 10) *--end = (char)('0' + v % 10);
    return format_decimal((unsigned)v, end);
}

/* %d or %u with no flags, width or precision (the common case, kept short): prints '-'
 * when `negative`, then the digits of w. It keeps w's two-digit pieces as small numbers
 * rather than going through format_decimal's buffer: the core then carries no stack
 * addresses in the loop (measured on fibonacci: 5,683 instructions against 6,484). */
static int __attribute__((noinline)) print_decimal(unsigned w, int negative) {
    unsigned char pairs[5];          /* w's two-digit pieces past the first, last first */
    unsigned char *p = pairs;
    for (; w >= 100; w /= 100) *p++ = (unsigned char)(w % 100);
    if (negative) putchar('-');
    if (w >= 10) putchar(DIGIT_PAIRS[2 * w]);
    putchar(DIGIT_PAIRS[2 * w + 1]);
    int bytes = negative + (w >= 10) + 1 + 2 * (int)(p - pairs);
    while (p != pairs) {
        const char *pair = DIGIT_PAIRS + 2 * *--p;
        putchar(pair[0]);
        putchar(pair[1]);
    }
    return bytes;
}

static int put_run(char c, int n) {
    for (int i = 0; i < n; i++) putchar(c);
    return n > 0 ? n : 0;
}

/* Prints the digits of v in base 10 or 16 (at least `min_digits` of them) into a field of
 * `width` characters. */
static int print_number(unsigned long long v, unsigned base, int negative, int upper,
                        int width, int zero_pad, int left, int min_digits) {
    char buf[24];
    char *end = buf + sizeof buf;
    char *first = format_digits(v, base, upper, end);
    while (first > buf && end - first < min_digits) *--first = '0';
    int len = (int)(end - first) + negative;
    int pad = width > len ? width - len : 0;
    int out = len;
    if (!left && !zero_pad) out += put_run(' ', pad);
    if (negative) putchar('-');
    if (!left && zero_pad) out += put_run('0', pad);
    for (const char *p = first; p < end; p++) putchar(*p);
    if (left) out += put_run(' ', pad);
    return out;
}

/* Prints conversion `conv` of the next argument with the flags given; returns the bytes
 * printed. */
static int print_value(char conv, va_list *ap, int left, int zero_pad, int width,
                       int precision, int longs) {
    int min_digits = precision > 0 ? precision : 1;
    switch (conv) {
    case 'd': case 'i': {
        long long v = longs >= 2 ? va_arg(*ap, long long) : (long long)va_arg(*ap, int);
        unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
        return print_number(mag, 10, v < 0, 0, width, zero_pad, left, min_digits);
    }
    case 'u': case 'x': case 'X': {
        unsigned long long v = longs >= 2 ? va_arg(*ap, unsigned long long)
                                          : (unsigned long long)va_arg(*ap, unsigned);
        return print_number(v, conv == 'u' ? 10 : 16, 0, conv == 'X', width, zero_pad, left,
                            min_digits);
    }
    case 'p':
        print("0x");
        return 2 + print_number((uintptr_t)va_arg(*ap, void *), 16, 0, 0, 8, 1, 0, 1);
    case 'c': {
        int pad = width > 1 ? width - 1 : 0;
        int out = 1;
        if (!left) out += put_run(' ', pad);
        putchar(va_arg(*ap, int));
        if (left) out += put_run(' ', pad);
        return out;
    }
    case 's': {
        const char *s = va_arg(*ap, const char *);
        if (!s) s = "(null)";
        int len = 0;
        while (s[len] && (precision < 0 || len < precision)) len++;
        int pad = width > len ? width - len : 0;
        int out = len;
        if (!left) out += put_run(' ', pad);
        for (int i = 0; i < len; i++) putchar(s[i]);
        if (left) out += put_run(' ', pad);
        return out;
    }
    case '%': putchar('%'); return 1;
    case '\0': return 0;     /* a lone '%' at the end */
    default:                 /* unknown conversion: print it as written */
        putchar('%'); putchar(conv); return 2;
    }
}

/* What print_conversion did: where the format goes on, and the bytes printed. */
struct printed { const char *fmt; int bytes; };

/* One conversion, `fmt` just past its '%': prints it and returns where the format goes on
 * (just past the conversion, or at the terminating NUL for a lone '%' at the end). */
static struct printed __attribute__((noinline)) print_conversion(const char *fmt,
                                                                 va_list *ap) {
    int left = 0, zero_pad = 0, width = 0, longs = 0;
    int precision = -1;              /* %s: at most this many bytes; ints: min digits */
    /* a conversion letter right after the '%' (no flags, width, precision or 'l'): the
     * defaults above hold */
    if ((unsigned)(*fmt - 'a') >= 26u || *fmt == 'l') {
        for (;; fmt++) {
            if (*fmt == '-') left = 1;
            else if (*fmt == '0') zero_pad = 1;
            else break;
        }
        if (*fmt == '*') {
            width = va_arg(*ap, int);
            if (width < 0) { left = 1; width = -width; }
            fmt++;
        }
        while (*fmt >= '0' && *fmt <= '9') width = width * 10 + (*fmt++ - '0');
        if (*fmt == '.') {
            fmt++;
            precision = 0;
            if (*fmt == '*') { precision = va_arg(*ap, int); fmt++; }
            else while (*fmt >= '0' && *fmt <= '9') precision = precision * 10 + (*fmt++ - '0');
        }
        while (*fmt == 'l') { longs++; fmt++; }
        if (left || precision >= 0) zero_pad = 0;
    }
    char conv = *fmt;
    struct printed done = {conv ? fmt + 1 : fmt, 0};
    done.bytes = print_value(conv, ap, left, zero_pad, width, precision, longs);
    return done;
}

int vprintf(const char *fmt, va_list ap) {
    va_list args;
    va_copy(args, ap);
    int out = 0;
    for (char c; (c = *fmt++) != '\0';) {
        if (c == '%') {
            char k = *fmt;
            if (k == 'u' || k == 'd') {
                unsigned w = va_arg(args, unsigned);
                int negative = k != 'u' && (int)w < 0;
                out += print_decimal(negative ? 0u - w : w, negative);
                fmt++;
                continue;
            }
            struct printed done = print_conversion(fmt, &args);
            fmt = done.fmt;
            out += done.bytes;
        } else {
            putchar(c);
            out++;
        }
    }
    va_end(args);
    return out;
}

int printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vprintf(fmt, ap);
    va_end(ap);
    return n;
}

/* The compiler may emit calls to these for struct copies and zeroing loops. */
void *memcpy(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if ((((uintptr_t)d | (uintptr_t)s | n) & 3) == 0) {
        uint32_t *dw = dst;
        const uint32_t *sw = src;
        for (size_t i = 0; i < n / 4; i++) dw[i] = sw[i];
        return dst;
    }
    while (n--) *d++ = *s++;
    return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d < s) while (n--) *d++ = *s++;
    else if (d > s) while (n--) d[n] = s[n];
    return dst;
}

void *memset(void *dst, int c, size_t n) {
    unsigned char *d = dst;
    if ((((uintptr_t)d | n) & 3) == 0) {
        uint32_t w = (unsigned char)c * 0x01010101u;
        uint32_t *dw = dst;
        for (size_t i = 0; i < n / 4; i++) dw[i] = w;
        return dst;
    }
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return x[i] - y[i];
    return 0;
}

size_t strlen(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

int strcmp(const char *a, const char *b) {
    while (*a && *a == *b) { a++; b++; }
    return (unsigned char)*a - (unsigned char)*b;
}
