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

/* Prints the digits of v in base 10 or 16 (at least `min_digits` of them) into a field of
 * `width` characters. */
static int print_number(unsigned long long v, unsigned base, int negative, int upper,
                        int width, int zero_pad, int left, int min_digits) {
    char buf[24];
    int n = 0;
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    if (base == 16) {
        do { buf[n++] = digits[v & 15]; v >>= 4; } while (v);
    } else if (v <= 0xffffffffu) {
        /* 32-bit path: no 64-bit division helper calls for ordinary ints. */
        unsigned w = (unsigned)v;
        do { buf[n++] = (char)('0' + w % 10); w /= 10; } while (w);
    } else {
        do { buf[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    }
    while (n < min_digits && n < (int)sizeof buf) buf[n++] = '0';
    int len = n + negative;
    int pad = width > len ? width - len : 0;
    int out = 0;
    if (!left && !zero_pad) for (; pad > 0; pad--, out++) putchar(' ');
    if (negative) { putchar('-'); out++; }
    if (!left && zero_pad) for (; pad > 0; pad--, out++) putchar('0');
    while (n > 0) { putchar(buf[--n]); out++; }
    for (; pad > 0; pad--, out++) putchar(' ');
    return out;
}

int vprintf(const char *fmt, va_list ap) {
    int out = 0;
    for (; *fmt; fmt++) {
        if (*fmt != '%') { putchar(*fmt); out++; continue; }
        fmt++;
        int left = 0, zero_pad = 0, width = 0, longs = 0;
        for (;; fmt++) {
            if (*fmt == '-') left = 1;
            else if (*fmt == '0') zero_pad = 1;
            else break;
        }
        if (*fmt == '*') {
            width = va_arg(ap, int);
            if (width < 0) { left = 1; width = -width; }
            fmt++;
        }
        while (*fmt >= '0' && *fmt <= '9') width = width * 10 + (*fmt++ - '0');
        int precision = -1;              /* %s: at most this many bytes; ints: min digits */
        if (*fmt == '.') {
            fmt++;
            precision = 0;
            if (*fmt == '*') { precision = va_arg(ap, int); fmt++; }
            else while (*fmt >= '0' && *fmt <= '9') precision = precision * 10 + (*fmt++ - '0');
        }
        while (*fmt == 'l') { longs++; fmt++; }
        if (left || precision >= 0) zero_pad = 0;
        int min_digits = precision > 0 ? precision : 1;
        switch (*fmt) {
        case 'd': case 'i': {
            long long v = longs >= 2 ? va_arg(ap, long long) : (long long)va_arg(ap, int);
            unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
            out += print_number(mag, 10, v < 0, 0, width, zero_pad, left, min_digits);
            break;
        }
        case 'u': case 'x': case 'X': {
            unsigned long long v = longs >= 2 ? va_arg(ap, unsigned long long)
                                              : (unsigned long long)va_arg(ap, unsigned);
            out += print_number(v, *fmt == 'u' ? 10 : 16, 0, *fmt == 'X', width, zero_pad, left,
                                min_digits);
            break;
        }
        case 'p':
            print("0x"); out += 2;
            out += print_number((uintptr_t)va_arg(ap, void *), 16, 0, 0, 8, 1, 0, 1);
            break;
        case 'c': {
            int pad = width > 1 ? width - 1 : 0;
            if (!left) for (; pad > 0; pad--, out++) putchar(' ');
            putchar(va_arg(ap, int)); out++;
            for (; pad > 0; pad--, out++) putchar(' ');
            break;
        }
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            int len = 0;
            while (s[len] && (precision < 0 || len < precision)) len++;
            int pad = width > len ? width - len : 0;
            if (!left) for (; pad > 0; pad--, out++) putchar(' ');
            for (int i = 0; i < len; i++) putchar(s[i]);
            out += len;
            for (; pad > 0; pad--, out++) putchar(' ');
            break;
        }
        case '%': putchar('%'); out++; break;
        case '\0': return out;   /* a lone '%' at the end */
        default:                 /* unknown conversion: print it as written */
            putchar('%'); putchar(*fmt); out += 2; break;
        }
    }
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
