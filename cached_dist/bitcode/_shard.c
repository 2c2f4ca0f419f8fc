/* Native canonical form of a DTLTO summary index shard.
 *
 * A C port of cached_dist/bitcode/bitstream.py + shard.py (the reference): it returns the
 * very same canonical text (the sorted, newline-joined repr() of every canonical part), which
 * the Python side hashes, so both give one digest. It reads untrusted bytes: every read is
 * bounds-checked against the end of the bitstream, every loop consumes input or is bounded by
 * a count checked against the bits left, and all memory is released on every path.
 *
 * canonical_body(data, module_digest) returns
 *   bytes  the canonical text (the shard is fully understood),
 *   str    why the shard is not canonical (the caller uses the raw digest),
 *   None   "ask the reference": a value did not fit 64 bits, or a Python call failed in a
 *          way the reference should report. Never seen on real shards.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Hot helpers are forced inline (literals then get a constant length, reads a fast path). */
#define INLINE static inline __attribute__((always_inline))

/* ---- small growable arrays ------------------------------------------------------------ */

typedef struct {
    uint64_t *v;
    size_t n, cap;
} U64Vec;

typedef struct {
    char *v;
    size_t n, cap;
} Buf;

static int grow(void **p, size_t *cap, size_t need, size_t elt) {
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > ((size_t)-1) / 4 / elt)
            return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elt);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ---- u64 -> u64 hash map (open addressing, grows) ------------------------------------ */

typedef struct {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t cap, n;
} Map;

static int map_alloc(Map *m, size_t cap) {
    m->keys = calloc(cap, sizeof(uint64_t));
    m->vals = calloc(cap, sizeof(uint64_t));
    m->used = calloc(cap, 1);
    m->cap = cap;
    m->n = 0;
    return (m->keys && m->vals && m->used) ? 0 : -1;
}

static void map_free(Map *m) {
    free(m->keys);
    free(m->vals);
    free(m->used);
    m->keys = m->vals = NULL;
    m->used = NULL;
    m->cap = m->n = 0;
}

static inline size_t map_slot(const Map *m, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (m->cap - 1);
    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int map_get(const Map *m, uint64_t key, uint64_t *val) {
    if (!m->cap)
        return 0;
    size_t s = map_slot(m, key);
    if (!m->used[s])
        return 0;
    *val = m->vals[s];
    return 1;
}

/* Sets key (absent or not) to val; -1 when out of memory. */
static int map_put(Map *m, uint64_t key, uint64_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        Map bigger;
        if (map_alloc(&bigger, m->cap ? m->cap * 2 : 16)) {
            map_free(&bigger);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->used[i]) {
                size_t s = map_slot(&bigger, m->keys[i]);
                bigger.used[s] = 1;
                bigger.keys[s] = m->keys[i];
                bigger.vals[s] = m->vals[i];
                bigger.n++;
            }
        map_free(m);
        *m = bigger;
    }
    size_t s = map_slot(m, key);
    if (!m->used[s]) {
        m->used[s] = 1;
        m->keys[s] = key;
        m->n++;
    }
    m->vals[s] = val;
    return 0;
}

/* ---- decoder state -------------------------------------------------------------------- */

enum { ENC_LITERAL = 0, ENC_FIXED = 1, ENC_VBR = 2, ENC_ARRAY = 3, ENC_CHAR6 = 4, ENC_BLOB = 5 };
enum { K_EOF, K_ENTER, K_END, K_RECORD };
/* Outcomes of a failed step. */
enum { ST_OK = 0, ST_MALFORMED, ST_UNSUPPORTED, ST_NOMEM, ST_PYERR };

typedef struct {
    uint8_t enc;
    uint8_t elt;      /* array element encoding */
    uint64_t width;   /* literal value, or field width */
    uint64_t elt_w;   /* array element width */
} Op;

typedef struct {
    size_t off, n; /* into D.ops */
} Abbrev;

typedef struct {
    uint32_t *v;
    size_t n, cap;
} IdxVec; /* a block's abbreviation list: indices into D.abbrevs */

typedef struct {
    uint64_t block_id;
    uint64_t width;
    IdxVec abbrevs;
    uint64_t end_bit;
} Frame;

typedef struct {
    uint64_t block_id;
    IdxVec list;
} BlockInfo;

typedef struct {
    uint64_t code;
    size_t off, n;    /* ops in D.recops */
    int has_blob;
    size_t blob_off, blob_len;
} Rec;

typedef struct {
    const uint8_t *data;
    size_t len;
    uint64_t pos, end;
    uint64_t width;
    int big;            /* some value did not fit 64 bits: defer to the reference */
    int status;
    const char *reason; /* static text */
    /* abbreviations */
    Op *ops;
    size_t nops, capops;
    Abbrev *abbrevs;
    size_t nabbrevs, capabbrevs;
    IdxVec cur; /* current block's abbreviations */
    Frame *stack;
    size_t depth, capstack;
    BlockInfo *info;
    size_t ninfo, capinfo;
    Map info_index; /* block id -> index in info */
    /* the last record read */
    uint64_t code;
    U64Vec rec; /* the record's operands are rec.v[rec0:] */
    size_t rec0;
    int has_blob;
    size_t blob_off, blob_len;
    uint64_t block_id;
} D;

static int fail(D *d, int status, const char *reason) {
    if (d->status == ST_OK) {
        d->status = status;
        d->reason = reason;
    }
    return -1;
}

#define MALFORMED(d, why) fail((d), ST_MALFORMED, (why))
#define UNSUPPORTED(d, why) fail((d), ST_UNSUPPORTED, (why))
#define NOMEM(d) fail((d), ST_NOMEM, "out of memory")

/* ---- bit reads ------------------------------------------------------------------------ */

/* 64 bits starting at bit ``pos``; bytes past the buffer read as zero. */
static inline uint64_t load_le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t peek64(const D *d, uint64_t pos) {
    uint64_t b = pos >> 3;
    unsigned sh = (unsigned)(pos & 7);
    if (b + 9 <= d->len) { /* the common case: no padding needed */
        uint64_t lo = load_le64(d->data + b);
        return sh ? (lo >> sh) | ((uint64_t)d->data[b + 8] << (64 - sh)) : lo;
    }
    uint8_t tmp[9] = {0};
    if (b < d->len) {
        size_t avail = d->len - (size_t)b;
        memcpy(tmp, d->data + b, avail < 9 ? avail : 9);
    }
    uint64_t lo = (uint64_t)tmp[0] | (uint64_t)tmp[1] << 8 | (uint64_t)tmp[2] << 16 |
                  (uint64_t)tmp[3] << 24 | (uint64_t)tmp[4] << 32 | (uint64_t)tmp[5] << 40 |
                  (uint64_t)tmp[6] << 48 | (uint64_t)tmp[7] << 56;
    if (!sh)
        return lo;
    return (lo >> sh) | ((uint64_t)tmp[8] << (64 - sh));
}

static inline uint64_t mask(uint64_t width) {
    return width >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << width) - 1);
}

/* Fixed field, 1..64 bits. */
static inline int rd_fixed(D *d, uint64_t width, uint64_t *out) {
    if (width > d->end || d->pos > d->end - width)
        return MALFORMED(d, "read past end of bitstream");
    *out = peek64(d, d->pos) & mask(width);
    d->pos += width;
    return 0;
}

/* VBR field, 2..64 bits a chunk; values over 64 bits set d->big (the reference keeps them). */
static int rd_vbr_slow(D *d, uint64_t width, uint64_t *out) {
    uint64_t hi = (uint64_t)1 << (width - 1);
    uint64_t low = hi - 1;
    uint64_t value = 0;
    unsigned shift = 0;
    for (;;) {
        uint64_t chunk;
        if (rd_fixed(d, width, &chunk))
            return -1;
        uint64_t part = chunk & low;
        if (part) {
            if (shift >= 64 || (shift && (part >> (64 - shift)))) {
                d->big = 1; /* the reference keeps such values: let it decide */
                return MALFORMED(d, "value over 64 bits");
            }
            value |= part << shift;
        }
        if (!(chunk & hi))
            break;
        shift += (unsigned)(width - 1);
        if (shift > 64)
            return MALFORMED(d, "malformed VBR value");
    }
    *out = value;
    return 0;
}

/* VBR field: a value in one chunk (nearly all of them) takes the fast path. */
INLINE int rd_vbr(D *d, uint64_t width, uint64_t *out) {
    if (d->pos <= d->end && d->end - d->pos >= width) {
        uint64_t chunk = peek64(d, d->pos) & mask(width);
        if (!(chunk >> (width - 1))) {
            d->pos += width;
            *out = chunk;
            return 0;
        }
    }
    return rd_vbr_slow(d, width, out);
}

static void align32(D *d) {
    d->pos = (d->pos + 31) & ~(uint64_t)31;
}

INLINE int push_rec(D *d, uint64_t v) {
    if (d->rec.n < d->rec.cap) {
        d->rec.v[d->rec.n++] = v;
        return 0;
    }
    if (grow((void **)&d->rec.v, &d->rec.cap, d->rec.n + 1, sizeof(uint64_t)))
        return NOMEM(d);
    d->rec.v[d->rec.n++] = v;
    return 0;
}

/* ``count`` fields of at least ``width`` bits each must fit in what is left. */
static int fits(D *d, uint64_t count, uint64_t width) {
    if (d->pos > d->end || count > (d->end - d->pos) / width)
        return MALFORMED(d, "array runs past end of bitstream");
    return 0;
}

static const char CHAR6[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._";

/* ---- abbreviations -------------------------------------------------------------------- */

static int push_op(D *d, uint8_t enc, uint64_t width, uint8_t elt, uint64_t elt_w) {
    if (grow((void **)&d->ops, &d->capops, d->nops + 1, sizeof(Op)))
        return NOMEM(d);
    Op *op = &d->ops[d->nops++];
    op->enc = enc;
    op->width = width;
    op->elt = elt;
    op->elt_w = elt_w;
    return 0;
}

static int idx_push(D *d, IdxVec *list, uint32_t idx) {
    if (grow((void **)&list->v, &list->cap, list->n + 1, sizeof(uint32_t)))
        return NOMEM(d);
    list->v[list->n++] = idx;
    return 0;
}

/* Reads a DEFINE_ABBREV body; sets *idx to the new abbreviation. */
static int read_abbrev_def(D *d, uint32_t *idx) {
    uint64_t num_ops, i = 0, v;
    size_t start = d->nops;
    if (rd_vbr(d, 5, &num_ops))
        return -1;
    while (i < num_ops) {
        if (rd_fixed(d, 1, &v))
            return -1;
        if (v) {
            if (rd_vbr(d, 8, &v) || push_op(d, ENC_LITERAL, v, 0, 0))
                return -1;
            i++;
            continue;
        }
        uint64_t enc;
        if (rd_fixed(d, 3, &enc))
            return -1;
        if (enc == ENC_FIXED || enc == ENC_VBR) {
            uint64_t w;
            if (rd_vbr(d, 5, &w))
                return -1;
            if (w == 0) {
                if (push_op(d, ENC_LITERAL, 0, 0, 0))
                    return -1;
            } else if (w > 64 || (enc == ENC_VBR && w < 2)) {
                return MALFORMED(d, "bad abbreviation operand width");
            } else if (push_op(d, (uint8_t)enc, w, 0, 0)) {
                return -1;
            }
        } else if (enc == ENC_ARRAY) {
            if (num_ops < 2 || i != num_ops - 2)
                return MALFORMED(d, "array must be the next-to-last abbreviation operand");
            if (rd_fixed(d, 1, &v))
                return -1;
            if (v)
                return MALFORMED(d, "array element cannot be a literal");
            uint64_t elt, ew = 0;
            if (rd_fixed(d, 3, &elt))
                return -1;
            if (elt == ENC_FIXED || elt == ENC_VBR) {
                if (rd_vbr(d, 5, &ew))
                    return -1;
                if (ew == 0 || ew > 64 || (elt == ENC_VBR && ew < 2))
                    return MALFORMED(d, "bad array element width");
            } else if (elt != ENC_CHAR6) {
                return MALFORMED(d, "unsupported array element encoding");
            }
            if (push_op(d, ENC_ARRAY, 0, (uint8_t)elt, ew))
                return -1;
            i++;
        } else if (enc == ENC_CHAR6) {
            if (push_op(d, ENC_CHAR6, 6, 0, 0))
                return -1;
        } else if (enc == ENC_BLOB) {
            if (i != num_ops - 1)
                return MALFORMED(d, "blob must be the last abbreviation operand");
            if (push_op(d, ENC_BLOB, 0, 0, 0))
                return -1;
        } else {
            return MALFORMED(d, "unknown abbreviation encoding");
        }
        i++;
    }
    if (d->nops == start || d->ops[start].enc == ENC_ARRAY || d->ops[start].enc == ENC_BLOB)
        return MALFORMED(d, "abbreviation has no scalar record code");
    if (grow((void **)&d->abbrevs, &d->capabbrevs, d->nabbrevs + 1, sizeof(Abbrev)))
        return NOMEM(d);
    if (d->nabbrevs >= UINT32_MAX)
        return MALFORMED(d, "too many abbreviations");
    d->abbrevs[d->nabbrevs].off = start;
    d->abbrevs[d->nabbrevs].n = d->nops - start;
    *idx = (uint32_t)d->nabbrevs++;
    return 0;
}

static BlockInfo *find_info(D *d, uint64_t block_id) {
    uint64_t i;
    return map_get(&d->info_index, block_id, &i) ? &d->info[i] : NULL;
}

static int read_blockinfo(D *d, uint64_t width, uint64_t end_bit) {
    uint64_t outer = d->width;
    long current = -1;
    d->width = width;
    for (;;) {
        uint64_t id;
        if (rd_fixed(d, width, &id))
            return -1;
        if (id == 0) {
            align32(d);
            break;
        }
        if (id == 2) {
            uint32_t idx;
            if (current < 0)
                return MALFORMED(d, "BLOCKINFO abbreviation before SETBID");
            if (read_abbrev_def(d, &idx) || idx_push(d, &d->info[current].list, idx))
                return -1;
        } else if (id == 3) {
            uint64_t code, num, v, first = 0;
            if (rd_vbr(d, 6, &code) || rd_vbr(d, 6, &num) || (num && fits(d, num, 6)))
                return -1;
            for (uint64_t i = 0; i < num; i++) {
                if (rd_vbr(d, 6, &v))
                    return -1;
                if (i == 0)
                    first = v;
            }
            if (code == 1) {
                if (!num)
                    return MALFORMED(d, "empty SETBID record");
                BlockInfo *bi = find_info(d, first);
                if (!bi) {
                    if (grow((void **)&d->info, &d->capinfo, d->ninfo + 1, sizeof(BlockInfo)))
                        return NOMEM(d);
                    if (map_put(&d->info_index, first, d->ninfo))
                        return NOMEM(d);
                    bi = &d->info[d->ninfo++];
                    bi->block_id = first;
                    bi->list.v = NULL;
                    bi->list.n = bi->list.cap = 0;
                }
                current = (long)(bi - d->info);
            }
        } else if (id == 1) {
            return MALFORMED(d, "nested block inside BLOCKINFO");
        } else {
            return MALFORMED(d, "abbreviated record inside BLOCKINFO");
        }
    }
    if (d->pos != end_bit)
        return MALFORMED(d, "BLOCKINFO length word disagrees with its END_BLOCK");
    d->width = outer;
    return 0;
}

/* ---- records -------------------------------------------------------------------------- */

static int read_unabbreviated(D *d) {
    uint64_t num, v;
    if (rd_vbr(d, 6, &d->code) || rd_vbr(d, 6, &num))
        return -1;
    if (num && fits(d, num, 6))
        return -1;
    for (uint64_t i = 0; i < num; i++)
        if (rd_vbr(d, 6, &v) || push_rec(d, v))
            return -1;
    d->has_blob = 0;
    d->rec0 = 0;
    return 0;
}

static int read_abbreviated(D *d, uint64_t abbrev_id) {
    if (abbrev_id - 4 >= d->cur.n)
        return MALFORMED(d, "undefined abbreviation id");
    Abbrev ab = d->abbrevs[d->cur.v[abbrev_id - 4]];
    uint64_t v;
    d->has_blob = 0;
    for (size_t k = 0; k < ab.n; k++) {
        const Op op = d->ops[ab.off + k];
        switch (op.enc) {
        case ENC_LITERAL:
            if (push_rec(d, op.width))
                return -1;
            break;
        case ENC_FIXED:
            if (rd_fixed(d, op.width, &v) || push_rec(d, v))
                return -1;
            break;
        case ENC_VBR:
            if (rd_vbr(d, op.width, &v) || push_rec(d, v))
                return -1;
            break;
        case ENC_CHAR6:
            if (rd_fixed(d, 6, &v) || push_rec(d, (uint64_t)(unsigned char)CHAR6[v]))
                return -1;
            break;
        case ENC_ARRAY: {
            uint64_t count;
            if (rd_vbr(d, 6, &count))
                return -1;
            if (!count)
                break;
            uint64_t ew = op.elt == ENC_CHAR6 ? 6 : op.elt_w;
            if (fits(d, count, ew))
                return -1;
            if (grow((void **)&d->rec.v, &d->rec.cap, d->rec.n + count, sizeof(uint64_t)))
                return NOMEM(d);
            for (uint64_t i = 0; i < count; i++) {
                if (op.elt == ENC_VBR) {
                    if (rd_vbr(d, ew, &v))
                        return -1;
                } else {
                    if (rd_fixed(d, ew, &v))
                        return -1;
                    if (op.elt == ENC_CHAR6)
                        v = (uint64_t)(unsigned char)CHAR6[v];
                }
                d->rec.v[d->rec.n++] = v;
            }
            break;
        }
        default: { /* ENC_BLOB */
            uint64_t length;
            if (rd_vbr(d, 6, &length))
                return -1;
            align32(d);
            if (d->pos > d->end || length > (d->end - d->pos) / 8)
                return MALFORMED(d, "blob runs past end of bitstream");
            d->has_blob = 1;
            d->blob_off = (size_t)(d->pos >> 3);
            d->blob_len = (size_t)length;
            d->pos += length * 8;
            align32(d);
            break;
        }
        }
    }
    if (d->pos > d->end)
        return MALFORMED(d, "read past end of bitstream");
    /* vals[0] is the code: the first operand is never an array or a blob. */
    d->code = d->rec.v[0];
    d->rec0 = 1;
    return 0;
}

static void pop_frame(D *d) {
    Frame *f = &d->stack[--d->depth];
    free(d->cur.v);
    d->cur = f->abbrevs;
    d->width = f->width;
    d->pos = f->end_bit;
    d->block_id = f->block_id;
}

/* The cursor's advance(): one ENTER, END, RECORD or EOF; BLOCKINFO is consumed here. */
static int advance(D *d, int *kind) {
    for (;;) {
        if (!d->depth && (d->pos > d->end || d->end - d->pos < 32)) {
            *kind = K_EOF;
            return 0;
        }
        uint64_t id;
        if (rd_fixed(d, d->width, &id))
            return -1;
        if (id >= 3) {
            if (!d->depth)
                return MALFORMED(d, "record at top level");
            d->rec.n = 0;
            if (id == 3 ? read_unabbreviated(d) : read_abbreviated(d, id))
                return -1;
            d->block_id = d->stack[d->depth - 1].block_id;
            *kind = K_RECORD;
            return 0;
        }
        if (id == 1) {
            uint64_t block_id, new_width, num_words;
            if (rd_vbr(d, 8, &block_id) || rd_vbr(d, 4, &new_width))
                return -1;
            align32(d);
            if (rd_fixed(d, 32, &num_words))
                return -1;
            uint64_t end_bit = d->pos + num_words * 32;
            if (end_bit > d->end || new_width < 1 || new_width > 32)
                return MALFORMED(d, "malformed block header");
            if (block_id == 0) {
                if (read_blockinfo(d, new_width, end_bit))
                    return -1;
                continue;
            }
            if (grow((void **)&d->stack, &d->capstack, d->depth + 1, sizeof(Frame)))
                return NOMEM(d);
            IdxVec fresh = {NULL, 0, 0};
            BlockInfo *bi = find_info(d, block_id);
            if (bi && bi->list.n) {
                if (grow((void **)&fresh.v, &fresh.cap, bi->list.n, sizeof(uint32_t))) {
                    return NOMEM(d);
                }
                memcpy(fresh.v, bi->list.v, bi->list.n * sizeof(uint32_t));
                fresh.n = bi->list.n;
            }
            Frame *f = &d->stack[d->depth++];
            f->block_id = block_id;
            f->width = d->width;
            f->abbrevs = d->cur;
            f->end_bit = end_bit;
            d->cur = fresh;
            d->width = new_width;
            d->block_id = block_id;
            *kind = K_ENTER;
            return 0;
        }
        if (id == 0) {
            if (!d->depth)
                return MALFORMED(d, "END_BLOCK at top level");
            align32(d);
            if (d->pos != d->stack[d->depth - 1].end_bit)
                return MALFORMED(d, "block length word disagrees with its END_BLOCK");
            pop_frame(d);
            *kind = K_END;
            return 0;
        }
        /* DEFINE_ABBREV */
        if (!d->depth)
            return MALFORMED(d, "DEFINE_ABBREV at top level");
        uint32_t idx;
        if (read_abbrev_def(d, &idx) || idx_push(d, &d->cur, idx))
            return -1;
    }
}

/* ---- flat blocks ---------------------------------------------------------------------- */

typedef struct {
    Rec *v;
    size_t n, cap;
    U64Vec ops;
} Records;

static void records_free(Records *r) {
    free(r->v);
    free(r->ops.v);
}

/* The records of the block just entered; a nested block is not supported. */
static int flat_records(D *d, Records *out, const char *nested) {
    for (;;) {
        int kind;
        if (advance(d, &kind))
            return -1;
        if (kind == K_END)
            return 0;
        if (kind == K_ENTER)
            return UNSUPPORTED(d, nested);
        if (kind == K_EOF)
            return MALFORMED(d, "unterminated block");
        size_t n = d->rec.n - d->rec0;
        if (grow((void **)&out->v, &out->cap, out->n + 1, sizeof(Rec)) ||
            grow((void **)&out->ops.v, &out->ops.cap, out->ops.n + n, sizeof(uint64_t)))
            return NOMEM(d);
        Rec *r = &out->v[out->n++];
        r->code = d->code;
        r->off = out->ops.n;
        r->n = n;
        if (n)
            memcpy(out->ops.v + out->ops.n, d->rec.v + d->rec0, n * sizeof(uint64_t));
        out->ops.n += n;
        r->has_blob = d->has_blob;
        r->blob_off = d->blob_off;
        r->blob_len = d->blob_len;
    }
}

/* ---- canonical text ------------------------------------------------------------------- */

typedef struct {
    Buf text;    /* all parts, back to back */
    size_t *off; /* part i is text[off[i] : off[i + 1]) */
    size_t n, cap;
} Parts;

static int buf_grow(D *d, Buf *b, size_t n) {
    if (grow((void **)&b->v, &b->cap, b->n + n, 1))
        return NOMEM(d);
    return 0;
}


INLINE int buf_put(D *d, Buf *b, const char *s, size_t n) {
    if (b->cap - b->n < n && buf_grow(d, b, n))
        return -1;
    if (n)
        memcpy(b->v + b->n, s, n);
    b->n += n;
    return 0;
}

INLINE int buf_str(D *d, Buf *b, const char *s) {
    return buf_put(d, b, s, strlen(s));
}

static const char DIGITS2[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                              "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                              "8081828384858687888990919293949596979899";

/* Decimal text of v into the end of tmp[24]; returns its start. */
INLINE char *u64_text(uint64_t v, char *end) {
    char *p = end;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        p -= 2;
        memcpy(p, DIGITS2 + 2 * r, 2);
    }
    if (v >= 10) {
        p -= 2;
        memcpy(p, DIGITS2 + 2 * v, 2);
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

INLINE int buf_u64(D *d, Buf *b, uint64_t v) {
    char tmp[24];
    char *p = u64_text(v, tmp + sizeof tmp);
    return buf_put(d, b, p, (size_t)(tmp + sizeof tmp - p));
}

/* repr() of a tuple of ints. */
static int buf_tuple(D *d, Buf *b, const uint64_t *v, size_t n) {
    if (buf_str(d, b, "("))
        return -1;
    for (size_t i = 0; i < n; i++) {
        if ((i && buf_str(d, b, ", ")) || buf_u64(d, b, v[i]))
            return -1;
    }
    return buf_str(d, b, n == 1 ? ",)" : ")");
}

static int part_begin(D *d, Parts *p) {
    if (grow((void **)&p->off, &p->cap, p->n + 2, sizeof(size_t)))
        return NOMEM(d);
    if (p->n == 0)
        p->off[0] = p->text.n;
    return 0;
}

static void part_end(Parts *p) {
    p->off[++p->n] = p->text.n;
}

/* ---- the shard -------------------------------------------------------------------------- */

#define MODULE_BLOCK 8
#define MODULE_STRTAB_BLOCK 19
#define GLOBALVAL_SUMMARY_BLOCK 20
#define STRTAB_BLOCK 23

typedef struct {
    uint64_t modid;
    PyObject *repr_utf8; /* bytes: UTF-8 of repr(name) */
    int has_hash;
    uint64_t hash[5];
} Module;

typedef struct {
    D d;
    PyObject *module_digest;
    Parts parts;
    Module *mods;
    size_t nmods, capmods;
    int have_modules;
    Map mod_index; /* module id -> index in mods */
    Map guids;     /* value id -> index in gtext_off */
    Buf gtext;     /* decimal text of every GUID, back to back */
    size_t *gtext_off;
    uint64_t *gvals;
    size_t ng, capg, capg2;
} Canon;

static const Module *find_module(const Canon *c, uint64_t modid) {
    uint64_t i;
    return map_get(&c->mod_index, modid, &i) ? &c->mods[i] : NULL;
}

static int module_strtab(Canon *c, const Records *r) {
    D *d = &c->d;
    Module *last = NULL;
    for (size_t i = 0; i < r->n; i++) {
        const Rec *rec = &r->v[i];
        const uint64_t *ops = r->ops.v + rec->off;
        if (rec->has_blob)
            return UNSUPPORTED(d, "blob in MODULE_STRTAB_BLOCK");
        if (rec->code == 1) {
            if (!rec->n)
                return UNSUPPORTED(d, "empty MODULE_STRTAB entry");
            if (find_module(c, ops[0]))
                return UNSUPPORTED(d, "module id defined twice");
            for (size_t k = 1; k < rec->n; k++)
                if (ops[k] > 255)
                    return UNSUPPORTED(d, "module path is not a byte string");
            char *path = malloc(rec->n);
            if (!path)
                return NOMEM(d);
            for (size_t k = 1; k < rec->n; k++)
                path[k - 1] = (char)ops[k];
            PyObject *spath = PyUnicode_DecodeUTF8(path, (Py_ssize_t)(rec->n - 1), "surrogateescape");
            free(path);
            if (!spath)
                return fail(d, ST_PYERR, "");
            PyObject *digest = PyObject_CallOneArg(c->module_digest, spath);
            if (!digest) {
                Py_DECREF(spath);
                return fail(d, ST_PYERR, "");
            }
            PyObject *name = digest == Py_None ? PyUnicode_FromFormat("p:%U", spath)
                                               : PyUnicode_FromFormat("d:%S", digest);
            Py_DECREF(digest);
            Py_DECREF(spath);
            if (!name)
                return fail(d, ST_PYERR, "");
            PyObject *rep = PyObject_Repr(name);
            Py_DECREF(name);
            if (!rep)
                return fail(d, ST_PYERR, "");
            PyObject *utf8 = PyUnicode_AsEncodedString(rep, "utf-8", "surrogatepass");
            Py_DECREF(rep);
            if (!utf8)
                return fail(d, ST_PYERR, "");
            if (grow((void **)&c->mods, &c->capmods, c->nmods + 1, sizeof(Module))) {
                Py_DECREF(utf8);
                return NOMEM(d);
            }
            if (map_put(&c->mod_index, ops[0], c->nmods)) {
                Py_DECREF(utf8);
                return NOMEM(d);
            }
            last = &c->mods[c->nmods++];
            last->modid = ops[0];
            last->repr_utf8 = utf8;
            last->has_hash = 0;
        } else if (rec->code == 2) {
            if (!last || last->has_hash || rec->n != 5)
                return UNSUPPORTED(d, "MODULE_STRTAB hash without a module");
            last->has_hash = 1;
            memcpy(last->hash, ops, sizeof last->hash);
        } else {
            return UNSUPPORTED(d, "unknown MODULE_STRTAB record code");
        }
    }
    /* Two paths with one content digest: equal names (repr is injective). */
    if (c->nmods > 1) {
        PyObject *seen = PySet_New(NULL);
        if (!seen)
            return fail(d, ST_PYERR, "");
        for (size_t i = 0; i < c->nmods; i++)
            if (PySet_Add(seen, c->mods[i].repr_utf8)) {
                Py_DECREF(seen);
                return fail(d, ST_PYERR, "");
            }
        Py_ssize_t distinct = PySet_GET_SIZE(seen);
        Py_DECREF(seen);
        if ((size_t)distinct != c->nmods)
            return UNSUPPORTED(d, "two module paths share one content digest");
    }
    Buf *t = &c->parts.text;
    for (size_t i = 0; i < c->nmods; i++) {
        const Module *m = &c->mods[i];
        if (part_begin(d, &c->parts) || buf_str(d, t, "('module', ") ||
            buf_put(d, t, PyBytes_AS_STRING(m->repr_utf8), (size_t)PyBytes_GET_SIZE(m->repr_utf8)) ||
            buf_str(d, t, ", ") ||
            (m->has_hash ? buf_tuple(d, t, m->hash, 5) : buf_str(d, t, "None")) ||
            buf_str(d, t, ")"))
            return -1;
        part_end(&c->parts);
    }
    c->have_modules = 1;
    return 0;
}

INLINE int put_guid(Canon *c, Buf *t, uint64_t valueid) {
    uint64_t i;
    if (!map_get(&c->guids, valueid, &i))
        return UNSUPPORTED(&c->d, "value id has no VALUE_GUID");
    return buf_put(&c->d, t, c->gtext.v + c->gtext_off[i], c->gtext_off[i + 1] - c->gtext_off[i]);
}

static int put_module(Canon *c, Buf *t, uint64_t modid) {
    const Module *m = find_module(c, modid);
    if (!m)
        return UNSUPPORTED(&c->d, "module id not in MODULE_STRTAB");
    return buf_put(&c->d, t, PyBytes_AS_STRING(m->repr_utf8), (size_t)PyBytes_GET_SIZE(m->repr_utf8));
}

/* repr() of a tuple of GUIDs for the given value ids. */
static int put_guid_tuple(Canon *c, Buf *t, const uint64_t *ids, size_t n) {
    D *d = &c->d;
    if (buf_str(d, t, "("))
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((i && buf_str(d, t, ", ")) || put_guid(c, t, ids[i]))
            return -1;
    return buf_str(d, t, n == 1 ? ",)" : ")");
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* FS_COMBINED[_PROFILE] as the reference's _function() tuple. */
static int put_function(Canon *c, Buf *t, uint64_t code, const uint64_t *ops, size_t n) {
    D *d = &c->d;
    if (n < 9)
        return UNSUPPORTED(d, "short function summary record");
    uint64_t numrefs = ops[6], rorefs = ops[7], worefs = ops[8];
    if (numrefs > n - 9 || rorefs > numrefs || worefs > numrefs - rorefs)
        return UNSUPPORTED(d, "function summary ref counts do not fit the record");
    size_t calls_start = 9 + (size_t)numrefs;
    const uint64_t *tail = ops + calls_start;
    size_t ntail = n - calls_start;
    if (code == 5 && ntail % 2)
        return UNSUPPORTED(d, "odd callee list in COMBINED_PROFILE");
    if (buf_str(d, t, "(") || buf_u64(d, t, code) || buf_str(d, t, ", ") ||
        put_guid(c, t, ops[0]) || buf_str(d, t, ", ") || put_module(c, t, ops[1]))
        return -1;
    for (int k = 2; k <= 5; k++)
        if (buf_str(d, t, ", ") || buf_u64(d, t, ops[k]))
            return -1;
    if (buf_str(d, t, ", ") || buf_u64(d, t, rorefs) || buf_str(d, t, ", ") ||
        buf_u64(d, t, worefs) || buf_str(d, t, ", ") ||
        put_guid_tuple(c, t, ops + 9, (size_t)numrefs) || buf_str(d, t, ", "))
        return -1;
    if (code == 5) {
        size_t ncalls = ntail / 2;
        if (buf_str(d, t, "("))
            return -1;
        for (size_t i = 0; i < ncalls; i++) {
            if ((i && buf_str(d, t, ", ")) || buf_str(d, t, "(") ||
                put_guid(c, t, tail[2 * i]) || buf_str(d, t, ", ") ||
                buf_u64(d, t, tail[2 * i + 1]) || buf_str(d, t, ")"))
                return -1;
        }
        if (buf_str(d, t, ncalls == 1 ? ",)" : ")"))
            return -1;
    } else if (put_guid_tuple(c, t, tail, ntail)) {
        return -1;
    }
    return buf_str(d, t, ")");
}

static int is_prefix(uint64_t code) {
    return code >= 11 && code <= 15;
}

static int summary(Canon *c, const Records *r) {
    D *d = &c->d;
    Buf *t = &c->parts.text;
    int have_version = 0;
    uint64_t version = 0;
    for (size_t i = 0; i < r->n; i++) {
        const Rec *rec = &r->v[i];
        const uint64_t *ops = r->ops.v + rec->off;
        if (rec->has_blob)
            return UNSUPPORTED(d, "blob in summary record");
        if (rec->code == 10) {
            if (have_version || rec->n != 1)
                return UNSUPPORTED(d, "repeated or malformed summary VERSION");
            have_version = 1;
            version = ops[0];
        } else if (rec->code == 16) {
            uint64_t g;
            if (rec->n == 3) {
                if (ops[1] >> 32) {
                    d->big = 1; /* the GUID would not fit 64 bits */
                    return MALFORMED(d, "GUID over 64 bits");
                }
                g = (ops[1] << 32) | ops[2];
            } else if (rec->n == 2) {
                g = ops[1];
            } else {
                return UNSUPPORTED(d, "malformed VALUE_GUID record");
            }
            uint64_t old;
            if (map_get(&c->guids, ops[0], &old))
                return UNSUPPORTED(d, "value id mapped twice");
            if (grow((void **)&c->gtext_off, &c->capg, c->ng + 2, sizeof(size_t)) ||
                grow((void **)&c->gvals, &c->capg2, c->ng + 1, sizeof(uint64_t)) ||
                map_put(&c->guids, ops[0], c->ng))
                return NOMEM(d);
            if (c->ng == 0)
                c->gtext_off[0] = 0;
            if (buf_u64(d, &c->gtext, g))
                return -1;
            c->gvals[c->ng++] = g;
            c->gtext_off[c->ng] = c->gtext.n;
        }
    }
    if (!have_version)
        return UNSUPPORTED(d, "summary block has no VERSION record");
    if (version != 12)
        return UNSUPPORTED(d, "unsupported summary version");
    if (part_begin(d, &c->parts) || buf_str(d, t, "('summary-version', 12)"))
        return -1;
    part_end(&c->parts);
    {
        uint64_t *sorted = malloc((c->ng ? c->ng : 1) * sizeof(uint64_t));
        if (!sorted)
            return NOMEM(d);
        size_t k = c->ng;
        if (k)
            memcpy(sorted, c->gvals, k * sizeof(uint64_t));
        qsort(sorted, k, sizeof(uint64_t), cmp_u64);
        int bad = part_begin(d, &c->parts) || buf_str(d, t, "('guids', ") ||
                  buf_tuple(d, t, sorted, k) || buf_str(d, t, ")");
        free(sorted);
        if (bad)
            return -1;
        part_end(&c->parts);
    }
    /* Groups: pending prefix records + one summary record (+ ORIGINAL_NAME records). */
    Buf pending = {NULL, 0, 0};
    size_t npending = 0;
    Buf group = {NULL, 0, 0};
    size_t ngroup = 0; /* items in the open group; 0: no group yet */
    int rc = 0;
#define CHECK(x)        \
    do {                \
        if (x) {        \
            rc = -1;    \
            goto done;  \
        }               \
    } while (0)
#define FLUSH_GROUP()                                                                     \
    do {                                                                                  \
        if (ngroup) {                                                                     \
            CHECK(part_begin(d, &c->parts) || buf_str(d, t, "('summary', (") ||            \
                  buf_put(d, t, group.v, group.n) || buf_str(d, t, ngroup == 1 ? ",))" : "))")); \
            part_end(&c->parts);                                                          \
        }                                                                                 \
        group.n = 0;                                                                      \
        ngroup = 0;                                                                       \
    } while (0)
    for (size_t i = 0; i < r->n; i++) {
        const Rec *rec = &r->v[i];
        const uint64_t *ops = r->ops.v + rec->off;
        uint64_t code = rec->code;
        if (code == 10 || code == 16)
            continue;
        if (code == 20 || code == 24) {
            CHECK(part_begin(d, &c->parts) || buf_str(d, t, "('summary-record', ") ||
                  buf_u64(d, t, code) || buf_str(d, t, ", ") || buf_tuple(d, t, ops, rec->n) ||
                  buf_str(d, t, ")"));
            part_end(&c->parts);
        } else if (is_prefix(code)) {
            CHECK((npending && buf_str(d, &pending, ", ")) || buf_str(d, &pending, "(") ||
                  buf_u64(d, &pending, code) || buf_str(d, &pending, ", ") ||
                  buf_tuple(d, &pending, ops, rec->n) || buf_str(d, &pending, ")"));
            npending++;
        } else if (code == 4 || code == 5 || code == 6 || code == 8) {
            if (code == 6 && rec->n < 4)
                CHECK(UNSUPPORTED(d, "short COMBINED_GLOBALVAR_INIT_REFS record"));
            if (code == 8 && rec->n != 4)
                CHECK(UNSUPPORTED(d, "malformed COMBINED_ALIAS record"));
            FLUSH_GROUP();
            CHECK(buf_put(d, &group, pending.v, pending.n));
            ngroup = npending + 1;
            if (npending)
                CHECK(buf_str(d, &group, ", "));
            pending.n = 0;
            npending = 0;
            if (code == 4 || code == 5) {
                CHECK(put_function(c, &group, code, ops, rec->n));
            } else if (code == 6) {
                CHECK(buf_str(d, &group, "(6, ") || put_guid(c, &group, ops[0]) ||
                      buf_str(d, &group, ", ") || put_module(c, &group, ops[1]) ||
                      buf_str(d, &group, ", ") || buf_u64(d, &group, ops[2]) ||
                      buf_str(d, &group, ", ") || buf_u64(d, &group, ops[3]) ||
                      buf_str(d, &group, ", ") || put_guid_tuple(c, &group, ops + 4, rec->n - 4) ||
                      buf_str(d, &group, ")"));
            } else {
                CHECK(buf_str(d, &group, "(8, ") || put_guid(c, &group, ops[0]) ||
                      buf_str(d, &group, ", ") || put_module(c, &group, ops[1]) ||
                      buf_str(d, &group, ", ") || buf_u64(d, &group, ops[2]) ||
                      buf_str(d, &group, ", ") || put_guid(c, &group, ops[3]) ||
                      buf_str(d, &group, ")"));
            }
        } else if (code == 9) {
            if (!ngroup || npending)
                CHECK(UNSUPPORTED(d, "COMBINED_ORIGINAL_NAME without a summary"));
            CHECK(buf_str(d, &group, ", (9, ") || buf_tuple(d, &group, ops, rec->n) ||
                  buf_str(d, &group, ")"));
            ngroup++;
        } else {
            CHECK(UNSUPPORTED(d, "unsupported summary record code"));
        }
    }
    if (npending)
        CHECK(UNSUPPORTED(d, "type-test records without a following function summary"));
    FLUSH_GROUP();
done:
#undef CHECK
#undef FLUSH_GROUP
    free(pending.v);
    free(group.v);
    return rc;
}

static int module_block(Canon *c) {
    D *d = &c->d;
    Records summ = {NULL, 0, 0, {NULL, 0, 0}};
    int have_summary = 0;
    int rc = -1;
    for (;;) {
        int kind;
        if (advance(d, &kind))
            goto out;
        if (kind == K_END)
            break;
        if (kind == K_ENTER) {
            if (d->block_id == MODULE_STRTAB_BLOCK && !c->have_modules) {
                Records mst = {NULL, 0, 0, {NULL, 0, 0}};
                int bad = flat_records(d, &mst, "unknown sub-block in MODULE_STRTAB_BLOCK") ||
                          module_strtab(c, &mst);
                records_free(&mst);
                if (bad)
                    goto out;
            } else if (d->block_id == GLOBALVAL_SUMMARY_BLOCK && !have_summary) {
                if (flat_records(d, &summ, "unknown sub-block in GLOBALVAL_SUMMARY_BLOCK"))
                    goto out;
                have_summary = 1;
            } else {
                UNSUPPORTED(d, "unexpected block in MODULE_BLOCK");
                goto out;
            }
            continue;
        }
        if (kind == K_EOF) {
            MALFORMED(d, "unterminated MODULE_BLOCK");
            goto out;
        }
        if (d->code != 1 || d->has_blob) {
            UNSUPPORTED(d, "unknown MODULE_BLOCK record code");
            goto out;
        }
        Buf *t = &c->parts.text;
        if (part_begin(d, &c->parts) || buf_str(d, t, "('module-version', ") ||
            buf_tuple(d, t, d->rec.v + d->rec0, d->rec.n - d->rec0) || buf_str(d, t, ")"))
            goto out;
        part_end(&c->parts);
    }
    if (!have_summary) {
        UNSUPPORTED(d, "no GLOBALVAL_SUMMARY_BLOCK");
        goto out;
    }
    rc = summary(c, &summ);
out:
    records_free(&summ);
    return rc;
}

static int shard(Canon *c) {
    D *d = &c->d;
    int seen_module = 0;
    for (;;) {
        int kind;
        if (advance(d, &kind))
            return -1;
        if (kind == K_EOF)
            break;
        if (kind != K_ENTER)
            return UNSUPPORTED(d, "unexpected top-level entry");
        if (d->block_id == MODULE_BLOCK) {
            if (seen_module)
                return UNSUPPORTED(d, "more than one MODULE_BLOCK");
            seen_module = 1;
            if (module_block(c))
                return -1;
        } else if (d->block_id == STRTAB_BLOCK) {
            Records st = {NULL, 0, 0, {NULL, 0, 0}};
            if (flat_records(d, &st, "unknown sub-block in STRTAB_BLOCK")) {
                records_free(&st);
                return -1;
            }
            for (size_t i = 0; i < st.n; i++) {
                const Rec *rec = &st.v[i];
                if (rec->code != 1 || rec->n) {
                    records_free(&st);
                    return UNSUPPORTED(d, "unknown STRTAB record code");
                }
                Buf *t = &c->parts.text;
                int bad = part_begin(d, &c->parts) || buf_str(d, t, "('strtab', ");
                if (!bad && !rec->has_blob) {
                    bad = buf_str(d, t, "None");
                } else if (!bad) {
                    PyObject *blob = PyBytes_FromStringAndSize(
                        (const char *)d->data + rec->blob_off, (Py_ssize_t)rec->blob_len);
                    PyObject *rep = blob ? PyObject_Repr(blob) : NULL;
                    Py_XDECREF(blob);
                    Py_ssize_t n;
                    const char *s = rep ? PyUnicode_AsUTF8AndSize(rep, &n) : NULL;
                    if (!s)
                        bad = fail(d, ST_PYERR, "");
                    else
                        bad = buf_put(d, t, s, (size_t)n);
                    Py_XDECREF(rep);
                }
                if (bad || buf_str(d, t, ")")) {
                    records_free(&st);
                    return -1;
                }
                part_end(&c->parts);
            }
            records_free(&st);
        } else {
            return UNSUPPORTED(d, "unknown top-level block");
        }
    }
    if (!seen_module)
        return UNSUPPORTED(d, "no MODULE_BLOCK");
    return 0;
}

/* bitcode_payload(): skip a wrapper header, check the magic; sets pos and end in bits. */
static int payload(D *d) {
    const uint8_t *p = d->data;
    uint64_t start = 0, end = d->len;
#define U32(o) ((uint64_t)p[o] | (uint64_t)p[(o) + 1] << 8 | (uint64_t)p[(o) + 2] << 16 | (uint64_t)p[(o) + 3] << 24)
    if (d->len >= 20 && U32(0) == 0x0B17C0DEu) {
        uint64_t offset = U32(8), size = U32(12);
        if (offset + size > d->len || offset < 20)
            return MALFORMED(d, "bitcode wrapper header points outside the file");
        start = offset;
        end = offset + size;
    }
#undef U32
    if (start + 4 > d->len || memcmp(p + start, "BC\xc0\xde", 4))
        return MALFORMED(d, "not LLVM bitcode (missing 'BC' 0xC0DE magic)");
    if ((end - start) % 4)
        return MALFORMED(d, "bitcode size is not a multiple of 4 bytes");
    d->pos = (start + 4) * 8;
    d->end = end * 8;
    return 0;
}

typedef struct {
    const char *text;
    const size_t *off;
} SortCtx;

static SortCtx *sort_ctx; /* qsort has no context argument in C99: set under the GIL */

static int cmp_idx(const void *a, const void *b) {
    const SortCtx *s = sort_ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    size_t ni = s->off[i + 1] - s->off[i], nj = s->off[j + 1] - s->off[j];
    int r = memcmp(s->text + s->off[i], s->text + s->off[j], ni < nj ? ni : nj);
    if (r)
        return r;
    return ni < nj ? -1 : ni > nj;
}

static void canon_free(Canon *c) {
    D *d = &c->d;
    free(d->ops);
    free(d->abbrevs);
    free(d->cur.v);
    for (size_t i = 0; i < d->depth; i++)
        free(d->stack[i].abbrevs.v);
    free(d->stack);
    for (size_t i = 0; i < d->ninfo; i++)
        free(d->info[i].list.v);
    free(d->info);
    free(d->rec.v);
    free(c->parts.text.v);
    free(c->parts.off);
    for (size_t i = 0; i < c->nmods; i++)
        Py_DECREF(c->mods[i].repr_utf8);
    free(c->mods);
    map_free(&c->guids);
    free(c->gtext.v);
    free(c->gtext_off);
    free(c->gvals);
    map_free(&c->mod_index);
    map_free(&d->info_index);
}

static PyObject *canonical_body(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *module_digest;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O:canonical_body", &view, &module_digest))
        return NULL;
    Canon c;
    memset(&c, 0, sizeof c);
    c.d.data = view.buf;
    c.d.len = (size_t)view.len;
    c.d.width = 2;
    c.module_digest = module_digest;
    PyObject *result = NULL;
    int bad = payload(&c.d) || shard(&c);
    if (c.d.status == ST_PYERR) {
        /* The reference propagates a failing module_digest; let it do so (or not). */
        PyErr_Clear();
        result = Py_None;
        Py_INCREF(result);
    } else if (c.d.status == ST_NOMEM) {
        result = PyErr_NoMemory();
    } else if (c.d.big) {
        result = Py_None; /* some value needs more than 64 bits: the reference decides */
        Py_INCREF(result);
    } else if (bad) {
        if (c.d.status == ST_MALFORMED)
            result = PyUnicode_FromFormat("malformed bitcode: %s", c.d.reason);
        else
            result = PyUnicode_FromString(c.d.reason);
    } else {
        size_t n = c.parts.n, total = n ? n - 1 : 0;
        size_t *order = malloc((n ? n : 1) * sizeof(size_t));
        if (!order) {
            result = PyErr_NoMemory();
        } else {
            for (size_t i = 0; i < n; i++) {
                order[i] = i;
                total += c.parts.off[i + 1] - c.parts.off[i];
            }
            SortCtx s = {c.parts.text.v, c.parts.off};
            sort_ctx = &s;
            qsort(order, n, sizeof(size_t), cmp_idx);
            sort_ctx = NULL;
            result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
            if (result) {
                char *out = PyBytes_AS_STRING(result);
                for (size_t k = 0; k < n; k++) {
                    size_t i = order[k], len = c.parts.off[i + 1] - c.parts.off[i];
                    if (k)
                        *out++ = '\n';
                    memcpy(out, c.parts.text.v + c.parts.off[i], len);
                    out += len;
                }
            }
            free(order);
        }
    }
    canon_free(&c);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"canonical_body", canonical_body, METH_VARARGS,
     "canonical_body(data, module_digest) -> bytes (canonical text) | str (why not) | None "
     "(ask the reference)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_shard", "Native canonical form of DTLTO summary shards.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__shard(void) {
    return PyModule_Create(&module);
}
