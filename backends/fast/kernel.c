/* The fast engine's step kernel: one token of a compiled chip's Qwen3.5 decoder, sparse.
 *
 * It executes the checkpoint's own weights (CSC over the inputs of every projection) and
 * rounds where transformers' Qwen3.5 modules round (docs/backend.md, "The fast engine"):
 * every Linear output and every silu on a bf16 tensor to the model dtype, the GDN
 * recurrence and the gated norm's statistics in fp32. What it relies on was verified when
 * the model was loaded (backends/fast/model.py): pre-norms that are exact power-of-two
 * scales, one conv tap per channel of weight 1, no decay, row-store keys. What can only be
 * seen at run time is checked on every token, and a failed check stops the stream with an
 * error code (DC_E_*) instead of running on with a value transformers might not produce.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DC_MAX_KINDS 4096

typedef struct { const int64_t *ptr; const int32_t *idx; const float *val; } dc_csc;

typedef struct {
    int kind;                   /* 0: Gated DeltaNet layer; 1: all-zero layer (identity) */
    int gdn;                    /* its recurrent-state index (kind 0) */
    const float *n1, *n2;       /* [H] input / post-attention norm scale per dim */
    dc_csc ip;                  /* H -> P: conv channels [0,C), z [C,C+V), b [C+V,C+V+NV) */
    const int8_t *delay;        /* [C] which earlier position a channel's conv reads; -1 none */
    dc_csc op;                  /* V -> H (out_proj) */
    dc_csc gate, up;            /* H -> I */
    dc_csc down;                /* I -> H */
    const float *gw;            /* [DV] gated-norm weight */
} dc_layer;

typedef struct {
    int H, L, G, C, V, NV, NK, DK, DV, VPK, KC, I, NB, NBV, bf16;
    double res_ballast;         /* sum of squares of the ballast dims (constant) */
    double res_margin;          /* the rest's sum of squares times this must stay below it */
    double gn_margin;           /* the same for a value head's data columns */
    float qdiv;                 /* (float) sqrt(DK), as transformers divides the query */
    const dc_layer *layers;
    const float *nf;            /* [H] final norm scale */
    int64_t vocab;
    const int64_t *e_ptr; const int32_t *e_col; const float *e_val;   /* embedding CSR */
    int nkinds;
    const int64_t *k_off; const int32_t *k_bits; const int64_t *k_row;
    const int64_t *lm_ptr; const int32_t *lm_col; const float *lm_val; /* structured rows */
} dc_model;

enum {
    DC_OK = 0, DC_E_TOKEN = 1, DC_E_NORM = 2, DC_E_SILU = 3, DC_E_BETA = 4, DC_E_KEY = 5,
    DC_E_QUERY = 6, DC_E_GNORM = 7, DC_E_ARGMAX = 8, DC_E_ALLOC = 9
};

typedef struct {
    int64_t pos;
    int err, err_layer;
    double err_val;
    float *S;                   /* [G][NV][DK][DV] */
    float *hist;                /* [G][KC][C] */
    int32_t *hnz, *hcnt;        /* [G][KC][C], [G][KC] */
    float *x, *h;               /* [H] */
    int32_t *nz;                /* [H] */
    float *pr; int32_t *prt; uint8_t *prm;       /* [P] */
    float *co; int32_t *cot; uint8_t *com;       /* [C] */
    uint8_t *hm; int32_t *hl;                     /* [NV] */
    float *y; int32_t *yt;                        /* [V] */
    float *acc; int32_t *at; uint8_t *am;         /* [H] */
    float *ga, *ua; int32_t *gt; uint8_t *gm;     /* [I] */
    float *pv; int32_t *pt;                       /* [I] */
} dc_state;

static inline float rbf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

#define RD(m, f) ((m)->bf16 ? rbf16(f) : (f))

/* silu(x) where transformers' value is known exactly: x itself once exp(-x) vanishes in the
 * dtype's rounding, -0 once exp(-x) overflows, 0 at 0. Anything else is refused (0). */
static inline int silu_exact(const dc_model *m, float x, float *out) {
    if (x == 0.0f) { *out = x * 0.5f; return 1; }
    if (x >= (m->bf16 ? 8.0f : 17.0f)) { *out = x; return 1; }
    if (x <= -89.0f) { *out = -0.0f; return 1; }
    return 0;
}

static int fail(dc_state *s, int code, int layer, double v) {
    s->err = code; s->err_layer = layer; s->err_val = v;
    return code;
}

static void *zalloc(size_t n) { return calloc(n ? n : 1, 1); }

void dc_state_free(dc_state *s) {
    if (!s) return;
    void *ps[] = {s->S, s->hist, s->hnz, s->hcnt, s->x, s->h, s->nz, s->pr, s->prt, s->prm,
                  s->co, s->cot, s->com, s->hm, s->hl, s->y, s->yt, s->acc, s->at, s->am,
                  s->ga, s->ua, s->gt, s->gm, s->pv, s->pt};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    free(s);
}

dc_state *dc_state_new(const dc_model *m) {
    dc_state *s = zalloc(sizeof *s);
    if (!s) return NULL;
    size_t P = (size_t)m->C + m->V + m->NV, G = m->G;
    s->S = zalloc(G * m->NV * m->DK * m->DV * sizeof(float));
    s->hist = zalloc(G * m->KC * m->C * sizeof(float));
    s->hnz = zalloc(G * m->KC * m->C * sizeof(int32_t));
    s->hcnt = zalloc(G * m->KC * sizeof(int32_t));
    s->x = zalloc(m->H * sizeof(float)); s->h = zalloc(m->H * sizeof(float));
    s->nz = zalloc(m->H * sizeof(int32_t));
    s->pr = zalloc(P * sizeof(float)); s->prt = zalloc(P * sizeof(int32_t)); s->prm = zalloc(P);
    s->co = zalloc(m->C * sizeof(float)); s->cot = zalloc(m->C * sizeof(int32_t));
    s->com = zalloc(m->C);
    s->hm = zalloc(m->NV); s->hl = zalloc(m->NV * sizeof(int32_t));
    s->y = zalloc(m->V * sizeof(float)); s->yt = zalloc(m->V * sizeof(int32_t));
    s->acc = zalloc(m->H * sizeof(float)); s->at = zalloc(m->H * sizeof(int32_t));
    s->am = zalloc(m->H);
    s->ga = zalloc(m->I * sizeof(float)); s->ua = zalloc(m->I * sizeof(float));
    s->gt = zalloc(m->I * sizeof(int32_t)); s->gm = zalloc(m->I);
    s->pv = zalloc(m->I * sizeof(float)); s->pt = zalloc(m->I * sizeof(int32_t));
    void *ps[] = {s->S, s->hist, s->hnz, s->hcnt, s->x, s->h, s->nz, s->pr, s->prt, s->prm,
                  s->co, s->cot, s->com, s->hm, s->hl, s->y, s->yt, s->acc, s->at, s->am,
                  s->ga, s->ua, s->gt, s->gm, s->pv, s->pt};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (!ps[i]) { dc_state_free(s); return NULL; }
    return s;
}

float *dc_state_S(dc_state *s) { return s->S; }
float *dc_state_hist(dc_state *s) { return s->hist; }
int64_t dc_state_pos(dc_state *s) { return s->pos; }
int dc_state_err(dc_state *s, int *layer, double *val) {
    *layer = s->err_layer; *val = s->err_val; return s->err;
}

/* h = x * scale over the dims; nz = the nonzero dims of h. The pre-norm is that exact scale
 * only while the ballast dominates the mean square (checked). */
static int norm(const dc_model *m, dc_state *s, const float *scale, int layer) {
    double rest = 0.0;
    int n = 0;
    for (int i = 0; i < m->H; i++) {
        float v = s->x[i];
        if (v == 0.0f) { s->h[i] = 0.0f; continue; }
        if (i >= m->NB) rest += (double)v * v;
        float hv = v * scale[i];
        s->h[i] = hv;
        if (hv != 0.0f) s->nz[n++] = i;
    }
    if (rest * m->res_margin >= m->res_ballast) return -1 - fail(s, DC_E_NORM, layer, rest);
    return n;
}

/* out[idx] += val * h for the nonzero inputs; touched outputs listed once in t. */
static int spmv(const dc_csc *w, const float *h, const int32_t *nz, int n, float *out,
                int32_t *t, uint8_t *mark) {
    int nt = 0;
    for (int a = 0; a < n; a++) {
        int i = nz[a];
        float hv = h[i];
        for (int64_t e = w->ptr[i]; e < w->ptr[i + 1]; e++) {
            int o = w->idx[e];
            if (!mark[o]) { mark[o] = 1; t[nt++] = o; out[o] = 0.0f; }
            out[o] += w->val[e] * hv;
        }
    }
    return nt;
}

/* x += round(acc) over touched dims, rounding the sum (residual add in the dtype). */
static void residual_add(const dc_model *m, dc_state *s, int nt) {
    for (int a = 0; a < nt; a++) {
        int o = s->at[a];
        s->am[o] = 0;
        float d = RD(m, s->acc[o]);
        s->x[o] = RD(m, s->x[o] + d);
    }
}

static int gdn(const dc_model *m, dc_state *s, const dc_layer *ly, int li, int nn) {
    const int C = m->C, V = m->V, DK = m->DK, DV = m->DV, KC = m->KC;
    /* projections, rounded as Linear outputs */
    int np = spmv(&ly->ip, s->h, s->nz, nn, s->pr, s->prt, s->prm);
    for (int a = 0; a < np; a++) s->pr[s->prt[a]] = RD(m, s->pr[s->prt[a]]);
    /* conv history: this position's channels into slot pos % KC */
    int slot = (int)(s->pos % KC);
    float *hist = s->hist + (size_t)ly->gdn * KC * C;
    int32_t *hnz = s->hnz + (size_t)ly->gdn * KC * C, *hcnt = s->hcnt + (size_t)ly->gdn * KC;
    float *hs = hist + (size_t)slot * C;
    int32_t *hz = hnz + (size_t)slot * C;
    for (int a = 0; a < hcnt[slot]; a++) hs[hz[a]] = 0.0f;
    int hc = 0;
    for (int a = 0; a < np; a++) {
        int o = s->prt[a];
        if (o < C && s->pr[o] != 0.0f) { hs[o] = s->pr[o]; hz[hc++] = o; }
    }
    hcnt[slot] = hc;
    /* conv outputs (one tap of weight 1) through silu, and the heads they reach */
    int nco = 0, nh = 0;
    for (int d = 0; d < KC && d <= s->pos; d++) {
        int sl = (int)((s->pos - d) % KC);
        const float *src = hist + (size_t)sl * C;
        const int32_t *lst = hnz + (size_t)sl * C;
        for (int a = 0; a < hcnt[sl]; a++) {
            int c = lst[a];
            if (ly->delay[c] != d) continue;
            float v;
            if (!silu_exact(m, src[c], &v)) return fail(s, DC_E_SILU, li, src[c]);
            if (v == 0.0f) continue;
            if (!s->com[c]) { s->com[c] = 1; s->cot[nco++] = c; }
            s->co[c] = v;
            int head;
            if (c < m->NK * DK) head = (c / DK) * m->VPK;
            else if (c < 2 * m->NK * DK) head = ((c - m->NK * DK) / DK) * m->VPK;
            else head = (c - 2 * m->NK * DK) / DV;
            int hi = c < 2 * m->NK * DK ? head + m->VPK : head + 1;
            for (int hh = head; hh < hi; hh++)
                if (!s->hm[hh]) { s->hm[hh] = 1; s->hl[nh++] = hh; }
        }
    }
    int ny = 0;
    const float *qb = s->co, *kb = s->co + m->NK * DK, *vb = s->co + 2 * m->NK * DK;
    for (int a = 0; a < nh; a++) {
        int hh = s->hl[a], kh = hh / m->VPK;
        s->hm[hh] = 0;
        const float *q = qb + (size_t)kh * DK, *k = kb + (size_t)kh * DK, *v = vb + (size_t)hh * DV;
        float *S = s->S + (((size_t)ly->gdn * m->NV + hh) * DK) * DV;
        /* key: one nonzero (a row store) or none (no write) */
        int ka = -1, nk = 0, qi[2] = {-1, -1}, nq = 0;
        for (int j = 0; j < DK; j++) {
            if (s->com[kh * DK + j + m->NK * DK] && k[j] != 0.0f) { ka = j; nk++; }
            if (s->com[kh * DK + j] && q[j] != 0.0f) { if (nq < 2) qi[nq] = j; nq++; }
        }
        if (nk > 1) return fail(s, DC_E_KEY, li, nk);
        if (nq > 2) return fail(s, DC_E_QUERY, li, nq);
        if (nk == 1) {
            /* l2norm(k) in fp32, then the delta rule on row ka with beta */
            float kv = k[ka];
            float kn = kv * (1.0f / sqrtf(kv * kv + 1e-6f));
            float b = s->pr[C + V + hh];
            float beta;
            if (b >= 17.0f) beta = 1.0f;
            else if (b <= -104.0f) beta = 0.0f;
            else if (b == 0.0f) beta = 0.5f;
            else return fail(s, DC_E_BETA, li, b);
            float *row = S + (size_t)ka * DV;
            for (int j = 0; j < DV; j++) {
                float vj = s->com[2 * m->NK * DK + hh * DV + j] ? v[j] : 0.0f;
                float kvm = row[j] * kn;
                float delta = (vj - kvm) * beta;
                row[j] = row[j] + kn * delta;
            }
        }
        if (nq == 0) continue;
        /* the query: l2norm in fp32, divided by sqrt(d_k); the read sums rows in order */
        float ss = 0.0f;
        for (int t = 0; t < nq; t++) ss += q[qi[t]] * q[qi[t]];
        float inv = 1.0f / sqrtf(ss + 1e-6f);
        float qv[2];
        for (int t = 0; t < nq; t++) qv[t] = (q[qi[t]] * inv) / m->qdiv;
        float o[512];
        for (int j = 0; j < DV; j++) {
            float acc = 0.0f;
            for (int t = 0; t < nq; t++) acc += S[(size_t)qi[t] * DV + j] * qv[t];
            o[j] = RD(m, acc);      /* the kernel's output is rounded to the model dtype */
        }
        /* gated RMSNorm: statistics from the ballast columns, which dominate (checked) */
        float sb = 0.0f;
        double rest = 0.0;
        for (int j = 0; j < m->NBV; j++) sb += o[j] * o[j];
        for (int j = m->NBV; j < DV; j++) rest += (double)o[j] * o[j];
        if (rest != 0.0 && rest * m->gn_margin >= (double)sb) return fail(s, DC_E_GNORM, li, rest);
        float r = 1.0f / sqrtf(sb / (float)DV + 1e-6f);
        const float *z = s->pr + C + (size_t)hh * DV;
        for (int j = 0; j < DV; j++) {
            if (o[j] == 0.0f) continue;
            float yj = RD(m, o[j] * r);
            yj = RD(m, ly->gw[j] * yj);
            float zz = s->prm[C + hh * DV + j] ? z[j] : 0.0f, sz;
            if (!silu_exact(m, zz, &sz)) return fail(s, DC_E_SILU, li, zz);
            yj = RD(m, yj * sz);
            if (yj == 0.0f) continue;
            s->y[hh * DV + j] = yj;
            s->yt[ny++] = hh * DV + j;
        }
    }
    for (int a = 0; a < nco; a++) s->com[s->cot[a]] = 0;
    for (int a = 0; a < np; a++) s->prm[s->prt[a]] = 0;
    /* out_proj over the nonzero outputs, then the residual add */
    int nt = spmv(&ly->op, s->y, s->yt, ny, s->acc, s->at, s->am);
    residual_add(m, s, nt);
    return 0;
}

static int mlp(const dc_model *m, dc_state *s, const dc_layer *ly, int li, int nn) {
    /* gate over the nonzero inputs; silu (exact domain) picks the active neurons */
    int ng = spmv(&ly->gate, s->h, s->nz, nn, s->ga, s->gt, s->gm);
    int np = 0;
    for (int a = 0; a < ng; a++) {
        int o = s->gt[a];
        s->gm[o] = 0;
        float g = RD(m, s->ga[o]), act;
        if (!silu_exact(m, g, &act)) return fail(s, DC_E_SILU, li, g);
        if (act == 0.0f) continue;
        s->pt[np++] = o;
        s->pv[o] = act;
    }
    /* up over the nonzero inputs (a neuron it never touches reads 0) */
    int nu = spmv(&ly->up, s->h, s->nz, nn, s->ua, s->gt, s->gm);
    int n = 0;
    for (int a = 0; a < np; a++) {
        int o = s->pt[a];
        float u = s->gm[o] ? RD(m, s->ua[o]) : 0.0f;
        float p = RD(m, s->pv[o] * u);
        if (p == 0.0f) continue;
        s->pv[o] = p;
        s->pt[n++] = o;
    }
    for (int a = 0; a < nu; a++) s->gm[s->gt[a]] = 0;
    int nt = spmv(&ly->down, s->pv, s->pt, n, s->acc, s->at, s->am);
    residual_add(m, s, nt);
    return 0;
}

/* argmax of the bf16 (or fp32) logits, from the structured lm_head rows of each kind:
 * logit(kind k, payload u) = base_k . h + sum_j bit_j(u) (delta_kj . h). The winner must
 * beat every other id by more than any fp32 summation order and the final rounding could
 * move them (else DC_E_ARGMAX). */
static int64_t argmax(const dc_model *m, dc_state *s) {
    double tops[DC_MAX_KINDS], runners[DC_MAX_KINDS], l1max = 0.0;
    int64_t ids[DC_MAX_KINDS];
    int bk = -1;
    for (int k = 0; k < m->nkinds; k++) {
        int nb = m->k_bits[k];
        int64_t r0 = m->k_row[k], u = 0;
        double top = 0.0, l1 = 0.0, dmin = INFINITY;
        for (int j = -1; j < nb; j++) {
            double d = 0.0;
            for (int64_t e = m->lm_ptr[r0 + 1 + j]; e < m->lm_ptr[r0 + 2 + j]; e++) {
                double t = (double)m->lm_val[e] * s->h[m->lm_col[e]];
                d += t; l1 += fabs(t);
            }
            if (j < 0) { top = d; continue; }
            if (d > 0) { top += d; u |= (int64_t)1 << j; }
            if (fabs(d) < dmin) dmin = fabs(d);
        }
        tops[k] = top;
        runners[k] = nb ? top - dmin : -INFINITY;
        ids[k] = m->k_off[k] + u;
        if (l1 > l1max) l1max = l1;
        if (bk < 0 || top > tops[bk]) bk = k;
    }
    double best = tops[bk], second = runners[bk];
    for (int k = 0; k < m->nkinds; k++)
        if (k != bk && tops[k] > second) second = tops[k];
    /* any fp32 summation order moves a logit by < l1 * 2^-16 (rows of <= 128 nonzeros),
     * the final rounding by half an ulp of the dtype */
    double mag = fmax(fabs(best), fabs(second));
    double err = l1max * ldexp(1.0, -16) + mag * (m->bf16 ? ldexp(1.0, -8) : ldexp(1.0, -23));
    if (!(best - second > 2 * err)) { fail(s, DC_E_ARGMAX, m->L, best - second); return -1; }
    return ids[bk];
}

/* Feed token `id` to stream s: every layer, then the argmax. Returns the next token id, or
 * -1 with s->err set. taps (optional): [2L][H] residual after every sublayer. */
int64_t dc_step(const dc_model *m, dc_state *s, int64_t id, float *taps) {
    if (s->err) return -1;
    if (id < 0 || id >= m->vocab) { fail(s, DC_E_TOKEN, -1, (double)id); return -1; }
    memset(s->x, 0, m->H * sizeof(float));
    for (int64_t e = m->e_ptr[id]; e < m->e_ptr[id + 1]; e++) s->x[m->e_col[e]] = m->e_val[e];
    for (int li = 0; li < m->L; li++) {
        const dc_layer *ly = &m->layers[li];
        if (ly->kind == 0) {
            int nn = norm(m, s, ly->n1, li);
            if (nn < 0 || gdn(m, s, ly, li, nn)) return -1;
            if (taps) memcpy(taps + (size_t)(2 * li) * m->H, s->x, m->H * sizeof(float));
            nn = norm(m, s, ly->n2, li);
            if (nn < 0 || mlp(m, s, ly, li, nn)) return -1;
        } else if (taps) {
            memcpy(taps + (size_t)(2 * li) * m->H, s->x, m->H * sizeof(float));
        }
        if (taps) memcpy(taps + (size_t)(2 * li + 1) * m->H, s->x, m->H * sizeof(float));
    }
    if (norm(m, s, m->nf, m->L) < 0) return -1;
    int64_t nxt = argmax(m, s);
    if (nxt >= 0) s->pos++;
    return nxt;
}

/* n tokens of one stream in a row (teacher-forced: ids given); out[i] = argmax after ids[i].
 * Returns how many were fed before an error (n when none). */
int64_t dc_feed(const dc_model *m, dc_state *s, const int64_t *ids, int64_t n, int64_t *out,
                float *taps) {
    for (int64_t i = 0; i < n; i++) {
        out[i] = dc_step(m, s, ids[i], taps ? taps + (size_t)i * 2 * m->L * m->H : NULL);
        if (out[i] < 0) return i;
    }
    return n;
}

/* Free-running: feed `id`, then each argmax, up to n tokens or until a token in stop[]
 * (a bitmap over ids, optional) has been fed. out[i] = the i-th token fed after `id`. */
int64_t dc_run(const dc_model *m, dc_state *s, int64_t id, int64_t n, int64_t *out,
               const uint8_t *stop) {
    for (int64_t i = 0; i < n; i++) {
        if (stop && (stop[id >> 3] >> (id & 7)) & 1) return i;
        id = dc_step(m, s, id, NULL);
        if (id < 0) return -1 - i;
        out[i] = id;
    }
    return n;
}
