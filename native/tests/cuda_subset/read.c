/* read.c — the names cuda_subset.h and cuda_subset_types.h declare (see
 * subset.h).  Only the restricted C the two headers are written in is read;
 * anything else stops checkgen with its line, rather than be skipped. */
#include "subset.h"

#include <stdlib.h>
#include <string.h>

/* The headers' own macros (include guards, the version they were taken
 * from) are named GPUSHARDS_*: cuda.h has none of them. */
static int is_own(const char *macro)
{
    return strncmp(macro, "GPUSHARDS_", strlen("GPUSHARDS_")) == 0;
}

/* A declarator's name: the one in "(*NAME)" for a function pointer, else
 * the last identifier before any array bounds. */
static const struct tok *declared_name(const struct source *s, int from, int to)
{
    const struct tok *name = NULL;
    for (int i = from; i < to; i++) {
        const struct tok *t = &s->toks[i];
        if (is(t, "(") && i + 2 < to && is(&s->toks[i + 1], "*") && s->toks[i + 2].kind == T_IDENT)
            return &s->toks[i + 2];
        if (is(t, "[")) break;
        if (t->kind == T_IDENT) name = t;
    }
    if (name == NULL) fail(s->toks[from < to ? from : to].line, "a declaration without a name");
    return name;
}

static void add_decl(struct subset *out, enum decl_kind kind, const struct tok *t)
{
    out->decls = grow(out->decls, out->ndecls, sizeof *out->decls);
    out->decls[out->ndecls++] = (struct decl){kind, copy(t), t->line};
}

void read_declarations(struct subset *out, const struct source *s)
{
    for (int i = 0; i < s->ntoks;) {
        const struct tok *t = &s->toks[i];
        if (t->kind == T_DIRECTIVE) {
            char *name = directive_name(t, "define");
            if (name != NULL && !is_own(name)) {
                struct tok word = {T_IDENT, name, (int)strlen(name), t->line};
                add_decl(out, D_MACRO, &word);
            }
            i++;
            continue;
        }
        /* extern "C" { ... } for C++ readers */
        if (is(t, "extern") && i + 2 < s->ntoks && s->toks[i + 1].kind == T_STRING && is(&s->toks[i + 2], "{")) {
            i += 3;
            continue;
        }
        if (is(t, "}")) {
            i++;
            continue;
        }
        int end = statement_end(s, i, s->ntoks);
        if (is(t, "typedef")) {
            add_decl(out, D_TYPE, declared_name(s, i + 1, end));
        } else {
            int paren = i;
            while (paren < end && !is(&s->toks[paren], "(")) paren++;
            if (paren == end || paren == i || s->toks[paren - 1].kind != T_IDENT)
                fail(t->line, "neither a typedef nor a function prototype");
            add_decl(out, D_FUNCTION, &s->toks[paren - 1]);
        }
        i = end + 1;
    }
}

int is_renamed(const struct subset *sub, const char *word, int len)
{
    for (int i = 0; i < sub->nrenamed; i++)
        if ((int)strlen(sub->renamed[i]) == len && memcmp(sub->renamed[i], word, (size_t)len) == 0) return 1;
    return 0;
}

static void add_renamed(struct subset *out, const struct tok *t)
{
    if (is_renamed(out, t->text, t->len)) return;
    out->renamed = grow(out->renamed, out->nrenamed, sizeof *out->renamed);
    out->renamed[out->nrenamed++] = copy(t);
}

static void add_alias(struct subset *out, const struct source *s, const struct tok *name, int from, int to)
{
    out->aliases = grow(out->aliases, out->naliases, sizeof *out->aliases);
    struct alias *a = &out->aliases[out->naliases++];
    *a = (struct alias){.name = copy(name), .line = name->line};
    a->target = malloc(sizeof *a->target * (size_t)(to - from));
    if (a->target == NULL) fail(name->line, "out of memory");
    for (int i = from; i < to; i++) a->target[a->ntarget++] = copy(&s->toks[i]);
}

static void read_enumerators(struct subset *out, const struct source *s, int open, int close)
{
    for (int i = open + 1; i < close; i++) {
        const struct tok *t = &s->toks[i];
        if (t->kind != T_IDENT) fail(t->line, "an enumerator must be a name");
        out->enumerators = grow(out->enumerators, out->nenumerators, sizeof *out->enumerators);
        out->enumerators[out->nenumerators++] = (struct enumerator){copy(t), t->line};
        add_renamed(out, t);
        while (i < close && !is(&s->toks[i], ",")) { /* its value */
            if (is(&s->toks[i], "(")) i = closing(s, i, close);
            i++;
        }
    }
}

static void add_member(struct aggregate *a, char *path, int same_type, int line)
{
    a->members = grow(a->members, a->nmembers, sizeof *a->members);
    a->members[a->nmembers++] = (struct member){path, same_type, line};
}

/* "struct {" or "struct TAG {" at i: the index of its '{', else 0. */
static int body_at(const struct source *s, int i, int end)
{
    const struct tok *t = &s->toks[i];
    if (!(is(t, "struct") || is(t, "union") || is(t, "enum")) || i + 1 >= end) return 0;
    if (is(&s->toks[i + 1], "{")) return i + 1;
    if (i + 2 < end && s->toks[i + 1].kind == T_IDENT && is(&s->toks[i + 2], "{")) return i + 2;
    return 0;
}

static void read_members(struct subset *out, const struct source *s, struct aggregate *a, const char *prefix,
                         int open, int close);

/* A member that is a struct or union itself: each of its declarators is a
 * member, and so is each member of it.  An anonymous one's members are the
 * outer struct's. */
static void read_nested(struct subset *out, const struct source *s, struct aggregate *a, const char *prefix,
                        int inner, int end)
{
    int inner_close = closing(s, inner, end);
    if (inner_close + 1 == end) {
        read_members(out, s, a, prefix, inner, inner_close);
        return;
    }
    for (int from = inner_close + 1, k = from; k <= end; k++) {
        if (k < end && !is(&s->toks[k], ",")) {
            if (is(&s->toks[k], "[")) k = closing(s, k, end);
            continue;
        }
        const struct tok *name = declared_name(s, from, k);
        char *path = join(prefix, copy(name), "");
        add_member(a, path, 0, name->line);
        read_members(out, s, a, join(path, ".", ""), inner, inner_close);
        from = k + 1;
    }
}

/* The members between the braces at open and close, their paths under prefix. */
static void read_members(struct subset *out, const struct source *s, struct aggregate *a, const char *prefix,
                         int open, int close)
{
    for (int i = open + 1; i < close;) {
        int end = statement_end(s, i, close), inner = body_at(s, i, end);
        if (inner != 0 && is(&s->toks[i], "enum")) fail(s->toks[i].line, "define enums outside structs");
        if (inner != 0) {
            read_nested(out, s, a, prefix, inner, end);
            i = end + 1;
            continue;
        }
        /* One or more declarators after the type: "int a, *b[4];". */
        int same_type = 1;
        for (int k = i; k < end; k++) {
            if (is(&s->toks[k], ":")) fail(s->toks[k].line, "bit-fields cannot be checked");
            if (s->toks[k].kind == T_IDENT && is_renamed(out, s->toks[k].text, s->toks[k].len)) same_type = 0;
        }
        for (int from = i, k = i; k <= end; k++) {
            if (k < end && !is(&s->toks[k], ",")) {
                if (is(&s->toks[k], "(") || is(&s->toks[k], "[")) k = closing(s, k, end);
                continue;
            }
            const struct tok *name = declared_name(s, from, k);
            add_member(a, join(prefix, copy(name), ""), same_type, name->line);
            from = k + 1;
        }
        i = end + 1;
    }
}

/* "typedef TARGET NAME;" */
static void read_alias(struct subset *out, const struct source *s, int from, int end)
{
    const struct tok *name = declared_name(s, from, end);
    if (name != &s->toks[end - 1]) fail(name->line, "only \"typedef TYPE NAME;\" can be checked here");
    add_renamed(out, name);
    add_alias(out, s, name, from, end - 1);
}

/* "[typedef] enum|struct|union [TAG] { ... } [NAME];", the keyword at k, its '{' at open. */
static void read_definition(struct subset *out, const struct source *s, int is_typedef, int k, int open, int end)
{
    const struct tok *kw = &s->toks[k];
    const struct tok *tag = open == k + 2 ? &s->toks[k + 1] : NULL;
    int close = closing(s, open, end);
    const struct tok *name = NULL;
    if (is_typedef) {
        if (close + 2 != end || s->toks[close + 1].kind != T_IDENT)
            fail(kw->line, "only \"typedef %.*s TAG { ... } NAME;\" can be checked here", kw->len, kw->text);
        name = &s->toks[close + 1];
        add_renamed(out, name);
    } else if (close + 1 != end) {
        fail(kw->line, "declare no object here");
    }
    if (tag != NULL) add_renamed(out, tag);
    if (tag != NULL && name != NULL) add_alias(out, s, name, k, k + 2);
    char *spelling = tag != NULL ? join(copy(kw), " ", copy(tag)) : name != NULL ? copy(name) : NULL;
    if (is(kw, "enum")) {
        read_enumerators(out, s, open, close);
        out->enums = grow(out->enums, out->nenums, sizeof *out->enums);
        out->enums[out->nenums++] = (struct enumeration){spelling, kw->line};
        return;
    }
    if (spelling == NULL) fail(kw->line, "an untagged struct needs a typedef name");
    out->aggregates = grow(out->aggregates, out->naggregates, sizeof *out->aggregates);
    struct aggregate *a = &out->aggregates[out->naggregates++];
    *a = (struct aggregate){.spelling = spelling, .line = kw->line};
    read_members(out, s, a, "", open, close);
}

void read_types(struct subset *out, const struct source *s)
{
    for (int i = 0; i < s->ntoks;) {
        const struct tok *t = &s->toks[i];
        if (t->kind == T_DIRECTIVE) {
            char *name = directive_name(t, "define");
            if (name != NULL && !is_own(name)) fail(t->line, "macros belong in cuda_subset.h");
            i++;
            continue;
        }
        int end = statement_end(s, i, s->ntoks);
        int is_typedef = is(t, "typedef"), k = is_typedef ? i + 1 : i;
        int open = body_at(s, k, end);
        if (open != 0) read_definition(out, s, is_typedef, k, open, end);
        else if (is_typedef) read_alias(out, s, k, end);
        else fail(t->line, "neither a typedef nor an enum or struct definition");
        i = end + 1;
    }
}
