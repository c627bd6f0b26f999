/* tokens.c — see tokens.h. */
#include "tokens.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *reading; /* the file fail() names */

void fail(int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", reading != NULL ? reading : "cuda-subset-checkgen", line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void *grow(void *items, int count, size_t size)
{
    if (count > 0 && (count & (count - 1)) != 0) return items;
    void *more = realloc(items, (size_t)(count == 0 ? 8 : count * 2) * size);
    if (more == NULL) fail(0, "out of memory");
    return more;
}

char *join(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *out = malloc(n);
    if (out == NULL) fail(0, "out of memory");
    snprintf(out, n, "%s%s%s", a, b, c);
    return out;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail(0, "cannot open %s", path);
    size_t cap = 1 << 16, len = 0, got;
    char *text = malloc(cap);
    if (text == NULL) fail(0, "out of memory");
    while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            cap *= 2;
            text = realloc(text, cap);
            if (text == NULL) fail(0, "out of memory");
        }
    }
    if (ferror(f)) fail(0, "cannot read %s", path);
    fclose(f);
    text[len] = '\0';
    return text;
}

static void push(struct source *s, enum tok_kind kind, const char *text, int len, int line)
{
    s->toks = grow(s->toks, s->ntoks, sizeof *s->toks);
    s->toks[s->ntoks++] = (struct tok){kind, text, len, line};
}

static int is_word(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

static void tokenize(struct source *s)
{
    const char *p = s->text;
    int line = 1, line_start = 1;
    while (*p != '\0') {
        const char *start = p;
        if (*p == '\n') {
            line++;
            line_start = 1;
            p++;
            continue;
        }
        if (isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            if (end == NULL) fail(line, "unterminated comment");
            for (; p < end; p++) line += *p == '\n';
            p = end + 2;
            continue;
        }
        if (p[0] == '/' && p[1] == '/') {
            while (*p != '\0' && *p != '\n') p++;
            continue;
        }
        if (*p == '#' && line_start) { /* to the end of the line, continuation lines included */
            int first = line;
            while (*p != '\0' && !(*p == '\n' && p[-1] != '\\')) line += *p++ == '\n';
            push(s, T_DIRECTIVE, start, (int)(p - start), first);
            continue;
        }
        line_start = 0;
        if (isalpha((unsigned char)*p) || *p == '_') {
            while (is_word(*p)) p++;
            push(s, T_IDENT, start, (int)(p - start), line);
        } else if (isdigit((unsigned char)*p)) {
            while (is_word(*p) || *p == '.') p++;
            push(s, T_NUMBER, start, (int)(p - start), line);
        } else if (*p == '"') {
            for (p++; *p != '\0' && *p != '"' && *p != '\n'; p++)
                if (*p == '\\' && p[1] != '\0') p++;
            if (*p != '"') fail(line, "unterminated string");
            p++;
            push(s, T_STRING, start, (int)(p - start), line);
        } else {
            push(s, T_PUNCT, start, 1, line);
            p++;
        }
    }
}

void load(struct source *s, const char *path)
{
    *s = (struct source){.path = path, .text = read_file(path)};
    reading = path;
    tokenize(s);
}

int is(const struct tok *t, const char *text)
{
    return t->len == (int)strlen(text) && memcmp(t->text, text, (size_t)t->len) == 0;
}

char *copy(const struct tok *t)
{
    char *out = malloc((size_t)t->len + 1);
    if (out == NULL) fail(t->line, "out of memory");
    memcpy(out, t->text, (size_t)t->len);
    out[t->len] = '\0';
    return out;
}

int closing(const struct source *s, int open, int end)
{
    int depth = 0;
    for (int i = open; i < end; i++) {
        const struct tok *t = &s->toks[i];
        if (t->kind != T_PUNCT) continue;
        if (is(t, "(") || is(t, "{") || is(t, "[")) depth++;
        if (is(t, ")") || is(t, "}") || is(t, "]")) depth--;
        if (depth == 0) return i;
    }
    fail(s->toks[open].line, "unbalanced '%.*s'", s->toks[open].len, s->toks[open].text);
}

int statement_end(const struct source *s, int i, int end)
{
    int first = s->toks[i].line;
    for (; i < end; i++) {
        const struct tok *t = &s->toks[i];
        if (t->kind == T_DIRECTIVE) fail(t->line, "a directive inside a declaration");
        if (is(t, ";")) return i;
        if (is(t, "(") || is(t, "{") || is(t, "[")) i = closing(s, i, end);
    }
    fail(first, "a declaration without ';'");
}

char *directive_name(const struct tok *t, const char *keyword)
{
    const char *p = t->text + 1, *end = t->text + t->len;
    size_t klen = strlen(keyword);
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if ((size_t)(end - p) <= klen || memcmp(p, keyword, klen) != 0 || !isspace((unsigned char)p[klen])) return NULL;
    p += klen;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    const char *name = p;
    while (p < end && is_word(*p)) p++;
    if (p == name) fail(t->line, "#%s without a name", keyword);
    struct tok word = {T_IDENT, name, (int)(p - name), t->line};
    return copy(&word);
}
