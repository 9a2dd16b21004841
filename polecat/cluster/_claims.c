/* polecat.cluster._claims: the band slices of polecat/cluster/claims.py (rule 9) and a near book's scans
 * (rule 10: the closest base, the settling bases a claim unsettles) in C.
 *
 * claims.py is the specification: band_slices(index, slices) gives what its _slices gives, the slice of
 * each of the 4 band keys of fingerprint index ``index``:
 *
 * 1. Band key b (polecat/dedup/nearindex.py's layout): the 3 bytes (b, bits 16b+8..16b+15 of the index,
 *    bits 16b..16b+7), b = 0..3. Only the low 64 bits of the index are read, as Python's shifts and
 *    masks read them (a negative or wider int is taken modulo 2**64, two's complement).
 * 2. Its slice: the 4-byte BLAKE2b digest of the key (hashlib.blake2b(key, digest_size=4), no key, no
 *    salt, no personalisation: RFC 7693), read big-endian, modulo ``slices``.
 *
 * A 3-byte message is one BLAKE2b block (zero-padded, the last), so the hash is one compression with
 * a message whose words 1-15 are zero.
 *
 * closest(bands, keys, claim, settling, max_distance, max_bins, verify_bytes) gives what claims.py's
 * _scan gives (the same bases in the same order, the same comparisons, so the same ties):
 *
 * 3. The bases listed under ``keys`` in ``bands`` (key -> list of bases), each once, in key then list
 *    order; one with the claim's URL or fetch order is skipped, and one more than ``max_distance`` index
 *    bits away.
 * 4. A base fetched after the claim whose (claimer, digest) is not in ``settling`` is a later candidate;
 *    one fetched before is ranked: (sketch bins, index bits), bins counted over the first
 *    ``verify_bytes`` bytes of the two sketches (the shorter zero-extended, as minhash.verify_distance
 *    reads them), kept when bins <= max_bins and (rank, order) is below the best's.
 * 5. The best earlier one, or (none) the best later one, as (base, (bins, bits)); the other None.
 *
 * unsettled_in_bands(bands, keys, settling, claim, max_distance, max_bins, verify_bytes) gives what
 * claims.py's _unsettled gives (a near claim's pass over the bases still settling, rule 10; one call a
 * claim, not a Python turn a base):
 *
 * 6. The bases listed under ``keys`` in ``bands``, each once, in key then list order (rule 3's walk),
 *    whose claim is at most ``max_distance`` index bits from ``claim``, fetched after it (its
 *    (fetched_at, url) above the claim's), of another URL, within ``max_bins`` sketch bins (rule 4's
 *    count) and whose (claimer, digest) is in ``settling``, as a list of (key, claim); the tests in that
 *    order, the index bits first (they rule out nearly every base), ``settling`` read for a match alone.
 * 7. closest's skip tests of rule 3 are pure (no exception for the records claims.py makes), so the
 *    kernel makes the index bits test first, before reading the URL and the fetch order: it rules out
 *    most bases of a band, and the answer is the same in any order.
 * 8. band_keys(index) gives the 4 band keys of rule 1 as bytes, in band order:
 *    ``tuple(nearindex.band_keys(index))``, which claims.py's _keys asks once for each fingerprint met
 *    (a claim's scan, its base's bands).
 *
 * Nothing here reads a peer's bytes (the claims were checked by claimwire.py; an index wider than 64
 * bits takes Python's own int path). Sketches must be bytes (TypeError otherwise). Comparisons are of
 * builtin floats, strings and tuples, so no Python code runs during the scan; each base is held by a
 * reference while it is read. The GIL is held throughout; nothing is shared between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BANDS 4

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotr64(uint64_t x, int r) { return (x >> r) | (x << (64 - r)); }

#define G(a, b, c, d, x, y)              \
    do {                                 \
        v[a] = v[a] + v[b] + (x);        \
        v[d] = rotr64(v[d] ^ v[a], 32);  \
        v[c] = v[c] + v[d];              \
        v[b] = rotr64(v[b] ^ v[c], 24);  \
        v[a] = v[a] + v[b] + (y);        \
        v[d] = rotr64(v[d] ^ v[a], 16);  \
        v[c] = v[c] + v[d];              \
        v[b] = rotr64(v[b] ^ v[c], 63);  \
    } while (0)

/* Rule 2: the 4-byte BLAKE2b digest of the 3-byte key k0 k1 k2, as a big-endian integer. */
static uint32_t blake2b_32(uint8_t k0, uint8_t k1, uint8_t k2) {
    uint64_t m[16] = {0};
    uint64_t v[16];
    /* Parameter block: digest length 4, key length 0, fanout 1, depth 1. */
    uint64_t h0 = IV[0] ^ 0x01010000ULL ^ 4ULL;
    m[0] = (uint64_t)k0 | (uint64_t)k1 << 8 | (uint64_t)k2 << 16;
    v[0] = h0;
    for (int i = 1; i < 8; i++) v[i] = IV[i];
    for (int i = 0; i < 8; i++) v[8 + i] = IV[i];
    v[12] ^= 3;   /* bytes hashed */
    v[14] = ~v[14];  /* the last block */
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = SIGMA[r];
        G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    h0 ^= v[0] ^ v[8];
    /* The digest's bytes are h0's, little-endian; read big-endian. */
    return (uint32_t)(h0 & 0xff) << 24 | (uint32_t)(h0 >> 8 & 0xff) << 16 | (uint32_t)(h0 >> 16 & 0xff) << 8
           | (uint32_t)(h0 >> 24 & 0xff);
}

static PyObject *band_slices(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "band_slices(index, slices) takes 2 arguments");
        return NULL;
    }
    if (!PyLong_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "band_slices(): index must be an int");
        return NULL;
    }
    uint64_t index = PyLong_AsUnsignedLongLongMask(args[0]); /* rule 1: the low 64 bits */
    if (index == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t slices = PyLong_AsSsize_t(args[1]);
    if (slices == -1 && PyErr_Occurred()) return NULL;
    if (slices <= 0 || (uint64_t)slices > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "band_slices(): slices must be in 1..2**32-1");
        return NULL;
    }
    PyObject *out = PyTuple_New(BANDS);
    if (out == NULL) return NULL;
    for (int b = 0; b < BANDS; b++) {
        uint32_t digest = blake2b_32((uint8_t)b, (uint8_t)(index >> (16 * b + 8)), (uint8_t)(index >> (16 * b)));
        PyObject *slice = PyLong_FromUnsignedLong((unsigned long)(digest % (uint64_t)slices));
        if (slice == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, b, slice);
    }
    return out;
}

static PyObject *band_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyLong_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "band_keys(index) takes an int");
        return NULL;
    }
    uint64_t index = PyLong_AsUnsignedLongLongMask(args[0]); /* rule 1: the low 64 bits */
    if (index == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    PyObject *out = PyTuple_New(BANDS);
    if (out == NULL) return NULL;
    for (int b = 0; b < BANDS; b++) {
        const char key[3] = {(char)b, (char)(uint8_t)(index >> (16 * b + 8)), (char)(uint8_t)(index >> (16 * b))};
        PyObject *k = PyBytes_FromStringAndSize(key, 3);
        if (k == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, b, k);
    }
    return out;
}

static PyObject *S_CLAIM, *S_ORDER, *S_CLAIMER, *S_URL, *S_INDEX, *S_VERIFY, *S_DIGEST, *S_FETCHED_AT,
    *S_BIT_COUNT;

/* Rule 3: the index bits between two fingerprints; -1 with an exception set on error. */
static Py_ssize_t index_bits(PyObject *a, PyObject *b) {
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        unsigned long long x = PyLong_AsUnsignedLongLong(a);
        if (!(x == (unsigned long long)-1 && PyErr_Occurred())) {
            unsigned long long y = PyLong_AsUnsignedLongLong(b);
            if (!(y == (unsigned long long)-1 && PyErr_Occurred())) return __builtin_popcountll(x ^ y);
        }
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
    }
    PyObject *x = PyNumber_Xor(a, b);
    if (x == NULL) return -1;
    PyObject *n = PyObject_CallMethodNoArgs(x, S_BIT_COUNT);
    Py_DECREF(x);
    if (n == NULL) return -1;
    Py_ssize_t bits = PyLong_AsSsize_t(n);
    Py_DECREF(n);
    return bits;
}

/* Rule 4: the sketch bins that differ; -1 with an exception set on error. */
static Py_ssize_t sketch_bins(PyObject *a, PyObject *b, Py_ssize_t verify_bytes) {
    if (!PyBytes_Check(a) || !PyBytes_Check(b)) {
        PyErr_SetString(PyExc_TypeError, "closest(): sketches must be bytes");
        return -1;
    }
    const uint8_t *pa = (const uint8_t *)PyBytes_AS_STRING(a), *pb = (const uint8_t *)PyBytes_AS_STRING(b);
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b), bins = 0, i = 0;
    /* Whole words while both sketches have them: a bin's two bits never straddle a byte, so a word's
     * pairs are its bytes' pairs in either byte order. */
    for (; i + 8 <= verify_bytes && i + 8 <= la && i + 8 <= lb; i += 8) {
        uint64_t x, y;
        memcpy(&x, pa + i, 8);
        memcpy(&y, pb + i, 8);
        uint64_t d = x ^ y;
        bins += __builtin_popcountll((d | d >> 1) & 0x5555555555555555ULL);
    }
    for (; i < verify_bytes; i++) {
        unsigned d = (unsigned)(i < la ? pa[i] : 0) ^ (unsigned)(i < lb ? pb[i] : 0);
        bins += __builtin_popcount((d | d >> 1) & 0x55u);
    }
    return bins;
}

/* A ranked candidate: its base (a new reference) and rank. */
typedef struct {
    PyObject *base;
    Py_ssize_t bins, bits;
} Match;

/* Rule 4: ``best`` becomes ``base`` when it passes the sketch test and ranks below; 0, or -1 on error. */
static int better(Match *best, PyObject *base, PyObject *claim_verify, Py_ssize_t bits, Py_ssize_t max_bins,
                  Py_ssize_t verify_bytes) {
    PyObject *o = PyObject_GetAttr(base, S_CLAIM);
    if (o == NULL) return -1;
    PyObject *verify = PyObject_GetAttr(o, S_VERIFY);
    Py_DECREF(o);
    if (verify == NULL) return -1;
    Py_ssize_t bins = sketch_bins(claim_verify, verify, verify_bytes);
    Py_DECREF(verify);
    if (bins < 0) return -1;
    if (bins > max_bins) return 0;
    int below = best->base == NULL || bins < best->bins || (bins == best->bins && bits < best->bits);
    if (!below && bins == best->bins && bits == best->bits) {
        PyObject *order = PyObject_GetAttr(base, S_ORDER);
        if (order == NULL) return -1;
        PyObject *best_order = PyObject_GetAttr(best->base, S_ORDER);
        if (best_order == NULL) {
            Py_DECREF(order);
            return -1;
        }
        below = PyObject_RichCompareBool(order, best_order, Py_LT);
        Py_DECREF(order);
        Py_DECREF(best_order);
        if (below < 0) return -1;
    }
    if (below) {
        Py_INCREF(base);
        Py_XSETREF(best->base, base);
        best->bins = bins;
        best->bits = bits;
    }
    return 0;
}

static PyObject *match_or_none(Match *m) {
    if (m->base == NULL) Py_RETURN_NONE;
    return Py_BuildValue("(O(nn))", m->base, m->bins, m->bits);
}

/* A growable array of new references (a claim's band-mates, rules 3 and 6; the later candidates, rule 4). */
typedef struct {
    PyObject **items;
    Py_ssize_t *bits;
    Py_ssize_t len, cap;
} Bases;

static int bases_push(Bases *b, PyObject *base, Py_ssize_t bits) {
    if (b->len == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 16;
        PyObject **items = PyMem_Realloc(b->items, (size_t)cap * sizeof(PyObject *));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->items = items;
        Py_ssize_t *nbits = PyMem_Realloc(b->bits, (size_t)cap * sizeof(Py_ssize_t));
        if (nbits == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->bits = nbits;
        b->cap = cap;
    }
    Py_INCREF(base);
    b->items[b->len] = base;
    b->bits[b->len++] = bits;
    return 0;
}

/* A linear look: a claim's bands list at most BANDS x claims.py's BAND_BASES (256) bases. */
static int bases_has(Bases *b, PyObject *base) {
    for (Py_ssize_t i = 0; i < b->len; i++)
        if (b->items[i] == base) return 1;
    return 0;
}

static void bases_free(Bases *b) {
    for (Py_ssize_t i = 0; i < b->len; i++) Py_DECREF(b->items[i]);
    PyMem_Free(b->items);
    PyMem_Free(b->bits);
}

/* Rules 3 and 6's walk: the bases listed under ``keys`` in ``bands``, each once, in key then list order,
 * held in ``mates``; -1 with TypeError (naming ``who``) when a band is not a list. */
static int band_mates(PyObject *bands, PyObject *keys, const char *who, Bases *mates) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys); k++) {
        PyObject *band = PyDict_GetItemWithError(bands, PyTuple_GET_ITEM(keys, k));
        if (band == NULL) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        if (!PyList_Check(band)) {
            PyErr_Format(PyExc_TypeError, "%s(): a band is a list of bases", who);
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(band); i++) {
            PyObject *base = PyList_GET_ITEM(band, i);
            if (!bases_has(mates, base) && bases_push(mates, base, 0) < 0) return -1;
        }
    }
    return 0;
}

/* Rule 3 for one base: 1 when it is skipped, 0 when ranked or listed later, -1 on error. */
static int scan_base(PyObject *base, PyObject *url, PyObject *index, PyObject *verify, PyObject *order,
                     PyObject *settling, Py_ssize_t max_distance, Py_ssize_t max_bins, Py_ssize_t verify_bytes,
                     Match *best, Bases *later) {
    int result = -1;
    PyObject *o = PyObject_GetAttr(base, S_CLAIM), *base_order = NULL, *o_url = NULL, *o_index = NULL;
    if (o == NULL) goto done;
    o_index = PyObject_GetAttr(o, S_INDEX);
    if (o_index == NULL) goto done;
    Py_ssize_t bits = index_bits(o_index, index); /* rule 7: first */
    if (bits < 0) goto done;
    if (bits > max_distance) {
        result = 1;
        goto done;
    }
    o_url = PyObject_GetAttr(o, S_URL);
    if (o_url == NULL) goto done;
    int same = PyObject_RichCompareBool(o_url, url, Py_EQ);
    if (same < 0) goto done;
    if (same) {
        result = 1;
        goto done;
    }
    base_order = PyObject_GetAttr(base, S_ORDER);
    if (base_order == NULL) goto done;
    same = PyObject_RichCompareBool(base_order, order, Py_EQ);
    if (same < 0) goto done;
    if (same) {
        result = 1;
        goto done;
    }
    int after = PyObject_RichCompareBool(base_order, order, Py_GT);
    if (after < 0) goto done;
    if (after) {
        PyObject *claimer = PyObject_GetAttr(base, S_CLAIMER);
        if (claimer == NULL) goto done;
        PyObject *digest = PyObject_GetAttr(o, S_DIGEST);
        if (digest == NULL) {
            Py_DECREF(claimer);
            goto done;
        }
        PyObject *key = PyTuple_Pack(2, claimer, digest);
        Py_DECREF(claimer);
        Py_DECREF(digest);
        if (key == NULL) goto done;
        int settles = PySequence_Contains(settling, key);
        Py_DECREF(key);
        if (settles < 0) goto done;
        result = settles ? 0 : bases_push(later, base, bits);
        goto done;
    }
    result = better(best, base, verify, bits, max_bins, verify_bytes);
done:
    Py_XDECREF(o);
    Py_XDECREF(o_url);
    Py_XDECREF(base_order);
    Py_XDECREF(o_index);
    return result;
}

static PyObject *closest(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "closest(bands, keys, claim, settling, max_distance, max_bins, verify_bytes) takes 7 "
                        "arguments");
        return NULL;
    }
    PyObject *bands = args[0], *keys = args[1], *claim = args[2], *settling = args[3];
    if (!PyDict_Check(bands) || !PyTuple_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "closest(): bands must be a dict and keys a tuple");
        return NULL;
    }
    Py_ssize_t max_distance = PyLong_AsSsize_t(args[4]), max_bins = PyLong_AsSsize_t(args[5]),
               verify_bytes = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred()) return NULL;
    PyObject *url = NULL, *index = NULL, *verify = NULL, *fetched_at = NULL, *order = NULL, *result = NULL;
    Match best = {NULL, 0, 0}, later_best = {NULL, 0, 0};
    Bases mates = {NULL, NULL, 0, 0}, later = {NULL, NULL, 0, 0};
    if ((url = PyObject_GetAttr(claim, S_URL)) == NULL || (index = PyObject_GetAttr(claim, S_INDEX)) == NULL
        || (verify = PyObject_GetAttr(claim, S_VERIFY)) == NULL
        || (fetched_at = PyObject_GetAttr(claim, S_FETCHED_AT)) == NULL
        || (order = PyTuple_Pack(2, fetched_at, url)) == NULL)
        goto done;
    if (band_mates(bands, keys, "closest", &mates) < 0) goto done;
    for (Py_ssize_t i = 0; i < mates.len; i++)
        if (scan_base(mates.items[i], url, index, verify, order, settling, max_distance, max_bins, verify_bytes,
                      &best, &later) < 0)
            goto done;
    if (best.base != NULL) {
        PyObject *found = match_or_none(&best);
        if (found != NULL) result = Py_BuildValue("(NO)", found, Py_None);
        goto done;
    }
    for (Py_ssize_t i = 0; i < later.len; i++)
        if (better(&later_best, later.items[i], verify, later.bits[i], max_bins, verify_bytes) < 0) goto done;
    PyObject *found = match_or_none(&later_best);
    if (found != NULL) result = Py_BuildValue("(ON)", Py_None, found);
done:
    Py_XDECREF(url);
    Py_XDECREF(index);
    Py_XDECREF(verify);
    Py_XDECREF(fetched_at);
    Py_XDECREF(order);
    Py_XDECREF(best.base);
    Py_XDECREF(later_best.base);
    bases_free(&mates);
    bases_free(&later);
    return result;
}

/* Rule 6 for one settling entry: 1 when it matches, 0 when not, -1 on error. */
static int unsettles(PyObject *s, PyObject *url, PyObject *index, PyObject *verify, PyObject *order,
                     Py_ssize_t max_distance, Py_ssize_t max_bins, Py_ssize_t verify_bytes) {
    int result = -1;
    PyObject *s_index = NULL, *s_fetched_at = NULL, *s_url = NULL, *s_order = NULL, *s_verify = NULL;
    if ((s_index = PyObject_GetAttr(s, S_INDEX)) == NULL) goto done;
    Py_ssize_t bits = index_bits(s_index, index);
    if (bits < 0) goto done;
    if (bits > max_distance) {
        result = 0;
        goto done;
    }
    if ((s_fetched_at = PyObject_GetAttr(s, S_FETCHED_AT)) == NULL || (s_url = PyObject_GetAttr(s, S_URL)) == NULL
        || (s_order = PyTuple_Pack(2, s_fetched_at, s_url)) == NULL)
        goto done;
    int yes = PyObject_RichCompareBool(s_order, order, Py_GT);
    if (yes <= 0) {
        result = yes;
        goto done;
    }
    yes = PyObject_RichCompareBool(s_url, url, Py_NE);
    if (yes <= 0) {
        result = yes;
        goto done;
    }
    if ((s_verify = PyObject_GetAttr(s, S_VERIFY)) == NULL) goto done;
    Py_ssize_t bins = sketch_bins(s_verify, verify, verify_bytes);
    if (bins >= 0) result = bins <= max_bins;
done:
    Py_XDECREF(s_index);
    Py_XDECREF(s_fetched_at);
    Py_XDECREF(s_url);
    Py_XDECREF(s_order);
    Py_XDECREF(s_verify);
    return result;
}

static PyObject *unsettled_in_bands(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "unsettled_in_bands(bands, keys, settling, claim, max_distance, max_bins, verify_bytes) "
                        "takes 7 arguments");
        return NULL;
    }
    PyObject *bands = args[0], *keys = args[1], *settling = args[2], *claim = args[3];
    if (!PyDict_Check(bands) || !PyTuple_Check(keys) || !PyDict_Check(settling)) {
        PyErr_SetString(PyExc_TypeError,
                        "unsettled_in_bands(): bands and settling must be dicts and keys a tuple");
        return NULL;
    }
    Py_ssize_t max_distance = PyLong_AsSsize_t(args[4]), max_bins = PyLong_AsSsize_t(args[5]),
               verify_bytes = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred()) return NULL;
    PyObject *url = NULL, *index = NULL, *verify = NULL, *fetched_at = NULL, *order = NULL, *out = NULL;
    Bases mates = {NULL, NULL, 0, 0};
    if ((url = PyObject_GetAttr(claim, S_URL)) == NULL || (index = PyObject_GetAttr(claim, S_INDEX)) == NULL
        || (verify = PyObject_GetAttr(claim, S_VERIFY)) == NULL
        || (fetched_at = PyObject_GetAttr(claim, S_FETCHED_AT)) == NULL
        || (order = PyTuple_Pack(2, fetched_at, url)) == NULL || (out = PyList_New(0)) == NULL)
        goto fail;
    if (band_mates(bands, keys, "unsettled_in_bands", &mates) < 0) goto fail;
    for (Py_ssize_t i = 0; i < mates.len; i++) {
        PyObject *base = mates.items[i], *s = NULL, *claimer = NULL, *digest = NULL, *key = NULL;
        int match = (s = PyObject_GetAttr(base, S_CLAIM)) == NULL ? -1 : 0;
        if (match == 0) match = unsettles(s, url, index, verify, order, max_distance, max_bins, verify_bytes);
        if (match > 0) { /* rule 6: a match whose base still settles */
            if ((claimer = PyObject_GetAttr(base, S_CLAIMER)) == NULL
                || (digest = PyObject_GetAttr(s, S_DIGEST)) == NULL
                || (key = PyTuple_Pack(2, claimer, digest)) == NULL)
                match = -1;
            else
                match = PyDict_Contains(settling, key);
        }
        if (match > 0) {
            PyObject *pair = PyTuple_Pack(2, key, s);
            if (pair == NULL || PyList_Append(out, pair) < 0) match = -1;
            Py_XDECREF(pair);
        }
        Py_XDECREF(s);
        Py_XDECREF(claimer);
        Py_XDECREF(digest);
        Py_XDECREF(key);
        if (match < 0) goto fail;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(url);
    Py_XDECREF(index);
    Py_XDECREF(verify);
    Py_XDECREF(fetched_at);
    Py_XDECREF(order);
    bases_free(&mates);
    return out;
}

static PyMethodDef methods[] = {
    {"band_slices", (PyCFunction)(void (*)(void))band_slices, METH_FASTCALL,
     "band_slices(index, slices): the slice of each of the 4 band keys of fingerprint index ``index``."},
    {"band_keys", (PyCFunction)(void (*)(void))band_keys, METH_FASTCALL,
     "band_keys(index): the 4 band keys of fingerprint index ``index``, as nearindex.band_keys."},
    {"closest", (PyCFunction)(void (*)(void))closest, METH_FASTCALL,
     "closest(bands, keys, claim, settling, max_distance, max_bins, verify_bytes): claims._scan."},
    {"unsettled_in_bands", (PyCFunction)(void (*)(void))unsettled_in_bands, METH_FASTCALL,
     "unsettled_in_bands(bands, keys, settling, claim, max_distance, max_bins, verify_bytes): "
     "claims._unsettled."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "polecat.cluster._claims",
    "Native band slices and near book scans (polecat.cluster.claims is the specification).",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__claims(void) {
    static PyObject **names[] = {&S_CLAIM, &S_ORDER, &S_CLAIMER, &S_URL, &S_INDEX, &S_VERIFY, &S_DIGEST,
                                 &S_FETCHED_AT, &S_BIT_COUNT};
    static const char *texts[] = {"claim", "order", "claimer", "url", "index", "verify", "digest",
                                  "fetched_at", "bit_count"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (*names[i] == NULL && (*names[i] = PyUnicode_InternFromString(texts[i])) == NULL) return NULL;
    return PyModuleDef_Init(&module_def);
}
