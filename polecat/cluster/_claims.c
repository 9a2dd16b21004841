/* polecat.cluster._claims: the band slices of polecat/cluster/claims.py (rule 9) in C.
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
 * a message whose words 1-15 are zero. Nothing here reads a peer's bytes: the index is an int. The GIL
 * is held throughout; nothing is shared between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

static PyMethodDef methods[] = {
    {"band_slices", (PyCFunction)(void (*)(void))band_slices, METH_FASTCALL,
     "band_slices(index, slices): the slice of each of the 4 band keys of fingerprint index ``index``."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "polecat.cluster._claims",
    "Native band slices (polecat.cluster.claims is the specification).",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__claims(void) { return PyModuleDef_Init(&module_def); }
