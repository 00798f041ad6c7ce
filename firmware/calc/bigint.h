/* Signed big integers in base 10^4 (four decimal digits per 16-bit limb, little-endian),
 * up to BIG_MAX_DIGITS decimal digits, with 32-bit arithmetic only (no 64-bit helpers).
 *
 * Every operation allows its result to alias its operands. A result that needs more than
 * BIG_MAX_LIMBS limbs calls big_fail(CALC_TOO_BIG, ...), which does not return; so does
 * division by zero (CALC_MATH). big_fail is provided by the program (calc.c). */
#ifndef CALC_BIGINT_H
#define CALC_BIGINT_H

#include <stdint.h>

#define BIG_BASE 10000u
#define BIG_LIMB_DIGITS 4
#define BIG_MAX_LIMBS 256
#define BIG_MAX_DIGITS (BIG_MAX_LIMBS * BIG_LIMB_DIGITS)   /* 1024 */

/* Exit codes of calc (docs/firmware.md). */
#define CALC_SYNTAX 1    /* the input is not an expression */
#define CALC_MATH 2      /* division by zero, non-integer exponent or gcd argument */
#define CALC_TOO_BIG 3   /* a number over BIG_MAX_DIGITS digits, or too deep nesting */
#define CALC_CALL 4      /* a tool call from the UART that is not one calc answers */

typedef struct {
    uint16_t len;                 /* limbs in use; 0 for zero; limb[len-1] != 0 */
    uint16_t neg;                 /* 1 if negative; never set for zero */
    uint16_t limb[BIG_MAX_LIMBS];
} big_t;

__attribute__((noreturn)) void big_fail(int code, const char *message);

void big_set_u32(big_t *r, uint32_t v);
void big_copy(big_t *r, const big_t *a);
int big_is_zero(const big_t *a);
/* True when |a| == 1. */
int big_is_unit(const big_t *a);
/* Compares |a| with |b|: -1, 0 or 1. */
int big_cmp_mag(const big_t *a, const big_t *b);
void big_neg(big_t *r, const big_t *a);
void big_add(big_t *r, const big_t *a, const big_t *b);
void big_sub(big_t *r, const big_t *a, const big_t *b);
void big_mul(big_t *r, const big_t *a, const big_t *b);
/* Floor division like Python's // and %: q = floor(a / b), m = a - b*q (sign of b).
 * Either output may be NULL. b == 0 fails with CALC_MATH. */
void big_divmod(big_t *q, big_t *m, const big_t *a, const big_t *b);
/* q = floor((a * b) / (c * d)), the products formed at double width: only q must fit
 * (a tiny fraction // 10**30 needs no 1024-digit intermediate). c * d == 0 fails with
 * CALC_MATH. */
void big_floordiv_prod(big_t *q, const big_t *a, const big_t *b, const big_t *c,
                       const big_t *d);
/* The remainder of a fraction division, reduced: with R = (na * y) mod (nb * x) (Python's %,
 * the sign of nb * x; both products formed at double width), h = gcd(R, db) and
 * num = R / h. (calc's a % b is num / (x * (db / h)) for x = da/g, y = db/g,
 * g = gcd(da, db): see frac_mod.) Fails with CALC_TOO_BIG only if num does not fit. */
void big_mod_reduced(big_t *num, big_t *h, const big_t *na, const big_t *y, const big_t *nb,
                     const big_t *x, const big_t *db);
/* The non-negative greatest common divisor; gcd(0, 0) = 0. */
void big_gcd(big_t *r, const big_t *a, const big_t *b);
/* r = a ** e for e >= 0 (e given as a non-negative big). */
void big_pow(big_t *r, const big_t *a, const big_t *e);
/* Parses `count` decimal digits at s (no sign). */
void big_from_digits(big_t *r, const char *s, int count);
/* Prints a in decimal (with '-' when negative) through putchar. */
void big_print(const big_t *a);

#endif
