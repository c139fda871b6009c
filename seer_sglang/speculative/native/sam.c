/* Generalized suffix automaton over several growing token sequences, with occurrence counts and the
 * two most recent occurrences kept for every state whose shortest string is at most `depth` tokens.
 *
 * Why an automaton: appends are amortized O(1) plus a walk up the suffix links from the state that
 * holds the current depth-limited suffix (at most `depth` steps, usually a few), so one group of
 * siblings is indexed at millions of tokens per second in O(N) memory. Counts answer the same
 * questions as a depth-limited suffix tree: count(x) = occurrences of x, count(xc)/count(x) = how
 * often x is followed by c.
 *
 * This file mirrors seer_sglang/spec/sam.py line for line in behaviour: both must return identical
 * drafts (ties broken by count desc, token asc; best-first by score, then push order).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int32_t len, link, cnt, first, last_seq, last_end, prev_seq, prev_end, deg, topk; } State;
typedef struct { int32_t src, tok, dst, next; } Edge;
typedef struct { int32_t *tok; int32_t n, cap, last, track, tlen; } Seq;

/* A state's TOPK likeliest continuations (count desc, token asc), cached for states with at least
 * CACHE_MIN_DEG of them: short contexts ("the", ",") have hundreds, and a draft visits several per
 * node. A state's continuation counts change only when its sequence's text ends in it, so appends
 * clear the caches along the appended sequence's suffix chain and the rest stay valid. */
#define TOPK 8
#define CACHE_MIN_DEG 16
typedef struct { int32_t valid, n, tok[TOPK], cnt[TOPK]; } TopK;

typedef struct {
    int32_t depth;
    State *st; int32_t nst, capst;
    Edge *ed; int32_t ned, caped;
    int32_t *slots; uint32_t mask; int32_t nslots_used;
    Seq *seqs; int32_t nseq, capseq;
    TopK *tk; int32_t ntk, captk;
} Sam;

static int grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return 0;
    int32_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q; *cap = c;
    return 0;
}

static inline uint32_t hash2(int32_t src, int32_t tok) {
    uint64_t h = (uint64_t)(uint32_t)src * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uint32_t)tok * 0xC2B2AE3D27D4EB4FULL;
    return (uint32_t)(h ^ (h >> 31) ^ (h >> 47));
}

static int32_t find_edge(const Sam *s, int32_t src, int32_t tok) {
    uint32_t i = hash2(src, tok) & s->mask;
    for (;;) {
        int32_t e = s->slots[i];
        if (e < 0) return -1;
        if (s->ed[e].src == src && s->ed[e].tok == tok) return e;
        i = (i + 1) & s->mask;
    }
}

static inline int32_t trans(const Sam *s, int32_t src, int32_t tok) {
    int32_t e = find_edge(s, src, tok);
    return e < 0 ? -1 : s->ed[e].dst;
}

static int rehash(Sam *s, uint32_t size) {
    int32_t *slots = malloc((size_t)size * sizeof(int32_t));
    if (!slots) return -1;
    memset(slots, 0xff, (size_t)size * sizeof(int32_t));
    uint32_t mask = size - 1;
    for (int32_t e = 0; e < s->ned; e++) {
        uint32_t i = hash2(s->ed[e].src, s->ed[e].tok) & mask;
        while (slots[i] >= 0) i = (i + 1) & mask;
        slots[i] = e;
    }
    free(s->slots);
    s->slots = slots; s->mask = mask;
    return 0;
}

static int add_edge(Sam *s, int32_t src, int32_t tok, int32_t dst) {
    if (grow((void **)&s->ed, &s->caped, s->ned + 1, sizeof(Edge))) return -1;
    if ((uint64_t)(s->ned + 1) * 2 > (uint64_t)s->mask + 1 && rehash(s, (s->mask + 1) * 2)) return -1;
    int32_t e = s->ned++;
    s->ed[e] = (Edge){src, tok, dst, s->st[src].first};
    s->st[src].first = e;
    s->st[src].deg++;
    uint32_t i = hash2(src, tok) & s->mask;
    while (s->slots[i] >= 0) i = (i + 1) & s->mask;
    s->slots[i] = e;
    return 0;
}

static int32_t new_state(Sam *s, int32_t len, int32_t link) {
    if (grow((void **)&s->st, &s->capst, s->nst + 1, sizeof(State))) return -1;
    s->st[s->nst] = (State){len, link, 0, -1, -1, -1, -1, -1, 0, -1};
    return s->nst++;
}

/* Split q: the clone takes q's strings of length <= len(p)+1 and is reached from p's suffix chain. */
static int32_t clone_state(Sam *s, int32_t p, int32_t q, int32_t c) {
    int32_t cl = new_state(s, s->st[p].len + 1, s->st[q].link);
    if (cl < 0) return -1;
    State *Q = &s->st[q];
    s->st[cl].cnt = Q->cnt;
    s->st[cl].last_seq = Q->last_seq; s->st[cl].last_end = Q->last_end;
    s->st[cl].prev_seq = Q->prev_seq; s->st[cl].prev_end = Q->prev_end;
    for (int32_t e = s->st[q].first; e >= 0; e = s->ed[e].next)
        if (add_edge(s, cl, s->ed[e].tok, s->ed[e].dst)) return -1;
    while (p >= 0) {
        int32_t e = find_edge(s, p, c);
        if (e < 0 || s->ed[e].dst != q) break;
        s->ed[e].dst = cl;
        p = s->st[p].link;
    }
    s->st[q].link = cl;
    return cl;
}

Sam *sam_new(int32_t depth) {
    Sam *s = calloc(1, sizeof(Sam));
    if (!s) return NULL;
    s->depth = depth;
    s->mask = 63;
    s->slots = malloc(64 * sizeof(int32_t));
    memset(s->slots, 0xff, 64 * sizeof(int32_t));
    if (new_state(s, 0, -1) < 0) return NULL;
    return s;
}

void sam_free(Sam *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->nseq; i++) free(s->seqs[i].tok);
    free(s->seqs); free(s->st); free(s->ed); free(s->slots); free(s->tk); free(s);
}

int32_t sam_add_seq(Sam *s) {
    if (grow((void **)&s->seqs, &s->capseq, s->nseq + 1, sizeof(Seq))) return -1;
    s->seqs[s->nseq] = (Seq){NULL, 0, 0, 0, 0, 0};
    return s->nseq++;
}

static int extend1(Sam *s, int32_t sid, int32_t c) {
    Seq *sq = &s->seqs[sid];
    /* The states whose continuations this token changes (an edge added, or a count raised after
     * them) all hold suffixes of the sequence so far. Drafts read only states whose shortest string
     * is at most `depth` tokens, and those lie on the chain from the tracked depth-limited suffix:
     * clear their cached top continuations (at most `depth` steps, also in repetition loops). */
    for (int32_t v = sq->track; v > 0; v = s->st[v].link)
        if (s->st[v].topk >= 0) s->tk[s->st[v].topk].valid = 0;
    if (grow((void **)&sq->tok, &sq->cap, sq->n + 1, sizeof(int32_t))) return -1;
    /* Before the split below can move strings: the state holding the suffix of length newlen-1,
     * where newlen = min(n+1, depth) is the tracked suffix length after this token. */
    int32_t newlen = sq->tlen < s->depth ? sq->tlen + 1 : s->depth;
    int32_t srclen = newlen - 1, u = sq->track;
    if (srclen == 0) u = 0;
    else if (srclen < sq->tlen && srclen <= s->st[s->st[u].link].len) u = s->st[u].link;

    int32_t p = sq->last, cur, split = -1, cl = -1;
    int32_t e = find_edge(s, p, c);
    if (e >= 0) {
        int32_t q = s->ed[e].dst;
        if (s->st[q].len == s->st[p].len + 1) cur = q;
        else { cl = clone_state(s, p, q, c); if (cl < 0) return -1; split = q; cur = cl; }
    } else {
        cur = new_state(s, s->st[p].len + 1, 0);
        if (cur < 0) return -1;
        while (p >= 0 && find_edge(s, p, c) < 0) {
            if (add_edge(s, p, c, cur)) return -1;
            p = s->st[p].link;
        }
        if (p >= 0) {
            int32_t q = trans(s, p, c);
            if (s->st[q].len == s->st[p].len + 1) s->st[cur].link = q;
            else { cl = clone_state(s, p, q, c); if (cl < 0) return -1; split = q; s->st[cur].link = cl; }
        }
    }
    sq->last = cur;
    if (u == split && srclen <= s->st[cl].len) u = cl;
    int32_t t = trans(s, u, c);
    if (t < 0) return -1;
    sq->track = t; sq->tlen = newlen;
    int32_t pos = sq->n;
    sq->tok[sq->n++] = c;
    for (int32_t v = t; v > 0; v = s->st[v].link) {
        State *V = &s->st[v];
        V->cnt++;
        V->prev_seq = V->last_seq; V->prev_end = V->last_end;
        V->last_seq = sid; V->last_end = pos;
    }
    return 0;
}

int32_t sam_extend(Sam *s, int32_t sid, const int32_t *tok, int32_t n) {
    if (sid < 0 || sid >= s->nseq) return -1;
    for (int32_t i = 0; i < n; i++)
        if (extend1(s, sid, tok[i])) return -1;
    return s->seqs[sid].n;
}

int32_t sam_length(const Sam *s, int32_t sid) { return sid >= 0 && sid < s->nseq ? s->seqs[sid].n : -1; }

int32_t sam_read(const Sam *s, int32_t sid, int32_t start, int32_t n, int32_t *out) {
    if (sid < 0 || sid >= s->nseq || start < 0) return 0;
    int32_t m = s->seqs[sid].n - start;
    if (m > n) m = n;
    if (m <= 0) return 0;
    memcpy(out, s->seqs[sid].tok + start, (size_t)m * sizeof(int32_t));
    return m;
}

/* Occurrence count of a string of at most `depth` tokens (0 when absent). */
int32_t sam_count(const Sam *s, const int32_t *tok, int32_t n) {
    if (n > s->depth) return -1;
    int32_t v = 0;
    for (int32_t i = 0; i < n && v >= 0; i++) v = trans(s, v, tok[i]);
    return v < 0 ? 0 : (n == 0 ? 0 : s->st[v].cnt);
}

size_t sam_memory(const Sam *s) {
    size_t b = sizeof(Sam) + (size_t)s->capst * sizeof(State) + (size_t)s->caped * sizeof(Edge)
        + ((size_t)s->mask + 1) * sizeof(int32_t) + (size_t)s->capseq * sizeof(Seq)
        + (size_t)s->captk * sizeof(TopK);
    for (int32_t i = 0; i < s->nseq; i++) b += (size_t)s->seqs[i].cap * sizeof(int32_t);
    return b;
}

/* Longest suffix (at most match_cap tokens) of head ++ seq that occurs; returns its state, or 0. */
static int32_t match_tail(const Sam *s, int32_t head, int32_t sid, int32_t match_cap) {
    const Seq *h = head >= 0 && head < s->nseq ? &s->seqs[head] : NULL;
    const Seq *q = &s->seqs[sid];
    int32_t hn = h ? h->n : 0, total = hn + q->n;
    int32_t start = total > match_cap ? total - match_cap : 0;
    int32_t v = 0;
    for (int32_t i = start; i < total; i++) {
        int32_t c = i < hn ? h->tok[i] : q->tok[i - hn];
        int32_t t;
        while ((t = trans(s, v, c)) < 0 && v > 0) v = s->st[v].link;
        v = t < 0 ? 0 : t;
    }
    return v;
}

typedef struct { double score; int32_t seqno, state, parent, tok, cnt; } Cand;

static int cand_less(const Cand *a, const Cand *b) {  /* heap order: higher score, then earlier push */
    return a->score > b->score || (a->score == b->score && a->seqno < b->seqno);
}

static void heap_push(Cand *h, int32_t *n, Cand c) {
    int32_t i = (*n)++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p]; i = p;
    }
    h[i] = c;
}

static Cand heap_pop(Cand *h, int32_t *n) {
    Cand top = h[0], x = h[--(*n)];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        const Cand *best = &x;
        if (l < *n && cand_less(&h[l], best)) { m = l; best = &h[l]; }
        if (r < *n && cand_less(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m]; i = m;
    }
    if (*n > 0) h[i] = x;
    return top;
}

/* The suffix states of a context, longest first: `w` and its suffix links, those with a continuation
 * and kept counts, at most `states` of them. */
static int32_t suffix_chain(const Sam *s, int32_t w, int32_t states, int32_t *out) {
    int32_t n = 0;
    while (w > 0 && n < states) {
        const State *W = &s->st[w];
        if (W->first >= 0 && W->cnt > 0 && s->st[W->link].len + 1 <= s->depth) out[n++] = w;
        w = W->link;
    }
    return n;
}

/* u's k likeliest continuations into tok/cnt (count desc, token asc), by a scan of its edges. */
static int32_t scan_continuations(const Sam *s, int32_t u, int32_t k, int32_t *tok, int32_t *cnt) {
    int32_t m = 0;
    for (int32_t e = s->st[u].first; e >= 0; e = s->ed[e].next) {
        int32_t t = s->ed[e].tok, n = s->st[s->ed[e].dst].cnt, i;
        if (m == k) {
            if (!(n > cnt[k - 1] || (n == cnt[k - 1] && t < tok[k - 1]))) continue;
            i = k - 1;
        } else {
            i = m++;
        }
        while (i > 0 && (n > cnt[i - 1] || (n == cnt[i - 1] && t < tok[i - 1]))) {
            tok[i] = tok[i - 1]; cnt[i] = cnt[i - 1]; i--;
        }
        tok[i] = t; cnt[i] = n;
    }
    return m;
}

/* u's k likeliest continuations into tmp (tok, cnt): from the state's cache where it has one. */
static int32_t top_continuations(Sam *s, int32_t u, int32_t k, Cand *tmp) {
    State *U = &s->st[u];
    int32_t tok[TOPK], cnt[TOPK], m;
    if (k > TOPK || U->deg < CACHE_MIN_DEG) {
        int32_t kk = k < U->deg ? k : U->deg, buf[2 * CACHE_MIN_DEG];
        int32_t *t2 = kk <= CACHE_MIN_DEG ? buf : malloc((size_t)kk * 2 * sizeof(int32_t));
        if (!t2) return 0;
        m = scan_continuations(s, u, kk, t2, t2 + kk);
        for (int32_t i = 0; i < m; i++) tmp[i] = (Cand){0.0, 0, 0, 0, t2[i], t2[kk + i]};
        if (t2 != buf) free(t2);
        return m;
    }
    if (U->topk < 0) {
        if (grow((void **)&s->tk, &s->captk, s->ntk + 1, sizeof(TopK))) {
            m = scan_continuations(s, u, k, tok, cnt);
            for (int32_t i = 0; i < m; i++) tmp[i] = (Cand){0.0, 0, 0, 0, tok[i], cnt[i]};
            return m;
        }
        U->topk = s->ntk++;
        s->tk[U->topk].valid = 0;
    }
    TopK *t = &s->tk[U->topk];
    if (!t->valid) {
        t->n = scan_continuations(s, u, TOPK, t->tok, t->cnt);
        t->valid = 1;
    }
    m = k < t->n ? k : t->n;
    for (int32_t i = 0; i < m; i++) tmp[i] = (Cand){0.0, 0, 0, 0, t->tok[i], t->cnt[i]};
    return m;
}

typedef struct { double p; int32_t tok; } Mix;

/* Push the k likeliest next tokens after a context whose suffix states are `chain` (sam.py _blend):
 * each state's top-k continuations by count (count desc, token asc), interpolated from the longest
 * state down with Witten-Bell weights n / (n + escape * distinct continuations), renormalized to the
 * mass kept; ranked by blended probability desc, token asc; those whose path score reaches min_score. */
static void push_blend(Sam *s, const int32_t *chain, int32_t nchain, double score, int32_t parent,
                       int32_t k, double escape, double min_score, Cand *heap, int32_t *hn, int32_t *seqno,
                       Cand *tmp, Mix *mix) {
    if (k <= 0 || nchain <= 0) return;
    int32_t nmix = 0;
    double rem = 1.0;
    for (int32_t c = 0; c < nchain; c++) {
        int32_t u = chain[c], m = top_continuations(s, u, k, tmp);
        double cu = (double)s->st[u].cnt;
        double lam = cu / (cu + escape * (double)s->st[u].deg);
        for (int32_t i = 0; i < m; i++) {
            int32_t j = 0;
            while (j < nmix && mix[j].tok != tmp[i].tok) j++;
            if (j == nmix) mix[nmix++] = (Mix){0.0, tmp[i].tok};
            mix[j].p += rem * lam * (double)tmp[i].cnt / cu;
        }
        rem *= 1.0 - lam;
    }
    double total = 1.0 - rem;  /* the mass the chain kept: renormalized, as nothing shorter takes the rest */
    for (int32_t r = 0; r < k && r < nmix; r++) {  /* selection: the r-th best to position r */
        int32_t b = r;
        for (int32_t j = r + 1; j < nmix; j++)
            if (mix[j].p > mix[b].p || (mix[j].p == mix[b].p && mix[j].tok < mix[b].tok)) b = j;
        Mix x = mix[b]; mix[b] = mix[r]; mix[r] = x;
        double p = x.p / total, sc = score * (p < 1.0 ? p : 1.0);
        if (!(sc >= min_score)) break;
        int32_t d = -1;
        for (int32_t c = 0; c < nchain && d < 0; c++) d = trans(s, chain[c], x.tok);
        heap_push(heap, hn, (Cand){sc, (*seqno)++, d, parent, x.tok, 0});
    }
}

/* Reorder a tree listed parents-first into BFS order (children in their listed order), in place. */
static void bfs_order(int32_t n, int32_t *tok, int32_t *par, double *score) {
    int32_t linear = 1;
    for (int32_t i = 0; i < n; i++) linear &= par[i] == i - 1;
    if (linear) return;
    int32_t *order = malloc((size_t)n * sizeof(int32_t)), *where = malloc((size_t)n * sizeof(int32_t));
    int32_t *t2 = malloc((size_t)n * sizeof(int32_t)), *p2 = malloc((size_t)n * sizeof(int32_t));
    double *s2 = malloc((size_t)n * sizeof(double));
    if (order && where && t2 && p2 && s2) {
        int32_t m = 0, head = 0, q = -1;  /* q: the node whose children are queued next (-1: the root) */
        for (;;) {
            for (int32_t i = 0; i < n; i++)
                if (par[i] == q) order[m++] = i;
            if (head >= m) break;
            q = order[head++];
        }
        for (int32_t k = 0; k < n; k++) where[order[k]] = k;
        for (int32_t k = 0; k < n; k++) {
            int32_t i = order[k];
            t2[k] = tok[i]; s2[k] = score[i]; p2[k] = par[i] < 0 ? -1 : where[par[i]];
        }
        memcpy(tok, t2, (size_t)n * sizeof(int32_t));
        memcpy(par, p2, (size_t)n * sizeof(int32_t));
        memcpy(score, s2, (size_t)n * sizeof(double));
    }
    free(order); free(where); free(t2); free(p2); free(s2);
}

/* Best-first token tree after the request's context (sam.py draft_frequent), written in BFS order;
 * returns the number of nodes. */
int32_t sam_draft_freq(Sam *s, int32_t head, int32_t sid, int32_t match_cap, int32_t max_tokens,
                       int32_t max_paths, double min_score, int32_t mix_states, double escape,
                       int32_t *out_tok, int32_t *out_par, double *out_score) {
    if (sid < 0 || sid >= s->nseq || max_tokens <= 0 || max_paths <= 0 || mix_states <= 0) return 0;
    int32_t cap = max_tokens * (max_tokens + 1) + 1;
    Cand *heap = malloc((size_t)cap * sizeof(Cand)), *tmp = malloc((size_t)(max_tokens + 1) * sizeof(Cand));
    Mix *mix = malloc((size_t)mix_states * (size_t)max_tokens * sizeof(Mix));
    int32_t *chain = malloc((size_t)mix_states * sizeof(int32_t));
    uint8_t *has_child = calloc((size_t)max_tokens + 1, 1);
    int32_t hn = 0, seqno = 0, n = 0, leaves = 0;
    if (!heap || !tmp || !mix || !chain || !has_child) {
        free(heap); free(tmp); free(mix); free(chain); free(has_child);
        return 0;
    }
    int32_t nchain = suffix_chain(s, match_tail(s, head, sid, match_cap), mix_states, chain);
    push_blend(s, chain, nchain, 1.0, -1, max_tokens, escape, min_score, heap, &hn, &seqno, tmp, mix);
    while (n < max_tokens && hn > 0) {
        Cand c = heap_pop(heap, &hn);
        uint8_t *pc = &has_child[c.parent + 1];
        if (*pc || c.parent < 0) {
            if (leaves >= max_paths) continue;
            leaves++;
        }
        *pc = 1;
        out_tok[n] = c.tok; out_par[n] = c.parent; out_score[n] = c.score;
        n++;
        if (n < max_tokens) {
            nchain = suffix_chain(s, c.state, mix_states, chain);
            push_blend(s, chain, nchain, c.score, n - 1, max_tokens - n, escape, min_score, heap, &hn, &seqno,
                       tmp, mix);
        }
    }
    free(heap); free(tmp); free(mix); free(chain); free(has_child);
    bfs_order(n, out_tok, out_par, out_score);
    return n;
}

/* Linear draft: the tokens that followed the most recent occurrence (with a continuation) of the
 * longest matched suffix; scores are the count ratios along that path. */
int32_t sam_draft_recent(const Sam *s, int32_t head, int32_t sid, int32_t match_cap, int32_t max_tokens,
                         int32_t *out_tok, double *out_score) {
    if (sid < 0 || sid >= s->nseq || max_tokens <= 0) return 0;
    int32_t v = match_tail(s, head, sid, match_cap);
    int32_t oseq = -1, oend = -1;
    for (; v > 0; v = s->st[v].link) {
        const State *V = &s->st[v];
        if (V->last_seq >= 0 && V->last_end + 1 < s->seqs[V->last_seq].n) { oseq = V->last_seq; oend = V->last_end; break; }
        if (V->prev_seq >= 0 && V->prev_end + 1 < s->seqs[V->prev_seq].n) { oseq = V->prev_seq; oend = V->prev_end; break; }
    }
    if (v <= 0) return 0;
    const Seq *q = &s->seqs[oseq];
    int32_t n = q->n - (oend + 1);
    if (n > max_tokens) n = max_tokens;
    int32_t depth_cap = s->depth - (s->st[s->st[v].link].len + 1);
    double score = 1.0;
    int32_t cur = v;
    for (int32_t i = 0; i < n; i++) {
        int32_t tok = q->tok[oend + 1 + i];
        if (i < depth_cap) {
            int32_t nx = trans(s, cur, tok);
            score = score * ((double)s->st[nx].cnt / (double)s->st[cur].cnt);
            cur = nx;
        }
        out_tok[i] = tok; out_score[i] = score;
    }
    return n;
}
