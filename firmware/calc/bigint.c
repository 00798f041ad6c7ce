/* Big integers in base 10^4: see bigint.h. Magnitude routines work on limb arrays and
 * write into static scratch buffers, then copy the result out (so results may alias
 * operands); none of them calls another routine while its scratch buffer is live. */
#include "bigint.h"
#include "deltachip.h"

/* Scratch: two double-width products, Knuth division's working copies (double width, for
 * big_floordiv_prod), quotient. */
static uint16_t wide[2 * BIG_MAX_LIMBS + 2];
static uint16_t wide2[2 * BIG_MAX_LIMBS + 2];
static uint16_t un[2 * BIG_MAX_LIMBS + 2];
static uint16_t vn[2 * BIG_MAX_LIMBS + 1];
static uint16_t quot[2 * BIG_MAX_LIMBS + 2];

static void fail_too_big(void) {
    big_fail(CALC_TOO_BIG, "number too big (over 1024 digits)");
}

/* Stores the magnitude x[0..n) (leading zeros allowed) with sign `neg` into r. */
static void store(big_t *r, const uint16_t *x, int n, int neg) {
    while (n > 0 && x[n - 1] == 0) n--;
    if (n > BIG_MAX_LIMBS) fail_too_big();
    for (int i = 0; i < n; i++) r->limb[i] = x[i];
    r->len = (uint16_t)n;
    r->neg = (uint16_t)(n ? neg : 0);
}

void big_set_u32(big_t *r, uint32_t v) {
    int n = 0;
    while (v) { r->limb[n++] = (uint16_t)(v % BIG_BASE); v /= BIG_BASE; }
    r->len = (uint16_t)n;
    r->neg = 0;
}

void big_copy(big_t *r, const big_t *a) {
    if (r == a) return;
    for (int i = 0; i < a->len; i++) r->limb[i] = a->limb[i];
    r->len = a->len;
    r->neg = a->neg;
}

int big_is_zero(const big_t *a) { return a->len == 0; }

int big_is_unit(const big_t *a) { return a->len == 1 && a->limb[0] == 1; }

static int cmp_mag(const uint16_t *a, int na, const uint16_t *b, int nb) {
    if (na != nb) return na < nb ? -1 : 1;
    for (int i = na - 1; i >= 0; i--)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

int big_cmp_mag(const big_t *a, const big_t *b) {
    return cmp_mag(a->limb, a->len, b->limb, b->len);
}

void big_neg(big_t *r, const big_t *a) {
    big_copy(r, a);
    r->neg = (uint16_t)(r->len ? !a->neg : 0);
}

/* r = a + (negate_b ? -b : b). */
static void add_signed(big_t *r, const big_t *a, const big_t *b, int negate_b) {
    int bneg = b->neg ^ (negate_b && b->len);
    const big_t *x = a, *y = b;
    int xneg = a->neg, yneg = bneg;
    if (xneg == yneg) {
        int n = x->len > y->len ? x->len : y->len;
        uint32_t carry = 0;
        for (int i = 0; i < n; i++) {
            uint32_t s = carry + (i < x->len ? x->limb[i] : 0) + (i < y->len ? y->limb[i] : 0);
            carry = s >= BIG_BASE;
            wide[i] = (uint16_t)(carry ? s - BIG_BASE : s);
        }
        wide[n] = (uint16_t)carry;
        store(r, wide, n + 1, xneg);
        return;
    }
    /* Signs differ: subtract the smaller magnitude from the larger. */
    if (cmp_mag(x->limb, x->len, y->limb, y->len) < 0) {
        const big_t *t = x; x = y; y = t;
        int tn = xneg; xneg = yneg; yneg = tn;
    }
    int32_t borrow = 0;
    for (int i = 0; i < x->len; i++) {
        int32_t d = (int32_t)x->limb[i] - (i < y->len ? y->limb[i] : 0) - borrow;
        borrow = d < 0;
        wide[i] = (uint16_t)(borrow ? d + (int32_t)BIG_BASE : d);
    }
    store(r, wide, x->len, xneg);
}

void big_add(big_t *r, const big_t *a, const big_t *b) { add_signed(r, a, b, 0); }

void big_sub(big_t *r, const big_t *a, const big_t *b) { add_signed(r, a, b, 1); }

/* out[0..na+nb) = |a| * |b| (out has room for 2 * BIG_MAX_LIMBS limbs); returns its length
 * without leading zeros. */
static int mul_mag(uint16_t *out, const big_t *a, const big_t *b) {
    int na = a->len, nb = b->len;
    if (na == 0 || nb == 0) return 0;
    for (int i = 0; i < na + nb; i++) out[i] = 0;
    for (int i = 0; i < na; i++) {
        uint32_t ai = a->limb[i], carry = 0;
        if (ai == 0) continue;
        uint16_t *w = out + i;
        for (int j = 0; j < nb; j++) {
            uint32_t t = ai * b->limb[j] + w[j] + carry;   /* < 10^8 */
            carry = t / BIG_BASE;
            w[j] = (uint16_t)(t - carry * BIG_BASE);
        }
        w[nb] = (uint16_t)carry;
    }
    int n = na + nb;
    while (n > 0 && out[n - 1] == 0) n--;
    return n;
}

void big_mul(big_t *r, const big_t *a, const big_t *b) {
    if (a->len + b->len - 1 > BIG_MAX_LIMBS) fail_too_big();   /* >= na+nb-1 limbs */
    int n = mul_mag(wide, a, b);
    store(r, wide, n, a->neg ^ b->neg);
}

/* Magnitude division: quot[0..na-nb] = a / b, un[0..nb) = a % b for limb arrays a[0..na),
 * b[0..nb) (nb >= 1, a >= b, na <= 2 * BIG_MAX_LIMBS).
 * Knuth's algorithm D (TAOCP vol. 2, 4.3.1) in base 10^4; all products fit in 32 bits. */
static void divmod_mag(const uint16_t *al, int na, const uint16_t *bl, int nb) {
    if (nb == 1) {
        uint32_t d = bl[0], rem = 0;
        for (int i = na - 1; i >= 0; i--) {
            uint32_t cur = rem * BIG_BASE + al[i];
            quot[i] = (uint16_t)(cur / d);
            rem = cur - quot[i] * d;
        }
        un[0] = (uint16_t)rem;
        return;
    }
    /* Normalise so that the divisor's top limb is >= BASE/2. */
    uint32_t f = BIG_BASE / ((uint32_t)bl[nb - 1] + 1), carry = 0;
    for (int i = 0; i < na; i++) {
        uint32_t t = al[i] * f + carry;
        carry = t / BIG_BASE;
        un[i] = (uint16_t)(t - carry * BIG_BASE);
    }
    un[na] = (uint16_t)carry;
    carry = 0;
    for (int i = 0; i < nb; i++) {
        uint32_t t = bl[i] * f + carry;
        carry = t / BIG_BASE;
        vn[i] = (uint16_t)(t - carry * BIG_BASE);
    }
    uint32_t vtop = vn[nb - 1], vnext = vn[nb - 2];
    for (int j = na - nb; j >= 0; j--) {
        uint32_t num = un[j + nb] * BIG_BASE + un[j + nb - 1];
        uint32_t qhat = num / vtop, rhat = num - qhat * vtop;
        while (qhat >= BIG_BASE || qhat * vnext > rhat * BIG_BASE + un[j + nb - 2]) {
            qhat--;
            rhat += vtop;
            if (rhat >= BIG_BASE) break;
        }
        /* un[j..j+nb] -= qhat * vn */
        uint32_t mcarry = 0;
        int32_t borrow = 0;
        for (int i = 0; i < nb; i++) {
            uint32_t p = qhat * vn[i] + mcarry;
            mcarry = p / BIG_BASE;
            int32_t t = (int32_t)un[i + j] - (int32_t)(p - mcarry * BIG_BASE) - borrow;
            borrow = t < 0;
            un[i + j] = (uint16_t)(borrow ? t + (int32_t)BIG_BASE : t);
        }
        int32_t top = (int32_t)un[j + nb] - (int32_t)mcarry - borrow;
        if (top < 0) {
            /* qhat was one too large: add the divisor back. */
            qhat--;
            uint32_t c = 0;
            for (int i = 0; i < nb; i++) {
                uint32_t s = un[i + j] + vn[i] + c;
                c = s >= BIG_BASE;
                un[i + j] = (uint16_t)(c ? s - BIG_BASE : s);
            }
            top += (int32_t)c;
        }
        un[j + nb] = (uint16_t)top;
        quot[j] = (uint16_t)qhat;
    }
    /* Un-normalise the remainder. */
    uint32_t rem = 0;
    for (int i = nb - 1; i >= 0; i--) {
        uint32_t cur = rem * BIG_BASE + un[i];
        un[i] = (uint16_t)(cur / f);
        rem = cur - un[i] * f;
    }
}

/* quot[0..qn) += 1; returns the new length (qn + 1, the top limb possibly 0). */
static int quot_increment(int qn) {
    uint32_t c = 1;
    for (int i = 0; i < qn && c; i++) {
        uint32_t s = quot[i] + c;
        c = s >= BIG_BASE;
        quot[i] = (uint16_t)(c ? s - BIG_BASE : s);
    }
    quot[qn] = (uint16_t)c;
    return qn + 1;
}

void big_divmod(big_t *q, big_t *m, const big_t *a, const big_t *b) {
    if (b->len == 0) big_fail(CALC_MATH, "division by zero");
    int qneg = a->neg ^ b->neg, aneg = a->neg, bneg = b->neg;
    int na = a->len, nb = b->len;
    if (cmp_mag(a->limb, na, b->limb, nb) < 0) {
        /* |a| < |b|: truncated quotient 0, remainder a. */
        if (na == 0 || !qneg) {
            if (m) big_copy(m, a);
            if (q) { q->len = 0; q->neg = 0; }
        } else {
            /* Floor: q = -1, m = a + b (takes b's sign). */
            if (m) add_signed(m, a, b, 0);
            if (q) { big_set_u32(q, 1); q->neg = 1; }
        }
        return;
    }
    divmod_mag(a->limb, na, b->limb, nb);
    int qn = na - nb + 1;
    int rn = nb;
    while (rn > 0 && un[rn - 1] == 0) rn--;
    if (qneg && rn > 0) {
        /* Floor adjustment: q = -(|q| + 1), m = |b| - |m| with b's sign. */
        qn = quot_increment(qn);
        int32_t borrow = 0;
        for (int i = 0; i < nb; i++) {
            int32_t d = (int32_t)b->limb[i] - (i < rn ? un[i] : 0) - borrow;
            borrow = d < 0;
            un[i] = (uint16_t)(borrow ? d + (int32_t)BIG_BASE : d);
        }
        rn = nb;
    }
    (void)aneg;
    /* m before q: store() of q must not clobber un (it does not: separate buffers). */
    if (m) store(m, un, rn, bneg);
    if (q) store(q, quot, qn, qneg);
}

void big_floordiv_prod(big_t *q, const big_t *a, const big_t *b, const big_t *c,
                       const big_t *d) {
    if (c->len == 0 || d->len == 0) big_fail(CALC_MATH, "division by zero");
    int neg = a->neg ^ b->neg ^ c->neg ^ d->neg;
    int nx = mul_mag(wide, a, b), ny = mul_mag(wide2, c, d);
    if (cmp_mag(wide, nx, wide2, ny) < 0) {
        /* |x| < |y|: 0, or -1 when the signs differ and x != 0 */
        if (neg && nx) { big_set_u32(q, 1); q->neg = 1; }
        else { q->len = 0; q->neg = 0; }
        return;
    }
    if (nx - ny > BIG_MAX_LIMBS) fail_too_big();      /* the quotient has >= nx-ny limbs */
    divmod_mag(wide, nx, wide2, ny);
    int qn = nx - ny + 1, rest = 0;
    for (int i = 0; i < ny; i++) rest |= un[i];
    if (neg && rest) qn = quot_increment(qn);     /* floor: |q| + 1 */
    store(q, quot, qn, neg);
}

void big_mod_reduced(big_t *num, big_t *h, const big_t *na, const big_t *y, const big_t *nb,
                     const big_t *x, const big_t *db) {
    if (nb->len == 0 || x->len == 0) big_fail(CALC_MATH, "division by zero");
    int nA = mul_mag(wide, na, y), nB = mul_mag(wide2, nb, x);
    int aneg = na->neg ^ y->neg, bneg = nb->neg ^ x->neg, rn;
    if (cmp_mag(wide, nA, wide2, nB) >= 0) {
        divmod_mag(wide, nA, wide2, nB);
        for (int i = 0; i < nB; i++) wide[i] = un[i];
        rn = nB;
    } else {
        rn = nA;
    }
    while (rn > 0 && wide[rn - 1] == 0) rn--;
    if (rn && aneg != bneg) {       /* floor: R = |B| - |R|, with B's sign */
        int32_t borrow = 0;
        for (int i = 0; i < nB; i++) {
            int32_t d = (int32_t)wide2[i] - (i < rn ? wide[i] : 0) - borrow;
            borrow = d < 0;
            wide[i] = (uint16_t)(borrow ? d + (int32_t)BIG_BASE : d);
        }
        rn = nB;
        while (rn > 0 && wide[rn - 1] == 0) rn--;
    }
    if (rn == 0) { num->len = 0; num->neg = 0; big_set_u32(h, 1); return; }
    for (int i = 0; i < rn; i++) wide2[i] = wide[i];      /* R, safe from big_gcd below */
    /* h = gcd(R, db) = gcd(R mod db, db) */
    if (cmp_mag(wide2, rn, db->limb, db->len) >= 0) {
        divmod_mag(wide2, rn, db->limb, db->len);
        store(h, un, db->len, 0);
    } else {
        store(h, wide2, rn, 0);
    }
    big_gcd(h, h, db);
    /* num = R / h (exact) */
    if (h->len == 1 && h->limb[0] == 1) {
        store(num, wide2, rn, bneg);
        return;
    }
    divmod_mag(wide2, rn, h->limb, h->len);
    store(num, quot, rn - h->len + 1, bneg);
}

static big_t gcd_x, gcd_y;

void big_gcd(big_t *r, const big_t *a, const big_t *b) {
    big_copy(&gcd_x, a);
    big_copy(&gcd_y, b);
    gcd_x.neg = 0;
    gcd_y.neg = 0;
    big_t *x = &gcd_x, *y = &gcd_y;
    while (y->len) {
        big_divmod(0, x, x, y);      /* x = x mod y */
        big_t *t = x; x = y; y = t;
    }
    big_copy(r, x);
}

static big_t pow_base, pow_acc;

void big_pow(big_t *r, const big_t *a, const big_t *e) {
    int odd = e->len && (e->limb[0] & 1);
    if (e->len == 0) { big_set_u32(r, 1); return; }
    if (a->len == 0) { r->len = 0; r->neg = 0; return; }
    if (big_is_unit(a)) { big_set_u32(r, 1); r->neg = (uint16_t)(a->neg && odd); return; }
    /* |a| >= 2: 2^3402 already has 1025 digits, so a larger exponent is too big. */
    if (e->len > 1) fail_too_big();
    uint32_t n = e->limb[0];
    if (n > 3402) fail_too_big();
    big_copy(&pow_base, a);
    big_set_u32(&pow_acc, 1);
    while (n) {
        if (n & 1) big_mul(&pow_acc, &pow_acc, &pow_base);
        n >>= 1;
        if (n) big_mul(&pow_base, &pow_base, &pow_base);
    }
    big_copy(r, &pow_acc);
}

void big_from_digits(big_t *r, const char *s, int count) {
    while (count > 0 && *s == '0') { s++; count--; }
    if (count > BIG_MAX_DIGITS) fail_too_big();
    int n = 0;
    for (int end = count; end > 0; end -= BIG_LIMB_DIGITS) {
        int start = end > BIG_LIMB_DIGITS ? end - BIG_LIMB_DIGITS : 0;
        uint32_t v = 0;
        for (int i = start; i < end; i++) v = v * 10 + (uint32_t)(s[i] - '0');
        r->limb[n++] = (uint16_t)v;
    }
    r->len = (uint16_t)n;
    r->neg = 0;
}

void big_print(const big_t *a) {
    if (a->len == 0) { putchar('0'); return; }
    if (a->neg) putchar('-');
    char digits[BIG_LIMB_DIGITS + 1];
    for (int i = a->len - 1; i >= 0; i--) {
        uint32_t v = a->limb[i];
        int n = 0;
        for (int k = 0; k < BIG_LIMB_DIGITS; k++) { digits[n++] = (char)('0' + v % 10); v /= 10; }
        if (i == a->len - 1) while (n > 1 && digits[n - 1] == '0') n--;   /* no leading zeros */
        while (n > 0) putchar(digits[--n]);
    }
}
