/* polecat.parse._extract: lexbor parse and link/text extraction in one pass (the native twin of
 * polecat/parse/html.py's Python path, which is the specification).
 *
 * Rules:
 * 1. No lexbor build dependency: selectolax's extension module carries lexbor's C symbols. bind(path)
 *    dlopen()s that already loaded module (RTLD_NOLOAD) and dlsym()s each function used here; one missing
 *    symbol and bind() raises, and polecat keeps the Python path.
 * 2. The tree is read through lexbor's functions (the *_noi ones), never through struct fields, with one
 *    exception: a text node's characters (rule 3).
 * 3. lexbor has no function that returns a text node's characters without copying them into the
 *    document's arena (lxb_dom_node_text_content: an allocation and a free per text node, on the hot
 *    path). They are read at their offset in lxb_dom_character_data_t (the node header, then a
 *    lexbor_str_t), through lexbor_str_data_noi/length_noi. bind() checks that offset on a probe document
 *    against lxb_dom_node_text_content and refuses to bind when they differ.
 * 4. Tag ids are not compiled in: bind() reads them off a probe document (lexbor renumbers its tags when
 *    it adds one).
 * 5. Every document is destroyed, or cleaned and kept for the next page (rule 7), on every path. Bytes
 *    that are not well-formed UTF-8 where this module has to interpret them raise ExtractError: the
 *    caller runs the Python path for that page. Python's str.strip()/split() whitespace is
 *    Py_UNICODE_ISSPACE, used here on decoded code points.
 * 6. The GIL is released only around lxb_html_document_parse (pure C over a buffer this call owns).
 * 7. A thread parses its pages into the one document it keeps (thread-local), cleaned after each page
 *    (lxb_html_document_clean: the document's arenas back to their first chunk, its parser kept), not a
 *    document made and destroyed a page: each new document makes a parser whose tokenizer mallocs two
 *    320 KiB token arenas, and past glibc's fixed mmap threshold (polecat/fetch/pool.py rule 13) each is
 *    an mmap, page faults and a munmap, two a page. The parser's own arenas are cleaned when the next
 *    page's parse begins. The one document a thread keeps (its arenas' first chunks, the token arenas
 *    among them) is not freed when the thread ends.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* lexbor's types, declared by hand from its headers (selectolax's lexbor.pxd declares the same). */
typedef unsigned char lxb_char_t;
typedef unsigned int lxb_status_t;
typedef uintptr_t lxb_tag_id_t;
typedef struct lxb_html_document lxb_html_document_t;
typedef struct lxb_dom_document lxb_dom_document_t;
typedef struct lxb_dom_node lxb_dom_node_t;
typedef struct lxb_dom_element lxb_dom_element_t;
typedef struct lxb_dom_attr lxb_dom_attr_t;
typedef struct lexbor_str lexbor_str_t;

/* Only to find the offset of a text node's characters (rule 3): lxb_dom_node_t, then lexbor_str_t. */
struct node_layout {
    void *event_target_events;
    uintptr_t local_name, prefix, ns;
    void *owner_document, *next, *prev, *parent, *first_child, *last_child, *user;
    int type; /* lxb_dom_node_type_t */
};
struct character_data_layout {
    struct node_layout node;
    struct { lxb_char_t *data; size_t length; } data;
};
#define TEXT_DATA_OFFSET offsetof(struct character_data_layout, data)

enum { NODE_ELEMENT = 1, NODE_TEXT = 3 }; /* DOM node type numbers (lxb_dom_node_type_t) */
#define LXB_STATUS_OK 0

static struct {
    lxb_html_document_t *(*document_create)(void);
    lxb_status_t (*document_parse)(lxb_html_document_t *, const lxb_char_t *, size_t);
    lxb_html_document_t *(*document_destroy)(lxb_html_document_t *);
    void (*document_clean)(lxb_html_document_t *);
    lxb_dom_node_t *(*body_element)(lxb_html_document_t *);
    lxb_dom_node_t *(*document_root)(lxb_dom_document_t *);
    void (*scripting_set)(lxb_dom_document_t *, bool);
    lxb_dom_node_t *(*first_child)(lxb_dom_node_t *);
    lxb_dom_node_t *(*next)(lxb_dom_node_t *);
    lxb_dom_node_t *(*parent)(lxb_dom_node_t *);
    int (*type)(lxb_dom_node_t *);
    lxb_tag_id_t (*tag_id)(lxb_dom_node_t *);
    lxb_dom_attr_t *(*first_attribute)(lxb_dom_element_t *);
    lxb_dom_attr_t *(*next_attribute)(lxb_dom_attr_t *);
    const lxb_char_t *(*attr_qualified_name)(const lxb_dom_attr_t *, size_t *);
    const lxb_char_t *(*attr_value)(lxb_dom_attr_t *, size_t *);
    const lxb_char_t *(*local_name)(lxb_dom_element_t *, size_t *);
    lxb_char_t *(*text_content)(lxb_dom_node_t *, size_t *);
    void *(*destroy_text)(lxb_dom_document_t *, lxb_char_t *);
    lxb_char_t *(*str_data)(lexbor_str_t *);
    size_t (*str_length)(lexbor_str_t *);
} lx;

static const struct { const char *name; void **slot; } SYMBOLS[] = {
    {"lxb_html_document_create", (void **)&lx.document_create},
    {"lxb_html_document_parse", (void **)&lx.document_parse},
    {"lxb_html_document_destroy", (void **)&lx.document_destroy},
    {"lxb_html_document_clean", (void **)&lx.document_clean},
    {"lxb_html_document_body_element_noi", (void **)&lx.body_element},
    {"lxb_dom_document_root", (void **)&lx.document_root},
    {"lxb_dom_document_scripting_set_noi", (void **)&lx.scripting_set},
    {"lxb_dom_node_first_child_noi", (void **)&lx.first_child},
    {"lxb_dom_node_next_noi", (void **)&lx.next},
    {"lxb_dom_node_parent_noi", (void **)&lx.parent},
    {"lxb_dom_node_type_noi", (void **)&lx.type},
    {"lxb_dom_node_tag_id_noi", (void **)&lx.tag_id},
    {"lxb_dom_element_first_attribute_noi", (void **)&lx.first_attribute},
    {"lxb_dom_element_next_attribute_noi", (void **)&lx.next_attribute},
    {"lxb_dom_attr_qualified_name", (void **)&lx.attr_qualified_name},
    {"lxb_dom_attr_value_noi", (void **)&lx.attr_value},
    {"lxb_dom_element_local_name", (void **)&lx.local_name},
    {"lxb_dom_node_text_content", (void **)&lx.text_content},
    {"lxb_dom_document_destroy_text_noi", (void **)&lx.destroy_text},
    {"lexbor_str_data_noi", (void **)&lx.str_data},
    {"lexbor_str_length_noi", (void **)&lx.str_length},
};
#define N_SYMBOLS (sizeof(SYMBOLS) / sizeof(SYMBOLS[0]))

/* Tag ids, read off a probe document (rule 4). */
enum { T_A, T_AREA, T_BASE, T_LINK, T_META, T_TITLE, T_SCRIPT, T_STYLE, T_NOSCRIPT, T_TEMPLATE, T_TEXT, N_TAGS };
static const char *const TAG_NAMES[N_TAGS - 1] = {"a", "area", "base", "link", "meta", "title", "script",
                                                   "style", "noscript", "template"};
static lxb_tag_id_t tag_ids[N_TAGS];
static bool bound = false;
static PyObject *ExtractError;
static PyObject *empty_str;

/* The lexbor document is an lxb_dom_document_t first: lexbor's own lxb_dom_interface_document cast. */
#define DOM_DOCUMENT(doc) ((lxb_dom_document_t *)(doc))

/* ---- UTF-8, the way Python decodes it ------------------------------------------------------------ */

/* Length of the well-formed UTF-8 sequence at s[0..n) and its code point, or 0 if malformed. */
static size_t utf8_at(const uint8_t *s, size_t n, Py_UCS4 *cp) {
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; *cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3; *cp = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
    }
    else if (c >= 0xF0 && c <= 0xF4) {
        len = 4; *cp = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
    }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        uint8_t b = s[i];
        if (b < lo || b > hi) return 0;
        lo = 0x80; hi = 0xBF;
        *cp = (*cp << 6) | (b & 0x3F);
    }
    return len;
}

/* Length of the well-formed sequence that ends at s[end) (not before s[start]), or 0. */
static size_t utf8_before(const uint8_t *s, size_t start, size_t end, Py_UCS4 *cp) {
    size_t i = end;
    for (int back = 0; back < 4 && i > start; back++) {
        i--;
        if ((s[i] & 0xC0) != 0x80) {
            size_t len = utf8_at(s + i, end - i, cp);
            return len == end - i ? len : 0;
        }
    }
    return 0;
}

/* str.strip() on bytes: [*b, *e) without leading and trailing whitespace code points. Stops at a
 * malformed sequence (kept, so the strict decode of the result fails and the page falls back). */
static void strip_span(const uint8_t *s, size_t n, size_t *b, size_t *e) {
    size_t i = 0, j = n, len;
    Py_UCS4 cp;
    while (i < j && (len = utf8_at(s + i, j - i, &cp)) && Py_UNICODE_ISSPACE(cp)) i += len;
    while (j > i && (len = utf8_before(s, i, j, &cp)) && Py_UNICODE_ISSPACE(cp)) j -= len;
    *b = i;
    *e = j;
}

static int ascii_ieq(const uint8_t *s, const char *word, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 'A' && c <= 'Z') c += 32;
        if (c != (uint8_t)word[i]) return 0;
    }
    return 1;
}

static const char *const SKIP_SCHEMES[] = {"javascript:", "mailto:", "data:", "tel:", "about:", "blob:",
                                           "file:", "ftp:", "sms:"};

/* html.py's skip_href(href): href[:12].lstrip().lower() is empty or starts with a skipped scheme. Only
 * ASCII letters lower to the ASCII of a scheme (U+0130 and U+212A lower to 'i'+U+0307 and 'k', which no
 * scheme can continue), so the comparison is ASCII. 1 = skip, 0 = keep, -1 = malformed. */
static int skip_href(const uint8_t *s, size_t n) {
    size_t i = 0, count = 0, len;
    Py_UCS4 cp;
    while (count < 12 && i < n) {
        if (!(len = utf8_at(s + i, n - i, &cp))) return -1;
        if (!Py_UNICODE_ISSPACE(cp)) break;
        i += len;
        count++;
    }
    if (count == 12 || i == n) return 1;
    for (size_t k = 0; k < sizeof(SKIP_SCHEMES) / sizeof(SKIP_SCHEMES[0]); k++) {
        size_t m = strlen(SKIP_SCHEMES[k]);
        if (m <= 12 - count && m <= n - i && ascii_ieq(s + i, SKIP_SCHEMES[k], m)) return 1;
    }
    return 0;
}

/* "nofollow" in rel.lower().split(): a whitespace-separated token of exactly those ASCII letters. */
static int rel_nofollow(const uint8_t *s, size_t n) {
    size_t i = 0, len, start = 0;
    bool in_token = false;
    Py_UCS4 cp;
    while (i <= n) {
        bool space = true;
        len = 1;
        if (i < n) {
            len = utf8_at(s + i, n - i, &cp);
            /* A malformed byte decodes to U+FFFD: part of a token, never "nofollow". */
            space = len && Py_UNICODE_ISSPACE(cp);
            if (!len) len = 1;
        }
        if (space && in_token) {
            if (i - start == 8 && ascii_ieq(s + start, "nofollow", 8)) return 1;
            in_token = false;
        }
        else if (!space && !in_token) {
            in_token = true;
            start = i;
        }
        i += len;
    }
    return 0;
}

static int contains_ascii_ci(const uint8_t *s, size_t n, const char *word) {
    size_t m = strlen(word);
    for (size_t i = 0; i + m <= n; i++)
        if (ascii_ieq(s + i, word, m)) return 1;
    return 0;
}

/* ---- a growable byte buffer ------------------------------------------------------------------------ */

typedef struct { char *p; size_t len, cap; size_t parts; } buf_t;

static int buf_put(buf_t *b, const void *data, size_t n) {
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n) {
            if (cap > PY_SSIZE_T_MAX / 2) { PyErr_NoMemory(); return -1; }
            cap *= 2;
        }
        char *p = PyMem_Realloc(b->p, cap);
        if (!p) { PyErr_NoMemory(); return -1; }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

/* Append one text node, stripped, after `sep` when it is not the first: sep.join(t.strip() ...). */
static int buf_add_text(buf_t *b, lxb_dom_node_t *node, const char *sep, size_t sep_len) {
    lexbor_str_t *str = (lexbor_str_t *)((char *)node + TEXT_DATA_OFFSET);
    const uint8_t *data = lx.str_data(str);
    if (!data) return 0; /* selectolax skips a text node without data */
    size_t n = lx.str_length(str), s, e;
    strip_span(data, n, &s, &e);
    if (b->parts++ && buf_put(b, sep, sep_len) < 0) return -1;
    return buf_put(b, data + s, e - s);
}

static PyObject *decode_strict(const char *s, size_t n) {
    PyObject *out = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, NULL);
    if (!out && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        PyErr_SetString(ExtractError, "text that is not UTF-8");
    }
    return out;
}

/* ---- attributes ---------------------------------------------------------------------------------- */

typedef struct { const uint8_t *value; size_t len; bool found; } attr_t;

/* node.attributes.get(name) (the last attribute whose qualified name is exactly `name`) when `last`;
 * node.attrs.get(name) (the first whose name is `name`, ASCII case-insensitively) when not. */
static attr_t get_attr(lxb_dom_node_t *node, const char *name, bool last) {
    attr_t out = {NULL, 0, false};
    size_t name_len = strlen(name);
    for (lxb_dom_attr_t *a = lx.first_attribute((lxb_dom_element_t *)node); a; a = lx.next_attribute(a)) {
        size_t qlen = 0, vlen = 0;
        const lxb_char_t *q = lx.attr_qualified_name(a, &qlen);
        if (!q || qlen != name_len) continue;
        if (last ? memcmp(q, name, name_len) != 0 : !ascii_ieq(q, name, name_len)) continue;
        out.value = lx.attr_value(a, &vlen);
        out.len = out.value ? vlen : 0;
        out.found = true;
        if (!last) break;
    }
    return out;
}

/* An attribute value as selectolax decodes it: None without a value, else UTF-8 with "replace". */
static PyObject *attr_str(attr_t a) {
    if (!a.value) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)a.value, (Py_ssize_t)a.len, "replace");
}

static int append_pair(PyObject *list, attr_t x, attr_t y) {
    PyObject *first = attr_str(x), *second = first ? attr_str(y) : NULL;
    PyObject *pair = second ? PyTuple_Pack(2, first, second) : NULL;
    Py_XDECREF(first);
    Py_XDECREF(second);
    if (!pair) return -1;
    int rc = PyList_Append(list, pair);
    Py_DECREF(pair);
    return rc;
}

/* ---- the walk ------------------------------------------------------------------------------------ */

typedef struct {
    lxb_dom_node_t *body;
    PyObject *links;      /* dict: stripped href -> None, in document order */
    PyObject *metas;      /* [(name, content)] of <meta name> */
    PyObject *canonicals; /* [(rel, href)] of <link> whose rel may hold "canonical" */
    PyObject *bases;      /* [href] of <base href> */
    PyObject *title;      /* the first non-empty title, or NULL */
    buf_t text;
} walk_t;

static bool is_invisible(lxb_tag_id_t t) {
    return t == tag_ids[T_SCRIPT] || t == tag_ids[T_STYLE] || t == tag_ids[T_NOSCRIPT]
           || t == tag_ids[T_TEMPLATE];
}

/* An <a>/<area>: its href, unless empty, skipped or rel=nofollow, stripped, into w->links. */
static int on_anchor(walk_t *w, lxb_dom_node_t *node) {
    attr_t href = get_attr(node, "href", true);
    if (!href.value || !href.len) return 0;
    int skip = skip_href(href.value, href.len);
    if (skip) {
        if (skip < 0) PyErr_SetString(ExtractError, "an href that is not UTF-8");
        return skip < 0 ? -1 : 0;
    }
    attr_t rel = get_attr(node, "rel", true);
    if (rel.value && rel_nofollow(rel.value, rel.len)) return 0;
    size_t s, e;
    strip_span(href.value, href.len, &s, &e);
    PyObject *key = decode_strict((const char *)href.value + s, e - s);
    if (!key) return -1;
    int rc = PyDict_SetDefault(w->links, key, Py_None) ? 0 : -1;
    Py_DECREF(key);
    return rc;
}

/* The node after `node` in a pre-order walk of root's subtree (lxb_dom_node_simple_walk's order), or
 * NULL at its end. */
static lxb_dom_node_t *following(lxb_dom_node_t *node, lxb_dom_node_t *root) {
    lxb_dom_node_t *down = lx.first_child(node);
    if (down) return down;
    while (node != root && !lx.next(node)) node = lx.parent(node);
    return node == root ? NULL : lx.next(node);
}

/* title.text(strip=True): the subtree's text nodes, each stripped, joined by nothing. */
static int on_title(walk_t *w, lxb_dom_node_t *title) {
    buf_t b = {NULL, 0, 0, 0};
    int rc = 0;
    lxb_dom_node_t *node = lx.first_child(title);
    while (node && rc == 0) {
        if (lx.tag_id(node) == tag_ids[T_TEXT]) rc = buf_add_text(&b, node, "", 0);
        node = following(node, title);
    }
    if (rc == 0 && b.len) {
        w->title = decode_strict(b.p, b.len);
        rc = w->title ? 0 : -1;
    }
    PyMem_Free(b.p);
    return rc;
}

static int on_element(walk_t *w, lxb_dom_node_t *node, lxb_tag_id_t t) {
    if (t == tag_ids[T_A] || t == tag_ids[T_AREA]) return on_anchor(w, node);
    if (t == tag_ids[T_META]) {
        attr_t name = get_attr(node, "name", false);
        return name.found ? append_pair(w->metas, name, get_attr(node, "content", false)) : 0;
    }
    if (t == tag_ids[T_LINK]) {
        attr_t rel = get_attr(node, "rel", false);
        if (!rel.value || !contains_ascii_ci(rel.value, rel.len, "canonical")) return 0;
        return append_pair(w->canonicals, rel, get_attr(node, "href", false));
    }
    if (t == tag_ids[T_BASE]) {
        attr_t href = get_attr(node, "href", false);
        if (!href.found) return 0;
        PyObject *s = attr_str(href);
        int rc = s ? PyList_Append(w->bases, s) : -1;
        Py_XDECREF(s);
        return rc;
    }
    if (t == tag_ids[T_TITLE] && !w->title) return on_title(w, node);
    return 0;
}

/* One pre-order walk of the tree from the root element (what lexbor's selector search walks, so
 * <template> contents are not visited): elements as above; text nodes inside <body> and outside every
 * script/style/noscript/template, joined by spaces. `invisible` counts the invisible elements open. */
static int walk(walk_t *w, lxb_dom_node_t *root) {
    size_t invisible = 0;
    bool in_body = false;
    lxb_dom_node_t *node = root;
    while (node) {
        lxb_tag_id_t t = lx.tag_id(node);
        if (t == tag_ids[T_TEXT]) {
            if (in_body && !invisible && buf_add_text(&w->text, node, " ", 1) < 0) return -1;
        }
        else if (lx.type(node) == NODE_ELEMENT) {
            if (on_element(w, node, t) < 0) return -1;
            if (is_invisible(t)) invisible++;
            if (node == w->body) in_body = true;
        }
        lxb_dom_node_t *down = lx.first_child(node);
        if (down) { node = down; continue; }
        /* Leave node and every ancestor that has no next sibling, closing what they opened. */
        for (;;) {
            if (node != root && lx.type(node) == NODE_ELEMENT) {
                lxb_tag_id_t tt = lx.tag_id(node);
                if (is_invisible(tt)) invisible--;
                if (node == w->body) in_body = false;
            }
            if (node == root) return 0;
            lxb_dom_node_t *next = lx.next(node);
            if (next) { node = next; break; }
            node = lx.parent(node);
            if (!node) return 0;
        }
    }
    return 0;
}

/* The document this thread parses into (rule 7); NULL while a page uses it, or before the first. It is
 * taken (parse) and given back (release) with the GIL held, and a thread parses one page at a time. */
static _Thread_local lxb_html_document_t *kept_doc = NULL;

/* Rule 7: the document of the page done, cleaned and kept for this thread's next page. */
static void release(lxb_html_document_t *doc) {
    lx.document_clean(doc);
    kept_doc = doc;
}

static lxb_html_document_t *parse(const char *html, size_t len) {
    lxb_html_document_t *doc = kept_doc;
    kept_doc = NULL;
    if (!doc) doc = lx.document_create();
    if (!doc) { PyErr_SetString(ExtractError, "lexbor could not create a document"); return NULL; }
    lx.scripting_set(DOM_DOCUMENT(doc), false); /* as selectolax's LexborHTMLParser(html) */
    lxb_status_t status;
    Py_BEGIN_ALLOW_THREADS
    status = lx.document_parse(doc, (const lxb_char_t *)html, len);
    Py_END_ALLOW_THREADS
    if (status != LXB_STATUS_OK) {
        lx.document_destroy(doc); /* its state is unknown: the next page makes a new one */
        PyErr_SetString(ExtractError, "lexbor could not parse the document");
        return NULL;
    }
    return doc;
}

/* The UTF-8 that selectolax parses: html.encode("utf-8", errors="ignore"). */
static PyObject *encode(PyObject *html) {
    PyObject *bytes = PyUnicode_AsUTF8String(html);
    if (!bytes && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyErr_Clear();
        bytes = PyUnicode_AsEncodedString(html, "utf-8", "ignore");
    }
    return bytes;
}

static PyObject *dict_keys_tuple(PyObject *dict) {
    PyObject *out = PyTuple_New(PyDict_GET_SIZE(dict));
    if (!out) return NULL;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        Py_INCREF(key);
        PyTuple_SET_ITEM(out, i++, key);
    }
    return out;
}

PyDoc_STRVAR(extract_doc,
"extract(html) -> (links, title, text, metas, canonicals, bases)\n\n"
"Parse ``html`` (a str, or well-formed UTF-8 bytes, parsed as they are) with lexbor and return, in one\n"
"walk: the followable hrefs of <a>/<area> (stripped, in\n"
"document order, duplicates removed; rel=nofollow and skipped schemes left out), the first non-empty\n"
"title, the body text, and the raw attributes of <meta name> (name, content), <link rel~=canonical>\n"
"(rel, href) and <base href> (href), in document order, for html.py to decide on. Raises ExtractError\n"
"when the page needs the Python path.");

static PyObject *extract(PyObject *module, PyObject *html) {
    (void)module;
    if (!bound) { PyErr_SetString(ExtractError, "not bound to lexbor: call bind() first"); return NULL; }
    PyObject *bytes;
    if (PyBytes_CheckExact(html))
        bytes = Py_NewRef(html);
    else if (PyUnicode_Check(html))
        bytes = encode(html);
    else {
        PyErr_SetString(PyExc_TypeError, "html must be a str or UTF-8 bytes");
        return NULL;
    }
    if (!bytes) return NULL;
    lxb_html_document_t *doc = parse(PyBytes_AS_STRING(bytes), (size_t)PyBytes_GET_SIZE(bytes));
    if (!doc) { Py_DECREF(bytes); return NULL; }
    walk_t w = {0};
    w.body = lx.body_element(doc);
    w.links = PyDict_New();
    w.metas = PyList_New(0);
    w.canonicals = PyList_New(0);
    w.bases = PyList_New(0);
    PyObject *result = NULL;
    if (w.links && w.metas && w.canonicals && w.bases) {
        lxb_dom_node_t *root = lx.document_root(DOM_DOCUMENT(doc));
        if (!root || walk(&w, root) == 0) {
            PyObject *links = dict_keys_tuple(w.links);
            PyObject *text = links ? decode_strict(w.text.p ? w.text.p : "", w.text.len) : NULL;
            if (text)
                result = PyTuple_Pack(6, links, w.title ? w.title : empty_str, text, w.metas, w.canonicals,
                                      w.bases);
            Py_XDECREF(links);
            Py_XDECREF(text);
        }
    }
    release(doc);
    Py_DECREF(bytes);
    PyMem_Free(w.text.p);
    Py_XDECREF(w.links);
    Py_XDECREF(w.metas);
    Py_XDECREF(w.canonicals);
    Py_XDECREF(w.bases);
    Py_XDECREF(w.title);
    return result;
}

/* ---- binding ------------------------------------------------------------------------------------- */

static const char PROBE[] = "<html><head><title>polecat probe</title><base><link><meta><script></script>"
                            "<style></style><noscript></noscript><template></template></head>"
                            "<body><a></a><map><area></map></body></html>";

/* Tag ids (rule 4) and the text offset (rule 3) from the probe document; -1 with an error set. */
static int probe(void) {
    lxb_html_document_t *doc = parse(PROBE, sizeof(PROBE) - 1);
    if (!doc) return -1;
    bool text_ok = false;
    for (int i = 0; i < N_TAGS; i++) tag_ids[i] = 0;
    lxb_dom_node_t *root = lx.document_root(DOM_DOCUMENT(doc)), *node = root;
    while (node) {
        int type = lx.type(node);
        if (type == NODE_ELEMENT) {
            size_t len = 0;
            const lxb_char_t *name = lx.local_name((lxb_dom_element_t *)node, &len);
            for (int i = 0; name && i < N_TAGS - 1; i++)
                if (len == strlen(TAG_NAMES[i]) && memcmp(name, TAG_NAMES[i], len) == 0)
                    tag_ids[i] = lx.tag_id(node);
        }
        else if (type == NODE_TEXT && !text_ok) {
            tag_ids[T_TEXT] = lx.tag_id(node);
            size_t len = 0;
            lxb_char_t *copy = lx.text_content(node, &len);
            lexbor_str_t *str = (lexbor_str_t *)((char *)node + TEXT_DATA_OFFSET);
            const lxb_char_t *data = lx.str_data(str);
            text_ok = copy && data && len == 13 && lx.str_length(str) == len && memcmp(copy, data, len) == 0
                      && memcmp(copy, "polecat probe", len) == 0;
            if (copy) lx.destroy_text(DOM_DOCUMENT(doc), copy);
        }
        node = following(node, root);
    }
    release(doc);
    for (int i = 0; i < N_TAGS; i++)
        for (int j = 0; j < i; j++)
            if (tag_ids[i] == tag_ids[j]) {
                PyErr_SetString(ExtractError, "lexbor's tag ids could not be read off the probe document");
                return -1;
            }
    if (!text_ok) {
        PyErr_SetString(ExtractError, "lexbor's text nodes do not have the layout this module reads");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(bind_doc,
"bind(path)\n\n"
"Bind to the lexbor functions in the already loaded shared object ``path`` (selectolax.lexbor.__file__).\n"
"Raises ExtractError when the object is not loaded, a symbol is missing, or a probe document does not\n"
"read as expected; extract() is then unusable.");

static PyObject *bind(PyObject *module, PyObject *arg) {
    (void)module;
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(arg, &path)) return NULL;
    bound = false;
    void *handle = dlopen(PyBytes_AS_STRING(path), RTLD_NOW | RTLD_NOLOAD);
    Py_DECREF(path);
    if (!handle) {
        const char *why = dlerror();
        PyErr_Format(ExtractError, "dlopen: %s", why ? why : "not loaded");
        return NULL;
    }
    /* The handle is kept: selectolax stays loaded for the life of the process. */
    for (size_t i = 0; i < N_SYMBOLS; i++) {
        *SYMBOLS[i].slot = dlsym(handle, SYMBOLS[i].name);
        if (!*SYMBOLS[i].slot) {
            PyErr_Format(ExtractError, "lexbor symbol %s is missing", SYMBOLS[i].name);
            return NULL;
        }
    }
    if (probe() < 0) return NULL;
    bound = true;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, bind_doc},
    {"extract", extract, METH_O, extract_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "polecat.parse._extract",
    "lexbor parse and link/text extraction in one pass (native twin of polecat.parse.html).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__extract(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    empty_str = PyUnicode_New(0, 0);
    ExtractError = PyErr_NewExceptionWithDoc("polecat.parse._extract.ExtractError",
                                             "The page (or the binding) needs the Python path.", NULL, NULL);
    if (!empty_str || !ExtractError || PyModule_AddObjectRef(m, "ExtractError", ExtractError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
