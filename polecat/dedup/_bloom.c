/* polecat.dedup._bloom: the batched probes of polecat/dedup/bloom.py in C.
 *
 * bloom.py is the specification (its module docstring has the probe rule); this kernel gives the same
 * answers and sets the same bits as ScalableBloom._add_vectorized and _add_few:
 *
 * 1. Hash: MurmurHash3_x64_128 of the key with seed 0, as mmh3.mmh3_x64_128_utupledigest(key, 0) gives it
 *    (h1, h2: the digest's two little-endian words); h2 is made odd (h2 | 1). hash_pair() returns the
 *    pair for the tests that compare it with mmh3.
 * 2. Probes: probe i of a layer of m bits is ((h1 + i * h2) mod 2**64) mod m, bit (p & 7) of byte p >> 3
 *    of the layer's buffer (bitarray's little-endian bit order).
 * 3. probe(keys, layers) answers, for each key, whether every layer-probe of some layer was set before
 *    the batch, or its h1 was an earlier key's in the batch; it also returns the 16-byte (h1, h2) pair of
 *    every key, for set_bits. Nothing is written.
 * 4. set_bits(bits, m, k, pairs, indices) sets the k probes of the keys at indices in one layer; bloom.py
 *    decides which layer takes which keys (growth), as the batched path does.
 *
 * Keys must be bytes and a layer's buffer must hold m bits (TypeError or ValueError otherwise: bloom.py
 * then runs the specification). The GIL is held throughout; nothing is shared between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ROTL64(x, r) (((x) << (r)) | ((x) >> (64 - (r))))

static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* Rule 1: MurmurHash3_x64_128, seed 0. Each lane's word is mixed the same way in the blocks and in the
 * tail, hence mix_k1 and mix_k2. */
static const uint64_t C1 = 0x87c37b91114253d5ULL, C2 = 0x4cf5ad432745937fULL;

static inline uint64_t mix_k1(uint64_t k) { return ROTL64(k * C1, 31) * C2; }
static inline uint64_t mix_k2(uint64_t k) { return ROTL64(k * C2, 33) * C1; }

static void murmur3_128(const uint8_t *data, Py_ssize_t len, uint64_t *out1, uint64_t *out2) {
    uint64_t h1 = 0, h2 = 0;
    Py_ssize_t blocks = len / 16;
    for (Py_ssize_t i = 0; i < blocks; i++) {
        h1 ^= mix_k1(load64(data + 16 * i));
        h1 = ROTL64(h1, 27) + h2;
        h1 = h1 * 5 + 0x52dce729;
        h2 ^= mix_k2(load64(data + 16 * i + 8));
        h2 = ROTL64(h2, 31) + h1;
        h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = data + 16 * blocks;
    uint64_t k1 = 0, k2 = 0;
    int rest = (int)(len & 15);
    for (int i = rest - 1; i >= 8; i--)
        k2 ^= (uint64_t)tail[i] << (8 * (i - 8));
    if (rest > 8)
        h2 ^= mix_k2(k2);
    for (int i = (rest < 8 ? rest : 8) - 1; i >= 0; i--)
        k1 ^= (uint64_t)tail[i] << (8 * i);
    if (rest > 0)
        h1 ^= mix_k1(k1);
    h1 ^= (uint64_t)len;
    h2 ^= (uint64_t)len;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    h2 += h1;
    *out1 = h1;
    *out2 = h2;
}

static PyObject *hash_pair(PyObject *self, PyObject *key) {
    if (!PyBytes_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "hash_pair() takes bytes");
        return NULL;
    }
    uint64_t h1, h2;
    murmur3_128((const uint8_t *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), &h1, &h2);
    return Py_BuildValue("(KK)", (unsigned long long)h1, (unsigned long long)h2);
}

/* A layer as probe() reads it. */
typedef struct {
    Py_buffer view;
    uint64_t m;
    long k;
} Layer;

static int layer_open(PyObject *spec, Layer *layer, int flags) {
    PyObject *bits = NULL, *m = NULL, *k = NULL;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "OOO", &bits, &m, &k)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a layer is (bits, m, k)");
        return -1;
    }
    unsigned long long mv = PyLong_AsUnsignedLongLong(m);
    long kv = PyLong_AsLong(k);
    if (PyErr_Occurred())
        return -1;
    if (mv == 0 || mv % 8 || kv < 1 || kv > 64) {
        PyErr_SetString(PyExc_ValueError, "bad layer m or k");
        return -1;
    }
    if (PyObject_GetBuffer(bits, &layer->view, flags) < 0)
        return -1;
    if ((unsigned long long)layer->view.len < mv / 8) {
        PyBuffer_Release(&layer->view);
        PyErr_SetString(PyExc_ValueError, "layer buffer shorter than m bits");
        return -1;
    }
    layer->m = mv;
    layer->k = kv;
    return 0;
}

/* Rule 2. */
static inline int layer_has(const Layer *layer, uint64_t h1, uint64_t h2) {
    const uint8_t *buf = (const uint8_t *)layer->view.buf;
    for (long i = 0; i < layer->k; i++) {
        uint64_t p = (h1 + (uint64_t)i * h2) % layer->m;
        if (!(buf[p >> 3] & (1u << (p & 7))))
            return 0;
    }
    return 1;
}

/* Open addressing over the batch's h1 values (rule 3's repeats); 0 marks an empty slot, so h1 == 0 is
 * tracked on its own. */
typedef struct {
    uint64_t *slots;
    size_t mask;
    int zero_seen;
} H1Set;

static int h1set_add(H1Set *s, uint64_t h1) { /* 1 if h1 was already there */
    if (h1 == 0) {
        int had = s->zero_seen;
        s->zero_seen = 1;
        return had;
    }
    size_t i = (size_t)(fmix64(h1) & s->mask);
    while (s->slots[i] != 0) {
        if (s->slots[i] == h1)
            return 1;
        i = (i + 1) & s->mask;
    }
    s->slots[i] = h1;
    return 0;
}

static PyObject *probe(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "probe(keys, layers)");
        return NULL;
    }
    PyObject *keys = PySequence_Fast(args[0], "probe(): keys must be a sequence");
    if (keys == NULL)
        return NULL;
    PyObject *specs = PySequence_Fast(args[1], "probe(): layers must be a sequence");
    if (specs == NULL) {
        Py_DECREF(keys);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys), nl = PySequence_Fast_GET_SIZE(specs), opened = 0;
    PyObject *present = NULL, *pairs = NULL, *result = NULL;
    Layer *layers = PyMem_Calloc((size_t)(nl > 0 ? nl : 1), sizeof(Layer));
    size_t cap = 16;
    while (cap < (size_t)n * 2)
        cap *= 2;
    H1Set seen = {PyMem_Calloc(cap, sizeof(uint64_t)), cap - 1, 0};
    if (layers == NULL || seen.slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; opened < nl; opened++)
        if (layer_open(PySequence_Fast_GET_ITEM(specs, opened), &layers[opened], PyBUF_SIMPLE) < 0)
            goto done;
    if ((present = PyList_New(n)) == NULL || (pairs = PyBytes_FromStringAndSize(NULL, 16 * n)) == NULL)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(pairs);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *key = PySequence_Fast_GET_ITEM(keys, j);
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "probe(): keys must be bytes");
            goto done;
        }
        uint64_t h1, h2;
        murmur3_128((const uint8_t *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), &h1, &h2);
        h2 |= 1;
        memcpy(out + 16 * j, &h1, 8);
        memcpy(out + 16 * j + 8, &h2, 8);
        int hit = 0;
        for (Py_ssize_t l = 0; !hit && l < nl; l++)
            hit = layer_has(&layers[l], h1, h2);
        hit |= h1set_add(&seen, h1);
        PyList_SET_ITEM(present, j, Py_NewRef(hit ? Py_True : Py_False));
    }
    result = PyTuple_Pack(2, present, pairs);
done:
    for (Py_ssize_t l = 0; l < opened; l++)
        PyBuffer_Release(&layers[l].view);
    PyMem_Free(layers);
    PyMem_Free(seen.slots);
    Py_XDECREF(present);
    Py_XDECREF(pairs);
    Py_DECREF(keys);
    Py_DECREF(specs);
    return result;
}

static PyObject *set_bits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "set_bits(layer, pairs, indices)");
        return NULL;
    }
    if (!PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_bits(): pairs must be bytes");
        return NULL;
    }
    Layer layer;
    if (layer_open(args[0], &layer, PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *indices = PySequence_Fast(args[2], "set_bits(): indices must be a sequence");
    if (indices == NULL) {
        PyBuffer_Release(&layer.view);
        return NULL;
    }
    const uint8_t *pairs = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t count = PyBytes_GET_SIZE(args[1]) / 16, n = PySequence_Fast_GET_SIZE(indices);
    uint8_t *buf = (uint8_t *)layer.view.buf;
    PyObject *result = Py_None;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t at = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(indices, j));
        if (at == -1 && PyErr_Occurred()) {
            result = NULL;
            break;
        }
        if (at < 0 || at >= count) {
            PyErr_SetString(PyExc_IndexError, "set_bits(): index out of the pairs");
            result = NULL;
            break;
        }
        uint64_t h1, h2;
        memcpy(&h1, pairs + 16 * at, 8);
        memcpy(&h2, pairs + 16 * at + 8, 8);
        for (long i = 0; i < layer.k; i++) {
            uint64_t p = (h1 + (uint64_t)i * h2) % layer.m;
            buf[p >> 3] |= (uint8_t)(1u << (p & 7));
        }
    }
    Py_DECREF(indices);
    PyBuffer_Release(&layer.view);
    return Py_XNewRef(result);
}

static PyMethodDef methods[] = {
    {"hash_pair", hash_pair, METH_O,
     "hash_pair(key): (h1, h2) of MurmurHash3_x64_128(key, seed 0), as mmh3.mmh3_x64_128_utupledigest."},
    {"probe", (PyCFunction)(void (*)(void))probe, METH_FASTCALL,
     "probe(keys, layers): ([present], pairs) for a batch against layers of (bits, m, k)."},
    {"set_bits", (PyCFunction)(void (*)(void))set_bits, METH_FASTCALL,
     "set_bits((bits, m, k), pairs, indices): set the probes of the keys at indices."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "polecat.dedup._bloom",
    "Native batched Bloom probes (polecat.dedup.bloom is the specification).",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bloom(void) { return PyModuleDef_Init(&module_def); }
