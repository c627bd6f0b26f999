/* tokens.h — the subset's headers as C tokens, for checkgen: comments
 * dropped, each preprocessor directive one token, brackets matched. */
#ifndef GPUSHARDS_CHECKGEN_TOKENS_H
#define GPUSHARDS_CHECKGEN_TOKENS_H

#include <stddef.h>

enum tok_kind { T_IDENT, T_NUMBER, T_STRING, T_PUNCT, T_DIRECTIVE };

struct tok {
    enum tok_kind kind;
    const char *text; /* not NUL-terminated: len bytes */
    int len;
    int line;
};

struct source {
    const char *path;
    char *text;
    struct tok *toks;
    int ntoks;
};

/* Reads and tokenizes path; later failures name it. */
void load(struct source *s, const char *path);
/* Prints "<the file being read>:line: message" and exits 1. */
void fail(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* items with room for one more: arrays that double at powers of two. */
void *grow(void *items, int count, size_t size);
char *join(const char *a, const char *b, const char *c);

int is(const struct tok *t, const char *text);
char *copy(const struct tok *t);
/* The index of the bracket that closes the one at open. */
int closing(const struct source *s, int open, int end);
/* The index of the ';' (at bracket depth 0) that ends the declaration starting at i. */
int statement_end(const struct source *s, int i, int end);
/* The name a directive "#keyword NAME..." names, or NULL for another directive. */
char *directive_name(const struct tok *t, const char *keyword);

#endif
