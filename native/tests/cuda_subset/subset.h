/* subset.h — what cuda_subset.h and cuda_subset_types.h declare, as
 * checkgen reads them (read.c) and checks them (checkgen.c). */
#ifndef GPUSHARDS_CHECKGEN_SUBSET_H
#define GPUSHARDS_CHECKGEN_SUBSET_H

#include "tokens.h"

/* A name of cuda_subset.h: it must be cuda.h's too. */
enum decl_kind { D_MACRO, D_TYPE, D_FUNCTION };
struct decl {
    enum decl_kind kind;
    char *name;
    int line;
};

struct enumerator {
    char *name;
    int line;
};

/* An enum of cuda_subset_types.h; spelling: "enum TAG", or the typedef
 * name of an untagged one (NULL when it has neither). */
struct enumeration {
    char *spelling;
    int line;
};

struct member {
    char *path;    /* "location", or "allocFlags.usage" in a nested struct */
    int same_type; /* named alike in both headers (none of its type's words renamed): compared */
    int line;
};

/* A struct or union of cuda_subset_types.h; spelling as for an enum. */
struct aggregate {
    char *spelling;
    int line;
    struct member *members;
    int nmembers;
};

/* "typedef TARGET NAME;", or the NAME of "typedef struct TAG {...} NAME;". */
struct alias {
    char *name;
    char **target; /* the words of the type it names */
    int ntarget;
    int line;
};

struct subset {
    struct decl *decls;
    int ndecls;
    char **renamed; /* every tag, typedef name and enumerator of cuda_subset_types.h */
    int nrenamed;
    struct enumerator *enumerators;
    int nenumerators;
    struct enumeration *enums;
    int nenums;
    struct aggregate *aggregates;
    int naggregates;
    struct alias *aliases;
    int naliases;
};

/* cuda_subset.h: its macros (not the GPUSHARDS_* ones), typedefs and prototypes. */
void read_declarations(struct subset *out, const struct source *s);
/* cuda_subset_types.h: its enums, structs and typedefs. */
void read_types(struct subset *out, const struct source *s);
/* The word (len bytes) is one cuda_subset_types.h defines. */
int is_renamed(const struct subset *sub, const char *word, int len);

#endif
