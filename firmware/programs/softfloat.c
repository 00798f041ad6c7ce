/* Floating point without an F or D extension: every float and double operation below is a
 * call into the compiler's soft-float library (__adddf3, __divsf3, __fixunsdfsi, ...). Prints
 * five results, each as a scaled integer and its IEEE 754 bits in hex: sqrt(2) by 6 Newton
 * steps (double), e by the series sum 1/k! for k <= 17 (double), pi by 300 terms of the
 * Leibniz series (float), sum 1/k^2 for k <= 100 (double), and the real root of
 * x^3 - 2x - 5 by Newton's method until the step is below 1e-15 (double). */
#include "deltachip.h"

/* Read through volatile so that the compiler cannot evaluate the loops at compile time. */
static volatile double two = 2.0, one = 1.0;
static volatile float onef = 1.0f;

static uint32_t float_bits(float x) { uint32_t b; memcpy(&b, &x, 4); return b; }

static void print_double(const char *name, int32_t scaled, double x) {
    uint64_t b;
    memcpy(&b, &x, 8);
    printf("%s %d %08x%08x\n", name, scaled, (uint32_t)(b >> 32), (uint32_t)b);
}

int main(void) {
    double a = two, x = one;
    for (int i = 0; i < 6; i++) x = (x + a / x) / 2.0;
    print_double("sqrt2", (int32_t)(x * 1e9), x);

    double e = one, fact = one;
    for (int k = 1; k <= 17; k++) {
        fact *= k;
        e += 1.0 / fact;
    }
    uint64_t eb;
    memcpy(&eb, &e, 8);
    printf("e %u %08x%08x\n", (uint32_t)(e * 1e9), (uint32_t)(eb >> 32), (uint32_t)eb);

    float sum = 0.0f, sign = onef;
    for (int k = 0; k < 300; k++) {
        sum += sign / (float)(2 * k + 1);
        sign = -sign;
    }
    float pi = 4.0f * sum;
    printf("pi %d %08x\n", (int32_t)(pi * 1e6f), float_bits(pi));

    double basel = 0.0;
    for (int k = 1; k <= 100; k++) basel += one / ((double)k * (double)k);
    print_double("basel", (int32_t)(basel * 1e9), basel);

    double r = two, step;
    int steps = 0;
    do {
        step = (r * r * r - 2.0 * r - 5.0) / (3.0 * r * r - 2.0);
        r -= step;
        steps++;
    } while ((step < 0 ? -step : step) > 1e-15 && steps < 50);
    print_double("root", (int32_t)(r * 1e9), r);
    printf("steps %d\n", steps);
    return 0;
}
