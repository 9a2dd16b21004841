/* polecat.parse._guard: the native twin of rules 2 and 3 of polecat/parse/guard.py.
 *
 * too_many_attrs(html, limit) and too_deep(html, limit, shallow) return exactly what the Python functions
 * _too_many_attrs and _too_deep return (with MAX_ATTRS, MAX_DEPTH = limit): the offset of the cut, or
 * None; too_deep applies the SHALLOW_TAGS gate of bound_html too (None for at most `shallow` "<").
 * The Python code is the specification; every rule below names the regex it replicates.
 *
 * - Characters are code points of the str, whatever its kind (1, 2 or 4 bytes): each scan is one
 *   function, inlined three times with the kind a constant. "\s" is Python's Unicode whitespace
 *   (Py_UNICODE_ISSPACE, what the re module uses for str patterns).
 * - Tag names are lower-cased as str.lower() does: ASCII names here, other names by calling str.lower()
 *   (a non-ASCII name can lower to an ASCII one: the Kelvin sign). The raw-text end tag "</name" is
 *   searched as re.IGNORECASE matches it, which also takes U+0130 and U+0131 for "i" and U+017F for "s".
 * - Linear in the page: every scan moves forward, except the attribute rule's prefilter, which (like
 *   the regex) tries each "<" + letter; its searches for the next quote or delimiter are remembered, so
 *   tags that look ahead over the same span do not scan it again. No recursion; the table of open
 *   elements holds at most limit + 1 names (the sum of its counts is the depth).
 * - The GIL is held throughout (names may call back into Python); nothing is shared between calls.
 * - whole_utf8(data, ...) runs both scans over UTF-8 bytes (the "kind" UTF8 below: one byte a position)
 *   and answers only "neither rule cuts data.decode()": where a non-ASCII character could make the
 *   text's answer differ from the bytes' (it is asked whether it is whitespace, it is in a tag name or
 *   in a raw-text end tag, a run's length is counted), the scan counts characters or gives up and the
 *   caller decodes and asks the str functions. A cut is never located in bytes: the str functions do it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define INLINE static inline __attribute__((always_inline))
#else
#define INLINE static inline
#endif

/* The pseudo-kind of whole_utf8's bytes: read like 1-byte strs, with the rules above for non-ASCII. */
#define UTF8 8
#define READ(i) ((kind) == UTF8 ? (Py_UCS4)((const Py_UCS1 *)(data))[i] : PyUnicode_READ(kind, data, (i)))
#define MAX_LIMIT (1 << 24)
/* Returned by the scans of UTF8 data when the bytes cannot answer for the text. */
#define UNDECIDED (-3)

INLINE int is_space(Py_UCS4 c) { return Py_UNICODE_ISSPACE(c); }
/* is_space in a scan that records, in UTF8 data, that it met a non-ASCII byte (whose character may be
 * Unicode whitespace: the bytes cannot tell the text's answer). */
INLINE int space_or_flag(int kind, Py_UCS4 c, int *undecided) {
    if (kind == UTF8 && c >= 0x80) {
        *undecided = 1;
        return 0;
    }
    return is_space(c);
}
INLINE int is_letter(Py_UCS4 c) { return (c | 32) - 'a' < 26; }
INLINE Py_UCS4 ascii_lower(Py_UCS4 c) { return c - 'A' < 26 ? c | 32 : c; }

/* First position >= i of ch, or n. memchr for 1-byte strings; for the others, 8 bytes at a time: a lane
 * equal to ch is a zero lane of word ^ broadcast(ch), which the usual bit trick finds (it never misses
 * one; the lanes of a flagged word are then read one by one). */
INLINE Py_ssize_t find_char(int kind, const void *data, Py_ssize_t i, Py_ssize_t n, Py_UCS4 ch) {
    if (i >= n)
        return n;
    if (kind == PyUnicode_1BYTE_KIND || kind == UTF8) {
        const Py_UCS1 *s = (const Py_UCS1 *)data;
        const Py_UCS1 *hit = memchr(s + i, (int)ch, (size_t)(n - i));
        return hit ? hit - s : n;
    }
    const Py_ssize_t lanes = 8 / kind;
    const uint64_t ones = kind == PyUnicode_2BYTE_KIND ? 0x0001000100010001ull : 0x0000000100000001ull;
    const uint64_t highs = ones << (8 * kind - 1), pattern = ones * ch;
    for (; i + lanes <= n; i += lanes) {
        uint64_t word;
        memcpy(&word, (const char *)data + i * kind, 8);
        word ^= pattern;
        if ((word - ones) & ~word & highs)
            break;
    }
    for (; i < n; i++)
        if (READ(i) == ch)
            return i;
    return n;
}

/* Whether html has more than `shallow` '<' (the SHALLOW_TAGS gate of rule 2), counted in blocks that the
 * compiler vectorises, stopping at the first block past it. */
INLINE int more_than(int kind, const void *data, Py_ssize_t n, Py_ssize_t shallow) {
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n && count <= shallow; i += 4096) {
        Py_ssize_t end = n - i > 4096 ? i + 4096 : n;
        uint32_t block = 0;
        for (Py_ssize_t j = i; j < end; j++)
            block += READ(j) == '<';
        count += block;
    }
    return count > shallow;
}

/* ---------------------------------------------------------------------------------------------------
 * Rule 3: _LONG_TAG finds tags that may hold more than `limit` attributes, _NAME and _ATTR count them.
 */

/* Remembered answers of "first position >= q of one of these characters": any q in [from, at] has the
 * answer at (n when there is none). A few spans, replaced in turn. */
#define SPANS 4
typedef struct {
    Py_ssize_t from[SPANS], at[SPANS];
    int next;
} Memo;

static void memo_init(Memo *m) {
    for (int i = 0; i < SPANS; i++) {
        m->from[i] = 1;
        m->at[i] = 0; /* empty */
    }
    m->next = 0;
}

INLINE int memo_get(const Memo *m, Py_ssize_t q, Py_ssize_t *at) {
    for (int i = 0; i < SPANS; i++)
        if (m->from[i] <= q && q <= m->at[i]) {
            *at = m->at[i];
            return 1;
        }
    return 0;
}

INLINE void memo_put(Memo *m, Py_ssize_t from, Py_ssize_t at) {
    m->from[m->next] = from;
    m->at[m->next] = at;
    m->next = (m->next + 1) % SPANS;
}

typedef struct {
    Memo dquote, squote, special; /* '"', '\'', and any of '>', '"', '\'' */
    int undecided;                /* UTF8 data: a non-ASCII byte was asked whether it is whitespace */
} Memos;

/* The closing quote of a quoted value opened before q, or n when it is unclosed. */
INLINE Py_ssize_t closing(int kind, const void *data, Py_ssize_t q, Py_ssize_t n, Py_UCS4 quote,
                          Memos *memos) {
    Memo *m = quote == '"' ? &memos->dquote : &memos->squote;
    Py_ssize_t at;
    if (!memo_get(m, q, &at)) {
        at = find_char(kind, data, q, n, quote);
        memo_put(m, q, at);
    }
    return at;
}

/* First position >= q of '>', '"' or '\'' (where a run of [^>"'] ends), or n; or q + RUN_CAP when
 * there is none before it (a run that long is 8 items already). */
#define RUN_CAP (8 * 64)
INLINE Py_ssize_t run_end(int kind, const void *data, Py_ssize_t q, Py_ssize_t n, Memos *memos) {
    Py_ssize_t at, cap = n - q > RUN_CAP ? q + RUN_CAP : n;
    if (memo_get(&memos->special, q, &at))
        return at;
    for (at = q; at < cap; at++) {
        Py_UCS4 c = READ(at);
        if (c == '>' || c == '"' || c == '\'')
            break;
    }
    if (at < cap || cap == n)
        memo_put(&memos->special, q, at);
    return at;
}

/* Whether _LONG_TAG, <[A-Za-z](?:[^>"']{1,64}+|"[^"]*+"|'[^']*+'){8}+, matches at p ("<" and a letter
 * there). Every item is decided by its first character and possessive, so the match is the one walk
 * below; a run of L characters outside quotes is ceil(L / 64) items. */
INLINE int long_tag(int kind, const void *data, Py_ssize_t p, Py_ssize_t n, Memos *memos) {
    Py_ssize_t s = p + 2, items = 0;
    while (items < 8) {
        if (s >= n)
            return 0;
        Py_UCS4 c = READ(s);
        if (c == '>')
            return 0;
        if (c == '"' || c == '\'') {
            Py_ssize_t end = closing(kind, data, s + 1, n, c, memos);
            if (end >= n)
                return 0;
            s = end + 1;
            items++;
        } else {
            Py_ssize_t end = run_end(kind, data, s, n, memos);
            items += (end - s + 63) / 64;
            s = end;
        }
    }
    return 1;
}

/* long_tag for UTF8 data with its runs counted in characters, as the text's are (a byte that is not a
 * continuation byte starts a character). long_tag over the bytes counts at least as many items (a run
 * has at least as many bytes as characters), so it is the cheap first test and this the exact one. */
static int long_tag_chars(const Py_UCS1 *d, Py_ssize_t p, Py_ssize_t n, Memos *memos) {
    Py_ssize_t s = p + 2, items = 0;
    while (items < 8) {
        if (s >= n)
            return 0;
        Py_UCS1 c = d[s];
        if (c == '>')
            return 0;
        if (c == '"' || c == '\'') {
            Py_ssize_t end = closing(UTF8, d, s + 1, n, c, memos);
            if (end >= n)
                return 0;
            s = end + 1;
            items++;
        } else {
            Py_ssize_t chars = 0;
            for (; s < n && chars < RUN_CAP; s++) {
                c = d[s];
                if (c == '>' || c == '"' || c == '\'')
                    break;
                chars += (c & 0xC0) != 0x80;
            }
            items += (chars + 63) / 64;
        }
    }
    return 1;
}

/* The end of _ATTR, [\s/]*+[^\s/>=]++(?:\s*+=\s*+(?:"[^"]*+"|'[^']*+'|[^\s>]*+))?+, matched at i, or -1
 * when it does not match. */
INLINE Py_ssize_t attr_end(int kind, const void *data, Py_ssize_t i, Py_ssize_t n, Memos *memos) {
    Py_UCS4 c;
    int *undecided = &memos->undecided;
    while (i < n && ((c = READ(i)) == '/' || space_or_flag(kind, c, undecided)))
        i++;
    Py_ssize_t name = i;
    while (i < n && (c = READ(i)) != '/' && c != '>' && c != '=' && !space_or_flag(kind, c, undecided))
        i++;
    if (i == name)
        return -1;
    Py_ssize_t k = i;
    while (k < n && space_or_flag(kind, READ(k), undecided))
        k++;
    if (k >= n || READ(k) != '=')
        return i; /* the optional group matches nothing */
    k++;
    while (k < n && space_or_flag(kind, READ(k), undecided))
        k++;
    if (k < n && ((c = READ(k)) == '"' || c == '\'')) {
        Py_ssize_t end = closing(kind, data, k + 1, n, c, memos);
        if (end < n)
            return end + 1;
        /* unclosed: the last alternative, [^\s>]*+, takes the quote and what follows */
    }
    while (k < n && (c = READ(k)) != '>' && !space_or_flag(kind, c, undecided))
        k++;
    return k;
}

INLINE Py_ssize_t too_many_attrs_kind(int kind, const void *data, Py_ssize_t n, Py_ssize_t limit) {
    Memos memos;
    memo_init(&memos.dquote);
    memo_init(&memos.squote);
    memo_init(&memos.special);
    memos.undecided = 0;
    Py_ssize_t pos = 0;
    while (pos < n) {
        Py_ssize_t p = find_char(kind, data, pos, n, '<');
        if (p + 1 >= n)
            return -1;
        if (!is_letter(READ(p + 1)) || !long_tag(kind, data, p, n, &memos) ||
            (kind == UTF8 && !long_tag_chars((const Py_UCS1 *)data, p, n, &memos))) {
            pos = p + 1;
            continue;
        }
        Py_ssize_t q = p + 1; /* _NAME: <[^\s/>]*+ */
        Py_UCS4 c;
        while (q < n && (c = READ(q)) != '/' && c != '>' && !space_or_flag(kind, c, &memos.undecided))
            q++;
        Py_ssize_t count = 0, end;
        while (count <= limit && (end = attr_end(kind, data, q, n, &memos)) >= 0) {
            count++;
            q = end;
        }
        if (memos.undecided || (kind == UTF8 && count > limit))
            return UNDECIDED;
        if (count > limit)
            return p;
        pos = q;
    }
    return -1;
}

static Py_ssize_t too_many_attrs_1(const void *d, Py_ssize_t n, Py_ssize_t l) {
    return too_many_attrs_kind(PyUnicode_1BYTE_KIND, d, n, l);
}
static Py_ssize_t too_many_attrs_2(const void *d, Py_ssize_t n, Py_ssize_t l) {
    return too_many_attrs_kind(PyUnicode_2BYTE_KIND, d, n, l);
}
static Py_ssize_t too_many_attrs_4(const void *d, Py_ssize_t n, Py_ssize_t l) {
    return too_many_attrs_kind(PyUnicode_4BYTE_KIND, d, n, l);
}
static Py_ssize_t too_many_attrs_utf8(const void *d, Py_ssize_t n, Py_ssize_t l) {
    return too_many_attrs_kind(UTF8, d, n, l);
}

/* ---------------------------------------------------------------------------------------------------
 * Rule 2: _TAG, <(?:(!--)|(/?)([A-Za-z][^\s/>]*)), walked with a count of open elements per name.
 */

/* A lower-cased name: ASCII of up to 8 characters packed into `word` (little-endian, `str` NULL), any
 * other as a str. Every name has one form, so equal names have equal keys. */
typedef struct {
    uint64_t word;
    PyObject *str;
    Py_hash_t hash;
    Py_ssize_t len;
} Key;

/* Classes of lower-cased names, from guard.py's _FLAT and _RAW (a test checks they are the same). */
enum { OTHER = 0, FLAT = 1, RAW = 2, PLAINTEXT = 3 };
static const char *const FLAT_NAMES[] = {
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr",
    "param", "keygen", "frame", "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "tbody",
    "thead", "tfoot", "colgroup", "caption", "rb", "rt", "rp", "rtc", "html", "head", "body",
};
static const char *const RAW_NAMES[] = {
    "script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "plaintext", /* last */
};
#define N_FLAT (sizeof(FLAT_NAMES) / sizeof(FLAT_NAMES[0]))
#define N_RAW (sizeof(RAW_NAMES) / sizeof(RAW_NAMES[0]))

static uint64_t pack(const char *name) {
    uint64_t word = 0;
    for (size_t i = 0; name[i] && i < 8; i++)
        word |= (uint64_t)(unsigned char)name[i] << (8 * i);
    return word;
}

static Py_hash_t mix(uint64_t word, Py_ssize_t len) {
    uint64_t h = (word ^ ((uint64_t)len << 59)) * 0x9E3779B97F4A7C15ull;
    return (Py_hash_t)(h ^ (h >> 29));
}

/* The names of up to 8 characters of FLAT_NAMES and RAW_NAMES, by packed word, filled once when the
 * module is first imported and only read after: an open-addressing table (len 0: empty). */
#define CLASS_SLOTS 128
static struct {
    uint64_t word;
    Py_ssize_t len;
    int cls;
    size_t raw;
} CLASSES[CLASS_SLOTS];

static void class_add(const char *name, int cls, size_t raw) {
    uint64_t word = pack(name);
    Py_ssize_t len = (Py_ssize_t)strlen(name);
    size_t i = (size_t)mix(word, len) & (CLASS_SLOTS - 1);
    while (CLASSES[i].len && !(CLASSES[i].word == word && CLASSES[i].len == len))
        i = (i + 1) & (CLASS_SLOTS - 1);
    CLASSES[i].word = word;
    CLASSES[i].len = len;
    CLASSES[i].cls = cls;
    CLASSES[i].raw = raw;
}

static void classes_init(void) {
    for (size_t i = 0; i < N_FLAT; i++)
        class_add(FLAT_NAMES[i], FLAT, 0);
    for (size_t i = 0; i < N_RAW; i++)
        if (strlen(RAW_NAMES[i]) <= 8)
            class_add(RAW_NAMES[i], RAW, i);
}

/* The class of a lower-cased ASCII name, given its first 8 characters packed, its length and its ninth
 * character (0 if none); `raw` gets the index of a raw-text name. */
INLINE int classify(uint64_t word, Py_ssize_t len, Py_UCS4 ninth, size_t *raw) {
    if (len > 8) {
        if (len == 9 && word == pack(RAW_NAMES[N_RAW - 1]) && ninth == 't') {
            *raw = N_RAW - 1; /* plaintext */
            return PLAINTEXT;
        }
        return OTHER;
    }
    const size_t mask = CLASS_SLOTS - 1;
    for (size_t i = (size_t)mix(word, len) & mask; CLASSES[i].len; i = (i + 1) & mask)
        if (CLASSES[i].word == word && CLASSES[i].len == len) {
            *raw = CLASSES[i].raw;
            return CLASSES[i].cls;
        }
    return OTHER;
}

/* Open elements: count per name, linear probing, emptied slots filled by shifting back (no tombstones).
 * At most limit + 1 names have a count, in a table of at least twice that. */
typedef struct {
    Key key;
    Py_ssize_t count; /* 0: empty */
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
    Py_ssize_t strs; /* names held as str */
} Table;

/* Slot of `key`, or the empty slot where it would go. -1 on error (a str comparison failed). */
static Py_ssize_t table_find(Table *t, const Key *key) {
    size_t i = (size_t)key->hash & t->mask;
    for (;; i = (i + 1) & t->mask) {
        Slot *s = &t->slots[i];
        if (s->count == 0)
            return (Py_ssize_t)i;
        if (s->key.hash != key->hash || (s->key.str == NULL) != (key->str == NULL))
            continue;
        if (key->str == NULL) {
            if (s->key.word == key->word && s->key.len == key->len)
                return (Py_ssize_t)i;
        } else {
            int eq = PyObject_RichCompareBool(s->key.str, key->str, Py_EQ);
            if (eq < 0)
                return -1;
            if (eq)
                return (Py_ssize_t)i;
        }
    }
}

static void table_remove(Table *t, size_t i) {
    if (t->slots[i].key.str) {
        Py_DECREF(t->slots[i].key.str);
        t->strs--;
    }
    for (size_t j = (i + 1) & t->mask; t->slots[j].count; j = (j + 1) & t->mask) {
        size_t home = (size_t)t->slots[j].key.hash & t->mask;
        if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i].count = 0;
    t->slots[i].key.str = NULL;
}

static void table_free(Table *t) {
    for (size_t i = 0; i <= t->mask; i++)
        if (t->slots[i].count)
            Py_XDECREF(t->slots[i].key.str);
    PyMem_Free(t->slots);
}

/* The key and class of the name html[s:e] (ASCII if `ascii`). With `need_str` false, a name that would be
 * a str gets none (key->str NULL, key->len -1): the caller knows no such name is open. 0, or -1 on error. */
static int name_key(PyObject *html, int kind, const void *data, Py_ssize_t s, Py_ssize_t e, int ascii,
                    int need_str, Key *key, int *cls, size_t *raw) {
    Py_ssize_t len = e - s;
    PyObject *lowered = NULL;
    key->str = NULL;
    if (!ascii) {
        PyObject *name = PyUnicode_Substring(html, s, e);
        if (name == NULL)
            return -1;
        lowered = PyObject_CallMethod(name, "lower", NULL);
        Py_DECREF(name);
        if (lowered == NULL)
            return -1;
        kind = PyUnicode_KIND(lowered);
        data = PyUnicode_DATA(lowered);
        len = PyUnicode_GET_LENGTH(lowered);
        s = 0;
        ascii = PyUnicode_IS_ASCII(lowered);
    }
    uint64_t word = 0;
    for (Py_ssize_t i = 0; i < len && i < 8; i++)
        word |= (uint64_t)ascii_lower(READ(s + i)) << (8 * i);
    Py_UCS4 ninth = len > 8 ? ascii_lower(READ(s + 8)) : 0;
    *cls = ascii ? classify(word, len, ninth, raw) : OTHER;
    if (ascii && len <= 8) {
        Py_XDECREF(lowered);
        key->word = word;
        key->len = len;
        key->hash = mix(word, len);
        return 0;
    }
    if (lowered == NULL && need_str) {
        lowered = PyUnicode_New(len, 127);
        if (lowered == NULL)
            return -1;
        Py_UCS1 *out = PyUnicode_1BYTE_DATA(lowered);
        for (Py_ssize_t i = 0; i < len; i++)
            out[i] = (Py_UCS1)ascii_lower(READ(s + i));
    }
    if (lowered == NULL) {
        key->len = -1;
        return 0;
    }
    key->hash = PyObject_Hash(lowered);
    if (key->hash == -1) {
        Py_DECREF(lowered);
        return -1;
    }
    key->str = lowered;
    key->len = len;
    key->word = 0;
    return 0;
}

/* The first "</" + RAW_NAMES[raw] at or after i, as re.IGNORECASE finds it, or n. */
INLINE Py_ssize_t raw_end(int kind, const void *data, Py_ssize_t i, Py_ssize_t n, size_t raw) {
    const char *name = RAW_NAMES[raw];
    Py_ssize_t len = (Py_ssize_t)strlen(name);
    for (;; i++) {
        i = find_char(kind, data, i, n, '<');
        if (n - i < len + 2)
            return n;
        if (READ(i + 1) != '/')
            continue;
        Py_ssize_t k = 0;
        for (; k < len; k++) {
            Py_UCS4 c = READ(i + 2 + k), want = (Py_UCS4)(unsigned char)name[k];
            if (kind == UTF8 && c >= 0x80)
                return UNDECIDED; /* U+0130, U+0131 or U+017F would match here */
            if (!(ascii_lower(c) == want || (want == 'i' && (c == 0x130 || c == 0x131)) ||
                  (want == 's' && c == 0x17f)))
                break;
        }
        if (k == len)
            return i;
    }
}

/* The first "-->" at or after i, or n. */
INLINE Py_ssize_t comment_end(int kind, const void *data, Py_ssize_t i, Py_ssize_t n) {
    for (;; i++) {
        i = find_char(kind, data, i, n, '-');
        if (n - i < 3)
            return n;
        if (READ(i + 1) == '-' && READ(i + 2) == '>')
            return i;
    }
}

/* too_deep for one kind (nothing for a page of at most `shallow` "<"): the offset, -1 for none, -2 on
 * error (exception set). */
INLINE Py_ssize_t too_deep_kind(PyObject *html, int kind, const void *data, Py_ssize_t n, Py_ssize_t limit,
                                Py_ssize_t shallow, Table *t) {
    Py_ssize_t depth = 0, pos = 0;
    if (!more_than(kind, data, n, shallow))
        return -1;
    while (pos < n) {
        Py_ssize_t p = find_char(kind, data, pos, n, '<');
        if (p + 1 >= n)
            return -1;
        Py_UCS4 c = READ(p + 1);
        if (c == '!' && p + 3 < n && READ(p + 2) == '-' && READ(p + 3) == '-') {
            Py_ssize_t end = comment_end(kind, data, p + 4, n);
            if (end >= n)
                return -1;
            pos = end + 3;
            continue;
        }
        int end_tag = c == '/' && p + 2 < n && is_letter(READ(p + 2));
        Py_ssize_t s = p + 1 + end_tag;
        if (!is_letter(READ(s))) {
            pos = p + 1;
            continue;
        }
        Py_ssize_t e = s;
        Py_UCS4 any = 0;
        uint64_t word = 0; /* the first 8 characters, lower-cased if ASCII (the common key) */
        while (e < n && (c = READ(e)) != '/' && c != '>' && !is_space(c)) {
            any |= c;
            if (e - s < 8)
                word |= (uint64_t)ascii_lower(c) << (8 * (e - s));
            e++;
        }
        pos = e;
        if (kind == UTF8 && any >= 128)
            return UNDECIDED; /* the text's name ends at Unicode whitespace and is lowered by str.lower() */
        Key key;
        int cls;
        size_t raw = 0;
        if (any < 128 && e - s <= 8) {
            cls = classify(word, e - s, 0, &raw);
            key.word = word;
            key.len = e - s;
            key.str = NULL;
            key.hash = mix(word, e - s);
        } else {
            int need_str = !end_tag || t->strs > 0;
            if (name_key(html, kind, data, s, e, any < 128, need_str, &key, &cls, &raw) < 0)
                return -2;
        }
        if (cls == FLAT || (end_tag && key.len < 0)) {
            Py_XDECREF(key.str);
            continue;
        }
        Py_ssize_t at = table_find(t, &key);
        if (at < 0) {
            Py_XDECREF(key.str);
            return -2;
        }
        Slot *slot = &t->slots[at];
        if (end_tag) {
            Py_XDECREF(key.str);
            if (slot->count) {
                depth--;
                if (--slot->count == 0)
                    table_remove(t, (size_t)at);
            }
            continue;
        }
        if (++depth > limit) {
            Py_XDECREF(key.str);
            return kind == UTF8 ? UNDECIDED : p;
        }
        if (slot->count) {
            Py_XDECREF(key.str); /* the slot holds its own */
        } else {
            slot->key = key; /* takes the reference */
            t->strs += key.str != NULL;
        }
        slot->count++;
        if (cls == PLAINTEXT)
            return -1;
        if (cls == RAW) {
            pos = raw_end(kind, data, pos, n, raw);
            if (pos == UNDECIDED)
                return UNDECIDED;
            if (pos >= n)
                return -1;
        }
    }
    return -1;
}

static Py_ssize_t too_deep_1(PyObject *h, const void *d, Py_ssize_t n, Py_ssize_t l, Py_ssize_t g,
                             Table *t) {
    return too_deep_kind(h, PyUnicode_1BYTE_KIND, d, n, l, g, t);
}
static Py_ssize_t too_deep_2(PyObject *h, const void *d, Py_ssize_t n, Py_ssize_t l, Py_ssize_t g,
                             Table *t) {
    return too_deep_kind(h, PyUnicode_2BYTE_KIND, d, n, l, g, t);
}
static Py_ssize_t too_deep_4(PyObject *h, const void *d, Py_ssize_t n, Py_ssize_t l, Py_ssize_t g,
                             Table *t) {
    return too_deep_kind(h, PyUnicode_4BYTE_KIND, d, n, l, g, t);
}
static Py_ssize_t too_deep_utf8(const void *d, Py_ssize_t n, Py_ssize_t l, Py_ssize_t g, Table *t) {
    return too_deep_kind(NULL, UTF8, d, n, l, g, t); /* names needing the str give up before name_key */
}

/* ---------------------------------------------------------------------------------------------------
 * Well-formed UTF-8, as Python's strict decoder takes it: no overlong form, no surrogate, nothing past
 * U+10FFFF, no truncated sequence. ASCII goes 8 bytes at a time.
 */
static int utf8_valid(const Py_UCS1 *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (!(word & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        Py_UCS1 c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        Py_ssize_t len;
        Py_UCS1 lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0; /* overlong */
            else if (c == 0xED)
                hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90; /* overlong */
            else if (c == 0xF4)
                hi = 0x8F; /* past U+10FFFF */
        } else
            return 0;
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (Py_ssize_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------------------
 * Module.
 */

/* html (a str) and `count` integers in [0, MAX_LIMIT] after it: limit, and shallow for too_deep. */
static int parse_args(PyObject *const *args, Py_ssize_t nargs, const char *fn, Py_ssize_t count,
                      Py_ssize_t *ints) {
    if (nargs != 1 + count) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments, %zd given", fn, 1 + count, nargs);
        return -1;
    }
    if (!PyUnicode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): html must be str", fn);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        ints[i] = PyLong_AsSsize_t(args[1 + i]);
        if (ints[i] == -1 && PyErr_Occurred())
            return -1;
        if (ints[i] < 0 || ints[i] > MAX_LIMIT) {
            PyErr_Format(PyExc_ValueError, "%s(): limits must be in [0, %d]", fn, MAX_LIMIT);
            return -1;
        }
    }
    return PyUnicode_READY(args[0]);
}

static PyObject *offset_or_none(Py_ssize_t at) {
    if (at < 0)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(at);
}

static PyObject *too_many_attrs(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t limit;
    if (parse_args(args, nargs, "too_many_attrs", 1, &limit) < 0)
        return NULL;
    PyObject *html = args[0];
    const void *data = PyUnicode_DATA(html);
    Py_ssize_t n = PyUnicode_GET_LENGTH(html);
    switch (PyUnicode_KIND(html)) {
    case PyUnicode_1BYTE_KIND:
        return offset_or_none(too_many_attrs_1(data, n, limit));
    case PyUnicode_2BYTE_KIND:
        return offset_or_none(too_many_attrs_2(data, n, limit));
    default:
        return offset_or_none(too_many_attrs_4(data, n, limit));
    }
}

static PyObject *too_deep(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t ints[2];
    if (parse_args(args, nargs, "too_deep", 2, ints) < 0)
        return NULL;
    Py_ssize_t limit = ints[0], shallow = ints[1];
    PyObject *html = args[0];
    size_t size = 16;
    while (size < 2 * ((size_t)limit + 1))
        size *= 2;
    Table t = {PyMem_Calloc(size, sizeof(Slot)), size - 1, 0};
    if (t.slots == NULL)
        return PyErr_NoMemory();
    const void *data = PyUnicode_DATA(html);
    Py_ssize_t n = PyUnicode_GET_LENGTH(html), at;
    switch (PyUnicode_KIND(html)) {
    case PyUnicode_1BYTE_KIND:
        at = too_deep_1(html, data, n, limit, shallow, &t);
        break;
    case PyUnicode_2BYTE_KIND:
        at = too_deep_2(html, data, n, limit, shallow, &t);
        break;
    default:
        at = too_deep_4(html, data, n, limit, shallow, &t);
    }
    table_free(&t);
    return at == -2 ? NULL : offset_or_none(at);
}

static PyObject *whole_utf8(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "whole_utf8(data: bytes, attrs_limit, depth_limit, shallow)");
        return NULL;
    }
    Py_ssize_t ints[3];
    for (Py_ssize_t i = 0; i < 3; i++) {
        ints[i] = PyLong_AsSsize_t(args[1 + i]);
        if (ints[i] == -1 && PyErr_Occurred())
            return NULL;
        if (ints[i] < 0 || ints[i] > MAX_LIMIT) {
            PyErr_Format(PyExc_ValueError, "whole_utf8(): limits must be in [0, %d]", MAX_LIMIT);
            return NULL;
        }
    }
    const Py_UCS1 *data = (const Py_UCS1 *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (!utf8_valid(data, n) || too_many_attrs_utf8(data, n, ints[0]) != -1)
        Py_RETURN_FALSE;
    size_t size = 16;
    while (size < 2 * ((size_t)ints[1] + 1))
        size *= 2;
    Table t = {PyMem_Calloc(size, sizeof(Slot)), size - 1, 0};
    if (t.slots == NULL)
        return PyErr_NoMemory();
    Py_ssize_t at = too_deep_utf8(data, n, ints[1], ints[2], &t);
    table_free(&t);
    if (at == -2)
        return NULL;
    return PyBool_FromLong(at == -1);
}

static PyMethodDef methods[] = {
    {"whole_utf8", (PyCFunction)(void (*)(void))whole_utf8, METH_FASTCALL,
     "whole_utf8(data, attrs_limit, depth_limit, shallow) -> bool: True when data is well-formed UTF-8\n"
     "and neither too_many_attrs nor too_deep cuts data.decode() (with those limits); False when it is\n"
     "not, or when the bytes cannot tell: decode and ask those two."},
    {"too_many_attrs", (PyCFunction)(void (*)(void))too_many_attrs, METH_FASTCALL,
     "too_many_attrs(html, limit): offset of the first tag with more than limit attributes, or None\n"
     "(polecat.parse.guard._too_many_attrs with MAX_ATTRS = limit)."},
    {"too_deep", (PyCFunction)(void (*)(void))too_deep, METH_FASTCALL,
     "too_deep(html, limit, shallow): offset of the first tag past limit open elements, or None\n"
     "(polecat.parse.guard._too_deep with MAX_DEPTH = limit), None if html has at most shallow '<'."},
    {NULL, NULL, 0, NULL},
};

static PyObject *name_set(const char *const *names, size_t count) {
    PyObject *set = PyFrozenSet_New(NULL);
    for (size_t i = 0; set && i < count; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (name == NULL || PySet_Add(set, name) < 0)
            Py_CLEAR(set);
        Py_XDECREF(name);
    }
    return set;
}

static int exec_module(PyObject *module) {
    classes_init();
    PyObject *flat = name_set(FLAT_NAMES, N_FLAT);
    if (flat == NULL || PyModule_AddObject(module, "FLAT", flat) < 0) {
        Py_XDECREF(flat);
        return -1;
    }
    PyObject *raw = name_set(RAW_NAMES, N_RAW);
    if (raw == NULL || PyModule_AddObject(module, "RAW", raw) < 0) {
        Py_XDECREF(raw);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "polecat.parse._guard",
    "Native rules 2 and 3 of polecat.parse.guard (the Python module is the specification).",
    0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__guard(void) { return PyModuleDef_Init(&module_def); }
