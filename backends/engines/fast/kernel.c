/* The fast engine's step kernel: one token of a compiled chip's Qwen3.5 decoder, sparse.
 *
 * It executes the checkpoint's own weights (CSC over the inputs of every projection) and
 * rounds where transformers' Qwen3.5 modules round (docs/backend.md, "The fast engine"):
 * every Linear output and every silu on a bf16 tensor to the model dtype, the GDN
 * recurrence and the gated norm's statistics in fp32. What it relies on was verified when
 * the model was loaded (backends/engines/fast/model.py): pre-norms that are exact power-of-two
 * scales, one conv tap per channel of weight 1, no decay, row-store keys. What can only be
 * seen at run time is checked on every token, and a failed check stops the stream with an
 * error code (DC_E_*) instead of running on with a value transformers might not produce.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DC_MAX_KINDS 4096
#define DC_MAX_KC 64
#define DC_MAX_GIN 16      /* the most inputs of a memo group (model.MAX_GROUP_INPUTS) */
#define DC_MEMO_SLOTS (1 << 15)
#define DC_MEMO_RECORDS (1 << 14)   /* a stream's memo is emptied when it holds this many */
#define DC_MEMO_WORDS (1 << 20)     /* ... or this many words */
#define DC_MAX_OUT (1 << 17)   /* the most outputs of one projection (checked at load) */
/* What a sparse product's output holds until a sum is started there: the bits of a
 * signalling NaN, which no arithmetic produces (a NaN result is quiet), so it can only be
 * this mark (spmv) */
#define DC_UNTOUCHED 0x7fa5a5a5u

typedef struct { const int64_t *ptr; const int32_t *idx; const float *val; } dc_csc;
/* (the same triple as CSR: ptr over rows, idx the columns) */

typedef struct {
    int kind;                   /* 0: Gated DeltaNet layer; 1: all-zero layer (identity) */
    int gdn;                    /* its recurrent-state index (kind 0) */
    const float *n1, *n2;       /* [H] input / post-attention norm scale per dim */
    dc_csc ip;                  /* H -> C: the conv channels, CSC */
    dc_csc zb;                  /* z [0,V), b [V,V+NV) as CSR rows past the ballast */
    const int8_t *delay;        /* [C] which earlier position a channel's conv reads; -1 none */
    dc_csc op;                  /* V -> H (out_proj) */
    dc_csc gate;                /* H -> I */
    const uint32_t *gate_pk;    /* the gate's entries packed (pack_bf16), or NULL */
    dc_csc upr;                 /* up_proj as CSR rows past the ballast (an active neuron's) */
    dc_csc down;                /* I -> H */
    const float *gw;            /* [DV] gated-norm weight */
    const uint8_t *wcol;        /* [NV][DV]: 1 where a write can make a head's column nonzero */
    /* the constant ballast dims' part (backends/engines/fast/model.py, _defaults): each sum of a
     * touched output starts from its bias; an untouched output is its default */
    const float *ipb, *ipd;     /* [P]: conv channels [0,C), z [C,C+V), b [C+V,C+V+NV) */
    const float *gb, *gd, *ub, *ud;   /* [I] */
    const int32_t *cda; int ncda;     /* conv channels whose default is live */
    const uint8_t *cdl;               /* [C]: 1 on those channels */
    const int32_t *dg; int ndg;       /* neurons whose default gate is live */
    /* memo groups of in_proj_qkv: sets of input dims past the ballast that alone reach a set
     * of conv channels (a connected part of the weight), small enough to remember what the
     * conv takes from them for each combination of their values seen */
    const int32_t *g_of;              /* [H]: an input dim's group, -1 none */
    const int32_t *g_ptr, *g_in;      /* group g's dims: g_in[g_ptr[g] .. g_ptr[g + 1]) */
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
    const int64_t *k_ids;       /* ids of each kind (below 2^bits: a bound on its last field) */
    const int64_t *lm_ptr; const int32_t *lm_col; const float *lm_val; /* structured rows */
    const uint8_t *same_scale;  /* [2L]: norm k (layer l's first 2l, its second 2l + 1) has
                                 * the scale of the norm run before it past the ballast, bit
                                 * for bit (made by native.py) */
} dc_model;

enum {
    DC_OK = 0, DC_E_TOKEN = 1, DC_E_NORM = 2, DC_E_SILU = 3, DC_E_BETA = 4, DC_E_KEY = 5,
    DC_E_QUERY = 6, DC_E_GNORM = 7, DC_E_ARGMAX = 8, DC_E_ALLOC = 9, DC_E_BOUND = 10
};

typedef struct {
    int64_t pos;
    int err, err_layer;
    double err_val;
    float *S;                   /* [G][NV][DK][DV] */
    int16_t *cl, *ncl;          /* [G][NV][DV], [G][NV]: the columns of a head's rows that
                                 * can be nonzero (the ballast's, those a write can set, those
                                 * nonzero in S when they were listed); every other column
                                 * is 0 in every row and in every value written */
    uint8_t *rz;                /* [G][NV][DK]: 1 where a row of S has a nonzero column past
                                 * the ballast's (0: a read of it adds 0 to every such column) */
    int cl_ok;                  /* the lists (and rz) are up to date with S (0: list again) */
    int32_t *hnz, *hcnt;        /* [G][KC][C], [G][KC]: the channels touched at a slot */
    uint8_t *hmk;               /* [G][KC][C]: touched there (else the channel's default) */
    int32_t *duec, *duen;       /* [G][KC][C], [G][KC]: conv inputs due at a slot's position */
    float *duev;                /* [G][KC][C]: their values */
    int32_t *xl;                /* [H]: the dims x (and h) may be nonzero on this token */
    uint8_t *xm;                /* [H] */
    int nxl;
    int clean, last_n;          /* x unchanged since the last norm, which gave last_n dims */
    int32_t *kcnt, *kidx, *qcnt, *qidx;           /* [NK], [NK], [NK], [NK][2] */
    float *x, *h;               /* [H] */
    int32_t *nz;                /* [H] */
    float *pr; int32_t *prt;                     /* [P] */
    float *co; int32_t *cot; uint8_t *com;       /* [C] */
    uint8_t *hm; int32_t *hl;                     /* [NV] */
    float *y; int32_t *yt;                        /* [V] */
    float *acc; int32_t *at;                      /* [H] */
    float *ga, *ua; int32_t *gt;                  /* [I]; ua: the active neurons' silu, as pt */
    float *pv; int32_t *pt;                       /* [I] */
    int32_t *dz, *gl; uint8_t *gmk;               /* [H]: direct inputs, touched groups */
    int32_t *tmk, *tpo; float *tpv;               /* [C]: what the conv takes (conv_inputs) */
    struct dc_memo *memo;                         /* the memo the stream uses now, or none */
} dc_state;

/* A memo of what the conv takes from memo groups (memo_get): a pure function of the group
 * and its inputs' values, so any streams of one model may share one, one at a time. Open
 * addressing over (hash, record offset; 0 empty); records in the arena: [group id][key
 * words][pushes][marks][(channel, value bits) x pushes][channel x marks]. */
typedef struct dc_memo {
    uint64_t *mh; uint32_t *moff;                 /* [DC_MEMO_SLOTS] */
    uint32_t *ma; size_t mlen, mcap; int mrec;
    int mrec_max; size_t mwords_max;              /* emptied when either is reached */
    int64_t mhit, mmiss;
} dc_memo;

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
#define SILU_DEAD (-89.0f)      /* at or below: exp(-x) overflows, silu is -0 */
static inline float silu_live(const dc_model *m) {   /* at or above: silu(x) = x */
    return m->bf16 ? 8.0f : 17.0f;
}

static inline int silu_exact(const dc_model *m, float x, float *out) {
    if (x == 0.0f) { *out = x * 0.5f; return 1; }
    if (x >= silu_live(m)) { *out = x; return 1; }
    if (x <= SILU_DEAD) { *out = -0.0f; return 1; }
    return 0;
}

static int fail(dc_state *s, int code, int layer, double v) {
    s->err = code; s->err_layer = layer; s->err_val = v;
    return code;
}

static void *zalloc(size_t n) { return calloc(n ? n : 1, 1); }

static inline int touched(const float *out, int o) {
    uint32_t b;
    memcpy(&b, &out[o], 4);
    return b != DC_UNTOUCHED;
}

static inline void untouch1(float *out, int o) {
    uint32_t b = DC_UNTOUCHED;
    memcpy(&out[o], &b, 4);
}

static void untouch(float *out, size_t n) { for (size_t i = 0; i < n; i++) untouch1(out, (int)i); }

void dc_state_free(dc_state *s) {
    if (!s) return;
    void *ps[] = {s->S, s->cl, s->ncl, s->rz, s->dz, s->gl, s->gmk, s->tmk, s->tpo, s->tpv, s->duec, s->duen, s->duev, s->xl, s->xm, s->kcnt, s->kidx,
                  s->qcnt, s->qidx, s->hnz, s->hcnt, s->hmk, s->x, s->h, s->nz, s->pr, s->prt,
                  s->co, s->cot, s->com, s->hm, s->hl, s->y, s->yt, s->acc, s->at,
                  s->ga, s->ua, s->gt, s->pv, s->pt};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    free(s);
}

dc_state *dc_state_new(const dc_model *m) {
    dc_state *s = zalloc(sizeof *s);
    if (!s) return NULL;
    size_t P = (size_t)m->C + m->V + m->NV, G = m->G;
    s->S = zalloc(G * m->NV * m->DK * m->DV * sizeof(float));
    s->cl = zalloc(G * m->NV * m->DV * sizeof(int16_t));
    s->dz = zalloc(m->H * sizeof(int32_t)); s->gl = zalloc(m->H * sizeof(int32_t));
    s->gmk = zalloc(m->H);
    s->tmk = zalloc(m->C * sizeof(int32_t)); s->tpo = zalloc(m->C * sizeof(int32_t));
    s->tpv = zalloc(m->C * sizeof(float));
    s->ncl = zalloc(G * m->NV * sizeof(int16_t));
    s->rz = zalloc(G * m->NV * m->DK);
    s->duec = zalloc(G * m->KC * m->C * sizeof(int32_t));
    s->duen = zalloc(G * m->KC * sizeof(int32_t));
    s->duev = zalloc(G * m->KC * m->C * sizeof(float));
    s->xl = zalloc((m->H + 1) * sizeof(int32_t));   /* + 1: residual_add writes one past */
    s->xm = zalloc(m->H);
    s->kcnt = zalloc(m->NK * sizeof(int32_t)); s->kidx = zalloc(m->NK * sizeof(int32_t));
    s->qcnt = zalloc(m->NK * sizeof(int32_t)); s->qidx = zalloc(2 * m->NK * sizeof(int32_t));
    s->hnz = zalloc(G * m->KC * m->C * sizeof(int32_t));
    s->hcnt = zalloc(G * m->KC * sizeof(int32_t));
    s->hmk = zalloc(G * m->KC * m->C);
    s->x = zalloc(m->H * sizeof(float)); s->h = zalloc(m->H * sizeof(float));
    s->nz = zalloc(m->H * sizeof(int32_t));
    s->pr = zalloc(P * sizeof(float)); s->prt = zalloc(P * sizeof(int32_t));
    s->co = zalloc(m->C * sizeof(float)); s->cot = zalloc(m->C * sizeof(int32_t));
    s->com = zalloc(m->C);
    s->hm = zalloc(m->NV); s->hl = zalloc(m->NV * sizeof(int32_t));
    s->y = zalloc(m->V * sizeof(float)); s->yt = zalloc(m->V * sizeof(int32_t));
    s->acc = zalloc(m->H * sizeof(float)); s->at = zalloc(m->H * sizeof(int32_t));
    s->ga = zalloc(m->I * sizeof(float)); s->ua = zalloc(m->I * sizeof(float));
    s->gt = zalloc(m->I * sizeof(int32_t));
    s->pv = zalloc(m->I * sizeof(float)); s->pt = zalloc(m->I * sizeof(int32_t));
    void *ps[] = {s->S, s->cl, s->ncl, s->rz, s->dz, s->gl, s->gmk, s->tmk, s->tpo, s->tpv, s->duec, s->duen, s->duev, s->xl, s->xm, s->kcnt, s->kidx,
                  s->qcnt, s->qidx, s->hnz, s->hcnt, s->hmk, s->x, s->h, s->nz, s->pr, s->prt,
                  s->co, s->cot, s->com, s->hm, s->hl, s->y, s->yt, s->acc, s->at,
                  s->ga, s->ua, s->gt, s->pv, s->pt};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if (!ps[i]) { dc_state_free(s); return NULL; }
    untouch(s->pr, P); untouch(s->acc, m->H); untouch(s->ga, m->I);
    return s;
}

/* The recurrent states: to read (dc_state_S), or to write (dc_state_S_write: the next token
 * fed lists the columns again, so a write made before it is seen). */
float *dc_state_S(dc_state *s) { return s->S; }
float *dc_state_S_write(dc_state *s) { s->cl_ok = 0; return s->S; }

/* List every head's columns that can be nonzero (see dc_state.cl). */
static void list_columns(const dc_model *m, dc_state *s) {
    const int DK = m->DK, DV = m->DV;
    uint32_t any[512];
    for (int li = 0; li < m->L; li++) {
        const dc_layer *ly = &m->layers[li];
        if (ly->kind != 0) continue;
        for (int hh = 0; hh < m->NV; hh++) {
            const uint32_t *S = (const uint32_t *)(s->S + ((size_t)ly->gdn * m->NV + hh) * DK * DV);
            for (int j = 0; j < DV; j++) any[j] = j < m->NBV || ly->wcol[(size_t)hh * DV + j];
            for (int k = 0; k < DK; k++)
                for (int j = 0; j < DV; j++) any[j] |= S[(size_t)k * DV + j];
            size_t at = (size_t)ly->gdn * m->NV + hh;
            int16_t *cl = s->cl + at * DV, n = 0;
            for (int j = 0; j < DV; j++) if (any[j]) cl[n++] = (int16_t)j;
            s->ncl[at] = n;
            const float *Sf = s->S + at * DK * DV;
            for (int k = 0; k < DK; k++) {
                int live = 0;
                for (int c = m->NBV; c < n; c++) live |= Sf[(size_t)k * DV + cl[c]] != 0.0f;
                s->rz[at * DK + k] = (uint8_t)live;
            }
        }
    }
    s->cl_ok = 1;
}
int64_t dc_state_pos(dc_state *s) { return s->pos; }

/* A memo that empties itself when it holds `records` records (or `words` words; 0: the
 * kernel's limits), or NULL if it cannot be allocated. */
dc_memo *dc_memo_new(int records, int64_t words) {
    dc_memo *mm = zalloc(sizeof *mm);
    if (!mm) return NULL;
    mm->mh = zalloc(DC_MEMO_SLOTS * sizeof(uint64_t));
    mm->moff = zalloc(DC_MEMO_SLOTS * sizeof(uint32_t));
    mm->mcap = 1 << 16; mm->mlen = 1;
    mm->ma = zalloc(mm->mcap * sizeof(uint32_t));
    mm->mrec_max = records > 0 && records < DC_MEMO_RECORDS ? records : DC_MEMO_RECORDS;
    mm->mwords_max = words > 0 && words < DC_MEMO_WORDS ? (size_t)words : DC_MEMO_WORDS;
    if (!mm->mh || !mm->moff || !mm->ma) {
        free(mm->mh); free(mm->moff); free(mm->ma); free(mm);
        return NULL;
    }
    return mm;
}

void dc_memo_free(dc_memo *mm) {
    if (!mm) return;
    free(mm->mh); free(mm->moff); free(mm->ma); free(mm);
}

/* Records held now, and lookups that found one / made one since the memo was made. */
void dc_memo_stats(const dc_memo *mm, int64_t *out) {
    out[0] = mm->mrec; out[1] = mm->mhit; out[2] = mm->mmiss;
}

/* The memo stream s uses from now on (NULL: none; then every group is computed). */
void dc_state_use_memo(dc_state *s, dc_memo *mm) { s->memo = mm; }
int dc_state_err(dc_state *s, int *layer, double *val) {
    *layer = s->err_layer; *val = s->err_val; return s->err;
}

/* h = x * scale over the dims; nz = the nonzero dims of h past the ballast (whose part
 * every projection holds as a bias). The pre-norm is that exact scale only while the
 * ballast dominates the mean square (checked). */
static int norm(const dc_model *m, dc_state *s, const float *scale, int layer, int k) {
    /* nothing written to x since a norm of the same scale past the ballast: h there, nz and
     * the check are what they were (h on the ballast dims is read by no projection: each
     * holds their part as a bias; the final norm, which the lm_head reads, is never skipped) */
    if (s->clean && k < 2 * m->L && m->same_scale[k]) return s->last_n;
    double rest = 0.0;
    int n = 0;
    const int NB = m->NB, nxl = s->nxl;
    float *restrict h = s->h;
    const float *restrict x = s->x;
    const int32_t *restrict xl = s->xl;
    int32_t *restrict nz = s->nz;
    /* branch-free: every dim of xl is written (0 where x is) and kept in nz where h is
     * nonzero past the ballast; rest adds 0 for the others. xl only grows within a token,
     * so this covers every dim an earlier norm of the token set; dc_step clears h on xl's
     * dims when a new token starts */
    for (int a = 0; a < nxl; a++) {
        int i = xl[a];
        float v = x[i];
        float hv = v * scale[i];
        int live = hv != 0.0f;
        double dv = i >= NB ? (double)v : 0.0;
        rest += dv * dv;
        h[i] = live ? hv : 0.0f;
        nz[n] = i;
        n += live & (i >= NB);
    }
    if (rest * m->res_margin >= m->res_ballast) return -1 - fail(s, DC_E_NORM, layer, rest);
    s->clean = 1; s->last_n = n;
    return n;
}

/* out[idx] += val * h for the nonzero inputs; touched outputs listed once in t, each sum
 * starting from its bias (none: 0). Branch-free: an output not touched yet holds the mark
 * DC_UNTOUCHED, which the caller puts back on the listed outputs when it has read them. An
 * entry is (idx[e], val[e]), or with pk packed in one word: the value's bf16 bits over a
 * 16-bit index (native.py packs a weight whose every value is a bf16 and every index below
 * 2^16: half the bytes to read). Always inlined, so each call keeps one of the two loops. */
static const float dc_zero[DC_MAX_OUT];

static inline __attribute__((always_inline)) int
spmv_entries(const int64_t *restrict ptr, const int32_t *restrict idx, const float *restrict val,
             const uint32_t *restrict pk, const float *bias, const float *restrict h,
             const int32_t *restrict nz, int n, float *restrict out, int32_t *restrict t) {
    int nt = 0;
    const float *restrict b0 = bias ? bias : dc_zero;
    for (int a = 0; a < n; a++) {
        int i = nz[a];
        float hv = h[i];
        for (int64_t e = ptr[i], end = ptr[i + 1]; e < end; e++) {
            int o;
            float v;
            if (pk) {
                uint32_t w = pk[e], vb = w & 0xffff0000u;
                o = (int)(w & 0xffffu);
                memcpy(&v, &vb, 4);
            } else {
                o = idx[e]; v = val[e];
            }
            int fresh = !touched(out, o);
            float cur = fresh ? b0[o] : out[o];
            t[nt] = o;
            nt += fresh;
            out[o] = cur + v * hv;
        }
    }
    return nt;
}

static int spmv(const dc_csc *w, const float *bias, const float *h, const int32_t *nz, int n,
                float *out, int32_t *t) {
    return spmv_entries(w->ptr, w->idx, w->val, NULL, bias, h, nz, n, out, t);
}

/* (kept out of line: inlined into dc_step, the matrix program ran 9 % slower) */
static __attribute__((noinline)) int
spmv_packed(const int64_t *ptr, const uint32_t *pk, const float *bias, const float *h,
            const int32_t *nz, int n, float *out, int32_t *t) {
    return spmv_entries(ptr, NULL, NULL, pk, bias, h, nz, n, out, t);
}

/* x += round(acc) over touched dims, rounding the sum (residual add in the dtype). */
static void residual_add(const dc_model *m, dc_state *s, int nt) {
    if (nt) s->clean = 0;
    for (int a = 0; a < nt; a++) {
        int o = s->at[a];
        float d = RD(m, s->acc[o]);
        untouch1(s->acc, o);
        s->x[o] = RD(m, s->x[o] + d);
        s->xl[s->nxl] = o;          /* listed once, in order, without a branch */
        s->nxl += !s->xm[o];
        s->xm[o] = 1;
    }
}

/* silu of conv channel c's input `src` into the conv outputs; a query or key channel that
 * stays nonzero is noted on its key head, a value channel marks its head. Returns 0, or an
 * error code. */
static int conv_out(const dc_model *m, dc_state *s, int li, int c, float src, int *nco, int *nh) {
    const int DK = m->DK, QK = m->NK * DK;
    float v;
    if (!silu_exact(m, src, &v)) return fail(s, DC_E_SILU, li, src);
    if (v == 0.0f) return 0;
    s->com[c] = 1; s->cot[(*nco)++] = c;
    s->co[c] = v;
    int head, hi;
    if (c < 2 * QK) {
        int kh = (c % QK) / DK;
        if (c < QK) { if (s->qcnt[kh] < 2) s->qidx[2 * kh + s->qcnt[kh]] = c % DK; s->qcnt[kh]++; }
        else { s->kidx[kh] = c % DK; s->kcnt[kh]++; }
        head = kh * m->VPK; hi = head + m->VPK;
    } else {
        head = (c - 2 * QK) / m->DV; hi = head + 1;
    }
    for (int hh = head; hh < hi; hh++)
        if (!s->hm[hh]) { s->hm[hh] = 1; s->hl[(*nh)++] = hh; }
    return 0;
}

/* z or b projection output o (an index past the conv channels), rounded: its row over the
 * residual's dims past the ballast, from the ballast's part. */
static float row_out(const dc_model *m, const dc_csc *r, float start, int o, const float *h) {
    float acc = start;
    for (int64_t e = r->ptr[o]; e < r->ptr[o + 1]; e++) acc += r->val[e] * h[r->idx[e]];
    return RD(m, acc);
}

static float zb_out(const dc_model *m, const dc_state *s, const dc_layer *ly, int o) {
    return row_out(m, &ly->zb, ly->ipb[m->C + o], o, s->h);
}

/* What the conv takes from the channels a product touched (s->prt[0..np), their sums in
 * s->pr): marks (touched channels whose default is live: at this position they are not
 * their default) into s->tmk, and pushes (channel, value rounded as a Linear output) into
 * s->tpo/tpv, leaving out values whose silu is a known zero (read, they would add nothing)
 * and channels no tap reads. Marks the product's outputs untouched again. */
static void conv_inputs(const dc_model *m, dc_state *s, const dc_layer *ly, int np,
                        int *nmk, int *npo) {
    int a0 = 0, b0 = 0;
    for (int a = 0; a < np; a++) {
        int o = s->prt[a];
        float v = RD(m, s->pr[o]);
        untouch1(s->pr, o);
        if (ly->delay[o] < 0) continue;
        if (ly->cdl[o]) s->tmk[a0++] = o;
        if (v == 0.0f || v <= SILU_DEAD) continue;
        s->tpo[b0] = o; s->tpv[b0++] = v;
    }
    *nmk = a0; *npo = b0;
}

static uint64_t mix(uint64_t h, uint32_t w) {
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* Room for a record of n words (emptying the memo when it is full); 0 when none can be had. */
static int memo_room(dc_memo *mm, size_t n) {
    if (mm->mrec >= mm->mrec_max || mm->mlen + n > mm->mwords_max) {
        memset(mm->moff, 0, DC_MEMO_SLOTS * sizeof(uint32_t));
        mm->mlen = 1; mm->mrec = 0;
    }
    if (mm->mlen + n > mm->mcap) {
        size_t cap = mm->mcap;
        while (mm->mlen + n > cap) cap *= 2;
        uint32_t *a = realloc(mm->ma, cap * sizeof(uint32_t));
        if (!a) return 0;
        mm->ma = a; mm->mcap = cap;
    }
    return 1;
}

/* The record of what the conv takes from memo group g of layer li at its inputs' values in
 * h: found, or made (the product over the group's nonzero inputs, in ascending order) and
 * kept in the stream's memo. Returns its offset in the memo's arena, or 0 where it could not
 * be kept (no memo, or no memory): then s->tmk/tpo/tpv hold it, counts in *nmk, *npo. */
static uint32_t memo_get(const dc_model *m, dc_state *s, const dc_layer *ly, int li, int g,
                         int *nmk, int *npo) {
    const int32_t *in = ly->g_in + ly->g_ptr[g];
    const int K = ly->g_ptr[g + 1] - ly->g_ptr[g];
    const uint32_t gid = ((uint32_t)li << 20) | (uint32_t)g;
    dc_memo *mm = s->memo;
    uint32_t key[DC_MAX_GIN];
    uint64_t h = mix(0x51ED27A3ull, gid);
    for (int k = 0; k < K; k++) {
        memcpy(&key[k], &s->h[in[k]], 4);
        h = mix(h, key[k]);
    }
    uint32_t at = (uint32_t)(h >> 40) & (DC_MEMO_SLOTS - 1);
    if (mm) {
        for (; mm->moff[at]; at = (at + 1) & (DC_MEMO_SLOTS - 1)) {
            const uint32_t *r = mm->ma + mm->moff[at];
            if (mm->mh[at] == h && r[0] == gid && !memcmp(r + 1, key, 4 * (size_t)K)) {
                mm->mhit++;
                return mm->moff[at];
            }
        }
        mm->mmiss++;
    }
    int n = 0;
    for (int k = 0; k < K; k++) if (s->h[in[k]] != 0.0f) s->dz[n++] = in[k];
    int np = spmv(&ly->ip, ly->ipb, s->h, s->dz, n, s->pr, s->prt);
    conv_inputs(m, s, ly, np, nmk, npo);
    size_t words = 3 + (size_t)K + 2 * (size_t)*npo + (size_t)*nmk;
    if (!mm || !memo_room(mm, words)) return 0;
    uint32_t off = (uint32_t)mm->mlen, *r = mm->ma + off;
    r[0] = gid;
    memcpy(r + 1, key, 4 * (size_t)K);
    r[1 + K] = (uint32_t)*npo; r[2 + K] = (uint32_t)*nmk;
    uint32_t *p = r + 3 + K;
    for (int a = 0; a < *npo; a++) { p[2 * a] = (uint32_t)s->tpo[a]; memcpy(&p[2 * a + 1], &s->tpv[a], 4); }
    memcpy(p + 2 * *npo, s->tmk, 4 * (size_t)*nmk);
    mm->mlen += words; mm->mrec++;
    mm->mh[at] = h; mm->moff[at] = off;
    return off;
}

static int gdn(const dc_model *m, dc_state *s, const dc_layer *ly, int li, int nn) {
    const int C = m->C, V = m->V, DK = m->DK, DV = m->DV, KC = m->KC;
    /* each touched channel goes to the slot of the position its tap reads it at; the slot
     * of this position remembers which channels were touched (the others read defaults) */
    int slot = (int)(s->pos % KC);
    size_t base = (size_t)ly->gdn * KC * C;
    int32_t *hnz = s->hnz + base, *hcnt = s->hcnt + (size_t)ly->gdn * KC;
    int32_t *duec = s->duec + base, *duen = s->duen + (size_t)ly->gdn * KC;
    float *duev = s->duev + base;
    uint8_t *hmk = s->hmk + base;
    int32_t *hz = hnz + (size_t)slot * C;
    uint8_t *hk = hmk + (size_t)slot * C;
    for (int a = 0; a < hcnt[slot]; a++) hk[hz[a]] = 0;
    int hc = 0, dsl[DC_MAX_KC];
    for (int d = 0; d < KC; d++) dsl[d] = (slot + d) % KC;
#define TAKE_MARK(o) do { int o_ = (o); hk[o_] = 1; hz[hc++] = o_; } while (0)
#define TAKE_PUSH(o, v) do { int o_ = (o), ds_ = dsl[ly->delay[o_]]; \
        duec[(size_t)ds_ * C + duen[ds_]] = o_; duev[(size_t)ds_ * C + duen[ds_]++] = (v); } while (0)
    /* conv channel inputs, rounded as Linear outputs; an untouched one is its default. The
     * inputs of memo groups are set aside: each touched group's part is remembered */
    int nd = 0, ngt = 0, nmk, npo;
    for (int a = 0; a < nn; a++) {
        int i = s->nz[a], g = ly->g_of[i];
        if (g < 0) { s->dz[nd] = i; nd += ly->ip.ptr[i + 1] != ly->ip.ptr[i]; }
        else if (!s->gmk[g]) { s->gmk[g] = 1; s->gl[ngt++] = g; }
    }
    int np = spmv(&ly->ip, ly->ipb, s->h, s->dz, nd, s->pr, s->prt);
    conv_inputs(m, s, ly, np, &nmk, &npo);
    for (int a = 0; a < nmk; a++) TAKE_MARK(s->tmk[a]);
    for (int a = 0; a < npo; a++) TAKE_PUSH(s->tpo[a], s->tpv[a]);
    for (int b = 0; b < ngt; b++) {
        int g = s->gl[b];
        s->gmk[g] = 0;
        uint32_t off = memo_get(m, s, ly, li, g, &nmk, &npo);
        if (!off) {
            for (int a = 0; a < nmk; a++) TAKE_MARK(s->tmk[a]);
            for (int a = 0; a < npo; a++) TAKE_PUSH(s->tpo[a], s->tpv[a]);
            continue;
        }
        const uint32_t *r = s->memo->ma + off;
        const int K = ly->g_ptr[g + 1] - ly->g_ptr[g];
        const uint32_t *p = r + 3 + K;
        npo = (int)r[1 + K]; nmk = (int)r[2 + K];
        for (int a = 0; a < npo; a++) { float v; memcpy(&v, &p[2 * a + 1], 4); TAKE_PUSH((int)p[2 * a], v); }
        for (int a = 0; a < nmk; a++) TAKE_MARK((int)p[2 * npo + a]);
    }
#undef TAKE_MARK
#undef TAKE_PUSH
    hcnt[slot] = hc;
    /* conv outputs (one tap of weight 1) through silu: the channels due now, then the live
     * defaults untouched at the position their tap reads (before the first position a tap
     * reads 0) */
    int nco = 0, nh = 0;
    for (int a = 0; a < duen[slot]; a++)
        if (conv_out(m, s, li, duec[(size_t)slot * C + a], duev[(size_t)slot * C + a], &nco, &nh))
            return s->err;
    duen[slot] = 0;
    for (int a = 0; a < ly->ncda; a++) {
        int c = ly->cda[a], d = ly->delay[c];
        if (d > s->pos || hmk[(size_t)((s->pos - d) % KC) * C + c]) continue;
        if (conv_out(m, s, li, c, ly->ipd[c], &nco, &nh)) return s->err;
    }
    int ny = 0;
    const float *qb = s->co, *vb = s->co + 2 * m->NK * DK;
    for (int a = 0; a < nh; a++) {
        int hh = s->hl[a], kh = hh / m->VPK;
        s->hm[hh] = 0;
        const float *v = vb + (size_t)hh * DV;
        const uint8_t *vm = s->com + 2 * m->NK * DK + (size_t)hh * DV;
        float *S = s->S + (((size_t)ly->gdn * m->NV + hh) * DK) * DV;
        const int16_t *cl = s->cl + ((size_t)ly->gdn * m->NV + hh) * DV;
        const int ncl = s->ncl[(size_t)ly->gdn * m->NV + hh];
        uint8_t *rz = s->rz + ((size_t)ly->gdn * m->NV + hh) * DK;
        /* key: one nonzero (a row store) or none (no write) */
        int nk = s->kcnt[kh], nq = s->qcnt[kh];
        if (nk > 1) return fail(s, DC_E_KEY, li, nk);
        if (nq > 2) return fail(s, DC_E_QUERY, li, nq);
        if (nk == 1) {
            /* l2norm(k) in fp32, then the delta rule on row ka with beta */
            int ka = s->kidx[kh];
            float kv = s->co[m->NK * DK + kh * DK + ka];
            float kn = kv * (1.0f / sqrtf(kv * kv + 1e-6f));
            float b = zb_out(m, s, ly, V + hh);
            float beta;
            if (b >= 17.0f) beta = 1.0f;
            else if (b <= -104.0f) beta = 0.0f;
            else if (b == 0.0f) beta = 0.5f;
            else return fail(s, DC_E_BETA, li, b);
            float *row = S + (size_t)ka * DV;
            int live = 0;
            for (int c = 0; c < ncl; c++) {
                int j = cl[c];
                float vj = vm[j] ? v[j] : 0.0f;
                float kvm = row[j] * kn;
                float delta = (vj - kvm) * beta;
                row[j] = row[j] + kn * delta;
                live |= (c >= m->NBV) & (row[j] != 0.0f);
            }
            rz[ka] = (uint8_t)live;
        }
        if (nq == 0) continue;
        /* the query: l2norm in fp32, divided by sqrt(d_k); the read sums rows in order */
        const int *qi = s->qidx + 2 * kh;
        const float *q = qb + (size_t)kh * DK;
        float ss = 0.0f;
        for (int t = 0; t < nq; t++) ss += q[qi[t]] * q[qi[t]];
        float inv = 1.0f / sqrtf(ss + 1e-6f);
        float qv[2];
        for (int t = 0; t < nq; t++) qv[t] = (q[qi[t]] * inv) / m->qdiv;
        /* rows with nothing past the ballast's columns give 0 there (skipped below, as a 0
         * would be): only the ballast's columns are read */
        int live = 0;
        for (int t = 0; t < nq; t++) live |= rz[qi[t]];
        const int nc = live ? ncl : m->NBV;
        float o[512];
        for (int c = 0; c < nc; c++) {
            int j = cl[c];
            float acc = 0.0f;
            for (int t = 0; t < nq; t++) acc += S[(size_t)qi[t] * DV + j] * qv[t];
            o[j] = RD(m, acc);      /* the kernel's output is rounded to the model dtype */
        }
        /* gated RMSNorm: statistics from the ballast columns, which dominate (checked) */
        float sb = 0.0f;
        double rest = 0.0;
        for (int j = 0; j < m->NBV; j++) sb += o[j] * o[j];
        for (int c = m->NBV; c < nc; c++) rest += (double)o[cl[c]] * o[cl[c]];
        if (rest != 0.0 && rest * m->gn_margin >= (double)sb) return fail(s, DC_E_GNORM, li, rest);
        float r = 1.0f / sqrtf(sb / (float)DV + 1e-6f);
        for (int c = 0; c < nc; c++) {
            int j = cl[c];
            if (o[j] == 0.0f) continue;
            float yj = RD(m, o[j] * r);
            yj = RD(m, ly->gw[j] * yj);
            float zz = zb_out(m, s, ly, hh * DV + j), sz;
            if (!silu_exact(m, zz, &sz)) return fail(s, DC_E_SILU, li, zz);
            yj = RD(m, yj * sz);
            if (yj == 0.0f) continue;
            s->y[hh * DV + j] = yj;
            s->yt[ny++] = hh * DV + j;
        }
    }
    for (int a = 0; a < nh; a++) {
        int kh = s->hl[a] / m->VPK;
        s->kcnt[kh] = 0; s->qcnt[kh] = 0;
    }
    for (int a = 0; a < nco; a++) s->com[s->cot[a]] = 0;
    /* out_proj over the nonzero outputs, then the residual add */
    int nt = spmv(&ly->op, NULL, s->y, s->yt, ny, s->acc, s->at);
    residual_add(m, s, nt);
    return 0;
}

static int mlp(const dc_model *m, dc_state *s, const dc_layer *ly, int li, int nn) {
    /* gate over the nonzero inputs */
    int ng = ly->gate_pk ? spmv_packed(ly->gate.ptr, ly->gate_pk, ly->gb, s->h, s->nz, nn,
                                       s->ga, s->gt)
                         : spmv(&ly->gate, ly->gb, s->h, s->nz, nn, s->ga, s->gt);
    /* most touched neurons are killed: a sum at or below -89 rounds to at most -89
     * (rounding is monotone, -89 is a bf16), where silu is -0 and nothing is added. The
     * others are kept in order (pt is filled in place: ns <= a), then pass silu in its exact
     * domain: g itself at and above hi, 0 at 0, -0 at or below -89. The live ones are kept
     * in order with their values in ua (np <= a), all without a branch; a sum outside the
     * domain is found after the loop and refused */
    int ns = 0, np = 0, bad = 0;
    for (int a = 0; a < ng; a++) {
        int o = s->gt[a];
        s->pt[ns] = o;
        ns += !(s->ga[o] <= SILU_DEAD);
    }
    const float hi = silu_live(m);
    for (int a = 0; a < ns; a++) {
        int o = s->pt[a];
        float g = RD(m, s->ga[o]);
        int on = g >= hi;
        bad |= !(on | (g == 0.0f) | (g <= SILU_DEAD));
        s->pt[np] = o;
        s->ua[np] = g;
        np += on;
    }
    if (bad)
        for (int a = 0; a < ng; a++) {
            float g = RD(m, s->ga[s->gt[a]]), act;
            if (!silu_exact(m, g, &act)) return fail(s, DC_E_SILU, li, g);
        }
    /* then the live defaults untouched */
    for (int a = 0; a < ly->ndg; a++) {
        int o = ly->dg[a];
        float g = ly->gd[o], act;
        if (touched(s->ga, o)) continue;
        if (!silu_exact(m, g, &act)) return fail(s, DC_E_SILU, li, g);
        if (act == 0.0f) continue;
        s->ua[np] = act;
        s->pt[np++] = o;
    }
    for (int a = 0; a < ng; a++) untouch1(s->ga, s->gt[a]);
    /* up for the active neurons only, row by row (the sums are exact, so any order gives
     * transformers' value; the model checked it at load) */
    int n = 0;
    for (int a = 0; a < np; a++) {
        int o = s->pt[a];
        /* a row with no weight past the ballast is its default (ud: ub rounded) */
        float u = ly->upr.ptr[o + 1] == ly->upr.ptr[o] ? ly->ud[o]
                                                       : row_out(m, &ly->upr, ly->ub[o], o, s->h);
        float p = RD(m, s->ua[a] * u);
        s->pv[o] = p;               /* kept in order where nonzero, without a branch */
        s->pt[n] = o;
        n += p != 0.0f;
    }
    int nt = spmv(&ly->down, NULL, s->pv, s->pt, n, s->acc, s->at);
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
    /* (a vocabulary of one id has no runner-up: second is -inf, and any margin is clear) */
    double mag = isinf(second) ? fabs(best) : fmax(fabs(best), fabs(second));
    double err = l1max * ldexp(1.0, -16) + mag * (m->bf16 ? ldexp(1.0, -8) : ldexp(1.0, -23));
    if (!(best - second > 2 * err)) { fail(s, DC_E_ARGMAX, m->L, best - second); return -1; }
    /* the best payload of a kind with fewer ids than its bits hold may have no id */
    int64_t u = ids[bk] - m->k_off[bk];
    if (u >= m->k_ids[bk]) { fail(s, DC_E_BOUND, m->L, (double)u); return -1; }
    return ids[bk];
}

/* Feed token `id` to stream s: every layer, then the argmax. Returns the next token id, or
 * -1 with s->err set. taps (optional): [2L][H] residual after every sublayer. */
int64_t dc_step(const dc_model *m, dc_state *s, int64_t id, float *taps) {
    if (s->err) return -1;
    if (id < 0 || id >= m->vocab) { fail(s, DC_E_TOKEN, -1, (double)id); return -1; }
    if (!s->cl_ok) list_columns(m, s);
    s->clean = 0;
    for (int a = 0; a < s->nxl; a++) { int i = s->xl[a]; s->x[i] = 0.0f; s->h[i] = 0.0f; s->xm[i] = 0; }
    s->nxl = 0;
    for (int64_t e = m->e_ptr[id]; e < m->e_ptr[id + 1]; e++) {
        int i = m->e_col[e];
        s->x[i] = m->e_val[e];
        if (!s->xm[i]) { s->xm[i] = 1; s->xl[s->nxl++] = i; }
    }
    for (int li = 0; li < m->L; li++) {
        const dc_layer *ly = &m->layers[li];
        if (ly->kind == 0) {
            int nn = norm(m, s, ly->n1, li, 2 * li);
            if (nn < 0 || gdn(m, s, ly, li, nn)) return -1;
            if (taps) memcpy(taps + (size_t)(2 * li) * m->H, s->x, m->H * sizeof(float));
            nn = norm(m, s, ly->n2, li, 2 * li + 1);
            if (nn < 0 || mlp(m, s, ly, li, nn)) return -1;
        } else if (taps) {
            memcpy(taps + (size_t)(2 * li) * m->H, s->x, m->H * sizeof(float));
        }
        if (taps) memcpy(taps + (size_t)(2 * li + 1) * m->H, s->x, m->H * sizeof(float));
    }
    if (norm(m, s, m->nf, m->L, 2 * m->L) < 0) return -1;
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
