/* checkgen.c — writes the C file that checks cuda_subset.h against the
 * CUDA toolkit's cuda.h (CMakeLists.txt next to it builds and compiles it):
 *
 *   cuda-subset-checkgen cuda_subset.h cuda_subset_types.h OUT.c
 *
 * OUT.c includes cuda.h, then has the compiler check:
 *   1. that every macro, typedef and function cuda_subset.h declares is
 *      one of cuda.h's (a name cuda.h lacks would otherwise be a new
 *      declaration, not a repeated one), and that each function is named
 *      by its symbol, not by a name cuda.h renames;
 *   2. every declaration of cuda_subset.h, by including it after cuda.h
 *      with its enums and structs taken from cuda.h: C accepts a typedef
 *      again only as the same type, a macro only with the same replacement
 *      (a warning, made an error) and a function only with a compatible
 *      type;
 *   3. every enum and struct of cuda_subset_types.h, included under other
 *      names (each tag, typedef name and enumerator renamed gs_subset_*):
 *      each enumerator's value, each enum's size and signedness, each
 *      struct's size and alignment, and every member's offset, size and
 *      type.
 * This program only finds the names (read.c); the compiler compares.
 * #line directives make its errors point into the subset's headers. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "subset.h"

#define RENAME_PREFIX "gs_subset_"

/* spelling with its renamed words prefixed: "struct gs_subset_CUuuid_st". */
static char *subset_spelling(const struct subset *sub, const char *spelling)
{
    size_t cap = strlen(spelling) * 2 + 64, len = 0;
    char *out = malloc(cap);
    if (out == NULL) fail(0, "out of memory");
    for (const char *p = spelling; *p != '\0';) {
        const char *word = p;
        while (isalnum((unsigned char)*p) || *p == '_') p++;
        if (p == word) p++;
        const char *prefix = is_renamed(sub, word, (int)(p - word)) ? RENAME_PREFIX : "";
        if (len + strlen(prefix) + (size_t)(p - word) + 1 > cap) fail(0, "a name too long: %s", spelling);
        len += (size_t)sprintf(out + len, "%s%.*s", prefix, (int)(p - word), word);
    }
    out[len] = '\0';
    return out;
}

/* The next line of out is line of path, for the compiler's messages. */
static void at(FILE *out, int line, const char *path)
{
    fprintf(out, "#line %d \"%s\"\n", line, path);
}

/* _Static_assert(WHAT(cuda.h's) == WHAT(the subset's), "NAME: ... differs from cuda.h"),
 * WHAT a printf format of the type's spelling and a member's path. */
static void compare(FILE *out, const struct subset *sub, const char *what, const char *spelling, const char *path,
                    const char *name, const char *differs)
{
    char *renamed = subset_spelling(sub, spelling);
    fputs("_Static_assert(", out);
    fprintf(out, what, spelling, path);
    fputs(" == ", out);
    fprintf(out, what, renamed, path);
    fprintf(out, ", \"%s: %s differs from cuda.h\");\n", name, differs);
    free(renamed);
}

static void check_names(FILE *out, const struct subset *sub, const char *path)
{
    fputs("/* 1. Every name cuda_subset.h declares is one of cuda.h's. */\n", out);
    for (int i = 0; i < sub->ndecls; i++) {
        const struct decl *d = &sub->decls[i];
        at(out, d->line, path);
        switch (d->kind) {
        case D_MACRO:
            fprintf(out, "#ifndef %s\n#error \"cuda.h defines no macro %s\"\n#endif\n", d->name, d->name);
            break;
        case D_TYPE:
            fprintf(out, "_Static_assert(sizeof(%s *) > 0, \"%s\");\n", d->name, d->name);
            break;
        case D_FUNCTION:
            /* by the symbol it binds to: a name cuda.h renames binds elsewhere */
            fprintf(out, "#ifdef %s\n#error \"cuda.h renames %s: declare the symbol it binds to\"\n#endif\n", d->name,
                    d->name);
            at(out, d->line, path);
            fprintf(out, "_Static_assert(sizeof(&%s) > 0, \"%s\");\n", d->name, d->name);
            break;
        }
    }
}

static void check_declarations(FILE *out)
{
    fputs("\n/* 2. Each typedef, macro and prototype again, after cuda.h's. */\n", out);
    fputs("#define GPUSHARDS_CUDA_SUBSET_TYPES_H /* the enums and structs are cuda.h's here */\n", out);
    fputs("#include \"cuda_subset.h\"\n", out);
}

static void check_enums(FILE *out, const struct subset *sub, const char *path)
{
    for (int i = 0; i < sub->nenumerators; i++) {
        const struct enumerator *e = &sub->enumerators[i];
        at(out, e->line, path);
        /* as numbers: comparing two enums' constants is a warning */
        compare(out, sub, "(long long)%s%s", e->name, "", e->name, "value");
    }
    for (int i = 0; i < sub->nenums; i++) {
        const struct enumeration *e = &sub->enums[i];
        if (e->spelling == NULL) continue;
        at(out, e->line, path);
        compare(out, sub, "sizeof(%s)%s", e->spelling, "", e->spelling, "size");
        at(out, e->line, path);
        compare(out, sub, "((%s)-1 > 0%s)", e->spelling, "", e->spelling, "signedness");
    }
}

static void check_aggregates(FILE *out, const struct subset *sub, const char *path)
{
    for (int i = 0; i < sub->naggregates; i++) {
        const struct aggregate *a = &sub->aggregates[i];
        at(out, a->line, path);
        compare(out, sub, "sizeof(%s)%s", a->spelling, "", a->spelling, "size");
        at(out, a->line, path);
        compare(out, sub, "_Alignof(%s)%s", a->spelling, "", a->spelling, "alignment");
        for (int m = 0; m < a->nmembers; m++) {
            const struct member *mb = &a->members[m];
            char *name = join(a->spelling, ".", mb->path);
            at(out, mb->line, path);
            compare(out, sub, "offsetof(%s, %s)", a->spelling, mb->path, name, "offset");
            at(out, mb->line, path);
            compare(out, sub, "sizeof(((%s *)0)->%s)", a->spelling, mb->path, name, "size");
            if (mb->same_type) { /* else its type is one of the renamed ones, compared on its own */
                char *renamed = subset_spelling(sub, a->spelling);
                at(out, mb->line, path);
                fprintf(out,
                        "_Static_assert(__builtin_types_compatible_p(__typeof__(((%s *)0)->%s), "
                        "__typeof__(((%s *)0)->%s)), \"%s: type differs from cuda.h\");\n",
                        a->spelling, mb->path, renamed, mb->path, name);
                free(renamed);
            }
            free(name);
        }
    }
}

static void print_words(FILE *out, const struct subset *sub, char **words, int n, int renamed)
{
    for (int i = 0; i < n; i++) {
        char *word = renamed ? subset_spelling(sub, words[i]) : words[i];
        fprintf(out, "%s%s", i > 0 ? " " : "", word);
        if (renamed) free(word);
    }
}

static void check_aliases(FILE *out, const struct subset *sub, const char *path)
{
    for (int i = 0; i < sub->naliases; i++) {
        const struct alias *al = &sub->aliases[i];
        char *renamed = subset_spelling(sub, al->name);
        at(out, al->line, path);
        fprintf(out, "_Static_assert(__builtin_types_compatible_p(%s, ", al->name);
        print_words(out, sub, al->target, al->ntarget, 0);
        fprintf(out, ") && __builtin_types_compatible_p(%s, ", renamed);
        print_words(out, sub, al->target, al->ntarget, 1);
        fprintf(out, "), \"%s: names another type than in cuda.h\");\n", al->name);
        free(renamed);
    }
}

static void check_types(FILE *out, const struct subset *sub, const char *path)
{
    fputs("\n/* 3. The enums and structs under other names, compared with cuda.h's. */\n", out);
    fputs("#undef GPUSHARDS_CUDA_SUBSET_TYPES_H\n", out);
    for (int i = 0; i < sub->nrenamed; i++)
        fprintf(out, "#define %s " RENAME_PREFIX "%s\n", sub->renamed[i], sub->renamed[i]);
    fputs("#include \"cuda_subset_types.h\"\n", out);
    for (int i = 0; i < sub->nrenamed; i++) fprintf(out, "#undef %s\n", sub->renamed[i]);
    check_enums(out, sub, path);
    check_aggregates(out, sub, path);
    check_aliases(out, sub, path);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s cuda_subset.h cuda_subset_types.h OUT.c\n", argv[0]);
        return 2;
    }
    const char *decls_path = argv[1], *types_path = argv[2], *out_path = argv[3];
    struct subset sub = {0};
    struct source decls, types;
    load(&decls, decls_path);
    read_declarations(&sub, &decls);
    load(&types, types_path);
    read_types(&sub, &types);

    char *tmp = join(out_path, ".tmp", "");
    FILE *out = fopen(tmp, "w");
    if (out == NULL) fail(0, "cannot write %s", tmp);
    fprintf(out, "/* Generated by cuda-subset-checkgen from %s and %s: do not edit. */\n", decls_path, types_path);
    fputs("#include <stddef.h>\n#include <cuda.h>\n\n", out);
    check_names(out, &sub, decls_path);
    check_declarations(out);
    check_types(out, &sub, types_path);
    if (fclose(out) != 0 || rename(tmp, out_path) != 0) {
        remove(tmp);
        fail(0, "cannot write %s", out_path);
    }
    return 0;
}
